"""The datasheet table and the roofline model built on it."""
import json

import pandas as pd
import pytest

from helpers.gpu_specs import (arithmetic_intensity, best_and_worst, collect_results, describe_ties, fit_layer_cost, forward_flops_bytes, gpu_spec, layer_cost_fit, load_gpu_specs,
                               map_by_size, roofline_seconds, run_to_run_spread)
from helpers.memory import decode_param_count, load_config
from helpers.specdec.analysis import eq5_prediction


def test_table_is_complete_and_sourced():
    specs = load_gpu_specs()
    assert {"A100 40GB SXM", "A100 80GB SXM", "H100 SXM", "H100 PCIe", "H200 SXM", "L40S", "RTX A6000",
            "RTX 4090"} <= set(specs["gpu"])
    assert specs["source"].str.len().min() > 10
    assert specs.loc[specs["gpu"] == "H100 SXM", "ridge_flop_per_byte"].item() == pytest.approx(989e12 / 3350e9)


@pytest.mark.parametrize("device_name, row", [("NVIDIA H100 80GB HBM3", "H100 SXM"), ("NVIDIA H100 PCIe", "H100 PCIe"),
                                              ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM"),
                                              ("NVIDIA A100-SXM4-40GB", "A100 40GB SXM"), ("NVIDIA L40S", "L40S"),
                                              ("NVIDIA GeForce RTX 4090", "RTX 4090"), ("NVIDIA H200", "H200 SXM")])
def test_device_names_match_their_datasheet_row(device_name, row):
    assert gpu_spec(device_name)["gpu"] == row


def test_unknown_gpu_raises_with_the_fix():
    with pytest.raises(KeyError, match="gpu_specs.csv"):
        gpu_spec("Imaginary GPU 9000")


def test_decode_intensity_is_about_tokens_per_forward():
    config = load_config("Qwen/Qwen3-8B")
    assert arithmetic_intensity(config, 1, 1, 256) == pytest.approx(1.0, abs=0.05)  # 2P FLOPs over 2P bytes
    assert arithmetic_intensity(config, 1, 8, 256) == pytest.approx(8.0, rel=0.05)
    flops, moved = forward_flops_bytes(config, 1, 1, 0)
    assert moved >= 2 * decode_param_count(config) and flops >= 2 * decode_param_count(config)


def test_roofline_time_is_the_larger_bound_plus_overhead():
    config, gpu = load_config("Qwen/Qwen3-8B"), gpu_spec("H100 SXM")
    memory_bound = 2 * decode_param_count(config) / 3350e9
    assert roofline_seconds(config, gpu, 1, 1, 0) == pytest.approx(memory_bound, rel=0.01)
    assert roofline_seconds(config, gpu, 1, 1, 0, overhead_s=0.001) == pytest.approx(memory_bound + 0.001, rel=0.01)
    compute_bound = 2 * decode_param_count(config) * 4096 / 989e12  # 4096 tokens: far past the ridge point
    # matmuls alone give compute_bound; attention over the 4096 new tokens adds less than a fifth
    assert compute_bound < roofline_seconds(config, gpu, 1, 4096, 0) < 1.2 * compute_bound


def test_best_and_worst_pick_ok_rows_by_speedup():
    rows = pd.DataFrame({"draft": ["a", "a", "b", "b"], "gamma": [2, 7, 2, 7], "speedup": [1.2, 1.5, 9.0, 1.1],
                         "status": ["ok", "ok", "oom", "ok"]})
    picked = best_and_worst(rows)
    assert list(picked["which"]) == ["best", "worst"]
    assert (picked.loc[0, "draft"], picked.loc[0, "gamma"]) == ("a", 7)  # the oom row's value is not a result
    assert (picked.loc[1, "draft"], picked.loc[1, "gamma"]) == ("b", 7)
    with pytest.raises(ValueError):
        best_and_worst(rows.iloc[0:0])


def test_best_and_worst_respect_the_handout_gamma_flag():
    # regression: §4.5's worst was gamma = 9, a gamma the sweep adds beyond the handout's {2, 3, 5, 7}
    rows = pd.DataFrame({"draft": ["a"] * 4 + ["b"] * 2, "gamma": [1, 2, 7, 9, 5, 7],
                         "speedup": [1.17, 1.2, 1.14, 1.05, 1.37, 1.9], "status": ["ok"] * 5 + ["oom"],
                         "handout_gamma": [False, True, True, False, True, True]})
    picked = best_and_worst(rows)
    assert (picked.loc[0, "draft"], picked.loc[0, "gamma"]) == ("b", 5)
    assert (picked.loc[1, "draft"], picked.loc[1, "gamma"]) == ("a", 7)  # not gamma 9, not the oom row
    assert picked["handout_gamma"].all()
    assert (best_and_worst(rows.drop(columns="handout_gamma")).loc[1, "gamma"]) == 9  # no flag: every row competes
    with pytest.raises(ValueError, match="handout_gamma"):
        best_and_worst(rows.assign(handout_gamma=False))


def test_fit_layer_cost_recovers_a_line_and_needs_two_depths():
    fixed, per_layer = fit_layer_cost([1, 2, 16], [0.1 + 0.3 * n for n in (1, 2, 16)])
    assert fixed == pytest.approx(0.1) and per_layer == pytest.approx(0.3)
    assert fit_layer_cost([1, 16], [0.3, 0.2])[1] == 0.0  # clipped: a cost cannot be negative
    with pytest.raises(ValueError, match="two different layer counts"):
        fit_layer_cost([16, 16], [1.0, 1.1])


def test_best_and_worst_name_near_ties_within_the_tolerance():
    # regression: §4.5's worst (1.223x) was 0.2% from the next row (1.226x), single repeats with 5% run-to-run spread
    rows = pd.DataFrame({"draft": ["d"] * 4 + ["d2"] * 4, "gamma": [2, 3, 5, 7] * 2,
                         "speedup": [1.226, 1.296, 1.262, 1.223, 1.325, 1.448, 1.484, 1.495], "status": "ok"})
    alone = best_and_worst(rows)
    assert list(alone["n_tied"]) == [1, 1]  # no tolerance: only the extremes themselves
    picked = best_and_worst(rows, tolerance=0.01)
    assert list(picked["n_tied"]) == [2, 2]
    assert describe_ties(picked.loc[1, "ties"]) == "d at gamma in {2, 7}"
    assert describe_ties(picked.loc[0, "ties"]) == "d2 at gamma in {5, 7}"
    assert list(picked.loc[1, "ties"]["speedup"].agg(["min", "max"]).round(2)) == [1.22, 1.23]  # the span beside it
    wide = best_and_worst(rows, tolerance=0.05)
    assert sorted(wide.loc[1, "ties"]["gamma"]) == [2, 5, 7] and sorted(wide.loc[0, "ties"]["gamma"]) == [3, 5, 7]
    assert describe_ties(rows.iloc[[3]]) == "d at gamma=7"


def test_run_to_run_spread_compares_one_target_timed_for_two_drafts():
    rows = pd.DataFrame({"target": ["t"] * 4 + ["u"] * 2, "draft": ["a", "a", "b", "b", "c", "c"],
                         "target_step_s": [5.0, 5.0, 4.0, 4.0, 9.0, 9.0]})
    assert run_to_run_spread(rows) == pytest.approx(0.25)
    assert run_to_run_spread(rows[rows["target"] == "u"]) != run_to_run_spread(rows[rows["target"] == "u"])  # nan


def test_layer_cost_fit_reports_clipping_and_residuals():
    # the shape of §4.5's fit: three points, a negative least-squares intercept clipped to 0, a 2-layer draft far off
    fit = layer_cost_fit([1, 2, 16], [0.277e-3, 0.445e-3, 4.876e-3], names=["d1", "d2", "t"])
    assert fit["clipped"] and fit["fixed_s"] == 0.0 and fit["points"] == 3
    # relative to the measurement, not to the fit: the report says "misses by X% of the measured time"
    assert fit["residuals"].loc["d2", "residual"] == pytest.approx(1 - 2 * fit["per_layer_s"] * 1e3 / 0.445)
    assert fit["max_abs_residual"] > 0.25
    exact = layer_cost_fit([1, 2, 4, 8], [0.189e-3 + 0.114e-3 * n for n in (1, 2, 4, 8)])
    assert not exact["clipped"] and exact["r2"] == pytest.approx(1.0) and exact["max_abs_residual"] < 1e-9
    assert exact["fixed_s"] == pytest.approx(0.189e-3) and exact["per_layer_s"] == pytest.approx(0.114e-3)


def test_map_by_size_matches_ranks():
    assert map_by_size({"small": 1, "big": 2}, {"Q1.7": 17, "Q0.6": 6}) == {"small": "Q0.6", "big": "Q1.7"}
    assert map_by_size({"only": 5}, {"x": 1, "y": 2}) == {"only": "y"}
    three = map_by_size({"a": 1, "b": 2, "c": 3}, {"x": 1, "y": 2})
    assert three["a"] == "x" and three["c"] == "y"


def test_eq5_prediction_roofline_only_does_not_depend_on_the_gpu_but_host_cost_does():
    """Regression (§4.5): with no host cost a batch-1 step is memory-bound on both GPUs, so c is a byte ratio and the
    predicted speedup is the same; a per-layer host cost hurts the higher-bandwidth GPU more."""
    target, draft = load_config("Qwen/Qwen3-8B"), load_config("Qwen/Qwen3-0.6B")
    h100, l40s = gpu_spec("H100 SXM"), gpu_spec("L40S")
    roof = [eq5_prediction(target, draft, g, 3, 0.7, 256) for g in (h100, l40s)]
    assert roof[0]["speedup"] == pytest.approx(roof[1]["speedup"], rel=1e-3)
    assert roof[0]["c"] == pytest.approx(decode_param_count(draft) / decode_param_count(target), rel=0.1)
    assert roof[0]["v"] == pytest.approx(1.0, abs=0.01)
    host = [eq5_prediction(target, draft, g, 3, 0.7, 256, host_per_layer_s=3e-4) for g in (h100, l40s)]
    assert host[0]["speedup"] < host[1]["speedup"] < roof[1]["speedup"]
    assert host[0]["target_step_s"] == pytest.approx(3e-4 * target.num_hidden_layers)  # host-bound: max(), not a sum


def test_collect_results_reads_a_given_root_latest_row_per_config(tmp_path):
    """Regression: notebook 08 validated alone (fresh output root) falls back to the committed results."""
    (tmp_path / "results" / "cpu").mkdir(parents=True)
    rows = [{"config_key": "a", "speedup": 1.0}, {"config_key": "b", "speedup": 2.0}, {"config_key": "a", "speedup": 3.0}]
    text = "\n".join(json.dumps(r) for r in rows) + '\n{"config_key": "c", "spee'  # last row cut short mid-write
    (tmp_path / "results" / "cpu" / "07_x.jsonl").write_text(text)
    frame = collect_results("07_x", root=tmp_path)
    assert sorted(frame["speedup"]) == [2.0, 3.0] and set(frame["profile"]) == {"cpu"}
    assert collect_results("07_missing", root=tmp_path).empty
