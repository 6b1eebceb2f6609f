"""helpers.generation.report (notebook 02's tables, figure and findings) and memory.GenerationPrediction."""
import matplotlib

matplotlib.use("Agg")

import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from helpers import memory  # noqa: E402
from helpers.generation import report as gr  # noqa: E402
from helpers.generation.sweeps import STATUS_NOT_RUN  # noqa: E402

QWEN3_8B = memory.load_config("Qwen/Qwen3-8B")
PREDICTION = memory.GenerationPrediction(QWEN3_8B, 8, 2, 80.0)


def ok_row(input_len, new_tokens, t):
    return {"status": "ok", "input_len": input_len, "new_tokens": new_tokens, "time_s_median": t,
            "time_s_min": 0.9 * t, "time_s_max": 1.1 * t, "throughput_tok_s_median": 8 * new_tokens / t}


def input_rows():
    # 2 s of decode steps plus 1 ms per prompt token; two lengths over the cap
    rows = [ok_row(2**n, 64, 2.0 + 0.001 * 2**n) for n in range(0, 13, 2)]
    return rows + [{"status": STATUS_NOT_RUN, "input_len": 2**14, "new_tokens": 64},
                   {"status": STATUS_NOT_RUN, "input_len": 2**15, "new_tokens": 64}]


def test_prediction_matches_the_byte_formula_and_the_gpu_limit():
    assert PREDICTION.gb(64, 64) == memory.predicted_generation_bytes(QWEN3_8B, 8, 64, 64, 2) / memory.GB
    assert not PREDICTION.over(2**14, 64) and PREDICTION.over(2**15, 64)


def test_sweep_table_keeps_every_row_and_adds_the_prediction():
    table = gr.sweep_table(input_rows(), "input_len", "Input", PREDICTION, "pred (GB)", "over")
    assert list(table["Input"]) == [r["input_len"] for r in input_rows()]
    assert table["Status"].iloc[-1].startswith("not run")
    assert table["Time, min-max (s)"].iloc[0] == "1.8-2.2"
    assert list(table["over"]) == [False] * 8 + [True]


def test_input_findings_recover_the_fixed_cost_and_the_crossover():
    found = gr.input_findings(input_rows(), 8, 4.0, PREDICTION, "Qwen/Qwen3-8B in bfloat16")
    assert found["fit"]["intercept"] == pytest.approx(2.0) and found["fit"]["slope"] == pytest.approx(0.001)
    assert found["numbers"]["genInCrossover"] == 2000 and found["growth"] > 1
    assert found["numbers"]["genInSweptCount"] == 9 and found["numbers"]["genInMeasuredCount"] == 7
    assert "2 longer inputs (16,384 to 32,768 tokens) are not run" in found["numbers"]["genInCutoffText"]
    assert found["numbers"]["genInPredictText"].startswith("from 32,768 input tokens on")
    assert found["lines"][-1].startswith("Prediction: Qwen/Qwen3-8B in bfloat16 at batch 8 exceeds 80 GB")


def test_findings_need_three_measured_lengths():
    with pytest.raises(ValueError, match="fewer than three"):
        gr.output_findings([ok_row(64, 1, 1.0), ok_row(64, 2, 1.1)])


def test_output_findings_linear_time_and_rising_throughput():
    rows = [ok_row(64, 2**n, 0.5 + 0.05 * 2**n) for n in range(9)]
    found = gr.output_findings(rows)
    assert found["numbers"]["genOutLinearText"].startswith("approximately")
    assert found["numbers"]["genOutPrefillMs"] == pytest.approx(500)
    assert found["numbers"]["genOutStepMs"] == pytest.approx(50)
    assert found["numbers"]["genOutDearer"] == "are not dearer" and found["numbers"]["genOutPeakLen"] == 256
    assert found["numbers"]["genOutInputLen"] == 64


def test_sweep_figure_marks_not_run_and_predicted_lengths():
    fig = gr.sweep_figure(input_rows(), "input_len", "input", "title", PREDICTION, "over 80 GB", total=True)
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "not run on this profile (time cap)" in labels and "over 80 GB" in labels
    assert "prompt + generated tokens/s" in labels and "OOM (measured)" not in labels


def test_model_comparison_helpers():
    compare = pd.DataFrame([
        {"model": "a", "Time, median (s)": 2.0, "t_min": 1.9, "t_max": 2.1, "vocab": 100, "KV heads": 8},
        {"model": "b", "Time, median (s)": 1.0, "t_min": 0.9, "t_max": 2.0, "vocab": 200, "KV heads": 4},
        {"model": "c", "Time, median (s)": "OOM", "t_min": None, "t_max": None, "vocab": 1, "KV heads": 1}])
    measured = gr.measured_by_time(compare)
    assert list(measured["model"]) == ["b", "a"]
    assert gr.overlap_text(measured).startswith("the min-max ranges of b and a overlap")
    assert gr.ordering_verdict(measured, "KV heads") == "explains it"
    assert gr.ordering_verdict(measured, "vocab").startswith("does not explain it: ")


def test_lengths_text_names_the_skipped_lengths():
    assert gr.lengths_text(input_rows(), "input_len", 4.0) == ("powers of 2 from 1 to 4,096 (16,384 to 32,768 not run: "
                                                               "over the 4 s time cap)")
