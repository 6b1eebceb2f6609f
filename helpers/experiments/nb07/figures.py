"""Figures of the speculative-decoding notebooks that need more than a few lines (the notebooks save and show them)."""
from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from helpers import plotting


def plot_by_source(by_source, per_prompt, title: str):
    """Notebook 07's per-source figure: alpha with its bootstrap interval (left) and the speedup with its interval
    and the per-prompt speedups as dots (right), one column per source of a
    :func:`~helpers.experiments.nb07.study.source_breakdown` frame, in its order.
    ``per_prompt``: the configuration's per-prompt rows."""
    fig, axes = plt.subplots(1, 2, figsize=plotting.figsize(0.4))
    order = list(by_source.index)
    points_all = pd.DataFrame(list(per_prompt)).assign(speedup=lambda d: d["ar_time_s"] / d["time_s"])
    for x, source in enumerate(order):
        row = by_source.loc[source]
        axes[0].errorbar(x, row["alpha"], yerr=[[row["alpha"] - row["alpha_low"]], [row["alpha_high"] - row["alpha"]]],
                         fmt="o", color="C0", capsize=3)
        points = points_all.loc[points_all["source"] == source, "speedup"]
        axes[1].plot([x + 0.15] * len(points), points, ".", color="grey", alpha=0.6, ms=4)
        axes[1].errorbar(x, row["speedup"],
                         yerr=[[row["speedup"] - row["speedup_low"]], [row["speedup_high"] - row["speedup"]]],
                         fmt="o", color="C1", capsize=3)
    for ax in axes:
        ax.set_xticks(range(len(order)), order)
    axes[0].set(ylabel="$\\hat\\alpha$ (95% bootstrap CI)", ylim=(0, 1), title="acceptance per source")
    axes[1].axhline(1.0, color="grey", lw=0.8)
    axes[1].set(ylabel="speedup over AR", title="speedup per source (dots: prompts)")
    fig.suptitle(title, fontsize="small")
    fig.tight_layout()
    return fig
