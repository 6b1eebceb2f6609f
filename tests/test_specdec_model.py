"""Eq. 4 / Eq. 5 of the handout and the alpha estimator, checked against values computed by hand."""
import numpy as np
import pytest

from helpers.specdec_model import (
    estimate_alpha,
    expected_tokens_per_round,
    linear_verify_cost,
    naive_acceptance_rate,
    optimal_gamma,
    predicted_speedup,
    relative_latency,
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


def test_estimate_alpha_closed_form():
    # accepted 2, 0, 4 of gamma=4: 6 accepted, two rounds ended in a rejection -> 6 / 8
    assert estimate_alpha([2, 0, 4], 4) == pytest.approx(0.75)
    assert naive_acceptance_rate([2, 0, 4], 4) == pytest.approx(0.5)
    # per-round gammas: a last round of gamma=2 that accepted both drafts saw no rejection
    assert estimate_alpha([1, 2], [4, 2]) == pytest.approx(3 / 4)


def test_estimate_alpha_recovers_simulated_alpha():
    rng = np.random.default_rng(0)
    alpha, gamma = 0.7, 5
    accepted = (rng.random((20000, gamma)) < alpha).cumprod(axis=1).sum(axis=1)  # stop at first rejection
    assert estimate_alpha(accepted, gamma) == pytest.approx(alpha, abs=0.01)
    assert naive_acceptance_rate(accepted, gamma) < alpha - 0.1  # the naive ratio is biased low
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
