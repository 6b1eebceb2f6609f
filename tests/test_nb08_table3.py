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
    assert (numbers["t3_dev3_name"], round(numbers["t3_dev3_best"], 2), round(numbers["t3_dev3_worst"], 2)) == (
        "NVIDIA H200", 1.35, 0.79)
    assert numbers["t3_dev1_name"] == "AMD EPYC" and numbers["t3_dev1_best"] == 1.49
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
    assert numbers["pred_opt"] == 1 and numbers["pred_opt_max"] == pytest.approx(1.08, abs=0.01)
    assert numbers["pred_opt_any_above_one"] == 1 and numbers["pred_opt_any_extrapolated"] == 1
    table = nb08.optimum_table({"Qwen3-8B / Qwen3-0.6B": [found]})  # the report's table of the optima
    assert list(table[["gamma*", "largest gamma", "artefact g"]].iloc[0]) == [1, 7, "none"]
    assert nb08.optimum_numbers({}) == {"pred_opt": 0}


CHOSEN = pd.DataFrame([{"which": "best", "target": "cpu-pair/target", "draft": "cpu-pair/draft-2l", "gamma": 7},
                       {"which": "worst", "target": "cpu-pair/target", "draft": "cpu-pair/draft", "gamma": 7}])


def test_table_3_says_the_runs_differ_in_length_and_the_gpus_own_best(capsys):
    """Regression: §4.5 called the GPU rows 'the same configurations' as the CPU's while the GPU windows generated 128
    new tokens per prompt and the CPU 32 (alpha 0.785 -> 0.899 for the same greedy weights), and kept quiet that on
    both GPUs draft-2l at gamma = 5 reaches 1.93-1.94x against 1.35-1.41x for the CPU's best carried over."""
    gpu = nb08.gpu_e2e_rows(CHOSEN)
    assert set(gpu["new tokens"]) == {128} and set(gpu["prompts"]) == {20}
    cpu = pd.DataFrame([{"which": w, "device": "AMD EPYC", "prompts": 20, "new tokens": 32} for w in ("best", "worst")])
    lengths = nb08.run_lengths(pd.concat([cpu, gpu.rename(columns={"device_name": "device"})]))
    assert lengths == {"t3_len_differs": 1} and "AMD EPYC" in capsys.readouterr().out  # the lengths printed
    assert nb08.run_lengths(cpu)["t3_len_differs"] == 0
    own = nb08.gpu_own_best(CHOSEN)
    assert own["t3_own_best_differs"] == 1 and own["t3_own_count"] == 2
    assert own["t3_own1_cfg"] == "cpu-pair/draft-2l, gamma=5" and round(own["t3_own1_speedup"], 2) == 1.93
    assert own["t3_own1_tied"] == 0 and round(own["t3_own1_carried"], 2) == 1.41


def test_the_measured_gpu_pair_is_set_against_its_bandwidth_ratio():
    """Regression: the explanation modelled H100 vs L40S while the measured pair is H100 vs H200 (one architecture,
    3,350 vs 4,800 GB/s); the measured ratios now stand beside what the bandwidth ratio predicts, with a verdict."""
    cmp = nb08.gpu_pair_comparison(CHOSEN)
    assert cmp["t3_cmp"] == 1 and cmp["t3_cmp_bw"] == pytest.approx(4800 / 3350)
    assert cmp["t3_cmp_ar_ratio"] == pytest.approx(1.155, abs=0.01) and cmp["t3_cmp_ar_bound"] == 0
    assert cmp["t3_cmp_sd_worst"] == pytest.approx(0.789 / 0.858, abs=0.01) and cmp["t3_cmp_sd_same"] == 0



def test_a_runner_up_within_the_spread_is_a_tie():
    """Regression: the CPU's 'best' (1.492x) beat its runner-up (1.490x) by less than the 4.2% spread."""
    own = pd.DataFrame([{"status": "ok", "handout_gamma": True, "draft": "d2", "gamma": g, "speedup": s}
                        for g, s in ((7, 1.492), (5, 1.490), (2, 1.2))])
    found = nb08.runner_up(own, own, 0.042)
    assert found["best_runner_tied"] == 1 and found["best_runner_cfg"] == "d2, gamma=5"
    assert nb08.runner_up(own, own, 0.001)["best_runner_tied"] == 0


def test_a_verify_ratio_below_one_is_an_artefact_kept_out_of_eq5(tmp_path, monkeypatch):
    """Regression: the H100's Qwen3-0.6B eager row has T_V/T_T = 0.833 at gamma = 7 (and 0.741, 0.819 at 3, 5):
    verifying gamma + 1 positions cheaper than one decode step; §4.6's measured-terms worst (0.479) was computed
    from it."""
    from helpers.experiments.gpu_costs import cost_table, trusted_verify_ratios, verify_artefacts

    monkeypatch.setenv("WORKBOOK_OUTPUT_ROOT", str(tmp_path))
    folder = tmp_path / "results" / "gpu-x"
    folder.mkdir(parents=True)
    row = {"status": "ok", "config_key": "g", "device": "cuda", "device_name": "NVIDIA H100 80GB HBM3",
           "target": "Qwen/Qwen3-8B", "draft": "Qwen/Qwen3-0.6B", "decode": "eager", "c": 0.666, "target_step_s": 0.049,
           "T_D": 0.033, "target_weight_bytes": 16e9, "verify_ratio": {"2": 1.017, "3": 0.741, "5": 0.819, "7": 0.833}}
    assert verify_artefacts(row) == [3, 5, 7] and trusted_verify_ratios(row) == {2: 1.017}
    assert cost_table([row])["T_V<T_T at gamma"].iloc[0] == "3, 5, 7"
    (folder / "09_handout_costs.jsonl").write_text(json.dumps(row) + "\n")
    found = nb08.measured_terms_speedups("Qwen/Qwen3-8B", "Qwen/Qwen3-0.6B", 7, 0.6)
    assert list(found) == ["H100 SXM, measured terms, eager (Eq. 5)"] and found[list(found)[0]] != found[list(found)[0]]
    at_two = nb08.measured_terms_speedups("Qwen/Qwen3-8B", "Qwen/Qwen3-0.6B", 2, 0.6)
    assert at_two[list(at_two)[0]] == pytest.approx(float(predicted_speedup(2, 0.6, 0.666, 1.017)))
    (best,) = nb08.measured_terms_optimum("Qwen/Qwen3-8B", "Qwen/Qwen3-0.6B", 0.6)
    assert best["gamma"] == 2 and best["artefacts"] == [3, 5, 7] and not best["extrapolated"]
    predicted = pd.DataFrame({"which": ["best", "worst"], "H100 SXM, measured terms, eager (Eq. 5)": [0.69, float("nan")]})
    numbers = nb08.measured_terms_numbers(predicted)
    assert numbers["pred_measured_excluded"] == 1 and numbers["pred_measured_min"] == numbers["pred_measured_max"] == 0.69
    assert numbers["pred_measured_all_below"] == 1  # a blank (artefact) cell is no value above 1


def test_break_even_alphas_use_no_artefact():
    """The model file's break-even alpha (decode_modes.pair_terms, via nb09 and the window's goal lines) is an Eq. 5
    number too: rows reach it without their T_V/T_T below 1."""
    from helpers.experiments.nb09 import decode_modes
    from helpers.experiments.gpu_costs import without_artefacts

    row = {"target": "t", "draft": "d", "c": 0.5, "target_step_s": 0.01, "T_D": 0.005,
           "verify_ratio": {"2": 1.05, "3": 0.7, "7": 0.8}}
    assert without_artefacts(row)["verify_ratio"] == {"2": 1.05}
    assert decode_modes.pair_terms([without_artefacts(row)])["at gamma"].iloc[0] == 2  # the only trusted gamma


def test_a_best_and_worst_no_gpu_window_ran_compare_nothing():
    """Regression (the GPU student's rehearsal): under params/gpu.yaml the best and worst are the handout's pairs,
    which the windows' end-to-end rows (the CPU pair) never ran, and the comparison indexed an empty selection."""
    handout = pd.DataFrame([{"which": "best", "target": "Qwen/Qwen3-8B", "draft": "Qwen/Qwen3-0.6B", "gamma": 3},
                            {"which": "worst", "target": "Qwen/Qwen3-8B", "draft": "Qwen/Qwen3-1.7B", "gamma": 7}])
    assert nb08.gpu_pair_comparison(handout) == {"t3_cmp": 0}
