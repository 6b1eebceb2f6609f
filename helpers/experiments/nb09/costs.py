"""Notebook 09's cost studies (handout §4.6): the batched comparison, the speedup sweep over gamma, notebook 07's
rows read per draft and per source, and the cache-size probe, on :mod:`helpers.experiments.specdec_costs`' terms."""
from __future__ import annotations

import statistics
from pathlib import Path

import pandas as pd
import torch

from helpers.experiments.specdec_costs import interleaved_runs, measure_costs, tied_gammas
from helpers.models.runtime import resolve_runtime
from helpers.specdec.analysis import estimate_alpha, pooled_alpha, predicted_speedup
from helpers.specdec.batched import batched_autoregressive_generate, batched_speculative_generate
from helpers.specdec.linear import autoregressive_generate, speculative_generate
from helpers.stats import order_of_sets
from helpers.timing import measure_interleaved


def compare_batched(target, draft, prompts, max_new_tokens: int, gamma: int, *, repeats: int = 3,
                    eos_token_id: int | None = None) -> dict:
    """Batched greedy AR against batched speculative decoding on the same prompts, alternately ``repeats`` times
    after a warm-up (medians kept), with the forwards of each, ``phase_seconds`` of one extra untimed run, and the
    share of rows whose outputs agree (below 1 only where a padded low-precision forward flipped a near-tie)."""
    device = next(target.parameters()).device
    run_ar = lambda: batched_autoregressive_generate(target, prompts, max_new_tokens, eos_token_id)  # noqa: E731
    run_sd = lambda: batched_speculative_generate(target, draft, prompts, max_new_tokens, gamma,  # noqa: E731
                                                  eos_token_id)
    runs = interleaved_runs({"ar": run_ar, "sd": run_sd}, repeats, warmup=1, device=device)
    (ar_times, ar_runs), (sd_times, sd_runs) = runs["ar"], runs["sd"]
    ar, sd = ar_runs[-1], sd_runs[-1]
    ar_s, sd_s = statistics.median(ar_times), statistics.median(sd_times)
    ar_decode, sd_decode = (statistics.median([seconds - run.stats.prefill_seconds for seconds, run in zip(*runs[key])])
                            for key in ("ar", "sd"))
    new_tokens = sum(len(row) for row in ar.tokens)
    # one more, untimed run that splits a round into its phases (on a GPU the phase boundaries synchronize)
    phased = batched_speculative_generate(target, draft, prompts, max_new_tokens, gamma, eos_token_id, time_phases=True)
    return {
        "generated_tokens": new_tokens, "ar_s": ar_s, "sd_s": sd_s, "ar_decode_s": ar_decode, "sd_decode_s": sd_decode,
        "ar_steps": ar.stats.steps, "phase_seconds": phased.stats.phase_seconds, "speedup": ar_s / sd_s,
        "decode_speedup": ar_decode / sd_decode, "ar_tokens_per_s": new_tokens / ar_s,
        "sd_tokens_per_s": new_tokens / sd_s, "rounds": sd.stats.rounds,
        # the batch runs until its slowest row is done: max/mean rounds per row is the straggler factor
        "rounds_per_row_mean": statistics.fmean(len(row) for row in sd.stats.accepted),
        "rounds_per_row_max": max(len(row) for row in sd.stats.accepted),
        "mean_accepted_per_round": sd.stats.mean_accepted_per_round,
        "alpha": estimate_alpha([n for row in sd.stats.accepted for n in row], gamma),
        "rows_identical": sum(a == b for a, b in zip(ar.tokens, sd.tokens)) / len(prompts),
    }


def least_disturbed_pair(run_a, run_b, repeats: int):
    """The fastest result of each of ``run_a`` and ``run_b`` run alternately ``repeats`` times, by the generator's own
    clock: the least-disturbed runs, which saw the same phases of a shared machine's load."""
    timings = measure_interleaved({"a": run_a, "b": run_b}, repeats=repeats, statistic="min", keep_results=True,
                                  own_clock=lambda result: result.stats.time_total_s)
    return timings["a"].fastest_result(), timings["b"].fastest_result()


def speedup_sweep(target, draft, prompts, gammas, max_new_tokens: int, *, repeats: int = 2) -> dict:
    """Greedy AR against speculative decoding per gamma over ``prompts`` (:func:`least_disturbed_pair` per prompt):
    ``{"ar": ..., "gammas": {gamma: ...}}`` with summed seconds, the speedup end to end and of decode alone (what
    Eq. 5 models), pooled alpha, tokens per round, and whether every output equals AR's."""
    device = next(target.parameters()).device
    cuda = device.type == "cuda"  # phase timing would add a synchronize per phase there
    inputs = [torch.tensor([p], device=device) for p in prompts]
    eos = -1  # run every prompt to max_new_tokens, so that all configurations generate the same tokens
    autoregressive_generate(target, inputs[0], 4, eos_token_id=eos)  # warm-up
    out = {"gammas": {}}
    for gamma in gammas:
        pairs = [least_disturbed_pair(
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
            "seconds": seconds, "decode_seconds": decode, "ar_seconds": ar_seconds, "ar_decode_seconds": ar_decode,
            "speedup": ar_seconds / seconds, "decode_speedup": ar_decode / decode,
            "alpha": estimate_alpha(accepted, round_gammas),
            "tokens_per_round": sum(r.stats.new_tokens for r in sd) / rounds, "rounds": rounds,
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
    """One ok row per (draft, gamma) of notebook 07's results for ``target``: where several share one (a per-source
    study, another output length), the one that generated the most tokens (ties: the latest)."""
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
    """Per draft of :func:`main_study_rows`: c, pooled alpha (else the mean), the best gamma and its speedup, the
    gammas tied with it (:func:`tied_gammas`) and the gammas measured."""
    out = []
    for draft, group in rows.groupby("draft"):
        if {"accepted", "rejections"} <= set(group.columns) and group[["accepted", "rejections"]].notna().all().all():
            alpha = float(pooled_alpha(group["accepted"], group["rejections"]))
        else:
            alpha = float(group["alpha"].mean())
        best = group.loc[group["speedup"].idxmax()]
        out.append({"draft": draft, "c": float(group["c"].mean()), "alpha": alpha, "best_gamma": int(best["gamma"]),
                    "best_speedup": float(best["speedup"]), "tied_gammas": tied_gammas(group),
                    "gammas": len(group), "gamma_max": int(group["gamma"].max())})
    return pd.DataFrame(out)


def alpha_by_source(rows) -> "pd.DataFrame":
    """Pooled acceptance per prompt source over the rows' ``per_prompt`` entries (empty without them)."""
    counts: dict[str, list[int]] = {}
    for entries in rows.get("per_prompt", pd.Series(dtype=object)).dropna():
        for entry in entries if isinstance(entries, list) else []:
            if {"source", "accepted", "rejections"} <= set(entry):
                total = counts.setdefault(entry["source"], [0, 0, 0])
                total[0] += entry["accepted"]
                total[1] += entry["rejections"]
                total[2] += 1
    return pd.DataFrame([{"source": s, "alpha": pooled_alpha(a, r), "prompt_runs": n}
                         for s, (a, r, n) in counts.items()]).sort_values("alpha", ignore_index=True) \
        if counts else pd.DataFrame(columns=["source", "alpha", "prompt_runs"])


def cost_terms(cost_row: dict) -> dict:
    """The Eq. 5 terms of a stored :func:`measure_costs` row: T_T, T_D, c, and per gamma T_V, T_V/T_T and
    ``c_round`` (T_D_round/T_T, else c), with a ``table`` of them per gamma."""
    T_T, T_D = cost_row["target_step_s"], cost_row["T_D"]
    c = T_D / T_T
    T_V = {int(g): t for g, t in cost_row["T_V"].items()}  # JSON keys come back as strings
    verify_ratio = {g: t / T_T for g, t in T_V.items()}
    table = pd.DataFrame({"gamma": list(T_V), "T_V (ms)": [t * 1e3 for t in T_V.values()],
                          "T_V/T_T": list(verify_ratio.values())})
    table["gamma*c"] = table["gamma"] * c
    T_D_round = {int(g): t for g, t in cost_row.get("T_D_round", {}).items()} or {g: T_D for g in T_V}
    c_round = {g: t / T_T for g, t in T_D_round.items()}
    table["c_round"] = table["gamma"].map(c_round)
    return {"target_step_s": T_T, "T_D": T_D, "c": c, "T_V": T_V, "verify_ratio": verify_ratio, "c_round": c_round,
            "table": table}


def batched_point(target, draft, prompts, max_new_tokens: int, gamma: int, *, repeats: int,
                  timing_repeats: int) -> dict:
    """One batch size of notebook 09's curve: :func:`compare_batched` plus T_T, T_D and T_V at this batch size, on
    the runtime the batched decoders run (regression: timed on transformers' runtime, c at B = 1 read 0.093, not
    0.065)."""
    device = next(target.parameters()).device
    runtime = resolve_runtime("auto", target, draft)  # what batched_*_generate resolve by default
    run = compare_batched(target, draft, prompts, max_new_tokens, gamma, repeats=repeats)
    cost = measure_costs(target, draft, torch.tensor(prompts, device=device), [gamma], repeats=timing_repeats,
                         runtime=runtime)
    return {**run, "target_step_s": cost["target_step_s"], "T_D": cost["T_D"], "T_V": cost["T_V"][gamma],
            "runtime": runtime}


BATCH_COLUMNS = ["batch_size", "ar_tokens_per_s", "sd_tokens_per_s", "speedup", "decode_speedup", "alpha",
                 "mean_accepted_per_round", "rows_identical", "rounds_per_row_mean", "rounds_per_row_max",
                 "target_step_s", "T_D", "T_V", "rounds", "ar_steps", "ar_decode_s", "sd_decode_s", "phase_seconds"]


def batch_table(batch_rows: list[dict], gamma: int):
    """Notebook 09's batched rows with the straggler factor (max / mean rounds per row), c, T_V/T_T and Eq. 5."""
    by_batch = pd.DataFrame(batch_rows)[BATCH_COLUMNS]
    by_batch["straggler"] = by_batch["rounds_per_row_max"] / by_batch["rounds_per_row_mean"]
    by_batch["c"] = by_batch["T_D"] / by_batch["target_step_s"]
    by_batch["T_V/T_T"] = by_batch["T_V"] / by_batch["target_step_s"]
    by_batch["predicted"] = predicted_speedup(gamma, by_batch["alpha"].to_numpy(), by_batch["c"].to_numpy(),
                                              by_batch["T_V/T_T"].to_numpy())
    by_batch["predicted / straggler"] = by_batch["predicted"] / by_batch["straggler"]
    return by_batch


def compare_drafts(summary) -> dict | None:
    """Notebook 09's Q1 on notebook 07's drafts: the cheapest and dearest by c, whether the dearer wins (alpha and
    best speedup), how their tied best gammas order (:func:`helpers.stats.order_of_sets`), and the drafts whose best
    is the largest gamma measured; None for fewer than two."""
    if len(summary) < 2:
        return None
    by_c = summary.sort_values("c")
    cheap, dear = by_c.iloc[0], by_c.iloc[-1]
    return {"cheap": cheap, "dear": dear,
            "accuracy_wins": bool(dear["alpha"] > cheap["alpha"] and dear["best_speedup"] > cheap["best_speedup"]),
            "gamma_order": order_of_sets(cheap["tied_gammas"], dear["tied_gammas"]),
            "at_edge": list(summary[summary["best_gamma"] == summary["gamma_max"]]["draft"])}
