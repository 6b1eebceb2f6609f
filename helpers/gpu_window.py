"""One lent GPU window (15 minutes of device time, start and hand-back included) turned into committed rows.

``python3 -m helpers.gpu_measure --window --out $OUT`` on the GPU machine:

1. a self-check of seconds: the packages import, the GPU is named and picks the profile (an H100 ``gpu-h100``, an
   H200 ``gpu-h200``), the shipped 1-layer draft's decode and verify steps are captured as CUDA graphs and replayed
   with the eager logits, one row is written and read back. A failed basic check stops the window at once (a broken
   window costs a minute, not ten); a failed graph check is printed and the window goes on eager only;
2. the parts in ``gpu_measure.PARTS`` order, most valuable first, under a hard deadline (:data:`DEADLINE_S`, measuring
   stops cleanly between configurations; a part whose next step does not fit stops, and the later parts still
   measure what fits). Each part measures only what the checkout's committed
   ``results/<profile>/`` still lacks, so the next window resumes where this one stopped;
3. after every row, ``$OUT/window-<profile>.tar.gz`` (every result file of the profile) is rewritten, so even a
   command killed at its time limit brings back every finished row; ``$OUT/window-summary.json`` ends the run with
   the goals as measured (also printed).

Back on the CPU machine: ``python -m helpers.gpu_measure --unpack <files_at>/window-gpu-h100.tar.gz`` puts the rows
into ``results/gpu-h100/`` and prints the goals; commit, then render (``WORKBOOK_RESULTS_ONLY=1``).
"""
from __future__ import annotations

import json
import tarfile
import tempfile
import time
import traceback
from pathlib import Path

import torch

from helpers import paths
from helpers.budget import BudgetStore

DEADLINE_S = 510.0  # measuring; + the self-check, archive and summary inside a 600-s command
GPU_PROFILES = {"H100": "gpu-h100", "H200": "gpu-h200"}
SUMMARY = "window-summary.json"


def detect_profile(device_name: str) -> str:
    """The parameter profile of the GPU named ``device_name`` (``torch.cuda.get_device_name()``)."""
    for model, profile in GPU_PROFILES.items():
        if model in device_name:
            return profile
    raise SystemExit(f"no GPU profile for {device_name!r} (known: {', '.join(GPU_PROFILES)}); pass --profile "
                     "gpu-h100 or gpu-h200 to measure with the nearest one")


def archive_name(profile: str) -> str:
    return f"window-{profile}.tar.gz"


def write_archive(results: Path, out: Path, profile: str) -> Path:
    """``out/window-<profile>.tar.gz`` holding ``results/*.jsonl``, replaced atomically (a kill mid-write keeps the
    previous archive)."""
    out.mkdir(parents=True, exist_ok=True)
    target = out / archive_name(profile)
    partial = target.with_suffix(".partial")
    with tarfile.open(partial, "w:gz") as tar:
        for path in sorted(results.glob("*.jsonl")):
            tar.add(path, arcname=f"{profile}/{path.name}")
    partial.replace(target)
    return target


def unpack(archive: Path, results_root: Path | None = None) -> tuple[str, Path]:
    """Extract a window's archive into ``results/<profile>/`` of the checkout (only ``NN_*.jsonl`` files, each a
    superset of the committed one it replaces); returns (profile, folder)."""
    results_root = results_root or paths.REPO_ROOT / "results"
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if m.isfile()]
        profiles = {Path(m.name).parts[0] for m in members}
        bad = [m.name for m in members if len(Path(m.name).parts) != 2 or not Path(m.name).name.endswith(".jsonl")]
        if len(profiles) != 1 or bad:
            raise SystemExit(f"{archive} is not a window archive (one folder of .jsonl files): {bad or profiles}")
        profile = profiles.pop()
        paths.check_profile(profile)
        folder = results_root / profile
        folder.mkdir(parents=True, exist_ok=True)
        for member in members:
            data = tar.extractfile(member).read()
            (folder / Path(member.name).name).write_bytes(data)
    return profile, folder


# ------------------------------------------------------------------------------------------------ self-check


def self_check(params: dict, out: Path) -> dict:
    """Seconds-long checks before any measuring: ``{"ok", "graphs", "device_name", "notes", "seconds"}``."""
    start = time.monotonic()
    notes = []
    result = {"ok": False, "graphs": False, "device_name": None, "notes": notes}
    try:
        import pandas, scipy, transformers, yaml  # noqa: F401, E401 - the parts need them
        from helpers.hardware import device_info

        device = torch.device(params["device"])
        result["device_name"] = device_info(device)["device_name"]
        notes.append(f"torch {torch.__version__}, transformers {transformers.__version__}, {result['device_name']}")
        with tempfile.TemporaryDirectory() as folder:  # one row written and read back
            row_file = Path(folder) / "check.jsonl"
            row_file.write_text(json.dumps({"check": 1}) + "\n")
            assert json.loads(row_file.read_text())["check"] == 1
            out.mkdir(parents=True, exist_ok=True)
        result["ok"] = True
    except Exception as error:  # noqa: BLE001 - reported; the window stops
        notes.append(f"BASIC CHECK FAILED: {type(error).__name__}: {error}")
        traceback.print_exc()
        result["seconds"] = time.monotonic() - start
        return result
    try:
        result["graphs"] = _graph_check(device, notes)
    except Exception as error:  # noqa: BLE001 - reported; the window goes on eager only
        notes.append(f"GRAPH CHECK FAILED (measuring eager only): {type(error).__name__}: {error}")
        traceback.print_exc()
    try:
        result["step_kernels"] = _kernel_count(device, notes)
    except Exception as error:  # noqa: BLE001 - a diagnostic only: the window goes on
        notes.append(f"kernel count not measured: {type(error).__name__}: {error}")
    result["seconds"] = time.monotonic() - start
    return result


def _kernel_count(device: torch.device, notes: list) -> int | None:
    """The GPU kernels one eager decode step of the shipped 1-layer draft launches (the profiler's CUDA events),
    beside the model file's ``layer_kernels`` (the CPU count of kernel-launching ops per layer): a batch-1 step on a
    GPU is bound by its kernel count, so the window's rows are read with it. None without CUDA."""
    from helpers.experiments.nb09.step_profile import profiled_kernels
    from helpers.models import load_model
    from helpers.models.decoder import layer_kernels
    from helpers.models.runtime import minimal_view

    if device.type != "cuda":
        notes.append("kernel count: no CUDA here")
        return None
    model = minimal_view(load_model("cpu-pair/draft", device=device, dtype=torch.float32)[0])
    cache = model.new_cache(1, 64)
    token = torch.ones(1, 1, dtype=torch.long, device=device)
    with torch.inference_mode():
        model(torch.arange(1, 9, device=device)[None], cache)
        model(token, cache)  # warm: the first call may allocate or pick kernels
        kernels = len(profiled_kernels(lambda: model(token, cache), device))
    notes.append(f"kernel count: one eager decode step of the {model.config.num_layers}-layer draft launched {kernels} "
                 f"CUDA kernels and copies (the model file counts {layer_kernels(model.config)} kernel ops per layer on a CPU)")
    return kernels


def _graph_check(device: torch.device, notes: list) -> bool:
    """Capture the shipped 1-layer draft's one-token and 4-token steps and compare replays with eager logits."""
    from helpers.models import load_model
    from helpers.models.graphs import GraphedSteps
    from helpers.models.runtime import minimal_view

    model = minimal_view(load_model("cpu-pair/draft", device=device, dtype=torch.float32)[0])
    prompt = torch.arange(1, 9, device=device)[None]
    steps = GraphedSteps(model, 1, 256)
    eager = model.new_cache(1, 256)
    with torch.inference_mode():
        model(prompt, steps.cache), model(prompt, eager)
        for width in (1, 4, 1):
            block = torch.arange(10, 10 + width, device=device)[None]
            torch.testing.assert_close(steps(block), model(block, eager), rtol=1e-3, atol=1e-3)
    notes.append(f"graphs: {steps.captures} captured, {steps.replays} replayed, logits equal to eager"
                 + ("" if steps.capture else " (no CUDA here: the static step ran eagerly)"))
    return True


def goals(folder: Path) -> list[str]:
    """The GPU issues' goals as measured by the rows in ``folder``: see
    :func:`helpers.experiments.nb09.goals.goal_lines`."""
    from helpers.experiments.nb09.goals import goal_lines

    return goal_lines(folder)


# ------------------------------------------------------------------------------------------------ the window


def run_window(out: Path, profile: str | None = None, *, order, params_of, measure, dry_run: bool = False,
               deadline_s: float = DEADLINE_S, work: Path | None = None) -> dict:
    """Self-check, then the parts of ``order`` under ``deadline_s``; returns (and writes) the summary. The measuring
    comes in as functions (``helpers.gpu_measure.window`` passes its own): ``params_of(profile, dry_run)`` gives
    ``(params, eq5)``, ``measure(profile, work, order, dry_run, budget_s, modes=, archived=)`` measures the parts."""
    order = list(order)
    start = time.monotonic()
    out = Path(out).resolve()
    work = Path(work or tempfile.mkdtemp(prefix="workbook-window-")).resolve()
    if profile is None:
        profile = "gpu-h100" if dry_run else detect_profile(_cuda_name())
    params, _ = params_of(profile, dry_run)
    if str(params["device"]).startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(f"profile {profile!r} measures on a GPU, but torch {torch.__version__} sees no CUDA device "
                         "here; pass --dry-run for the CPU rehearsal")
    check = self_check(params, out)
    for note in check["notes"]:
        print(f"self-check: {note}", flush=True)
    summary = {"profile": params["profile"], "self_check": check, "parts_done": [], "stopped": None, "measured": 0}
    if check["ok"]:
        results = work / "results" / params["profile"]
        BudgetStore.after_row = lambda: write_archive(results, out, params["profile"])
        try:
            summary.update(measure(profile, work, order, dry_run, deadline_s - (time.monotonic() - start),
                                   modes=None if check["graphs"] else ["eager"], archived=True))
        finally:
            BudgetStore.after_row = None
        write_archive(results, out, params["profile"])
        summary["goals"] = goals(results)
        for line in summary["goals"]:
            print(f"goal: {line}", flush=True)
    summary["seconds"] = time.monotonic() - start
    (out / SUMMARY).write_text(json.dumps(summary, indent=1, default=str) + "\n")
    print(f"window: {summary['measured']} configuration(s) in {summary['seconds']:.0f} s; parts done "
          f"{summary['parts_done']}; " + ("complete" if summary["stopped"] is None and check["ok"] else
                                           "INCOMPLETE: the next window resumes from the committed rows"), flush=True)
    return summary


def _cuda_name() -> str:
    if not torch.cuda.is_available():
        raise SystemExit(f"--window measures on a GPU, but torch {torch.__version__} sees no CUDA device here; pass "
                         "--dry-run for the CPU rehearsal")
    return torch.cuda.get_device_name(0)
