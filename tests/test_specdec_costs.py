"""helpers.experiments.specdec_costs (Eq. 5's terms) and nb09.costs (notebook 09's studies of them): the measurement
helpers run, return sane figures, and keep outputs lossless."""
import numpy as np
import pandas as pd
import pytest
import torch

from helpers.experiments.nb09.costs import (alpha_by_source, batch_table, compare_batched, compare_drafts, cost_terms,
                                           draft_summary, last_level_cache_bytes, main_study_rows, speedup_sweep)
from helpers.experiments.specdec_costs import interleaved_runs, measure_costs
from tiny_models import RAGGED_PROMPTS as PROMPTS


def test_measure_costs_shapes(float64_pair):
    target, draft = float64_pair
    costs = measure_costs(target, draft, torch.tensor([PROMPTS[0]]), [1, 3], warmup=1, repeats=2)
    assert costs["target_step_s"] > 0 and costs["T_D"] > 0 and set(costs["T_V"]) == {1, 3}
    assert set(costs["T_D_round"]) == {1, 3} and min(costs["T_D_round"].values()) > 0
    assert costs["runtime"] == "minimal"  # tiny Qwen3 models: the runtime speculative decoding picks
    batched = measure_costs(target, draft, torch.tensor([PROMPTS[0], PROMPTS[0]]), [2], warmup=0, repeats=1,
                            runtime="transformers")
    assert batched["runtime"] == "transformers" and batched["T_D_round"][2] > 0


def test_speedup_sweep_is_lossless_and_counts_rounds(float64_pair):
    target, draft = float64_pair
    sweep = speedup_sweep(target, draft, PROMPTS[:2], [2, 4], 12, repeats=1)
    assert sweep["ar"]["new_tokens"] == 24
    for row in sweep["gammas"].values():
        assert row["lossless"] and 0 < row["alpha"] < 1 and row["speedup"] > 0 and row["decode_speedup"] > 0
        assert 1 <= row["tokens_per_round"] <= 5


def test_compare_batched_rows_agree(float64_pair):
    target, draft = float64_pair
    result = compare_batched(target, draft, PROMPTS, 12, 3, repeats=1)
    assert result["rows_identical"] == 1.0 and result["generated_tokens"] == 4 * 12
    assert result["ar_steps"] == 12 and result["rounds"] == result["rounds_per_row_max"]
    assert set(result["phase_seconds"]) == {"draft", "verify", "bookkeeping", "rollback"}
    assert min(result["phase_seconds"].values()) > 0
    assert sum(result["phase_seconds"].values()) < result["sd_s"] * 3  # the phases cover one decode, not more



def test_last_level_cache_bytes_is_positive_or_unknown():
    size = last_level_cache_bytes()
    assert size is None or size >= 64 * 1024


def _rows_07():
    source = lambda s, a, r, t=0.5: {"source": s, "accepted": a, "rejections": r, "prompt_id": s,  # noqa: E731
                                      "time_s": t}
    return pd.DataFrame([
        {"target": "t", "draft": "d1", "gamma": 2, "alpha": 0.6, "speedup": 1.2, "c": 0.1, "accepted": 6,
         "rejections": 4, "new_tokens": 100, "per_prompt": [source("code", 5, 1, 0.6), source("docs", 1, 3, 0.6)]},
        {"target": "t", "draft": "d1", "gamma": 4, "alpha": 0.6, "speedup": 1.4, "c": 0.1, "accepted": 6,
         "rejections": 4, "new_tokens": 100, "per_prompt": [source("code", 4, 1), source("docs", 2, 3)]},
        # a per-source study over fewer prompts: same (draft, gamma), fewer tokens, must not replace the main row
        {"target": "t", "draft": "d1", "gamma": 4, "alpha": 0.9, "speedup": 3.0, "c": 0.1, "new_tokens": 20,
         "study": "by_source"},
        {"target": "t", "draft": "d2", "gamma": 4, "alpha": 0.8, "speedup": 1.6, "c": 0.2, "accepted": 8,
         "rejections": 2, "new_tokens": 100, "status": "ok", "per_prompt": [{"prompt_id": "a", "time_s": 0.5}, {"prompt_id": "b", "time_s": 0.5}]},  # no sources
        {"target": "other", "draft": "d2", "gamma": 4, "alpha": 0.1, "speedup": 9.0, "c": 0.2},
    ])


def test_main_study_rows_keeps_one_row_per_draft_and_gamma():
    rows = main_study_rows(_rows_07(), "t")
    assert list(zip(rows["draft"], rows["gamma"])) == [("d1", 2), ("d1", 4), ("d2", 4)]
    assert rows.loc[(rows["draft"] == "d1") & (rows["gamma"] == 4), "speedup"].item() == 1.4
    assert main_study_rows(_rows_07().drop(columns="c"), "t").empty  # missing columns: nothing, no crash


def test_draft_summary_and_alpha_by_source():
    rows = main_study_rows(_rows_07(), "t")
    summary = draft_summary(rows).set_index("draft")
    assert summary.loc["d1", "alpha"] == 12 / 20 and summary.loc["d1", "best_gamma"] == 4
    assert summary.loc["d2", "best_speedup"] == 1.6 and summary.loc["d2", "c"] == 0.2
    assert summary.loc["d1", "tied_gammas"] == [4]  # 0.5 s a prompt against 0.6 at gamma 2, on both prompts
    by_source = alpha_by_source(rows[rows["draft"] == "d1"]).set_index("source")
    assert by_source.loc["code", "alpha"] == 9 / 11 and by_source.loc["docs", "alpha"] == 3 / 9
    assert alpha_by_source(rows[rows["draft"] == "d2"]).empty


def test_cost_terms_from_a_stored_row():
    terms = cost_terms({"target_step_s": 2.0, "T_D": 0.2, "T_V": {"1": 2.2, "3": 2.6}, "T_D_round": {"1": 0.3, "3": 0.4}})
    assert terms["c"] == pytest.approx(0.1) and terms["T_V"] == {1: 2.2, 3: 2.6}
    assert terms["verify_ratio"] == {1: pytest.approx(1.1), 3: pytest.approx(1.3)}
    assert terms["c_round"] == {1: pytest.approx(0.15), 3: pytest.approx(0.2)}
    table = terms["table"]
    assert list(table["gamma"]) == [1, 3] and list(table["gamma*c"]) == pytest.approx([0.1, 0.3])
    # without an in-round measurement c_round is c
    assert cost_terms({"target_step_s": 2.0, "T_D": 0.2, "T_V": {"2": 2.4}})["c_round"] == {2: pytest.approx(0.1)}


def test_batch_table_adds_ratios_and_prediction():
    row = {column: 1.0 for column in ("ar_tokens_per_s", "sd_tokens_per_s", "speedup", "decode_speedup",
                                      "mean_accepted_per_round", "rows_identical", "rounds", "ar_steps", "ar_decode_s",
                                      "sd_decode_s")}
    rows = [{**row, "batch_size": b, "alpha": 0.7, "rounds_per_row_mean": 8.0, "rounds_per_row_max": 10.0, "target_step_s": 2.0,
             "T_D": 0.2, "T_V": 2.4, "phase_seconds": {}, "extra": "dropped"} for b in (1, 2)]
    out = batch_table(rows, 3)
    assert "extra" not in out and list(out["straggler"]) == [1.25, 1.25]
    assert out.loc[0, "c"] == pytest.approx(0.1) and out.loc[0, "T_V/T_T"] == pytest.approx(1.2)
    assert out.loc[0, "predicted / straggler"] == pytest.approx(out.loc[0, "predicted"] / 1.25)


def test_compare_drafts_cheap_against_dear():
    summary = pd.DataFrame([
        {"draft": "a", "c": 0.1, "alpha": 0.6, "best_gamma": 3, "best_speedup": 1.5, "gamma_max": 9,
         "tied_gammas": [3]},
        {"draft": "b", "c": 0.2, "alpha": 0.8, "best_gamma": 9, "best_speedup": 1.8, "gamma_max": 9,
         "tied_gammas": [7, 9]}])
    out = compare_drafts(summary)
    assert out["cheap"]["draft"] == "a" and out["dear"]["draft"] == "b"
    assert out["accuracy_wins"] and out["gamma_order"] == "larger" and out["at_edge"] == ["b"]
    assert compare_drafts(summary.iloc[:1]) is None


def test_a_larger_best_gamma_needs_every_tied_gamma_larger():
    """Regression: notebooks 07 and 09 said draft-2l 'peaks at a larger gamma' from the argmaxes (7 against 3), while
    the prompts separate neither its gammas 3, 5, 7 nor the other draft's 3 and 5: the data cannot order them."""
    from helpers.experiments.specdec_costs import tied_gammas
    from helpers.stats import order_of_sets

    rng = np.random.default_rng(0)
    base = rng.uniform(0.1, 0.3, size=12)  # per-prompt seconds at the best gamma
    scale = {1: 1.3, 3: 1.0, 5: 1.0, 7: 1.1}  # gamma 5 ties with 3 prompt by prompt, up to noise; 1 and 7 are slower
    rows = [{"gamma": g, "speedup": 1.5 / f, "per_prompt": [
        {"prompt_id": f"p{i}", "time_s": t * f * (1 + 0.03 * rng.standard_normal())} for i, t in enumerate(base)]}
        for g, f in scale.items()]
    rows[1]["speedup"] = 1.5  # gamma 3 the measured best, gamma 5 a hair behind
    rows[2]["speedup"] = 1.49
    assert tied_gammas(pd.DataFrame(rows)) == [3, 5]
    assert order_of_sets([3, 5], [3, 5, 7]) == "overlapping"
    assert order_of_sets([3], [5, 7]) == "larger" and order_of_sets([5, 7], [3]) == "smaller"
    with pytest.raises(ValueError):
        order_of_sets([], [3])
    rows[0]["per_prompt"] = rows[0]["per_prompt"][1:]
    with pytest.raises(ValueError, match="different prompts"):
        tied_gammas(pd.DataFrame(rows))


def test_interleaved_runs_keep_every_result_in_call_order():
    calls = []

    def run(name):
        calls.append(name)
        return len(calls)

    out = interleaved_runs({"a": lambda: run("a"), "b": lambda: run("b")}, 3, warmup=1)
    assert calls[:2] == ["a", "b"] and len(calls) == 8  # one warm-up each, then 3 interleaved rounds
    assert len(out["a"][0]) == len(out["a"][1]) == 3 and all(s >= 0 for s in out["b"][0])
    assert [calls[i - 1] for i in out["a"][1]] == ["a"] * 3  # results, not the warm-up's
