"""Notebook 14's figures: the engine's goodput and latency against load, one line per policy, and speculation's
speedup in a closed batch against batch size with Eq. 5's terms."""
from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from helpers.plotting import figsize

LABELS = {"none": "no speculation", "fixed": "fixed $\\gamma$", "adaptive": "policy (Eq. 5 per step)"}
STYLES = {"none": ("o-", "tab:grey"), "fixed": ("s--", "tab:orange"), "adaptive": ("D-", "tab:blue")}


def serving_figure(load: pd.DataFrame):
    """Three panels against the offered load (log axis, ticks at the loads): goodput, p50 time per output token and
    p99 time to first token, each the median over repeats with the repeats' range as a bar."""
    fig, axes = plt.subplots(1, 3, figsize=figsize(0.42))
    panels = (("goodput_tok_s", 1.0, "goodput (tokens/s)"), ("tpot_p50_s", 1e3, "p50 TPOT (ms)"),
              ("ttft_p99_s", 1e3, "p99 TTFT (ms)"))
    for policy, runs in load.groupby("policy", sort=False):
        marker, colour = STYLES[policy]
        for ax, (column, scale, label) in zip(axes, panels):
            stats = runs.groupby("load")[column].agg(["median", "min", "max"]) * scale
            ax.errorbar(stats.index, stats["median"], yerr=[stats["median"] - stats["min"],
                        stats["max"] - stats["median"]], fmt=marker, color=colour, capsize=2,
                        label=LABELS[policy])
            ax.set_ylabel(label)
    loads = sorted(load["load"].unique())
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xticks(loads, [f"{x:g}" for x in loads])
        ax.minorticks_off()
    axes[1].set_xlabel("offered load (arrival rate x one request's service time alone)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize="x-small", frameon=False)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return fig


def batch_figure(batch: pd.DataFrame):
    """Left: fixed-γ speculation over plain decoding in a closed batch, measured and Eq. 5 from the same runs'
    terms; right: the terms, c = T_D/T_T and T_V/T_T, against batch size."""
    rows = batch.sort_values("batch")
    fig, axes = plt.subplots(1, 2, figsize=figsize(0.34, 0.8))
    axes[0].plot(rows.batch, rows.speedup, "o-", label="measured")
    axes[0].plot(rows.batch, rows.eq5_speedup, "--", label="Eq. 5")
    axes[0].axhline(1.0, color="grey", lw=0.8)
    axes[0].set_ylabel("speedup (x plain)")  # short: the panel is low
    axes[0].legend()
    axes[1].plot(rows.batch, rows.verify_ratio, "s-", label=r"$T_V(\gamma)/T_T$")
    axes[1].plot(rows.batch, rows.draft_ratio, "o--", label=r"$c = T_D/T_T$")
    axes[1].set_ylim(0, 1.1 * float(max(rows.verify_ratio.max(), 1.0)))
    axes[1].legend()
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size")
    fig.tight_layout()
    return fig
