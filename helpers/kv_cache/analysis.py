"""From the §2.1 sweep rows (notebook 03) to what the notebook prints, plots and the report quotes.

- :func:`measured_points`: the stored sweeps of this parameter setting as one DataFrame of points (median,
  interquartile range, runs, flag).
- :func:`fill_curves`: per setting and mode, the fitted growth (linear with the cache, quadratic without) and the
  curve over every n, measured where there is a measurement and extrapolated from the fit beyond a cap.
- :func:`speedup_table`: without / with cache per (setting, n), with which values are extrapolated and noisy.
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
    ``(model, prompt_tokens, no_cache_cap)`` of this parameter setting (rows from other settings are skipped)."""
    measured = []
    for _, run in runs.iterrows():
        if (run["model"], run["prompt_tokens"], run["no_cache_cap"]) != expected[run["setting"]]:
            continue  # rows from other parameter settings
        for row in run["rows"]:
            q1, q3 = np.percentile(row["time_s_samples"], [25, 75])
            measured.append({"setting": run["setting"], "model": run["model"], "cache": row["mode"] == "with cache",
                             "new_tokens": row["new_tokens"], "time_s": row["time_s_median"], "q1_s": q1, "q3_s": q3,
                             "spread": row["time_s_spread"], "runs": row["repeats"], "flagged": row["flagged"]})
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
    """Per (setting, n): time with and without the cache, their ratio, whether the no-cache time is extrapolated,
    and which modes stayed noisy (flagged)."""
    table = curves.pivot_table(index=["setting", "new_tokens"], columns="cache", values="time_s").rename(
        columns={True: "with cache (s)", False: "without cache (s)"})
    table["speedup"] = table["without cache (s)"] / table["with cache (s)"]
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


def explain_table(order, fits: dict, table: pd.DataFrame, measured: pd.DataFrame, prompt_lens: dict,
                  n_max: int) -> pd.DataFrame:
    """Per setting: prompt length, prefill and per-token costs from the fits, the quadratic share of the uncached
    time at ``n_max``, the speedup at n = 1 and n = ``n_max``, the first n with a speedup of at least 1.5, and how
    far the no-cache mode was measured."""
    explain = []
    for setting in order:
        _, c1 = fits[setting, True]
        _, u1, u2 = fits[setting, False]
        t_no = float(extrapolate(fits[setting, False], [n_max])[0])
        part = table.loc[setting]
        over = part.index[part["speedup"] >= 1.5]
        explain.append({
            "setting": setting, "prompt tokens": prompt_lens[setting],
            "prefill ms (n=1, cached)": float(part["with cache (s)"].iloc[0]) * 1e3,
            "cached ms/token": c1 * 1e3, "uncached ms/step (linear term)": u1 * 1e3,
            "uncached: quadratic share at n_max": u2 * n_max**2 / t_no,
            f"speedup at n={n_max}": float(part["speedup"].iloc[-1]),
            "speedup at n=1": float(part["speedup"].iloc[0]),
            "first n with speedup >= 1.5": str(int(over[0])) if len(over) else "not reached",
            "no-cache measured up to": int(measured[(measured["setting"] == setting)
                                                    & ~measured["cache"]]["new_tokens"].max()),
        })
    return pd.DataFrame(explain).set_index("setting")


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
