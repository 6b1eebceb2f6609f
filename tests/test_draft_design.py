"""Notebook 12's study: one measurement per draft, the per-draft table, predictors, depth against latency, figures."""
import json

import matplotlib
import pandas as pd
import pytest
import torch

from helpers.experiments.nb12.study import (depth_latency, design_table, eq5_agrees, gamma_frame, gamma_ties,
                                              measure_draft, predictors, timing_noise)
from helpers.stats import tied_with_best
from helpers.experiments.nb12.figures import design_figure, gamma_figure
from tiny_models import perturbed_copy, tiny_qwen3

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def measured(peaked_pair):
    target, _ = peaked_pair
    generator = torch.Generator().manual_seed(0)
    cases = [{"id": f"p{i}", "source": "code", "input_ids": torch.randint(0, 64, (1, 5 + i), generator=generator)}
             for i in range(3)]
    drafts = {"draft-2x32": perturbed_copy(target, 0.3, seed=1, relative=True),
              "draft-1x48": perturbed_copy(target, 0.6, seed=2, relative=True),
              "draft-4x16": tiny_qwen3(3, vocab_size=64)}
    rows = [{"draft": name, **measure_draft(target, draft, cases, [1, 3], 10, repeats=1, cost_repeats=2)}
            for name, draft in drafts.items()]
    return json.loads(json.dumps(rows))  # what the result store gives back


CARD = {name: {"layers": layers, "hidden_size": width, "parameters": 1000, "heldout_loss": loss,
               "greedy_agreement": agreement, "shared_embedding": False}
        for name, layers, width, loss, agreement in [("draft-2x32", 2, 32, 2.0, 0.8), ("draft-1x48", 1, 48, 2.5, 0.6),
                                                      ("draft-4x16", 4, 16, 4.0, 0.1)]}


def test_measure_draft_row_is_json_and_lossless(measured):
    row = measured[0]
    assert row["costs"]["target_step_s"] > 0 and [g for g, _ in row["costs"]["T_V"]] == [1, 3]
    assert [g["gamma"] for g in row["per_gamma"]] == [1, 3]
    for g in row["per_gamma"]:
        assert g["identical_to_ar"] and g["speedup"] > 0 and g["c_round"] > 0 and g["eq5"] > 0


def test_design_table_one_row_per_draft_with_intervals(measured):
    table = design_table(measured, CARD, eq5_gammas=range(1, 6))
    assert list(table.draft) == ["draft-2x32", "draft-1x48", "draft-4x16"]
    assert (table.alpha_low <= table.alpha).all() and (table.alpha <= table.alpha_high).all()
    assert (table.alpha_wilson_low <= table.alpha).all() and table.identical.all()
    assert set(table.best_gamma) <= {1, 3} and table.eq5_gamma.between(1, 5).all()
    assert (table.best_at_edge == (table.best_gamma == 3)).all()  # 3 is the largest gamma of the sweep
    # the noisier draft accepts less than the closer copy
    assert table.set_index("draft").alpha["draft-2x32"] > table.set_index("draft").alpha["draft-1x48"]
    frame = gamma_frame(measured)
    assert len(frame) == 6 and "per_prompt" not in frame
    assert (table.eq5_speedup >= table.eq5_at_best).all()  # one curve: its optimum is never below a point on it


def test_eq5_curve_uses_the_measured_terms_and_lines_between_them():
    """Regression: notebook 12's Eq. 5 optimum came from the mean of the per-gamma draft costs, whose first step is
    dearer (evicted weights), and fell below Eq. 5 at the measured best gamma (draft-2l: 1.857 at 5 against 1.978)."""
    from helpers.experiments.nb12.study import eq5_curve
    from helpers.specdec.analysis import predicted_speedup

    T_T, alpha = 4e-3, 0.8
    draft_round = {3: 0.8e-3, 5: 0.6e-3, 7: 0.5e-3}  # a round's draft time 2.4, 3.0, 3.5 ms
    verify = {3: 1.3, 5: 1.4, 7: 1.5}
    curve = eq5_curve(alpha, T_T, draft_round, verify, range(1, 13))
    for g in draft_round:  # measured gammas: exactly the measured terms
        assert curve[g] == pytest.approx(float(predicted_speedup(g, alpha, draft_round[g] / T_T, verify[g])))
    # elsewhere the lines: the least-squares round 1.5917 ms fixed + 0.275 ms a draft, verify 1.6 at gamma 9
    assert curve[9] == pytest.approx(float(predicted_speedup(9, alpha, (1.5917e-3 + 9 * 0.275e-3) / 9 / T_T, 1.6)),
                                     rel=1e-4)
    assert max(curve.values()) >= max(curve[g] for g in draft_round)


def test_best_gamma_at_the_edge_of_the_sweep_is_flagged():
    from helpers.experiments.nb12.study import best_at_edge

    assert best_at_edge(7, [1, 2, 3, 5, 7]) and not best_at_edge(5, [1, 2, 3, 5, 7])
    assert not best_at_edge(1, [1, 2, 3])  # gamma = 1 is the smallest there is
    assert best_at_edge(2, [2, 3, 4]) and best_at_edge(7, [7, 3, 5])  # order does not matter
    with pytest.raises(ValueError, match="not in the sweep"):
        best_at_edge(4, [1, 2, 3])


def test_predictors_and_depth_latency_on_a_made_up_table():
    table = pd.DataFrame({"draft": ["a", "b", "c", "d"], "layers": [8, 4, 2, 1], "shared_embedding": False,
                          "alpha": [0.9, 0.85, 0.8, 0.6], "agreement": [0.9, 0.8, 0.8, 0.6],
                          "heldout_loss": [2.0, 2.1, 2.2, 2.6], "T_D_ms": [4.2, 2.2, 1.2, 0.7],
                          "c_round": [0.6, 0.3, 0.17, 0.1], "speedup": [0.9, 1.3, 1.7, 1.6]})
    ranked = predictors(table)
    assert set(ranked.column) == {"alpha", "agreement", "heldout_loss", "c_round", "T_D_ms"}
    assert ranked.r2.is_monotonic_decreasing
    assert ranked.set_index("column").direction["c_round"] == "lower is faster"
    expected = ranked.set_index("column").as_expected  # here the cheap drafts are fast though less accurate
    assert expected[["c_round", "T_D_ms"]].all() and not expected[["alpha", "agreement", "heldout_loss"]].any()
    depth = depth_latency(table)
    assert depth["deep"] == "a" and depth["shallow"] == "d" and depth["depth_ratio"] == 8
    assert depth["ms_per_layer"] == pytest.approx(0.5, abs=0.05) and depth["r2_layers"] > 0.99
    assert 0.85 < depth["per_layer_share"] < 1  # 8 layers x 0.5 ms of 4.2 ms
    flat = depth_latency(pd.DataFrame({"layers": [28, 4, 1], "step_ms": [150.0, 140.0, 118.0]}), "step_ms")
    assert flat["per_layer_share"] < 0.3 and flat["deep"] == "28 layers"
    assert depth["monotone"] and flat["monotone"] and len(flat["residuals_ms"]) == 3
    scattered = depth_latency(pd.DataFrame({"layers": [28, 14, 7, 1], "step_ms": [119.0, 137.0, 124.0, 109.0]}),
                              "step_ms")
    assert not scattered["monotone"] and scattered["r2_layers"] < 0.5
    assert scattered["max_residual_ms"] == pytest.approx(max(abs(r) for r in scattered["residuals_ms"]))
    assert sum(scattered["residuals_ms"]) == pytest.approx(0, abs=1e-9)  # a least-squares line with an intercept


def test_noise_and_ties_of_the_draft_rows():
    def row(name, tt, ar, speedups):
        return {"draft": name, "costs": {"target_step_s": tt},
                "per_gamma": [{"gamma": g, "ar_time_s": ar, "speedup": s} for g, s in speedups.items()]}
    rows = [row("a", 0.0040, 3.0, {3: 1.40, 5: 1.38, 7: 1.20}), row("b", 0.0050, 3.2, {3: 1.30, 5: 1.50, 7: 1.49})]
    noise = timing_noise(rows)
    assert noise["tt_min_ms"] == pytest.approx(4.0) and noise["tt_max_ms"] == pytest.approx(5.0)
    assert noise["tt_rel_range"] == pytest.approx(1 / 4.5)
    assert noise["ar_rel_std"] == pytest.approx(0.1 / 3.1)
    assert tied_with_best([1.68, 1.676, 1.47], 0.03) == [True, True, False]
    ties = gamma_ties(rows, 0.02)
    assert ties == {"a": [3, 5], "b": [5, 7]}
    assert eq5_agrees(4, ties["a"]) and eq5_agrees(6, ties["b"]) and not eq5_agrees(9, ties["a"])
    with pytest.raises(ValueError):
        timing_noise(rows[:1])


def test_figures_draw_every_draft(measured):
    table = design_table(measured, CARD, eq5_gammas=range(1, 6))
    fig = design_figure(table)
    assert len(fig.axes) == 3 and len(fig.axes[2].lines) == len(table)
    fig = gamma_figure(gamma_frame(measured), table)
    assert sum(ax.get_visible() for ax in fig.axes) == len(table)  # a panel per draft
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["measured", "Eq. 5", "Eq. 5 optimum"]


def test_wilson_interval_is_exact_at_the_ends():
    """Regression: at 0 successes the lower bound came out as 7e-18, above the estimate 0."""
    from helpers.stats import wilson_interval

    assert wilson_interval(0, 23)[0] == 0.0 and wilson_interval(23, 23)[1] == 1.0
    low, high = wilson_interval(5, 10)
    assert 0 < low < 0.5 < high < 1


def test_equal_size_configs_keep_the_parameter_count_of_the_handout_model():
    from helpers.models.configs import load_config
    from helpers.experiments.nb12.study import equal_size_config, parameter_count

    config = load_config("Qwen/Qwen3-0.6B")
    reference = parameter_count(config)
    for layers in (14, 4, 1):
        shape = equal_size_config(config, layers)
        assert shape.num_hidden_layers == layers == len(shape.layer_types)
        assert shape.num_attention_heads == 2 * shape.num_key_value_heads  # Qwen3-0.6B's group of 2 kept
        assert shape.hidden_size % 128 == 0 and shape.head_dim == config.head_dim
        assert abs(parameter_count(shape) / reference - 1) < 0.10
    assert config.num_hidden_layers == 28  # the original is untouched
    with pytest.raises(ValueError, match="layers >= 1"):
        equal_size_config(config, 0)


def test_scale_latency_times_every_depth_on_a_tiny_config():
    from helpers.experiments.nb12.study import scale_latency

    config = tiny_qwen3(0, vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=4).config
    rows = scale_latency(config, [4, 1], context=8, repeats=2, multiple=16)
    assert [r["layers"] for r in rows] == [4, 1]
    assert rows[1]["hidden_size"] > rows[0]["hidden_size"] and all(r["step_ms"] > 0 for r in rows)


def test_depth_scale_figure_draws_both_scales_and_the_reference():
    from helpers.experiments.nb12.figures import depth_scale_figure

    family = pd.DataFrame({"layers": [8, 1], "T_D_ms": [3.0, 0.9]})
    scale = pd.DataFrame({"layers": [28, 4, 1], "step_ms": [300.0, 280.0, 290.0]})
    fig = depth_scale_figure(family, scale, "Qwen3-0.6B shapes")
    assert len(fig.axes[0].lines) == 3 and len(fig.axes[0].get_legend().get_texts()) == 3


def test_a_draft_measurement_goes_through_the_result_store(measured, store):
    """Regression: the measurement once had a key 'gammas', which clashes with its configuration's."""
    from helpers.experiments.nb12.study import draft_config

    p = {"design_target": "t", "design_gammas": [1, 3], "design_new_tokens": 10, "design_repeats": 1,
         "design_dtype": "float32", "device": "cpu"}
    config = draft_config(p, "draft-2x32", ["p0", "p1", "p2"])
    row = store.run(config, lambda: {k: v for k, v in measured[0].items() if k != "draft"}, meta={})
    assert row["gammas"] == [1, 3] and len(row["per_gamma"]) == 2 and store.has(config)


def test_leave_one_out_shows_a_fit_carried_by_one_draft():
    """Regression: the latency line's r2 over seven drafts was read as evidence while one draft carried it."""
    from helpers.experiments.nb12.study import leave_one_out

    table = pd.DataFrame({"draft": list("abcde"), "c": [0.1, 0.11, 0.12, 0.13, 0.5],
                          "speedup": [1.6, 1.5, 1.62, 1.55, 1.0]})
    loo = leave_one_out(table, "c")
    assert set(loo.index) == set("abcde") and loo.r2["e"] < 0.5 < loo.r2.drop("e").min()
    # regression (sign): a line carried by one draft can slope the other way without it, which r2 alone hides
    carried = leave_one_out(table.assign(speedup=[1.5, 1.55, 1.6, 1.62, 1.0]), "c")
    assert (carried.direction.drop("e") == "lower is faster").all() and carried.direction["e"] == "higher is faster"
