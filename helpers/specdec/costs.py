"""Measuring the quantities of Eq. 5 on a device: T_T, T_D, T_V(gamma), and batched speedups.

Every cost is one forward over ``new_tokens`` positions on top of a KV cache already holding ``context``,
exactly the call speculative decoding makes (T_T, T_D: one new token; T_V(gamma): the pending token plus
gamma drafts, gamma + 1 positions, all logits kept). The cache is cropped back after each call, so every
repeat sees the same context length. The forwards go through :mod:`helpers.models.runtime` on the same runtime
that :func:`helpers.specdec.speculative_generate` picks (``runtime="auto"``), so the terms describe the
generation they predict.
"""
from __future__ import annotations

import statistics
import sysconfig
import time
from pathlib import Path

import torch

from helpers.models.runtime import cached_decoder, resolve_runtime
from helpers.specdec.batched import batched_autoregressive_generate, batched_speculative_generate
from helpers.specdec.analysis import estimate_alpha
from helpers.timing import Timing, measure


@torch.inference_mode()
def forward_time(model, context: torch.Tensor, new_tokens: int, *, all_logits: bool = False,
                 warmup: int = 2, repeats: int = 10, runtime: str = "auto") -> Timing:
    """Seconds for one forward of ``new_tokens`` positions per row after a cached ``context`` (B, S)."""
    if context.dim() != 2 or context.shape[1] < 1:
        raise ValueError(f"context must be a (batch, seq_len >= 1) tensor of token ids, got {tuple(context.shape)}")
    device = context.device
    decoder = cached_decoder(model, resolve_runtime(runtime, model), context.shape[1] + new_tokens, context.shape[0])
    decoder.extend(context)
    ids = context[:, -new_tokens:].clone() if context.shape[1] >= new_tokens else context[:, :1].repeat(1, new_tokens)

    def step():
        decoder.extend(ids, last_only=not all_logits)
        decoder.rollback(new_tokens)

    return measure(step, warmup=warmup, repeats=repeats, device=device)


@torch.inference_mode()
def draft_time_in_round(target, draft, context: torch.Tensor, gamma: int, *, warmup: int = 2, repeats: int = 10,
                        runtime: str = "auto") -> float:
    """Mean seconds per draft forward when ``gamma`` of them follow one target forward over ``gamma + 1``
    positions, the order of a speculative round. On a CPU this is more than ``T_D`` timed alone: the target's
    forward streams its weights through the caches and evicts the draft's, so the first draft forwards of a
    round read their weights from memory again."""
    runtime = resolve_runtime(runtime, target, draft)
    device = context.device
    length = context.shape[1]
    target_cache = cached_decoder(target, runtime, length + gamma + 1, context.shape[0])
    draft_cache = cached_decoder(draft, runtime, length + gamma, context.shape[0])
    target_cache.extend(context)
    draft_cache.extend(context)
    block, ids = context[:, -1:].repeat(1, gamma + 1), context[:, -1:]

    def drafts():
        for _ in range(gamma):
            draft_cache.extend(ids)

    samples = []
    for index in range(warmup + repeats):
        target_cache.extend(block, last_only=False)  # untimed: it leaves the caches as a verification does
        target_cache.rollback(gamma + 1)
        seconds = measure(drafts, warmup=0, repeats=1, device=device).samples[0]
        draft_cache.rollback(gamma)
        if index >= warmup:
            samples.append(seconds / gamma)
    return statistics.fmean(samples)


def measure_costs(target, draft, context: torch.Tensor, gammas, *, warmup: int = 2, repeats: int = 10,
                  runtime: str = "auto") -> dict:
    """Mean seconds: ``T_T``, ``T_D`` (one token) and ``T_V`` {gamma: target forward over gamma + 1 positions},
    ``T_D_round`` {gamma: a draft forward inside a round, see :func:`draft_time_in_round`}, plus the
    ``runtime`` they were measured on (the one speculative decoding uses for this pair).

    The mean, not the median: a generation's wall time is a sum of forwards, stalls included, so the mean is
    what Eq. 5 must be fed to predict it (on a quiet machine the two agree)."""
    runtime = resolve_runtime(runtime, target, draft)
    timing = dict(warmup=warmup, repeats=repeats, runtime=runtime)
    return {
        "T_T": forward_time(target, context, 1, **timing).mean,
        "T_D": forward_time(draft, context, 1, **timing).mean,
        "T_V": {int(g): forward_time(target, context, int(g) + 1, all_logits=True, **timing).mean for g in gammas},
        "T_D_round": {int(g): draft_time_in_round(target, draft, context, int(g), **timing) for g in gammas},
        "runtime": runtime,
    }


def compare_batched(target, draft, prompts, max_new_tokens: int, gamma: int, *, repeats: int = 3,
                    eos_token_id: int | None = None) -> dict:
    """Wall time of batched greedy AR vs batched speculative decoding on the same prompts.

    The two are run alternately ``repeats`` times after one untimed warm-up of each, and the median of each
    is kept (alternating spreads slow phases of a shared machine over both); ``ar_steps`` and ``rounds`` count
    the forwards of each, and ``phase_seconds`` splits the rounds of one extra, untimed speculative run into draft,
    verify, bookkeeping and rollback time (see ``batched_speculative_generate``). ``rows_identical`` is the
    fraction of rows whose outputs agree; below 1 only where a padded low-precision forward flipped an
    argmax at a near-tie (see ``specdec_batched``), which the caller should report.
    """
    device = next(target.parameters()).device
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def timed(fn):
        sync()
        start = time.perf_counter()
        result = fn()
        sync()
        return time.perf_counter() - start, result

    run_ar = lambda: batched_autoregressive_generate(target, prompts, max_new_tokens, eos_token_id)  # noqa: E731
    run_sd = lambda: batched_speculative_generate(target, draft, prompts, max_new_tokens, gamma,  # noqa: E731
                                                  eos_token_id)
    run_ar(), run_sd()
    ar_times, sd_times, ar_decode, sd_decode = [], [], [], []
    for _ in range(repeats):
        seconds, ar = timed(run_ar)
        ar_times.append(seconds)
        ar_decode.append(seconds - ar.stats["prefill_seconds"])
        seconds, sd = timed(run_sd)
        sd_times.append(seconds)
        sd_decode.append(seconds - sd.stats["prefill_seconds"])
    accepted = [n for row in sd.stats["accepted"] for n in row]
    new_tokens = sum(len(row) for row in ar.tokens)
    ar_s, sd_s = statistics.median(ar_times), statistics.median(sd_times)
    # one more, untimed run that splits a round into its phases (on a GPU the phase boundaries synchronize)
    phased = batched_speculative_generate(target, draft, prompts, max_new_tokens, gamma, eos_token_id, time_phases=True)
    return {
        "generated_tokens": new_tokens,
        "ar_s": ar_s,
        "sd_s": sd_s,
        "ar_decode_s": statistics.median(ar_decode),
        "sd_decode_s": statistics.median(sd_decode),
        "ar_steps": ar.stats["steps"],
        "phase_seconds": phased.stats["phase_seconds"],
        "speedup": ar_s / sd_s,
        "decode_speedup": statistics.median(ar_decode) / statistics.median(sd_decode),
        "ar_tokens_per_s": new_tokens / ar_s,
        "sd_tokens_per_s": new_tokens / sd_s,
        "rounds": sd.stats["rounds"],
        # the batch runs until its slowest row is done: max/mean rounds per row is the straggler factor
        "rounds_per_row_mean": statistics.fmean(len(row) for row in sd.stats["accepted"]),
        "rounds_per_row_max": max(len(row) for row in sd.stats["accepted"]),
        "mean_accepted_per_round": sd.stats["mean_accepted_per_round"],
        "alpha": estimate_alpha(accepted, gamma),
        "rows_identical": sum(a == b for a, b in zip(ar.tokens, sd.tokens)) / len(prompts),
    }


def heldout_source_prompts(tokenizer, count: int, length: int) -> list[list[int]]:
    """``count`` prompts of ``length`` tokens from standard-library files the CPU pair never trained on.

    Uses the training script's held-out rule (a hash of the file name), reading only the files it needs.
    """
    from helpers.models.train_cpu_pair import _is_heldout

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    prompts = []
    for path in sorted(stdlib.rglob("*.py")):
        name = path.relative_to(stdlib).as_posix()
        if "site-packages" in name or "/test" in name or name.startswith("test") or not _is_heldout(name):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        ids = tokenizer(text)["input_ids"]
        if len(ids) >= 2 * length:  # start in the middle of the file: past the licence header and imports
            middle = len(ids) // 2
            prompts.append(ids[middle: middle + length])
        if len(prompts) == count:
            return prompts
    raise ValueError(f"only {len(prompts)} held-out files are long enough for {count} prompts of {length} tokens")


def _least_disturbed_pair(run_a, run_b, repeats: int):
    """Run ``run_a`` and ``run_b`` alternately ``repeats`` times; the fastest result of each.

    On a shared machine the least-disturbed run is closest to the true cost, and alternating makes both see
    the same phases of load, so their ratio is meaningful even when the load drifts."""
    a_runs, b_runs = [], []
    for _ in range(repeats):
        a_runs.append(run_a())
        b_runs.append(run_b())
    fastest = lambda runs: min(runs, key=lambda r: r.stats.time_total_s)  # noqa: E731
    return fastest(a_runs), fastest(b_runs)


def speedup_sweep(target, draft, prompts, gammas, max_new_tokens: int, *, repeats: int = 2) -> dict:
    """Single-sequence greedy AR vs speculative decoding over ``prompts`` for each gamma.

    For every gamma and prompt, AR and speculative decoding run alternately (see ``_least_disturbed_pair``).
    Returns ``{"ar": {...}, "gammas": {gamma: {...}}}``: summed seconds, the end-to-end speedup and the
    decode-only speedup (prefill excluded: what Eq. 5 models), alpha (maximum likelihood over every round of
    every prompt), tokens per round, and whether every output equals the AR output (greedy speculative
    decoding is lossless).
    """
    from helpers.specdec import autoregressive_generate, speculative_generate

    device = next(target.parameters()).device
    cuda = device.type == "cuda"  # phase timing would add a synchronize per phase there
    inputs = [torch.tensor([p], device=device) for p in prompts]
    eos = -1  # run every prompt to max_new_tokens, so that all configurations generate the same tokens
    autoregressive_generate(target, inputs[0], 4, eos_token_id=eos)  # warm-up
    out = {"gammas": {}}
    for gamma in gammas:
        pairs = [_least_disturbed_pair(
            lambda x=x: autoregressive_generate(target, x, max_new_tokens, eos_token_id=eos),
            lambda x=x: speculative_generate(target, draft, x, max_new_tokens, gamma, eos_token_id=eos,
                                             time_phases=not cuda), repeats) for x in inputs]
        ar, sd = [a for a, _ in pairs], [s for _, s in pairs]
        ar_seconds = sum(r.stats.time_total_s for r in ar)
        ar_decode = ar_seconds - sum(r.stats.time_prefill_s for r in ar)
        accepted = [n for r in sd for n in r.stats.accepted_per_round]
        round_gammas = [g for r in sd for g in r.stats.gamma_per_round]
        seconds = sum(r.stats.time_total_s for r in sd)
        decode = seconds - sum(r.stats.time_prefill_s for r in sd)
        rounds = sum(r.stats.rounds for r in sd)
        out["gammas"][int(gamma)] = {
            "seconds": seconds,
            "decode_seconds": decode,
            "ar_seconds": ar_seconds,
            "ar_decode_seconds": ar_decode,
            "speedup": ar_seconds / seconds,
            "decode_speedup": ar_decode / decode,
            "alpha": estimate_alpha(accepted, round_gammas),
            "tokens_per_round": sum(r.stats.new_tokens for r in sd) / rounds,
            "rounds": rounds,
            "draft_seconds": sum(r.stats.time_draft_s for r in sd),
            "verify_seconds": sum(r.stats.time_verify_s for r in sd),
            "lossless": all(torch.equal(a.tokens, s.tokens) for a, s in zip(ar, sd)),
        }
    ar_runs = [row["ar_seconds"] for row in out["gammas"].values()]
    out["ar"] = {"seconds": statistics.fmean(ar_runs), "new_tokens": sum(r.stats.new_tokens for r in ar)}
    return out


def last_level_cache_bytes() -> int | None:
    """Size of the CPU's largest cache (Linux sysfs), or None where it cannot be read."""
    sizes = []
    for path in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = path.read_text().strip().upper()
        units = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}
        try:
            sizes.append(int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text))
        except (ValueError, IndexError):
            continue
    return max(sizes) if sizes else None


def main_study_rows(frame, target: str):
    """One row per (draft, gamma) of notebook 07's results for ``target``: its main study, robust to extra rows.

    Keeps rows with status ok (where recorded) and the columns a speedup needs; where several rows share a
    (draft, gamma) — e.g. a per-source study over a subset of the prompts, or another output length — the one
    that generated the most tokens is kept (ties: the latest). Extra columns are carried along untouched."""
    import pandas as pd

    needed = {"target", "draft", "gamma", "alpha", "speedup", "c"}
    if frame.empty or not needed <= set(frame.columns):
        return pd.DataFrame(columns=sorted(needed))
    rows = frame[frame["target"] == target].dropna(subset=sorted(needed))
    if "status" in rows.columns:
        rows = rows[rows["status"].fillna("ok") == "ok"]
    order = [col for col in ("new_tokens", "timestamp") if col in rows.columns]
    if order:
        rows = rows.sort_values(order)
    rows = rows.assign(gamma=rows["gamma"].astype(int)).drop_duplicates(["draft", "gamma"], keep="last")
    return rows.sort_values(["draft", "gamma"]).reset_index(drop=True)


def draft_summary(rows) -> "pd.DataFrame":
    """Per draft of :func:`main_study_rows`: c, pooled alpha (MLE over every round where accepted/rejections
    are recorded, else the mean), the best gamma and its speedup, and the gammas measured."""
    import pandas as pd

    out = []
    for draft, group in rows.groupby("draft"):
        if {"accepted", "rejections"} <= set(group.columns) and group[["accepted", "rejections"]].notna().all().all():
            alpha = float(group["accepted"].sum() / (group["accepted"].sum() + group["rejections"].sum()))
        else:
            alpha = float(group["alpha"].mean())
        best = group.loc[group["speedup"].idxmax()]
        out.append({"draft": draft, "c": float(group["c"].mean()), "alpha": alpha, "best_gamma": int(best["gamma"]),
                    "best_speedup": float(best["speedup"]), "gammas": len(group),
                    "gamma_max": int(group["gamma"].max())})
    return pd.DataFrame(out)


def alpha_by_source(rows) -> "pd.DataFrame":
    """Acceptance per prompt source (MLE, pooled over the given rows' ``per_prompt`` entries that record
    ``source``, ``accepted`` and ``rejections``); empty when the rows carry no per-prompt detail."""
    import pandas as pd

    counts: dict[str, list[int]] = {}
    for entries in rows.get("per_prompt", pd.Series(dtype=object)).dropna():
        for entry in entries if isinstance(entries, list) else []:
            if {"source", "accepted", "rejections"} <= set(entry):
                total = counts.setdefault(entry["source"], [0, 0, 0])
                total[0] += entry["accepted"]
                total[1] += entry["rejections"]
                total[2] += 1
    return pd.DataFrame([{"source": s, "alpha": a / (a + r) if a + r else float("nan"), "prompt_runs": n}
                         for s, (a, r, n) in counts.items()]).sort_values("alpha", ignore_index=True) \
        if counts else pd.DataFrame(columns=["source", "alpha", "prompt_runs"])
