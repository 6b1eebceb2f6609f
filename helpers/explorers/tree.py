"""Notebook 10's tree explorer: one round's draft tree drawn with its accepted path (:func:`draw_tree`, also the
notebook's saved figure), the provenance of every emitted token (:func:`tree_provenance`, coloured like linear
speculation's), and :func:`tree_explorer`, a slider stepping through a generation's rounds."""
from __future__ import annotations

import matplotlib.pyplot as plt

from helpers.explorers.specdec import token_provenance
from helpers.specdec.tree import TreeRound

PATH, OTHER, CORRECTION, BONUS_COLOUR = "#2e7d32", "#9e9e9e", "#d9730d", "#2f5fb3"


def tree_provenance(rounds: list[TreeRound], n_tokens: int | None = None) -> list[tuple[int, str]]:
    """``(round, kind)`` per emitted token (accepted / corrected / bonus), as for linear speculation: a round
    emits its accepted path, then the target's token — a bonus when the path ended at a leaf of the tree."""
    accepted = [len(r.path) - 1 for r in rounds]
    # token_provenance calls the last token a bonus when every drafted level was accepted
    drafted = [a if r.bonus else a + 1 for a, r in zip(accepted, rounds)]
    return token_provenance(accepted, drafted, n_tokens)


def _layout(tree: TreeRound) -> dict[int, tuple[float, float]]:
    """x = depth, y = leaf order (a parent sits at the mean of its children), children in draft order."""
    children: dict[int, list[int]] = {n: [] for n in range(len(tree.tokens))}
    for node, parent in enumerate(tree.parents):
        if parent >= 0:
            children[parent].append(node)
    depth = tree.depths
    place: dict[int, tuple[float, float]] = {}
    next_leaf = [0.0]

    def visit(node: int) -> float:
        if not children[node]:
            y = next_leaf[0]
            next_leaf[0] += 1
        else:
            y = sum(visit(c) for c in children[node]) / len(children[node])
        place[node] = (depth[node], -y)
        return y

    visit(0)
    return place


def _label(tokenizer, token: int) -> str:
    text = tokenizer.decode([token]) if tokenizer is not None else str(token)
    text = text.replace("\n", "↵").replace("\t", "⇥").replace(" ", "·")
    return text if len(text) <= 10 else text[:9] + "…"


def tree_extent(trees) -> tuple[int, float]:
    """(deepest depth, lowest layout row) over ``trees``: drawn with one extent, every round's figure has the same
    size and axes (the explorer's figure no longer changes width from round to round)."""
    return (max(max(tree.depths) for tree in trees),
            min(min(y for _, y in _layout(tree).values()) for tree in trees))


def draw_tree(tree: TreeRound, tokenizer=None, ax=None, title: str | None = None, *, extent=None):
    """(``title`` is put before the round's summary.) One verified round: every draft node (its token; ``·`` is a
    space, ``↵`` a newline), the accepted path in green, and the target's token after it — orange when it corrects
    the draft, blue when it is a bonus. ``extent`` (:func:`tree_extent` of several rounds) fixes size and axes."""
    place = _layout(tree)
    depth, lowest = extent or tree_extent([tree])
    if ax is None:
        height = max(2.5, 0.32 * (1 - lowest))
        _, ax = plt.subplots(figsize=(1.6 * (depth + 2), min(height, 9)))
    on_path = set(tree.path)
    for node, parent in enumerate(tree.parents):
        if parent >= 0:
            (x0, y0), (x1, y1) = place[parent], place[node]
            both = node in on_path and parent in on_path
            ax.plot([x0, x1], [y0, y1], color=PATH if both else OTHER, lw=2.2 if both else 0.8, zorder=1)
    for node, (x, y) in place.items():
        colour = PATH if node in on_path else OTHER
        ax.text(x, y, _label(tokenizer, tree.tokens[node]), ha="center", va="center", fontsize=7, zorder=2,
                family="monospace", color="white" if node in on_path else "black",
                bbox=dict(boxstyle="round,pad=0.25", fc=colour if node in on_path else "#f2f2f2", ec=colour, lw=0.8))
    last = place[tree.path[-1]]
    colour = BONUS_COLOUR if tree.bonus else CORRECTION
    ax.plot([last[0], last[0] + 1], [last[1], last[1]], color=colour, lw=1.5, ls="--", zorder=1)
    ax.text(last[0] + 1, last[1], _label(tokenizer, tree.next_token), ha="center", va="center", fontsize=7,
            family="monospace", color="white", zorder=2, bbox=dict(boxstyle="round,pad=0.25", fc=colour, ec=colour))
    ax.set_xlim(-0.6, depth + 1.6)
    ys = [y for _, y in place.values()]
    ax.set_ylim(lowest - 0.8, max(ys) + 0.8)
    ax.set_xticks(range(depth + 2))
    ax.set_xticklabels(["root"] + [str(d) for d in range(1, depth + 2)])
    ax.set_xlabel("depth (root = the last committed token)")
    ax.set_yticks([])
    for side in ("left", "right", "top"):
        ax.spines[side].set_visible(False)
    accepted = len(tree.path) - 1
    summary = (f"{len(tree.tokens) - 1} draft nodes, {accepted} accepted, then a "
               f"{'bonus' if tree.bonus else 'correction'} from the target")
    ax.set_title(f"{title}: {summary}" if title else summary, fontsize=9)
    return ax


def tree_explorer(rounds: list[TreeRound], tokenizer=None, *, start: int = 0):
    """A slider over a generation's rounds, drawing each round's tree (notebook 10)."""
    import ipywidgets as widgets
    from IPython.display import display

    if not rounds:
        raise ValueError("no rounds to show: run tree_generate(..., record_rounds=True)")
    extent = tree_extent(rounds)  # one size for every round's figure
    slider = widgets.IntSlider(value=start + 1, min=1, max=len(rounds), description="round",
                               continuous_update=False, layout=widgets.Layout(width="60%"))
    out = widgets.Output()

    def show(change=None):
        with out:
            out.clear_output(wait=True)
            ax = draw_tree(rounds[slider.value - 1], tokenizer, extent=extent)
            plt.tight_layout()
            display(ax.figure)
            plt.close(ax.figure)

    slider.observe(show, names="value")
    show()
    return widgets.VBox([slider, out])
