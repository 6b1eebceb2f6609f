"""helpers.experiments.nb06: notebook 06's configurations find the committed rows without loading a model, a
budget is checked before a load, and the roofline summary says where the forward turns compute-bound."""
from __future__ import annotations

import pytest

from budget_stub import Stop, empty_stores
from helpers.experiments import nb06
from helpers.memory import load_config
from helpers.results import ResultStore
from helpers.run_all import load_params


@pytest.fixture
def params():
    return load_params("cpu")


def test_measure_finds_every_committed_row_without_loading(params, monkeypatch):
    def no_load(*args, **kwargs):
        raise AssertionError("a model was loaded although every row is stored")

    monkeypatch.setenv("WORKBOOK_RESULTS_ONLY", "1")
    monkeypatch.setattr(nb06, "load_for_sweep", no_load)
    rows = nb06.measure(params, lambda name: ResultStore("cpu", name), progress=False)
    assert [r["batch_size"] for r in rows["forward"]] == params["fp_batch_sizes"]
    assert [r["new_tokens"] for r in rows["verify"]] == params["fp_verify_tokens"]
    assert {r["weights"] for r in rows["forward"]} == {"random"} and rows["verify"][0]["weights"] == "cpu-pair"


def test_measure_checks_the_budget_before_loading(params):
    with pytest.raises(Stop, match=f"loading {params['fp_model']}"):
        nb06.measure_forward(params, empty_stores, progress=False)
    with pytest.raises(Stop, match=f"loading {params['fp_verify_model']}"):
        nb06.measure_verify(params, empty_stores, progress=False)


def test_configs_carry_the_loaded_label(params):
    assert {c["weights"] for c in nb06.forward_configs(params, "pretrained")} == {"pretrained"}
    assert [c["new_tokens"] for c in nb06.verify_configs(params)] == params["fp_verify_tokens"]


def test_roofline_numbers_on_an_h100():
    ai, numbers = nb06.roofline_numbers(load_config(nb06.ROOFLINE_MODEL), "H100 SXM", [1, 2, 4, 8, 16], 256)
    assert list(ai) == [1, 2, 4, 8, 16] and numbers["fpAiFirst"] == ai[1]
    assert numbers["fpRoofComputeFrom"] == min((b for b, v in ai.items() if v > numbers["fpRidge"]), default=0)
    assert numbers["fpRoofGpu"] == "H100 SXM" and numbers["fpRoofBFirst"] == 1
    assert numbers["fpRoofFirstBound"] in ("compute-bound", "memory-bound")
    assert numbers["fpRoofNearLinear"] == int(numbers["fpRoofLinearShare"] >= 0.8)


def test_batch_one_is_the_dearest_only_beyond_noise():
    """Regression: notebook 06 called B = 1 the dearest per sequence on any excess, noise included."""
    import pandas as pd

    from helpers.experiments.nb06 import batch_one_dearest

    rows = pd.DataFrame({"batch_size": [1, 2, 4], "ms_per_sequence": [55.7, 53.7, 52.0],
                         "time_ms_std": [1.3, 2.56, 4.0], "trials": [5, 5, 5]})
    found = batch_one_dearest(rows)  # 2.0 ms apart; twice the SE of the difference sqrt(1.3^2 + 1.28^2)/sqrt(5)*2
    assert found["fpBOneDearest"] == 1 and found["fpBOneExcessPct"] == pytest.approx(100 * (55.7 / 53.7 - 1))
    assert found["fpBOneMarginPct"] == pytest.approx(100 * 2 * (1.3**2 / 5 + 1.28**2 / 5) ** 0.5 / 53.7)
    assert found["fpBOneAgainst"] == 2  # the dearest larger batch
    noisy = batch_one_dearest(rows.assign(time_ms_std=[5.0, 10.0, 4.0]))
    assert noisy["fpBOneDearest"] == 0  # "not the dearest per sequence beyond noise"


def test_gpu_forward_rows_set_the_roofline_beside_a_measurement():
    """Regression: the report said small batches save little on the H100 by the roofline, while the committed H100
    rows showed B = 16 at 1.5x B = 1 (a host-bound eager forward at 25x its roofline time)."""
    h100 = {"profile": "gpu-h200", "gpu": "NVIDIA H200", "first": 1, "last": 16, "first_ms": 60.0, "last_ms": 90.0,
            "ratio": 1.5, "roof_ratio": 16.0, "over_roof": 25.0, "remeasure": False, "flagged": [], "faster": [],
            "faster_ms": None}
    numbers = nb06.gpu_forward_numbers([h100])
    assert numbers["fpGpuMeasured"] == 1 and numbers["fpGpuHostBound"] == int(numbers["fpGpuOverRoof"] > nb06.HOST_BOUND)
    assert numbers["fpGpuRemeasure"] == 0 and numbers["fpGpuFirstMs"] == 60.0  # the means: one statistic
    assert nb06.gpu_forward_numbers([]) == {"fpGpuMeasured": 0}  # the roofline stays a model
    # a GPU profile's report quotes its own GPU (regression: the H200 report quoted the H100's forward)
    other = {**h100, "profile": "gpu-h100", "gpu": "NVIDIA H100 80GB HBM3", "first_ms": 61.1}
    both = nb06.gpu_forward_numbers([h100, other], "gpu-h100")
    assert both["fpGpuName"] == other["gpu"] and both["fpOtherGpuName"] == h100["gpu"]  # the other one beside it
    assert nb06.gpu_forward_numbers([h100, other], "cpu")["fpGpuName"] == h100["gpu"]  # not a GPU profile: the first
    # a sweep to re-measure is quoted as no ratio, beside a good one or alone
    bad = {**other, "remeasure": True, "faster": [8], "faster_ms": 50.0}  # B = 8 faster than B = 1 beyond the spread
    mixed = nb06.gpu_forward_numbers([h100, bad], "gpu-h100")
    assert mixed["fpGpuName"] == h100["gpu"] and "fpOtherGpuName" not in mixed and mixed["fpGpuRemeasure"] == 1
    assert nb06.gpu_forward_numbers([bad]) == {
        "fpGpuRemeasure": 1, "fpGpuRemeasureName": bad["gpu"], "fpGpuRemeasureFirst": 1, "fpGpuRemeasureFlagged": "--",
        "fpGpuRemeasureFaster": "8", "fpGpuRemeasureFlaggedCount": 0, "fpGpuRemeasureFasterCount": 1,
        "fpGpuRemeasureFasterMs": 50.0, "fpGpuRemeasureFirstMs": 61.1, "fpGpuMeasured": 0,
        "fpGpuOutdatedCount": 0, "fpGpuOutdatedName": "--", "fpGpuRemeasureDetailName": bad["gpu"]}


def test_a_gpu_sweep_with_rows_to_remeasure_or_a_larger_batch_faster_is_quoted_as_no_ratio():
    """Regression: the CPU report quoted the H200's B = 1 (79.3 ms) and B = 16 (86.8 ms, 1.09x, medians) while its
    B = 8 measured 65.2 ms (mean), faster than B = 1 beyond the spread, and B = 2, 4 were flagged to re-measure."""
    from helpers.memory import load_config

    found = nb06.gpu_forward_rows(load_config(nb06.ROOFLINE_MODEL), 256)
    h200 = next(f for f in found if f["profile"] == "gpu-h200")
    assert h200["remeasure"] and h200["flagged"] == [2, 4] and h200["faster"] == [8]  # B = 2, 4; B = 8 faster than 1
    assert h200["faster_ms"] == pytest.approx(65.2, abs=0.05) and h200["first_ms"] == pytest.approx(79.3, abs=0.05)
    quoted = nb06.gpu_forward_numbers(found, "cpu")
    assert quoted["fpGpuRemeasure"] == 1 and quoted.get("fpGpuName") != h200["gpu"]  # the H200's sweep: no ratio
    assert (quoted["fpGpuRemeasureFlagged"], quoted["fpGpuRemeasureFaster"]) == ("2, 4", "8")
    rows = [{"batch_size": 1, "time_ms_mean": 79.3, "time_ms_std": 2.0, "trials": 20},
            {"batch_size": 8, "time_ms_mean": 65.2, "time_ms_std": 10.7, "trials": 20},
            {"batch_size": 4, "time_ms_mean": 74.0, "time_ms_std": 14.7, "trials": 20}]  # within its spread
    assert nb06.sweep_not_monotone(rows) == [8]
    assert nb06.sweep_not_monotone([{**r, "time_ms_mean": 80.0 + r["batch_size"]} for r in rows]) == []


def test_the_roofline_is_the_rows_own_gpu_where_the_datasheet_table_has_it(capsys):
    assert nb06.roofline_gpu("NVIDIA H200", True) == "H200 SXM"
    assert nb06.roofline_gpu("NVIDIA H200", False) == nb06.REFERENCE_GPU  # CPU rows: the reference GPU's roofline
    assert nb06.roofline_gpu("AMD EPYC", True) == nb06.REFERENCE_GPU  # regression: a KeyError stopped the notebook
    assert "no datasheet row for 'AMD EPYC'" in capsys.readouterr().out


def test_verify_order_tells_jitter_from_noise():
    """Regression (a table review): the verify table dipped at k = 5 -> 6 with no word on it."""
    def row(k, samples):
        return {"status": "ok", "new_tokens": k, "time_s_samples": samples,
                "time_s_median": sorted(samples)[len(samples) // 2]}

    growing = [row(1, [1.0, 1.1, 1.2]), row(2, [1.3, 1.4, 1.5])]
    assert nb06.verify_order(growing)["numbers"]["vfDips"] == 0
    jitter = growing + [row(3, [1.35, 1.38, 1.6])]  # a lower median, inside k = 2's range
    found = nb06.verify_order(jitter)
    assert found["numbers"]["vfDips"] == 1 and found["numbers"]["vfDipsNoisy"] == 0 and not found["drift"]  # jitter
    noise = growing + [row(3, [1.0, 1.05, 1.1])]  # every sample faster than all of k = 2's
    assert nb06.verify_order(noise)["numbers"]["vfDipsNoisy"] == 1
    assert nb06.verify_order([row(1, [1.0])])["numbers"]["vfDipsChecked"] == 0


def _samples_ms(values):
    return [v / 1e3 for v in values]


def test_bimodal_and_drifting_samples_are_flagged_to_re_measure():
    """Regression: the H200's B = 2 row (59, 60 ms, then 18 samples near 102 ms) was read as a finding (B = 2 slower
    than B = 16); its two levels flag it. One level with jitter is not flagged, nor a row of five."""
    bimodal = nb06.sample_reliability(_samples_ms([60, 59] + [102, 104, 101, 103, 100, 102, 101, 103, 102, 101,
                                                              100, 104, 102, 101, 103, 102, 101, 102]))
    assert bimodal["bimodal"] and "two levels (2 samples near 60 ms, 18 near 102 ms)" == bimodal["reason"]
    steady = nb06.sample_reliability(_samples_ms([79, 80, 78, 81, 79, 77, 80, 82, 79, 78, 80, 81, 79, 80, 78, 79, 81,
                                                  80, 79, 78]))
    assert steady["reason"] == ""
    drifting = nb06.sample_reliability(_samples_ms([50 + i for i in range(20)]))  # a steady climb over the trials
    assert drifting["drift"] and not drifting["bimodal"]
    rows = [{"status": "ok", "batch_size": 2, "time_s_samples": _samples_ms([60, 59] + [102] * 18)},
            {"status": "ok", "batch_size": 16, "time_s_samples": _samples_ms([87, 86, 88, 87, 86])}]
    assert list(nb06.unreliable_rows(rows, "batch_size")) == [2]


def test_a_sweep_that_falls_with_run_order_is_a_drift_not_a_dip():
    """Regression: the H200's verify medians fell steadily 72.6 -> 52.0 ms as k grew (run in that order); the
    prose called the dips jitter. The run-order check marks every row to re-measure instead."""
    medians = [72.6, 74.5, 71.2, 68.5, 63.1, 61.8, 52.0]
    rows = [{"status": "ok", "new_tokens": k, "time_s_median": m / 1e3, "timestamp": f"2026-11-27T05:5{i}:00",
             "time_s_samples": _samples_ms([m - 1, m, m + 1, m, m - 1])}
            for i, (k, m) in enumerate(zip([1, 2, 3, 4, 5, 6, 8], medians))]
    drift = nb06.sweep_drift(rows, "new_tokens")
    assert drift["drift"] and drift["rho"] < -0.9
    order = nb06.verify_order(rows)
    assert order["drift"] and order["numbers"]["vfDrift"] == 1 and order["numbers"]["vfDriftRows"] == 7
    assert order["numbers"]["vfDriftFirstMs"] == pytest.approx(72.6) and order["numbers"]["vfDriftLastMs"] == pytest.approx(52.0)
    rising = [dict(r, time_s_median=(40 + 2 * r["new_tokens"]) / 1e3) for r in rows]
    assert not nb06.sweep_drift(rising, "new_tokens")["drift"]


def test_rows_of_an_earlier_protocol_are_quoted_nowhere():
    """Regression: the CPU and H200 reports quoted the H100's §4.2 medians, timed with 5 trials after 3 warm-ups
    where its profile now asks 20 after 10 (its notebook 06 is pending on them)."""
    old = [{"trials": 5, "warmup": 3, "batch_size": 1}]
    assert nb06.current_rows("gpu-h100", old) == []
    assert nb06.current_rows("gpu-h100", [{"trials": 20, "warmup": 10, "batch_size": 1}])
    assert nb06.current_rows("no-such-profile", old) == old
    from helpers.memory import load_config

    found = nb06.gpu_forward_rows(load_config(nb06.ROOFLINE_MODEL), 256)
    h100 = next(f for f in found if f["profile"] == "gpu-h100")  # said to be re-measured, not left out in silence
    assert h100["outdated"] and h100["remeasure"] and h100["timed_with"] == (3, 5) and "ratio" not in h100
    quoted = nb06.gpu_forward_numbers(found, "gpu-h100")
    assert quoted["fpGpuOutdatedCount"] == 1 and quoted["fpGpuOutdatedName"] == h100["gpu"]
    assert h100["gpu"] in quoted["fpGpuRemeasureName"] and quoted["fpGpuRemeasureDetailName"] != h100["gpu"]
    assert quoted.get("fpGpuName") != h100["gpu"]  # no ratio from it


def test_a_sweep_to_remeasure_shows_no_ratio_in_its_table():
    import pandas as pd

    rows = [{"batch_size": b, "status": "ok"} for b in (1, 2, 8)]
    table = pd.DataFrame({"B": [1, 2, 8], "mean (ms)": [79.3, 97.4, 65.2], "time / time(B=1)": [1, 1.23, 0.82],
                          "status": ["ok", "to re-measure", "ok"]})
    marked = nb06.mark_remeasure(table, rows, [8])
    assert "time / time(B=1)" not in marked and list(marked["status"]) == [
        "ok", "to re-measure", "faster than the first B: to re-measure"]
    clean = table.drop(columns="status")
    assert nb06.mark_remeasure(clean, rows, []) is clean
