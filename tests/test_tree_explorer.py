"""helpers.explorers.tree: notebook 10's tree drawing, the provenance of every emitted token, and the explorer that
steps through a generation's rounds."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest
import torch

from helpers.explorers import draw_tree, tree_explorer, tree_extent, tree_provenance
from helpers.specdec import tree_generate
from helpers.specdec.tree import TreeRound
from tiny_models import PEAK, perturbed_copy, tiny_qwen3


@pytest.fixture(scope="module")
def pair():
    target = tiny_qwen3(0, head_scale=PEAK)
    return target, perturbed_copy(target, 0.3, relative=True)


def test_tree_pictures_and_provenance(pair):
    result = tree_generate(*pair, torch.tensor([[3, 1, 4, 1, 5]]), 10, tree="dynamic", depth=3, topk=2, budget=5,
                           eos_token_id=-1, record_rounds=True)
    kinds = tree_provenance(result.rounds)
    assert len(kinds) == 10
    assert sum(kind == "accepted" for _, kind in kinds) == result.stats.accepted
    ax = draw_tree(result.rounds[0], None, title="round 1")
    assert ax.get_title().startswith("round 1: ")
    bonus = TreeRound(tokens=[1, 2, 3], parents=[-1, 0, 0], scores=[0, -1, -2], path=[0, 1], next_token=4)
    assert bonus.bonus and tree_provenance([bonus]) == [(1, "accepted"), (1, "bonus")]


def test_tree_explorer_steps_through_rounds(pair):
    result = tree_generate(*pair, torch.tensor([[3, 1, 4, 1, 5]]), 8, tree="static", topk=(2, 1), depth=None,
                           budget=None, eos_token_id=-1, record_rounds=True)
    box = tree_explorer(result.rounds, None)
    slider, out = box.children
    assert (slider.min, slider.max, slider.value) == (1, len(result.rounds), 1)
    slider.value = len(result.rounds)  # redraws without error
    with pytest.raises(ValueError, match="record_rounds=True"):
        tree_explorer([], None)


def test_every_round_is_drawn_at_one_size(pair):
    """Regression: the tree explorer's figure changed width from round to round."""
    import matplotlib.pyplot as plt

    result = tree_generate(*pair, torch.tensor([[3, 1, 4, 1, 5]]), 24, tree="dynamic", depth=4, topk=2, budget=6,
                           eos_token_id=-1, record_rounds=True)
    extent = tree_extent(result.rounds)
    axes = [draw_tree(r, None, extent=extent) for r in result.rounds]
    assert len({tuple(ax.figure.get_size_inches()) for ax in axes}) == 1
    assert len({ax.get_xlim() for ax in axes}) == 1 and len({ax.get_ylim()[0] for ax in axes}) == 1
    for ax in axes:
        plt.close(ax.figure)
