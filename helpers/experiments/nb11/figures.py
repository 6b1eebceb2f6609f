"""Notebook 11's figures: does the long target use its context, the measured Eq. 5 terms and the speedup against
batch per context length, and what the self-draft's window buys."""
from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from helpers.plotting import figsize


def context_use_figure(loss_by_position: dict[str, dict[str, float]]):
    """Held-out loss per position bucket, one line per model: a model that uses context gets better late."""
    fig, ax = plt.subplots(figsize=figsize(0.38, 0.7))
    for name, losses in loss_by_position.items():
        ax.plot(list(losses), list(losses.values()), "o-", label=name)
    ax.set_xlabel("token positions in a held-out window")
    ax.set_ylabel("held-out loss (nats/token)")
    ax.legend()
    return fig


def _by_context(frame: pd.DataFrame):
    contexts = sorted(frame.context.unique())
    colours = [plt.get_cmap("tab10")(i % 10) for i in range(len(contexts))]  # distinct hues: contexts stay apart
    return [(context, colour, frame[frame.context == context].sort_values("batch")) for context, colour in
            zip(contexts, colours)]


def terms_figure(frame: pd.DataFrame, short_batch: pd.DataFrame | None = None):
    """Three panels over the (context, batch) grid, a colour per context: c = T_D/T_T against the KV/weight byte
    ratio, T_V/T_T against batch, and the measured full-batch speedup against batch (solid) with Eq. 5's prediction
    from the same runs' terms (dashed); ``short_batch`` (batch, speedup): notebook 09's separate-draft speculation
    at short context, for contrast (black squares). The whole-run speedup is in the notebook's table."""
    fig, axes = plt.subplots(1, 3, figsize=figsize(0.42))
    for context, colour, rows in _by_context(frame):
        label = f"{context} tokens"
        axes[0].plot(rows.kv_weight_ratio, rows.draft_ratio, "o-", color=colour, label=label)
        axes[1].plot(rows.batch, rows.verify_ratio, "o-", color=colour)
        axes[2].plot(rows.batch, rows.full_batch_speedup, "o-", color=colour)
        axes[2].plot(rows.batch, rows.eq5_speedup, "--", color=colour, alpha=0.8)
    if short_batch is not None and len(short_batch):
        axes[0].plot([], [], "s-", color="black", label="nb 09 (draft model)")  # its legend entry; drawn right
        axes[2].plot(short_batch.batch, short_batch.speedup, "s-", color="black")
    axes[0].plot([], [], "--", color="grey", label="Eq. 5 (right)")
    axes[0].set_xscale("log")
    axes[0].set_xlabel("KV bytes / weight bytes per step")
    axes[0].set_ylabel(r"$c = T_D/T_T$")
    axes[1].set_ylabel(r"$T_V(\gamma)/T_T$")
    axes[2].set_ylabel("speedup over batched AR")  # full-batch curves; nb 09: whole run
    axes[2].axhline(1.0, color="grey", lw=0.8)
    for ax in axes[1:]:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize="x-small", frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig


def window_figure(frame: pd.DataFrame):
    """Self-draft window against alpha (95 % Wilson interval), the draft's cost c and the speedup."""
    rows = frame.sort_values("window")
    fig, axes = plt.subplots(1, 2, figsize=figsize(0.36, 0.8))
    axes[0].errorbar(rows.window, rows.alpha, yerr=[rows.alpha - rows.alpha_low, rows.alpha_high - rows.alpha],
                     fmt="o-", capsize=3, label=r"$\alpha$")
    axes[0].plot(rows.window, rows.draft_ratio, "s--", label=r"$c = T_D/T_T$")
    axes[0].set_ylim(0, max(1.05, 1.05 * float(rows.draft_ratio.max())))
    axes[0].legend()
    axes[1].plot(rows.window, rows.full_batch_speedup, "o-", label="full batch")
    axes[1].plot(rows.window, rows.eq5_speedup, "--", label="Eq. 5")
    axes[1].plot(rows.window, rows.speedup, "x:", label="whole run")
    axes[1].axhline(1.0, color="grey", lw=0.8)
    axes[1].set_ylabel("speedup over batched AR")
    axes[1].legend()
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("draft window (tokens, + sinks)")
    fig.tight_layout()
    return fig
