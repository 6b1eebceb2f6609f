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

Rehearse on the CPU with ``--window --dry-run --out /tmp/w`` (the CPU profile's small models, a few tokens, under a
minute; the tests do it). Without ``--window``, ``--profile P --out DIR --only PART ...`` runs chosen parts.

Parts, in the window's order (:data:`PARTS`): ``06`` §4.2 forward time vs batch (CUDA
events) and the verify step; ``eq5`` T_T, T_D, T_V(gamma) of each handout pair in bf16, random weights, eager and as
CUDA graphs (``decode: eager | graphs``; graphs rows record ``graph_replays``), with Eq. 5's predicted speedup over a
grid of alpha (labelled a prediction) and the target's weight bytes (the HBM roofline); ``graphs`` the CPU pair's
terms eager and as graphs, then its speculative decoding end to end with graphs against AR with graphs (real alpha,
every output checked against AR); ``02`` §1.3 generation sweeps; ``03`` §2.1 with and without the KV cache; ``12``
notebook 12's depth at Qwen3-0.6B size and the draft family; ``07`` notebook 07's sweep, per-source and sampled runs;
``09`` notebook 09's cost terms, gamma sweep and batched points. Every part asks the result store first and loads
no model for configurations already measured. The CUDA graphs are captured explicitly
(:class:`helpers.models.graphs.GraphedSteps`): seconds, no inductor compile; ``--modes eager graphs inductor`` adds
``torch.compile(mode="reduce-overhead")`` rows, whose ``cudagraph_skips`` say whether its graphs ran.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

import torch
import yaml

from helpers import models, paths
from helpers.results import ResultStore, free_memory, run_metadata

PARTS = ("06", "eq5", "graphs", "02", "03", "12", "07", "09")  # the window's priority order
PART_FILES = {  # the result files each part writes (at most 8 come back per command)
    "02": ["02_generation_benchmarks"],
    "03": ["03_kv_cache_benchmarks"],
    "06": ["06_forward_pass_scaling"],
    "07": ["07_speculative_decoding", "07_speculative_decoding_by_source", "07_speculative_decoding_sampled"],
    "09": ["09_speedup_analysis"],
    "eq5": ["09_handout_costs"],
    "graphs": ["09_compiled_decode"],
    "12": ["12_draft_design"],
}
MAX_FILES = 8
MAX_FILE_BYTES = 16 * 2**20

# Settings of the parts no notebook has a parameter for yet (eq5, graphs): the handout's pairs and lookaheads.
HANDOUT_PAIRS = [["Qwen/Qwen3-8B", "Qwen/Qwen3-1.7B"], ["Qwen/Qwen3-8B", "Qwen/Qwen3-0.6B"],
                 ["meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.2-1B"]]
EQ5_GAMMAS = [2, 3, 5, 7]
EQ5_CONTEXT = 256  # cached tokens before the timed forward
EQ5_REPEATS = 30
EQ5_ALPHAS = [0.5, 0.6, 0.7, 0.8, 0.9]
EQ5_DTYPE = "bfloat16"  # the handout pairs; the CPU pair keeps sd_dtype (float32: greedy outputs stay exact)  # the grid of Eq. 5's *predicted* speedup
CPU_PAIRS = [["cpu-pair/target", "cpu-pair/draft"], ["cpu-pair/target", "cpu-pair/draft-2l"]]

# --dry-run: the same code on the CPU with the CPU profile's small models, shrunk to a few tokens
DRY_OVERRIDES = {
    "gen_input_exponents": [0, 1, 2, 3], "gen_output_exponents": [0, 1, 2], "gen_input_new_tokens": 2,
    "gen_output_input_len": 4, "gen_compare_input_len": 4, "gen_compare_new_tokens": 2, "gen_warmup": 0,
    "gen_repeats": 1, "gen_batch_size": 2, "gen_models": ["cpu/Qwen3-1.7B"], "gen_max_seconds_per_batch": 0.0,
    "kvb_long_prompt_tokens": 16, "kvb_max_new_tokens": 4, "kvb_no_cache_cap": 4, "kvb_no_cache_cap_long": 4,
    "kvb_repeats": 1, "kvb_max_repeats": 1, "kvb_cold_repeats": 1,
    "fp_seq_len": 8, "fp_batch_sizes": [1, 2], "fp_warmup": 0, "fp_trials": 1, "fp_verify_prefix": 8,
    "fp_verify_tokens": [1, 3],
    "sd_pairs": [["cpu-pair/target", "cpu-pair/draft"]], "sd_gammas": [1, 2, 3, 5, 7], "sd_prompt_count": 2,
    "sd_source_prompt_count": 4, "sd_max_new_tokens": 4, "sd_peer_gammas": [2], "sd_repeats": 1,
    "analysis_gammas": [1, 2], "analysis_prompt_count": 1, "analysis_prompt_len": 8, "analysis_new_tokens": 4,
    "analysis_timing_repeats": 1, "analysis_generation_repeats": 1, "analysis_batch_sizes": [1, 2],
    "analysis_batch_new_tokens": 4, "analysis_batch_repeats": 1,
    "design_drafts": ["cpu-pair/draft-1x240", "cpu-pair/draft-2x192", "cpu-pair/draft-2x192-shared",
                      "cpu-pair/draft-2l"], "design_gammas": [1, 2], "design_prompts": 2,
    "design_new_tokens": 4, "design_repeats": 1, "scale_model": "cpu/Qwen3-0.6B", "scale_depths": [2, 1],
    "scale_repeats": 1,
}
DRY_EQ5 = {"pairs": [["cpu/Qwen3-8B", "cpu/Qwen3-0.6B"]], "gammas": [2, 3], "context": 8, "repeats": 1,
           "dtype": "float32",
           "cpu_pairs": [["cpu-pair/target", "cpu-pair/draft"]]}


class BudgetExhausted(Exception):
    """Raised before a measurement that would not finish inside ``--budget-s``."""


class Budget:
    """Seconds left for this command; a new measurement starts only when ``margin`` plus twice the longest one so
    far still fit (the next length of a sweep costs about twice the last)."""

    def __init__(self, seconds: float | None, margin: float = 30.0):
        self.deadline = None if not seconds else time.monotonic() + seconds
        self.margin = margin
        self.longest = 0.0

    def left(self) -> float:
        return float("inf") if self.deadline is None else self.deadline - time.monotonic()

    def check(self, what: str) -> None:
        need = self.margin + 2 * self.longest
        if self.left() < need:
            raise BudgetExhausted(f"budget: stopped before {what} ({self.left():.0f} s left, {need:.0f} s needed); "
                                  "run the same command again to resume")

    def took(self, seconds: float) -> None:
        self.longest = max(self.longest, seconds)


class BudgetStore(ResultStore):
    """A :class:`ResultStore` that checks the budget before measuring a configuration it does not hold yet."""

    budget = Budget(None)
    measured = 0
    after_row = None  # called after every row written (the window refreshes its archive: a kill loses no row)

    def append(self, config, metrics, meta, status="ok"):
        row = super().append(config, metrics, meta, status)
        if BudgetStore.after_row is not None:
            BudgetStore.after_row()
        return row

    def run(self, config, fn, *, meta, rerun=False):
        if not rerun and self.has(config):
            return super().run(config, fn, meta=meta)
        self.budget.check(f"{self.notebook}: {_short(config)}")
        start = time.monotonic()
        row = super().run(config, fn, meta=meta, rerun=rerun)
        self.budget.took(time.monotonic() - start)
        BudgetStore.measured += 1
        print(f"  measured {self.notebook}: {_short(config)} ({time.monotonic() - start:.1f} s)", flush=True)
        return row


def _short(config: dict) -> str:
    keep = {k: v for k, v in config.items() if k not in ("prompt_ids",) and not isinstance(v, (list, dict))}
    return ", ".join(f"{k}={v}" for k, v in list(keep.items())[:8])


def _label(name: str, weights: str | None) -> str:
    """The weights label a model will get from :func:`helpers.generation.loading.load_for_sweep` (without loading)."""
    if name.startswith(models.ANALOG_PREFIX):
        return "random"
    if name.startswith(models.PAIR_PREFIX) or weights == "cpu-pair":
        return "cpu-pair"
    return weights or "pretrained"


# ------------------------------------------------------------------------------------------------------ parts


def part_02(p: dict, store) -> None:
    """Notebook 02, cells 3, 5, 10, 13: the same configs (keys and values) and sweep functions."""
    from helpers.generation import sweeps as gb
    from helpers.generation.loading import load_for_sweep

    device = torch.device(p["device"])
    if p["gen_threads"] > 0:
        torch.set_num_threads(p["gen_threads"])
    threads = torch.get_num_threads()
    dtype = getattr(torch, p["gen_dtype"])
    cap = p["gen_max_seconds_per_batch"] if p["gen_max_seconds_per_batch"] > 0 else None
    store = store("02_generation_benchmarks")
    base = {"model": p["gen_sweep_model"], "weights": _label(p["gen_sweep_model"], p["gen_weights"]),
            "dtype": p["gen_dtype"], "device": device.type, "threads": threads, "batch_size": p["gen_batch_size"],
            "warmup": p["gen_warmup"], "repeats": p["gen_repeats"]}
    input_configs = [{**base, "input_len": 2**n, "new_tokens": p["gen_input_new_tokens"]}
                     for n in sorted(p["gen_input_exponents"])]
    output_configs = [{**base, "input_len": p["gen_output_input_len"], "new_tokens": 2**n}
                      for n in sorted(p["gen_output_exponents"])]
    if not all(store.has(c) for c in input_configs + output_configs):
        store.budget.check(f"loading {p['gen_sweep_model']}")
        sweep = load_for_sweep(p["gen_sweep_model"], p["gen_weights"], device, dtype)
        for configs, desc in ((input_configs, "input lengths"), (output_configs, "output lengths")):
            gb.run_capped_generation_sweep(store, sweep.model, configs, meta=sweep.meta, warmup=p["gen_warmup"],
                                           repeats=p["gen_repeats"], max_seconds_per_batch=cap, device=device,
                                           desc=desc)
        del sweep
        free_memory()
    for name in p["gen_models"]:
        config = {**base, "model": name, "weights": _label(name, p["gen_weights"]),
                  "input_len": p["gen_compare_input_len"], "new_tokens": p["gen_compare_new_tokens"]}
        if store.has(config):
            continue
        store.budget.check(f"loading {name}")
        loaded = load_for_sweep(name, p["gen_weights"], device, dtype)
        gb.run_generation_sweep(store, loaded.model, [config], meta=loaded.meta, warmup=p["gen_warmup"],
                                repeats=p["gen_repeats"], device=device, progress=False)
        del loaded
        free_memory()


def part_03(p: dict, store) -> None:
    """Notebook 03, cells 3, 5, 9, 19 (cold start, the four paired sweeps, the matmul share)."""
    from helpers.generation.loading import load_for_sweep
    from helpers.generation.sweeps import generate_exact
    from helpers.kv_cache import sweep as kv_sweep

    dev = torch.device(p["device"])
    if dev.type == "cpu" and p["kvb_threads"]:
        torch.set_num_threads(p["kvb_threads"])
    dtype = getattr(torch, p["kvb_dtype"])
    lengths = kv_sweep.output_lengths(p["kvb_max_new_tokens"])
    store = store("03_kv_cache_benchmarks")
    settings = {"baseline": (p["kvb_baseline_model"], False, p["kvb_no_cache_cap"]),
                "long prompt": (p["kvb_baseline_model"], True, p["kvb_no_cache_cap_long"]),
                "smaller model": (p["kvb_small_model"], False, p["kvb_no_cache_cap"]),
                "older model": (p["kvb_old_model"], False, p["kvb_no_cache_cap"])}
    for model_id in dict.fromkeys(m for m, _, _ in settings.values()):
        loaded = None

        def model():
            nonlocal loaded
            if loaded is None:
                store.budget.check(f"loading {model_id}")
                loaded = load_for_sweep(model_id, p["kvb_weights"], dev, dtype)
            return loaded

        own = None if _label(model_id, p["kvb_weights"]) == "random" else model().tokenizer
        tokenizer, fold, note = kv_sweep.sweep_tokenizer(own, models.model_config(model_id).vocab_size)
        ids = {False: kv_sweep.prompt_ids(tokenizer, text=p["kvb_short_prompt"], vocab_size=fold).to(dev),
               True: kv_sweep.prompt_ids(tokenizer, num_tokens=p["kvb_long_prompt_tokens"], vocab_size=fold).to(dev)}

        def meta():
            return {**run_metadata(model_id=model_id, weights=model().label, dtype=p["kvb_dtype"], device=dev,
                                   seed=0), "tokenizer": note}

        if model_id == p["kvb_baseline_model"]:
            config = {"experiment": "cold_start", "model": model_id, "prompt": p["kvb_short_prompt"],
                      "dtype": p["kvb_dtype"], "repeats": p["kvb_cold_repeats"]}
            if not store.has(config):
                m = model().model
                store.run(config, lambda: kv_sweep.cold_start(
                    lambda c: generate_exact(m, ids[False], 1, use_cache=c), repeats=p["kvb_cold_repeats"],
                    device=dev), meta={k: v for k, v in meta().items() if k != "tokenizer"})
        for setting, (setting_model, long, cap) in settings.items():
            if setting_model != model_id:
                continue
            config = {"experiment": "sweep", "setting": setting, "model": model_id,
                      "prompt_tokens": ids[long].shape[1], "max_new_tokens": p["kvb_max_new_tokens"],
                      "no_cache_cap": cap, "repeats": p["kvb_repeats"], "max_repeats": p["kvb_max_repeats"],
                      "max_spread": p["kvb_max_spread"], "dtype": p["kvb_dtype"]}
            if store.has(config):
                continue
            m, prompt = model().model, ids[long]
            modes = {"with cache": lambda n: generate_exact(m, prompt, n, use_cache=True),
                     "without cache": lambda n: generate_exact(m, prompt, n, use_cache=False)}
            store.run(config, lambda: {"rows": kv_sweep.paired_sweep(
                modes, lengths, repeats=p["kvb_repeats"], max_repeats=p["kvb_max_repeats"],
                max_spread=p["kvb_max_spread"], device=dev, caps={"without cache": cap})}, meta=meta())
        if model_id in (p["kvb_baseline_model"], p["kvb_old_model"]):
            config = {"experiment": "matmul_share", "model": model_id, "dtype": p["kvb_dtype"], "new_tokens": 16}
            if not store.has(config):
                m = model().model
                store.run(config, lambda: {"share": kv_sweep.matmul_time_share(
                    lambda: generate_exact(m, ids[False], 16, use_cache=True))},
                    meta={k: v for k, v in meta().items() if k != "tokenizer"})
        loaded = None
        free_memory()


def part_06(p: dict, store) -> None:
    """Notebook 06, cells 5 and 9: forward time vs batch (CUDA events on a GPU) and the verify step."""
    from helpers.generation import sweeps as gb
    from helpers.generation.loading import load_for_sweep

    device = torch.device(p["device"])
    if p["fp_threads"] > 0:
        torch.set_num_threads(p["fp_threads"])
    dtype = getattr(torch, p["fp_dtype"])
    cuda_events = device.type == "cuda"
    store = store("06_forward_pass_scaling")
    configs = [{"measure": "forward", "model": p["fp_model"], "weights": _label(p["fp_model"], p["fp_weights"]),
                "dtype": p["fp_dtype"], "device": device.type, "batch_size": b, "seq_len": p["fp_seq_len"],
                "warmup": p["fp_warmup"], "trials": p["fp_trials"]} for b in p["fp_batch_sizes"]]
    if not all(store.has(c) for c in configs):
        store.budget.check(f"loading {p['fp_model']}")
        loaded = load_for_sweep(p["fp_model"], p["fp_weights"], device, dtype)
        gb.run_forward_sweep(store, loaded.model, configs, meta=loaded.meta, warmup=p["fp_warmup"],
                             repeats=p["fp_trials"], device=device, cuda_events=cuda_events)
        del loaded
        free_memory()
    vconfigs = [{"measure": "verify", "model": p["fp_verify_model"],
                 "weights": _label(p["fp_verify_model"], p["fp_weights"]), "dtype": p["fp_dtype"],
                 "device": device.type, "prefix_len": p["fp_verify_prefix"], "new_tokens": k, "warmup": p["fp_warmup"],
                 "trials": p["fp_trials"]} for k in p["fp_verify_tokens"]]
    if not all(store.has(c) for c in vconfigs):
        store.budget.check(f"loading {p['fp_verify_model']}")
        vloaded = load_for_sweep(p["fp_verify_model"], p["fp_weights"], device, dtype)
        for c in vconfigs:
            store.run(c, lambda c=c: gb.measure_verify(
                vloaded.model, prefix_len=c["prefix_len"], new_tokens=c["new_tokens"], warmup=p["fp_warmup"] + 2,
                repeats=max(4 * p["fp_trials"], 20), device=device, cuda_events=cuda_events), meta=vloaded.meta)
        del vloaded
        free_memory()


def _sd_setup(p: dict):
    from helpers.prompts import load_prompts, select_prompts

    prompt_rows = select_prompts(load_prompts(p["sd_prompt_profile"]), p["sd_prompt_count"])
    source_rows = select_prompts(load_prompts(p["sd_prompt_profile"]), p["sd_source_prompt_count"])
    common = dict(temperature=p["sd_temperature"], max_new_tokens=p["sd_max_new_tokens"], repeats=p["sd_repeats"],
                  dtype=p["sd_dtype"], device=p["device"])
    return prompt_rows, source_rows, common


def part_07(p: dict, store) -> None:
    """Notebook 07, cells 3, 10, 18, 23: the sweep per pair, the per-source study and the sampled run of the best
    configuration (chosen from the sweep's rows as the notebook does)."""
    from helpers.models import load_model
    from helpers.prompts import encode_prompts
    from helpers.specdec.costs import measure_costs, median_length_case
    from helpers.specdec.sweeps import gamma_rows, measure_config, measure_pair, select_sweep, sweep_configs

    handout_gammas = (2, 3, 5, 7)
    torch.manual_seed(p["sd_seed"])
    if p["device"] == "cpu" and p["sd_threads"] > 0:
        torch.set_num_threads(p["sd_threads"])
    dtype = getattr(torch, p["sd_dtype"])
    prompt_rows, source_rows, common = _sd_setup(p)
    prompt_ids = [row["id"] for row in prompt_rows]
    main = store("07_speculative_decoding")
    loaded = {}

    def load(name):
        if name not in loaded:
            main.budget.check(f"loading {name}")
            loaded[name] = load_model(name, device=p["device"], dtype=dtype)
        return loaded[name]

    pair_configs = {(t, d): sweep_configs(t, d, p["sd_gammas"], prompt_ids=prompt_ids, **common)
                    for t, d in p["sd_pairs"]}
    for (target_name, draft_name), configs in pair_configs.items():
        if all(main.has(c) for c in configs):
            continue
        main.budget.check(f"07 pair {target_name} / {draft_name}")
        start = time.monotonic()
        (target, tokenizer), (draft, _) = load(target_name), load(draft_name)
        cases = encode_prompts(tokenizer, prompt_rows, target.device)
        cost_case = median_length_case(cases)
        costs = measure_costs(target, draft, cost_case["input_ids"], p["sd_gammas"], repeats=30)
        rows = measure_pair(target, draft, cases, p["sd_gammas"], p["sd_max_new_tokens"], repeats=p["sd_repeats"],
                            temperature=p["sd_temperature"], seed=p["sd_seed"], peer=p["sd_peer"],
                            peer_gammas=p["sd_peer_gammas"], progress=True)
        meta = run_metadata(model_id=target_name, weights=target.weights_label, dtype=p["sd_dtype"],
                            device=p["device"], seed=p["sd_seed"], draft_id=draft_name,
                            draft_weights=draft.weights_label)
        for config, row in zip(configs, gamma_rows(rows, costs)):
            row.update(handout_gamma=config["gamma"] in handout_gammas, cost_prompt=cost_case["id"])
            main.append(config, {k: v for k, v in row.items() if k not in config}, meta)
        main.budget.took(time.monotonic() - start)
        print(f"  measured 07 pair {target_name} / {draft_name}: c = {costs['T_D'] / costs['T_T']:.3f}", flush=True)
    frame = select_sweep(main.frame(), [c for configs in pair_configs.values() for c in configs])
    best = frame.loc[frame["speedup"].idxmax()]
    best_target, best_draft = str(best["target"]), str(best["draft"])
    best_meta = None
    for notebook, rows, temperature in (("07_speculative_decoding_by_source", source_rows, p["sd_temperature"]),
                                        ("07_speculative_decoding_sampled", prompt_rows, p["sd_sample_temperature"])):
        part_store = store(notebook)
        config = sweep_configs(best_target, best_draft, [int(best["gamma"])], prompt_ids=[r["id"] for r in rows],
                               **{**common, "temperature": temperature})[0]
        if part_store.has(config):
            continue
        (target, tokenizer), (draft, _) = load(best_target), load(best_draft)
        best_meta = best_meta or run_metadata(model_id=best_target, weights=target.weights_label,
                                              dtype=p["sd_dtype"], device=p["device"], seed=p["sd_seed"],
                                              draft_id=best_draft)
        part_store.run(config, lambda: measure_config(
            target, draft, encode_prompts(tokenizer, rows, target.device), int(best["gamma"]),
            p["sd_max_new_tokens"], exclude=config, repeats=p["sd_repeats"], temperature=temperature,
            seed=p["sd_seed"], progress=True), meta=best_meta)
    loaded.clear()
    free_memory()


def part_09(p: dict, store) -> None:
    """Notebook 09, cells 3, 5, 7, 21: cost terms, the gamma sweep and the batched points of its pair."""
    from helpers.models import load_model
    from helpers.prompts import heldout_source_prompts
    from helpers.specdec.costs import batched_point, measure_costs, speedup_sweep

    device = p["device"]
    torch.manual_seed(0)
    if device == "cpu" and p["analysis_threads"] > 0:
        torch.set_num_threads(p["analysis_threads"])
    dtype = getattr(torch, p["analysis_dtype"])
    store = store("09_speedup_analysis")
    pair = {"target": p["analysis_target"], "draft": p["analysis_draft"], "dtype": p["analysis_dtype"],
            "device": device}
    configs = {"costs": {"kind": "costs", **pair, "context_len": p["analysis_prompt_len"],
                         "gammas": p["analysis_gammas"]},
               "sweep": {"kind": "gamma_sweep", **pair, "prompts": p["analysis_prompt_count"],
                         "prompt_len": p["analysis_prompt_len"], "new_tokens": p["analysis_new_tokens"],
                         "gamma_list": p["analysis_gammas"]}}
    for b in p["analysis_batch_sizes"]:
        configs[b] = {"kind": "batched", **pair, "batch_size": b, "gamma": p["analysis_batch_gamma"],
                      "new_tokens": p["analysis_batch_new_tokens"], "prompt_len": p["analysis_prompt_len"],
                      "phases": True}
    if all(store.has(c) for c in configs.values()):
        return
    store.budget.check(f"loading {p['analysis_target']}")
    target, tokenizer = load_model(p["analysis_target"], device=device, dtype=dtype)
    draft, _ = load_model(p["analysis_draft"], device=device, dtype=dtype)
    prompts = heldout_source_prompts(tokenizer, max(p["analysis_prompt_count"], max(p["analysis_batch_sizes"])),
                                     p["analysis_prompt_len"])
    meta = run_metadata(model_id=p["analysis_target"], weights=target.weights_label, dtype=p["analysis_dtype"],
                        device=device, seed=0, draft_id=p["analysis_draft"], load_average=os.getloadavg()[0])
    store.run(configs["costs"], lambda: measure_costs(target, draft, torch.tensor(prompts[:1], device=device),
                                                      p["analysis_gammas"], repeats=p["analysis_timing_repeats"]),
              meta=meta)
    store.run(configs["sweep"], lambda: speedup_sweep(target, draft, prompts[:p["analysis_prompt_count"]],
                                                      p["analysis_gammas"], p["analysis_new_tokens"],
                                                      repeats=p["analysis_generation_repeats"]), meta=meta)
    for b in p["analysis_batch_sizes"]:
        store.run(configs[b], lambda b=b: batched_point(
            target, draft, prompts[:b], p["analysis_batch_new_tokens"], p["analysis_batch_gamma"],
            repeats=p["analysis_batch_repeats"], timing_repeats=p["analysis_timing_repeats"]), meta=meta)
    del target, draft
    free_memory()


DECODE_MODES = {"eager": False, "graphs": "graphs", "inductor": True}  # row label -> the generators' ``compile``


def _tolerate_graph_failure(mode: str, config: dict, measure) -> None:
    """Run ``measure()``; a graphs or inductor measurement that fails (a capture error, no C compiler for triton, a
    dynamo limit) is reported and skipped, not stored, so the eager rows and the other parts still come back (a
    rerun tries it again). Eager failures stay errors."""
    try:
        measure()
    except BudgetExhausted:
        raise
    except Exception as error:  # noqa: BLE001 - reported, and only for graphs/inductor measurements
        if mode == "eager":
            raise
        print(f"  {mode.upper()} MEASUREMENT FAILED, skipped: {_short(config)}: {type(error).__name__}: {error}"[:2000],
              flush=True)
        free_memory()


def _graph_proof(mode: str, models_, measure) -> dict:
    """``measure()``'s row plus the proof that graphs ran where the row claims them: the CUDA-graph replays of the
    explicit steps (0 on a CPU, where the same static step runs eagerly), or inductor's ``cudagraph_skips``."""
    from helpers.models.graphs import graph_replays
    from helpers.models.runtime import minimal_view

    if mode == "inductor":
        from torch._dynamo.utils import counters

        before = counters["inductor"]["cudagraph_skips"]
        row = measure()
        return {**row, "cudagraph_skips": counters["inductor"]["cudagraph_skips"] - before}
    views = [minimal_view(m) for m in models_]
    before = sum(graph_replays(v) for v in views)
    row = measure()
    if mode != "graphs":
        return row
    return {**row, "graph_replays": sum(graph_replays(v) for v in views) - before}


def _pair_dtype(weights: str, p: dict, eq5: dict) -> str:
    return p["sd_dtype"] if weights == "cpu-pair" else eq5["dtype"]


def _cost_config(target: str, draft: str, weights: str, p: dict, eq5: dict, mode: str) -> dict:
    return {"kind": "eq5_terms", "target": target, "draft": draft, "weights": weights,
            "dtype": _pair_dtype(weights, p, eq5), "device": p["device"], "context_len": eq5["context"],
            "gammas": eq5["gammas"], "repeats": eq5["repeats"], "decode": mode}


def decode_weight_bytes(model) -> int:
    """Weight bytes one decode step of ``model`` reads, at its stored precision: the rule of
    :func:`helpers.memory.decode_weight_bytes` (an input embedding untied from the LM head is not read)."""
    from helpers.memory import decode_weight_bytes as config_bytes

    return config_bytes(model.config, next(model.parameters()).element_size())


def _eq5_row(costs: dict, target, draft, eq5: dict) -> dict:
    """The measured terms plus Eq. 5's predicted speedup over a grid of alpha (a prediction, labelled so) and the
    weight bytes a decode step reads (the HBM roofline: decode bytes / bandwidth)."""
    from helpers.specdec.analysis import predicted_speedup

    c = costs["T_D"] / costs["T_T"]
    row = {**{k: v for k, v in costs.items() if k != "compiled"}, "c": c,
           "verify_ratio": {g: t / costs["T_T"] for g, t in costs["T_V"].items()},
           "eq5_prediction": {f"{a:g}": {g: float(predicted_speedup(int(g), a, c, costs["T_V"][g] / costs["T_T"]))
                                         for g in costs["T_V"]} for a in eq5["alphas"]},
           "eq5_note": "prediction from the measured terms at an assumed alpha (random weights: no real alpha)",
           "target_weight_bytes": sum(t.numel() * t.element_size() for t in target.parameters()),
           "draft_weight_bytes": sum(t.numel() * t.element_size() for t in draft.parameters()),
           "target_decode_bytes": decode_weight_bytes(target), "draft_decode_bytes": decode_weight_bytes(draft),
           "target_layers": target.config.num_hidden_layers, "draft_layers": draft.config.num_hidden_layers}
    return row


def _measure_eq5(p: dict, store, eq5: dict, pairs, weights: str) -> None:
    """Eq. 5's terms of each pair in every decode mode of ``eq5["modes"]`` (graphs only where the model file runs
    the pair: Qwen3), one row per (pair, mode)."""
    from helpers.models import load_model
    from helpers.models.runtime import minimal_supported
    from helpers.specdec.costs import measure_costs

    for target_name, draft_name in pairs:
        label = "cpu-pair" if target_name.startswith(models.PAIR_PREFIX) else weights
        dtype = getattr(torch, _pair_dtype(label, p, eq5))
        configs = {mode: _cost_config(target_name, draft_name, label, p, eq5, mode) for mode in eq5["modes"]}
        if all(store.has(c) for c in configs.values()):
            continue
        store.budget.check(f"loading {target_name} / {draft_name}")
        kwargs = {} if label == "cpu-pair" else {"weights": weights}
        target, _ = load_model(target_name, device=p["device"], dtype=dtype, **kwargs)
        draft, _ = load_model(draft_name, device=p["device"], dtype=dtype, **kwargs)
        vocab = min(target.config.vocab_size, draft.config.vocab_size)
        context = torch.randint(0, vocab, (1, eq5["context"]), generator=torch.Generator().manual_seed(0))
        context = context.to(p["device"])
        meta = run_metadata(model_id=target_name, weights=label, dtype=dtype, device=p["device"], seed=0,
                            draft_id=draft_name)
        for mode, config in configs.items():
            if mode != "eager" and not (minimal_supported(target) and minimal_supported(draft)):
                print(f"  {target_name} / {draft_name}: no {mode} decode (the model file runs Qwen3 only), skipped")
                continue
            _tolerate_graph_failure(mode, config, lambda mode=mode, config=config: store.run(
                config, lambda: _graph_proof(mode, (target, draft), lambda: _eq5_row(measure_costs(
                    target, draft, context, eq5["gammas"], repeats=eq5["repeats"], compile=DECODE_MODES[mode]),
                    target, draft, eq5)), meta=meta))
        del target, draft
        free_memory()


def part_eq5(p: dict, store, eq5: dict) -> None:
    """T_T, T_D, T_V(gamma) of each handout pair in bf16, random weights, eager and as CUDA graphs (Eq. 5 per pair;
    the Qwen3-8B decode step against the HBM roofline)."""
    _measure_eq5(p, store("09_handout_costs"), eq5, eq5["pairs"], "random")


def part_graphs(p: dict, store, eq5: dict) -> None:
    """The CPU pair on the GPU: its cost terms eager and as graphs, then speculative decoding end to end with
    graphs against AR with graphs (real alpha; lossless checked on every prompt)."""
    from helpers.models import load_model
    from helpers.prompts import encode_prompts
    from helpers.specdec.sweeps import gamma_rows, measure_pair, sweep_configs

    graphs = store("09_compiled_decode")
    _measure_eq5(p, graphs, eq5, eq5["cpu_pairs"], "cpu-pair")
    prompt_rows, _, common = _sd_setup(p)
    dtype = getattr(torch, p["sd_dtype"])
    mode = eq5["modes"][-1]  # the fastest mode the window runs: graphs (eager where graphs failed the self-check)
    for target_name, draft_name in eq5["cpu_pairs"]:
        configs = [{**c, "kind": "e2e", "decode": mode} for c in sweep_configs(
            target_name, draft_name, eq5["gammas"], prompt_ids=[r["id"] for r in prompt_rows], **common)]
        if all(graphs.has(c) for c in configs):
            continue
        graphs.budget.check(f"{mode} e2e {target_name} / {draft_name}")
        start = time.monotonic()
        (target, tokenizer), (draft, _) = (load_model(target_name, device=p["device"], dtype=dtype),
                                           load_model(draft_name, device=p["device"], dtype=dtype))
        cases = encode_prompts(tokenizer, prompt_rows, target.device)
        meta = run_metadata(model_id=target_name, weights="cpu-pair", dtype=p["sd_dtype"], device=p["device"],
                            seed=p["sd_seed"], draft_id=draft_name)

        def e2e(target=target, draft=draft, cases=cases, configs=configs, meta=meta):
            proof = _graph_proof(mode, (target, draft), lambda: {"rows": measure_pair(
                target, draft, cases, eq5["gammas"], p["sd_max_new_tokens"], repeats=p["sd_repeats"],
                temperature=p["sd_temperature"], seed=p["sd_seed"], peer=False, compile=DECODE_MODES[mode])})
            for config, row in zip(configs, gamma_rows(proof.pop("rows"))):
                graphs.append(config, {**{k: v for k, v in row.items() if k not in config}, **proof}, meta)

        _tolerate_graph_failure(mode, configs[0], e2e)
        graphs.budget.took(time.monotonic() - start)
        del target, draft
        free_memory()


def part_12(p: dict, store) -> None:
    """Notebook 12: depth at the handout's scale (random weights; on a GPU the launch-bound regime), then every
    draft of the family against the target (:func:`helpers.experiments.nb12.measure`, as the notebook calls it)."""
    from helpers.experiments import nb12

    nb12.measure(p, store, progress=False)


# ------------------------------------------------------------------------------------------------------ driver


def profile_params(profile: str, dry_run: bool) -> tuple[dict, dict]:
    """``(notebook parameters, eq5/graphs settings)``: ``params/<profile>.yaml``; with ``dry_run`` the CPU profile's
    small models on the CPU shrunk by :data:`DRY_OVERRIDES`, under the profile name ``<profile>-dryrun``."""
    from helpers.run_all import load_params

    eq5 = {"pairs": HANDOUT_PAIRS, "gammas": EQ5_GAMMAS, "context": EQ5_CONTEXT, "repeats": EQ5_REPEATS,
           "alphas": EQ5_ALPHAS, "cpu_pairs": CPU_PAIRS, "dtype": EQ5_DTYPE, "modes": ["eager", "graphs"]}
    if not dry_run:  # as papermill runs a notebook: its defaults (the CPU profile), overridden by the profile's file
        return {**load_params("cpu"), **load_params(profile)}, eq5
    params = {**load_params("cpu"), **DRY_OVERRIDES, "profile": f"{profile}-dryrun", "device": "cpu"}
    params["sd_dtype"] = "float32"
    return params, {**eq5, **DRY_EQ5}


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
    ``modes``: the decode modes of parts eq5 and graphs (default eager and graphs; see :data:`DECODE_MODES`).
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
        eq5["modes"] = list(modes)
    if str(params["device"]).startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(f"profile {profile!r} measures on {params['device']!r}, but torch {torch.__version__} sees no "
                         "CUDA device here. Run it on the GPU machine, or pass --dry-run for the CPU rehearsal.")
    out = Path(out).resolve()
    previous_root = os.environ.get("WORKBOOK_OUTPUT_ROOT")
    os.environ["WORKBOOK_OUTPUT_ROOT"] = str(out)  # helpers.paths puts results/ under it
    try:
        return _run(params, eq5, parts, out, dry_run, budget_s, archived)
    finally:
        if previous_root is None:
            os.environ.pop("WORKBOOK_OUTPUT_ROOT", None)
        else:
            os.environ["WORKBOOK_OUTPUT_ROOT"] = previous_root


def _run(params: dict, eq5: dict, parts: list, out: Path, dry_run: bool, budget_s: float | None,
         archived: bool) -> dict:
    files = [f for part in parts for f in PART_FILES[part]]
    if not dry_run:
        seed_outputs(params["profile"], out, files)
    BudgetStore.budget = Budget(budget_s, margin=5.0 if dry_run else 30.0)
    BudgetStore.measured = 0

    def store(notebook):
        return BudgetStore(params["profile"], notebook)
    store.budget = BudgetStore.budget

    done, stopped = [], None
    start = time.monotonic()
    try:
        for part in parts:
            print(f"== part {part} ({time.monotonic() - start:.0f} s)", flush=True)
            function = globals()[f"part_{part}"]
            function(params, store, eq5) if part in ("eq5", "graphs") else function(params, store)
            done.append(part)
    except BudgetExhausted as stop:
        stopped = str(stop)
        print(stopped, flush=True)
    warnings = [] if archived else check_outputs(out, params["profile"], files)
    for warning in warnings:
        print("WARNING:", warning, flush=True)
    summary = {"profile": params["profile"], "out": str(out / "results" / params["profile"]), "parts_done": done,
               "stopped": stopped, "measured": BudgetStore.measured, "seconds": time.monotonic() - start,
               "warnings": warnings}
    print(f"done: parts {done}; {summary['measured']} configuration(s) measured in {summary['seconds']:.0f} s; "
          + ("complete" if stopped is None else "INCOMPLETE, run again"), flush=True)
    return summary


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m helpers.gpu_measure", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Measure the notebooks' GPU rows into results/<profile>/NN_*.jsonl (no Jupyter needed).",
        epilog="In a lent GPU window (at most 8 files of at most 16 MiB come back per command):\n"
               "  python3 -m helpers.gpu_measure --window --out $OUT        (self-check, then the most valuable\n"
               "      missing rows until the deadline; one archive + a summary under $OUT)\n"
               "then here: python -m helpers.gpu_measure --unpack FILES_AT/window-<profile>.tar.gz, and commit.\n"
               "Rehearse on the CPU: --window --dry-run --out /tmp/w (tiny shapes, about a minute).")
    parser.add_argument("--window", action="store_true",
                        help="the GPU window: self-check, then parts in priority order under --deadline-s")
    parser.add_argument("--unpack", type=Path, metavar="ARCHIVE",
                        help="put a window's archive into results/<profile>/ of this checkout and print the goals")
    parser.add_argument("--profile", help="params/<profile>.yaml: gpu-h100 or gpu-h200 (--window: from the GPU)")
    parser.add_argument("--out", type=Path, help="output root: rows go to OUT/results/<profile>/ (GPU: $OUT)")
    parser.add_argument("--only", nargs="+", metavar="PART", help=f"parts to run, of {', '.join(PARTS)}")
    parser.add_argument("--dry-run", action="store_true",
                        help="the same code on the CPU with tiny shapes (profile <profile>-dryrun), about a minute")
    parser.add_argument("--budget-s", type=float, default=540.0,
                        help="stop cleanly before a measurement that would end later than this (default 540 s)")
    parser.add_argument("--deadline-s", type=float, default=None,
                        help="--window: seconds of measuring (default 510: inside a 600-s command)")
    parser.add_argument("--modes", nargs="+", metavar="MODE",
                        help=f"decode modes of parts eq5/graphs, of {', '.join(DECODE_MODES)} (default eager graphs)")
    args = parser.parse_args(argv)
    from helpers import gpu_window

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
        summary = gpu_window.run_window(args.out, args.profile, dry_run=args.dry_run,
                                        deadline_s=args.deadline_s or gpu_window.DEADLINE_S)
        return 0 if summary["self_check"]["ok"] else 2
    if not args.profile:
        parser.error("--profile is required without --window")
    run(args.profile, args.out, args.only, args.dry_run, args.budget_s, modes=args.modes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
