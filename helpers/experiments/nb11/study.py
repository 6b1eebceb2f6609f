"""Notebook 11's measurements (also ``python -m helpers.bench selfspec``): :func:`byte_terms`, the bytes a decode
step reads; :func:`compare_at`, batched AR against self-speculation from ONE prefill (at 4096 tokens a prefill costs
far more than decoding a hundred tokens, and the comparison is about decoding), interleaved and repeated, with the
Eq. 5 terms of the same runs; :func:`against_one` and :func:`tied_with_best`, a speedup against its repeats' noise.
"""
from __future__ import annotations

import statistics

import pandas as pd
import torch

from helpers.specdec.analysis import predicted_speedup
from helpers.specdec.selfspec import Prefilled, batched_decode, prefill, self_speculative_generate
from helpers.stats import range_spread, wilson_interval


def byte_terms(model, context: int, batch: int) -> dict:
    """Bytes a decode step reads at ``context`` tokens per row: the weights once, every row's KV cache."""
    config = model.config
    width = model.embed_tokens.weight.element_size()
    weights = sum(p.numel() for p in model.parameters()) * width  # a tied LM head is counted once
    kv_per_token = 2 * config.num_layers * config.num_kv_heads * config.head_dim * width
    kv = kv_per_token * context * batch
    return {"weight_bytes": weights, "kv_bytes_per_token": kv_per_token, "kv_bytes": kv,
            "kv_weight_ratio": kv / weights}


def compare_at(state: Prefilled, *, max_new_tokens: int, gamma: int, window: int, sinks: int, repeats: int = 3,
               windows: tuple[int, ...] | None = None) -> list[dict]:
    """AR vs self-speculation (one per window in ``windows``, default ``(window,)``) from copies of ``state``,
    interleaved (the order alternating every repeat); greedy, EOS ignored, so every run emits the same tokens.

    One row per window: ``speedup`` (median per-repeat AR / self-spec decode-time ratio, every row to
    ``max_new_tokens``) and ``full_batch_speedup`` (median ratio of the tokens/s while every row still decodes: a
    server that refills finished rows, what MagicDec measures), each with its spread; ``identical`` (every row of
    every run equals AR's); alpha, tau, c, v of the full-batch rounds (medians over repeats) and ``eq5_speedup``,
    Eq. 5's prediction of ``full_batch_speedup`` from them."""
    windows = (window,) if windows is None else tuple(windows)
    runs = {"ar": lambda: batched_decode(state.model, None, max_new_tokens, prefilled=state.copy(), eos_token_id=[])}
    for w in windows:
        runs[w] = (lambda w=w: self_speculative_generate(
            state.model, None, max_new_tokens, gamma=gamma, window=w, sinks=sinks, prefilled=state.copy(),
            eos_token_id=[]))
    results = {key: [] for key in runs}
    for r in range(repeats + 1):  # round 0 warms up
        for key in (list(runs) if r % 2 else list(runs)[::-1]):
            result = runs[key]()
            if r:
                results[key].append(result)
    ar = results["ar"]
    rows = []
    for w in windows:
        spec = results[w]
        ratios = [a.stats.decode_s / s.stats.decode_s for a, s in zip(ar, spec)]
        full_ratios = [s.stats.full_batch_tokens_per_second / a.stats.full_batch_tokens_per_second
                       for a, s in zip(ar, spec)]
        stats = [s.stats for s in spec]
        med = lambda name: statistics.median(getattr(s, name) for s in stats)  # noqa: E731
        alpha, c, v = med("alpha"), med("draft_ratio"), med("verify_ratio")
        full = stats[0].full_batch_rounds  # greedy: every repeat accepts the same; alpha is the full batch's
        counts = [n for row in stats[0].accepted_per_round for n in row[:full]]
        low, high = wilson_interval(sum(counts), sum(counts) + sum(n < gamma for n in counts))
        rows.append({
            "window": w, "sinks": sinks, "gamma": gamma, "new_tokens": max_new_tokens, "repeats": repeats,
            "speedup": statistics.median(ratios), "speedup_spread": range_spread(ratios),
            "full_batch_speedup": statistics.median(full_ratios), "full_batch_spread": range_spread(full_ratios),
            "full_batch_rounds": full, "ar_decode_s": statistics.median(a.stats.decode_s for a in ar),
            "selfspec_decode_s": med("decode_s"), "target_step_s": statistics.median(a.stats.target_step_s for a in ar),
            "identical": all(s.tokens == ar[0].tokens for s in spec) and all(a.tokens == ar[0].tokens for a in ar),
            "alpha": alpha, "alpha_low": low, "alpha_high": high, "tau": med("tau"),
            "draft_ratio": c, "verify_ratio": v, "eq5_speedup": float(predicted_speedup(gamma, alpha, c, v)),
            # rounds the batch needed over the mean rounds of its rows: Eq. 5 counts the mean row, the batch runs
            # until its slowest row is done (rows that finish leave, so the tail rounds are cheaper)
            "straggler": stats[0].rounds / statistics.mean(len(row) for row in stats[0].accepted_per_round),
            "prefill_s": state.seconds,
        })
    return rows


def prefill_long(model, prompts: list[list[int]], *, room: int) -> Prefilled:
    """Prefill equal-length prompts (one per row) with room for ``room`` new tokens per row."""
    return prefill(model, torch.tensor(prompts, device=model.embed_tokens.weight.device), room=room)


def short_context_batched(frame):
    """Notebook 09's batched rows (``kind == "batched"``) as (batch, speedup) sorted by batch, for contrast: the
    speedup is its decode-phase speedup (its whole-run ``speedup`` column dropped, so that no two columns share a
    name). Empty when notebook 09 has no such rows."""
    if "kind" not in frame or "decode_speedup" not in frame:
        return pd.DataFrame(columns=["batch", "speedup"])
    return (frame[frame["kind"] == "batched"].drop(columns="speedup", errors="ignore")
            .rename(columns={"batch_size": "batch", "decode_speedup": "speedup"}).sort_values("batch"))


def against_one(speedup: float, spread: float) -> str:
    """Where a measured speedup lies against 1, given its repeats' ``spread`` (relative, as :func:`compare_at`
    stores it): ``"above"`` or ``"below"`` when farther from 1 than the spread (times the speedup), else
    ``"within"`` the noise."""
    if spread != spread or spread < 0:  # NaN or negative: no repeats to judge by
        raise ValueError(f"need a non-negative spread, got {spread}")
    if abs(speedup - 1) <= spread * speedup:
        return "within"
    return "above" if speedup > 1 else "below"


def tied_with_best(speedups, spreads) -> list[bool]:
    """For each point, whether it is within the measured noise of the fastest: its gap to the best speedup is no
    larger than the wider of the two points' repeat spreads (each relative, times its speedup)."""
    speedups, spreads = [float(s) for s in speedups], [float(s) for s in spreads]
    if not speedups or len(speedups) != len(spreads):
        raise ValueError("need one spread per speedup, and at least one")
    best = max(range(len(speedups)), key=speedups.__getitem__)
    top, top_tol = speedups[best], spreads[best] * speedups[best]
    return [top - s <= max(top_tol, spread * s) for s, spread in zip(speedups, spreads)]
