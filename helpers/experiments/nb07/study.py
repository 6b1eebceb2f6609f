"""Notebook 07's study of the sweep's rows: the rows that answer its configurations, each pair's optimum, the
per-source breakdown of the best configuration, and what its Eq. 5 terms were timed under. Numbers, flags and
short labels; the notebook and ``report/sections/07_speculative_decoding.tex`` word them."""
from __future__ import annotations

import numpy as np
import pandas as pd

from helpers.experiments.specdec_costs import tied_gammas
from helpers.specdec.analysis import pooled_alpha, predicted_speedup
from helpers.stats import bootstrap_ratio_interval, wilson_interval


def select_sweep(frame, configs: list[dict]):
    """The rows of a result frame that answer ``configs`` (same pair, gamma, temperature, output length, prompts and
    weights), pairs in the order of ``configs`` then gamma, with each row's own Eq. 5 prediction in ``eq5``."""
    keys = ("temperature", "max_new_tokens", "target_weights", "draft_weights")
    wanted = {(c["pair"], c["gamma"]): c for c in configs}

    def answers(row) -> bool:
        config = wanted.get((row["pair"], row["gamma"]))
        return (config is not None and all(row[k] == config[k] for k in keys)
                and list(row["prompt_ids"]) == list(config["prompt_ids"]))

    frame = frame[[answers(row) for _, row in frame.iterrows()]].copy()
    frame["pair"] = pd.Categorical(frame["pair"], list(dict.fromkeys(c["pair"] for c in configs)), ordered=True)
    frame = frame.sort_values(["pair", "gamma"]).reset_index(drop=True)
    frame["eq5"] = [float(predicted_speedup(int(g), a, c, v))
                    for g, a, c, v in zip(frame["gamma"], frame["alpha"], frame["c"], frame["verify_ratio"])]
    return frame


def pair_optimum(frame) -> dict:
    """Per pair of a sweep frame: the best gamma, its speedup, where it lies (``shape``: "inside", "at largest",
    "at smallest"), the gammas measured, alpha's range, c, and the gammas the prompts do not separate from the best
    (``tied``: :func:`~helpers.experiments.specdec_costs.tied_gammas`)."""
    optimum = {}
    for pair, group in frame.groupby("pair", observed=True):
        top = group.loc[group["speedup"].idxmax()]
        g, first, last = int(top["gamma"]), int(group["gamma"].min()), int(group["gamma"].max())
        shape = "at largest" if g == last else "at smallest" if g == first else "inside"
        optimum[pair] = {"gamma": g, "speedup": float(top["speedup"]), "shape": shape, "first": first, "last": last,
                         "alpha_range": (group["alpha"].min(), group["alpha"].max()), "c": group["c"].iloc[0],
                         "tied": tied_gammas(group)}
    return optimum


def source_breakdown(per_prompt, *, level: float = 0.95, resamples: int = 2000, seed: int = 0):
    """Per source of a configuration's ``per_prompt`` list: prompts, their mean length in tokens (the prefill a short
    generation pays), pooled alpha with a bootstrap interval over prompts (and the Wilson interval over tests),
    tokens per round, the speedup (summed AR time over summed ours) with a bootstrap interval, and the per-prompt
    speedups' min, median and max. Fastest first."""
    frame = pd.DataFrame(list(per_prompt))
    if frame.empty:
        raise ValueError("per_prompt is empty")
    out = []
    for source, group in frame.groupby("source", sort=True):
        tested = group["accepted"] + group["rejections"]
        accepted, total = int(group["accepted"].sum()), int(tested.sum())
        per_prompt_speedup = group["ar_time_s"] / group["time_s"]
        row = {"source": source, "prompts": len(group), "prompt_tokens": float(group["prompt_tokens"].mean()),
               "alpha": pooled_alpha(accepted, total - accepted),
               "tokens_per_round": group["new_tokens"].sum() / group["rounds"].sum(),
               "speedup": group["ar_time_s"].sum() / group["time_s"].sum(),
               "speedup_min": float(per_prompt_speedup.min()), "speedup_median": float(per_prompt_speedup.median()),
               "speedup_max": float(per_prompt_speedup.max())}
        row["alpha_wilson_low"], row["alpha_wilson_high"] = wilson_interval(accepted, total) if total else (
            float("nan"), float("nan"))
        if len(group) >= 2:
            row["alpha_low"], row["alpha_high"] = bootstrap_ratio_interval(
                group["accepted"], tested, level=level, resamples=resamples, seed=seed)
            row["speedup_low"], row["speedup_high"] = bootstrap_ratio_interval(
                group["ar_time_s"], group["time_s"], level=level, resamples=resamples, seed=seed)
        else:
            row.update(alpha_low=float("nan"), alpha_high=float("nan"), speedup_low=float("nan"),
                       speedup_high=float("nan"))
        out.append(row)
    return pd.DataFrame(out).set_index("source").sort_values("speedup", ascending=False)


def with_overall(by_source, per_prompt, **kwargs):
    """``by_source`` with an ``all sources`` row last: the same statistics over every prompt."""
    overall = source_breakdown([{**row, "source": "all sources"} for row in per_prompt], **kwargs)
    return pd.concat([by_source, overall])


def alpha_for_speedup(speedup: float, gamma: int, draft_ratio: float, verify_ratio: float) -> float:
    """The alpha at which Eq. 5 predicts ``speedup`` (it rises with alpha: bisection to 1e-6); nan when even
    alpha = 1 falls short."""
    def at(alpha):
        return float(predicted_speedup(gamma, alpha, draft_ratio, verify_ratio))

    if at(1.0) < speedup:
        return float("nan")
    if at(0.0) >= speedup:
        return 0.0
    low, high = 0.0, 1.0
    while high - low > 1e-6:
        middle = (low + high) / 2
        low, high = (middle, high) if at(middle) < speedup else (low, middle)
    return high


EXPECTED_SOURCE_ORDER = ("data", "code", "docstring", "prose")  # most to least predictable, as notebook 07 argues


def correlation_word(rho: float) -> str:
    """A (rank) correlation as the prose's word: "strong" (|rho| >= 0.7), "moderate" (>= 0.4), "weak" (>= 0.2),
    else "no clear" (also nan); "negative" below zero."""
    if rho != rho or abs(rho) < 0.2:
        return "no clear"
    word = "strong" if abs(rho) >= 0.7 else "moderate" if abs(rho) >= 0.4 else "weak"
    return word if rho > 0 else f"{word} negative"


def _spearman(x, y) -> float:
    x, y = pd.Series(np.asarray(x, dtype=float)), pd.Series(np.asarray(y, dtype=float))
    return float(x.corr(y, method="spearman")) if len(x) > 2 else float("nan")


def source_checks(by_source, per_prompt=None) -> dict:
    """The checks behind notebook 07's per-source prose on a :func:`source_breakdown` frame: the expected and
    measured order of alpha, every pair of sources the two orders rank oppositely (``order_swaps``: first, second,
    whether their alpha intervals overlap; ``swaps_within_noise`` where all do), whether the fastest and slowest
    source's intervals are separated, alpha's correlation with the speedup over sources (nan for two or fewer) and
    whether both rank them alike, how many source pairs' speedup intervals overlap, and for how many sources the
    Wilson interval is the narrower. With ``per_prompt``: the same prompt by prompt (those with a test), the rank
    correlation of a prompt's speedup with its alpha and its length, and with its length at a given alpha
    (``prompt_length_partial_rho``)."""
    def overlap(a, b, column: str) -> bool:  # the intervals of ``column`` of sources a and b overlap
        low, high = by_source[f"{column}_low"], by_source[f"{column}_high"]
        return bool(low[a] <= high[b] and low[b] <= high[a])

    expected = [s for s in EXPECTED_SOURCE_ORDER if s in by_source.index]
    fast, slow = by_source.index[0], by_source.index[-1]
    sources = list(by_source.index)
    pairs = [(a, b) for i, a in enumerate(sources) for b in sources[i + 1:]]
    measured = [src for src in by_source.sort_values("alpha", ascending=False).index if src in expected]
    swaps = [(a, b, overlap(a, b, "alpha"))
             for i, a in enumerate(expected) for b in expected[i + 1:] if measured.index(a) > measured.index(b)]
    claims = {
        "order_swaps": swaps, "swaps_within_noise": all(within for _, _, within in swaps),
        "expected": expected, "measured_order": measured,
        "fast": fast, "slow": slow,
        "separated": bool(by_source.loc[fast, "speedup_low"] > by_source.loc[slow, "speedup_high"]),
        "alpha_separated": bool(by_source.loc[fast, "alpha_low"] > by_source.loc[slow, "alpha_high"]),
        "correlation": by_source["alpha"].corr(by_source["speedup"]) if len(by_source) > 2 else float("nan"),
        "rank_correlation": _spearman(by_source["alpha"], by_source["speedup"]),
        "same_order": list(by_source.sort_values("alpha", ascending=False).index) == sources,
        "overlapping_pairs": int(sum(overlap(a, b, "speedup") for a, b in pairs)), "source_pairs": len(pairs),
        "wilson_narrower": int(((by_source["alpha_wilson_high"] - by_source["alpha_wilson_low"])
                                < (by_source["alpha_high"] - by_source["alpha_low"])).sum()),
    }
    if per_prompt is not None:
        frame = pd.DataFrame(list(per_prompt))
        frame = frame[(frame["accepted"] + frame["rejections"]) > 0]
        alpha = frame["accepted"] / (frame["accepted"] + frame["rejections"])
        speedup = frame["ar_time_s"] / frame["time_s"]
        r_sa, r_sl = _spearman(speedup, alpha), _spearman(speedup, frame["prompt_tokens"])
        r_al = _spearman(alpha, frame["prompt_tokens"])
        partial = (r_sl - r_sa * r_al) / np.sqrt((1 - r_sa ** 2) * (1 - r_al ** 2)) if abs(r_sa) < 1 and abs(
            r_al) < 1 else float("nan")
        claims.update(prompts=len(frame), prompt_alpha_rho=r_sa, prompt_length_rho=r_sl,
                      prompt_length_partial_rho=float(partial))
    return claims


def alpha_speed_inversions(by_source) -> dict:
    """Pairs of sources where the higher alpha has the lower speedup (``pairs``: faster, slower), and how many of
    them have the longer prompts (``inversions_longer``: a longer prefill weighs on a short generation)."""
    sources = by_source.drop(index="all sources", errors="ignore")
    pairs = [(fast, slow) for fast in sources.index for slow in sources.index
             if sources.loc[fast, "speedup"] > sources.loc[slow, "speedup"]
             and sources.loc[slow, "alpha"] > sources.loc[fast, "alpha"]]
    longer = [(f, s) for f, s in pairs if sources.loc[s, "prompt_tokens"] > sources.loc[f, "prompt_tokens"]]
    return {"inversions": len(pairs), "inversions_longer": len(longer), "pairs": pairs}


def source_table(by_source):
    """The report's per-source table of a :func:`source_breakdown` frame, intervals as text."""
    def interval(low, high):
        return [f"{lo:.2f}-{hi:.2f}" for lo, hi in zip(low, high)]

    return pd.DataFrame({
        "source": by_source.index, "prompts": by_source["prompts"].to_numpy(),
        "prompt tokens (mean)": by_source["prompt_tokens"].round(0).astype(int).to_numpy(),
        "alpha (MLE)": by_source["alpha"].round(3).to_numpy(),
        "95% CI (prompts)": interval(by_source["alpha_low"], by_source["alpha_high"]),
        "Wilson 95% CI": interval(by_source["alpha_wilson_low"], by_source["alpha_wilson_high"]),
        "tau (tokens/round)": by_source["tokens_per_round"].round(2).to_numpy(),
        "speedup": by_source["speedup"].round(2).to_numpy(),
        "95% CI": interval(by_source["speedup_low"], by_source["speedup_high"]),
        "per prompt min/median/max": [f"{a:.2f}/{b:.2f}/{c:.2f}" for a, b, c in
                                      zip(by_source["speedup_min"], by_source["speedup_median"],
                                          by_source["speedup_max"])],
    })


def cost_check(frame) -> tuple[pd.DataFrame, dict]:
    """What notebook 07's Eq. 5 terms were measured under, per pair of a :func:`select_sweep` frame (runtime, the
    prompt whose context they were timed on, T_T, T_D, T_V, c and T_V/T_T at the smallest gamma, AR's time per token,
    the rows above and below Eq. 5 and their ratio's range), and the checks behind the prose: for targets shared by
    pairs (``shared_targets``) whether the costs ran alike, the spread of T_T and T_V across pairs, whether the pair
    with the lowest T_T lies most above Eq. 5 (``low_tt_above``: a T_T timed low makes Eq. 5 too low; never vacuously
    True) and whether the pairs' ratio ranges overlap; ``sides_by_pair`` and the pairs whose isolated T_T exceeds AR's
    whole time per token (``tt_over_ar_step``: a T_T timed in a slow phase)."""
    out = []
    for pair, group in frame.groupby("pair", observed=True, sort=False):
        first = group.sort_values("gamma").iloc[0]
        out.append({
            "pair": str(pair), "target": first["target"], "draft": first["draft"], "runtime": first.get("runtime"),
            "cost prompt": first["cost_prompt"] if isinstance(first.get("cost_prompt"), str)
            else list(first["prompt_ids"])[0],  # rows before the cost_prompt column: the sweep's first prompt
            "stored at": str(group["timestamp"].min()) if "timestamp" in group else None,
            "T_T (ms)": 1e3 * first["target_step_s"], "T_D (ms)": 1e3 * first["T_D_s"], "gamma": int(first["gamma"]),
            "T_V (ms)": 1e3 * first["T_V_s"], "c": first["c"], "T_V/T_T": first["verify_ratio"],
            "AR ms/token": 1e3 / first["ar_tokens_per_s"],
            "above Eq. 5": int((group["speedup"] > group["eq5"]).sum()),
            "below Eq. 5": int((group["speedup"] < group["eq5"]).sum()),
            "ratio low": float((group["speedup"] / group["eq5"]).min()),
            "ratio high": float((group["speedup"] / group["eq5"]).max()),
        })
    table = pd.DataFrame(out)
    claims = {"above": int(table["above Eq. 5"].sum()), "below": int(table["below Eq. 5"].sum()),
              "rows": len(frame), "shared_targets": [], "same_conditions": True,
              "tt_spread": float("nan"), "tv_spread": float("nan"), "low_tt_above": True, "ratios_overlap": True,
              "sides_by_pair": bool(((table["above Eq. 5"] == 0) | (table["below Eq. 5"] == 0)).all()),
              "tt_over_ar_step": list(table.loc[table["T_T (ms)"] > table["AR ms/token"], "pair"])}
    for target, group in table.groupby("target", sort=False):
        if len(group) < 2:
            continue
        claims["shared_targets"].append(target)
        claims["same_conditions"] &= bool(group["runtime"].nunique() == 1 and group["cost prompt"].nunique() == 1
                                          and group["gamma"].nunique() == 1)
        claims["tt_spread"] = np.nanmax([claims["tt_spread"], group["T_T (ms)"].max() / group["T_T (ms)"].min() - 1])
        claims["tv_spread"] = np.nanmax([claims["tv_spread"], group["T_V (ms)"].max() / group["T_V (ms)"].min() - 1])
        # no claim without a row above Eq. 5: 0 == max(0, 0) would make "the low-T_T pair lies above" vacuously true
        claims["low_tt_above"] &= bool(group["above Eq. 5"].max() > 0 and group.loc[group["T_T (ms)"].idxmin(),
                                                                                     "above Eq. 5"]
                                       == group["above Eq. 5"].max())
        claims["ratios_overlap"] &= bool(group["ratio low"].max() <= group["ratio high"].min())
    claims["tt_spread"], claims["tv_spread"] = float(claims["tt_spread"]), float(claims["tv_spread"])
    claims["low_tt_above"] = bool(claims["low_tt_above"] and claims["shared_targets"])
    claims["ratios_overlap"] = bool(claims["ratios_overlap"] and claims["shared_targets"])
    return table, claims
