"""Measuring the quantities of Eq. 5 on a device: T_T, T_D, T_V(gamma) (notebook 09's studies of them: nb09.costs).

Every cost is one forward over ``new_tokens`` positions on top of a KV cache already holding ``context``, the call
speculative decoding makes (T_T, T_D: one new token; T_V(gamma): gamma + 1 positions, all logits kept), cropped back
after each call, on the runtime :func:`helpers.specdec.speculative_generate` picks (``runtime="auto"``); and the
proof that a measurement in a graphs mode replayed CUDA graphs (:func:`graph_proof`).
"""
from __future__ import annotations

import torch

from helpers.models.decoder import layer_kernels
from helpers.models.graphs import graph_compile_s, graph_replays
from helpers.models.runtime import cached_decoder, minimal_supported, minimal_view, resolve_runtime
from helpers.stats import bootstrap_ratio_interval
from helpers.timing import Timing, measure, measure_interleaved


@torch.inference_mode()
def forward_time(model, context: torch.Tensor, new_tokens: int, *, all_logits: bool = False,
                 warmup: int = 2, repeats: int = 10, runtime: str = "auto", compile: bool = False) -> Timing:
    """Seconds for one forward of ``new_tokens`` positions per row after a cached ``context`` (B, S)."""
    if context.dim() != 2 or context.shape[1] < 1:
        raise ValueError(f"context must be a (batch, seq_len >= 1) tensor of token ids, got {tuple(context.shape)}")
    device = context.device
    decoder = cached_decoder(model, resolve_runtime(runtime, model), context.shape[1] + new_tokens, context.shape[0],
                             compile=compile)
    decoder.extend(context)
    ids = context[:, -new_tokens:].clone() if context.shape[1] >= new_tokens else context[:, :1].repeat(1, new_tokens)

    def step():
        decoder.extend(ids, last_only=not all_logits)
        decoder.rollback(new_tokens)

    return measure(step, warmup=warmup, repeats=repeats, device=device)


@torch.inference_mode()
def draft_time_in_round(target, draft, context: torch.Tensor, gamma: int, *, warmup: int = 2, repeats: int = 10,
                        runtime: str = "auto", compile: bool = False) -> float:
    """Mean seconds per draft forward when ``gamma`` of them follow one target forward over ``gamma + 1``
    positions, the order of a speculative round. On a CPU this is more than ``T_D`` timed alone: the target's
    forward streams its weights through the caches and evicts the draft's, so the first draft forwards of a
    round read their weights from memory again."""
    runtime = resolve_runtime(runtime, target, draft)
    device = context.device
    length = context.shape[1]
    target_cache = cached_decoder(target, runtime, length + gamma + 1, context.shape[0], compile=compile)
    draft_cache = cached_decoder(draft, runtime, length + gamma, context.shape[0], compile=compile)
    target_cache.extend(context)
    draft_cache.extend(context)
    block, ids = context[:, -1:].repeat(1, gamma + 1), context[:, -1:]

    def verify():  # untimed: the draft back at the context, then a target forward that leaves the caches as a round
        draft_cache.rollback(draft_cache.length - length)
        target_cache.extend(block, last_only=False)
        target_cache.rollback(gamma + 1)

    def drafts():
        for _ in range(gamma):
            draft_cache.extend(ids)

    timing = measure(drafts, setup=verify, warmup=warmup, repeats=repeats, device=device, statistic="mean")
    return timing.summary / gamma


def measure_costs(target, draft, context: torch.Tensor, gammas, *, warmup: int = 2, repeats: int = 10,
                  runtime: str = "auto", compile: bool = False) -> dict:
    """Mean seconds: ``T_T``, ``T_D`` (one token) and ``T_V`` {gamma: target forward over gamma + 1 positions},
    ``T_D_round`` {gamma: a draft forward inside a round, see :func:`draft_time_in_round`}, plus the
    ``runtime`` they were measured on (the one speculative decoding uses for this pair).

    The mean, not the median: a generation's wall time is a sum of forwards, stalls included, so the mean is
    what Eq. 5 must be fed to predict it (on a quiet machine the two agree)."""
    runtime = resolve_runtime(runtime, target, draft)
    timing = dict(warmup=warmup, repeats=repeats, runtime=runtime, compile=compile)
    return {
        "target_step_s": forward_time(target, context, 1, **timing).mean,
        "T_D": forward_time(draft, context, 1, **timing).mean,
        "T_V": {int(g): forward_time(target, context, int(g) + 1, all_logits=True, **timing).mean for g in gammas},
        "T_D_round": {int(g): draft_time_in_round(target, draft, context, int(g), **timing) for g in gammas},
        "runtime": runtime,
        "compiled": compile,
    }


def interleaved_runs(runs: dict, repeats: int, *, warmup: int = 0, device=None) -> dict:
    """``{key: (seconds, results)}``: every ``runs[key]()`` called ``repeats`` times in interleaved rounds by
    :func:`helpers.timing.measure_interleaved` (the workbook's one interleaved timer: a drift in machine load hits
    every run alike), with the wall seconds of each call and what it returned, in call order."""
    timings = measure_interleaved(runs, repeats=repeats, warmup=warmup, device=device, keep_results=True)
    return {key: (timings[key].samples, list(timings[key].results)) for key in runs}


def graph_counts(views) -> tuple[int, float]:
    """CUDA-graph replays (0 on a CPU: nothing is captured) and first-call seconds so far of the model file's
    ``views``."""
    return sum(graph_replays(v) for v in views), sum(graph_compile_s(v) for v in views)


def graph_proof(mode: str, models_, measure) -> dict:
    """``measure()``'s row plus, where ``mode`` is not eager, the proof that graphs ran: the replays of the explicit
    steps during it and the seconds their first calls took (``compile_s``: compiling, warming up, capturing); and,
    where the model file runs every model, the target's eager kernels per layer (what a GPU step's time follows)."""
    layer = ({"layer_kernels": layer_kernels(minimal_view(models_[0]).config)}
             if all(minimal_supported(m) for m in models_) else {})
    if mode == "eager":  # nothing to prove, and the model may have no minimal view (another architecture)
        return {**measure(), **layer}
    views = [minimal_view(m) for m in models_]
    replays, compile_s = graph_counts(views)
    row = measure()
    after = graph_counts(views)
    return {**row, **layer, "graph_replays": after[0] - replays, "compile_s": after[1] - compile_s}


def tied_gammas(group, level: float = 0.95) -> list[int]:
    """The gammas of one pair's sweep rows (each with ``per_prompt`` times of the same prompts) that the prompts do
    not separate from the fastest: the paired bootstrap interval over prompts of a gamma's summed time over the
    best's reaches down to 1. The measured optimum as far as the data can name it."""
    def times(row) -> dict:
        return {p["prompt_id"]: p["time_s"] for p in row["per_prompt"]}

    best = group.loc[group["speedup"].idxmax()]
    best_times = times(best)
    tied = []
    for _, row in group.iterrows():
        if row["gamma"] == best["gamma"]:
            tied.append(int(row["gamma"]))
            continue
        own = times(row)
        if set(own) != set(best_times):
            raise ValueError(f"gamma {row['gamma']} and gamma {best['gamma']} ran different prompts: a paired "
                             "comparison needs the same ones")
        ids = sorted(own)
        low, _ = bootstrap_ratio_interval([own[i] for i in ids], [best_times[i] for i in ids], level=level)
        if low <= 1:
            tied.append(int(row["gamma"]))
    return sorted(tied)
