"""helpers.specdec: speculative decoding is exact (greedy) and distribution-preserving (sampling).

All models are tiny random ``Qwen3ForCausalLM``s (tests/tiny_models.py: no download, no CPU pair), with
their output layer scaled up so that the next-token distributions are peaked rather than nearly uniform.
"""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import transformers
from packaging.version import Version
from scipy import stats as scipy_stats
from transformers import DynamicCache, MistralConfig, MistralForCausalLM

from helpers.specdec import accept_sampling, autoregressive_generate, speculative_generate
from distribution_checks import check_follows_target, exact_joint, first_two_counts, sampling_pair
from tiny_models import PEAK, tiny_qwen3


@pytest.fixture(scope="module")
def target(peaked_pair):
    return peaked_pair[0]


@pytest.fixture(scope="module")
def draft(peaked_pair):
    return peaked_pair[1]


def prompts(count: int, vocab: int = 64, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    lengths = [1, 2, 5, 9, 16, 3, 7, 12][:count]
    return [torch.randint(0, vocab, (1, n), generator=generator) for n in lengths]


# --- the cache primitive we rely on -------------------------------------------------------------------------


def test_dynamic_cache_crop_takes_negative_count_and_rolls_back(target):
    ids = torch.randint(0, 64, (1, 10), generator=torch.Generator().manual_seed(3))
    with torch.inference_mode():
        cache = DynamicCache(config=target.config)
        target(input_ids=ids, past_key_values=cache, use_cache=True)
        assert cache.get_seq_length() == 10
        if Version(transformers.__version__) >= Version("5.18"):
            with pytest.raises(ValueError):
                cache.crop(6)  # transformers >= 5.18: a positive count is refused
        # (transformers 5.17, the GPU machine's, still accepts a positive count with a deprecation warning)
        cache.crop(-4)
        assert cache.get_seq_length() == 6
        rolled_back = target(input_ids=ids[:, 6:], past_key_values=cache, use_cache=True).logits
        fresh = target(input_ids=ids).logits[:, 6:]
    torch.testing.assert_close(rolled_back, fresh, rtol=1e-4, atol=1e-4)


# --- greedy: token-for-token equality with the baseline -----------------------------------------------------


@pytest.mark.parametrize("runtime", ["minimal", "transformers"])
@pytest.mark.parametrize("gamma", [1, 2, 3, 5, 7])
def test_greedy_equals_autoregressive(target, draft, gamma, runtime):
    for prompt in prompts(8):
        for max_new_tokens in (1, 2, 13, 24):  # 13 and the short ones are not multiples of gamma + 1
            baseline = autoregressive_generate(target, prompt, max_new_tokens, runtime=runtime)
            result = speculative_generate(target, draft, prompt, max_new_tokens, gamma, runtime=runtime)
            assert result.stats.runtime == baseline.stats.runtime == runtime
            assert torch.equal(result.tokens, baseline.tokens), (gamma, prompt.shape, max_new_tokens)
            assert result.tokens.shape == (max_new_tokens,)
            assert result.stats.new_tokens == max_new_tokens


def test_partial_acceptance_exercises_rollback(target, draft):
    # the perturbed draft must neither always agree nor always disagree, otherwise the tests above would not
    # cover both the rejection (crop) and the all-accepted (catch-up token) paths
    result = speculative_generate(target, draft, prompts(1)[0], 48, gamma=4)
    counts = result.stats.accepted_per_round
    assert 0 in counts or min(counts) < 4
    assert 4 in counts
    assert 0.2 < result.stats.alpha < 0.95


def test_stats_are_consistent(target, draft):
    result = speculative_generate(target, draft, prompts(3)[2], 30, gamma=3)
    s = result.stats
    assert s.rounds == len(s.accepted_per_round) == s.target_forwards - 1  # minus the prefill
    assert s.proposed == sum(s.gamma_per_round)
    assert s.accepted == sum(s.accepted_per_round)
    assert s.new_tokens == 30 == s.accepted + s.rounds  # each round: accepted drafts + one target token
    assert s.acceptance_rate == pytest.approx(s.accepted / s.proposed)
    rejections = sum(k < g for k, g in zip(s.accepted_per_round, s.gamma_per_round))
    assert s.rejections == rejections
    assert s.alpha == pytest.approx(s.accepted / (s.accepted + rejections))
    assert s.alpha >= s.acceptance_rate
    assert s.mean_accepted_per_round == pytest.approx(s.accepted / s.rounds)
    assert s.time_total_s == pytest.approx(s.time_prefill_s + s.time_draft_s + s.time_verify_s + s.time_other_s)
    row = s.as_dict()
    assert "accepted_per_round" not in row and row["tokens_per_second"] > 0


def first_occurrence_eos(tokens: list[int], index: int) -> int | None:
    token = tokens[index]
    return token if token not in tokens[:index] else None


def test_eos_inside_a_drafted_block(target):
    prompt = prompts(3)[2]
    baseline = autoregressive_generate(target, prompt, 20).tokens.tolist()
    # a model drafting for itself accepts every draft, so with gamma = 5 the tokens 0..4 of round 1 are drafts
    index = next(i for i in range(1, 5) if first_occurrence_eos(baseline, i) is not None)
    eos = baseline[index]
    result = speculative_generate(target, target, prompt, 20, gamma=5, eos_token_id=eos)
    assert result.tokens.tolist() == baseline[: index + 1]
    assert result.stats.rounds == 1
    stopped = autoregressive_generate(target, prompt, 20, eos_token_id=eos)
    assert stopped.tokens.tolist() == baseline[: index + 1]


def test_eos_anywhere_with_partial_acceptance(target, draft):
    prompt = prompts(2)[1]
    baseline = autoregressive_generate(target, prompt, 40).tokens.tolist()
    for index in range(1, 40, 3):
        eos = first_occurrence_eos(baseline, index)
        if eos is None:
            continue
        for gamma in (2, 5):
            result = speculative_generate(target, draft, prompt, 40, gamma, eos_token_id=eos)
            assert result.tokens.tolist() == baseline[: index + 1]


def test_eos_from_generation_config(target):
    prompt = prompts(1)[0]
    baseline = autoregressive_generate(target, prompt, 10).tokens.tolist()
    model = copy.deepcopy(target)
    model.generation_config.eos_token_id = [baseline[0]]
    assert speculative_generate(model, model, prompt, 10, gamma=3).tokens.tolist() == baseline[:1]
    assert autoregressive_generate(model, prompt, 10).tokens.tolist() == baseline[:1]


# --- a model drafting for itself --------------------------------------------------------------------------


def test_self_draft_accepts_everything(target):
    prompt = prompts(4)[3]
    greedy = speculative_generate(target, target, prompt, 25, gamma=4)
    assert greedy.stats.accepted == greedy.stats.proposed > 0
    assert greedy.stats.alpha == 1.0 and greedy.stats.acceptance_rate == 1.0
    assert greedy.stats.rounds == 5  # 25 tokens = 5 rounds of 4 drafts + 1 bonus
    sampled = speculative_generate(target, target, prompt, 25, gamma=4, temperature=1.0, seed=0)
    # identical distributions: q/p = 1 up to rounding (the verify forward has other shapes than the draft's)
    assert sampled.stats.acceptance_rate >= 0.99


# --- sampling: the output follows the target's distribution --------------------------------------------------


@pytest.mark.parametrize("runtime", ["minimal", "transformers"])
def test_sampling_preserves_target_distribution(runtime):
    """Chen et al., Theorem 1: the first two tokens are jointly distributed as under the target alone.

    16-token vocabulary, an independent random draft (most drafts are rejected, so the residual distribution
    max(0, q - p) is sampled often), gamma = 2 (the second token then comes from a rejection in round 1 and
    round 2, from the residual at draft 2, or from an accepted draft), 3000 seeds.
    Tolerances: (1) the total variation to the exact joint must stay below the 99.9th percentile of the total
    variation that exact multinomial sampling of the same size shows (simulated); (2) a chi-square test on
    the 256 cells (cells expected < 5 pooled) must give p > 1e-3. Everything is seeded: deterministic.
    """
    vocab, temperature, samples = 16, 1.0, 3000
    target, draft, prompt, expected = sampling_pair(vocab, temperature)
    counts, results = first_two_counts(lambda seed: speculative_generate(
        target, draft, prompt, 3, gamma=2, temperature=temperature, seed=seed, runtime=runtime), vocab, samples)
    accepted = sum(r.stats.accepted for r in results) / sum(r.stats.proposed for r in results)
    assert 0.1 < accepted < 0.9  # both the accept and the residual path are exercised
    total_variation, tolerance, pvalue = check_follows_target(counts, expected,
                                                              exact_joint(draft, prompt, temperature), samples)
    print(f"total variation {total_variation:.4f} (tolerance {tolerance:.4f}), chi-square p = {pvalue:.3f}")
    assert pvalue > 1e-3


def test_rejection_step_alone_gives_target_marginal():
    """The vectorised acceptance step on fixed distributions: the first emitted token follows q exactly.

    Many draws are cheap here (no model forwards), so the tolerance is tight: chi-square p > 1e-3 over
    20000 draws, with a draft p that puts mass where q has none and vice versa.
    """
    generator = torch.Generator().manual_seed(0)
    q_first = torch.tensor([0.40, 0.25, 0.20, 0.10, 0.05, 0.00])
    p_first = torch.tensor([0.05, 0.10, 0.20, 0.25, 0.10, 0.30])
    target_logits = torch.stack([q_first, torch.full((6,), 1 / 6), torch.full((6,), 1 / 6)]).clamp_min(1e-30).log()
    draft_probs = torch.stack([p_first, torch.full((6,), 1 / 6)])
    draws = 20000
    counts = np.zeros(6)
    for _ in range(draws):
        drafts = torch.stack([torch.multinomial(row, 1, generator=generator)[0] for row in draft_probs])
        k, next_token = accept_sampling(target_logits, draft_probs, drafts, 1.0, generator)
        counts[(drafts[0] if k >= 1 else next_token).item()] += 1
    assert counts[5] == 0  # q gives token 5 no mass: it must never be emitted, though p drafts it 30% of the time
    assert scipy_stats.chisquare(counts[:5], q_first[:5].double().numpy() * draws).pvalue > 1e-3


def test_sampling_is_reproducible(target, draft):
    prompt = prompts(2)[1]
    first = speculative_generate(target, draft, prompt, 20, gamma=3, temperature=0.8, seed=5)
    again = speculative_generate(target, draft, prompt, 20, gamma=3, temperature=0.8, seed=5)
    assert torch.equal(first.tokens, again.tokens)
    torch.manual_seed(42)
    global_rng = speculative_generate(target, draft, prompt, 20, gamma=3, temperature=0.8)
    torch.manual_seed(42)
    assert torch.equal(speculative_generate(target, draft, prompt, 20, gamma=3, temperature=0.8).tokens,
                       global_rng.tokens)
    torch.manual_seed(42)
    baseline = autoregressive_generate(target, prompt, 20, temperature=0.8)
    torch.manual_seed(42)
    assert torch.equal(autoregressive_generate(target, prompt, 20, temperature=0.8).tokens, baseline.tokens)


# --- invalid arguments -----------------------------------------------------------------------------------


@pytest.mark.parametrize("gamma", [0, -2, 2.5, True, "3"])
def test_invalid_gamma(target, draft, gamma):
    with pytest.raises(ValueError, match="gamma"):
        speculative_generate(target, draft, prompts(1)[0], 5, gamma)


@pytest.mark.parametrize("temperature", [-0.5, float("nan"), float("inf"), "hot"])
def test_invalid_temperature(target, draft, temperature):
    with pytest.raises(ValueError, match="temperature"):
        speculative_generate(target, draft, prompts(1)[0], 5, 2, temperature=temperature)
    with pytest.raises(ValueError, match="temperature"):
        autoregressive_generate(target, prompts(1)[0], 5, temperature=temperature)


def test_vocabularies_must_match(target):
    other = tiny_qwen3(2, vocab_size=48, head_scale=PEAK)
    with pytest.raises(ValueError, match="vocabularies differ"):
        speculative_generate(target, other, prompts(1)[0], 5, 2)


@pytest.mark.parametrize("bad", [torch.zeros(5, dtype=torch.long), torch.zeros(2, 5, dtype=torch.long),
                                 torch.zeros(1, 0, dtype=torch.long)])
def test_invalid_input_ids(target, draft, bad):
    with pytest.raises(ValueError, match="input_ids"):
        speculative_generate(target, draft, bad, 5, 2)


@pytest.mark.parametrize("max_new_tokens", [0, -1, 2.0])
def test_invalid_max_new_tokens(target, draft, max_new_tokens):
    with pytest.raises(ValueError, match="max_new_tokens"):
        speculative_generate(target, draft, prompts(1)[0], max_new_tokens, 2)


def test_runtimes_agree_and_auto_picks_minimal_for_qwen3(target, draft):
    prompt = prompts(4)[3]
    minimal = speculative_generate(target, draft, prompt, 20, gamma=3)
    assert minimal.stats.runtime == "minimal"
    reference = speculative_generate(target, draft, prompt, 20, gamma=3, runtime="transformers")
    assert torch.equal(minimal.tokens, reference.tokens)
    assert minimal.stats.accepted_per_round == reference.stats.accepted_per_round


def test_other_architectures_use_transformers():
    torch.manual_seed(0)
    config = MistralConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=128,
                           bos_token_id=None, eos_token_id=None, pad_token_id=None)
    mistral = MistralForCausalLM(config).eval()
    prompt = prompts(3)[2]
    result = speculative_generate(mistral, copy.deepcopy(mistral), prompt, 10, gamma=2)
    assert result.stats.runtime == "transformers"
    assert torch.equal(result.tokens, autoregressive_generate(mistral, prompt, 10).tokens)
    with pytest.raises(ValueError, match="model_type='mistral'"):
        autoregressive_generate(mistral, prompt, 10, runtime="minimal")
    with pytest.raises(ValueError, match="unknown runtime"):
        autoregressive_generate(mistral, prompt, 10, runtime="fast")


@pytest.mark.parametrize("runtime", ["minimal", "transformers"])
def test_prompt_past_the_context_is_refused(target, draft, runtime):
    long_prompt = torch.zeros(1, 250, dtype=torch.long)  # the tiny models hold 256 positions
    with pytest.raises(ValueError, match="context of 256 tokens"):
        speculative_generate(target, draft, long_prompt, 10, gamma=2, runtime=runtime)
    with pytest.raises(ValueError, match="context of 256 tokens"):
        autoregressive_generate(target, long_prompt, 10, runtime=runtime)
    assert autoregressive_generate(target, long_prompt, 6, runtime=runtime).tokens.shape == (6,)
