"""helpers.experiments.specdec_sweeps and notebook 07's study (and the nb07.bench CLI's table): the comparison loop, its rows and
aggregates (tiny random models, no CPU pair)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from helpers.experiments.nb07.bench import method_rows, pair_figures, print_table
from helpers.experiments.nb07.figures import plot_by_source
from helpers.experiments.nb07 import measure_config
from helpers.experiments.nb07.study import (alpha_for_speedup, correlation_word, cost_check, pair_optimum, select_sweep,
                                            source_breakdown, source_checks, source_table)
from helpers.experiments.specdec_sweeps import assisted_generate, gamma_rows, measure_pair, sweep_configs
from helpers.prompts import select_prompts
from helpers.specdec.analysis import predicted_speedup
from helpers.stats import bootstrap_ratio_interval, wilson_interval


@pytest.fixture(scope="module")
def cases():
    generator = torch.Generator().manual_seed(0)
    return [{"id": f"p{i}", "source": source, "input_ids": torch.randint(0, 64, (1, 4 + i), generator=generator)}
            for i, source in enumerate(["code", "docs", "code"])]


@pytest.fixture(scope="module")
def rows(peaked_pair, cases):
    return measure_pair(*peaked_pair, cases, [2, 3], 12, repeats=2)


def test_select_prompts_round_robin_over_sources():
    rows = [{"id": i, "source": s} for i, s in enumerate("aaabbc")]
    assert [r["id"] for r in select_prompts(rows, 4)] == [0, 3, 5, 1]
    assert select_prompts(rows, 0) == rows


def test_assisted_generation_is_greedy_exact(peaked_pair, cases):
    target, draft = peaked_pair
    for case in cases:
        reference = target.generate(case["input_ids"], max_new_tokens=10, do_sample=False)[0, case["input_ids"].shape[1]:]
        assert torch.equal(assisted_generate(target, draft, case["input_ids"], 10, gamma=3), reference)


def test_measure_pair_rows(rows, cases):
    methods = [(r["method"], r["gamma"]) for r in rows]
    assert len(rows) == len(cases) * (1 + 2 + 2 + 1)  # ar, sd x2, assisted x2, assisted default
    assert ("assisted", None) in methods and ("sd", 3) in methods
    assert all(r["identical_to_ar"] for r in rows)  # greedy: every method reproduces AR
    assert all(len(r["time_s_runs"]) == 2 and r["time_s"] == min(r["time_s_runs"]) for r in rows)
    sd = [r for r in rows if r["method"] == "sd"]
    assert all(r["rounds"] > 0 and r["alpha"] is not None for r in sd)
    assert all(r["rounds"] is None for r in rows if r["method"] != "sd")


def test_gamma_rows_pool_counts_and_compare(rows, cases):
    costs = {"target_step_s": 2.0, "T_D": 0.5, "T_V": {2: 2.2, 3: 2.4}}
    per_gamma = gamma_rows(rows, costs)
    assert [r["gamma"] for r in per_gamma] == [2, 3]
    for row in per_gamma:
        sd = [r for r in rows if r["method"] == "sd" and r["gamma"] == row["gamma"]]
        ar = [r for r in rows if r["method"] == "ar"]
        accepted, rejections = sum(r["accepted"] for r in sd), sum(r["rejections"] for r in sd)
        assert row["alpha"] == pytest.approx(accepted / (accepted + rejections))
        assert row["speedup"] == pytest.approx(sum(r["time_s"] for r in ar) / sum(r["time_s"] for r in sd))
        assert row["c"] == 0.25 and row["verify_ratio"] == pytest.approx(costs["T_V"][row["gamma"]] / 2.0)
        assert row["speedup_vs_assisted"] == pytest.approx(row["tokens_per_s"] / row["assisted_tokens_per_s"])
        assert [p["prompt_id"] for p in row["per_prompt"]] == [c["id"] for c in cases]
        assert row["identical_to_ar"] and row["assisted_identical_to_ar"]


def test_benchmark_table_and_headline(rows, capsys):
    summary = method_rows(gamma_rows(rows))
    assert [(m, g) for m, g in zip(summary["method"], summary["gamma"].fillna(-1))] == [
        ("ar", -1), ("sd", 2), ("sd", 3), ("assisted", 2), ("assisted", 3), ("assisted", -1)]
    ar_time = sum(r["time_s"] for r in rows if r["method"] == "ar")
    peer_time = sum(r["time_s"] for r in rows if r["method"] == "assisted" and r["gamma"] == 2)
    assert summary["speedup"].iloc[3] == pytest.approx(ar_time / peer_time)  # same tokens: the ratio of times
    assert summary["identical_to_ar"].all() and summary["speedup"].iloc[0] == 1.0
    costs = {"target_step_s": 2.0, "T_D": 0.2, "T_V": {2: 2.2, 3: 2.4}, "T_D_round": {2: 0.4, 3: 0.3}, "runtime": "minimal"}
    print_table(summary, costs)
    figures = pair_figures(summary, costs, "draft")
    printed = capsys.readouterr().out
    assert "c_round" in printed and "Eq.5r" in printed and "NO" not in printed
    gamma = figures["best_gamma"]
    assert figures["c"] == 0.1 and figures["c_round"] == costs["T_D_round"][gamma] / 2.0
    assert figures["eq5_round_predicted_speedup"] == pytest.approx(
        float(predicted_speedup(gamma, figures["alpha"], figures["c_round"], costs["T_V"][gamma] / 2.0)))
    assert figures["eq5_round_predicted_speedup"] < figures["eq5_predicted_speedup"]  # a dearer draft predicts less
    assert all(r["runtime"] == "minimal" for r in rows if r["method"] != "assisted")


def test_peer_gammas_limit_the_peer(peaked_pair, cases):
    rows = measure_pair(*peaked_pair, cases[:1], [2, 3], 6, peer_gammas=[2], peer_default=False)
    assert {(r["method"], r["gamma"]) for r in rows} == {("ar", None), ("sd", 2), ("sd", 3), ("assisted", 2)}
    by_gamma = {r["gamma"]: r for r in gamma_rows(rows)}
    assert "assisted_tokens_per_s" in by_gamma[2] and "assisted_tokens_per_s" not in by_gamma[3]


def test_wilson_interval_known_values():
    low, high = wilson_interval(8, 10)
    assert low == pytest.approx(0.4902, abs=1e-4) and high == pytest.approx(0.9433, abs=1e-4)
    assert wilson_interval(0, 5)[0] == 0.0 and wilson_interval(5, 5)[1] == 1.0
    with pytest.raises(ValueError):
        wilson_interval(3, 2)


def test_bootstrap_ratio_interval_brackets_the_estimate_and_is_deterministic():
    rng = np.random.default_rng(1)
    den = rng.integers(10, 40, size=12)
    num = np.round(den * rng.uniform(0.6, 0.9, size=12))
    low, high = bootstrap_ratio_interval(num, den)
    assert low < num.sum() / den.sum() < high
    assert (low, high) == bootstrap_ratio_interval(num, den)
    # identical prompts: no spread; more spread between prompts: a wider interval
    assert bootstrap_ratio_interval([3, 3, 3], [4, 4, 4]) == pytest.approx((0.75, 0.75))
    wide = bootstrap_ratio_interval(np.where(np.arange(12) % 2, den, 0), den)
    assert wide[1] - wide[0] > high - low
    with pytest.raises(ValueError):
        bootstrap_ratio_interval([1], [2])


def test_source_breakdown_pools_per_source():
    per_prompt = [
        {"source": "a", "prompt_tokens": 5, "accepted": 9, "rejections": 1, "ar_time_s": 2.0, "time_s": 1.0, "new_tokens": 12, "rounds": 3},
        {"source": "a", "prompt_tokens": 7, "accepted": 7, "rejections": 3, "ar_time_s": 2.0, "time_s": 2.0, "new_tokens": 12, "rounds": 5},
        {"source": "b", "prompt_tokens": 9, "accepted": 1, "rejections": 4, "ar_time_s": 1.0, "time_s": 2.0, "new_tokens": 12, "rounds": 6},
        {"source": "b", "prompt_tokens": 11, "accepted": 2, "rejections": 4, "ar_time_s": 1.0, "time_s": 1.0, "new_tokens": 12, "rounds": 6},
    ]
    table = source_breakdown(per_prompt)
    assert list(table.index) == ["a", "b"]  # fastest first
    assert table.loc["a", "alpha"] == pytest.approx(16 / 20) and table.loc["a", "speedup"] == pytest.approx(4 / 3)
    assert table.loc["b", "speedup_min"] == 0.5 and table.loc["b", "speedup_max"] == 1.0
    assert table.loc["a", "tokens_per_round"] == pytest.approx(24 / 8)
    assert table.loc["a", "prompt_tokens"] == 6 and table.loc["b", "prompt_tokens"] == 10
    for source in "ab":
        row = table.loc[source]
        assert row["alpha_low"] <= row["alpha"] <= row["alpha_high"]
        assert row["alpha_wilson_low"] <= row["alpha"] <= row["alpha_wilson_high"]
        assert row["speedup_low"] <= row["speedup"] <= row["speedup_high"]
    # the report's table ends with every prompt pooled: the configuration's own speedup and alpha
    from helpers.experiments.nb07.study import with_overall

    overall = with_overall(table, per_prompt).loc["all sources"]
    assert overall["prompts"] == 4 and overall["speedup"] == pytest.approx(6 / 6)
    assert overall["alpha"] == pytest.approx(19 / 31)


def test_alpha_for_speedup_inverts_eq5():
    alpha = alpha_for_speedup(1.8, 5, 0.1, 1.3)
    assert float(predicted_speedup(5, alpha, 0.1, 1.3)) == pytest.approx(1.8, abs=1e-4)
    assert alpha_for_speedup(1.0, 3, 0.1, 1.2) < alpha
    assert alpha_for_speedup(50.0, 3, 0.1, 1.2) != alpha_for_speedup(50.0, 3, 0.1, 1.2)  # nan: out of reach


def _sweep_frame():
    base = {"temperature": 0.0, "max_new_tokens": 8, "prompt_ids": ["p0", "p1"], "target_weights": "t",
            "draft_weights": "d", "alpha": 0.7, "c": 0.1, "verify_ratio": 1.2}
    rows = [{**base, "pair": pair, "gamma": g, "speedup": s,
             "per_prompt": [{"prompt_id": p, "time_s": t / s} for p, t in (("p0", 1.0), ("p1", 2.0))]}
            for pair, speeds in (("T / B", (1.2, 1.5, 1.4)), ("T / A", (1.1, 1.3, 1.6)))
            for g, s in zip((1, 3, 5), speeds)]
    rows.append({**base, "pair": "T / A", "gamma": 3, "speedup": 9.0, "max_new_tokens": 16})  # another output length
    rows.append({**base, "pair": "T / A", "gamma": 5, "speedup": 9.0, "prompt_ids": ["p0"]})  # other prompts
    rows.append({**base, "pair": "T / A", "gamma": 7, "speedup": 9.0})  # a gamma not asked for
    return pd.DataFrame(rows)


def test_sweep_configs_one_per_gamma_with_weights():
    configs = sweep_configs("T", "D", [1, 3], prompt_ids=("p0",), temperature=0.0, max_new_tokens=8, repeats=1,
                            dtype="float32", device="cpu")
    assert [c["gamma"] for c in configs] == [1, 3] and configs[0]["pair"] == "T / D"
    assert configs[0]["target_weights"] == "T" and configs[0]["prompt_ids"] == ["p0"]  # not a CPU-pair name


def test_select_sweep_keeps_the_answers_in_pair_order_with_eq5():
    configs = [{"pair": pair, "gamma": g, "temperature": 0.0, "max_new_tokens": 8, "prompt_ids": ["p0", "p1"],
                "target_weights": "t", "draft_weights": "d"} for pair in ("T / A", "T / B") for g in (1, 3, 5)]
    frame = select_sweep(_sweep_frame(), configs)
    assert list(zip(frame["pair"].astype(str), frame["gamma"])) == [
        ("T / A", 1), ("T / A", 3), ("T / A", 5), ("T / B", 1), ("T / B", 3), ("T / B", 5)]
    assert frame["speedup"].max() < 9
    assert frame["eq5"].iloc[0] == pytest.approx(float(predicted_speedup(1, 0.7, 0.1, 1.2)))
    optimum = pair_optimum(frame)
    assert list(optimum) == ["T / A", "T / B"]
    assert optimum["T / A"]["shape"] == "at largest"
    assert optimum["T / B"] == {"gamma": 3, "speedup": 1.5, "shape": "inside", "first": 1, "last": 5,
                                "alpha_range": (0.7, 0.7), "c": 0.1, "tied": [3]}  # every prompt faster at 3


def _by_source():
    per_prompt = [{"source": s, "accepted": a, "rejections": r, "new_tokens": 10, "rounds": 4, "ar_time_s": t,
                   "time_s": 1.0, "prompt_tokens": 20} for s, a, r, t in (
        ("data", 9, 1, 2.0), ("data", 8, 2, 2.2), ("prose", 3, 4, 1.1), ("prose", 2, 4, 1.0), ("code", 6, 3, 1.5),
        ("code", 5, 3, 1.4))]
    return source_breakdown(per_prompt, resamples=200), per_prompt


def test_source_checks_and_table():
    by_source, per_prompt = _by_source()
    claims = source_checks(by_source)
    assert claims["fast"] == "data" and claims["slow"] == "prose"
    assert claims["expected"] == ["data", "code", "prose"] and claims["measured_order"] == ["data", "code", "prose"]
    assert claims["correlation"] > 0.9 and 0 <= claims["wilson_narrower"] <= 3
    assert claims["rank_correlation"] == pytest.approx(1.0) and claims["same_order"]
    assert claims["source_pairs"] == 3 and 0 <= claims["overlapping_pairs"] <= 3
    assert "prompts" not in claims  # the per-prompt checks need the per-prompt list
    lengths = [{**p, "prompt_tokens": n} for p, n in zip(per_prompt, (10, 20, 30, 40, 50, 60))]
    prompt_claims = source_checks(by_source, lengths)
    assert prompt_claims["prompts"] == 6 and prompt_claims["prompt_alpha_rho"] > 0.9
    assert -1 <= prompt_claims["prompt_length_partial_rho"] <= 1
    table = source_table(by_source)
    assert list(table["source"]) == list(by_source.index) and table["95% CI"].str.match(r"\d\.\d\d-\d\.\d\d").all()
    fig = plot_by_source(by_source, per_prompt, "title")
    assert len(fig.axes) == 2 and [t.get_text() for t in fig.axes[0].get_xticklabels()] == list(by_source.index)


def test_measure_config_is_one_gamma_row_without_config_columns(peaked_pair, cases):
    row = measure_config(*peaked_pair, cases[:2], 2, 6, exclude={"gamma", "temperature"}, repeats=1)
    assert "gamma" not in row and "temperature" not in row and row["identical_to_ar"]
    assert row["prompt_ids"] == ["p0", "p1"] and "assisted_time_s" not in row


def test_source_checks_count_overlapping_intervals():
    by_source = pd.DataFrame({"alpha": [0.80, 0.81, 0.70], "speedup": [1.5, 1.4, 1.3], "speedup_low": [1.3, 1.2, 1.0],
                              "speedup_high": [1.7, 1.35, 1.25], "alpha_low": [0.7, 0.7, 0.6],
                              "alpha_high": [0.9, 0.9, 0.8], "alpha_wilson_low": [0.75, 0.76, 0.65],
                              "alpha_wilson_high": [0.85, 0.86, 0.75]}, index=["a", "b", "c"])
    claims = source_checks(by_source)
    assert claims["overlapping_pairs"] == 2 and claims["source_pairs"] == 3  # a-b and b-c overlap, a-c do not
    assert claims["separated"] and not claims["same_order"]  # alpha ranks b first, the speedup a
    assert claims["rank_correlation"] == pytest.approx(0.5)


def test_correlation_word_follows_the_number():
    assert correlation_word(0.96) == "strong" and correlation_word(0.5) == "moderate"
    assert correlation_word(-0.25) == "weak negative" and correlation_word(0.1) == "no clear"
    assert correlation_word(float("nan")) == "no clear"


def _cost_frame(tt_a=0.010, tt_b=0.014):
    rows = []
    for pair, draft, tt, speedups in (("T / A", "A", tt_a, (1.3, 1.2)), ("T / B", "B", tt_b, (1.1, 1.0)),
                                       ("U / C", "C", 0.02, (1.2, 1.2))):
        for gamma, speedup in zip((1, 3), speedups):
            rows.append({"pair": pair, "target": pair[0], "draft": draft, "gamma": gamma, "runtime": "minimal",
                         "prompt_ids": ["p0", "p1"], "timestamp": f"t-{pair}", "target_step_s": tt, "T_D_s": 0.1 * tt,
                         "T_V_s": 0.015, "c": 0.1, "verify_ratio": 0.015 / tt, "ar_tokens_per_s": 60.0,
                         "speedup": speedup, "eq5": 1.15})
    return pd.DataFrame(rows)


def test_cost_check_finds_a_target_timed_differently_for_two_pairs():
    table, claims = cost_check(_cost_frame())
    assert list(table["pair"]) == ["T / A", "T / B", "U / C"]
    assert list(table["above Eq. 5"]) == [2, 0, 2] and list(table["below Eq. 5"]) == [0, 2, 0]
    assert claims["shared_targets"] == ["T"] and claims["same_conditions"]
    assert claims["tt_spread"] == pytest.approx(0.4) and claims["tv_spread"] == pytest.approx(0.0)
    assert claims["sides_by_pair"] and claims["low_tt_above"]
    assert claims["tt_over_ar_step"] == ["U / C"]  # 20 ms isolated against 16.7 ms per AR token
    assert (claims["above"], claims["below"], claims["rows"]) == (4, 2, 6)
    _, swapped = cost_check(_cost_frame(tt_a=0.014, tt_b=0.010))
    assert not swapped["low_tt_above"]
    other_prompt = _cost_frame()
    other_prompt.loc[other_prompt["pair"] == "T / B", "prompt_ids"] = pd.Series([["p1"], ["p1"]], index=[2, 3])
    assert not cost_check(other_prompt)[1]["same_conditions"]


def test_cost_check_makes_no_low_tt_claim_when_no_row_lies_above_eq5():
    # regression: every row below Eq. 5 gave "above" counts 0 and 0, and 0 == max(0, 0) passed the check vacuously
    frame = _cost_frame()
    frame["eq5"] = 2.0  # every row of every pair below Eq. 5
    table, claims = cost_check(frame)
    assert claims["above"] == 0 and claims["below"] == 6 and claims["sides_by_pair"]
    assert not claims["low_tt_above"]
    # ratios 0.65-0.6 (T / A) and 0.55-0.5 (T / B): separated; move T / B's into T / A's range and they overlap
    assert not claims["ratios_overlap"]
    frame.loc[frame["pair"] == "T / B", "speedup"] = [1.25, 1.2]
    assert cost_check(frame)[1]["ratios_overlap"]
    assert list(table["ratio high"].round(3)) == [0.65, 0.55, 0.6]


def test_source_checks_name_each_departure_from_the_expected_order():
    # data > code > docstring > prose expected; prose and docstring swap, inside overlapping alpha intervals
    by_source = pd.DataFrame({"alpha": [0.86, 0.80, 0.72, 0.76], "speedup": [1.5, 1.54, 1.31, 1.4],
                              "speedup_low": [1.2] * 4, "speedup_high": [1.8] * 4,
                              "alpha_low": [0.8, 0.75, 0.68, 0.71], "alpha_high": [0.9, 0.85, 0.76, 0.82],
                              "alpha_wilson_low": [0.8] * 4, "alpha_wilson_high": [0.9] * 4},
                             index=["data", "code", "docstring", "prose"])
    claims = source_checks(by_source)
    assert claims["order_swaps"] == [("docstring", "prose", True)] and claims["swaps_within_noise"]
    apart = by_source.assign(alpha_high=[0.9, 0.85, 0.70, 0.82], alpha_low=[0.8, 0.75, 0.68, 0.74])
    assert not source_checks(apart)["swaps_within_noise"]
    in_order = by_source.assign(alpha=[0.86, 0.80, 0.76, 0.72])
    assert source_checks(in_order)["order_swaps"] == [] and source_checks(in_order)["swaps_within_noise"]


def test_specdec_benchmark_is_registered_from_its_experiment_module(capsys):
    """``python -m helpers.bench specdec`` runs helpers.experiments.nb07.bench (notebook 07's package)."""
    from helpers import bench
    from helpers.experiments.nb07 import bench as specdec_bench

    assert bench.BENCHMARKS["specdec"] is specdec_bench
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["specdec", "--help"])
    assert exit_info.value.code == 0 and "--gammas" in capsys.readouterr().out


def test_alpha_speed_inversions_name_the_pairs_and_their_prompt_lengths():
    """Regression (grader): the per-source table had data with the highest alpha but not the highest speedup, and
    nothing said why; the pairs where alpha and speedup disagree are named with their prompt lengths."""
    from helpers.experiments.nb07.study import alpha_speed_inversions

    by_source = pd.DataFrame({"speedup": [1.5, 1.4, 1.2, 1.45], "alpha": [0.7, 0.8, 0.5, 0.75],
                              "prompt_tokens": [30.0, 90.0, 20.0, 60.0]},
                             index=["code", "data", "prose", "all sources"])
    found = alpha_speed_inversions(by_source)
    assert found["inversions"] == 1 and found["inversions_longer"] == 1  # the overall row does not count
    assert found["pairs"] == [("code", "data")]  # data: the higher alpha, the longer prompts, the lower speedup
    assert alpha_speed_inversions(by_source.drop(index="data"))["pairs"] == []
    shorter = alpha_speed_inversions(by_source.assign(prompt_tokens=[30.0, 10.0, 20.0, 60.0]))
    assert shorter["inversions"] == 1 and shorter["inversions_longer"] == 0


def test_phase_totals_of_runs_timed_whole_are_unknown_not_zero():
    """Regression: a CUDA run timed whole has nan laps, and pandas' sum over prompts made them 0.0 s in the rows."""
    import pandas as pd

    from helpers.experiments.specdec_sweeps import _phase_total

    assert _phase_total(pd.Series([float("nan"), float("nan")])) is None
    assert _phase_total(pd.Series([0.5, float("nan")])) is None  # a partial sum would understate the phase
    assert _phase_total(pd.Series([0.5, 0.25])) == 0.75


def test_graph_rows_count_their_own_replays(peaked_pair, cases):
    """With graphs every row records the replays of its own timed runs (0 on a CPU), and the per-gamma rows say
    so (``graph_replays_scope``), instead of one total for the whole pair on every row."""
    from helpers.models.runtime import minimal_supported

    if not all(minimal_supported(m) for m in peaked_pair):
        pytest.skip("the model file does not run this tiny pair")
    found = measure_pair(*peaked_pair, cases[:1], [2], 6, repeats=1, peer=False, compile="graphs", phase_run=True)
    assert all(row["graph_replays"] == 0 for row in found)  # a CPU captures nothing
    (row,) = gamma_rows(found)
    assert row["graph_replays"] == 0 and row["graph_replays_scope"] == "row"
    assert row["time_draft_s"] is not None and row["time_draft_s"] > 0  # a CPU times its phases in the timed runs
