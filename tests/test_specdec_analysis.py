"""Eq. 4 / Eq. 5 of the handout and the alpha estimator, checked against values computed by hand."""
import numpy as np
import pytest

from helpers.gpu_specs import gpu_spec
from helpers.memory import load_config
import pandas as pd

from helpers.specdec.analysis import (
    batch_accounting,
    batched_speedup_accounting,
    estimate_alpha,
    expected_tokens_per_round,
    linear_verify_cost,
    bound_verdicts,
    magicdec_grid,
    magicdec_trend,
    optimal_gamma,
    pooled_alpha,
    pooled_speedup,
    predicted_speedup,
    relative_latency,
    sweep_claims,
    what_if_speedups,
)


def test_expected_tokens_hand_values():
    assert expected_tokens_per_round(2, 0.5) == pytest.approx(1 + 0.5 + 0.25)
    assert expected_tokens_per_round(4, 0.0) == pytest.approx(1.0)  # only the target's own token
    assert expected_tokens_per_round(3, 1.0) == pytest.approx(4.0)  # the alpha -> 1 limit, gamma + 1
    assert expected_tokens_per_round(0, 0.7) == pytest.approx(1.0)  # no drafts: plain decoding


def test_expected_tokens_vectorised_and_continuous_at_one():
    omega = expected_tokens_per_round(np.array([1, 2, 5]), np.array([0.5, 0.9, 0.999999]))
    np.testing.assert_allclose(omega, [1.5, 1 + 0.9 + 0.81, 6.0], rtol=1e-5)


def test_relative_latency_hand_value():
    # gamma=4, alpha=0.8: Omega = (1 - 0.8**5) / 0.2 = 3.3616; numerator 4 * 0.1 + 1.2 = 1.6
    assert relative_latency(4, 0.8, 0.1, 1.2) == pytest.approx(1.6 / 3.3616)
    assert predicted_speedup(4, 0.8, 0.1, 1.2) == pytest.approx(3.3616 / 1.6)


def test_free_draft_and_free_verify_give_omega():
    assert predicted_speedup(5, 0.6, 0.0, 1.0) == pytest.approx(expected_tokens_per_round(5, 0.6))


def test_optimal_gamma_hand_value():
    # alpha=0.8, c=0.1, T_V = T_T: speedup(gamma) = Omega / (1 + 0.1 gamma):
    # 1.636, 2.033, 2.271, 2.401, 2.460, 2.470 (gamma=6), 2.448 (gamma=7)
    gamma, speedup = optimal_gamma(0.8, 0.1, 1.0, gammas=range(1, 12))
    assert gamma == 6
    assert speedup == pytest.approx(3.951424 / 1.6)


def test_optimal_gamma_with_measured_mapping_and_line():
    measured = {1: 1.0, 2: 1.0, 3: 2.0}  # verification gets expensive at gamma=3
    assert optimal_gamma(0.8, 0.1, measured, gammas=[1, 2, 3])[0] == 2
    with pytest.raises(ValueError, match="gamma=4"):
        optimal_gamma(0.8, 0.1, measured, gammas=[4])
    line = linear_verify_cost([1, 2, 3], [1.1, 1.2, 1.3])
    assert line(5) == pytest.approx(1.5)


def test_linear_verify_cost_stays_positive_on_noisy_timings():
    """Regression: a falling fit through noisy dry-run timings predicted T_V <= 0 at gamma 16 (CI failed)."""
    falling = linear_verify_cost([1, 2, 3, 4], [1.3, 1.1, 1.2, 0.9])
    assert falling(16) == pytest.approx(1.125)  # flat at the mean, not 1.3 - 0.12 * 16 < 0
    steep = linear_verify_cost([1, 2, 3], [0.1, 0.1, 10.0])
    assert steep(1) == pytest.approx(0.1)  # floored at the cheapest measured verify, not -1.55
    with pytest.raises(ValueError, match="positive"):
        linear_verify_cost([1, 2], [1.0, 0.0])


def test_estimate_alpha_closed_form():
    # accepted 2, 0, 4 of gamma=4: 6 accepted, two rounds ended in a rejection -> 6 / 8 (not accepted / drafted, 6 / 12)
    assert estimate_alpha([2, 0, 4], 4) == pytest.approx(0.75)
    # per-round gammas: a last round of gamma=2 that accepted both drafts saw no rejection
    assert estimate_alpha([1, 2], [4, 2]) == pytest.approx(3 / 4)


def test_estimate_alpha_recovers_simulated_alpha():
    rng = np.random.default_rng(0)
    alpha, gamma = 0.7, 5
    accepted = (rng.random((20000, gamma)) < alpha).cumprod(axis=1).sum(axis=1)  # stop at first rejection
    assert estimate_alpha(accepted, gamma) == pytest.approx(alpha, abs=0.01)
    assert accepted.sum() / (gamma * len(accepted)) < alpha - 0.1  # accepted / drafted is biased low
    assert accepted.mean() + 1 == pytest.approx(expected_tokens_per_round(gamma, alpha), rel=0.02)


def test_invalid_inputs_raise():
    with pytest.raises(ValueError, match="alpha"):
        expected_tokens_per_round(3, 1.5)
    with pytest.raises(ValueError, match="gamma"):
        expected_tokens_per_round(-1, 0.5)
    with pytest.raises(ValueError, match="in \\[0, gamma\\]"):
        estimate_alpha([5], 4)
    with pytest.raises(ValueError, match="at least one round"):
        estimate_alpha([], 4)


def test_batched_accounting_is_exact_and_hand_checked():
    # gamma=2, alpha=0.5: Omega = 1.75; Eq. 5 = 1.75 * 10 / (2 * 1 + 12) = 1.25
    acc = batched_speedup_accounting(2, 0.5, 10.0, 1.0, 12.0, ar_step_s=11.0, ar_steps=30, round_s=16.0, rounds=20,
                                     rounds_per_row_mean=16.0, round_phase_shares={"draft": 2, "verify": 12,
                                                                                   "bookkeeping": 1, "rollback": 1})
    assert acc["eq5"] == pytest.approx(1.25)
    assert acc["straggler"] == pytest.approx(20 / 16)
    assert acc["measured"] == pytest.approx(30 * 11 / (20 * 16))
    assert acc["accounted"] == pytest.approx(acc["measured"])  # the factorisation is an identity
    assert acc["tokens"] == pytest.approx(30 / 16 / 1.75) and acc["ar_step"] == pytest.approx(1.1)
    assert acc["rounds_cost"] == pytest.approx(14 / 16)
    assert acc["overhead"] == pytest.approx(14 / 16) and acc["forwards"] == pytest.approx(1.0)


def test_batched_accounting_rejects_impossible_counts():
    with pytest.raises(ValueError, match="slowest row"):
        batched_speedup_accounting(2, 0.5, 1, 1, 1, ar_step_s=1, ar_steps=8, round_s=1, rounds=3, rounds_per_row_mean=4)
    with pytest.raises(ValueError, match="positive"):
        batched_speedup_accounting(2, 0.5, 0, 1, 1, ar_step_s=1, ar_steps=8, round_s=1, rounds=4, rounds_per_row_mean=4)


def test_magicdec_grid_trends():
    """MagicDec's argument on the roofline: at short context the speedup falls with the batch; at long context a
    bounded-KV draft's speedup rises with it, beats a full-KV draft, and configurations that do not fit are left out."""
    target, draft, gpu = load_config("Qwen/Qwen3-8B"), load_config("Qwen/Qwen3-0.6B"), gpu_spec("H100 SXM")
    rows = magicdec_grid(target, draft, gpu, alpha=0.8, gamma=3, context_lens=[512, 16384],
                         batch_sizes=[1, 8, 64, 256], draft_window=512)
    by = {(r["S"], r["draft"], r["B"]): r for r in rows}
    short = [by[512, "full KV draft", b]["speedup"] for b in (1, 8, 64, 256)]
    assert short == sorted(short, reverse=True) and short[0] > 1.5 > short[-1]
    assert by[512, "full KV draft", 8]["speedup"] == by[512, "512-token KV draft", 8]["speedup"]  # S <= window
    assert by[16384, "512-token KV draft", 8]["speedup"] > by[16384, "512-token KV draft", 1]["speedup"]
    assert by[16384, "512-token KV draft", 8]["c"] < by[16384, "full KV draft", 8]["c"]
    assert (16384, "full KV draft", 256) not in by  # 256 x 16k tokens of KV cache do not fit in 80 GB
    with pytest.raises(ValueError, match="draft_window"):
        magicdec_grid(target, draft, gpu, alpha=0.8, gamma=3, context_lens=[512], batch_sizes=[1], draft_window=0)


def test_roofline_leaves_out_an_untied_input_embedding():
    """One convention everywhere: a forward reads (and multiplies) one row of an untied input embedding per token,
    not its matrix; a tied matrix is read once, as the LM head."""
    from helpers.gpu_specs import roofline_seconds
    from helpers.memory import decode_weight_bytes, kv_cache_bytes, weight_bytes

    gpu = gpu_spec("H100 SXM")
    target, draft = load_config("Qwen/Qwen3-8B"), load_config("Qwen/Qwen3-0.6B")
    # batch 1 is memory-bound: the time is the bytes a step reads over the bandwidth
    expected = (decode_weight_bytes(target) + kv_cache_bytes(target, 257)) / (gpu["bandwidth_gbs"] * 1e9)
    assert roofline_seconds(target, gpu, 1, 1, 256) == pytest.approx(expected)
    assert decode_weight_bytes(target) < weight_bytes(target)  # untied: the embedding matrix is not read
    assert decode_weight_bytes(draft) == weight_bytes(draft)  # tied


def test_sweep_claims_hand_example():
    claims = sweep_claims([1, 2, 3, 4], [0.70, 0.71, 0.69, 0.70], [100, 80, 70, 65], [1.6, 2.1, 2.4, 2.6],
                          measured=[1.2, 1.5, 1.4, 1.3], predicted=[1.3, 1.6, 1.5, 1.45],
                          predicted_round=[1.2, 1.55, 1.45, 1.3], pooled_alpha=0.70, gamma_star=3)
    assert claims["alpha_flat"] and claims["alpha_max_z"] < 1
    assert claims["best_gamma"] == 2 and claims["interior_peak"] and claims["optimum_near"]
    assert claims["round_closer"] and claims["shape_follows"] and claims["shape_corr"] == pytest.approx(1.0)
    assert claims["flat_loss"] == pytest.approx(1 - 1.2 / 1.5)
    assert claims["below_omega"] == 4  # Omega(1, 0.7) = 1.7 > 1.6, ... every measured value is below Eq. 4
    edge = sweep_claims([1, 2], [0.5, 0.9], [100, 100], [1.4, 2.0], measured=[1.0, 2.0], predicted=[2.0, 1.0],
                        predicted_round=[2.0, 1.0], pooled_alpha=0.7, gamma_star=1)
    assert not edge["interior_peak"] and not edge["alpha_flat"] and not edge["shape_follows"]
    with pytest.raises(ValueError, match="two gammas"):
        sweep_claims([1], [0.5], [1], [1.5], measured=[1], predicted=[1], predicted_round=[1], pooled_alpha=0.5,
                     gamma_star=1)


def test_pooled_alpha_is_the_mle_over_counts_or_totals():
    assert pooled_alpha(12, 8) == 0.6
    assert pooled_alpha([3, 4, 5], [1, 0, 7]) == 12 / 20
    assert np.isnan(pooled_alpha(0, 0)) and pooled_alpha(0, 0, empty=None) is None
    assert pooled_alpha(pd.Series([3, 1]), pd.Series([1, 1])) == 4 / 6
    # the per-round estimator is the same pooled ratio
    assert estimate_alpha([2, 0, 3], 3) == pooled_alpha(5, 2)
    with pytest.raises(ValueError):
        pooled_alpha(-1, 2)


def test_pooled_speedup_time_ratio_when_identical_else_tokens_per_second():
    assert pooled_speedup(4.0, 2.0, new_tokens=10, ar_tokens=10, identical=True) == 2.0
    # sampled: 12 tokens in 2 s against 8 tokens in 4 s
    assert pooled_speedup(4.0, 2.0, new_tokens=12, ar_tokens=8, identical=False) == pytest.approx(3.0)
    with pytest.raises(ValueError):
        pooled_speedup(0.0, 1.0, new_tokens=1, ar_tokens=1, identical=True)


def test_what_if_speedups_make_one_term_ideal_at_a_time():
    out = what_if_speedups(3, 0.7, 0.1, 1.2)
    assert out["measured"] == pytest.approx(float(predicted_speedup(3, 0.7, 0.1, 1.2)))
    assert out["free draft (c = 0)"] > out["measured"] and out["free verification (T_V/T_T = 1)"] > out["measured"]
    assert out["perfect draft (alpha = 1)"] == pytest.approx(4 / (0.3 + 1.2))


def test_magicdec_trend_reads_first_and_last_batch():
    grid = pd.DataFrame([{"S": 512, "B": b, "draft": kind, "speedup": s}
                         for kind, speeds in (("full KV draft", (2.0, 1.5, 1.1)),
                                              ("512-token KV draft", (2.0, 2.2, 2.5)))
                         for b, s in zip((1, 2, 4), speeds)])
    assert magicdec_trend(grid, 512, "full") == (2.0, 1.1, 4)
    assert magicdec_trend(grid, 512, "512") == (2.0, 2.5, 4)
    with pytest.raises(ValueError):
        magicdec_trend(grid, 4096, "full")


def test_batch_accounting_one_row_per_batch_with_bracket_flags():
    by_batch = pd.DataFrame([{"batch_size": 1, "alpha": 0.7, "target_step_s": 1.0, "T_D": 0.1, "T_V": 1.2, "ar_decode_s": 32.0,
                              "ar_steps": 32, "sd_decode_s": 16.0, "rounds": 10, "rounds_per_row_mean": 10.0,
                              "phase_seconds": {"draft": 3.0, "verify": 12.0, "bookkeeping": 1.0}}])
    out = batch_accounting(by_batch, 3)
    assert list(out["B"]) == [1] and out.loc[0, "measured"] == pytest.approx(2.0)
    assert out.loc[0, "accounted"] == pytest.approx(out.loc[0, "measured"])
    assert out.loc[0, "below_eq5"] == (out.loc[0, "measured"] <= out.loc[0, "eq5"])
    assert out.loc[0, "overhead"] == pytest.approx(15 / 16)


def test_bound_verdicts_leave_differences_within_the_tolerance_uncalled():
    accounting = pd.DataFrame({"B": [1, 2, 4, 8], "measured": [1.481, 1.18, 1.10, 1.30],
                               "eq5_over_straggler": [1.486, 1.36, 1.0, 1.0], "eq5": [1.486, 1.51, 1.2, 1.25]})
    verdicts = bound_verdicts(accounting, 0.02)
    assert verdicts["below"] == [2] and verdicts["below_within"] == [1]  # 1.481 vs 1.486: 0.3 % apart
    assert verdicts["above"] == [8] and verdicts["above_within"] == []
    assert verdicts["gap"][1] == pytest.approx(1.481 / 1.486 - 1)
    assert bound_verdicts(accounting, 0.0)["below"] == [1, 2]
    with pytest.raises(ValueError):
        bound_verdicts(accounting, -0.1)


def test_break_even_alpha_is_where_the_best_gamma_predicts_no_speedup():
    from helpers.specdec.analysis import break_even_alpha, optimal_gamma, predicted_speedup

    verify = {2: 1.05, 3: 1.08, 5: 1.15, 7: 1.3}
    alpha, gamma = break_even_alpha(0.1, verify)
    assert abs(predicted_speedup(gamma, alpha, 0.1, verify[gamma]) - 1.0) < 1e-4
    assert optimal_gamma(alpha, 0.1, verify, gammas=verify)[0] == gamma  # the optimum there
    below = [predicted_speedup(g, alpha - 0.01, 0.1, v) for g, v in verify.items()]
    assert max(below) < 1.0  # just below it, no gamma pays
    assert break_even_alpha(0.2, verify)[0] > alpha  # a dearer draft needs a higher acceptance
    nan, _ = break_even_alpha(1.0, {2: 1.0, 3: 1.0})  # a draft as dear as the target never pays
    assert nan != nan
