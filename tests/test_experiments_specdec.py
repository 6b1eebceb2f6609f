"""helpers.experiments.nb07/nb08/nb09 and .common: the configurations find the committed rows (nothing is measured
again), the budget hooks work with and without a budget, and the summaries the notebooks print."""
import numpy as np
import pandas as pd
import pytest
import yaml

from helpers import paths
from helpers.experiments import common, nb07, nb08, nb09
from helpers.results import ResultStore


@pytest.fixture(scope="module")
def cpu_params():
    return {"profile": "cpu", **yaml.safe_load((paths.PARAMS_DIR / "cpu.yaml").read_text())}


def test_configurations_find_the_committed_rows(cpu_params):
    prompt_rows, source_rows = nb07.prompt_sets(cpu_params)
    by_pair = nb07.pair_configs(cpu_params, prompt_rows)
    sweep = ResultStore("cpu", nb07.RESULT)
    assert by_pair and all(sweep.has(c) for configs in by_pair.values() for c in configs)
    frame = nb07.sweep_frame(lambda name: ResultStore("cpu", name), by_pair)
    best = frame.loc[frame["speedup"].idxmax()]
    for name in (nb07.BY_SOURCE, nb07.SAMPLED):
        assert ResultStore("cpu", name).has(nb07.best_config(cpu_params, best, name, prompt_rows, source_rows))
    assert all(ResultStore("cpu", nb09.RESULT).has(c) for c in nb09.configs(cpu_params).values())


def test_notebook_params_and_describe_config():
    namespace = {"profile": "cpu", "device": "cpu", "sd_gammas": [1, 2], "sd_help": len, "other": 1}
    assert common.notebook_params(namespace, "sd_") == {"profile": "cpu", "device": "cpu", "sd_gammas": [1, 2]}
    assert common.describe_config({"a": 1, "prompt_ids": [1], "b": [2], "c": "x"}) == "a=1, c=x"


def test_budget_hooks_with_and_without_a_budget():
    class Budget:
        checked, took = [], []

        def check(self, what):
            self.checked.append(what)

        def took(self, seconds):  # noqa: F811 - the budget's method, recorded
            Budget.took_seconds = seconds

    class Store:
        budget = Budget()

    common.check_budget(Store(), "x")
    with common.took(Store()):
        pass
    assert Budget.checked == ["x"] and Budget.took_seconds >= 0
    common.check_budget(object(), "x")  # a plain ResultStore has no budget: nothing happens
    with common.took(object()):
        pass


def _sweep_frame():
    return pd.DataFrame({"pair": ["a / b"] * 3, "gamma": [1, 2, 3], "verify_ratio": [1.1, 1.3, 1.5],
                         "accepted": [40, 60, 70], "rejections": [10, 20, 30], "alpha": [0.8, 0.75, 0.7],
                         "time_prefill_s": [0.1, 0.1, 0.2], "time_s": [1.0, 2.0, 2.0], "device": ["cpu"] * 3,
                         "assisted_tokens_per_s": [np.nan, 9.0, 8.0], "ar_tokens_per_s": [10.0] * 3})


def test_nb07_summaries():
    frame = _sweep_frame()
    assert nb07.verify_slopes(frame)["a / b"] == pytest.approx(0.2)
    verify = nb07.verify_numbers(frame, nb07.verify_slopes(frame))
    assert verify["verify_pairs"] == verify["verify_grows_pairs"] == 1 and verify["verify_slope_low"] == pytest.approx(0.2)
    assert (verify["verify_min"], verify["verify_max"], verify["verify_not_free"]) == (1.1, 1.5, 1)
    flat = nb07.verify_numbers(frame, {"a / b": 0.005, "c / d": 0.03})  # a slope of 0.01 or less does not grow
    assert flat["verify_grows_pairs"] == 1 and flat["verify_pairs"] == 2 and flat["verify_slope_low"] == 0.005
    timed, share = nb07.prefill_share(frame)
    assert timed and list(share) == [0.1, 0.05, 0.1]
    assert list(nb07.assisted_over_ar(frame)) == [0.9, 0.8]
    assert nb07.assisted_over_ar(frame.drop(columns="assisted_tokens_per_s")).empty
    pooled = 170 / 230
    z = abs(0.8 - pooled) / np.sqrt(pooled * (1 - pooled) / 50)
    assert nb07.alpha_deviation(frame)["a / b"] == pytest.approx(max(z, abs(0.7 - pooled) / np.sqrt(
        pooled * (1 - pooled) / 100), abs(0.75 - pooled) / np.sqrt(pooled * (1 - pooled) / 80)))


def test_rounds_without_draft_explain_acc_per_round_below_alpha_at_gamma_1():
    # gamma 1: 50 tests, 4 more rounds whose one token the target gave alone (a prompt's last token)
    frame = _sweep_frame().assign(rounds=[54, 45, 40], proposed=[50, 88, 117])
    assert nb07.rounds_without_draft(frame) == {"a / b": (4, 54)}
    accepted = frame["accepted"].iloc[0]
    assert accepted / 54 < accepted / (accepted + frame["rejections"].iloc[0])  # acc./round < alpha
    with pytest.raises(AssertionError, match="accepted / tests"):
        nb07.rounds_without_draft(frame.assign(alpha=[0.5, 0.75, 0.7]))
    assert nb07.rounds_without_draft(frame[frame["gamma"] > 1]) == {}  # no gamma 1: nothing to say


def test_nb09_batch_trend_and_depths(capsys):
    by_batch = pd.DataFrame({"batch_size": [1, 2, 4], "speedup": [1.5, 1.3, 1.1], "decode_speedup": [1.6, 1.4, 1.0],
                             "predicted": [1.7, 1.5, 1.2], "straggler": [1.0, 1.1, 1.3], "T_V/T_T": [1.2, 1.1, 1.6],
                             "alpha": [0.7, 0.72, 0.71], "rounds": [10, 12, 14]})
    numbers = nb09.print_batch_trend(by_batch)
    assert numbers["batch_verify_grows"] == 1 and numbers["batch_verify_monotone"] == 0
    assert numbers["batch_verify_min_b"] == 2 and numbers["batch_speedup_falls"] == 1 and numbers["batch4_speedup"] == 1.1
    assert numbers["batch_straggler_max"] == 1.3 and "batch_size" in capsys.readouterr().out  # the trend printed
    layers = nb09.print_handout_depths()
    launch_c, bytes_c = nb09.print_draft_cost_ratios(layers)
    assert launch_c["Qwen3-0.6B / Qwen3-8B"] == launch_c["Qwen3-1.7B / Qwen3-8B"]
    assert bytes_c["Qwen3-0.6B / Qwen3-8B"] < nb09.kv_draft_ratio("H100 SXM", 256) < 1


def test_nb08_tie_tolerance_and_grid():
    rows = pd.DataFrame({"status": ["ok"] * 2, "target": ["t", "t"], "draft": ["a", "b"], "target_step_s": [1.0, 1.1]})
    assert nb08.tie_tolerance(rows) == pytest.approx(0.1)
    assert nb08.tie_tolerance(rows.iloc[:1]) == 0.0
    # regression: the pairs' AR baselines (the speedups' numerators) differed by 6.7% while only T_T's 5.2% counted
    both = rows.assign(target_step_s=[5.0, 4.75], ar_tokens_per_s=[181.9, 194.0])
    assert nb08.tie_tolerance(both) == pytest.approx(194.0 / 181.9 - 1)
    assert nb08.column("H100 SXM", "roofline only") == "H100 SXM, roofline only (model)"
    grid = nb08.prediction_grid(lambda t, d, g, gpu, host: {"c": 0.1, "speedup": g + host[0]}, {"G": None},
                                ["org/d1"], [2, 3], {"roofline only": (0.0, 0.0)}, {"org/d1": 0.7}, "org/t")
    assert list(grid["speedup, roofline only (model)"]) == [2, 3] and list(grid["draft"]) == ["d1", "d1"]


def test_a_missing_sweep_row_is_named_before_any_model_is_touched(cpu_params, tmp_path, monkeypatch):
    """Rendering rows that are not there (WORKBOOK_RESULTS_ONLY=1): the sweep says which row is missing, instead of
    warming its pair up on the meta device (regression: a GPU profile failed with 'Tensor.item() ... meta')."""
    from helpers.results import MissingResultError

    class Untouchable:
        def __getattr__(self, name):
            raise AssertionError(f"the models were touched ({name})")

        def __call__(self, *args):
            raise AssertionError("the models were touched")

    monkeypatch.setenv("WORKBOOK_OUTPUT_ROOT", str(tmp_path))
    monkeypatch.setenv("WORKBOOK_RESULTS_ONLY", "1")
    prompt_rows, _ = nb07.prompt_sets(cpu_params)
    with pytest.raises(MissingResultError, match="has no row"):
        nb07.measure_sweep(cpu_params, lambda name: ResultStore("gpu-missing", name), Untouchable(), prompt_rows,
                           progress=False)


def test_gpu_measurements_set_beside_the_cpu_profiles_gpu_models(monkeypatch, capsys):
    """Regression: the CPU report called its host-cost regimes a bracket of any GPU run and the graphs' c the weight
    ratio "on any GPU", while the committed H100 rows said otherwise (eager 8B step far outside, graphs c 0.42-0.50)."""
    from helpers.experiments import gpu_costs

    folder = paths.REPO_ROOT / "results" / "gpu-h100"
    monkeypatch.setattr(gpu_costs, "gpu_cost_folders", lambda: [folder])
    steps = nb08.gpu_steps("Qwen/Qwen3-8B", {"A": (0.0, 0.311e-3)})
    row = steps.iloc[0]
    assert row["layers"] == 36 and row["eager ms"] > row["graphs ms"] > row["HBM floor ms"] > 0
    assert row["eager within the regimes"] == (row["HBM floor ms"] <= row["eager ms"] <= max(row["HBM floor ms"],
                                                                                           row["host fit A ms"]))
    numbers = nb08.print_gpu_steps(steps, "Qwen/Qwen3-8B", 0.311)
    assert numbers["gpu_measured"] == 1 and numbers["gpu_measured_profile"] == "gpu-h100"
    assert numbers["gpu_eager_per_layer_ms"] == pytest.approx(row["eager ms"] / 36)
    assert "gpu_other_name" not in numbers  # one GPU, one sentence
    launch = {name: 28 / 36 for name in nb09.HANDOUT_PAIRS} | {"Llama-3.2-1B / Llama-3.1-8B": 0.5}
    weights = {"Qwen3-0.6B / Qwen3-8B": 0.079, "Qwen3-1.7B / Qwen3-8B": 0.227, "Llama-3.2-1B / Llama-3.1-8B": 0.165}
    costs = nb09.gpu_draft_costs(launch, weights)
    c_numbers = nb09.print_gpu_draft_costs(costs)
    graphs = costs[costs["decode"] == "graphs"].set_index("pair")["c"]
    assert c_numbers["gpu_c_graphs_ratio"] == pytest.approx(graphs["Qwen3-1.7B / Qwen3-8B"]
                                                            / graphs["Qwen3-0.6B / Qwen3-8B"])
    assert c_numbers["gpu_c_graphs_between"] == int(((graphs > 0.079) & (graphs < 28 / 36)).all())
    assert "gpu_c_other_name" not in c_numbers  # one GPU: no second sentence
    monkeypatch.setattr(gpu_costs, "gpu_cost_folders", lambda: [folder, folder.parent / "gpu-h200"])
    both = nb09.print_gpu_draft_costs(nb09.gpu_draft_costs(launch, weights))
    assert both["gpu_c_name"] != both["gpu_c_other_name"] == "NVIDIA H200"  # the second GPU beside the first
    two = nb08.print_gpu_steps(nb08.gpu_steps("Qwen/Qwen3-8B", {"A": (0.0, 0.311e-3)}), "Qwen/Qwen3-8B", 0.311)
    assert two["gpu_other_name"] == "NVIDIA H200" and 0 < two["gpu_other_graphs_share"] < 1
    assert two["gpu_other_agrees"] == int(two["gpu_other_eager_within"] == two["gpu_eager_within"])
    assert both["gpu_c_other_eager_above"] == 1  # the H200 timed Qwen3-1.7B eager c at 0.919 > 28/36
    assert both["gpu_c_other_graphs_ratio"] == pytest.approx(both["gpu_c_other_graphs_17b"] / both["gpu_c_other_graphs_06b"])
    monkeypatch.setattr(gpu_costs, "gpu_cost_folders", lambda: [])  # no window yet: the models stay models
    assert nb08.print_gpu_steps(nb08.gpu_steps("Qwen/Qwen3-8B", {"A": (0.0, 1e-4)}), "x", 0.1) == {"gpu_measured": 0}
    assert nb09.print_gpu_draft_costs(nb09.gpu_draft_costs(launch, weights)) == {"gpu_c_measured": 0}
    assert "no GPU window" in capsys.readouterr().out


def test_nb08_report_headers_are_short():
    """Regression (grader): the prediction table's long headers shrank it to an unreadable size."""
    grid = pd.DataFrame(columns=["GPU", "c, roofline only", "speedup, roofline only (model)", "c, + host cost",
                                 "speedup, + host cost (model)", "c, + host cost B", "speedup, + host cost B (model)"])
    assert list(nb08.short_regime_headers(grid).columns) == ["GPU", "c (roof)", "speedup (roof)", "c (+host A)",
                                                             "speedup (+host A)", "c (+host B)", "speedup (+host B)"]


def test_nb08_prediction_with_a_gpu_windows_measured_terms(tmp_path, monkeypatch):
    """Regression (grader): §4.5.2 carried only roofline and host-cost-model predictions while the H100 window had
    measured c and T_V/T_T of the same pairs; Eq. 5 with those measured terms (and the borrowed alpha) is a column."""
    import json

    from helpers.specdec.analysis import predicted_speedup

    monkeypatch.setenv("WORKBOOK_OUTPUT_ROOT", str(tmp_path))
    folder = tmp_path / "results" / "gpu-x"
    folder.mkdir(parents=True)
    rows = [{"status": "ok", "config_key": mode, "device": "cuda", "device_name": "NVIDIA H100 80GB HBM3",
             "target": "Qwen/Qwen3-8B", "draft": "Qwen/Qwen3-0.6B", "decode": mode, "c": c,
             "verify_ratio": {"3": 1.1, "7": 1.2}} for mode, c in (("eager", 0.6), ("graphs", 0.4))]
    (folder / "09_handout_costs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    found = nb08.measured_terms_speedups("Qwen/Qwen3-8B", "Qwen/Qwen3-0.6B", 7, 0.7)
    assert found == {"H100 SXM, measured terms, eager (Eq. 5)": pytest.approx(float(predicted_speedup(7, 0.7, 0.6, 1.2))),
                     "H100 SXM, measured terms, graphs (Eq. 5)": pytest.approx(float(predicted_speedup(7, 0.7, 0.4, 1.2)))}
    assert nb08.measured_terms_speedups("Qwen/Qwen3-8B", "Qwen/Qwen3-0.6B", 5, 0.7) == {}  # gamma not measured
    predicted = pd.DataFrame([{"x": 1, **found}, {"x": 2, **{k: v / 2 for k, v in found.items()}}])
    numbers = nb08.measured_terms_numbers(predicted)
    assert numbers["pred_measured"] == 1 and numbers["pred_measured_best_ahead"] == 1
    assert numbers["pred_measured_columns"] == 2 and numbers["pred_measured_max"] == pytest.approx(max(found.values()))
    assert numbers["pred_measured_all_below"] == int(max(found.values()) < 1)
    assert nb08.measured_terms_numbers(pd.DataFrame({"x": [1, 2]})) == {"pred_measured": 0}


def test_tau_shortfall_against_omega():
    """Eq. 5's Omega(gamma, alpha) against the measured tokens per round, and Eq. 5 with tau in Omega's place."""
    from helpers.experiments import nb07
    from helpers.specdec.analysis import expected_tokens_per_round

    omega = float(expected_tokens_per_round(3, 0.6))
    frame = pd.DataFrame({"gamma": [3, 3], "alpha": [0.6, 0.6], "tokens_per_round": [0.9 * omega, omega],
                          "speedup": [1.2, 1.5], "eq5": [1.5, 1.5]})
    found = nb07.tau_shortfall(frame)
    assert found["tau_share_low"] == pytest.approx(0.9) and found["tau_share_high"] == pytest.approx(1.0)
    assert found["tau_short_rows"] == 1 and found["tau_short_all"] == 0
    assert found["eq5tau_ratio_low"] == pytest.approx(1.2 / (1.5 * 0.9)) and found["eq5tau_ratio_high"] == pytest.approx(1.0)


def test_nb07_verify_06_reads_notebook_06s_two_token_forward_over_its_one_token_one():
    rows_06 = pd.DataFrame({"kind": ["verify", "verify", "verify", "other"], "model": ["m", "m", "n", "m"],
                            "new_tokens": [1, 2, 1, 2], "time_s_median": [2.0, 2.5, 1.0, 9.0],
                            "prefix_len": [256] * 4})
    assert nb07.verify_06(rows_06) == {"m": (1.25, 256)}  # n has no 2-token forward
    assert nb07.verify_06(pd.DataFrame({"model": ["m"]})) == {}  # rows without a kind


def _optimum(shape_b="inside", tied_b=(5, 7), c_b=0.08, alpha_b=(0.78, 0.79)):
    return {"T / a": {"gamma": 3, "speedup": 1.333, "shape": "inside", "alpha_range": (0.62, 0.65), "c": 0.049,
                      "tied": [3, 5], "first": 1, "last": 9},
            "T / b": {"gamma": 7, "speedup": 1.49, "shape": shape_b, "alpha_range": alpha_b, "c": c_b,
                      "tied": list(tied_b), "first": 1, "last": 9}}


def test_nb07_optimum_numbers_flags_the_later_peak_and_the_trade_off():
    """The report words each pair's optimum, which draft peaks later and the drafts' trade-off from these flags."""
    found = nb07.optimum_numbers(_optimum())
    assert found["optimum_all_inside"] == 1 and found["optimum_at_edge"] == 0 and found["two_drafts"] == 1
    assert found["later_order"] == "overlapping" and found["later_resolved"] == 0  # 5 is tied with both bests
    assert (found["tied_a"], found["tied_b"], found["draft_b"]) == ("3, 5", "5, 7", "b") and found["drafts_tradeoff"] == 1
    later = nb07.optimum_numbers(_optimum(shape_b="at largest", tied_b=(7, 9)))
    assert later["later_order"] == "larger" and later["later_resolved"] == 1
    assert later["optimum_all_inside"] == 0 and later["optimum_at_edge"] == 1
    assert nb07.optimum_numbers(_optimum(c_b=0.04))["drafts_tradeoff"] == 0  # cheaper: no trade-off
    assert nb07.optimum_numbers(_optimum(alpha_b=(0.6, 0.79)))["drafts_tradeoff"] == 0  # alpha ranges overlap
    one = nb07.optimum_numbers({"T / a": _optimum()["T / a"]})
    assert one == {"optimum_all_inside": 1, "optimum_at_edge": 0, "two_drafts": 0, "drafts_tradeoff": 0}


def test_nb07_pair_table_joins_each_optimum_with_its_cost_row():
    costs = pd.DataFrame({"pair": ["T / a", "T / b"], "T_T (ms)": [5.134, 5.244], "above Eq. 5": [0, 1],
                          "below Eq. 5": [6, 5], "ratio low": [0.7601, 0.668], "ratio high": [0.813, 1.02]})
    table = nb07.pair_table(_optimum(), costs)
    assert list(table["pair"]) == ["T / a", "T / b"] and list(table["best gamma"]) == [3, 7]
    assert list(table["speedup"]) == [1.33, 1.49] and list(table["T_T (ms)"]) == [5.13, 5.24]
    assert list(table["measured / Eq. 5"]) == ["0.76-0.81", "0.67-1.02"] and list(table["above Eq. 5"]) == [0, 1]
    assert list(table["alpha"]) == ["0.62-0.65", "0.78-0.79"] and list(table["optimum"]) == ["inside", "inside"]


def test_nb07_cost_numbers_carry_the_claims_as_flags():
    claims = {"shared_targets": ["T"], "tt_spread": 0.021, "tv_spread": 0.004, "sides_by_pair": True,
              "low_tt_above": False, "ratios_overlap": True, "tt_over_ar_step": ["T / b"]}
    found = nb07.cost_numbers(claims)
    assert found["cost_shared"] == 1 and (found["cost_tt_spread_pct"], found["cost_tv_spread_pct"]) == (2, 0)
    assert (found["cost_sides_by_pair"], found["cost_low_tt_above"], found["cost_ratios_overlap"]) == (1, 0, 1)
    assert found["cost_slow_count"] == 1 and found["cost_slow_pairs"] == "T / b"
    alone = nb07.cost_numbers({**claims, "shared_targets": [], "tt_spread": float("nan")})
    assert alone["cost_shared"] == 0 and alone["cost_tt_spread_pct"] == 0


def test_nb07_source_numbers_name_the_first_departure_and_inversion():
    """Regression kept from the sentence era: the first departure from the expected order of alpha and the first
    pair of sources whose alpha and speedup disagree, with the numbers the report quotes."""
    by_source = pd.DataFrame({"alpha": [0.796, 0.814, 0.763, 0.72], "speedup": [1.55, 1.49, 1.48, 1.34],
                              "alpha_low": [0.73, 0.72, 0.706, 0.678], "alpha_high": [0.87, 0.92, 0.817, 0.764],
                              "prompt_tokens": [77.2, 150.4, 60.0, 40.0]},
                             index=["code", "data", "prose", "docstring"])
    checks = {"fast": "code", "slow": "docstring", "measured_order": ["data", "code", "prose", "docstring"],
              "order_swaps": [("docstring", "prose", True)], "swaps_within_noise": True, "separated": False,
              "correlation": 0.851, "rank_correlation": 0.8, "same_order": False, "overlapping_pairs": 6,
              "source_pairs": 6, "prompts": 48, "prompt_alpha_rho": 0.971, "prompt_length_partial_rho": -0.654}
    found = nb07.source_numbers(by_source, {"speedup": 1.46, "alpha": 0.773}, checks)
    assert (found["dep_above"], found["dep_below"], found["dep_above_low"], found["dep_below_high"]) == (
        "prose", "docstring", 0.71, 0.76)
    assert (found["inv_slow"], found["inv_slow_alpha"], found["inv_slow_tokens"]) == ("data", 0.814, 150)
    assert (found["inv_fast"], found["inv_fast_tokens"], found["sources_inversions"]) == ("code", 77, 1)
    assert found["sources_separated"] == 0 and found["sources_same_order"] == 0 and found["sources_all_overlap"] == 1
    assert found["prompt_alpha_word"] == "strong" and found["prompt_length_word"] == "moderate negative"
    in_order = nb07.source_numbers(by_source.assign(speedup=[1.5, 1.6, 1.4, 1.3]), {"speedup": 1.46, "alpha": 0.773},
                                   {**checks, "order_swaps": []})
    assert "dep_above" not in in_order and "inv_slow" not in in_order and in_order["sources_order_swaps"] == 0


def test_nb07_report_section_reads_only_numbers_the_notebook_writes():
    """Section 07 chooses its words with \\ifnum from flags: every key it reads is in the CPU profile's numbers file
    (which measures every branch's keys: two drafts, a departure, an inversion), and every key it compares is an
    integer there (a flag written as a word, "above" or "agrees", would break the comparison)."""
    import re

    tex = re.sub(r"(?<!\\)%.*", "", (paths.REPORT_DIR / "sections" / "07_speculative_decoding.tex").read_text())
    numbers = dict(re.findall(r"\\wbset\{([^}]*)\}\{(.*)\}",
                              (paths.REPORT_DIR / "generated" / "cpu" / "07_speculative_decoding.numbers.tex").read_text()))
    read = set(re.findall(r"\\wb(?:count)?\{([a-z0-9_]+)\}", tex))
    assert read and read <= set(numbers), sorted(read - set(numbers))
    compared = set(re.findall(r"\\ifnum\\wb\{([a-z0-9_]+)\}", tex))
    compared |= set(re.findall(r"\\ifnum\\wb\{[a-z0-9_]+\}[<=>]\\wb\{([a-z0-9_]+)\}", tex))
    assert compared and all(re.fullmatch(r"-?\d+", numbers[key]) for key in compared), {
        key: numbers[key] for key in compared if not re.fullmatch(r"-?\d+", numbers[key])}
