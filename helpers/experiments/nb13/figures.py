"""Notebook 13's figures: speedup against τ per method (:func:`plot_speedup_tau`) and the acceptance by draft
position (:func:`plot_alpha_by_position`), one hue per drafter family."""
from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from helpers import plotting

FAMILY_COLOURS = {"draft model": "tab:blue", "Medusa heads": "tab:green", "feature draft": "tab:orange",
                  "prompt lookup": "tab:gray"}  # one hue per drafter, the same in every figure


def plot_speedup_tau(summary: pd.DataFrame, title: str):
    """Speedup over AR against τ, one marker per method, coloured by drafter."""
    fig, ax = plt.subplots(figsize=plotting.figsize(0.45))
    for name, group in summary[summary.drafter != "AR"].groupby("drafter", sort=False):
        ax.plot(group.tau, group.speedup, "o", color=FAMILY_COLOURS.get(name), label=name)
        for row in group.itertuples():
            ax.annotate(row.label, (row.tau, row.speedup), fontsize=5, xytext=(2, 2), textcoords="offset points")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set(xlabel=r"$\tau$ (new tokens per target forward)", ylabel="speedup over AR", title=title)
    ax.legend(fontsize="x-small", frameon=False)
    fig.tight_layout()
    return fig


def plot_alpha_by_position(alpha: pd.DataFrame, title: str):
    """a_d against draft position d, one line per method (pooled over every round), coloured by drafter (a second
    method of the same drafter dashed, a third dotted)."""
    fig, ax = plt.subplots(figsize=plotting.figsize(0.4))
    pooled = alpha[alpha.source == "all"]
    seen: dict[str, int] = {}
    for label, group in pooled.groupby("label", sort=False):
        family = group.drafter.iloc[0]
        style = ("o-", "s--", "^:")[seen.get(family, 0) % 3]
        seen[family] = seen.get(family, 0) + 1
        ax.plot(group.position, group.alpha, style, color=FAMILY_COLOURS.get(family), label=label)
    ax.set(xlabel="draft position d", ylabel="$a_d$ = P(reach d | reached d-1)", ylim=(0, 1), title=title)
    ax.legend(fontsize="x-small", frameon=False)
    fig.tight_layout()
    return fig
