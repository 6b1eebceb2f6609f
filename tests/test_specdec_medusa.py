"""helpers.specdec.medusa: Medusa heads drafting from the target's own hidden state, verified by the one chain and
the one tree verifier; lossless (greedy equality on random models and prompts, the sampling law checked)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers.specdec import MedusaHeads, autoregressive_generate, medusa_generate
from distribution_checks import chi_square_pvalue, exact_joint, tv_tolerance
from tiny_models import PEAK, tiny_qwen3


def random_heads(target, num_heads: int, seed: int, scale: float = 0.3) -> MedusaHeads:
    """Heads with random (not zero) residual blocks, so that they guess other tokens than the LM head does."""
    heads = MedusaHeads(target, num_heads)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in heads.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * scale)
    return heads


@pytest.fixture(scope="module")
def target():
    return tiny_qwen3(3, vocab_size=48, head_scale=PEAK)


def test_heads_share_the_lm_head_and_store_only_their_blocks(target):
    heads = MedusaHeads(target, 3)
    assert heads.lm_head is target.get_output_embeddings()
    assert set(heads.state_dict()) == {f"blocks.{i}.{p}" for i in range(3) for p in ("weight", "bias")}
    hidden = torch.randn(2, 5, target.config.hidden_size)
    logits = heads(hidden)
    assert logits.shape == (2, 5, 3, 48)
    torch.testing.assert_close(logits[:, :, 0], target.lm_head(hidden))  # zero blocks: the LM head's own guess


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("topk", [None, 2, (3, 2, 1)], ids=["chain", "tree2", "tree321"])
def test_greedy_equals_autoregressive(target, seed, topk):
    generator = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, 48, (1, int(torch.randint(1, 9, (1,), generator=generator))), generator=generator)
    heads = random_heads(target, 3, seed, scale=0.05 * seed)
    reference = autoregressive_generate(target, prompt, 20, eos_token_id=-1).tokens
    result = medusa_generate(target, heads, prompt, 20, topk=topk, budget=5 if topk == 2 else None,
                             eos_token_id=-1)
    assert torch.equal(result.tokens, reference)


def test_greedy_equals_autoregressive_on_the_transformers_runtime(target):
    prompt = torch.tensor([[5, 9, 2, 7]])
    reference = autoregressive_generate(target, prompt, 16, eos_token_id=-1).tokens
    result = medusa_generate(target, MedusaHeads(target, 2), prompt, 16, eos_token_id=-1, runtime="transformers")
    assert torch.equal(result.tokens, reference) and result.stats.runtime == "transformers"


def test_eos_inside_a_round_and_short_budgets(target):
    prompt = torch.tensor([[1, 2, 3]])
    reference = autoregressive_generate(target, prompt, 12, eos_token_id=-1).tokens
    eos = int(reference[4])
    stop = reference[: int((reference == eos).nonzero()[0]) + 1]
    for topk in (None, 2):
        heads = MedusaHeads(target, 4)  # zero blocks: every head guesses the next token, often right at PEAK
        assert torch.equal(medusa_generate(target, heads, prompt, 12, topk=topk, eos_token_id=eos).tokens, stop)
        assert torch.equal(medusa_generate(target, heads, prompt, 2, topk=topk, eos_token_id=-1).tokens,
                           reference[:2])


@pytest.mark.parametrize("topk", [None, (3, 2)], ids=["chain", "tree"])
def test_sampling_follows_the_target(topk):
    """First two tokens over 2000 seeds: total variation within exact sampling's 99.9th percentile, chi-square
    p > 1e-3; heads far from the target so that both acceptance and rejection paths run."""
    vocab, temperature, samples = 16, 1.0, 2000
    model = tiny_qwen3(10, vocab_size=vocab, num_hidden_layers=1, head_scale=PEAK)
    heads = random_heads(model, 2, seed=7, scale=0.5)
    prompt = torch.tensor([[3, 1, 4]])
    expected = exact_joint(model, prompt, temperature).ravel()
    expected /= expected.sum()
    counts, accepted = np.zeros(vocab * vocab), 0
    for seed in range(samples):
        result = medusa_generate(model, heads, prompt, 3, temperature=temperature, seed=seed, topk=topk)
        x1, x2 = result.tokens[:2].tolist()
        counts[x1 * vocab + x2] += 1
        accepted += result.stats.accepted
    assert 0.1 * samples < accepted < 1.8 * samples
    total_variation = 0.5 * np.abs(counts / samples - expected).sum()
    assert total_variation <= tv_tolerance(expected, samples), total_variation
    assert chi_square_pvalue(counts, expected, samples) > 1e-3


def test_bad_inputs_are_named(target):
    heads = MedusaHeads(target, 2)
    other = tiny_qwen3(4, vocab_size=48)
    prompt = torch.tensor([[1, 2]])
    with pytest.raises(ValueError, match="built for another model"):
        medusa_generate(other, heads, prompt, 4)
    with pytest.raises(ValueError, match="at most 2 depths"):
        medusa_generate(target, heads, prompt, 4, topk=(2, 2, 2))
    with pytest.raises(ValueError, match="num_heads"):
        MedusaHeads(target, 0)
    with pytest.raises(ValueError, match="outside the model's vocabulary"):
        medusa_generate(target, heads, torch.tensor([[1, 99]]), 4)
