"""helpers.experiments.nb02: notebook 02's configurations find the committed rows without loading a model, a
budget is checked before a load, and the comparison's numbers and the noise sentence come from the rows."""
from __future__ import annotations

import pandas as pd
import pytest

from budget_stub import Stop, empty_stores
from helpers.experiments import nb02
from helpers.results import ResultStore
from helpers.run_all import load_params


@pytest.fixture
def params():
    return load_params("cpu")


def test_committed_rows_are_found(params):
    store = ResultStore("cpu", nb02.RESULT)
    base = nb02.base_config(params, params["gen_threads"])
    assert base["weights"] == "random" and base["device"] == "cpu"
    inputs = nb02.sweep_configs(params, base, "input")
    assert [c["input_len"] for c in inputs] == [2**n for n in sorted(params["gen_input_exponents"])]
    assert store.has(inputs[0]) and store.has(nb02.sweep_configs(params, base, "output")[0])
    assert all(store.has(nb02.compare_config(params, base, name)) for name in params["gen_models"])


def test_measure_checks_the_budget_before_loading(params):
    with pytest.raises(Stop, match=f"loading {params['gen_sweep_model']}"):
        nb02.measure(params, empty_stores, progress=False)


def test_time_cap(params):
    assert nb02.time_cap({**params, "gen_max_seconds_per_batch": 0.0}) is None
    assert nb02.time_cap({**params, "gen_max_seconds_per_batch": 4.0}) == 4.0


def test_first_timed_text():
    rows = [{"input_len": n, "status": "ok", "timestamp": t} for n, t in ((1, "b"), (2, "a"), (4, "c"))]
    assert nb02.first_timed(rows, [2]) and not nb02.first_timed(rows, [4])


def test_compare_numbers(params):
    measured = pd.DataFrame({"model": ["a", "b"], "time": [1.0, 3.0], "parameters": [2.0, 4.0], "layers": [4, 8],
                             "KV share of bytes": [0.1, 0.25]})
    verdicts = {"verdicts": {"vocab": {"explains": 2}, "KV heads": {"explains": 1, "a": "a", "b": "b"},
                             "bytes per step (MB)": {"explains": 0, "a": "b", "b": "a", "a_value": "3",
                                                     "b_value": "4", "a_time": "3", "b_time": "1"},
                             "parameters": {"explains": 2}},
                "explaining": ["layers", "parameters"], "n_separated": 1, "n_pairs": 1}
    numbers = nb02.compare_numbers(params, measured, verdicts, [])
    assert numbers["genCmpTimeRatio"] == 3.0 and numbers["genCmpParamRatio"] == 2.0
    assert numbers["genCmpOrder"] == "a, b" and numbers["genKvShares"] == "10% for a, 25% for b"
    assert numbers["genCmpFastest"] == "a" and numbers["genCmpSlowest"] == "b"
    assert numbers["genBytesExplains"] == 0 and (numbers["genBytesA"], numbers["genBytesBValue"]) == ("b", "4")
    assert numbers["genVocabExplains"] == 2 and numbers["genVocabA"] == "--"  # no pair to name
    assert (numbers["genKvExplains"], numbers["genKvA"], numbers["genKvATime"]) == (1, "a", "--")
    assert numbers["genCmpExplainedBy"] == "layers, parameters" and numbers["genCmpExplainingCount"] == 2
    assert (numbers["genCmpOverlapCount"], numbers["genCmpOverlaps"]) == (0, "--")
    assert numbers["genParamsExplain"] == 1  # the reflection's "time follows model size"


def test_prefill_split_is_checked_against_a_prefill_alone():
    """Regression: §1.3.1 charged the decode steps' own growth with context to the prefill (0.164 s at 64 tokens
    against 0.089 s for a one-token generation there) and said nothing of it; then it said so from the medians alone,
    where the rows' min-max ranges did not separate the two (and §1.3.2 found later steps not measurably dearer)."""
    from helpers.experiments import nb02

    def rows(key, points):
        return [{"status": "ok", "input_len": n, "new_tokens": k, "time_s_median": t, "time_s_min": t - spread,
                 "time_s_max": t + spread} for n, k, t, spread in points]

    inputs = rows("input", [(1, 64, 0.413, 0.005), (64, 64, 0.577, 0.005), (128, 64, 0.749, 0.005)])
    outputs = rows("output", [(64, 1, 0.089, 0.002), (64, 2, 0.1, 0.002)])
    numbers = nb02.prefill_check(inputs, outputs)
    assert numbers["genPrefillSplitS"] == pytest.approx(0.164) and numbers["genPrefillOverstated"] == 1
    assert numbers["genPrefillPerStepMs"] == pytest.approx(1e3 * (0.164 - 0.089) / 64)
    noisy = rows("input", [(1, 64, 0.413, 0.1), (64, 64, 0.577, 0.05)])  # the split's range reaches the prefill alone
    numbers = nb02.prefill_check(noisy, outputs)
    assert numbers["genPrefillOverstated"] == 0 and numbers["genPrefillSplitLowS"] == pytest.approx(0.577 - 0.05 - 0.513)
    assert numbers["genPrefillMedianAbove"] == 1  # the median split is above the prefill alone, within the noise
    assert nb02.prefill_check(inputs, outputs[1:]) == {"genPrefillChecked": 0}
