"""helpers.specdec.tree: tree speculative decoding is exact (greedy) and distribution-preserving (sampling).

Tiny random Qwen3 pairs (tests/tiny_models.py) with peaked output layers; one check on the CPU pair.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats as scipy_stats
from transformers import MistralConfig, MistralForCausalLM

from helpers.models.runtime import minimal_view
from helpers.specdec import autoregressive_generate, speculative_generate
from helpers.specdec.tree import AcceptanceTable, stored_nodes, tree_generate, tree_shape
from distribution_checks import chi_square_pvalue, exact_joint, pooled, tv_tolerance
from tiny_models import PEAK, perturbed_copy, tiny_qwen3

TREES = {
    "dynamic": dict(tree="dynamic", depth=4, topk=3, budget=10),
    "dynamic-wide": dict(tree="dynamic", depth=3, topk=4, budget=40),
    "static": dict(tree="static", topk=(3, 2, 1), depth=None, budget=None),
    "chain": dict(tree="static", topk=(1, 1, 1, 1), depth=None, budget=None),
}


@pytest.fixture(scope="module")
def pair():
    target = tiny_qwen3(0, head_scale=PEAK)
    return target, perturbed_copy(target, 0.3, relative=True)


def prompts(count: int, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 64, (1, n), generator=generator) for n in (1, 2, 5, 9, 16)[:count]]


@pytest.mark.parametrize("name", sorted(TREES))
def test_greedy_equals_autoregressive(pair, name):
    target, draft = pair
    for ids in prompts(5):
        expected = autoregressive_generate(target, ids, 24, eos_token_id=-1).tokens
        result = tree_generate(target, draft, ids, 24, eos_token_id=-1, **TREES[name])
        assert torch.equal(result.tokens, expected), name
        stats = result.stats
        assert stats.new_tokens == 24 and stats.rounds == stats.target_forwards - (ids.shape[1] > 1)
        assert stats.tau == pytest.approx(24 / stats.rounds)
        assert sum(stats.accepted_per_round) == stats.accepted == 24 - stats.rounds
    assert stats.accepted > 0  # the draft agrees sometimes: paths are followed, not only corrections


def test_a_chain_tree_is_linear_speculation(pair):
    """A tree of width 1 drafts and accepts exactly what linear speculation with gamma = depth does."""
    target, draft = pair
    for ids in prompts(3):
        linear = speculative_generate(target, draft, ids, 20, 4, eos_token_id=-1).stats
        chain = tree_generate(target, draft, ids, 20, eos_token_id=-1, **TREES["chain"]).stats
        assert chain.accepted_per_round == linear.accepted_per_round
        assert chain.draft_forwards == linear.draft_forwards


def test_budget_caps_the_nodes_verified(pair):
    target, draft = pair
    result = tree_generate(target, draft, prompts(1)[0], 16, tree="dynamic", depth=4, topk=3, budget=5,
                           eos_token_id=-1, record_rounds=True)
    assert max(result.stats.nodes_per_round) <= 5
    for tree in result.rounds:  # every kept node's parent is kept; the path follows parent links
        assert all(0 <= p < n for n, p in enumerate(tree.parents) if n)
        assert all(tree.parents[b] == a for a, b in zip(tree.path, tree.path[1:]))


def test_a_budget_under_the_drafts_own_nodes_fits_its_cache(pair):
    """Regression: depth 6 x top-3 writes 15 frontier nodes into the draft's cache each round while a budget of 5
    verifies 5; the draft's cache was sized for the budget and overflowed a few rounds in."""
    target, draft = pair
    for ids in prompts(3):
        expected = autoregressive_generate(target, ids, 30, eos_token_id=-1).tokens
        result = tree_generate(target, draft, ids, 30, tree="dynamic", depth=6, topk=3, budget=5, eos_token_id=-1)
        assert torch.equal(result.tokens, expected)
    assert stored_nodes(6, (3,) * 6, "dynamic") == 15 and stored_nodes(3, (3, 2, 1), "static") == 3 + 6
    assert stored_nodes(1, (4,), "static") == stored_nodes(1, (4,), "dynamic") == 0  # one level: nothing fed back


def test_draft_sees_only_its_ancestors(pair):
    """Expanding a tree level: a node stored after its siblings attends to its ancestors only, so its logits equal
    a plain causal run over context + its own path (KVCache.attention_mask with a block wider than the new tokens)."""
    model = minimal_view(pair[0])
    context = torch.tensor([[5, 9, 2, 7]])
    cache = model.new_cache(1, 16)
    model(context, cache)
    siblings = torch.tensor([[11, 12]])
    model(siblings, cache, position_ids=torch.tensor([[4, 4]]), tree_mask=torch.eye(2, dtype=torch.bool))
    # a child of the second sibling: block = [sibling 1, sibling 2, child]
    child = model(torch.tensor([[13]]), cache, position_ids=torch.tensor([[5]]),
                  tree_mask=torch.tensor([[False, True, True]]))[0, -1]
    plain = model(torch.tensor([[5, 9, 2, 7, 12, 13]]))[0, -1]
    torch.testing.assert_close(child, plain, rtol=1e-4, atol=1e-4)


def test_eos_inside_a_tree(pair):
    """EOS drafted and accepted in the middle of a path ends the output there, as autoregressive decoding does."""
    target, draft = pair
    ids = prompts(3)[2]
    free = autoregressive_generate(target, ids, 24, eos_token_id=-1).tokens.tolist()
    eos = free[9]
    expected = free[: free.index(eos) + 1]
    for name in ("dynamic", "static"):
        result = tree_generate(target, draft, ids, 24, eos_token_id=eos, **TREES[name])
        assert result.tokens.tolist() == expected
    assert result.stats.accepted > 0


def test_cpu_pair_greedy_is_lossless():
    from helpers.models import load_cpu_pair
    from helpers.prompts import encode_prompts, load_prompts, select_prompts

    target, draft, tokenizer = load_cpu_pair("draft-2l")
    case = encode_prompts(tokenizer, select_prompts(load_prompts("cpu"), 1), "cpu")[0]
    expected = autoregressive_generate(target, case["input_ids"], 40, eos_token_id=-1).tokens
    for name in ("dynamic", "static"):
        result = tree_generate(target, draft, case["input_ids"], 40, eos_token_id=-1, **TREES[name])
        assert torch.equal(result.tokens, expected)
        assert result.stats.tau > 2  # a trained pair: several tokens per target forward


@pytest.mark.parametrize("name", ["static", "dynamic"])
def test_sampling_preserves_target_distribution(name):
    """The first two tokens follow the target's joint law (multi-candidate rejection sampling): 2500 seeds,
    16-token vocabulary, an independent random draft (siblings are rejected often, so the residual and the
    next-sibling paths both run); total variation within the 99.9th percentile of exact sampling's, chi-square
    p > 1e-3, and the test has power (the draft's own joint is far off)."""
    vocab, temperature, samples = 16, 1.0, 2500
    target = tiny_qwen3(10, vocab_size=vocab, num_hidden_layers=1, head_scale=PEAK)
    draft = tiny_qwen3(11, vocab_size=vocab, num_hidden_layers=1, head_scale=PEAK)
    prompt = torch.tensor([[3, 1, 4]])
    expected = exact_joint(target, prompt, temperature).ravel()
    expected /= expected.sum()
    shape = dict(tree="static", topk=(3, 2), depth=None, budget=None) if name == "static" else \
        dict(tree="dynamic", depth=2, topk=3, budget=4)
    counts = np.zeros(vocab * vocab)
    accepted = 0
    for seed in range(samples):
        result = tree_generate(target, draft, prompt, 3, temperature=temperature, seed=seed, **shape)
        x1, x2 = result.tokens[:2].tolist()
        counts[x1 * vocab + x2] += 1
        accepted += result.stats.accepted
    assert 0.2 * samples < accepted < 1.5 * samples  # candidates are accepted, and rejected too

    total_variation = 0.5 * np.abs(counts / samples - expected).sum()
    tolerance = tv_tolerance(expected, samples)
    assert total_variation <= tolerance, (total_variation, tolerance)
    assert 0.5 * np.abs(exact_joint(draft, prompt, temperature).ravel() - expected).sum() > 5 * tolerance
    assert chi_square_pvalue(counts, expected, samples) > 1e-3


def test_sampling_is_reproducible(pair):
    target, draft = pair
    ids = prompts(2)[1]
    runs = [tree_generate(target, draft, ids, 12, temperature=0.8, seed=7).tokens for _ in range(2)]
    assert torch.equal(*runs)


def test_acceptance_table_learns_from_rounds():
    table = AcceptanceTable(ranks=2)
    key = table.key(0, 0.35)
    assert table.chance(key, 0.35) == pytest.approx(0.35)  # no data: the draft's own probability
    table.tried[key], table.accepted[key] = 100, 90
    assert table.chance(key, 0.35) > 0.85  # measured: the target accepts this cell 90 % of the time
    assert table.key(5, 0.95) == table.key(1, 0.95)  # ranks past the table share its last row


@pytest.mark.parametrize("kwargs, match", [
    (dict(tree="bushy"), "tree must be one of"),
    (dict(tree="dynamic", depth=0), "depth as an int >= 1"),
    (dict(tree="dynamic", topk=2.5), "topk as an int >= 1"),
    (dict(tree="static", topk=(2, 0), depth=None), "one int >= 1 per depth"),
    (dict(tree="static", topk=(2, 2), depth=3), "depth is len"),
])
def test_bad_tree_arguments_are_clear_errors(pair, kwargs, match):
    with pytest.raises(ValueError, match=match):
        tree_generate(*pair, prompts(1)[0], 4, **kwargs)


def test_architectures_the_model_file_lacks_are_refused_with_the_reason(pair):
    config = MistralConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    mistral = MistralForCausalLM(config).eval()
    with pytest.raises(ValueError, match="tree attention masks.*model_type='mistral'"):
        tree_generate(pair[0], mistral, prompts(1)[0], 4)


def test_tree_past_the_context_is_refused(pair):
    with pytest.raises(ValueError, match="cache slots, past the model's context"):
        tree_generate(*pair, torch.zeros(1, 200, dtype=torch.long), 40, tree="dynamic", depth=4, topk=4, budget=30)


def test_tree_shape_defaults():
    assert tree_shape("static", None, (4, 2, 2, 1), None) == (4, (4, 2, 2, 1), None)
    assert tree_shape("dynamic", 5, 4, 16) == (5, (4, 4, 4, 4, 4), 16)
    assert tree_shape("dynamic", None, None, None) == (5, (4, 4, 4, 4, 4), 16)
    assert tree_shape("dynamic", 3, None, 8) == (3, (4, 4, 4), 8)
    with pytest.raises(ValueError, match="static tree needs topk"):
        tree_shape("static", None, None, None)


def test_static_tree_needs_no_dynamic_arguments(pair):
    """A static tree is called with its widths alone: depth and budget belong to dynamic trees."""
    result = tree_generate(*pair, prompts(1)[0], 6, tree="static", topk=(2, 1), eos_token_id=-1)
    assert result.stats.new_tokens == 6 and max(result.stats.gamma_per_round) <= 2


def test_cpu_pair_sampling_follows_the_target():
    """On the trained pair (4096 tokens, temperature 1): the first and the second emitted token each follow the
    target's exact marginal (chi-square p > 1e-3 with cells expected < 5 pooled; total variation within the 99.9th
    percentile of exact sampling's; the counts reject the draft's own law). A dynamic tree of depth 2 with 3 candidates per node decides both."""
    from helpers.models import load_cpu_pair

    target, draft, tokenizer = load_cpu_pair("draft")  # the 1-layer draft: more rejections, residuals sampled
    prompt = torch.tensor([tokenizer("    def close(self):\n        ")["input_ids"]])
    samples = 500
    with torch.inference_mode():
        first = torch.softmax(target(input_ids=prompt).logits[0, -1].double(), -1)
        support = (first > 1e-7).nonzero().flatten()
        pairs = torch.cat([prompt.expand(len(support), -1), support[:, None]], dim=1)
        second_given = torch.softmax(target(input_ids=pairs).logits[:, -1].double(), -1)
        second = (first[support, None] * second_given).sum(0)
    counts = np.zeros((2, first.numel()))
    for seed in range(samples):
        tokens = tree_generate(target, draft, prompt, 3, temperature=1.0, seed=seed, tree="dynamic", depth=2, topk=3,
                               budget=9, eos_token_id=-1).tokens[:2].tolist()
        counts[0, tokens[0]] += 1
        counts[1, tokens[1]] += 1
    rng = np.random.default_rng(0)
    with torch.inference_mode():
        draft_first = torch.softmax(draft(input_ids=prompt).logits[0, -1].double(), -1).numpy()
    for index, (observed, law) in enumerate(zip(counts, (first.numpy(), second.numpy() / second.sum().item()))):
        assert chi_square_pvalue(observed, law, samples) > 1e-3
        assert 0.5 * np.abs(observed / samples - law).sum() <= tv_tolerance(law, samples, size=2000, rng=rng)
        if index == 0:  # power: the same counts (cells pooled as for the target) reject the draft's law
            small = law * samples < 5
            assert scipy_stats.chisquare(*pooled(observed, draft_first * samples, small)).pvalue < 1e-3
