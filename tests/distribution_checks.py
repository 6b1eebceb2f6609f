"""The statistics the sampling tests share: a model's exact first-two-token law and the goodness-of-fit checks
that sampled tokens follow it (importable from any test module, like tiny_models)."""
from __future__ import annotations

import numpy as np
import torch
from scipy import stats as scipy_stats


def exact_joint(model, prompt: torch.Tensor, temperature: float) -> np.ndarray:
    """P(x1, x2 | prompt) under the model: a (V, V) table, computed with V + 1 forwards."""
    vocab = model.config.vocab_size
    with torch.inference_mode():
        first = torch.softmax(model(input_ids=prompt).logits[0, -1].double() / temperature, -1)
        pairs = torch.cat([prompt.expand(vocab, -1), torch.arange(vocab)[:, None]], dim=1)
        second = torch.softmax(model(input_ids=pairs).logits[:, -1].double() / temperature, -1)
    return (first[:, None] * second).numpy()


def pooled(counts: np.ndarray, expected_counts: np.ndarray, small: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(observed, expected) with the ``small`` cells pooled into one, expected rescaled to the observed total."""
    f_obs = np.append(counts[~small], counts[small].sum())
    f_exp = np.append(expected_counts[~small], expected_counts[small].sum())
    return f_obs, f_exp * f_obs.sum() / f_exp.sum()


def chi_square_pvalue(counts: np.ndarray, expected: np.ndarray, samples: int) -> float:
    """Chi-square goodness of fit of ``counts`` to the probabilities ``expected``, cells expected < 5 pooled."""
    expected_counts = expected * samples
    return scipy_stats.chisquare(*pooled(counts, expected_counts, expected_counts < 5)).pvalue


def tv_tolerance(expected: np.ndarray, samples: int, *, size: int = 4000, rng=None) -> float:
    """The 99.9th percentile of the total variation that exact multinomial sampling of ``samples`` draws shows."""
    rng = np.random.default_rng(0) if rng is None else rng
    null = rng.multinomial(samples, expected, size=size) / samples
    return float(np.quantile(0.5 * np.abs(null - expected).sum(axis=1), 0.999))


def sampling_pair(vocab: int = 16, temperature: float = 1.0):
    """``(target, draft, prompt, expected)``: the sampling tests' two independent random 1-layer Qwen3 models over a
    ``vocab``-token vocabulary (so the draft is far from the target and the residual is sampled often), their
    prompt, and the target's exact first-two-token law as a flat, normalised vector."""
    from tiny_models import PEAK, tiny_qwen3

    target = tiny_qwen3(10, vocab_size=vocab, num_hidden_layers=1, head_scale=PEAK)
    draft = tiny_qwen3(11, vocab_size=vocab, num_hidden_layers=1, head_scale=PEAK)
    prompt = torch.tensor([[3, 1, 4]])
    expected = exact_joint(target, prompt, temperature).ravel()
    return target, draft, prompt, expected / expected.sum()


def first_two_counts(generate, vocab: int, samples: int):
    """``(counts, results)``: the (x1, x2) cell counts of ``generate(seed)`` (a GenerationResult) over seeds
    ``0 .. samples - 1``, and the results themselves for the statistics a test also checks."""
    counts, results = np.zeros(vocab * vocab), []
    for seed in range(samples):
        result = generate(seed)
        x1, x2 = result.tokens[:2].tolist()
        counts[x1 * vocab + x2] += 1
        results.append(result)
    return counts, results


def check_follows_target(counts, expected, draft_joint, samples: int) -> tuple[float, float, float]:
    """Theorem 1's checks on sampled first-two-token counts: the total variation to ``expected`` stays below what
    exact multinomial sampling of this size shows (99.9th percentile), and the test has power: ``draft_joint`` (what
    skipping the rejection step would give) is more than 5 tolerances off. Returns (tv, tolerance, chi-square p)."""
    total_variation = 0.5 * np.abs(counts / samples - expected).sum()
    tolerance = tv_tolerance(expected, samples)
    assert total_variation <= tolerance, (total_variation, tolerance)
    assert 0.5 * np.abs(draft_joint.ravel() - expected).sum() > 5 * tolerance
    return total_variation, tolerance, chi_square_pvalue(counts, expected, samples)
