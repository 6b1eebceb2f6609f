"""Notebook 14 (speculative decoding inside the continuous-batching engine): its result rows from the parameters
(:func:`measure`: the closed-batch comparison per batch size, the engine under Poisson load per load and policy, and
the long-context regime; only what the store lacks is measured) and the numbers and flags the notebook prints and
the report quotes (:func:`summary`). The measurements live in :mod:`helpers.experiments.nb14.study`."""
from __future__ import annotations

import os
import statistics

import pandas as pd
import torch
from tqdm.auto import tqdm

from helpers.batching.model_ops import generate_alone, model_source
from helpers.batching.request import Request
from helpers.batching.workers import EngineConfig
from helpers.batching.workload import make_workload, prompt_token_stream
from helpers.experiments.nb14.study import (POLICIES, closed_batch, drafter_factory, poisson_arrivals, serve,
                                            speculation_config, with_arrivals)
from helpers.experiments.packages import notebook_part
from helpers.models import load_model
from helpers.prompts import long_heldout_prompts
from helpers.results import results_only, run_metadata
from helpers.specdec.analysis import predicted_speedup
from helpers.specdec.drafter_files import FEATURE_DRAFT_DIR, drafter_dir, drafter_fingerprint, load_feature_draft
from helpers.stats import range_spread

RESULTS = "14_speculative_serving"
PARAMETERS = ("device", "serving_target", "serving_draft", "serving_drafter", "serving_dtype", "serving_gamma",
              "serving_requests", "serving_new_tokens", "serving_batch", "serving_prefill_batch", "serving_loads",
              "serving_repeats", "serving_batch_sizes", "serving_long_target", "serving_long_context",
              "serving_long_requests", "serving_long_new_tokens", "serving_long_gamma", "serving_window",
              "serving_sinks", "serving_threads", "serving_seed", "serving_remeasure")
BLOCK = 16  # tokens per KV block of the engine


def _base(params: dict) -> dict:
    base = {"target": params["serving_target"], "draft": params["serving_draft"], "drafter": params["serving_drafter"],
            "dtype": params["serving_dtype"], "device": params["device"], "gamma": params["serving_gamma"],
            "new_tokens": params["serving_new_tokens"], "seed": params["serving_seed"]}
    if params["serving_drafter"] == "feature":  # a retrained feature draft's rows are never read as this one's
        base["draft_weights"] = drafter_fingerprint(drafter_dir(params["serving_draft"], FEATURE_DRAFT_DIR))
    return base


def batch_config(params: dict, batch: int) -> dict:
    """One closed batch of ``batch`` rows: plain decoding against fixed γ, in process."""
    return {"kind": "batch", **_base(params), "batch": batch, "repeats": params["serving_repeats"]}


def load_config(params: dict, load: float) -> dict:
    """The engine at one offered load (arrival rate x one request's service time alone), every policy."""
    return {"kind": "load", **_base(params), "requests": params["serving_requests"], "max_batch": params["serving_batch"],
            "load": load, "repeats": params["serving_repeats"], "policies": list(POLICIES)}


def long_config(params: dict) -> dict:
    """The long-context regime: every request arrives at once with a long prompt, self-draft against none."""
    return {"kind": "long", "target": params["serving_long_target"], "dtype": params["serving_dtype"],
            "device": params["device"], "context": params["serving_long_context"],
            "requests": params["serving_long_requests"], "new_tokens": params["serving_long_new_tokens"],
            "gamma": params["serving_long_gamma"], "window": params["serving_window"], "sinks": params["serving_sinks"],
            "seed": params["serving_seed"]}


def engine_config(params: dict, speculation, *, max_batch: int, prefill_batch: int, max_seq_len: int,
                  rows: int) -> EngineConfig:
    blocks = rows * -(-(max_seq_len + params["serving_gamma"] + 1) // BLOCK)
    return EngineConfig(kv_capacity_blocks=blocks, block_size=BLOCK, max_seq_len=max_seq_len,
                        max_decode_batch=max_batch, max_prefill_batch=prefill_batch, prefill_ahead=prefill_batch,
                        threads_per_worker=max(1, params["serving_threads"]), device=params["device"],
                        speculation=speculation, seed=params["serving_seed"])


class _Models:
    """The target, draft and tokenizer, loaded on first use (rendering committed rows loads nothing)."""

    def __init__(self, params: dict) -> None:
        self.params, self._loaded = params, {}

    def __getitem__(self, name: str):
        if name not in self._loaded:
            model, tokenizer = load_model(name, device=self.params["device"],
                                          dtype=getattr(torch, self.params["serving_dtype"]))
            self._loaded[name] = (model.eval(), tokenizer)
        return self._loaded[name]


def workload(params: dict, tokenizer) -> list:
    """The short requests: prompts cut from the standard library's source, every output ``serving_new_tokens``."""
    n = params["serving_new_tokens"]
    return make_workload("uniform", params["serving_requests"], prompt_token_stream(tokenizer),
                         seed=params["serving_seed"], mean_output=n, max_output=n)


def measure(params: dict, store, progress: bool = True) -> dict:
    """Measure what ``store(RESULTS)`` lacks (everything with ``serving_remeasure``) and return ``{"batch": one row
    per batch size, "load": one row per (load, policy, repeat), "long": one row per (policy, repeat)}``."""
    results, rerun, models = store(RESULTS), params["serving_remeasure"], _Models(params)
    if params["device"] == "cpu" and params["serving_threads"] > 0:
        torch.set_num_threads(params["serving_threads"])
    meta = run_metadata(model_id=params["serving_target"], weights="cpu-pair", dtype=params["serving_dtype"],
                        device=params["device"], seed=params["serving_seed"], load_average=os.getloadavg()[0])
    gamma, new = params["serving_gamma"], params["serving_new_tokens"]
    cache: dict = {}

    def requests():
        if "requests" not in cache:
            target, tokenizer = models[params["serving_target"]]
            cache["requests"] = workload(params, tokenizer)
            cache["references"] = {r.id: generate_alone(target, r.input_tokens, r.output_length)
                                   for r in cache["requests"]}  # each request alone, greedy
        return cache["requests"]

    def batch_row(size: int) -> dict:
        target = models[params["serving_target"]][0]
        draft = {"draft": lambda: models[params["serving_draft"]][0],
                 "feature": lambda: load_feature_draft(target, params["serving_draft"])}.get(
            params["serving_drafter"], lambda: None)()
        make = drafter_factory(params["serving_drafter"], draft_model=draft,
                               limit=int(target.config.max_position_embeddings), window=params["serving_window"],
                               sinks=params["serving_sinks"])
        prompts = [r.input_tokens for r in (requests() * size)[:size]]
        return closed_batch(target, make, prompts, new_tokens=new, gamma=gamma, repeats=params["serving_repeats"])

    total = len(params["serving_batch_sizes"]) + len(params["serving_loads"]) + bool(params["serving_long_requests"])
    bar = tqdm(total=total, desc="serving rows", disable=not progress)
    batch_rows = []
    for size in params["serving_batch_sizes"]:
        batch_rows.append(results.run(batch_config(params, size), lambda: batch_row(size), meta=meta, rerun=rerun))
        bar.update()
    step_1 = next((r["target_step_s"] for r in batch_rows if r["batch"] == 1), None)
    load_rows = []
    for load in params["serving_loads"]:
        config = load_config(params, load)
        if (rerun or not results.has(config)) and not results_only():
            service = new * (step_1 if step_1 is not None else batch_row(1)["target_step_s"])
            config_metrics = lambda: _load_runs(params, requests(), cache["references"], load, service)  # noqa: E731
        else:
            config_metrics = None
        row = results.run(config, config_metrics, meta=meta, rerun=rerun)
        load_rows += [{"load": load, "service_s": row["service_s"], "rate_per_s": row["rate_per_s"], **run}
                      for run in row["runs"]]
        bar.update()
    long_rows = []
    if params["serving_long_requests"]:
        row = results.run(long_config(params), lambda: _long_runs(params, models), meta=meta, rerun=rerun)
        long_rows = [{"context": row["context"], **run} for run in row["runs"]]
        bar.update()
    bar.close()
    frames = {"batch": pd.DataFrame(batch_rows), "load": pd.DataFrame(load_rows), "long": pd.DataFrame(long_rows)}
    return frames


def _interleaved(policies, repeats: int):
    """(repeat, policy) in an order that alternates every repeat (the machine's load drifts)."""
    for r in range(repeats):
        for policy in (policies if r % 2 == 0 else policies[::-1]):
            yield r, policy


def _load_runs(params: dict, requests: list, references: dict, load: float, service_s: float) -> dict:
    rate = load / service_s
    arrivals = poisson_arrivals(len(requests), rate, params["serving_seed"])
    max_seq_len = max(r.prompt_len for r in requests) + params["serving_new_tokens"]
    source = model_source(params["serving_target"], getattr(torch, params["serving_dtype"]))
    runs = []
    for repeat, policy in _interleaved(POLICIES, params["serving_repeats"]):
        spec = speculation_config(policy, drafter=params["serving_drafter"], draft=params["serving_draft"],
                                  gamma=params["serving_gamma"], window=params["serving_window"],
                                  sinks=params["serving_sinks"])
        cfg = engine_config(params, spec, max_batch=params["serving_batch"],
                            prefill_batch=params["serving_prefill_batch"], max_seq_len=max_seq_len,
                            rows=params["serving_batch"] + params["serving_prefill_batch"])
        out, outputs = serve(source, with_arrivals(requests, arrivals), cfg)
        runs.append({**out, "policy": policy, "repeat": repeat, "lossless": outputs == references})
    return {"service_s": service_s, "rate_per_s": rate, "runs": runs}


def _long_runs(params: dict, models) -> dict:
    """Every long request at t = 0 in one prefill batch, so the decode batch is full from its first step."""
    name, n = params["serving_long_target"], params["serving_long_requests"]
    tokenizer = models[name][1]
    context, new = params["serving_long_context"], params["serving_long_new_tokens"]
    requests = [Request(i, prompt, new) for i, prompt in enumerate(long_heldout_prompts(tokenizer, n, context))]
    source = model_source(name, getattr(torch, params["serving_dtype"]))
    runs, reference = [], None
    for repeat, policy in _interleaved(("none", "fixed"), params["serving_repeats"]):
        spec = speculation_config(policy, drafter="self", draft=None, gamma=params["serving_long_gamma"],
                                  window=params["serving_window"], sinks=params["serving_sinks"])
        cfg = engine_config(params, spec, max_batch=n, prefill_batch=n, max_seq_len=context + new, rows=n)
        out, outputs = serve(source, with_arrivals(requests, [0.0] * n), cfg)
        reference = reference or outputs  # the first run's: every later run must match it
        runs.append({**out, "policy": policy, "repeat": repeat, "lossless": outputs == reference})
    return {"runs": runs}


METRICS = ("goodput_tok_s", "decode_tok_s", "tpot_p50_s", "tpot_p99_s", "ttft_p50_s", "ttft_p99_s", "mean_rows",
           "drafting_steps", "mean_gamma", "alpha")


def load_table(load: pd.DataFrame) -> pd.DataFrame:
    """One row per (load, policy): the medians over repeats of :data:`METRICS`, and the goodput and p50 TPOT over
    no speculation's in the same repeat (the runs were interleaved: each repeat's pair saw the same machine) as the
    median ratio with its spread."""
    none = load[load.policy == "none"].set_index(["load", "repeat"])
    rows = []
    for (level, policy), runs in load.groupby(["load", "policy"], sort=False):
        base = none.loc[[(level, r) for r in runs.repeat]]
        goodput = runs.goodput_tok_s.values / base.goodput_tok_s.values
        tpot = runs.tpot_p50_s.values / base.tpot_p50_s.values
        rows.append({"load": level, "policy": policy, **{m: runs[m].median() for m in METRICS},
                     "goodput_ratio": statistics.median(goodput), "goodput_ratio_spread": range_spread(goodput),
                     "goodput_spread": range_spread(runs.goodput_tok_s), "tpot_ratio": statistics.median(tpot),
                     "lossless": bool(runs.lossless.all())})
    order = {p: i for i, p in enumerate(POLICIES)}
    return pd.DataFrame(rows).sort_values(["load", "policy"], key=lambda c: c.map(order) if c.name == "policy" else c,
                                          ignore_index=True)


def _first_below_one(frame: pd.DataFrame, column: str) -> int:
    """The smallest batch whose ``column`` is below 1 (0: none in the sweep)."""
    below = frame[frame[column] < 1].batch
    return int(below.min()) if len(below) else 0


def summary(frames: dict) -> dict:
    """The numbers and flags the notebook prints and the report quotes: the closed batch's crossover (measured and
    Eq. 5's), the policy against no speculation and fixed γ at every load (ratios with the repeats' spread as the
    noise), the long-context regime, and ``lossless`` over every run; flags are 0/1 (the report's ``\\ifnum``).
    The benchmark's JSON keys are among them."""
    batch = frames["batch"].sort_values("batch")
    first, peak = batch.iloc[0], batch.loc[batch.speedup.idxmax()]
    numbers = {
        "batch_sizes": len(batch), "batch_first": int(batch.batch.iloc[0]), "batch_last": int(batch.batch.iloc[-1]),
        "batch_speedup_first": batch.speedup.iloc[0], "batch_speedup_last": batch.speedup.iloc[-1],
        "batch_v_first": batch.verify_ratio.iloc[0], "batch_v_last": batch.verify_ratio.iloc[-1],
        "batch_c_min": batch.draft_ratio.min(), "batch_c_max": batch.draft_ratio.max(),
        "batch_c_first": batch.draft_ratio.iloc[0], "batch_c_last": batch.draft_ratio.iloc[-1],
        # whether verification, not drafting (γ c), adds most of a round's cost between the smallest and largest batch
        "verify_dominates": int(batch.verify_ratio.iloc[-1] - batch.verify_ratio.iloc[0]
                                > batch.gamma.iloc[0] * (batch.draft_ratio.iloc[-1] - batch.draft_ratio.iloc[0])),
        "batch_alpha_min": batch.alpha.min(), "batch_alpha_max": batch.alpha.max(),
        # the fastest batch, and what a plain step and a verify forward cost there and at the smallest batch
        "batch_peak": int(peak.batch), "batch_speedup_peak": peak.speedup, "batch_v_peak": peak.verify_ratio,
        "batch_peak_inside": int(peak.batch != first.batch),
        **{f"batch_{name}_ms_{where}": 1e3 * row[column] for where, row in (("first", first), ("peak", peak))
           for name, column in (("tt", "target_step_s"), ("tv", "T_V_s"))},
        "crossover_measured": _first_below_one(batch, "speedup"), "crossover_eq5": _first_below_one(batch, "eq5_speedup"),
        "eq5_max_error_pct": 100 * (batch.eq5_speedup / batch.speedup - 1).abs().max()}
    table = load_table(frames["load"]) if len(frames["load"]) else pd.DataFrame()
    if len(table):
        numbers.update(_load_numbers(table, batch))
    long = frames["long"]
    if len(long):
        pairs = long.pivot(index="repeat", columns="policy")
        decode = pairs.decode_tok_s.fixed / pairs.decode_tok_s.none
        goodput = pairs.goodput_tok_s.fixed / pairs.goodput_tok_s.none
        numbers.update({"long_context": int(long.context.iloc[0]), "long_batch": int(long.requests.iloc[0]),
                        "long_context_ratio": float(decode.median()), "long_ratio_spread": range_spread(decode),
                        "long_goodput_ratio": float(goodput.median()),
                        "long_mean_rows": float(long[long.policy == "none"].mean_rows.median()),
                        "long_alpha": float(long[long.policy == "fixed"].alpha.median())})
    numbers["lossless"] = int(batch.identical.all() and all(frame.lossless.all() for frame in (table, long)
                                                             if len(frame)))
    return {"table": table, "numbers": numbers}


def _load_numbers(table: pd.DataFrame, batch: pd.DataFrame) -> dict:
    """The load sweep's numbers and flags (:func:`summary`)."""
    by = {p: table[table.policy == p].set_index("load") for p in POLICIES}
    loads = sorted(table.load.unique())
    low, high = loads[0], loads[-1]
    adaptive, fixed, none = by["adaptive"], by["fixed"], by["none"]
    best_other = pd.concat([fixed.goodput_tok_s, none.goodput_tok_s], axis=1).max(axis=1)
    vs_best = adaptive.goodput_tok_s / best_other
    noise = pd.concat([by[p].goodput_spread for p in POLICIES], axis=1).max(axis=1)  # widest repeat spread per load
    numbers = {
        "low_load": low, "high_load": high, "loads": len(loads),
        "low_mean_rows": none.mean_rows[low], "high_mean_rows": none.mean_rows[high],
        "low_load_ratio": adaptive.goodput_ratio[low], "low_fixed_ratio": fixed.goodput_ratio[low],
        "high_load_ratio": adaptive.goodput_ratio[high], "high_fixed_ratio": fixed.goodput_ratio[high],
        "high_fixed_pays": int(fixed.goodput_ratio[high] > 1),
        "low_tpot_ratio": adaptive.tpot_ratio[low], "low_fixed_tpot_ratio": fixed.tpot_ratio[low],
        "min_ratio": adaptive.goodput_ratio.min(), "min_ratio_load": float(adaptive.goodput_ratio.idxmin()),
        "fixed_min_ratio": fixed.goodput_ratio.min(), "fixed_min_load": float(fixed.goodput_ratio.idxmin()),
        "min_vs_best": vs_best.min(), "min_vs_best_load": float(vs_best.idxmin()),
        "noise_pct": 100 * noise.max(), "vs_best_within_noise": int((vs_best >= 1 - noise).all()),
        "low_drafting": adaptive.drafting_steps[low], "high_drafting": adaptive.drafting_steps[high],
        "high_gamma": adaptive.mean_gamma[high], "low_gamma": adaptive.mean_gamma[low],
        "backs_off": int(adaptive.drafting_steps[high] * adaptive.mean_gamma[high]
                          < adaptive.drafting_steps[low] * adaptive.mean_gamma[low]),
    }
    # Eq. 5 at the lowest load: the engine's α there (the whole prompt mix's) with the closed batch's terms at its
    # smallest batch (whose α is its first prompts' only)
    first = batch.iloc[0]
    numbers.update(low_alpha=fixed.alpha[low], low_eq5=float(predicted_speedup(
        int(first.gamma), min(fixed.alpha[low], 0.999), first.draft_ratio, first.verify_ratio)))
    return numbers


GPU_PARTS = (notebook_part("14", (RESULTS,), measure),)  # the CPU pair's engine on the GPU (packages.Part)


def serving_table(table: pd.DataFrame) -> pd.DataFrame:
    """:func:`load_table` as the report prints it: times in ms, short column names."""
    shown = table.assign(tpot_ms=1e3 * table.tpot_p50_s, tpot_p99_ms=1e3 * table.tpot_p99_s,
                         ttft_ms=1e3 * table.ttft_p50_s, ttft_p99_ms=1e3 * table.ttft_p99_s)
    columns = {"load": "load", "policy": "policy", "mean_rows": "batch", "goodput_tok_s": "goodput",
               "goodput_ratio": "vs none", "tpot_ms": "TPOT p50", "tpot_p99_ms": "TPOT p99", "ttft_ms": "TTFT p50",
               "ttft_p99_ms": "TTFT p99", "drafting_steps": "drafting", "mean_gamma": "gamma"}
    return shown[list(columns)].rename(columns=columns)


def closed_table(batch: pd.DataFrame) -> pd.DataFrame:
    """The closed-batch rows as the report prints them."""
    columns = {"batch": "B", "speedup": "speedup", "eq5_speedup": "Eq. 5", "alpha": "alpha", "draft_ratio": "c",
               "verify_ratio": "T_V/T_T", "T_T_ms": "T_T (ms)"}
    return batch.sort_values("batch").assign(T_T_ms=1e3 * batch.target_step_s)[list(columns)].rename(columns=columns)
