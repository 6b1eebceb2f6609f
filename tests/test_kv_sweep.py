"""The §2.1 measurement tools: text prompts of exact length, forward-token counting, growth fits, the benchmark."""
from __future__ import annotations

import argparse

import numpy as np
import pytest
import torch

from helpers import kv_cache, tables
from helpers.kv_cache import bench as kv_cache_bench
from helpers.kv_cache import sweep as kv_sweep
from helpers.prompts import help_topics_text
from helpers.generation.sweeps import generate_exact
from helpers.memory import cache_tensor_bytes, kv_cache_bytes
from tiny_models import tiny_qwen3

SIZES = dict(vocab_size=128, hidden_size=32, intermediate_size=64, head_dim=8)


@pytest.fixture(scope="module")
def tiny_hf():
    return tiny_qwen3(0, **SIZES)


class CharTokenizer:
    """Stands in for a real tokenizer: one token per character."""

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [ord(ch) for ch in text]}


@pytest.mark.parametrize("num_tokens", [1, 37, 5000])
def test_text_prompt_has_exactly_the_requested_tokens(num_tokens):
    ids = kv_sweep.text_prompt_ids(CharTokenizer(), num_tokens)
    assert ids.shape == (1, num_tokens)
    assert "".join(map(chr, ids[0].tolist())) == help_topics_text()[:num_tokens]


def test_text_prompt_folds_into_a_small_vocabulary():
    ids = kv_sweep.text_prompt_ids(CharTokenizer(), 200, vocab_size=50)
    assert int(ids.max()) < 50


def test_text_prompt_too_long_is_a_clear_error():
    with pytest.raises(ValueError, match="only"):
        kv_sweep.text_prompt_ids(CharTokenizer(), len(help_topics_text()) + 1)


def test_transformers_without_cache_recomputes_the_prefix(tiny_hf):
    """Guards the meaning of use_cache=False in the pinned transformers: every step sees the whole sequence."""
    prompt = torch.randint(0, 128, (1, 6))
    counts, outputs = {}, {}
    for use_cache in (True, False):
        with kv_sweep.ForwardTokenCounter(tiny_hf) as counter:
            tokens = generate_exact(tiny_hf, prompt, 5, use_cache=use_cache)
        counts[use_cache] = counter.tokens
        assert tokens.shape == (1, 11) and torch.equal(tokens[:, :6], prompt)
        outputs[use_cache] = tokens
    assert counts[True] == [6, 1, 1, 1, 1]
    assert counts[False] == [6, 7, 8, 9, 10]
    assert torch.equal(outputs[True], outputs[False])  # the cache changes the work, not the tokens


def test_make_prompt_text_rows_or_fixed_random_ids():
    ids = kv_sweep.make_prompt(CharTokenizer(), 12, 3, vocab_size=50, device="cpu")
    assert ids.shape == (3, 12) and torch.equal(ids[0], ids[2])
    assert torch.equal(ids[:1], kv_sweep.text_prompt_ids(CharTokenizer(), 12))
    random_ids = kv_sweep.make_prompt(None, 7, 2, vocab_size=50, device="cpu")
    assert random_ids.shape == (2, 7) and int(random_ids.max()) < 50
    assert torch.equal(random_ids, kv_sweep.make_prompt(None, 7, 2, vocab_size=50, device="cpu"))


def test_transformers_cache_bytes_match_the_formula(tiny_hf):
    with torch.inference_mode():
        out = tiny_hf(torch.randint(0, 128, (2, 9)), use_cache=True)
    assert cache_tensor_bytes(out.past_key_values) == kv_cache_bytes(tiny_hf.config, 9, 2, bytes_per_elem=4)


def test_output_lengths():
    assert kv_sweep.output_lengths(16) == [1, 2, 4, 8, 16] and kv_sweep.output_lengths(1) == [1]
    # regression: any other maximum was refused ("a power of two"), late in notebooks 03 and 04
    assert kv_sweep.output_lengths(24) == [1, 2, 4, 8, 16, 24] and kv_sweep.output_lengths(3) == [1, 2, 3]
    for bad in (0, 2.0, True):
        with pytest.raises(ValueError, match="an int >= 1"):
            kv_sweep.output_lengths(bad)


def test_fit_recovers_a_quadratic_and_extrapolates():
    n = np.array([1, 2, 4, 8, 16])
    truth = np.array([0.01, 0.002, 0.0003])
    seconds = kv_sweep.extrapolate(truth, n)
    fitted = kv_sweep.fit_growth(n, seconds, degree=2)
    np.testing.assert_allclose(fitted, truth, rtol=1e-8)
    np.testing.assert_allclose(kv_sweep.extrapolate(fitted, [512]), [0.01 + 0.002 * 512 + 0.0003 * 512**2])
    with pytest.raises(ValueError, match="at least 3"):
        kv_sweep.fit_growth([1, 2], [0.1, 0.2], degree=2)


def test_paired_sweep_interleaves_modes_and_lengths_and_respects_the_cap():
    calls = []
    fns = {"cached": lambda n: calls.append(("c", n)), "uncached": lambda n: calls.append(("u", n))}
    rows = kv_sweep.paired_sweep(fns, [1, 2, 4, 8], repeats=2, device="cpu", caps={"uncached": 2})
    assert [(r["mode"], r["new_tokens"]) for r in rows] == [
        ("cached", 1), ("uncached", 1), ("cached", 2), ("uncached", 2), ("cached", 4), ("cached", 8)]
    assert all(len(r["time_s_samples"]) == 2 and r["repeats"] == 2 and not r["flagged"] for r in rows)
    round_ = [("c", 1), ("u", 1), ("c", 2), ("u", 2), ("c", 4), ("c", 8)]
    # warm-ups, then rounds over every (mode, length), alternating direction: never one mode or length in a block
    assert calls == [("c", 2), ("u", 2)] + round_ + round_[::-1]


def fake_generate(durations: dict, clock: list):
    """``generate(n)`` advancing a fake clock by ``durations[n][k]`` on its k-th timed call (last value repeats)."""
    counts: dict = {}

    def generate(n):
        if n not in durations:  # the untimed warm-up call
            return
        k = counts.get(n, 0)
        counts[n] = k + 1
        clock[0] += durations[n][min(k, len(durations[n]) - 1)]

    return generate


def test_paired_sweep_remeasures_and_flags_noisy_points():
    clock = [0.0]
    # n = 4: disturbed twice, then steady; n = 8: never settles (alternates 8 s and 12 s)
    generate = fake_generate({1: [1.0], 2: [2.0], 4: [9.0, 9.0, 4.0], 8: [8.0, 12.0] * 5}, clock)
    rows = kv_sweep.paired_sweep({"cached": generate}, [1, 2, 4, 8], repeats=3, max_repeats=9, max_spread=0.1,
                                 device="cpu", clock=lambda: clock[0])
    by_n = {r["new_tokens"]: r for r in rows}
    assert by_n[1]["repeats"] == 3 and by_n[1]["time_s_spread"] == 0 and not by_n[1]["flagged"]
    assert by_n[4]["time_s_median"] == 4.0 and not by_n[4]["flagged"] and 3 < by_n[4]["repeats"] <= 9
    assert by_n[8]["repeats"] == 9 and by_n[8]["flagged"] and by_n[8]["time_s_spread"] > 0.1
    assert kv_sweep.monotonicity_violations({("cached", r["new_tokens"]): r["time_s_median"] for r in rows}) == []


def test_paired_sweep_remeasures_points_that_contradict_each_other():
    """No spread threshold: a 4-token run timed slower than an 8-token run gets more samples (both do)."""
    clock = [0.0]
    generate = fake_generate({4: [9.0, 9.0, 9.0, 4.0], 8: [8.0]}, clock)
    rows = kv_sweep.paired_sweep({"cached": generate}, [4, 8], repeats=3, max_repeats=9, device="cpu",
                                 clock=lambda: clock[0])
    by_n = {r["new_tokens"]: r for r in rows}
    assert by_n[4]["repeats"] == by_n[8]["repeats"] == 6
    assert by_n[4]["time_s_median"] < by_n[8]["time_s_median"]
    assert not any(r["flagged"] for r in rows)  # no threshold, no flag


def test_paired_sweep_remeasures_modes_that_disagree_at_one_token():
    """Regression: at n = 1 both modes run the same forward pass; a disturbed 1.25x ratio failed CI's notebook 03.
    Points that disagree by more than SAME_WORK_TOLERANCE get more rounds until they agree (or the cap)."""
    clock = [0.0]
    cached = fake_generate({1: [1.0], 2: [2.0]}, clock)
    uncached = fake_generate({1: [1.5, 1.5, 1.5, 1.0], 2: [2.5]}, clock)
    rows = kv_sweep.paired_sweep({"with": cached, "without": uncached}, [1, 2], repeats=3, max_repeats=9,
                                 device="cpu", clock=lambda: clock[0])
    by_key = {(r["mode"], r["new_tokens"]): r for r in rows}
    assert by_key["without", 1]["repeats"] > 3 and by_key["without", 1]["time_s_median"] == 1.0
    assert by_key["with", 2]["repeats"] == by_key["without", 2]["repeats"] == 3  # n = 2: different work, no rule
    medians = {("with", 1): 1.0, ("without", 1): 1.3, ("with", 2): 2.0, ("without", 2): 9.0}
    assert kv_sweep.same_work_disagreements(medians, 1, 0.2) == {("with", 1), ("without", 1)}
    assert kv_sweep.same_work_disagreements(medians, 1, 0.5) == set()
    assert kv_sweep.same_work_disagreements(medians, 2, 0.2) == set()


def test_monotonicity_violations_names_the_contradicting_pair():
    medians = {("with", 1): 0.01, ("with", 16): 0.139, ("with", 64): 0.125, ("without", 1): 0.01,
               ("without", 2): 0.02}
    assert kv_sweep.monotonicity_violations(medians) == [(("with", 16), ("with", 64), 0.139, 0.125)]
    assert kv_sweep.monotonicity_violations({("with", 1): 0.1, ("with", 2): 0.1}) == []  # equal is not faster
    # the notebooks' check tolerates jitter between neighbours, not the corrupted pair it was written for
    jitter = {("with", 1): 0.141, ("with", 2): 0.136}
    assert kv_sweep.monotonicity_violations(jitter) and not kv_sweep.monotonicity_violations(
        jitter, kv_sweep.MONOTONIC_TOLERANCE)
    assert kv_sweep.monotonicity_violations(medians, kv_sweep.MONOTONIC_TOLERANCE) == [
        (("with", 16), ("with", 64), 0.139, 0.125)]


def test_fit_stays_non_negative_on_noisy_linear_data():
    """Noise on a straight line must not produce a negative n^2 term that bends the extrapolation down."""
    n = np.array([1, 2, 4, 8, 16])
    seconds = np.array([1.00, 2.02, 3.96, 8.05, 15.9])
    fitted = kv_sweep.fit_growth(n, seconds, degree=2)
    assert (fitted >= 0).all()
    assert kv_sweep.extrapolate(fitted, [512])[0] > 400


def test_benchmark_runs_and_reports(capsys):
    parser = argparse.ArgumentParser()
    kv_cache_bench.add_arguments(parser)
    # A small random Qwen3 analog: the test must not depend on the trained CPU pair.
    args = parser.parse_args(["--model", "cpu/Qwen3-0.6B", "--new-tokens", "4", "--prompt-len", "8", "--warmup", "0",
                              "--repeats", "1", "--threads", "1"])
    figures = kv_cache_bench.run(args)
    assert figures["identical_tokens"] is True
    assert figures["matches_transformers"] is True
    assert figures["new_tokens"] == 4 and figures["speedup"] > 0 and figures["weights"] == "random"
    assert "cached vs uncached" in capsys.readouterr().out


def test_step_costs_times_one_step_per_position_and_leaves_the_cache_rolled_back():
    mini = kv_cache.from_hf(tiny_qwen3(0, **SIZES))
    sequence = torch.randint(0, 128, (1, 40))
    costs = kv_sweep.step_costs(mini, sequence, [32, 4, 16], [4, 8], repeats=3, device="cpu")
    assert costs["cached_positions"] == [4, 16, 32] and costs["uncached_positions"] == [4, 8]
    assert all(t > 0 for t in costs["cached_s"] + costs["uncached_s"])
    assert [len(s) for s in costs["cached_samples"] + costs["uncached_samples"]] == [3] * 5
    with pytest.raises(ValueError, match="cached_positions"):
        kv_sweep.step_costs(mini, sequence, [40], [4], repeats=1, device="cpu")
    with pytest.raises(ValueError, match="uncached_positions"):
        kv_sweep.step_costs(mini, sequence, [4], [0], repeats=1, device="cpu")


def test_fit_line():
    intercept, slope = kv_sweep.fit_line([1, 2, 3, 4], [1.5, 2.0, 2.5, 3.0])
    assert intercept == pytest.approx(1.0) and slope == pytest.approx(0.5)
    assert kv_sweep.fit_line([1, 2, 3], [3, 2, 1])[1] == pytest.approx(-1.0)
    with pytest.raises(ValueError, match="two distinct"):
        kv_sweep.fit_line([2, 2], [1, 2])


def test_matmul_weights_and_time_share(tiny_hf):
    groups = kv_sweep.matmul_weights(tiny_hf)
    # per layer: q 32x32, k and v 32x16, o 32x32; mlp 3 x 32x64; lm_head 32x128
    assert groups == {"attention": 2 * (2 * 32 * 32 + 2 * 32 * 16), "mlp": 2 * 3 * 32 * 64, "lm_head": 32 * 128}
    share = kv_sweep.matmul_time_share(lambda: torch.randn(64, 64) @ torch.randn(64, 64))
    assert 0 < share <= 1


def test_within_quotes_the_tolerance_so_generated_numbers_are_byte_stable(tmp_path, monkeypatch):
    """Regression: a max |difference| of 8.58e-6 on one run and 9.1e-6 on the next changed a generated file."""
    monkeypatch.setenv("WORKBOOK_OUTPUT_ROOT", str(tmp_path))
    written = [tables.write_numbers("04_x", "unit", {"diff": kv_sweep.within(noise, 1e-4)}).read_text()
               for noise in (8.58e-6, 9.1e-6, 0.0)]
    assert written[0] == written[1] == written[2]
    with pytest.raises(ValueError, match="exceeds"):
        kv_sweep.within(2e-4, 1e-4)
    with pytest.raises(ValueError, match="exceeds"):
        kv_sweep.within(float("nan"), 1e-4)
