"""Notebook 12's figures: the speedup against a draft's accuracy and against its latency, depth against latency,
and the speedup against gamma with Eq. 5's curve per draft."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from helpers.plotting import figsize


def _colours(table: pd.DataFrame) -> dict:
    palette = plt.get_cmap("viridis")(np.linspace(0.05, 0.85, len(table)))
    return dict(zip(table.draft, palette))


def _label(ax, table, x, y) -> None:
    for row in table.itertuples():
        ax.annotate(row.draft.removeprefix("draft-"), (getattr(row, x), getattr(row, y)), fontsize="x-small",
                    xytext=(3, 3), textcoords="offset points")


def design_figure(table: pd.DataFrame):
    """Three panels, one point per draft: best speedup against alpha (95% bootstrap interval over prompts),
    against the draft's latency c_round, and the draft's decode time T_D against its number of layers."""
    fig, axes = plt.subplots(1, 3, figsize=figsize(0.36))
    colours = _colours(table)
    for row in table.itertuples():
        colour = colours[row.draft]
        marker = "s" if row.shared_embedding else "o"
        axes[0].errorbar(row.alpha, row.speedup, xerr=[[row.alpha - row.alpha_low], [row.alpha_high - row.alpha]],
                         fmt=marker, color=colour, capsize=2)
        axes[1].plot(row.c_round, row.speedup, marker, color=colour)
        axes[2].plot(row.layers, row.T_D_ms, marker, color=colour)
    _label(axes[0], table, "alpha", "speedup")
    _label(axes[1], table, "c_round", "speedup")
    _label(axes[2], table, "layers", "T_D_ms")
    axes[0].set_xlabel(r"acceptance $\alpha$ (95% CI)")
    axes[1].set_xlabel(r"$c = T_D/T_T$ in a round")
    for ax in axes[:2]:
        ax.set_ylabel("best speedup over AR")
    axes[2].set_xlabel("draft layers")
    axes[2].set_ylabel(r"$T_D$ (ms per token)")
    axes[2].set_ylim(bottom=0)
    fig.tight_layout()
    return fig


def gamma_figure(gammas: pd.DataFrame, table: pd.DataFrame):
    """Measured speedup against gamma per draft (solid), Eq. 5's curve from the draft's measured terms (dashed,
    :func:`~helpers.experiments.draft_design.eq5_curve`), the measured optimum (filled) and Eq. 5's (open)."""
    fig, ax = plt.subplots(figsize=figsize(0.42, 0.9))
    colours = _colours(table)
    for row in table.itertuples():
        rows = gammas[gammas.draft == row.draft].sort_values("gamma")
        colour = colours[row.draft]
        ax.plot(rows.gamma, rows.speedup, "o-", color=colour, label=row.draft.removeprefix("draft-"))
        grid = range(1, max(int(rows.gamma.max()), row.eq5_gamma) + 1)
        ax.plot(list(grid), [row.eq5_curve[g] for g in grid], "--", color=colour, alpha=0.6)
        ax.plot(row.eq5_gamma, row.eq5_speedup, "o", mfc="none", color=colour, ms=9)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xlabel(r"draft tokens per round $\gamma$")
    ax.set_ylabel("speedup over AR")
    ax.legend(fontsize="x-small", title="measured;\nEq. 5 dashed,\nits optimum open", title_fontsize="x-small",
              loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig


def depth_scale_figure(family: pd.DataFrame, scale: pd.DataFrame, scale_label: str):
    """Decode-step time against depth at equal parameters, relative to the shallowest model, at two scales: the CPU
    pair's draft family (``family``: layers, T_D_ms) and random-weight models of a handout model's size (``scale``:
    layers, step_ms); the dotted line is time proportional to depth (every layer a fixed cost)."""
    fig, ax = plt.subplots(figsize=figsize(0.42, 0.6))
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
    ax.legend(fontsize="x-small")
    fig.tight_layout()
    return fig
