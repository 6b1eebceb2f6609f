"""helpers.experiments.nb03: notebook 03's configurations find the committed rows, measure() loads no model for
rows already stored and checks a budget before a load, and the report numbers come from the tables."""
from __future__ import annotations

import pandas as pd
import pytest

from budget_stub import Stop, empty_stores
from helpers.experiments import nb03
from helpers.results import ResultStore, config_key
from helpers.run_all import load_params


@pytest.fixture
def params():
    return load_params("cpu")


def test_settings_are_the_handouts_four(params):
    settings = nb03.settings(params)
    assert list(settings) == ["baseline", "long prompt", "smaller model", "older model"]
    assert settings["long prompt"] == (params["kvb_baseline_model"], True, params["kvb_no_cache_cap_long"])
    assert set(nb03.FIGURES) == set(settings) == set(nb03.NUMBER_KEYS)


def test_measure_finds_every_committed_row_without_loading(params, monkeypatch):
    def no_load(*args, **kwargs):
        raise AssertionError("a model was loaded although every row is stored")

    monkeypatch.setenv("WORKBOOK_RESULTS_ONLY", "1")  # a missing row would be an error, not a measurement
    monkeypatch.setattr(nb03, "load_for_sweep", no_load)
    rows = nb03.measure(params, lambda name: ResultStore("cpu", name), progress=False)
    assert rows["cold_start"]["kind"] == "cold_start"
    assert list(rows["sweep"]) == list(nb03.settings(params))
    assert {s: r["prompt_tokens"] for s, r in rows["sweep"].items()}["long prompt"] == params["kvb_long_prompt_tokens"]
    assert set(rows["matmul_share"]) == set(nb03.MATMUL_SETTINGS)
    only = nb03.measure(params, lambda name: ResultStore("cpu", name), progress=False, experiments=["cold_start"])
    assert set(only) == {"cold_start", "sweep", "matmul_share"} and not only["sweep"]


def test_measure_checks_the_budget_before_loading(params):
    with pytest.raises(Stop, match="loading cpu/Llama-3.1-8B"):
        nb03.measure(params, empty_stores, progress=False)


def test_stored_returns_the_last_row(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBOOK_OUTPUT_ROOT", str(tmp_path))
    store = ResultStore("cpu", "test_nb03")
    config = nb03.matmul_config({"kvb_dtype": "float32"}, "m")
    store.add_row(config, {"share": 0.1}, {})
    store.add_row(config, {"share": 0.2}, {})
    assert nb03.stored(store, config)["share"] == 0.2
    assert nb03.stored(store, config)["config_key"] == config_key(config)


def _explain(n_max=64):
    columns = {"prompt tokens": 8, "cached ms/token": 4.0, "prefill ms (n=1, cached)": 7.0,
               "uncached ms/step (linear term)": 5.0, "uncached: quadratic share at n_max": 0.5,
               f"speedup at n={n_max}": 2.5, "speedup at n=1": 1.0, f"n={n_max} no-cache time": "measured",
               "speedup there (measured)": 2.5, "first measured n with speedup >= 1.5": 16,
               "no-cache measured up to": 64}
    frame = pd.DataFrame([columns] * 4, index=list(nb03.NUMBER_KEYS))
    frame.loc["long prompt", f"n={n_max} no-cache time"] = "fit"
    return frame


def test_setting_numbers(params):
    explain = _explain()
    common = pd.Series({s: 1.5 for s in nb03.NUMBER_KEYS})
    numbers = nb03.setting_numbers(explain, common, nb03.settings(params), 64)
    assert numbers["kvbBaseModel"] == params["kvb_baseline_model"]
    assert numbers["kvbLongSpeedupMaxFit"] == 1  # "with the no-cache time extrapolated from the fitted quadratic"
    assert numbers["kvbOldSpeedupMaxFit"] == 0  # "... measured"
    assert numbers["kvbSmallSpeedupCommon"] == 1.5 and numbers["kvbSmallMeasured"] == 64
    # regression: the figure's caption spoke of extrapolated hollow points where every point was measured
    capped = explain.assign(**{"no-cache measured up to": 32})
    assert numbers["kvbLongAllMeasured"] == 1
    assert nb03.setting_numbers(capped, common, nb03.settings(params), 64)["kvbLongAllMeasured"] == 0
    assert len(numbers) == 4 * 14 + 1
    # regression: the report said the notebook fails on any longer-is-faster point; the check allows this much
    assert numbers["kvbMonotonicPct"] == 100 * nb03.kv_sweep.MONOTONIC_TOLERANCE


def test_cost_numbers():
    costs = pd.DataFrame({"cached ms/token": [4.0, 2.0], "weights per token (M)": [6.0, 3.0],
                          "matmul share of time": [0.655, 0.4], "vocab": [2004, 500], "MLP width": [896, 688]},
                         index=["baseline", "older model"])
    diff = {"low": 1.1, "high": 1.3, "level": 0.9, "same_model_ratio": 1.05, "resolved": True}
    numbers = nb03.cost_numbers(costs, diff)
    assert numbers["kvbTimeRatioBaseOld"] == 2.0 and numbers["kvbWeightRatioBaseOld"] == 2.0
    assert numbers["kvbTimeRatioLevel"] == 90 and numbers["kvbBaseMatmulShare"] == 66
    assert numbers["kvbBaseOldResolved"] == 1 and numbers["kvbOldVocab"] == 500


def test_times_report_keeps_the_fit_column_only_where_a_point_is_extrapolated():
    """Regression (grader): the table carried an empty 'no-cache extrapolated' column and a note about 'fit' values
    when every point had been measured."""
    index = pd.MultiIndex.from_tuples([("baseline", 1), ("baseline", 2)], names=["setting", "new_tokens"])
    table = pd.DataFrame({"without cache (s)": [0.1, 0.3], "with cache (s)": [0.1, 0.2], "speedup": [1.0, 1.5],
                          "no-cache extrapolated": [False, False]}, index=index)
    report, extrapolated = nb03.times_report(table)
    assert not extrapolated and "no-cache extrapolated" not in report and "new tokens" in report
    assert list(report["without cache (ms)"]) == [100.0, 300.0]
    report, extrapolated = nb03.times_report(table.assign(**{"no-cache extrapolated": [False, True]}))
    assert extrapolated and list(report["no-cache extrapolated"]) == ["", "fit"]


def test_a_noisy_point_moves_the_threshold_only_next_to_it():
    """Regression (grader): 'its points at n = 1, 4 stayed noisy, so that threshold is uncertain by a step' where
    the threshold lay between n = 8 and 16, which neither noisy point can move."""
    explain = _explain()
    explain.loc["smaller model", "first measured n with speedup >= 1.5"] = 16
    index = pd.MultiIndex.from_tuples([(s, n) for s in nb03.NUMBER_KEYS for n in (1, 2, 4, 8, 16, 32, 64)],
                                      names=["setting", "new_tokens"])
    table = pd.DataFrame({"noisy": False}, index=index)
    for noisy, near in (((1, 4), 0), ((8,), 1), ((16, 32), 1), ((), 0)):
        flags = table.copy()
        for n in noisy:
            flags.loc[("smaller model", n), "noisy"] = True
        numbers = nb03.smaller_against_baseline(explain, flags)
        assert numbers["kvbSmallNoisyNear"] == near and numbers["kvbSmallNoisyCount"] == len(noisy), noisy


def test_long_prompt_path_reads_the_course_file_or_says_what_is_missing(params, tmp_path):
    """kvb_long_prompt_path: empty keeps the stand-in (and the committed rows' configurations); a path is read and
    tokenized whole, its rows keyed apart; a missing file is a clear error naming the parameter."""
    assert nb03.long_prompt_text(params) is None
    assert "prompt_source" not in nb03.sweep_config(params, "long prompt", 256)  # the CPU rows still match
    prompt = tmp_path / "long_prompt.txt"
    prompt.write_text("The quick brown fox jumps over the lazy dog. " * 50)
    with_file = {**params, "kvb_long_prompt_path": str(prompt)}
    assert nb03.long_prompt_text(with_file).startswith("The quick brown fox")
    assert nb03.sweep_config(with_file, "long prompt", 500)["prompt_source"] == "long_prompt.txt"
    assert "prompt_source" not in nb03.sweep_config(with_file, "baseline", 5)  # only the long prompt's setting
    named = nb03.handout_numbers(with_file, 500, 64, 512, 32768)  # the report names the course's file
    assert (named["kvbLongPromptFile"], named["kvbLongPromptName"]) == (1, "long_prompt.txt")
    ids = nb03.SweepModels(with_file, torch_device()).prompts(params["kvb_baseline_model"])[0][True]
    assert ids.shape[0] == 1 and ids.shape[1] > 100  # the whole file, tokenized
    with pytest.raises(FileNotFoundError, match="kvb_long_prompt_path: no file"):
        nb03.long_prompt_text({**params, "kvb_long_prompt_path": str(tmp_path / "absent.txt")})


def test_handout_flags_say_what_was_measured_and_what_extrapolated(params):
    flags = nb03.handout_numbers(params, 256, 64, 512, 32768)
    assert flags["kvbHandoutMeasured"] == 0 and flags["kvbLongIsHandout"] == 0
    assert flags["kvbLongPromptFile"] == 0 and flags["kvbLongPromptName"] == "--"  # the workbook's stand-in
    assert flags["kvbGpuMeasured"] == 0  # no GPU window ran §2.1
    assert nb03.handout_numbers(params, 32768, 512, 512, 32768)["kvbHandoutMeasured"] == 1


def torch_device():
    import torch

    return torch.device("cpu")


def test_a_threshold_never_reached_cannot_move():
    """Regression (the GPU student's rehearsal): explain_table writes "not reached" where no measured length reaches
    a 1.5x speedup, and the noisy-neighbour check did int("not reached")."""
    explain = _explain()
    column = "first measured n with speedup >= 1.5"
    explain[column] = explain[column].astype(object)  # as explain_table builds it: lengths as text, or the words
    explain.loc["smaller model", column] = "not reached"
    index = pd.MultiIndex.from_tuples([(s, n) for s in nb03.NUMBER_KEYS for n in (1, 2, 4)],
                                      names=["setting", "new_tokens"])
    flags = pd.DataFrame({"noisy": True}, index=index)
    assert nb03.smaller_against_baseline(explain, flags)["kvbSmallNoisyNear"] == 0
