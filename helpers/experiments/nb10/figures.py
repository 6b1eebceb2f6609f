"""Notebook 10's figures of the method comparison: τ and speedup against the nodes per round, the best of each family
per workload, Eq. 5 against the measurement and the cost of a round's forwards (the tree drawing and its explorer:
:mod:`helpers.explorers.tree`)."""
from __future__ import annotations

import matplotlib.pyplot as plt

from helpers.plotting import place_labels, plain_log_axis

FAMILY_COLOURS = {"ar": "#000000", "linear": "#1f77b4", "adaptive": "#17becf", "static": "#ff7f0e",
                  "dynamic": "#d62728", "lookup": "#2ca02c"}
# the abbreviations of the point labels, spelled out under the plots
LABEL_KEY = {"g5": "γ drafts per round", "g8 p<0.05": "at most 8, stop when the draft's probability < 0.05",
             "2-1-1-1-1": "children per depth of a static tree",
             "d6 k3 n12": "dynamic tree of depth 6, top-3 expansion, 12 nodes",
             "n3 fixed 8": "prompt lookup with 3-grams, 8 drafts"}


def sweep_figure(summary, title: str = ""):
    """τ (left) and measured speedup over AR (right) against the nodes verified per round, one point per method
    configuration coloured by family: what more nodes buy in accepted tokens and cost in time. Labels avoid each
    other (:func:`helpers.plotting.place_labels`); a key under the plots spells the abbreviations out."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.8))
    methods = summary[summary["method"] != "ar"]
    for family, group in methods.groupby("method", sort=False):
        for ax, column in zip(axes, ("tau", "speedup")):
            ax.scatter(group.nodes, group[column], color=FAMILY_COLOURS.get(family, "grey"), label=family, s=28,
                       zorder=3)
    axes[0].set_ylabel("τ: new tokens per target forward")
    axes[1].set_ylabel("speedup over AR (wall clock)")
    axes[1].axhline(1.0, color="black", lw=0.8, ls=":")
    for ax in axes:  # log nodes: the chains' 2-8 nodes, crowded at the left of a linear axis, spread out
        ax.set_xscale("log")
        plain_log_axis(ax.xaxis)
        ax.set_xlabel("draft tokens verified per round (nodes, log scale)")
    axes[0].legend(fontsize=7, loc="lower right")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    key = [f"{short} = {meaning}" for short, meaning in LABEL_KEY.items()]
    fig.text(0.5, 0.01, "labels: " + ";  ".join(key[:3]) + ";\n" + ";  ".join(key[3:]), ha="center", va="bottom",
             fontsize=6.5)
    fig.canvas.draw()  # label boxes are measured in drawn pixels
    for ax, column in zip(axes, ("tau", "speedup")):
        place_labels(ax, list(zip(methods.nodes, methods[column])),
                     [label.split(" ", 1)[-1] for label in methods.label],
                     [FAMILY_COLOURS.get(m, "grey") for m in methods.method])
    return fig


def workload_figure(summaries: dict, labels: dict | None = None):
    """Best configuration of each family per workload (speedup over AR, τ printed on the bar); ``labels`` maps a
    workload to its legend entry (default: its name)."""
    families = [f for f in FAMILY_COLOURS if f != "ar"]
    fig, ax = plt.subplots(figsize=(8, 3.4))
    width = 0.8 / len(summaries)
    for i, (workload, summary) in enumerate(summaries.items()):
        for j, family in enumerate(families):
            group = summary[summary.method == family]
            if group.empty:
                continue
            best = group.loc[group.speedup.idxmax()]
            x = j + (i - (len(summaries) - 1) / 2) * width
            ax.bar(x, best.speedup, width * 0.95, color=FAMILY_COLOURS[family], alpha=1.0 if i == 0 else 0.55,
                   hatch=None if i == 0 else "//", edgecolor="white")
            ax.text(x, best.speedup + 0.03, f"τ {best.tau:.1f}", ha="center", fontsize=6)
    ax.axhline(1.0, color="black", lw=0.8, ls=":")
    ax.set_xticks(range(len(families)))
    ax.set_xticklabels(families)
    ax.set_ylabel("best speedup over AR")
    handles = [plt.Rectangle((0, 0), 1, 1, fc="grey", alpha=1.0 if i == 0 else 0.55, hatch=None if i == 0 else "//")
               for i in range(len(summaries))]
    ax.legend(handles, [(labels or {}).get(name, name) for name in summaries], fontsize=7, loc="upper left")
    fig.tight_layout()
    return fig


def cost_model_figure(model_table):
    """Eq. 5 for every method, predicted from measured acceptance and forward costs, against the measurement."""
    fig, ax = plt.subplots(figsize=(4.6, 4.0))
    for family, group in model_table.groupby("method", sort=False):
        ax.scatter(group.measured, group.predicted, color=FAMILY_COLOURS.get(family, "grey"), label=family, s=26)
    low = min(model_table.measured.min(), model_table.predicted.min()) * 0.9
    high = max(model_table.measured.max(), model_table.predicted.max()) * 1.08
    ax.plot([low, high], [low, high], color="black", lw=0.8, ls=":", label="prediction = measurement")
    ax.set_xlim(low, high)
    ax.set_ylim(low, high)
    ax.set_xlabel("measured decode speedup")
    ax.set_ylabel("Eq. 5 prediction (measured terms)")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    if "label" in model_table:  # each point named, so that the text's claims about single methods can be checked
        fig.canvas.draw()  # label boxes are measured in drawn pixels
        place_labels(ax, list(zip(model_table.measured, model_table.predicted)), list(model_table.label),
                     [FAMILY_COLOURS.get(m, "grey") for m in model_table.method], fontsize=5)
    return fig


def forward_costs_figure(costs: dict):
    """What a round costs in target decode steps: a target forward over p positions, T_V(p - 1)/T_T (it verifies
    p - 1 drafted tokens), and a draft forward over k nodes, T_D(k)/T_T (``costs``: ``forward_costs``, int keys)."""
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    for key, style, label in (("T_V", "o-", r"target forward over $p$ positions, $T_V(p-1)/T_T$"),
                              ("T_D", "s-", r"draft forward over $k = p$ nodes, $T_D(k)/T_T$")):
        positions = sorted(costs[key])
        ax.plot(positions, [costs[key][n] / costs["target_step_s"] for n in positions], style, label=label)
    ax.set_xlabel("positions in the forward ($p$)")
    ax.set_ylabel("cost in target decode steps")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
