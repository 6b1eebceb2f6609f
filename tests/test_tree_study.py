"""helpers.experiments.comparison, nb10.study and nb10.figures: notebook 10's side-by-side comparison, cost model and figures
(the tree drawing and its explorer: tests/test_tree_explorer.py)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pandas as pd
import pytest
import torch

from helpers import bench
from helpers.specdec import tree_generate
from helpers.experiments.comparison import (compare_methods, depth_acceptance, expected_tau, predicted_speedup,
                                            summarise_methods)
from helpers.experiments.nb10.study import (context_coverage, cost_model, cost_model_agreement, method_specs,
                                            per_prompt_speedup, ranking_beyond_noise, round_cost, tied_with_fastest)
from helpers.specdec.methods import label as method_label
from helpers.specdec.tree import TreeRound
from helpers.experiments.nb10.figures import sweep_figure, workload_figure
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
    costs = {"target_step_s": 10.0, "T_V": {1: 10.0, 5: 14.0, 9: 16.0}, "T_D": {1: 1.0, 2: 1.5, 4: 2.0}}
    assert round_cost({"method": "linear", "gamma": 4}, costs, 4) == pytest.approx((0.4, 1.4))
    assert round_cost({"method": "static", "topk": [2, 2, 1]}, costs, 10) == pytest.approx(((1 + 1.5 + 2) / 10, 1.6))
    assert round_cost({"method": "dynamic", "depth": 3, "topk": 4, "budget": 8}, costs, 8)[0] == pytest.approx(0.5)
    assert round_cost({"method": "lookup", "ngram": 3, "num_draft": 8, "adaptive": False}, costs, 2)[0] == 0.0
    assert predicted_speedup(3.0, [0.4], 1.4) == pytest.approx(3.0 / 1.8)


def test_cost_model_table(rows):
    costs = {"target_step_s": 1.0, "T_V": {1: 1.0, 16: 2.0}, "T_D": {1: 0.1, 4: 0.2}}
    table = cost_model(rows, costs)
    assert set(table.method) == {"linear", "adaptive", "static", "dynamic", "lookup"}
    # Eq. 4 generalised with the measured a_d IS the measured tau (no EOS), so the table feeds the measured tau
    # to Eq. 5 and has no "predicted tau" column that would merely repeat it
    assert "tau_model" not in table
    assert all(expected_tau(r.acceptance_by_depth) == pytest.approx(r.tau) for r in table.itertuples())
    assert table.predicted.to_numpy() == pytest.approx((table.tau / (table.draft_cost + table.verify_cost)).to_numpy())


def test_cost_model_agreement_per_family_and_rank():
    table = pd.DataFrame([
        {"label": "linear g3", "method": "linear", "predicted": 1.5, "measured": 1.5},
        {"label": "linear g5", "method": "linear", "predicted": 1.4, "measured": 1.4},
        {"label": "static 2-1", "method": "static", "predicted": 1.8, "measured": 1.2},  # 1.5x too optimistic
        {"label": "lookup n3 fixed 8", "method": "lookup", "predicted": 1.0, "measured": 2.0},
    ])
    agreement = cost_model_agreement(table)
    assert agreement["by_family"] == {"linear": pytest.approx(1.0), "static": pytest.approx(1.5),
                                      "lookup": pytest.approx(0.5)}
    assert agreement["family_spread"] == pytest.approx(3.0)
    assert agreement["top_predicted"] == "static 2-1" and agreement["top_measured"] == "linear g3"
    assert agreement["top_measured_rank"] == 3 and agreement["draft_model_methods"] == 3
    assert agreement["rank_corr"] == pytest.approx(table.predicted.rank().corr(table.measured.rank()))
    same = cost_model_agreement(table.assign(predicted=1.1 * table.measured))
    assert same["family_spread"] == pytest.approx(1.0) and same["rank_corr"] == pytest.approx(1.0)
    assert same["top_measured_rank"] == 1
    with pytest.raises(ValueError, match="empty"):
        cost_model_agreement(table.iloc[:0])


def test_context_coverage_counts_continued_ngrams():
    prompt = [1, 2, 3, 4, 5]
    # the 3-token grams (ngram + 1) ending at each output token: (4,5,9) (5,9,1) (9,1,2) (1,2,3) (2,3,4);
    # the last two are in the prompt
    cover = context_coverage(prompt, [9, 1, 2, 3, 4], ngram=2)
    assert cover == {"prompt": pytest.approx(2 / 5), "context": pytest.approx(2 / 5)}
    # a continuation that repeats its own output scores in "context" but not in "prompt": the grams (8,1) (1,2)
    # (2,1) are new, then (1,2) (2,1) (1,2) repeat the output
    loop = context_coverage([7, 8], [1, 2, 1, 2, 1, 2], ngram=1)
    assert loop["prompt"] == 0.0 and loop["context"] == pytest.approx(3 / 6)
    assert context_coverage(prompt, [4, 5], ngram=3)["prompt"] == 0.0  # (3,4,5,4), (4,5,4,5): not in the prompt
    with pytest.raises(ValueError, match="ngram"):
        context_coverage(prompt, [1], ngram=0)
    with pytest.raises(ValueError, match="no generated tokens"):
        context_coverage(prompt, [])


def test_per_prompt_speedup(rows):
    speedups = per_prompt_speedup(rows, "linear g2")
    assert list(speedups.index) == ["p1", "p2"] and (speedups > 0).all()
    frame = pd.DataFrame(rows).set_index(["id", "label"]).seconds
    assert speedups["p1"] == pytest.approx(frame["p1", "AR"] / frame["p1", "linear g2"])
    with pytest.raises(ValueError, match="no rows"):
        per_prompt_speedup(rows, "linear g9")


def test_first_choice_calibration_compares_draft_probability_with_acceptance():
    from math import log

    from helpers.experiments.nb10.study import first_choice_calibration

    # root -> children 1 (p 0.6) and 2 (p 0.3); node 1 -> child 3 (p 0.5 given 1). The target takes 1, then not 3.
    tree = TreeRound(tokens=[0, 1, 2, 3], parents=[-1, 0, 0, 1], scores=[0, log(0.6), log(0.3), log(0.3)],
                     path=[0, 1], next_token=9)
    result = first_choice_calibration([tree])
    assert {k: result[k] for k in ("mean_probability", "accepted_rate", "tested")} == {
        "mean_probability": pytest.approx((0.6 + 0.5) / 2), "accepted_rate": 0.5, "tested": 2}
    # regression: one example's few dozen nodes were read as "under-confident" without an interval
    assert result["accepted_low"] < 0.5 < result["accepted_high"] and result["accepted_high"] - result["accepted_low"] > 0.5
    with pytest.raises(ValueError, match="record rounds"):
        first_choice_calibration([])


def test_comparison_figures(rows):
    summary = summarise_methods(rows)
    assert sweep_figure(summary, "t").axes and workload_figure({"a": summary, "b": summary}).axes
    legend = workload_figure({"a": summary, "b": summary}, labels={"a": "A (90%)"}).axes[0].get_legend()
    assert [text.get_text() for text in legend.get_texts()] == ["A (90%)", "b"]


def test_tree_benchmark_is_registered():
    assert "tree" in bench.BENCHMARKS


def test_copied_prefix_counts_the_reemitted_start_of_the_reference():
    from helpers.models import load_cpu_tokenizer
    from helpers.experiments.nb10.study import copied_prefix

    tokenizer = load_cpu_tokenizer()
    case = {"prompt": "def f(x):\n    return x\n\ndef f(x):", "reference": "\n    return x\n"}
    reference = tokenizer(case["prompt"] + case["reference"])["input_ids"][len(tokenizer(case["prompt"])["input_ids"]):]
    assert copied_prefix(tokenizer, case, reference + [7, 7]) == (len(reference), len(reference))
    assert copied_prefix(tokenizer, case, reference[:2] + [reference[2] + 1]) == (2, len(reference))


def test_trees_are_compared_with_linear_of_their_depth(rows):
    from helpers.experiments.nb10.study import nominal_depth, tau_against_linear

    assert nominal_depth({"method": "static", "topk": [2, 1, 1]}) == 3
    assert nominal_depth({"method": "lookup", "ngram": 3, "num_draft": 8}) is None
    table = tau_against_linear(summarise_methods(rows))
    assert list(table.tree) == ["static 2-1"] and list(table.linear) == ["linear g2"]  # d3 has no linear g3


def test_in_context_prompts_hold_what_the_cpu_target_writes():
    """The property notebook 10's in-context workload rests on: given a held-out function, its own greedy
    continuation, a blank line and the function again, the CPU target writes most of that continuation again,
    so most of its output continues an n-gram of the prompt (unlike the copy task, which it fails)."""
    from helpers.models import load_cpu_pair
    from helpers.prompts import encode_prompts, in_context_prompts
    from helpers.specdec import autoregressive_generate
    from helpers.experiments.nb10.study import copied_prefix, greedy_continuation

    target, _, tokenizer = load_cpu_pair()
    new_tokens = 24
    cases = encode_prompts(tokenizer, in_context_prompts(tokenizer, 3, greedy_continuation(target, tokenizer,
                                                                                           new_tokens)), "cpu")
    copied = covered = 0
    for case in cases:
        out = autoregressive_generate(target, case["input_ids"], new_tokens, eos_token_id=-1).tokens.reshape(-1)
        copied += copied_prefix(tokenizer, case, out)[0]
        covered += context_coverage(case["input_ids"][0], out, 3)["prompt"]
    assert copied / (new_tokens * len(cases)) > 0.5
    assert covered / len(cases) > 0.5


def _timed_rows(times: dict) -> list[dict]:
    """Made-up compare_methods rows: {label: (method, [seconds per prompt])}, prefill 0.1 s everywhere."""
    return [{"id": f"p{i}", "label": label, "method": method, "seconds": t, "prefill_s": 0.1}
            for label, (method, seconds) in times.items() for i, t in enumerate(seconds)]


def test_ties_with_the_fastest_come_from_a_paired_bootstrap_over_prompts():
    rows = _timed_rows({"AR": ("ar", [2.0] * 6),
                        "linear g5": ("linear", [1.0, 1.2, 0.9, 1.1, 1.0, 1.05]),
                        "linear g4": ("linear", [1.02, 1.17, 0.93, 1.08, 1.03, 1.04]),  # swaps order by prompt
                        "static 2-1": ("static", [1.3, 1.5, 1.2, 1.4, 1.3, 1.35])})  # slower on every prompt
    ties = tied_with_fastest(rows)
    assert ties.label.tolist() == ["linear g5", "linear g4", "static 2-1"]
    assert ties.set_index("label").tied.to_dict() == {"linear g5": True, "linear g4": True, "static 2-1": False}
    assert ties.speedup.iloc[0] == pytest.approx(12 / 6.25)
    decode = tied_with_fastest(rows, decode=True)
    assert decode.speedup.iloc[0] == pytest.approx((12 - 0.6) / (6.25 - 0.6))
    table = pd.DataFrame({"label": ["linear g5", "linear g4", "static 2-1"], "predicted": [2.0, 2.1, 1.5]})
    checked = ranking_beyond_noise(table, ties)
    assert checked["top_predicted"] == "linear g4" and checked["top_tied"] and checked["separates"]
    wrong = ranking_beyond_noise(table.assign(predicted=[2.0, 2.1, 2.05]), ties)
    assert wrong["misplaced"] == ["static 2-1"] and not wrong["separates"]
    with pytest.raises(ValueError, match="no rows"):
        tied_with_fastest(rows, ("dynamic",))
    # regression: a GPU profile's single in-context prompt failed the bootstrap; one prompt separates nothing
    one = tied_with_fastest([row for row in rows if row["id"] == "p0"])
    assert one.tied.all() and one.low.iloc[1:].isna().all()


def test_point_labels_do_not_overlap_in_a_dense_cluster():
    """Regression: notebook 10's method figure piled labels on each other ("d6 k3 n10" over "d5 k2 n8")."""
    import matplotlib.pyplot as plt
    from matplotlib.text import Text

    from helpers.plotting import place_labels

    fig, ax = plt.subplots(figsize=(4, 3))
    points = [(5 + 0.3 * i, 1.6 + 0.01 * (i % 2)) for i in range(4)]  # four markers nearly on top of each other
    ax.scatter(*zip(*points))
    ax.set(xlim=(0, 40), ylim=(1.0, 2.0))
    fig.canvas.draw()
    labels = place_labels(ax, points, [f"g8 p<0.0{i}" for i in range(4)], ["C0"] * 4)
    renderer = fig.canvas.get_renderer()
    for label in labels:
        label.update_positions(renderer)
    boxes = [Text.get_window_extent(label, renderer) for label in labels]  # the texts (leader lines may cross)
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    # regression (notebook 10's cost model): a label without a leader line sits nearest its own marker
    from helpers.plotting import _distance

    pixels = ax.transData.transform(points)
    for index, (label, box) in enumerate(zip(labels, boxes)):
        nearest = min(range(len(points)), key=lambda j: (_distance(box, pixels[j]), j != index))
        assert label.arrow_patch is not None or nearest == index
    plt.close(fig)


def test_point_labels_keep_clear_of_the_legend_and_fall_back_to_the_least_crowded_place():
    import matplotlib.pyplot as plt
    from matplotlib.text import Text

    from helpers.plotting import place_labels

    fig, ax = plt.subplots(figsize=(4, 3))
    ax.scatter([9.5], [1.9], label="a family whose legend entry is long")
    ax.set(xlim=(0, 10), ylim=(1.0, 2.0))
    ax.legend(loc="upper right")
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    (label,) = place_labels(ax, [(9.5, 1.9)], ["a label"], ["C0"])
    label.update_positions(renderer)
    assert not Text.get_window_extent(label, renderer).overlaps(ax.get_legend().get_window_extent(renderer))
    # 30 labels on one point: no free place is left, yet each lands inside the axes
    labels = place_labels(ax, [(5.0, 1.5)] * 30, [f"label {i}" for i in range(30)], ["C1"] * 30)
    inside = ax.get_window_extent(renderer)
    for label in labels:
        label.update_positions(renderer)
        box = Text.get_window_extent(label, renderer)
        assert inside.x0 <= box.x0 and box.x1 <= inside.x1 and inside.y0 <= box.y0 and box.y1 <= inside.y1
    plt.close(fig)


# notebook 10's open-ended summary of the CPU run (method, label, nodes, tau, speedup): a cluster of chains at 3-7 nodes
NB10_SWEEP = [("ar", "AR", 0.0, 1.0, 1.0), ("linear", "g5", 4.77, 3.52, 1.576), ("linear", "g3", 2.89, 2.91, 1.562),
              ("linear", "g6", 5.7, 3.69, 1.547), ("linear", "g4", 3.78, 3.15, 1.497),
              ("adaptive", "g8 p<0.05", 3.92, 3.28, 1.589), ("adaptive", "g8 p<0.1", 2.93, 3.02, 1.585),
              ("adaptive", "g8 p<0.02", 7.16, 3.92, 1.542), ("static", "2-1-1-1-1", 9.58, 4.0, 1.459),
              ("static", "2-2-1-1-1", 16.88, 4.13, 1.333), ("static", "3-2-1-1", 19.9, 3.92, 1.267),
              ("static", "4-2-2-1", 41.36, 3.96, 0.952), ("dynamic", "d4 k2 n6", 5.86, 3.43, 1.41),
              ("dynamic", "d5 k2 n8", 7.73, 3.73, 1.405), ("dynamic", "d6 k2 n10", 9.45, 3.88, 1.373),
              ("dynamic", "d6 k3 n12", 11.72, 4.04, 1.319), ("dynamic", "d8 k3 n16", 15.55, 4.47, 1.257),
              ("lookup", "n3 fixed 8", 4.43, 2.59, 1.847), ("lookup", "n3 adaptive 8", 2.03, 2.18, 1.644)]


def test_sweep_figure_labels_stay_clear_of_each_other_in_notebook_10s_cluster():
    """Regression: on a linear nodes axis the chains' labels (3-7 nodes, speedups 1.50-1.59) crowded the right panel,
    their leader lines running through other labels and markers."""
    import matplotlib.pyplot as plt
    import pandas as pd
    from matplotlib.text import Text
    from matplotlib.transforms import Bbox

    summary = pd.DataFrame(NB10_SWEEP, columns=["method", "label", "nodes", "tau", "speedup"])
    summary["label"] = summary.method + " " + summary.label
    fig = sweep_figure(summary, "t")
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        labels = [child for child in ax.texts if child.get_text()]
        assert len(labels) == len(summary) - 1
        for label in labels:
            label.update_positions(renderer)
        boxes = [Text.get_window_extent(label, renderer) for label in labels]
        markers = ax.transData.transform([label.xy for label in labels])
        crossings = []
        for i, label in enumerate(labels):
            if label.arrow_patch is None:
                continue
            line = label.arrow_patch.get_path().transformed(label.arrow_patch.get_transform())
            crossings += [(label.get_text(), labels[j].get_text()) for j, box in enumerate(boxes)
                          if j != i and line.intersects_bbox(box, filled=False)]
            crossings += [(label.get_text(), labels[j].get_text() + " marker") for j, (px, py) in enumerate(markers)
                          if j != i and line.intersects_bbox(Bbox.from_extents(px - 3, py - 3, px + 3, py + 3),
                                                             filled=False)]
        assert not crossings, f"leader lines through other labels or markers in {ax.get_ylabel()!r}: {crossings}"
    plt.close(fig)


def test_a_near_tie_divergence_is_lossless_and_a_real_one_is_not():
    """Regression (the GPU student's rehearsal, bf16): a static tree's output parted from AR's where the target's two
    best tokens tie within bf16 rounding, and notebook 10's lossless check failed on it."""
    from helpers.experiments.comparison import summarise_methods

    def row(method, label, pid, identical=True, near_tie=None):
        return {"id": pid, "method": method, "label": label, "spec": {"method": method}, "seconds": 1.0,
                "new_tokens": 8, "rounds": 4, "nodes": 2.0, "depth": 2.0, "draft_s": 0.1, "verify_s": 0.5,
                "identical_to_ar": identical, "near_tie": near_tie}

    rows = [row("ar", "AR", "p1"), row("ar", "AR", "p2"), row("static", "tie", "p1", False, True),
            row("static", "tie", "p2"), row("linear", "wrong", "p1", False, False), row("linear", "wrong", "p2")]
    summary = summarise_methods(rows).set_index("label")
    assert summary.loc["tie", "lossless"] and summary.loc["tie", "near_ties"] == 1
    assert not summary.loc["wrong", "lossless"] and summary.loc["wrong", "near_ties"] == 0
    old = [{k: v for k, v in r.items() if k != "near_tie"} for r in rows]  # committed rows carry no near_tie
    assert not summarise_methods(old).set_index("label").loc["tie", "lossless"]
