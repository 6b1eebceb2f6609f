"""helpers.specdec.feature_draft: a one-layer draft in the target's feature space, verified by the one chain
verifier; lossless (greedy equality on random models and prompts, the sampling law)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers.specdec import FeatureDraft, GenerationStats, autoregressive_generate, eagle_generate
from helpers.specdec.chain import generate_chain
from helpers.specdec.feature_draft import FeatureDrafter
from distribution_checks import chi_square_pvalue, exact_joint, tv_tolerance
from tiny_models import PEAK, tiny_qwen3


@pytest.fixture(scope="module")
def target():
    return tiny_qwen3(5, vocab_size=48, head_scale=PEAK)


def test_the_draft_shares_embedding_and_head_and_stores_its_layer(target):
    draft = FeatureDraft(target)
    assert draft.body.lm_head is target.get_output_embeddings()
    assert draft.body.embed_tokens is target.get_input_embeddings()
    state = draft.trainable_state()
    assert "fc.weight" in state and any(k.startswith("body.layers.0.") for k in state)
    assert not any("embed_tokens" in k or "lm_head" in k for k in state)
    features = torch.randn(1, 4, target.config.hidden_size)
    logits, predicted = draft(features, torch.tensor([[1, 2, 3, 4]]))
    assert logits.shape == (1, 4, 48) and predicted.shape == features.shape


@pytest.mark.parametrize("options", [dict(gamma=4), dict(tree="dynamic", depth=3, topk=2, budget=5)],
                         ids=["chain", "tree"])
def test_a_reduced_draft_vocabulary_only_guesses_its_tokens_and_stays_lossless(target, options):
    """restrict_vocab: the draft's logits are -inf outside the subset, equal to the full head's inside, and greedy
    output still equals the target's even where the target's tokens lie outside the subset."""
    draft = FeatureDraft(target)
    subset = torch.arange(0, 48, 3)
    features, tokens = torch.randn(1, 3, target.config.hidden_size), torch.tensor([[1, 2, 3]])
    full = draft(features, tokens)[0]
    restricted = draft.restrict_vocab(subset)(features, tokens)[0]
    outside = torch.ones(48, dtype=torch.bool)
    outside[subset] = False
    assert torch.isneginf(restricted[..., outside]).all()
    torch.testing.assert_close(restricted[..., subset], full[..., subset])
    assert draft.trainable_state()["draft_vocab"].tolist() == subset.tolist()
    prompt = torch.tensor([[3, 14, 15, 9, 2, 6]])
    reference = autoregressive_generate(target, prompt, 24, eos_token_id=-1).tokens
    assert torch.equal(eagle_generate(target, draft, prompt, 24, eos_token_id=-1, **options).tokens, reference)
    assert draft.restrict_vocab(None).body.lm_head is target.get_output_embeddings()


def test_bad_draft_vocabularies_are_named(target):
    draft = FeatureDraft(target)
    for bad in ([], [0, 48], [-1, 2], [3, 3]):
        with pytest.raises(ValueError, match="draft vocabulary"):
            draft.restrict_vocab(bad)


DRAFTING = {"g3": dict(gamma=3), "g5-stop": dict(gamma=5, stop_below=0.6), "g1": dict(gamma=1),
            "backoff": dict(gamma=4, stop_below=0.3, backoff=4),
            "dynamic": dict(tree="dynamic", depth=4, topk=3, budget=8),
            "depth1": dict(tree="dynamic", depth=1, topk=2, budget=2), "static": dict(tree="static", topk=(2, 2, 1)),
            # a budget under what the draft writes in a round (5 levels x 3): its cache needs that room, not the budget's
            "deep-small-budget": dict(tree="dynamic", depth=6, topk=3, budget=4)}


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("options", list(DRAFTING.values()), ids=list(DRAFTING))
def test_greedy_equals_autoregressive(target, seed, options):
    """Chains (with the stop and the back-off) and trees: the target's greedy output, token for token."""
    generator = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, 48, (1, int(torch.randint(1, 10, (1,), generator=generator))), generator=generator)
    draft = FeatureDraft(target)
    reference = autoregressive_generate(target, prompt, 24, eos_token_id=-1).tokens
    result = eagle_generate(target, draft, prompt, 24, eos_token_id=-1, **options)
    assert torch.equal(result.tokens, reference)


@torch.inference_mode()
@pytest.mark.parametrize("gamma", [1, 3])
def test_the_drafter_state_is_built_from_true_features_only(target, gamma):
    """After a generation, the draft's cache plus its pending pairs give exactly what one fresh draft forward over
    every (true feature f_{t-1}, token t) pair of the final sequence gives: nothing predicted stays behind."""
    prompt = torch.tensor([[3, 14, 15, 9, 2, 6]])
    draft = FeatureDraft(target)
    with torch.no_grad():
        draft.fc.weight.add_(torch.randn(draft.fc.weight.shape, generator=torch.Generator().manual_seed(2)) * 0.2)
    drafter = FeatureDrafter(draft, gamma)
    result = generate_chain(target, drafter, prompt, 17, stats=GenerationStats(runtime="minimal"), eos_token_id=-1)
    sequence = torch.cat([prompt[0], result.tokens])[None]
    features = target(input_ids=sequence, output_hidden_states=True).hidden_states[-1]
    fresh = draft(features[:, :-1], sequence[:, 1:])[0][:, -1]  # every pair, the last ending at the final token
    incremental = draft(drafter.pairs.features, drafter.pairs.tokens, drafter.pairs.cache, last_only=True)[0][:, -1]
    torch.testing.assert_close(incremental, fresh, rtol=1e-4, atol=1e-4)


def test_transformers_runtime_and_short_budgets(target):
    prompt = torch.tensor([[5, 9, 2, 7]])
    reference = autoregressive_generate(target, prompt, 16, eos_token_id=-1).tokens
    draft = FeatureDraft(target)
    result = eagle_generate(target, draft, prompt, 16, eos_token_id=-1, runtime="transformers")
    assert torch.equal(result.tokens, reference) and result.stats.runtime == "transformers"
    for budget in (1, 2, 3):
        assert torch.equal(eagle_generate(target, draft, prompt, budget, eos_token_id=-1).tokens, reference[:budget])
    eos = int(reference[3])
    stop = reference[: int((reference == eos).nonzero()[0]) + 1]
    assert torch.equal(eagle_generate(target, draft, prompt, 16, eos_token_id=eos, gamma=4).tokens, stop)


@pytest.mark.parametrize("options,noise,subset", [(dict(gamma=2), 0.3, None),
                                                 (dict(tree="dynamic", depth=2, topk=3, budget=4), 0.0, None),
                                                 (dict(gamma=2), 0.0, range(0, 16, 2))],
                         ids=["chain", "tree", "chain-vocab-subset"])
def test_sampling_follows_the_target(options, noise, subset):
    """The first two tokens over 2000 seeds follow the target's joint law (total variation within exact sampling's
    99.9th percentile, chi-square p > 1e-3), with both acceptance and rejection paths running; also when the draft
    guesses among half the vocabulary only (the other tokens come from the residual distribution)."""
    vocab, temperature, samples = 16, 1.0, 2000
    model = tiny_qwen3(10, vocab_size=vocab, num_hidden_layers=1, head_scale=PEAK)
    draft = FeatureDraft(model).restrict_vocab(None if subset is None else list(subset))
    with torch.no_grad():
        draft.fc.weight.add_(torch.randn(draft.fc.weight.shape, generator=torch.Generator().manual_seed(1)) * noise)
    prompt = torch.tensor([[3, 1, 4]])
    expected = exact_joint(model, prompt, temperature).ravel()
    expected /= expected.sum()
    counts, accepted = np.zeros(vocab * vocab), 0
    for seed in range(samples):
        result = eagle_generate(model, draft, prompt, 3, temperature=temperature, seed=seed, **options)
        x1, x2 = result.tokens[:2].tolist()
        counts[x1 * vocab + x2] += 1
        accepted += result.stats.accepted
    assert 0.1 * samples < accepted < 1.8 * samples
    assert 0.5 * np.abs(counts / samples - expected).sum() <= tv_tolerance(expected, samples)
    assert chi_square_pvalue(counts, expected, samples) > 1e-3


def test_bad_inputs_are_named(target):
    draft = FeatureDraft(target)
    prompt = torch.tensor([[1, 2]])
    with pytest.raises(ValueError, match="built for another model"):
        eagle_generate(tiny_qwen3(6, vocab_size=48), draft, prompt, 4)
    with pytest.raises(ValueError, match="gamma"):
        eagle_generate(target, draft, prompt, 4, gamma=0)
    with pytest.raises(ValueError, match="tree must be one of"):
        eagle_generate(target, draft, prompt, 4, tree="bushy")
    with pytest.raises(ValueError, match="FeatureDraft"):
        eagle_generate(target, object(), prompt, 4)
    with pytest.raises(ValueError, match="token ids"):
        eagle_generate(target, draft, torch.tensor([[1.0, 2.0]]), 4)


def test_a_target_without_the_layer_sizes_is_refused_with_the_reason():
    """Regression: a GPT-2 target (no intermediate_size) raised an AttributeError from inside the config copy."""
    from transformers import GPT2Config, GPT2LMHeadModel, MistralConfig, MistralForCausalLM

    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=48, n_embd=32, n_layer=1, n_head=2, n_positions=64)).eval()
    with pytest.raises(ValueError, match="has no intermediate_size: use a Qwen3, Llama or OLMo target"):
        FeatureDraft(gpt2)
    torch.manual_seed(0)  # a config that names the sizes drafts through the transformers runtime, losslessly
    mistral = MistralForCausalLM(MistralConfig(vocab_size=48, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                               num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                                               max_position_embeddings=64)).eval()
    prompt = torch.tensor([[3, 1, 4, 1, 5]])
    assert torch.equal(eagle_generate(mistral, FeatureDraft(mistral), prompt, 12, eos_token_id=-1).tokens,
                       autoregressive_generate(mistral, prompt, 12, eos_token_id=-1).tokens)


@torch.inference_mode()
def test_the_tree_drafter_state_is_built_from_true_features_only(target):
    from helpers.specdec.feature_draft import FeatureTreeDrafter
    from helpers.specdec.tree import TreeStats, generate_tree

    prompt = torch.tensor([[3, 14, 15, 9, 2, 6]])
    draft = FeatureDraft(target)
    drafter = FeatureTreeDrafter(draft, "dynamic", 3, (2, 2, 2), 6)
    result = generate_tree(target, drafter, prompt, 17, stats=TreeStats(runtime="minimal"), eos_token_id=-1)
    sequence = torch.cat([prompt[0], result.tokens])[None]
    features = target(input_ids=sequence, output_hidden_states=True).hidden_states[-1]
    fresh = draft(features[:, :-1], sequence[:, 1:])[0][:, -1]
    incremental = draft(drafter.pairs.features, drafter.pairs.tokens, drafter.pairs.cache, last_only=True)[0][:, -1]
    torch.testing.assert_close(incremental, fresh, rtol=1e-4, atol=1e-4)


def test_backoff_pauses_a_failing_draft_and_stays_lossless(target):
    """A draft that is always wrong (its LM head guesses are shifted) drafts in far fewer rounds with a back-off."""
    draft = FeatureDraft(target)
    with torch.no_grad():
        draft.fc.weight.mul_(-3.0)  # a draft far from the target: its first guesses are rejected
    prompt = torch.tensor([[3, 14, 15, 9, 2, 6]])
    reference = autoregressive_generate(target, prompt, 30, eos_token_id=-1).tokens
    plain = eagle_generate(target, draft, prompt, 30, eos_token_id=-1, gamma=3)
    paused = eagle_generate(target, draft, prompt, 30, eos_token_id=-1, gamma=3, backoff=8)
    assert torch.equal(plain.tokens, reference) and torch.equal(paused.tokens, reference)
    assert paused.stats.rounds_without_drafts > plain.stats.rounds_without_drafts
    assert paused.stats.draft_forwards < plain.stats.draft_forwards
    with pytest.raises(ValueError, match="backoff"):
        eagle_generate(target, draft, prompt, 4, backoff=-1)


def test_backoff_also_pauses_after_rounds_too_unsure_to_draft(target):
    """A round whose first guess is below the stop drafts nothing; with a back-off it counts as a failed round, so a
    draft that is never confident stops paying its first step every token (regression: only rejected drafts did)."""
    draft = FeatureDraft(target)
    prompt = torch.tensor([[3, 14, 15, 9, 2, 6]])
    reference = autoregressive_generate(target, prompt, 30, eos_token_id=-1).tokens
    unsure = eagle_generate(target, draft, prompt, 30, eos_token_id=-1, gamma=3, stop_below=1.0)
    paused = eagle_generate(target, draft, prompt, 30, eos_token_id=-1, gamma=3, stop_below=1.0, backoff=8)
    assert torch.equal(unsure.tokens, reference) and torch.equal(paused.tokens, reference)
    assert unsure.stats.proposed == paused.stats.proposed == 0
    assert paused.stats.draft_forwards < unsure.stats.draft_forwards / 3, (paused.stats, unsure.stats)


def test_missing_drafter_weights_name_the_training_command(target, tmp_path):
    """Loading or fingerprinting a drafter folder without weights says how to train them (one check for both)."""
    from helpers.specdec.drafter_files import drafter_fingerprint, load_feature_draft, save_drafter

    for call in (lambda: drafter_fingerprint(tmp_path), lambda: load_feature_draft(target, tmp_path)):
        with pytest.raises(FileNotFoundError, match="--stage heads"):
            call()
    save_drafter(FeatureDraft(target), tmp_path)
    assert len(drafter_fingerprint(tmp_path)) == 12 and isinstance(load_feature_draft(target, tmp_path), FeatureDraft)
    plain = drafter_fingerprint(tmp_path)
    save_drafter(FeatureDraft(target).restrict_vocab([1, 7, 47]), tmp_path)  # ids stay exact (not bf16)
    assert load_feature_draft(target, tmp_path).draft_vocab.tolist() == [1, 7, 47]
    assert drafter_fingerprint(tmp_path) != plain
