"""The analytical model of speculative decoding (handout §4.6, Eq. 4 and Eq. 5).

Notation (handout): gamma draft tokens per round, acceptance rate alpha (the probability that a draft token
is accepted given that all earlier ones were), T_D / T_T one forward of the draft / target model on one new
token, T_V(gamma) one target forward verifying the gamma drafts plus the bonus position. All costs enter
only as ratios to T_T: ``draft_ratio`` c = T_D / T_T and ``verify_ratio`` v(gamma) = T_V(gamma) / T_T.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import numpy as np


def _check_alpha(alpha) -> np.ndarray:
    alpha = np.asarray(alpha, dtype=float)
    if np.any((alpha < 0) | (alpha > 1)):
        raise ValueError(f"acceptance rate alpha must lie in [0, 1], got {alpha}")
    return alpha


def _check_gamma(gamma) -> np.ndarray:
    gamma = np.asarray(gamma)
    if np.any(gamma < 0) or not np.all(np.equal(np.mod(gamma, 1), 0)):
        raise ValueError(f"gamma (draft tokens per round) must be a non-negative integer, got {gamma}")
    return gamma.astype(int)


def expected_tokens_per_round(gamma, alpha):
    """Eq. 4: Omega(gamma, alpha) = (1 - alpha^(gamma+1)) / (1 - alpha), the expected tokens one round
    produces (accepted drafts plus the target's correction or bonus token). Its limit at alpha = 1 is gamma + 1."""
    gamma, alpha = _check_gamma(gamma), _check_alpha(alpha)
    with np.errstate(divide="ignore", invalid="ignore"):
        omega = (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)
    return np.where(alpha == 1.0, gamma + 1.0, omega)[()]


def relative_latency(gamma, alpha, draft_ratio, verify_ratio):
    """Eq. 5: T_avg^SD / T_T = (gamma * T_D/T_T + T_V(gamma)/T_T) / Omega(gamma, alpha).

    ``verify_ratio`` is T_V(gamma)/T_T at this gamma (a number or an array matching ``gamma``)."""
    if np.any(np.asarray(draft_ratio) < 0) or np.any(np.asarray(verify_ratio) <= 0):
        raise ValueError("draft_ratio must be >= 0 and verify_ratio > 0 (they are time ratios T_D/T_T, T_V/T_T)")
    gamma = _check_gamma(gamma)
    return ((gamma * np.asarray(draft_ratio) + np.asarray(verify_ratio))
            / expected_tokens_per_round(gamma, alpha))[()]


def predicted_speedup(gamma, alpha, draft_ratio, verify_ratio):
    """Speedup over plain decoding that Eq. 5 predicts: 1 / relative latency."""
    return (1.0 / np.asarray(relative_latency(gamma, alpha, draft_ratio, verify_ratio)))[()]


VerifyCost = Callable[[int], float] | Mapping[int, float] | float


def _verify_ratio_at(verify_ratio: VerifyCost, gamma: int) -> float:
    if callable(verify_ratio):
        return float(verify_ratio(gamma))
    if isinstance(verify_ratio, Mapping):
        if gamma not in verify_ratio:
            raise ValueError(f"no measured T_V/T_T for gamma={gamma}; measured: {sorted(verify_ratio)}")
        return float(verify_ratio[gamma])
    return float(verify_ratio)


def optimal_gamma(alpha: float, draft_ratio: float, verify_ratio: VerifyCost,
                  gammas: Iterable[int] = range(1, 17)) -> tuple[int, float]:
    """The gamma in ``gammas`` that maximises the Eq. 5 speedup, and that speedup.

    ``verify_ratio`` gives T_V(gamma)/T_T: a callable, a mapping of measured values, or a constant."""
    gammas = [int(g) for g in gammas]
    if not gammas:
        raise ValueError("gammas is empty: pass the candidate lookaheads, e.g. range(1, 9)")
    speedups = [float(predicted_speedup(g, alpha, draft_ratio, _verify_ratio_at(verify_ratio, g))) for g in gammas]
    best = int(np.argmax(speedups))
    return gammas[best], speedups[best]


def linear_verify_cost(gammas, verify_ratios) -> Callable[[int], float]:
    """Least-squares line through measured T_V(gamma)/T_T, so that gammas not measured can be predicted."""
    slope, intercept = np.polyfit(np.asarray(gammas, dtype=float), np.asarray(verify_ratios, dtype=float), 1)
    return lambda gamma: float(intercept + slope * gamma)


def estimate_alpha(accepted_counts, gammas) -> float:
    """Maximum-likelihood alpha from per-round accepted draft counts.

    Under the i.i.d. model behind Eq. 4 a round with gamma drafts accepts k < gamma drafts with probability
    alpha^k (1 - alpha) and all gamma with probability alpha^gamma (a truncated geometric law). The
    log-likelihood sum_i [k_i log alpha + 1{k_i < gamma_i} log(1 - alpha)] is maximised by
    alpha = sum k_i / (sum k_i + number of rounds that ended in a rejection).
    ``gammas`` is one int for all rounds or one per round (the last round of a request may draft fewer).

    The naive ratio accepted/drafted is biased low: drafts after the first rejection are never tested,
    yet it counts them as rejected.
    """
    counts = np.asarray(accepted_counts, dtype=int)
    gammas = np.broadcast_to(_check_gamma(gammas), counts.shape)
    if counts.size == 0:
        raise ValueError("no rounds given: estimate_alpha needs the accepted count of at least one round")
    if np.any(counts < 0) or np.any(counts > gammas):
        raise ValueError("each accepted count must lie in [0, gamma] for its round")
    accepted = counts.sum()
    rejections = np.count_nonzero(counts < gammas)
    if accepted + rejections == 0:
        raise ValueError("every round had gamma = 0: there is nothing to estimate alpha from")
    return float(accepted / (accepted + rejections))


def naive_acceptance_rate(accepted_counts, gammas) -> float:
    """accepted drafts / drafted tokens (what many write-ups call alpha; see ``estimate_alpha``)."""
    counts = np.asarray(accepted_counts, dtype=int)
    return float(counts.sum() / np.broadcast_to(np.asarray(gammas), counts.shape).sum())
