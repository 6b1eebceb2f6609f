"""Adaptive lookahead (``speculative_generate(..., stop_below=...)``): a round stops drafting when the draft's
probability of its last drafted token falls below a threshold. Exact in greedy mode, distribution-preserving
when sampling, fewer drafts than fixed γ where the draft is unsure, and no change when ``stop_below`` is None.
"""
from __future__ import annotations

import pytest
import torch

from helpers.specdec.linear import autoregressive_generate, speculative_generate
from distribution_checks import chi_square_pvalue, first_two_counts, sampling_pair
from tiny_models import tiny_qwen3


def prompts(count: int = 5, vocab: int = 64, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (1, n), generator=generator) for n in (1, 3, 8, 14, 5)[:count]]


@pytest.mark.parametrize("runtime", ["minimal", "transformers"])
@pytest.mark.parametrize("stop_below", [0.3, 0.7, 0.95])
def test_greedy_equals_autoregressive(peaked_pair, stop_below, runtime):
    target, draft = peaked_pair
    shortened = 0
    for prompt in prompts():
        for max_new_tokens in (1, 2, 17, 30):
            baseline = autoregressive_generate(target, prompt, max_new_tokens, runtime=runtime)
            result = speculative_generate(target, draft, prompt, max_new_tokens, 5, runtime=runtime,
                                          stop_below=stop_below)
            assert torch.equal(result.tokens, baseline.tokens), (prompt.tolist(), max_new_tokens)
            s = result.stats
            assert s.proposed == sum(s.gamma_per_round) == s.draft_forwards - (prompt.shape[1] > 1)
            assert max(s.gamma_per_round) <= 5
            shortened += sum(0 < g < min(5, max_new_tokens - 1) for g in s.gamma_per_round)
    assert shortened > 0  # some rounds really stopped early


def test_none_and_zero_leave_fixed_gamma_unchanged(peaked_pair):
    target, draft = peaked_pair
    for prompt in prompts(3):
        fixed = speculative_generate(target, draft, prompt, 25, 4)
        for stop_below in (None, 0.0):
            adaptive = speculative_generate(target, draft, prompt, 25, 4, stop_below=stop_below)
            assert torch.equal(adaptive.tokens, fixed.tokens)
            assert adaptive.stats.gamma_per_round == fixed.stats.gamma_per_round
            assert adaptive.stats.accepted_per_round == fixed.stats.accepted_per_round
        sampled = speculative_generate(target, draft, prompt, 25, 4, temperature=0.9, seed=3)
        same = speculative_generate(target, draft, prompt, 25, 4, temperature=0.9, seed=3, stop_below=None)
        assert torch.equal(sampled.tokens, same.tokens)


def test_fewer_drafts_when_the_draft_is_unsure(peaked_pair):
    """A draft with a flat LM head (every token about 1/64) stops after one draft per round at stop_below=0.5;
    the output is still the target's."""
    target, _ = peaked_pair
    unsure = tiny_qwen3(7, vocab_size=64)  # no head_scale: near-uniform next-token distributions
    prompt = prompts()[2]
    fixed = speculative_generate(target, unsure, prompt, 30, 6)
    adaptive = speculative_generate(target, unsure, prompt, 30, 6, stop_below=0.5)
    assert torch.equal(adaptive.tokens, autoregressive_generate(target, prompt, 30).tokens)
    assert set(adaptive.stats.gamma_per_round[:-1]) == {1}  # the last round may have no room for a draft
    assert adaptive.stats.draft_forwards < fixed.stats.draft_forwards / 3
    assert adaptive.stats.proposed < fixed.stats.proposed / 3


def test_sampling_preserves_target_distribution():
    """First-two-token joint law equals the target's with an adaptive draft that sometimes stops after one draft
    (gamma = 2, threshold 0.15: round 1 stops after d1 unless d1 is one of the draft's three likeliest tokens,
    which happens with probability 0.37); as tests/test_specdec.py: 3000 seeds, chi-square p > 1e-3."""
    vocab, temperature, samples = 16, 1.0, 3000
    target, draft, prompt, expected = sampling_pair(vocab, temperature)
    counts, results = first_two_counts(lambda seed: speculative_generate(
        target, draft, prompt, 3, gamma=2, temperature=temperature, seed=seed, stop_below=0.15), vocab, samples)
    first_gammas = [r.stats.gamma_per_round[0] for r in results]
    stopped = first_gammas.count(1) / samples
    assert 0.1 < stopped < 0.9, stopped  # both the stopped and the full rounds are exercised
    pvalue = chi_square_pvalue(counts, expected, samples)
    print(f"rounds stopped after one draft: {stopped:.2f}; chi-square p = {pvalue:.3f}")
    assert pvalue > 1e-3


@pytest.mark.parametrize("stop_below", [-0.1, 1.5, float("nan"), True, "0.5"])
def test_invalid_stop_below(peaked_pair, stop_below):
    target, draft = peaked_pair
    with pytest.raises(ValueError, match="stop_below"):
        speculative_generate(target, draft, prompts(1)[0], 5, 2, stop_below=stop_below)
