"""helpers.specdec.compare and tree_figures: notebook 10's side-by-side comparison, cost model and pictures."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest
import torch

from helpers import bench
from helpers.specdec import tree_generate
from helpers.specdec.compare import (compare_methods, cost_model, depth_acceptance, expected_tau, method_label,
                                     method_specs, predicted_speedup, round_cost, summarise_methods)
from helpers.specdec.tree import TreeRound
from helpers.specdec.tree_figures import draw_tree, sweep_figure, tree_provenance, workload_figure
from tiny_models import PEAK, perturbed_copy, tiny_qwen3

SPECS = method_specs([2], [[4, 0.05]], [[2, 1]], [[3, 2, 4]], ngram=2, num_draft=4)


@pytest.fixture(scope="module")
def pair():
    target = tiny_qwen3(0, head_scale=PEAK)
    return target, perturbed_copy(target, 0.3, relative=True)


@pytest.fixture(scope="module")
def rows(pair):
    ids = torch.tensor([[5, 9, 2, 7, 5, 9, 2, 7, 5, 9]])  # repetitive: prompt lookup finds matches
    cases = [{"id": "p1", "source": "code", "input_ids": ids}, {"id": "p2", "source": "prose", "input_ids": ids[:, :4]}]
    return compare_methods(*pair, cases, SPECS, 12, repeats=1)


def test_labels_are_ascii_and_name_the_configuration():
    labels = [method_label(spec) for spec in SPECS]
    assert labels == ["AR", "linear g2", "adaptive g4 p<0.05", "static 2-1", "dynamic d3 k2 n4", "lookup n2 fixed 4",
                      "lookup n2 adaptive 4"]
    assert all(label.isascii() for label in labels)  # they go into the LaTeX report
    with pytest.raises(ValueError, match="unknown method"):
        method_label({"method": "beam"})


def test_every_method_reproduces_greedy_decoding(rows):
    assert len(rows) == 2 * len(SPECS)
    assert all(row["identical_to_ar"] for row in rows)
    assert all(row["new_tokens"] == 12 for row in rows)


def test_summary_pools_prompts_against_ar(rows):
    summary = summarise_methods(rows)
    assert summary.label.iloc[0] == "AR" and summary.speedup.iloc[0] == pytest.approx(1.0)
    assert summary.tau.iloc[0] == pytest.approx(1.0)  # AR: one token per target forward
    assert (summary.tau > 0.99).all() and summary.lossless.all()
    by_source = summarise_methods(rows, by=("source", "label"))
    assert set(by_source.source) == {"code", "prose"}


def test_ar_must_come_first(pair):
    with pytest.raises(ValueError, match="must start with"):
        compare_methods(*pair, [{"id": "x", "input_ids": torch.tensor([[1, 2]])}], SPECS[1:], 4)


def test_tau_from_depth_acceptance_is_eq4_generalised():
    rates = depth_acceptance([0, 1, 2, 2])
    assert rates[:2] == pytest.approx([3 / 4, 2 / 3]) and rates[2] == 0.0
    assert expected_tau(rates) == pytest.approx(1 + (0 + 1 + 2 + 2) / 4)  # 1 + mean accepted
    # constant acceptance alpha over gamma levels is Eq. 4: (1 - alpha^(gamma+1)) / (1 - alpha)
    assert expected_tau([0.5, 0.5, 0.5]) == pytest.approx((1 - 0.5 ** 4) / (1 - 0.5))


def test_round_costs_in_target_steps():
    costs = {"T_T": 10.0, "T_V": {1: 10.0, 5: 14.0, 9: 16.0}, "T_D": {1: 1.0, 2: 1.5, 4: 2.0}}
    assert round_cost({"method": "linear", "gamma": 4}, costs, 4) == pytest.approx((0.4, 1.4))
    assert round_cost({"method": "static", "topk": [2, 2, 1]}, costs, 10) == pytest.approx(((1 + 1.5 + 2) / 10, 1.6))
    assert round_cost({"method": "dynamic", "depth": 3, "topk": 4, "budget": 8}, costs, 8)[0] == pytest.approx(0.5)
    assert round_cost({"method": "lookup", "ngram": 3, "num_draft": 8, "adaptive": False}, costs, 2)[0] == 0.0
    assert predicted_speedup(3.0, [0.4], 1.4) == pytest.approx(3.0 / 1.8)


def test_cost_model_table(rows):
    costs = {"T_T": 1.0, "T_V": {1: 1.0, 16: 2.0}, "T_D": {1: 0.1, 4: 0.2}}
    table = cost_model(rows, costs)
    assert set(table.method) == {"linear", "adaptive", "static", "dynamic", "lookup"}
    assert (table.tau_model - table.tau).abs().max() < 1e-9  # no EOS: Eq. 4 with measured a_d is exact
    assert (table.predicted > 0).all()


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


def test_comparison_figures(rows):
    summary = summarise_methods(rows)
    assert sweep_figure(summary, "t").axes and workload_figure({"a": summary, "b": summary}).axes


def test_tree_benchmark_is_registered():
    assert "tree" in bench.BENCHMARKS


def test_copied_prefix_counts_the_reemitted_start_of_the_reference():
    from helpers.models import load_cpu_tokenizer
    from helpers.specdec.compare import copied_prefix

    tokenizer = load_cpu_tokenizer()
    case = {"prompt": "def f(x):\n    return x\n\ndef f(x):", "reference": "\n    return x\n"}
    reference = tokenizer(case["prompt"] + case["reference"])["input_ids"][len(tokenizer(case["prompt"])["input_ids"]):]
    assert copied_prefix(tokenizer, case, reference + [7, 7]) == (len(reference), len(reference))
    assert copied_prefix(tokenizer, case, reference[:2] + [reference[2] + 1]) == (2, len(reference))


def test_tree_explorer_steps_through_rounds(pair):
    from helpers.specdec.tree_figures import tree_explorer

    result = tree_generate(*pair, torch.tensor([[3, 1, 4, 1, 5]]), 8, tree="static", topk=(2, 1), depth=None,
                           budget=None, eos_token_id=-1, record_rounds=True)
    box = tree_explorer(result.rounds, None)
    slider, out = box.children
    assert (slider.min, slider.max, slider.value) == (1, len(result.rounds), 1)
    slider.value = len(result.rounds)  # redraws without error
    with pytest.raises(ValueError, match="record_rounds=True"):
        tree_explorer([], None)


def test_trees_are_compared_with_linear_of_their_depth(rows):
    from helpers.specdec.compare import nominal_depth, tau_against_linear

    assert nominal_depth({"method": "static", "topk": [2, 1, 1]}) == 3
    assert nominal_depth({"method": "lookup", "ngram": 3, "num_draft": 8}) is None
    table = tau_against_linear(summarise_methods(rows))
    assert list(table.tree) == ["static 2-1"] and list(table.linear) == ["linear g2"]  # d3 has no linear g3
