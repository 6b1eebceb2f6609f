"""§4.5 (notebook 08): the handout's Table 3 from the GPU windows' end-to-end rows, the two GPUs' datasheet facts
that make them a bandwidth experiment, and each handout pair's optimal gamma over a window's measured terms."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from helpers.experiments import nb08
from helpers.specdec.analysis import predicted_speedup


def test_table_3_has_the_gpu_windows_e2e_rows_of_the_best_and_worst():
    """Regression: §4.5 said no second device had run §4.4's best and worst, while both GPU windows had run them end
    to end (committed rows: H100 1.41x / 0.86x, H200 1.35x / 0.79x at gamma = 7)."""
    chosen = pd.DataFrame([{"which": "best", "target": "cpu-pair/target", "draft": "cpu-pair/draft-2l", "gamma": 7},
                           {"which": "worst", "target": "cpu-pair/target", "draft": "cpu-pair/draft", "gamma": 7}])
    gpu = nb08.gpu_e2e_rows(chosen)
    found = {(r["device_name"], r["which"]): round(r["speedup"], 2) for _, r in gpu.iterrows()}
    assert found[("NVIDIA H100 80GB HBM3", "best")] == 1.41 and found[("NVIDIA H100 80GB HBM3", "worst")] == 0.86
    assert found[("NVIDIA H200", "best")] == 1.35 and found[("NVIDIA H200", "worst")] == 0.79
    measured = pd.concat([pd.DataFrame([{"which": "best", "device_name": "AMD EPYC", "speedup": 1.49},
                                        {"which": "worst", "device_name": "AMD EPYC", "speedup": 1.24}]), gpu])
    numbers = nb08.second_device_numbers(measured.rename(columns={"device_name": "device"}))
    assert numbers["t3_devices"] == 3 and numbers["t3_best_ahead_all"] == 1
    assert "NVIDIA H200: 1.35x and 0.79x" in numbers["t3_text"]
    # both Hopper with the same cores: the pair differs in bandwidth and memory only
    assert numbers["t3_same_core"] == 1 and numbers["t3_arch"] == "Hopper" and numbers["t3_cc"] == "9.0"
    assert (numbers["t3_bw_slow"], numbers["t3_bw_fast"], numbers["t3_mem_slow"], numbers["t3_mem_fast"]) == (
        3350, 4800, 80, 141)


def test_each_handout_pair_gets_its_own_optimal_gamma(tmp_path, monkeypatch):
    """Regression: the handout pairs were evaluated only at the CPU pair's gamma = 7; Eq. 5 over the same measured
    terms has each pair's optimum (a gamma not measured takes T_V/T_T from the line through the measured ones)."""
    monkeypatch.setenv("WORKBOOK_OUTPUT_ROOT", str(tmp_path))
    folder = tmp_path / "results" / "gpu-x"
    folder.mkdir(parents=True)
    ratios = {"2": 1.086, "3": 1.093, "5": 1.092, "7": 1.089}
    row = {"status": "ok", "config_key": "g", "device": "cuda", "device_name": "NVIDIA H200", "target": "Qwen/Qwen3-8B",
           "draft": "Qwen/Qwen3-0.6B", "decode": "graphs", "c": 0.424, "verify_ratio": ratios}
    (folder / "09_handout_costs.jsonl").write_text(json.dumps(row) + "\n")
    (found,) = nb08.measured_terms_optimum("Qwen/Qwen3-8B", "Qwen/Qwen3-0.6B", 0.63)
    every = {g: float(predicted_speedup(int(g), 0.63, 0.424, v)) for g, v in ratios.items()}
    assert found["speedup"] >= max(every.values()) and found["at_largest"] == pytest.approx(every["7"])
    assert found["gamma"] == 1 and found["extrapolated"] and found["speedup"] == pytest.approx(1.08, abs=0.01)
    numbers = nb08.optimum_numbers({"Qwen3-8B / Qwen3-0.6B": [found]})
    assert numbers["pred_opt"] == 1 and "gamma = 1, 1.08x" in numbers["pred_opt_text"]
    assert nb08.optimum_numbers({}) == {"pred_opt": 0}
