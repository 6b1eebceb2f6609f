"""helpers.specdec.sweeps: the comparison loop, its rows and aggregates (tiny random models, no CPU pair)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers.specdec.analysis import predicted_speedup
from helpers.specdec.bench import _pair_figures, _print_table
from helpers.specdec.sweeps import (alpha_for_speedup, assisted_generate, bootstrap_ratio_interval, gamma_rows,
                                    measure_pair, select_prompts, source_breakdown, summarise, wilson_interval)


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
    costs = {"T_T": 2.0, "T_D": 0.5, "T_V": {2: 2.2, 3: 2.4}}
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


def test_summarise_matches_gamma_rows(rows):
    summary = summarise([{**r, "pair": "tiny"} for r in rows])
    per_gamma = {r["gamma"]: r for r in gamma_rows(rows)}
    ar = summary[summary["method"] == "ar"].iloc[0]
    assert ar["speedup"] == pytest.approx(1.0)
    for gamma, row in per_gamma.items():
        line = summary[(summary["method"] == "sd") & (summary["gamma"] == gamma)].iloc[0]
        assert line["speedup"] == pytest.approx(row["speedup"])
        assert line["alpha"] == pytest.approx(row["alpha"])


def test_benchmark_table_and_headline(rows, capsys):
    summary = summarise([{**r, "pair": "tiny"} for r in rows])
    costs = {"T_T": 2.0, "T_D": 0.2, "T_V": {2: 2.2, 3: 2.4}, "T_D_round": {2: 0.4, 3: 0.3}, "runtime": "minimal"}
    _print_table(summary, costs)
    figures = _pair_figures(summary, costs, "draft")
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
        {"source": "a", "accepted": 9, "rejections": 1, "ar_time_s": 2.0, "time_s": 1.0, "new_tokens": 12, "rounds": 3},
        {"source": "a", "accepted": 7, "rejections": 3, "ar_time_s": 2.0, "time_s": 2.0, "new_tokens": 12, "rounds": 5},
        {"source": "b", "accepted": 1, "rejections": 4, "ar_time_s": 1.0, "time_s": 2.0, "new_tokens": 12, "rounds": 6},
        {"source": "b", "accepted": 2, "rejections": 4, "ar_time_s": 1.0, "time_s": 1.0, "new_tokens": 12, "rounds": 6},
    ]
    table = source_breakdown(per_prompt)
    assert list(table.index) == ["a", "b"]  # fastest first
    assert table.loc["a", "alpha"] == pytest.approx(16 / 20) and table.loc["a", "speedup"] == pytest.approx(4 / 3)
    assert table.loc["b", "speedup_min"] == 0.5 and table.loc["b", "speedup_max"] == 1.0
    assert table.loc["a", "tokens_per_round"] == pytest.approx(24 / 8)
    for source in "ab":
        row = table.loc[source]
        assert row["alpha_low"] <= row["alpha"] <= row["alpha_high"]
        assert row["alpha_wilson_low"] <= row["alpha"] <= row["alpha_wilson_high"]
        assert row["speedup_low"] <= row["speedup"] <= row["speedup_high"]


def test_alpha_for_speedup_inverts_eq5():
    alpha = alpha_for_speedup(1.8, 5, 0.1, 1.3)
    assert float(predicted_speedup(5, alpha, 0.1, 1.3)) == pytest.approx(1.8, abs=1e-4)
    assert alpha_for_speedup(1.0, 3, 0.1, 1.2) < alpha
    assert alpha_for_speedup(50.0, 3, 0.1, 1.2) != alpha_for_speedup(50.0, 3, 0.1, 1.2)  # nan: out of reach
