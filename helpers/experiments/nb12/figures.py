"""Notebook 12's figures: the speedup against a draft's accuracy and against its latency, depth against latency,
and the speedup against gamma with Eq. 5's curve per draft."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import MaxNLocator

from helpers.plotting import figsize


MARKERS = "osD^vP*Xh"


def _styles(table: pd.DataFrame) -> dict:
    """A distinct colour (tab10) and marker per draft: up to ten drafts stay apart in print."""
    palette = plt.get_cmap("tab10")
    return {name: (palette(i % 10), MARKERS[i % len(MARKERS)]) for i, name in enumerate(table.draft)}


def _short(name: str) -> str:
    return name.removeprefix("draft-")


def design_figure(table: pd.DataFrame):
    """Three panels, one hollow point per draft (a colour and marker each, named in one legend below the panels): best
    speedup against the per-token acceptance alpha (95% bootstrap interval over prompts), against the draft's
    latency c_round, and the draft's decode time T_D against its number of layers."""
    fig, axes = plt.subplots(1, 3, figsize=figsize(0.42))
    styles = _styles(table)
    hollow = dict(mfc="none", mew=1.2, ms=6)  # drafts of one depth and about one latency overlap: both stay visible
    for row in table.itertuples():
        colour, marker = styles[row.draft]
        axes[0].errorbar(row.alpha, row.speedup, xerr=[[row.alpha - row.alpha_low], [row.alpha_high - row.alpha]],
                         fmt=marker, color=colour, capsize=2, alpha=0.9, label=_short(row.draft), **hollow)
        axes[1].plot(row.c_round, row.speedup, marker, color=colour, **hollow)
        axes[2].plot(row.layers, row.T_D_ms, marker, color=colour, **hollow)
    axes[0].set_xlabel(r"per-token acceptance $\hat\alpha$ (95% CI)")
    axes[1].set_xlabel(r"$c = T_D/T_T$ in a round")
    for ax in axes[:2]:
        ax.set_ylabel("best speedup over AR")
    axes[2].set_xlabel("draft layers")
    axes[2].set_ylabel(r"$T_D$ (ms per token)")
    axes[2].set_ylim(bottom=0)
    axes[2].xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=min(len(table), 7), fontsize="x-small",
               frameon=False)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig


def gamma_figure(gammas: pd.DataFrame, table: pd.DataFrame):
    """One small panel per draft, on shared axes: measured speedup against gamma (solid), Eq. 5's curve from the
    draft's measured terms (dashed, :func:`~helpers.experiments.nb12.study.eq5_curve`), the measured best (enlarged)
    and Eq. 5's optimum (open circle)."""
    columns = min(4, len(table))
    rows_ = -(-len(table) // columns)
    fig, axes = plt.subplots(rows_, columns, figsize=figsize(0.28 * rows_), sharex=True, sharey=True, squeeze=False)
    styles = _styles(table)
    for ax, row in zip(axes.flat, table.itertuples()):
        rows = gammas[gammas.draft == row.draft].sort_values("gamma")
        colour, _ = styles[row.draft]
        ax.plot(rows.gamma, rows.speedup, "o-", color=colour, ms=3, label="measured")
        grid = range(1, max(int(rows.gamma.max()), row.eq5_gamma) + 1)
        ax.plot(list(grid), [row.eq5_curve[g] for g in grid], "--", color="black", lw=0.9, label="Eq. 5")
        ax.plot(row.best_gamma, row.speedup, "o", color=colour, ms=7)
        ax.plot(row.eq5_gamma, row.eq5_speedup, "o", mfc="none", color="black", ms=8, label="Eq. 5 optimum")
        ax.axhline(1.0, color="grey", lw=0.6)
        ax.set_title(_short(row.draft), fontsize="small")
    for ax in axes.flat[len(table):]:
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel(r"$\gamma$")
    for ax in axes[:, 0]:
        ax.set_ylabel("speedup")
    fig.legend(*axes.flat[0].get_legend_handles_labels(), loc="lower center", ncol=3, fontsize="x-small",
               frameon=False)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig


def depth_scale_figure(family: pd.DataFrame, scale: pd.DataFrame, scale_label: str):
    """Decode-step time against depth at equal parameters, relative to the shallowest model, at two scales: the CPU
    pair's draft family (``family``: layers, T_D_ms) and random-weight models of a handout model's size (``scale``:
    layers, step_ms); the dotted line is time proportional to depth (every layer a fixed cost)."""
    fig, ax = plt.subplots(figsize=figsize(0.32, 0.9))
    for frame, column, label in ((family, "T_D_ms", "CPU pair drafts (1.6M parameters)"),
                                 (scale, "step_ms", scale_label)):
        rows = frame.sort_values("layers")
        ax.plot(rows.layers, rows[column] / rows[column].iloc[0], "o-", label=label)
    depths = np.array(sorted(set(family.layers) | set(scale.layers)), dtype=float)
    ax.plot(depths, depths / depths.min(), ":", color="grey", label="proportional to depth")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("layers (equal parameters)")
    ax.set_ylabel("step time / shallowest")
    ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.02, 1.0))  # outside: the dotted line crosses
    fig.tight_layout()
    return fig
