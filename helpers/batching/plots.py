"""Figures of the batching notebook: batch occupancy over time and latency percentiles."""
from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator

from helpers import plotting

POLICY_COLORS = {"continuous": "C0", "static": "C1"}
# where both policies run a full batch their lines coincide: static's dashed line is drawn over continuous' wider
# solid one, so both stay visible
POLICY_LINES = {"continuous": dict(ls="-", lw=1.8, zorder=2), "static": dict(ls=(0, (3, 2)), lw=1.1, zorder=3)}


def occupancy_timeline(timelines: dict[str, dict[str, list]], batch_size: int):
    """One panel per workload: sequences per decode step over time, for each policy.

    ``timelines[workload][policy]`` is a list of ``[t, rows computed, rows still generating]`` per step; for
    static batching the shaded gap between the two is compute spent on requests that already finished. Static's
    line is dashed and drawn over continuous' solid one, which it follows wherever both keep a full batch.
    """
    fig, axes = plt.subplots(1, len(timelines), figsize=plotting.figsize(0.36), sharey=True, squeeze=False)
    for ax, (workload, by_policy) in zip(axes[0], timelines.items()):
        for policy, steps in by_policy.items():
            t, rows, active = zip(*steps)
            color = POLICY_COLORS[policy]
            ax.step(t, active, where="post", color=color, label=f"{policy}: generating", **POLICY_LINES[policy])
            if policy == "static":  # rows still computing for requests that are done
                ax.fill_between(t, active, rows, step="post", color=color, alpha=0.25, lw=0, label="static: wasted rows")
        ax.axhline(batch_size, color="gray", lw=0.6, ls="--")
        ax.set(title=workload.replace("_", " "), xlabel="time (s)", ylim=(0, batch_size + 0.5))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # it counts rows: no tick at 2.5
    axes[0][0].set_ylabel("sequences per decode step")
    fig.legend(*axes[0][-1].get_legend_handles_labels(), loc="lower center", ncol=3, fontsize="x-small",
               frameon=False)  # below the panels: the curves end low at the right, where a legend would sit
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig


def latency_percentiles(summary, metrics=("ttft", "tpot", "e2e")):
    """Bars of p50/p90/p99 per metric, policy and workload (``summary``: rows with workload, policy, *_pXX_s)."""
    fig, axes = plt.subplots(1, len(metrics), figsize=plotting.figsize(0.34), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        labels, values, colors = [], [], []
        for _, row in summary.iterrows():
            for q, alpha in ((50, 1.0), (90, 0.65), (99, 0.35)):
                labels.append(f"{row['workload'][:4]}·{row['policy'][:4]}·p{q}")
                values.append(row[f"{metric}_p{q}_s"] * (1000 if metric == "tpot" else 1))
                colors.append((*plt.matplotlib.colors.to_rgb(POLICY_COLORS[row["policy"]]), alpha))
        ax.barh(range(len(values)), values, color=colors)
        ax.set_yticks(range(len(values)), labels, fontsize="xx-small")
        ax.invert_yaxis()
        ax.set_xlabel(f"{metric.upper()} ({'ms' if metric == 'tpot' else 's'})")
    fig.tight_layout()
    return fig


def step_time(rows):
    """Decode step time and throughput against batch size (§3.1.1)."""
    fig, (left, right) = plt.subplots(1, 2, figsize=plotting.figsize(0.32))
    sizes = [r["batch"] for r in rows]
    left.plot(sizes, [r["step_s"] * 1000 for r in rows], marker="o")
    left.set(xscale="log", xlabel="batch size", ylabel="ms per decode step",
             ylim=(0, 1.1 * max(r["step_s"] * 1000 for r in rows)))  # room above the top marker
    right.plot(sizes, [r["tok_s"] for r in rows], marker="o", color="C2")
    right.set(xscale="log", xlabel="batch size", ylabel="tokens / s", ylim=(0, 1.1 * max(r["tok_s"] for r in rows)))
    for ax in (left, right):
        ax.set_xticks(sizes, [str(s) for s in sizes])
    fig.tight_layout()
    return fig
