"""Every GPU row of the notebooks, measured without Jupyter: ``python3 -m helpers.gpu_measure``.

The GPU machine has Python 3.12, torch 2.11, transformers 5.17, pandas, scipy, pyyaml and tqdm, but no Jupyter and
no network (the handout's architectures get random weights, and every such row says ``weights: random``; the
shipped CPU pair gives real acceptance rates). A lent window is 15 minutes of device time in all, a command at most
10 minutes, and at most 8 files of at most 16 MiB come back. So the GPU path is one command per window::

    python3 -m helpers.gpu_measure --window --out $OUT      # run(..., timeout_s=600), then give_back

:mod:`helpers.gpu_window` does the window: a self-check of seconds, then the parts below in priority order under
a hard deadline, resuming from the checkout's committed ``results/<profile>/``, with one archive of the rows and
a summary of the goals under ``$OUT``. Back here::

    python -m helpers.gpu_measure --unpack <files_at>/window-gpu-h100.tar.gz   # rows into results/gpu-h100/
    git add results/gpu-h100 && git commit -m "GPU rows, H100: ..."
    WORKBOOK_RESULTS_ONLY=1 python -m helpers.run_all --profile gpu-h100        # render (no GPU needed)

Rehearse on the CPU with ``--window --dry-run --out /tmp/w`` (the CPU profile's small models, a few tokens, one to
two minutes with inductor's first compiles; the tests do it). Without ``--window``, ``--profile P --out DIR --only PART ...`` runs chosen parts.

Parts, in the window's order (:data:`PARTS`): ``01`` notebook 01's check that the KV-cache formula equals the bytes a
cache holds on the GPU (seconds; notebook 01 renders only with it); ``decode`` each handout model's decode step in
every mode of the model file (:mod:`helpers.experiments.nb09.decode_modes`); ``eq5`` T_T, T_D, T_V(gamma) of each handout pair in bf16, random weights,
eager, as CUDA graphs and with the compiled layer inside them (``decode: eager | graphs | compiled``; graphs rows
record ``graph_replays``), with Eq. 5's predicted speedup over a
grid of alpha (labelled a prediction) and the target's weight bytes (the HBM roofline); ``peers`` transformers'
eager and compiled static-cache decoding of the 8B targets at the decode part's shapes; ``06`` §4.2 forward time vs batch (CUDA events) and the verify
step; ``graphs`` the CPU pair's
terms eager and as graphs, then its speculative decoding end to end with graphs against AR with graphs (real alpha,
every output checked against AR); ``profile`` where a decode step's time goes (kernels, their summed time
and the idle gaps between them in one graph replay, by kernel family: :mod:`helpers.experiments.nb09.step_profile`);
``02`` §1.3 generation sweeps; ``03`` §2.1 with and without the KV cache; ``12``
notebook 12's depth at Qwen3-0.6B size and the draft family; ``07`` notebook 07's sweep, per-source and sampled runs;
``09`` notebook 09's cost terms, gamma sweep and batched points; ``13`` notebook 13's drafters; ``10`` notebook 10's
trees and lookup with the CPU pair; ``11`` notebook 11's self-speculation sweep over context and batch. Every part asks the result store first and loads no model
for configurations already measured. The CUDA graphs are captured explicitly
(:class:`helpers.models.graphs.GraphedSteps`); the ``compiled`` mode compiles the decoder layer with inductor once per
model shape (regional compilation) inside them; ``--modes eager graphs`` leaves it out.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

from helpers import gpu_window, paths
from helpers.experiments.packages import declared_parts
from helpers.experiments.nb09 import decode_modes, step_profile
from helpers.experiments.gpu_costs import DECODE_MODES, WindowSettings
from helpers.budget import Budget, BudgetStore
from helpers.experiments.common import BudgetExhausted

# the window's priority order over the parts the notebook packages declare (helpers.experiments.packages)
PARTS = ("01", "decode", "eq5", "peers", "06", "graphs", "profile", "02", "03", "12", "07", "09", "13", "10", "11", "14")
PART_START_S = 20.0  # what a part's first step is assumed to take (a model load and one configuration)
MAX_FILES = 8
MAX_FILE_BYTES = 16 * 2**20

# --dry-run: params/dry-run.yaml over the CPU profile, and these eq5/graphs settings
DRY_EQ5 = {"pairs": [["cpu/Qwen3-8B", "cpu/Qwen3-0.6B"]], "gammas": [2, 3], "context": 8, "repeats": 1,
           "dtype": "float32",
           "cpu_pairs": [["cpu-pair/target", "cpu-pair/draft"]],
           "profile_models": {"cpu/Qwen3-8B": [1, 3], "cpu-pair/target": [1, 3]}}


# ------------------------------------------------------------------------------------------------------ parts

def run_part(part: str, params: dict, store, eq5: WindowSettings) -> None:
    """Measure a part's missing rows by its declaration (:class:`helpers.experiments.packages.Part`)."""
    declared_parts()[part].measure(params, store, eq5)


def part_files(parts) -> list[str]:
    """The result files the parts write, each once (decode and peers share one)."""
    declared = declared_parts()
    return list(dict.fromkeys(name for part in parts for name in declared[part].files))


# ------------------------------------------------------------------------------------------------------ driver


def profile_params(profile: str, dry_run: bool) -> tuple[dict, WindowSettings]:
    """``(notebook parameters, eq5/graphs settings)``: ``params/<profile>.yaml``; with ``dry_run`` the CPU profile's
    small models on the CPU shrunk by ``params/dry-run.yaml``, under the profile name ``<profile>-dryrun``."""
    from helpers.run_all import load_params

    eq5 = WindowSettings(profile_models=step_profile.PROFILED, decode=decode_modes.settings(dry_run))
    if not dry_run:  # as papermill runs a notebook: its defaults (the CPU profile), overridden by the profile's file
        return {**load_params("cpu"), **load_params(profile)}, eq5
    params = {**load_params("cpu"), **load_params("dry-run"), "profile": f"{profile}-dryrun", "device": "cpu"}
    params["sd_dtype"] = "float32"
    return params, replace(eq5, **DRY_EQ5)


def seed_outputs(profile: str, out: Path, files: list[str]) -> None:
    """Start ``out/results/<profile>/`` from the checkout's committed rows of ``files`` (the resume)."""
    source = paths.REPO_ROOT / "results" / profile
    target = out / "results" / profile
    target.mkdir(parents=True, exist_ok=True)
    for name in files:
        src, dst = source / f"{name}.jsonl", target / f"{name}.jsonl"
        if src.exists() and not dst.exists() and src.resolve() != dst.resolve():
            shutil.copyfile(src, dst)


def check_outputs(out: Path, profile: str, files: list[str]) -> list[str]:
    """Warnings about what would not come back from the GPU machine (more than 8 files, a file over 16 MiB)."""
    found = [f for f in (out / "results" / profile / f"{name}.jsonl" for name in files) if f.exists()]
    warnings = [f"{f.name}: {f.stat().st_size / 2**20:.1f} MiB > 16 MiB" for f in found
                if f.stat().st_size > MAX_FILE_BYTES]
    if len(found) > MAX_FILES:
        warnings.append(f"{len(found)} result files > {MAX_FILES}: run fewer parts per command")
    return warnings


def run(profile: str, out: Path, only=None, dry_run: bool = False, budget_s: float | None = 540.0, *,
        modes=None, archived: bool = False) -> dict:
    """Measure the parts ``only`` (default: all, in :data:`PARTS` order) into ``out``; returns a summary.
    ``modes``: the decode modes of parts eq5 and graphs (default all of :data:`DECODE_MODES`; part graphs leaves
    out ``compiled``)
    ``archived``: the files travel in one archive (the window), so their count is no limit."""
    parts = list(only or PARTS)
    unknown = [part for part in parts if part not in PARTS]
    if unknown:
        raise SystemExit(f"unknown part(s) {unknown}; choose from {', '.join(PARTS)}")
    params, eq5 = profile_params(profile, dry_run)
    if modes is not None:
        unknown = [m for m in modes if m not in DECODE_MODES]
        if unknown:
            raise SystemExit(f"unknown decode mode(s) {unknown}; choose from {', '.join(DECODE_MODES)}")
        eq5 = replace(eq5, modes=list(modes))
    if str(params["device"]).startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(f"profile {profile!r} measures on {params['device']!r}, but torch {torch.__version__} sees no "
                         "CUDA device here. Run it on the GPU machine, or pass --dry-run for the CPU rehearsal.")
    out = Path(out).resolve()
    previous = {key: os.environ.get(key) for key in ("WORKBOOK_OUTPUT_ROOT", "WORKBOOK_RUN_ID")}
    os.environ["WORKBOOK_OUTPUT_ROOT"] = str(out)  # helpers.paths puts results/ under it
    # every row of this command records one run id (as helpers.run_all's rows do), unless a caller set one
    os.environ["WORKBOOK_RUN_ID"] = previous["WORKBOOK_RUN_ID"] or (
        f"{params['profile']}-window-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
    try:
        return _run(params, eq5, parts, out, dry_run, budget_s, archived)
    finally:
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _run(params: dict, eq5: WindowSettings, parts: list, out: Path, dry_run: bool, budget_s: float | None,
         archived: bool) -> dict:
    files = part_files(parts)
    if not dry_run:
        seed_outputs(params["profile"], out, files)
    BudgetStore.budget = Budget(budget_s, margin=5.0 if dry_run else 30.0, part_start=0.0 if dry_run else PART_START_S)
    BudgetStore.measured = 0

    def store(notebook):
        return BudgetStore(params["profile"], notebook)
    store.budget = BudgetStore.budget

    done, stops = [], []
    start = time.monotonic()
    for part in parts:  # a part that runs out of budget stops; the later parts may still have steps that fit
        print(f"== part {part} ({time.monotonic() - start:.0f} s)", flush=True)
        BudgetStore.budget.start_part()
        try:
            run_part(part, params, store, eq5)
            done.append(part)
        except BudgetExhausted as stop:
            stops.append(str(stop))
            print(stop, flush=True)
    stopped = "\n".join(stops) or None
    warnings = [] if archived else check_outputs(out, params["profile"], files)
    for warning in warnings:
        print("WARNING:", warning, flush=True)
    summary = {"profile": params["profile"], "out": str(out / "results" / params["profile"]), "parts_done": done,
               "stopped": stopped, "measured": BudgetStore.measured, "seconds": time.monotonic() - start,
               "warnings": warnings}
    print(f"done: parts {done}; {summary['measured']} configuration(s) measured in {summary['seconds']:.0f} s; "
          + ("complete" if stopped is None else "INCOMPLETE, run again"), flush=True)
    return summary


def window(out: Path, profile: str | None = None, *, order=PARTS, **options) -> dict:
    """The lent GPU window over this module's parts: :func:`helpers.gpu_window.run_window` (self-check, then the
    parts of ``order`` under a deadline, an archive and a summary under ``out``); ``options``: ``dry_run``,
    ``deadline_s``, ``work``."""
    return gpu_window.run_window(out, profile, order=order, params_of=profile_params, measure=run, **options)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m helpers.gpu_measure", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Measure the notebooks' GPU rows into results/<profile>/NN_*.jsonl (no Jupyter needed).",
        epilog="In a lent GPU window (at most 8 files of at most 16 MiB come back per command):\n"
               "  python3 -m helpers.gpu_measure --window --out $OUT        (self-check, then the most valuable\n"
               "      missing rows until the deadline; one archive + a summary under $OUT)\n"
               "then here: python -m helpers.gpu_measure --unpack FILES_AT/window-<profile>.tar.gz, and commit.\n"
               "Rehearse on the CPU: --window --dry-run --out /tmp/w (tiny shapes, one to two minutes).")
    parser.add_argument("--window", action="store_true",
                        help="the GPU window: self-check, then parts in priority order under --deadline-s")
    parser.add_argument("--unpack", type=Path, metavar="ARCHIVE",
                        help="put a window's archive into results/<profile>/ of this checkout and print the goals")
    parser.add_argument("--profile", help="params/<profile>.yaml: gpu-h100 or gpu-h200 (--window: from the GPU)")
    parser.add_argument("--out", type=Path, help="output root: rows go to OUT/results/<profile>/ (GPU: $OUT)")
    parser.add_argument("--only", nargs="+", metavar="PART", help=f"parts to run, of {', '.join(PARTS)}")
    parser.add_argument("--dry-run", action="store_true",
                        help="the same code on the CPU with tiny shapes (profile <profile>-dryrun), one to two minutes")
    parser.add_argument("--budget-s", type=float, default=540.0,
                        help="stop cleanly before a measurement that would end later than this (default 540 s)")
    parser.add_argument("--deadline-s", type=float, default=None,
                        help="--window: seconds of measuring (default 510: inside a 600-s command)")
    parser.add_argument("--modes", nargs="+", metavar="MODE",
                        help=f"decode modes of parts eq5/graphs, of {', '.join(DECODE_MODES)} (default all)")
    args = parser.parse_args(argv)

    if args.unpack:
        profile, folder = gpu_window.unpack(args.unpack)
        print(f"rows of {profile} in {folder}; commit them, then render: WORKBOOK_RESULTS_ONLY=1 "
              f"python -m helpers.run_all --profile {profile}")
        for line in gpu_window.goals(folder):
            print(f"goal: {line}")
        return 0
    if args.out is None:
        parser.error("--out is required (on the GPU machine: --out $OUT)")
    if args.window:
        summary = window(args.out, args.profile, dry_run=args.dry_run,
                         deadline_s=args.deadline_s or gpu_window.DEADLINE_S)
        return 0 if summary["self_check"]["ok"] else 2
    if not args.profile:
        parser.error("--profile is required without --window")
    run(args.profile, args.out, args.only, args.dry_run, args.budget_s, modes=args.modes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
