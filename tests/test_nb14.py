"""helpers.experiments.nb14: the committed CPU rows are found (nothing measured) and summarised into the numbers the
notebook prints; the summary's pairing, flags and crossovers on rows made up to know the answer; Poisson arrivals;
a closed batch on tiny models is lossless; ``python -m helpers.bench serving`` at toy sizes ends with its JSON."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from committed_rows import cpu_params, measure_committed
from tiny_models import perturbed_copy, tiny_qwen3

from helpers.experiments import nb14
from helpers.specdec.analysis import predicted_speedup
from helpers.experiments.nb14.study import closed_batch, drafter_factory, poisson_arrivals, speculation_config


@pytest.fixture(scope="module")
def params():
    return cpu_params(nb14)


def test_committed_rows_are_found_and_summarised(params):
    frames = measure_committed(nb14, params, progress=False)
    assert list(frames["batch"].batch) == params["serving_batch_sizes"]
    assert len(frames["load"]) == len(params["serving_loads"]) * 3 * params["serving_repeats"]
    assert len(frames["long"]) == 2 * params["serving_repeats"]
    n = nb14.summary(frames)["numbers"]
    assert n["lossless"] == 1
    assert n["low_load"] == min(params["serving_loads"]) and n["high_load"] == max(params["serving_loads"])
    for key in ("low_load_ratio", "min_ratio", "min_vs_best", "long_context_ratio"):
        assert np.isfinite(n[key]) and n[key] > 0, key


def _load_rows(goodputs: dict) -> pd.DataFrame:
    """Rows of two loads x three policies x two repeats with the given goodput per (load, policy)."""
    rows = []
    for (load, policy), value in goodputs.items():
        for repeat, wobble in enumerate((0.98, 1.02)):
            rows.append({"load": load, "policy": policy, "repeat": repeat, "goodput_tok_s": value * wobble,
                         "decode_tok_s": value, "tpot_p50_s": 1 / value, "tpot_p99_s": 1 / value, "ttft_p50_s": 0.1,
                         "ttft_p99_s": 0.2, "mean_rows": 1.0 if load < 1 else 8.0,
                         "drafting_steps": {"none": 0.0, "fixed": 1.0, "adaptive": 1.0 if load < 1 else 0.1}[policy],
                         "mean_gamma": {"none": 0.0, "fixed": 4.0, "adaptive": 4.0 if load < 1 else 1.0}[policy],
                         "alpha": 0.7, "lossless": True})
    return pd.DataFrame(rows)


def test_summary_pairs_repeats_and_finds_the_crossovers():
    load = _load_rows({(0.5, "none"): 100.0, (0.5, "fixed"): 190.0, (0.5, "adaptive"): 180.0,
                       (32.0, "none"): 400.0, (32.0, "fixed"): 360.0, (32.0, "adaptive"): 396.0})
    batch = pd.DataFrame({"batch": [1, 2, 4, 8], "speedup": [1.9, 1.5, 1.1, 0.9], "eq5_speedup": [1.8, 1.4, 0.95, 0.8],
                          "verify_ratio": [1.2, 1.4, 1.7, 2.2], "draft_ratio": [0.2] * 4, "alpha": [0.7] * 4,
                          "identical": [True] * 4, "gamma": [4] * 4, "target_step_s": [0.010, 0.012, 0.015, 0.020],
                          "T_V_s": [0.012, 0.0168, 0.0255, 0.044]})
    long = pd.DataFrame([{"context": 4096, "requests": 16, "policy": p, "repeat": r, "decode_tok_s": v,
                          "goodput_tok_s": v / 2, "mean_rows": 16.0, "alpha": 0.8, "lossless": True}
                         for r in (0, 1) for p, v in (("none", 100.0), ("fixed", 130.0))])
    found = nb14.summary({"batch": batch, "load": load, "long": long})
    n, table = found["numbers"], found["table"]
    assert list(table.policy[:3]) == ["none", "fixed", "adaptive"]  # the policies' order, per load
    assert n["low_load_ratio"] == pytest.approx(1.8) and n["low_fixed_ratio"] == pytest.approx(1.9)
    assert n["min_ratio"] == pytest.approx(0.99) and n["min_ratio_load"] == 32.0
    assert n["min_vs_best"] == pytest.approx(180 / 190) and n["min_vs_best_load"] == 0.5
    assert n["vs_best_within_noise"] == 0  # 5 % below fixed, the repeats 4 % apart
    assert n["backs_off"] == 1 and n["lossless"] == 1
    assert (n["crossover_measured"], n["crossover_eq5"]) == (8, 4)
    assert n["long_context_ratio"] == pytest.approx(1.3) and n["long_batch"] == 16
    assert n["low_alpha"] == 0.7 and n["low_eq5"] == pytest.approx(float(predicted_speedup(4, 0.7, 0.2, 1.2)))
    assert (n["batch_peak"], n["batch_peak_inside"], n["batch_tt_ms_first"]) == (1, 0, pytest.approx(10.0))
    peaked = nb14.summary({"batch": batch.assign(speedup=[1.5, 1.8, 1.1, 0.9]), "load": load, "long": long})["numbers"]
    assert (peaked["batch_peak"], peaked["batch_speedup_peak"], peaked["batch_peak_inside"]) == (2, 1.8, 1)
    assert peaked["batch_tv_ms_peak"] == pytest.approx(16.8) and peaked["batch_v_peak"] == 1.4
    assert nb14.summary({"batch": batch.assign(speedup=2.0), "load": load, "long": long.iloc[:0]}
                        )["numbers"]["crossover_measured"] == 0  # none below 1 in the sweep


def test_poisson_arrivals_start_at_zero_at_the_rate():
    times = poisson_arrivals(4000, 5.0, seed=0)
    assert times[0] == 0 and all(b >= a for a, b in zip(times, times[1:]))
    assert np.mean(np.diff(times)) == pytest.approx(0.2, rel=0.05)
    assert poisson_arrivals(10, 5.0, seed=1) == poisson_arrivals(10, 5.0, seed=1)
    with pytest.raises(ValueError, match="arrival rate"):
        poisson_arrivals(3, 0.0, seed=0)


def test_bad_policy_names_the_choices():
    assert speculation_config("none", drafter="draft", draft="x", gamma=4) is None
    assert speculation_config("fixed", drafter="lookup", draft=None, gamma=3).gamma == 3
    with pytest.raises(ValueError, match="none, fixed, adaptive"):
        speculation_config("always", drafter="draft", draft="x", gamma=4)


def test_closed_batch_is_lossless_and_measures_the_terms():
    target = tiny_qwen3(0, vocab_size=256, max_position_embeddings=128, head_scale=50)
    draft = perturbed_copy(target, 0.02, relative=True)
    make = drafter_factory("draft", draft_model=draft, limit=128, window=8, sinks=2)
    prompts = [[5, 6, 7, 8, 9], [11, 12, 13], [3, 4, 5, 6, 7, 8, 9, 10]]
    row = closed_batch(target, make, prompts, new_tokens=12, gamma=3, repeats=1)
    assert row["identical"]
    assert 0 <= row["alpha"] <= 1 and row["target_step_s"] > 0 and row["verify_ratio"] > 0 and row["eq5_speedup"] > 0


def test_the_cpu_pairs_feature_draft_drafts_in_a_closed_batch_and_is_lossless():
    """The shipped feature draft (notebook 13's) on its target, over three code prompts of different lengths: the
    prompt features the prefill returns start its pairs, and most of its guesses are accepted."""
    import torch

    from helpers.models import load_model
    from helpers.specdec.drafter_files import load_feature_draft

    target, tokenizer = load_model("cpu-pair/target", dtype=torch.float32)
    make = drafter_factory("feature", draft_model=load_feature_draft(target.eval(), "cpu-pair/eagle"), limit=4096,
                           window=64, sinks=4)
    prompts = [tokenizer.encode(text) for text in ("def add(a, b):\n    return", "import os\nimport sys\n\n\ndef main",
                                                   "class Stack:\n    def __init__(self):\n        self.items = []")]
    row = closed_batch(target, make, prompts, new_tokens=24, gamma=3, repeats=1)
    assert row["identical"] and row["alpha"] > 0.5, row["alpha"]


def test_serving_benchmark_prints_its_figures(capsys, monkeypatch, params):
    """Its table and JSON from the committed rows (the measurement is notebook 14's, tested above and in the
    rehearsal); the threads asked for reach the parameters."""
    from helpers import bench

    seen, rows = {}, measure_committed(nb14, params, progress=False)

    def committed(asked, store, progress):
        seen.update(asked)
        return rows

    monkeypatch.setattr(nb14, "measure", committed)
    figures = bench.main(["serving", "--threads", "1"])
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last == json.loads(json.dumps(figures))
    assert {"low_load_ratio", "min_ratio", "long_context_ratio", "lossless", "threads"} <= set(last)
    assert last["lossless"] is True and last["threads"] == seen["serving_threads"] == 1
