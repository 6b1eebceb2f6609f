"""The minimal Qwen3 decoder and its KV cache: same logits as transformers, same tokens with and without cache."""
from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, MistralConfig

from helpers import kv_cache
from helpers.memory import kv_cache_bytes
from tiny_models import tiny_qwen3

CONTEXT = 64
# 2 layers, GQA (4 query heads, 2 KV heads), vocabulary 256. A large init keeps the logits peaked, so greedy
# choices are never near-ties that fp32 rounding could flip.
SIZES = dict(max_position_embeddings=CONTEXT, initializer_range=0.2)


@pytest.fixture(scope="module")
def pair():
    hf = tiny_qwen3(**SIZES)
    return hf, kv_cache.from_hf(hf)


def random_prompt(batch: int, length: int, seed: int, vocab: int = 256) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (batch, length), generator=generator)


@pytest.mark.parametrize("tie", [False, True])
def test_logits_match_transformers(tie):
    hf = tiny_qwen3(seed=1, tie=tie, **SIZES)
    model = kv_cache.from_hf(hf)
    ids = random_prompt(3, 17, seed=2)
    with torch.no_grad():
        expected = hf(ids).logits
        got = model(ids)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_from_hf_shares_weights_without_copy(pair):
    hf, model = pair
    assert model.embed_tokens.weight.data_ptr() == hf.model.embed_tokens.weight.data_ptr()
    assert model.layers[1].mlp.down_proj.weight.data_ptr() == hf.model.layers[1].mlp.down_proj.weight.data_ptr()


def test_tied_embeddings_stay_tied():
    model = kv_cache.from_hf(tiny_qwen3(tie=True, **SIZES))
    assert model.lm_head.weight is model.embed_tokens.weight


@pytest.mark.parametrize("batch, prompt_len, new_tokens, seed", [(1, 1, 12, 0), (1, 9, 30, 1), (3, 5, 20, 2), (4, 23, 17, 3)])
def test_cached_and_uncached_generation_agree(pair, batch, prompt_len, new_tokens, seed):
    _, model = pair
    ids = random_prompt(batch, prompt_len, seed)
    cached_tokens, cached_logits = kv_cache.generate(model, ids, new_tokens, use_cache=True, return_logits=True)
    plain_tokens, plain_logits = kv_cache.generate(model, ids, new_tokens, use_cache=False, return_logits=True)
    assert cached_tokens.shape == (batch, new_tokens)
    assert torch.equal(cached_tokens, plain_tokens)
    torch.testing.assert_close(cached_logits, plain_logits, rtol=1e-4, atol=1e-4)


def test_greedy_tokens_match_transformers_generate(pair):
    hf, model = pair
    ids = random_prompt(2, 7, seed=5)
    expected = hf.generate(ids, max_new_tokens=25, min_new_tokens=25, do_sample=False, pad_token_id=0)[:, 7:]
    assert torch.equal(kv_cache.generate(model, ids, 25), expected)


def test_batch_rows_are_independent(pair):
    """Each row of a batch generates what it would generate alone."""
    _, model = pair
    ids = random_prompt(3, 6, seed=7)
    batched = kv_cache.generate(model, ids, 15)
    for row in range(3):
        assert torch.equal(batched[row : row + 1], kv_cache.generate(model, ids[row : row + 1], 15))


def test_prefill_in_chunks_equals_one_prefill(pair):
    """Prefill then single-token decode steps give the logits of one full forward pass."""
    _, model = pair
    ids = random_prompt(2, 20, seed=8)
    with torch.no_grad():
        full = model(ids)
        cache = model.new_cache(batch_size=2, capacity=20)
        pieces = [model(ids[:, :12], cache)] + [model(ids[:, t : t + 1], cache) for t in range(12, 20)]
    assert cache.length == 20
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, rtol=1e-5, atol=1e-5)


def test_generation_up_to_the_context_limit(pair):
    _, model = pair
    ids = random_prompt(2, CONTEXT - 6, seed=9)
    cached = kv_cache.generate(model, ids, 6, use_cache=True)
    assert torch.equal(cached, kv_cache.generate(model, ids, 6, use_cache=False))


@pytest.mark.parametrize("use_cache", [True, False])
def test_past_the_context_limit_is_a_clear_error(pair, use_cache):
    _, model = pair
    with pytest.raises(ValueError, match="context limit of 64"):
        kv_cache.generate(model, random_prompt(1, CONTEXT - 5, seed=0), 6, use_cache=use_cache)


def test_forward_past_the_context_limit_is_a_clear_error(pair):
    _, model = pair
    with pytest.raises(ValueError, match="context limit"):
        model(random_prompt(1, CONTEXT + 1, seed=0))


def test_cache_overflow_and_batch_mismatch_are_clear_errors(pair):
    _, model = pair
    cache = model.new_cache(batch_size=2, capacity=8)
    with torch.no_grad():
        model(random_prompt(2, 6, seed=0), cache)
        with pytest.raises(ValueError, match="cache holds 8 tokens"):
            model(random_prompt(2, 3, seed=1), cache)
        with pytest.raises(ValueError, match="batch size 2"):
            model(random_prompt(1, 1, seed=1), cache)
    assert cache.length == 6  # a refused call changes nothing


def test_crop_rolls_back(pair):
    """After crop(n), continuing gives the logits a fresh run would give (what speculative decoding needs)."""
    _, model = pair
    ids = random_prompt(1, 10, seed=11)
    other = random_prompt(1, 4, seed=12)
    with torch.no_grad():
        cache = model.new_cache(1, 16)
        model(ids, cache)
        model(other, cache)  # tokens to be rejected
        cache.crop(10)
        accepted = torch.full((1, 1), 3)
        resumed = model(accepted, cache)
        fresh = model(torch.cat([ids, accepted], dim=1))[:, -1:]
    torch.testing.assert_close(resumed, fresh, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="crop"):
        cache.crop(12)


def test_uncached_path_recomputes_the_whole_prefix(pair):
    """Count the tokens each forward pass processes: cached = prompt then 1s; uncached = the whole prefix."""
    _, model = pair
    seen = {True: [], False: []}
    for use_cache in (True, False):
        handle = model.register_forward_pre_hook(lambda mod, args: seen[use_cache].append(args[0].shape[1]))
        kv_cache.generate(model, random_prompt(1, 5, seed=0), 4, use_cache=use_cache)
        handle.remove()
    assert seen[True] == [5, 1, 1, 1]
    assert seen[False] == [5, 6, 7, 8]


@pytest.mark.parametrize("batch, capacity", [(1, 10), (3, 33)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cache_bytes_match_the_formula(pair, batch, capacity, dtype):
    hf, model = pair
    cache = kv_cache.KVCache(model.config, batch, capacity, dtype=dtype, device="cpu")
    elem = torch.tensor([], dtype=dtype).element_size()
    assert cache.nbytes == kv_cache_bytes(hf.config, capacity, batch_size=batch, bytes_per_elem=elem)


def test_generate_allocates_prompt_plus_new_tokens(pair, monkeypatch):
    _, model = pair
    capacities = []
    original = model.new_cache
    monkeypatch.setattr(model, "new_cache", lambda batch_size, capacity: capacities.append(capacity) or original(batch_size, capacity))
    kv_cache.generate(model, random_prompt(2, 7, seed=0), 5)
    assert capacities == [12]


def test_bfloat16_cached_and_uncached_agree():
    """In bf16 rounding differs between the paths, but greedy tokens of a peaked model still agree."""
    hf = tiny_qwen3(seed=3, max_position_embeddings=CONTEXT, initializer_range=0.5)
    model = kv_cache.from_hf(hf.to(torch.bfloat16))
    ids = random_prompt(2, 8, seed=4)
    cached = kv_cache.generate(model, ids, 10, use_cache=True)
    assert torch.equal(cached, kv_cache.generate(model, ids, 10, use_cache=False))


def test_rejects_other_architectures():
    config = MistralConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2)
    with pytest.raises(ValueError, match="qwen3, llama, olmo.*model_type='mistral'"):
        kv_cache.DecoderConfig.from_hf(config)
    scaled = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                         rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0})
    with pytest.raises(ValueError, match="rope_type='yarn'.*runtime='transformers'"):
        kv_cache.DecoderConfig.from_hf(scaled)


def test_bad_arguments(pair):
    _, model = pair
    with pytest.raises(ValueError, match="max_new_tokens"):
        kv_cache.generate(model, random_prompt(1, 3, seed=0), 0)
    with pytest.raises(ValueError, match="input_ids"):
        kv_cache.generate(model, torch.zeros(3, dtype=torch.long), 2)


@pytest.mark.parametrize("use_cache", [True, False])
def test_step_times_records_one_time_per_forward_and_changes_nothing(pair, use_cache):
    _, mini = pair
    prompt = random_prompt(1, 5, seed=11)
    times: list[float] = []
    timed = kv_cache.generate(mini, prompt, 6, use_cache=use_cache, step_times=times)
    assert torch.equal(timed, kv_cache.generate(mini, prompt, 6, use_cache=use_cache))
    assert len(times) == 6 and all(t > 0 for t in times)  # prefill + 5 decode steps
