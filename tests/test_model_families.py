"""One model file for every family the handout names: tiny random Qwen3, Llama 3 (scaled RoPE, tied and untied
head), Llama 2 (multi-head attention) and OLMo (parameter-free LayerNorm, clip_qkv) give transformers' logits and,
through every decoding method on the minimal runtime, transformers' greedy tokens."""
from __future__ import annotations

import pytest
import torch

from helpers.models.decoder import DecoderConfig, from_hf
from helpers.models.runtime import minimal_view, resolve_runtime
from helpers.specdec import (FeatureDraft, MedusaHeads, autoregressive_generate, batched_speculative_generate,
                             eagle_generate, medusa_generate, prompt_lookup_generate, self_speculative_generate,
                             speculative_generate, tree_generate)
from tiny_models import FAMILIES, perturbed_copy, tiny_family

NEW = 16
PROMPTS = [[5, 17, 3, 9, 22, 41, 7, 5, 17, 3], [8, 2, 60, 61], [11, 12, 13, 14, 15, 16, 17]]


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request):
    """(name, target, draft, transformers' greedy tokens per prompt)."""
    target = tiny_family(request.param, 0)
    draft = perturbed_copy(target, 0.3, relative=True)
    target.generation_config.eos_token_id = draft.generation_config.eos_token_id = None
    references = []
    for row in PROMPTS:
        out = target.generate(torch.tensor([row]), max_new_tokens=NEW, do_sample=False, pad_token_id=0)
        references.append(out[0, len(row):])
    return request.param, target, draft, references


def test_logits_equal_transformers_in_float64():
    for name in FAMILIES:
        hf = tiny_family(name, 1).double()
        ids = torch.randint(0, 256, (2, 40), generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            expected = hf(ids).logits
            model = from_hf(hf)
            cache = model.new_cache(2, 48)
            prefill, step = model(ids[:, :30], cache), model(ids[:, 30:], cache)
        # transformers' RMSNorm computes in float32 even for float64 inputs: agreement to float32 rounding
        torch.testing.assert_close(torch.cat([prefill, step], 1), expected, rtol=1e-6, atol=1e-6, msg=name)
        with torch.no_grad():  # ... and transformers still computes what it did, over the shared (fused) weights
            torch.testing.assert_close(hf(ids).logits, expected, rtol=0, atol=0)


def test_the_config_picks_each_familys_differences():
    configs = {name: DecoderConfig.from_hf(tiny_family(name, 0).config) for name in FAMILIES}
    assert [configs[n].qk_norm for n in ("qwen3", "llama3", "olmo")] == [True, False, False]
    assert configs["olmo"].norm == "layer" and configs["olmo"].clip_qkv == 0.1
    assert configs["llama3"].rope_llama3 == (8.0, 1.0, 4.0, 32) and configs["llama2"].rope_llama3 is None
    assert configs["llama3-tied"].tie_word_embeddings and configs["llama2"].num_kv_heads == configs["llama2"].num_heads
    scaled, plain = configs["llama3"].inv_freq(), DecoderConfig(**{**configs["llama3"].__dict__,
                                                                   "rope_llama3": None}).inv_freq()
    assert torch.equal(scaled[0], plain[0]) and scaled[-1] == plain[-1] / 8  # high frequencies kept, low ones slowed


def test_fused_weights_are_shared_with_transformers_and_training_still_reaches_them():
    hf = tiny_family("llama3", 2)
    model = from_hf(hf)
    attn = hf.model.layers[0].self_attn
    fused = model.layers[0].self_attn.qkv_proj.weight
    assert attn.q_proj.weight.untyped_storage().data_ptr() == fused.untyped_storage().data_ptr()
    with torch.no_grad():
        attn.v_proj.weight.add_(1.0)  # an in-place update (an optimizer step) of transformers' parameter ...
    assert torch.equal(fused[-attn.v_proj.weight.shape[0]:], attn.v_proj.weight)  # ... is the model file's too
    assert from_hf(hf).layers[0].self_attn.qkv_proj.weight.data_ptr() == fused.data_ptr()  # fused once, not again


def test_auto_picks_the_minimal_runtime_for_every_family():
    for name in FAMILIES:
        assert resolve_runtime("auto", tiny_family(name, 0)) == "minimal", name


@pytest.mark.parametrize("method", ["ar", "ar-graphs", "linear", "linear-graphs", "static-tree", "dynamic-tree",
                                    "lookup", "medusa", "medusa-tree", "eagle", "eagle-tree"])
def test_every_method_gives_transformers_greedy_tokens(family, method):
    name, target, draft, references = family
    runs = {
        "ar": lambda p: autoregressive_generate(target, p, NEW, runtime="minimal"),
        "ar-graphs": lambda p: autoregressive_generate(target, p, NEW, runtime="minimal", compile="graphs"),
        "linear": lambda p: speculative_generate(target, draft, p, NEW, 3, runtime="minimal"),
        "linear-graphs": lambda p: speculative_generate(target, draft, p, NEW, 3, runtime="minimal", compile="graphs"),
        "static-tree": lambda p: tree_generate(target, draft, p, NEW, tree="static", topk=(3, 2, 1)),
        "dynamic-tree": lambda p: tree_generate(target, draft, p, NEW, tree="dynamic", depth=3, topk=2, budget=6),
        "lookup": lambda p: prompt_lookup_generate(target, p, NEW, ngram=2, num_draft=4, runtime="minimal"),
        "medusa": lambda p: medusa_generate(target, MedusaHeads(target, 3), p, NEW, runtime="minimal"),
        "medusa-tree": lambda p: medusa_generate(target, MedusaHeads(target, 3), p, NEW, topk=(2, 2, 1)),
        "eagle": lambda p: eagle_generate(target, FeatureDraft(target), p, NEW, gamma=3, runtime="minimal"),
        "eagle-tree": lambda p: eagle_generate(target, FeatureDraft(target), p, NEW, tree="dynamic", depth=3, topk=2,
                                               budget=5),
    }
    for row, reference in zip(PROMPTS, references):
        result = runs[method](torch.tensor([row]))
        assert result.stats.runtime == "minimal", (name, method)
        assert torch.equal(result.tokens, reference), (name, method, row)


def test_batched_and_self_speculation_give_transformers_greedy_tokens(family):
    name, target, draft, references = family
    batched = batched_speculative_generate(target, draft, PROMPTS, NEW, gamma=3, runtime="minimal")
    assert batched.tokens == [r.tolist() for r in references], name
    width = max(map(len, PROMPTS))
    ids = torch.tensor([[0] * (width - len(r)) + r for r in PROMPTS])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in PROMPTS])
    selfspec = self_speculative_generate(target, ids, NEW, gamma=3, window=4, sinks=1, attention_mask=mask,
                                         eos_token_id=[])
    assert selfspec.tokens == [r.tolist() for r in references], name
    assert minimal_view(target).config.family == DecoderConfig.from_hf(target.config).family


def test_a_view_first_built_in_inference_mode_leaves_the_model_trainable():
    """Regression: the fused weights (and the RoPE tables) were made inside the first caller's inference mode, and
    transformers' parameters, rebound to them, could no longer be trained."""
    hf = tiny_family("qwen3", 3)
    with torch.inference_mode():
        minimal_view(hf)(torch.tensor([[1, 2, 3]]))
    loss = hf(torch.tensor([[1, 2, 3]])).logits.sum() + minimal_view(hf)(torch.tensor([[1, 2, 3]])).sum()
    loss.backward()
    assert hf.model.layers[0].self_attn.q_proj.weight.grad is not None


def test_fused_projections_give_the_separate_ones_logits_and_tokens_on_the_cpu_pair():
    """Fusion changes the kernels, not the results: the CPU pair's target with q/k/v and gate/up as one product each
    against the same weights as separate products (helpers.models.bench's baseline), float32."""
    from helpers.models import load_model
    from helpers.experiments.model_bench import separate_projections

    fused = minimal_view(load_model("cpu-pair/target")[0])
    separate = separate_projections(fused)
    ids = torch.randint(0, fused.config.vocab_size, (2, 48), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(fused(ids), separate(ids), rtol=1e-5, atol=1e-5)
    prompt = ids[:1, :20]
    assert torch.equal(autoregressive_generate(fused, prompt, 24, eos_token_id=-1).tokens,
                       autoregressive_generate(separate, prompt, 24, eos_token_id=-1).tokens)


@pytest.mark.parametrize("name", ["llama3-tied", "olmo"])
def test_sampled_speculation_on_the_minimal_runtime_follows_the_targets_law(name):
    """The first two tokens of linear and tree speculation over 1500 seeds on a Llama 3 and an OLMo target: total
    variation within exact sampling's 99.9th percentile and chi-square p > 1e-3 against the target's exact law."""
    import numpy as np

    from distribution_checks import chi_square_pvalue, exact_joint, tv_tolerance

    vocab, samples = 16, 1500
    target = tiny_family(name, 11, vocab_size=vocab, num_hidden_layers=1, head_scale=4.0)
    draft = perturbed_copy(target, 0.5, relative=True)
    prompt = torch.tensor([[3, 1, 4]])
    expected = exact_joint(target, prompt, 1.0).ravel()
    expected /= expected.sum()
    for run in (lambda seed: speculative_generate(target, draft, prompt, 3, 2, 1.0, seed, runtime="minimal"),
                lambda seed: tree_generate(target, draft, prompt, 3, 1.0, seed, tree="static", topk=(2, 1))):
        counts = np.zeros(vocab * vocab)
        for seed in range(samples):
            x1, x2 = run(seed).tokens[:2].tolist()
            counts[x1 * vocab + x2] += 1
        total_variation = 0.5 * np.abs(counts / samples - expected).sum()
        assert total_variation <= tv_tolerance(expected, samples), (name, total_variation)
        assert chi_square_pvalue(counts, expected, samples) > 1e-3, name
