"""helpers.experiments.nb09 and nb08: the flags the report's sentences are chosen from (issue 42: numbers, not
sentences). Each case is one the prose distinguishes; nothing is measured."""
from __future__ import annotations

import pandas as pd
import pytest

from helpers.experiments import nb08, nb09
from helpers.prompts import load_prompts


class _Tokenizer:
    def __init__(self, length):
        self.length = length

    def __call__(self, text):
        return {"input_ids": [0] * self.length}


def _rows_07(T_T, T_D, prompt="missing", run_id="r1"):
    return pd.DataFrame([{"draft": "d", "target_step_s": T_T, "T_D_s": T_D, "c": T_D / T_T, "cost_prompt": prompt,
                          "runtime": "minimal", "run_id": run_id}])


@pytest.mark.parametrize("T_T, T_D, dearer", [(0.004, 0.0002, 2), (0.006, 0.0002, 1), (0.006, 0.0004, 0)])
def test_the_07_09_gap_is_explained_by_context_only_where_both_forwards_were_slower_there(T_T, T_D, dearer):
    """c07_dearer counts the forwards slower at the longer context (here 09's 64 tokens against 07's 41): 2, context
    may explain the gap; 1 or 0, it does not alone (the report's three wordings)."""
    cost_row = {"context_len": 64, "runtime": "minimal", "run_id": "r1"}
    prompt = load_prompts()[0]["id"]
    numbers = nb09.compare_costs_with_07(_rows_07(T_T, T_D, prompt), "d", _Tokenizer(41), 0.005, 0.0003, 0.06,
                                         cost_row)
    assert numbers["c07_available"] == 1 and numbers["c07_ctx_known"] == 1 and numbers["c07_dearer"] == dearer
    assert numbers["c07_ctx"] == 41 and numbers["c07_same_run"] == 1
    assert numbers["c07_gap_pct"] == pytest.approx(100 * abs((T_D / T_T) / 0.06 - 1))


def test_an_unknown_context_may_explain_the_gap_and_another_run_is_said_so():
    numbers = nb09.compare_costs_with_07(_rows_07(0.006, 0.0004, run_id="r0"), "d", None, 0.005, 0.0003, 0.06,
                                         {"context_len": 64, "run_id": "r1"})
    assert numbers["c07_ctx_known"] == 0 and numbers["c07_same_run"] == 0
    assert nb09.compare_costs_with_07(_rows_07(0.006, 0.0004), "other", None, 1, 1, 1, {}) == {"c07_available": 0}


def _per_prompt(alphas: dict) -> list[dict]:  # accepted / (accepted + rejections) = alpha over 100 tests
    return [{"source": s, "accepted": int(100 * a), "rejections": 100 - int(100 * a)} for s, a in alphas.items()]


def test_the_other_drafts_order_of_the_sources_is_numbers():
    """q07_other_top_fixed: one source is highest at every gamma (its span beside it); q07_order_differs: it is not
    the main run's highest."""
    rows = pd.DataFrame([{"draft": "o", "gamma": 2, "per_prompt": _per_prompt({"code": 0.8, "data": 0.6})},
                         {"draft": "o", "gamma": 5, "per_prompt": _per_prompt({"code": 0.7, "data": 0.5})}])
    numbers = nb09.other_draft_order(rows, "o", "main", "data")
    assert numbers["q07_other_top_fixed"] == 1 and numbers["q07_other_top"] == "code" and numbers["q07_order_differs"] == 1
    assert (numbers["q07_other_top_low"], numbers["q07_other_top_high"]) == pytest.approx((0.7, 0.8))
    assert (numbers["q07_other_high_low"], numbers["q07_other_high_high"]) == pytest.approx((0.5, 0.6))
    rows.loc[1, "per_prompt"] = _per_prompt({"code": 0.5, "data": 0.7})  # the top changes with gamma
    changed = nb09.other_draft_order(rows, "o", "main", "data")
    assert changed["q07_other_top_fixed"] == 0 and changed["q07_order_differs"] == 0 and "q07_other_top_low" not in changed


def _predicted(fast_host: float, slow_host: float) -> pd.DataFrame:
    rows = []
    for which, roof, scale in (("best", 1.5, 1.0), ("worst", 1.6, 0.9)):
        rows.append({"which": which, "handout pair": "p", "alpha (borrowed)": 0.7,
                     nb08.column("H100 SXM", "roofline only"): roof, nb08.column("L40S", "roofline only"): roof,
                     nb08.column("H100 SXM", "+ host cost"): fast_host * scale,
                     nb08.column("L40S", "+ host cost"): slow_host * scale})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("fast_host, slow_host, lower, same", [(0.8, 0.9, 1, 0), (0.8, 0.8, 0, 1), (0.8, 0.8005, 0, 1)])
def test_the_host_cost_comparison_of_the_two_gpus_is_two_flags(fast_host, slow_host, lower, same):
    """host_gpu_lower: lower on the faster-memory GPU for both configurations; host_gpu_same: the same on both (both
    host-bound); neither: no higher. rank_*_ahead: the best stays ahead of the worst in that regime."""
    regimes = {"roofline only": (0, 0), "+ host cost": (0, 1)}
    fast, slow = {"gpu": "H100 SXM"}, {"gpu": "L40S"}
    numbers = nb08.prediction_numbers(_predicted(fast_host, slow_host), regimes, {"H100 SXM": None, "L40S": None},
                                      fast, slow)
    assert (numbers["host_gpu_lower"], numbers["host_gpu_same"]) == (lower, same)
    assert numbers["rank_roof_ahead"] == 0 and numbers["rank_host_ahead"] == 1 and numbers["rank_host_fits_agree"] == 1
    assert numbers["pred_best_H100SXM_host"] == fast_host


def test_the_grid_says_per_fit_whether_the_host_cost_prediction_is_below_one_everywhere():
    """host_always_slower (fit A) and host2_always_slower (fit B): every configuration on both GPUs below 1; the
    ranges per GPU and fit are the report's grid_low_/grid_high_ numbers."""
    model = pd.DataFrame([{"GPU": gpu, "c, roofline only": 0.1, "c, + host cost": c, "speedup, + host cost (model)": a,
                           "speedup, + host cost B (model)": b}
                          for gpu, c, a, b in (("H100 SXM", 0.5, 0.9, 0.8), ("H100 SXM", 0.6, 0.7, 1.2),
                                               ("L40S", 0.4, 0.95, 0.9), ("L40S", 0.45, 0.8, 0.85))])
    regimes = {"roofline only": (0, 0), "+ host cost": (0, 1), "+ host cost B": (0, 2)}
    numbers = nb08.grid_numbers(model, ["H100 SXM", "L40S"], regimes)
    assert numbers["host_always_slower"] == 1 and numbers["host2_always_slower"] == 0
    assert numbers["host_slower_fits_agree"] == 0 and numbers["c_H100SXM_host"] == 0.5 and numbers["c_L40S_roof"] == 0.1
    assert (numbers["grid_low_H100SXM_host2"], numbers["grid_high_H100SXM_host2"]) == (0.8, 1.2)
    assert (numbers["grid_low_L40S_host"], numbers["grid_high_L40S_host"]) == (0.8, 0.95)
