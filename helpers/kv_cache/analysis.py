"""From the §2.1 sweep rows (notebook 03) to what the notebook prints, plots and the report quotes.

- :func:`measured_points`: the stored sweeps of this parameter setting as one DataFrame of points (median,
  interquartile range, runs, flag).
- :func:`fill_curves`: per setting and mode, the fitted growth (linear with the cache, quadratic without) and the
  curve over every n, measured where there is a measurement and extrapolated from the fit beyond a cap.
- :func:`speedup_table`: without / with cache per (setting, n), with which values are extrapolated and noisy.
- :func:`largest_measured`: per setting, the largest n measured in both modes and the speedup there.
- :func:`same_work_gap` / :func:`same_work_numbers`: n = 1 (the same forward pass in both modes), the ratio
  of the two modes round by round, and the numbers of what it supports.
- :func:`per_token_difference`: whether two settings' cached per-token costs differ by more than the measurement
  resolves (a bootstrap over the runs, against the spread between two sweeps of the same model).
- :func:`plot_setting`: one setting's points, fits and extrapolations on an axis.
- :func:`explain_table`: fitted costs and where the cache starts to matter, per setting.
- :func:`weight_costs`: the weights a decode step multiplies by, per group, and the model's shape.
- :func:`source_excerpt`: lines of a function's source, for notebook 04's side-by-side reading.
"""
from __future__ import annotations

import inspect

import numpy as np
import pandas as pd

from helpers.kv_cache.sweep import extrapolate, fit_growth, matmul_weights


def measured_points(runs: pd.DataFrame, expected: dict) -> pd.DataFrame:
    """One row per measured (setting, mode, n) of the sweeps in ``runs``; ``expected[setting]`` is the
    ``(model, prompt_tokens, no_cache_cap)`` of this parameter setting (rows from other settings are skipped).

    ``samples`` are the point's timed runs in the order taken; the first ``paired_runs`` (the sweep's minimum
    repeats) of every point of a sweep were taken in the same interleaved rounds, one per round, so sample i of
    two points compares runs taken side by side (later samples are extra rounds of noisy points only)."""
    measured = []
    for _, run in runs.iterrows():
        if (run["model"], run["prompt_tokens"], run["no_cache_cap"]) != expected[run["setting"]]:
            continue  # rows from other parameter settings
        for row in run["rows"]:
            q1, q3 = np.percentile(row["time_s_samples"], [25, 75])
            measured.append({"setting": run["setting"], "model": run["model"], "cache": row["mode"] == "with cache",
                             "new_tokens": row["new_tokens"], "time_s": row["time_s_median"], "q1_s": q1, "q3_s": q3,
                             "spread": row["time_s_spread"], "runs": row["repeats"], "flagged": row["flagged"],
                             "samples": list(row["time_s_samples"]), "paired_runs": int(run["repeats"])})
    return pd.DataFrame(measured)


def fill_curves(measured: pd.DataFrame, lengths) -> tuple[pd.DataFrame, dict]:
    """``(curves, fits)``: ``fits[setting, cache]`` the growth coefficients (degree 1 with the cache, 2 without);
    ``curves`` every (setting, cache, n in ``lengths``) with its time, measured or ``extrapolated`` from the fit."""
    curves, fits = [], {}
    for (setting, cache), part in measured.groupby(["setting", "cache"]):
        fit = fit_growth(part["new_tokens"], part["time_s"], degree=1 if cache else 2)
        fits[setting, cache] = fit
        have = set(part["new_tokens"])
        for n in lengths:
            if n in have:
                t = float(part.loc[part["new_tokens"] == n, "time_s"].iloc[0])
                curves.append({"setting": setting, "cache": cache, "new_tokens": n, "time_s": t, "extrapolated": False})
            else:
                curves.append({"setting": setting, "cache": cache, "new_tokens": n,
                               "time_s": float(extrapolate(fit, [n])[0]), "extrapolated": True})
    return pd.DataFrame(curves), fits


def fit_values(measured: pd.DataFrame, fits: dict) -> list[float]:
    """The fitted time at every measured point (same order as ``measured``)."""
    return [float(extrapolate(fits[s, c], [n])[0])
            for s, c, n in zip(measured["setting"], measured["cache"], measured["new_tokens"])]


def speedup_table(curves: pd.DataFrame, measured: pd.DataFrame) -> pd.DataFrame:
    """Per (setting, n): time with and without the cache (medians), the speedup (the median of the paired rounds'
    ratios where both modes were measured, else the ratio of the times, one of them extrapolated), whether the
    no-cache time is extrapolated, and which modes stayed noisy (flagged)."""
    table = curves.pivot_table(index=["setting", "new_tokens"], columns="cache", values="time_s").rename(
        columns={True: "with cache (s)", False: "without cache (s)"})
    # measured on both sides: the median of the rounds timed side by side (as the prose quotes it), not the ratio of
    # each mode's median, which takes in the extra rounds of a noisy mode and can fall outside the paired range
    paired = {key: float(np.median(_paired_ratios(part))) for key, part in
              measured.groupby(["setting", "new_tokens"], sort=False) if part["cache"].nunique() == 2}
    table["speedup"] = [paired.get(key, without / with_) for key, without, with_ in
                        zip(table.index, table["without cache (s)"], table["with cache (s)"])]
    table["no-cache extrapolated"] = curves[~curves["cache"]].set_index(["setting", "new_tokens"])["extrapolated"]
    noisy = measured[measured["flagged"]].groupby(["setting", "new_tokens"])["cache"].agg(
        lambda c: " & ".join("with" if x else "without" for x in sorted(c, reverse=True)))
    table["noisy"] = noisy.reindex(table.index).fillna("")
    return table


def plot_setting(ax, setting: str, curves: pd.DataFrame, measured: pd.DataFrame, fits: dict, *, title: str,
                 max_new_tokens: int, max_spread: float) -> None:
    """Medians with interquartile bars, the fitted curves, extrapolated (hollow) and noisy (x) points of one setting."""
    grid = np.arange(1, max_new_tokens + 1)
    for cache, marker, name in [(True, "o", "with cache"), (False, "s", "without cache")]:
        part = curves[(curves["setting"] == setting) & (curves["cache"] == cache)]
        guess = part[part["extrapolated"]]
        real = measured[(measured["setting"] == setting) & (measured["cache"] == cache)].sort_values("new_tokens")
        yerr = [real["time_s"] - real["q1_s"], real["q3_s"] - real["time_s"]]
        line = ax.errorbar(real["new_tokens"], real["time_s"], yerr=yerr, marker=marker, ls="", label=name)
        color = line[0].get_color()
        ax.plot(grid, extrapolate(fits[setting, cache], grid), color=color, lw=0.8)
        if len(guess):
            ax.plot(guess["new_tokens"], guess["time_s"], marker=marker, ls="", mfc="none", color=color,
                    label=f"{name}: extrapolated (quadratic fit)")
        bad = real[real["flagged"]]
        if len(bad):
            label = f"noisy (spread > {max_spread:g})"
            ax.plot(bad["new_tokens"], bad["time_s"], marker="x", ms=9, ls="", color="red",
                    label=None if label in ax.get_legend_handles_labels()[1] else label)
    ax.set(xlabel="new tokens n", ylabel="time (s)", title=title)
    ax.legend(fontsize="x-small")


def largest_measured(table: pd.DataFrame) -> pd.DataFrame:
    """Per setting: the largest n at which both modes were measured (no extrapolated no-cache time) and the
    speedup there."""
    rows = []
    for setting, part in table.groupby(level="setting", sort=False):
        real = part.loc[setting][~part.loc[setting]["no-cache extrapolated"].astype(bool)]
        n = int(real.index.max())
        rows.append({"setting": setting, "n": n, "speedup": float(real.loc[n, "speedup"])})
    return pd.DataFrame(rows).set_index("setting")


def explain_table(order, fits: dict, table: pd.DataFrame, measured: pd.DataFrame, prompt_lens: dict,
                  n_max: int) -> pd.DataFrame:
    """Per setting: prompt length, prefill and per-token costs from the fits, the quadratic share of the uncached
    time at ``n_max``, the speedup at n = 1 and at n = ``n_max`` (and whether the no-cache time there was measured
    or extrapolated from the fit), how far the no-cache mode was measured and the speedup there, and the first
    MEASURED n with a speedup of at least 1.5."""
    explain = []
    for setting in order:
        _, c1 = fits[setting, True]
        _, u1, u2 = fits[setting, False]
        t_no = float(extrapolate(fits[setting, False], [n_max])[0])
        part = table.loc[setting]
        real = part[~part["no-cache extrapolated"].astype(bool)]
        over = real.index[real["speedup"] >= 1.5]
        n_real = int(real.index.max())
        explain.append({
            "setting": setting, "prompt tokens": prompt_lens[setting],
            "prefill ms (n=1, cached)": float(part["with cache (s)"].iloc[0]) * 1e3,
            "cached ms/token": c1 * 1e3, "uncached ms/step (linear term)": u1 * 1e3,
            "uncached: quadratic share at n_max": u2 * n_max**2 / t_no,
            "speedup at n=1": float(part["speedup"].iloc[0]),
            "no-cache measured up to": n_real,
            "speedup there (measured)": float(real.loc[n_real, "speedup"]),
            f"speedup at n={n_max}": float(part.loc[n_max, "speedup"]),
            f"n={n_max} no-cache time": "fit" if bool(part.loc[n_max, "no-cache extrapolated"]) else "measured",
            "first measured n with speedup >= 1.5": str(int(over[0])) if len(over) else "not reached",
        })
    return pd.DataFrame(explain).set_index("setting")


def _paired_ratios(point: pd.DataFrame) -> list[float]:
    """Without / with cache, round by round, over the rounds in which the two modes of one (setting, n) were timed
    side by side (the first ``paired_runs`` samples of each)."""
    cached, uncached = point[point["cache"]].iloc[0], point[~point["cache"]].iloc[0]
    paired = min(int(cached["paired_runs"]), len(cached["samples"]), len(uncached["samples"]))
    return [u / c for u, c in zip(uncached["samples"][:paired], cached["samples"][:paired])]


SIGN_ROUNDS = 6  # a sign kept in every one of r rounds happens by chance with probability 2 * 0.5**r: under 5 % from 6


def same_work_gap(measured: pd.DataFrame, n: int = 1) -> pd.DataFrame:
    """At ``n`` new tokens (n = 1: the same single forward pass in both modes), per setting: the ratio without / with
    cache run by run over the rounds in which both points were timed side by side (the first ``paired_runs``
    samples), its median, range, the chance ``p_sign`` that pure noise keeps one sign in every round (two-sided sign
    test, 2 * 0.5**rounds) and a verdict: ``cached slower in every round`` / ``cached faster in every round`` (every
    ratio on one side of 1, over at least :data:`SIGN_ROUNDS` rounds), ``too few rounds`` (one side, fewer rounds:
    chance could do it) or ``either way``. The median of the paired rounds, not a ratio of each mode's median over
    all its samples: a mode timed more often is not paired, and that ratio may fall outside the rounds' range."""
    rows = []
    for setting, part in measured[measured["new_tokens"] == n].groupby("setting", sort=False):
        per_round = _paired_ratios(part)
        paired, low, high = len(per_round), min(per_round), max(per_round)
        one_side = high < 1 or low > 1
        verdict = ("either way" if not one_side else "too few rounds" if paired < SIGN_ROUNDS else
                   "cached slower in every round" if high < 1 else "cached faster in every round")
        rows.append({"setting": setting, "median round ratio": float(np.median(per_round)), "rounds": paired,
                     "per-round low": low, "per-round high": high, "p_sign": 2 * 0.5 ** paired, "verdict": verdict})
    return pd.DataFrame(rows).set_index("setting")


def _settings(names) -> str:
    names = list(names)
    return "" if not names else names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def same_work_numbers(gap: pd.DataFrame) -> dict:
    """What :func:`same_work_gap`'s verdicts support, as the report's numbers: per group of settings (``Either``:
    either way; ``Slower`` / ``Faster``: cached slower / faster in every round over enough rounds; ``FewSlower`` /
    ``FewFaster``: one side, too few rounds) their count, their names and each one's per-round range
    (``kvbOne<group>{Count,Settings,Ranges}``), and for the two groups of too few rounds the most rounds and the
    largest chance that noise keeps one sign (``Rounds``, ``P``); ``kvbSignRounds``: the rounds it takes."""
    few = gap["verdict"] == "too few rounds"
    groups = {"Either": gap["verdict"] == "either way", "Slower": gap["verdict"] == "cached slower in every round",
              "Faster": gap["verdict"] == "cached faster in every round",
              "FewSlower": few & (gap["per-round high"] < 1), "FewFaster": few & ~(gap["per-round high"] < 1)}
    numbers = {"kvbSignRounds": SIGN_ROUNDS}
    for name, mask in groups.items():
        part = gap[mask]
        numbers.update({f"kvbOne{name}Count": len(part), f"kvbOne{name}Settings": _settings(part.index) or "--",
                        f"kvbOne{name}Ranges": "; ".join(f"{s}: {r['per-round low']:.2f} to {r['per-round high']:.2f}"
                                                         for s, r in part.iterrows()) or "--"})
        if name.startswith("Few"):
            numbers.update({f"kvbOne{name}Rounds": int(part["rounds"].max()) if len(part) else 0,
                            f"kvbOne{name}P": f"{part['p_sign'].max():.2f}" if len(part) else "--"})
    return numbers


def cached_slope_resamples(measured: pd.DataFrame, setting: str, *, resamples: int = 2000,
                           seed: int = 0) -> np.ndarray:
    """Bootstrap of a setting's cached per-token cost (seconds, the slope of the linear fit): each resample draws
    every cached point's runs with replacement, takes their median and refits."""
    part = measured[(measured["setting"] == setting) & measured["cache"]].sort_values("new_tokens")
    rng = np.random.default_rng(seed)
    lengths = part["new_tokens"].to_numpy()
    slopes = np.empty(resamples)
    for i in range(resamples):
        medians = [float(np.median(rng.choice(samples, size=len(samples)))) for samples in part["samples"]]
        slopes[i] = fit_growth(lengths, medians, degree=1)[1]
    return slopes


def per_token_difference(measured: pd.DataFrame, fits: dict, a: str, b: str, same_model: tuple[str, str], *,
                         level: float = 0.9, resamples: int = 2000, seed: int = 0) -> dict:
    """Do settings ``a`` and ``b`` differ in cached cost per token by more than the measurement resolves?

    ``ratio``: a's per-token cost / b's (the fits' slopes), with a percentile bootstrap interval at ``level``
    over the runs (:func:`cached_slope_resamples`). That interval only sees the scatter of runs within a sweep.
    ``same_model`` names two settings of the SAME model (same weights per token, different prompts): how far
    apart their per-token costs land, ``same_model_ratio`` (>= 1), is the spread between separate sweeps plus
    whatever the longer context adds to a step (small for the CPU profile's few hundred tokens; with a 32k prompt
    it is real, which only makes this test more conservative). ``resolved`` is True only when the interval
    excludes 1 AND the ratio is further from 1 than ``same_model_ratio``."""
    slope = {s: fits[s, True][1] for s in (a, b, *same_model)}
    ratio = slope[a] / slope[b]
    boot = (cached_slope_resamples(measured, a, resamples=resamples, seed=seed)
            / cached_slope_resamples(measured, b, resamples=resamples, seed=seed + 1))
    tail = (1 - level) / 2 * 100
    low, high = (float(v) for v in np.percentile(boot, [tail, 100 - tail]))
    c, d = same_model
    same = max(slope[c], slope[d]) / min(slope[c], slope[d])
    resolved = (low > 1 or high < 1) and max(ratio, 1 / ratio) > same
    return {"ratio": ratio, "low": low, "high": high, "level": level, "same_model_ratio": same,
            "resolved": bool(resolved)}


def weight_costs(model) -> dict:
    """A transformers model's shape (layers, MLP width, vocab, KV heads) and the weights (millions) a decode step
    multiplies by: attention, MLP, LM head and their sum (:func:`helpers.kv_cache.sweep.matmul_weights`)."""
    cfg = model.config
    groups = matmul_weights(model)
    return {"layers": cfg.num_hidden_layers, "MLP width": cfg.intermediate_size, "vocab": cfg.vocab_size,
            "KV heads": cfg.num_key_value_heads, "attention weights (M)": groups["attention"] / 1e6,
            "MLP weights (M)": groups["mlp"] / 1e6, "LM-head weights (M)": groups["lm_head"] / 1e6,
            "weights per token (M)": sum(groups.values()) / 1e6}


def source_excerpt(obj, start: str, stop: str | None = None) -> str:
    """The lines of ``obj``'s source from the line containing ``start`` up to the one containing ``stop`` (to the
    end without ``stop``)."""
    lines = inspect.getsource(obj).splitlines()
    first = next(i for i, line in enumerate(lines) if start in line)
    last = next((i for i, line in enumerate(lines) if stop and i > first and stop in line), len(lines) - 1)
    return "\n".join(lines[first : last + 1])
