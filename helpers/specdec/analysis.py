"""The analytical model of speculative decoding (handout §4.6, Eq. 4 and Eq. 5).

Notation (handout): gamma draft tokens per round, acceptance rate alpha (the probability that a draft token
is accepted given that all earlier ones were), T_D / T_T one forward of the draft / target model on one new
token, T_V(gamma) one target forward verifying the gamma drafts plus the bonus position. All costs enter
only as ratios to T_T: ``draft_ratio`` c = T_D / T_T and ``verify_ratio`` v(gamma) = T_V(gamma) / T_T.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import numpy as np
import pandas as pd

from helpers.gpu_specs import roofline_seconds
from helpers.stats import line_fit
from helpers.memory import kv_cache_bytes, weight_bytes


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


def break_even_alpha(draft_ratio: float, verify_ratio: Mapping[int, float], tol: float = 1e-6) -> tuple[float, int]:
    """The lowest acceptance rate at which speculation pays by Eq. 5 (predicted speedup 1) for a draft of cost
    ``draft_ratio`` = T_D/T_T and measured ``verify_ratio`` {gamma: T_V(gamma)/T_T}, and the gamma that reaches it:
    at that alpha the gamma is Eq. 5's optimum, and above it speculation wins. (nan, gamma) where no alpha below 1
    pays (gamma * c + T_V/T_T >= gamma + 1 for every gamma). The speedup rises with alpha, so a bisection per gamma."""
    best = (float("nan"), min(verify_ratio))
    for gamma, ratio in sorted(verify_ratio.items()):
        gamma = int(gamma)
        if predicted_speedup(gamma, 1.0, draft_ratio, ratio) <= 1.0:
            continue
        low, high = 0.0, 1.0
        if predicted_speedup(gamma, 0.0, draft_ratio, ratio) >= 1.0:
            high = 0.0
        while high - low > tol:
            mid = (low + high) / 2
            low, high = (low, mid) if predicted_speedup(gamma, mid, draft_ratio, ratio) >= 1.0 else (mid, high)
        if not high >= best[0]:  # also replaces the initial nan
            best = (high, gamma)
    return best


def linear_verify_cost(gammas, verify_ratios) -> Callable[[int], float]:
    """Least-squares line through measured T_V(gamma)/T_T, so that gammas not measured can be predicted.

    Verifying more tokens never costs less, so noisy timings (a falling fit) give a flat line at their mean, and the
    line never predicts less than the cheapest measured verify (a steep fit through noise can cross zero)."""
    x, y = np.asarray(gammas, dtype=float), np.asarray(verify_ratios, dtype=float)
    if x.size == 0 or x.size != y.size or not np.all(y > 0):
        raise ValueError(f"need as many positive T_V/T_T ratios as gammas, got gammas {list(x)} and ratios {list(y)}")
    line = line_fit(x, y, clamp="flat_if_falling")  # the explorer's line too (helpers.explorers.specdec.verify_line)
    floor = float(y.min())
    return lambda gamma: max(floor, float(line(gamma)))


def pooled_alpha(accepted, rejections, *, empty=float("nan")):
    """THE pooled alpha of the workbook: maximum likelihood over many rounds, sum(accepted) / (sum(accepted) +
    sum(rejections)), where a rejection is a round that ended before all its drafts were accepted (see
    :func:`estimate_alpha`). ``accepted`` and ``rejections`` are totals (numbers) or per-round/per-prompt counts
    (summed here); ``empty`` is returned when nothing was tested (no accepted draft and no rejection)."""
    accepted, rejections = float(np.sum(accepted)), float(np.sum(rejections))
    if accepted < 0 or rejections < 0:
        raise ValueError(f"accepted and rejections must be counts >= 0, got {accepted} and {rejections}")
    return accepted / (accepted + rejections) if accepted + rejections > 0 else empty


def pooled_speedup(ar_time_s: float, time_s: float, *, new_tokens: int, ar_tokens: int, identical: bool) -> float:
    """THE pooled speedup over AR of a configuration on the same prompts: summed AR time / summed time when the
    outputs are identical (greedy: the same tokens), else the ratio of tokens/s (sampling ends prompts at
    different lengths)."""
    if min(ar_time_s, time_s) <= 0:
        raise ValueError(f"times must be positive, got AR {ar_time_s} s and {time_s} s")
    if identical and new_tokens == ar_tokens:
        return float(ar_time_s / time_s)
    return float((new_tokens / time_s) / (ar_tokens / ar_time_s))


def what_if_speedups(gamma: int, alpha: float, draft_ratio: float, verify_ratio: float) -> dict[str, float]:
    """Eq. 5 at one configuration and with one term made ideal at a time: "measured" (as given), "free draft
    (c = 0)", "free verification (T_V/T_T = 1)" and "perfect draft (alpha = 1)"."""
    return {
        "measured": float(predicted_speedup(gamma, alpha, draft_ratio, verify_ratio)),
        "free draft (c = 0)": float(predicted_speedup(gamma, alpha, 0.0, verify_ratio)),
        "free verification (T_V/T_T = 1)": float(predicted_speedup(gamma, alpha, draft_ratio, 1.0)),
        "perfect draft (alpha = 1)": float(predicted_speedup(gamma, 1.0, draft_ratio, verify_ratio)),
    }


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
    alpha = pooled_alpha(counts.sum(), np.count_nonzero(counts < gammas), empty=None)
    if alpha is None:
        raise ValueError("every round had gamma = 0: there is nothing to estimate alpha from")
    return alpha


def batched_speedup_accounting(gamma: int, alpha: float, T_T: float, T_D: float, T_V: float, *, ar_step_s: float,
                               ar_steps: int, round_s: float, rounds: int, rounds_per_row_mean: float,
                               round_phase_shares: Mapping[str, float] | None = None) -> dict:
    """Why a measured batched speedup differs from Eq. 5: an exact factorisation into measured terms.

    Batched AR decodes ``ar_steps`` tokens per row in ``ar_steps`` forwards of ``ar_step_s`` seconds each; batched
    speculative decoding takes ``rounds`` rounds (the slowest row's count) of ``round_s`` seconds each, while a mean
    row needed ``rounds_per_row_mean``. Then, exactly,

        measured = ar_steps * ar_step_s / (rounds * round_s)
                 = Eq. 5 / straggler * tokens * ar_step * rounds_cost,

    with Eq. 5 = Omega(gamma, alpha) T_T / (gamma T_D + T_V), straggler = rounds / rounds_per_row_mean, tokens =
    (ar_steps / rounds_per_row_mean) / Omega (measured tokens per row-round against Eq. 4), ar_step = ar_step_s / T_T
    (an AR step of the generation against the isolated forward) and rounds_cost = (gamma T_D + T_V) / round_s (the
    model's round against the measured one). ``round_phase_shares`` (fractions of a round's time by phase, e.g.
    draft/verify/bookkeeping/rollback) splits rounds_cost into ``forwards`` = (gamma T_D + T_V) / (the round's draft
    and verify time) and ``overhead`` = (draft and verify time) / round_s, the per-round work Eq. 5 leaves out.
    """
    if min(T_T, T_D, T_V, ar_step_s, round_s) <= 0 or min(ar_steps, rounds, rounds_per_row_mean) <= 0:
        raise ValueError("times, step and round counts must be positive")
    if rounds < rounds_per_row_mean:
        raise ValueError(f"rounds ({rounds}) is the slowest row's count: it cannot be below the mean "
                         f"({rounds_per_row_mean})")
    omega = float(expected_tokens_per_round(gamma, alpha))
    model_round = gamma * T_D + T_V
    out = {
        "measured": ar_steps * ar_step_s / (rounds * round_s),
        "eq5": omega * T_T / model_round,
        "straggler": rounds / rounds_per_row_mean,
        "tokens": ar_steps / rounds_per_row_mean / omega,
        "ar_step": ar_step_s / T_T,
        "rounds_cost": model_round / round_s,
    }
    out["eq5_over_straggler"] = out["eq5"] / out["straggler"]
    out["accounted"] = out["eq5_over_straggler"] * out["tokens"] * out["ar_step"] * out["rounds_cost"]
    if round_phase_shares is not None:
        total = sum(round_phase_shares.values())
        forward_share = (round_phase_shares.get("draft", 0.0) + round_phase_shares.get("verify", 0.0)) / total
        if forward_share <= 0:
            raise ValueError("round_phase_shares has no draft or verify time")
        out["overhead"] = forward_share
        out["forwards"] = out["rounds_cost"] / forward_share
    return out


def eq5_prediction(target_config, draft_config, gpu: pd.Series, gamma: int, alpha: float, context_len: int,
                   host_fixed_s: float = 0.0, host_per_layer_s: float = 0.0) -> dict:
    """Eq. 5's speedup for one (target, draft, gamma) at batch 1 on a GPU, from the roofline (a model prediction).

    Each forward takes max(roofline time, host time): kernel launches are asynchronous, so the host issuing a
    forward's kernels (``host_fixed_s + host_per_layer_s * layers``) and the GPU running them overlap, and the
    slower of the two sets the pace. With zero host time (a captured CUDA graph) only the roofline remains."""
    def step(config, tokens):
        host = host_fixed_s + host_per_layer_s * config.num_hidden_layers
        return max(roofline_seconds(config, gpu, 1, tokens, context_len), host)

    t_t, t_d, t_v = step(target_config, 1), step(draft_config, 1), step(target_config, gamma + 1)
    c, v = t_d / t_t, t_v / t_t
    return {"target_step_s": float(t_t), "T_D_s": float(t_d), "T_V_s": float(t_v), "c": float(c), "v": float(v),
            "speedup": float(predicted_speedup(gamma, alpha, c, v))}


def magicdec_grid(target_config, draft_config, gpu, *, alpha: float, gamma: int, context_lens: Iterable[int],
                  batch_sizes: Iterable[int], draft_window: int) -> list[dict]:
    """Roofline (ideal-kernel, bf16) Eq. 5 speedups over batch size and context length, MagicDec's argument.

    For every context length S and batch size B: T_T and T_V from :func:`helpers.gpu_specs.roofline_seconds` of the
    target (the weights a decode step reads), T_D for two drafts, one reading a full KV cache of S tokens and one a bounded window of
    ``draft_window`` tokens (StreamingLLM-style). A configuration whose weights and KV caches (both models) do not
    fit in ``gpu["vram_gb"]`` is left out. Rows: S, B, draft (``"full KV draft"`` or ``"<window>-token KV draft"``),
    c, T_V/T_T and the speedup.
    """
    if draft_window < 1:
        raise ValueError(f"draft_window must be >= 1 token, got {draft_window}")
    rows = []
    for context_len in context_lens:
        for batch_size in batch_sizes:
            t_t = roofline_seconds(target_config, gpu, batch_size, 1, context_len)
            t_v = roofline_seconds(target_config, gpu, batch_size, gamma + 1, context_len)
            for kind, draft_context in (("full KV draft", context_len),
                                        (f"{draft_window}-token KV draft", min(context_len, draft_window))):
                needed = (weight_bytes(target_config) + weight_bytes(draft_config)
                          + kv_cache_bytes(target_config, context_len, batch_size)
                          + kv_cache_bytes(draft_config, draft_context, batch_size))
                if needed > gpu["vram_gb"] * 1e9:
                    continue  # weights and KV caches do not fit on this GPU
                t_d = roofline_seconds(draft_config, gpu, batch_size, 1, draft_context)
                rows.append({"S": int(context_len), "B": int(batch_size), "draft": kind, "c": t_d / t_t,
                             "T_V/T_T": t_v / t_t,
                             "speedup": float(predicted_speedup(gamma, alpha, t_d / t_t, t_v / t_t))})
    return rows


def sweep_claims(gammas, alpha, rounds, tokens_per_round, measured, predicted, predicted_round, *,
                 pooled_alpha: float, gamma_star: int) -> dict:
    """The checks behind the prose about a gamma sweep (one entry per gamma in every array argument).

    ``alpha_max_z``: the largest distance of a gamma's alpha from ``pooled_alpha`` in binomial standard errors of
    that gamma's acceptance tests (accepted drafts plus one test per round, an upper bound on the rejections);
    ``alpha_flat`` when it is below 2. ``interior_peak``: the best measured gamma is neither the first nor the last.
    ``optimum_near``: ``gamma_star`` (the Eq. 5 optimum) is within one of the measured best. ``below_omega``: gammas
    whose tokens per round fall below Omega(gamma, alpha). ``round_closer``: ``predicted_round`` has a smaller
    mean absolute relative error than ``predicted``. ``shape_corr``: Spearman rank correlation of predicted and
    measured speedups (``shape_follows`` when >= 0.5). ``flat_loss``: the largest relative loss of a gamma within
    one of the best."""
    frame = pd.DataFrame({"gamma": np.asarray(gammas, dtype=int), "alpha": alpha, "rounds": rounds,
                          "tpr": tokens_per_round, "measured": measured, "predicted": predicted,
                          "predicted_round": predicted_round}).sort_values("gamma", ignore_index=True)
    if len(frame) < 2:
        raise ValueError("a sweep needs at least two gammas to check its shape")
    tests = frame["tpr"] * frame["rounds"]  # (accepted + 1) per round = accepted drafts + one test per round
    z = ((frame["alpha"] - pooled_alpha) / np.sqrt(pooled_alpha * (1 - pooled_alpha) / tests)).abs()
    best = frame.loc[frame["measured"].idxmax()]
    omega = expected_tokens_per_round(frame["gamma"].to_numpy(), frame["alpha"].to_numpy())
    error = (frame["predicted"] / frame["measured"] - 1).abs().mean()
    error_round = (frame["predicted_round"] / frame["measured"] - 1).abs().mean()
    shape = float(np.corrcoef(frame["predicted"].rank(), frame["measured"].rank())[0, 1])
    near = frame[(frame["gamma"] - best["gamma"]).abs() <= 1]
    return {
        "alpha_max_z": float(z.max()), "alpha_flat": bool(z.max() < 2),
        "best_gamma": int(best["gamma"]), "best_speedup": float(best["measured"]),
        "interior_peak": bool(frame["gamma"].iloc[0] < best["gamma"] < frame["gamma"].iloc[-1]),
        "optimum_near": bool(abs(int(gamma_star) - int(best["gamma"])) <= 1),
        "below_omega": int((frame["tpr"].to_numpy() < omega).sum()),
        "round_closer": bool(error_round < error), "shape_corr": shape, "shape_follows": bool(shape >= 0.5),
        "flat_loss": float(1 - near["measured"].min() / best["measured"]),
    }


def magicdec_trend(grid, context_len: int, draft_kind: str) -> tuple[float, float, int]:
    """From :func:`magicdec_grid` rows (a DataFrame, batch sizes ascending): the speedup at the smallest and at the
    largest batch size that fits, for context length ``context_len`` and the draft whose name starts with
    ``draft_kind`` ("full" or the window size), and that largest batch size."""
    group = grid[(grid["S"] == context_len) & (grid["draft"].str.startswith(draft_kind))]
    if group.empty:
        raise ValueError(f"no roofline rows for S={context_len} and a {draft_kind!r} draft")
    return group.iloc[0]["speedup"], group.iloc[-1]["speedup"], int(group.iloc[-1]["B"])


def batch_accounting(by_batch, gamma: int):
    """:func:`batched_speedup_accounting` for every row of a batched comparison (columns ``batch_size``, ``alpha``,
    ``T_T``, ``T_D``, ``T_V``, ``ar_decode_s``, ``ar_steps``, ``sd_decode_s``, ``rounds``, ``rounds_per_row_mean``,
    ``phase_seconds``): one row per batch size ``B`` with the factors, and the flags ``below_eq5`` (measured <= Eq. 5)
    and ``above_eq5_over_straggler`` (measured >= Eq. 5 / straggler)."""
    accounting = pd.DataFrame([{"B": int(r.batch_size), **batched_speedup_accounting(
        gamma, r.alpha, r.target_step_s, r.T_D, r.T_V, ar_step_s=r.ar_decode_s / r.ar_steps, ar_steps=int(r.ar_steps),
        round_s=r.sd_decode_s / r.rounds, rounds=int(r.rounds), rounds_per_row_mean=r.rounds_per_row_mean,
        round_phase_shares=r.phase_seconds)} for r in by_batch.itertuples()])
    accounting["below_eq5"] = accounting["measured"] <= accounting["eq5"]
    accounting["above_eq5_over_straggler"] = accounting["measured"] >= accounting["eq5_over_straggler"]
    return accounting


def bound_verdicts(accounting, tolerance: float) -> dict:
    """Which batch sizes of :func:`batch_accounting` lie outside the bracket Eq. 5 / straggler <= measured <= Eq. 5,
    split by a relative noise ``tolerance`` (differences smaller than it are not called): ``below`` (measured below
    Eq. 5 / straggler by more than it), ``below_within`` (below, but within it), ``above`` and ``above_within`` (the
    same against Eq. 5), and ``gap`` (B -> measured / (Eq. 5 / straggler) - 1)."""
    if tolerance < 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance}")
    gap_low = accounting["measured"] / accounting["eq5_over_straggler"] - 1
    gap_high = accounting["measured"] / accounting["eq5"] - 1
    b = accounting["B"].astype(int)
    return {"below": b[gap_low < -tolerance].tolist(), "below_within": b[(gap_low < 0) & (gap_low >= -tolerance)].tolist(),
            "above": b[gap_high > tolerance].tolist(), "above_within": b[(gap_high > 0) & (gap_high <= tolerance)].tolist(),
            "gap": dict(zip(b.tolist(), gap_low.tolist()))}
