"""helpers.models.streaming and helpers.specdec.selfspec: the StreamingLLM view attends to exactly the sinks and the
recent window, and self-speculation is lossless (greedy rows equal the model's own greedy decoding, sampled
tokens follow its distribution) on ragged batches.

Tiny random Qwen3 models (tests/tiny_models.py) with windows much shorter than the prompts, so the self-draft
really differs from the model and drafts are both accepted and rejected.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers.models.decoder import from_hf
from helpers.models.streaming import StreamingView
from helpers.specdec.linear import autoregressive_generate
from helpers.specdec.selfspec import (
    batched_decode,
    prefill,
    prompt_rows,
    self_speculative_generate,
)
from distribution_checks import chi_square_pvalue, exact_joint
from tiny_models import PEAK, tiny_qwen3


@pytest.fixture(scope="module")
def model():
    """Peaked logits in float64: greedy choices are far from ties, so batched and single-row paths agree."""
    return tiny_qwen3(3, head_scale=PEAK, vocab_size=64, max_position_embeddings=512).double()


def ragged(lengths, seed: int = 0, vocab: int = 64):
    """Left-padded random prompts of the given lengths: (input_ids, attention_mask, rows)."""
    generator = torch.Generator().manual_seed(seed)
    rows = [torch.randint(0, vocab, (n,), generator=generator).tolist() for n in lengths]
    width = max(lengths)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for b, row in enumerate(rows):
        ids[b, width - len(row):] = torch.tensor(row)
        mask[b, width - len(row):] = 1
    return ids, mask, rows


# --- the view ----------------------------------------------------------------------------------------------------


class MaskedReference:
    """The view's semantics the slow way: full-width attention with a mask hiding the middle of each row."""

    def __init__(self, cache, sinks, window):
        self.cache, self.sinks, self.window = cache, sinks, window

    def __getattr__(self, name):
        return getattr(self.cache, name)

    def attention_mask(self, new, tree_mask=None):
        cache = self.cache
        width = max(cache.lengths) + new
        slot = torch.arange(width)[None, None, :]
        lengths, pads = cache.lengths_tensor()[:, None, None], cache.pads[:, None, None]
        query = torch.arange(new)[None, :, None]
        visible = ((slot <= lengths + query) & (slot >= pads)
                   & ((slot >= lengths - self.window) | (slot < pads + self.sinks)))
        return visible[:, None]


@pytest.mark.parametrize("lengths", [(30, 30, 30), (30, 17, 9, 3)])
@pytest.mark.parametrize("new", [1, 3])
def test_view_attends_to_sinks_and_window_only(model, lengths, new):
    minimal = from_hf(model)
    ids, mask, _ = ragged(lengths)
    logits = {}
    for kind in ("view", "reference"):
        cache = minimal.new_cache(len(lengths), 64)
        minimal(ids, cache, attention_mask=None if len(set(lengths)) == 1 else mask)
        wrap = StreamingView(cache, sinks=2, window=5) if kind == "view" else MaskedReference(cache, 2, 5)
        extra = torch.arange(new)[None].expand(len(lengths), -1) + 7
        logits[kind] = minimal(extra, wrap)
        assert cache.lengths == [max(lengths) + new] * len(lengths)  # the view wrote into the cache
    torch.testing.assert_close(logits["view"], logits["reference"])


def test_view_covering_the_whole_context_is_full_attention(model):
    minimal = from_hf(model)
    ids, mask, _ = ragged((12, 7))
    out = {}
    for use_view in (True, False):
        cache = minimal.new_cache(2, 32)
        minimal(ids, cache, attention_mask=mask)
        out[use_view] = minimal(ids[:, -2:], StreamingView(cache, sinks=4, window=64) if use_view else cache)
    torch.testing.assert_close(out[True], out[False])


def test_view_reads_only_the_visible_slots(model):
    minimal = from_hf(model)
    cache = minimal.new_cache(3, 200)
    minimal(torch.randint(0, 64, (3, 150)), cache)
    view = StreamingView(cache, sinks=4, window=16)
    view.attention_mask(2)
    keys, values = view.update(0, torch.zeros(3, 2, 2, 16, dtype=torch.float64),
                               torch.zeros(3, 2, 2, 16, dtype=torch.float64))
    assert keys.shape == values.shape == (3, 2, 4 + 16 + 2, 16)


def test_view_refuses_static_caches_and_bad_sizes(model):
    minimal = from_hf(model)
    with pytest.raises(ValueError, match="static_shapes"):
        StreamingView(minimal.new_cache(1, 16, static_shapes=True), sinks=4, window=8)
    with pytest.raises(ValueError, match="window >= 1"):
        StreamingView(minimal.new_cache(1, 16), sinks=4, window=0)


# --- greedy: every row equals the model's own greedy decoding ------------------------------------------------------


@pytest.mark.parametrize("gamma,window,sinks", [(1, 4, 2), (3, 6, 0), (5, 12, 4)])
def test_greedy_rows_equal_autoregressive(model, gamma, window, sinks):
    ids, mask, rows = ragged((40, 23, 9, 2, 31), seed=gamma)
    result = self_speculative_generate(model, ids, 24, gamma=gamma, window=window, sinks=sinks,
                                       attention_mask=mask)
    for b, row in enumerate(rows):
        reference = autoregressive_generate(model, torch.tensor([row]), 24, eos_token_id=[]).tokens.tolist()
        assert result.tokens[b] == reference, f"row {b} differs"
    stats = result.stats
    assert stats.new_tokens == 24 * len(rows)
    assert 0 < stats.accepted < stats.draft_forwards * len(rows)  # drafts both accepted and rejected
    assert stats.verify_forwards == stats.rounds and stats.draft_forwards == gamma * stats.rounds
    assert 1 <= stats.tau <= gamma + 1 and 0 < stats.alpha < 1
    assert stats.draft_ratio > 0 and stats.verify_ratio > 0 and stats.decode_s > 0
    # the Eq. 5 terms come from the full-batch rounds: until the first row finished
    full = min(len(counts) for counts in stats.accepted_per_round)
    assert stats.full_batch_rounds == full <= stats.rounds
    assert len(rows) * full <= stats.full_batch_tokens <= min(stats.new_tokens, len(rows) * full * (gamma + 1))
    assert stats.tau == pytest.approx(stats.full_batch_tokens / (len(rows) * full))
    assert 0 < stats.full_batch_s <= stats.decode_s and stats.full_batch_tokens_per_second > 0


def test_uniform_batch_and_baseline(model):
    ids, _, rows = ragged((33, 33, 33), seed=7)
    spec = self_speculative_generate(model, ids, 16, gamma=3, window=8)
    base = batched_decode(model, ids, 16)
    for b, row in enumerate(rows):
        reference = autoregressive_generate(model, torch.tensor([row]), 16, eos_token_id=[]).tokens.tolist()
        assert spec.tokens[b] == base.tokens[b] == reference
    assert base.stats.rounds == 16 and base.stats.tau == 1.0
    assert base.stats.full_batch_rounds == 16 and base.stats.full_batch_tokens == 3 * 16  # EOS off: rows end together


def test_rows_stop_at_eos_and_leave_the_batch(model):
    ids, mask, rows = ragged((20, 11, 5), seed=3)
    free = [autoregressive_generate(model, torch.tensor([r]), 20, eos_token_id=[]).tokens.tolist() for r in rows]
    eos = free[1][6]  # a token row 1 emits: it (and maybe others) stops early
    result = self_speculative_generate(model, ids, 20, gamma=4, window=5, attention_mask=mask, eos_token_id=eos)
    baseline = batched_decode(model, ids, 20, attention_mask=mask, eos_token_id=eos)
    for b, row in enumerate(free):
        expected = row[: row.index(eos) + 1] if eos in row else row
        assert result.tokens[b] == baseline.tokens[b] == expected
    assert len(result.tokens[1]) <= 7


def test_prefilled_copy_reuses_one_prefill(model):
    ids, mask, _ = ragged((25, 14, 30), seed=2)
    fresh = self_speculative_generate(model, ids, 12, gamma=3, window=6, attention_mask=mask)
    state = prefill(model, ids, mask, room=12 + 4)
    first = self_speculative_generate(model, ids, 12, gamma=3, window=6, prefilled=state.copy())
    second = batched_decode(model, ids, 12, prefilled=state.copy(rows=2))
    assert first.tokens == fresh.tokens
    assert second.tokens == fresh.tokens[:2]
    with pytest.raises(ValueError, match="room"):
        self_speculative_generate(model, ids, 40, gamma=3, window=6, prefilled=state.copy())


def test_long_prompts_prefill_in_chunks(model, monkeypatch):
    import helpers.specdec.selfspec as selfspec
    ids, mask, rows = ragged((70, 45), seed=4)
    whole = self_speculative_generate(model, ids, 8, gamma=2, window=10, attention_mask=mask)
    monkeypatch.setattr(selfspec, "PREFILL_CHUNK", 16)
    state = selfspec.prefill(model, ids, mask, room=11, chunk=16)
    chunked = self_speculative_generate(model, ids, 8, gamma=2, window=10, prefilled=state)
    assert chunked.tokens == whole.tokens


# --- sampling: the output follows the model's distribution ----------------------------------------------------------


def test_sampling_preserves_the_model_distribution():
    """First two tokens jointly distributed as under the model alone. A 1-layer model whose draft sees 2 of 10
    prompt tokens (window 1, one sink) disagrees with it often, so both the accept and the residual paths run;
    64 rows x 50 seeds = 3200 samples, chi-square p > 1e-3."""
    vocab, temperature, rows, seeds = 16, 1.0, 64, 50
    model = tiny_qwen3(11, vocab_size=vocab, num_hidden_layers=1, head_scale=3.0)
    prompt = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6, 5, 3]])
    expected = exact_joint(model, prompt, temperature).ravel()
    expected /= expected.sum()
    counts = np.zeros(vocab * vocab)
    accepted = drafted = 0
    for seed in range(seeds):
        result = self_speculative_generate(model, prompt.expand(rows, -1), 2, gamma=1, temperature=temperature,
                                           seed=seed, window=1, sinks=1, measure_target_step=False)
        for tokens in result.tokens:
            counts[tokens[0] * vocab + tokens[1]] += 1
        first = [row[0] for row in result.stats.accepted_per_round]
        accepted, drafted = accepted + sum(first), drafted + len(first)
    assert 0.1 < accepted / drafted < 0.9
    pvalue = chi_square_pvalue(counts, expected, rows * seeds)
    print(f"first-draft acceptance {accepted / drafted:.3f}, chi-square p = {pvalue:.3f}")
    assert pvalue > 1e-3


def test_sampling_is_reproducible(model):
    ids, mask, _ = ragged((15, 9), seed=5)
    first = self_speculative_generate(model, ids, 10, gamma=2, temperature=0.9, seed=4, window=4, attention_mask=mask)
    again = self_speculative_generate(model, ids, 10, gamma=2, temperature=0.9, seed=4, window=4, attention_mask=mask)
    assert first.tokens == again.tokens


# --- clear errors ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs,match", [
    (dict(gamma=0), "gamma"), (dict(window=0), "window"), (dict(sinks=-1), "sinks"),
    (dict(temperature=-1.0), "temperature"), (dict(max_new_tokens=0), "max_new_tokens"),
])
def test_bad_arguments_are_named(model, kwargs, match):
    ids, mask, _ = ragged((6, 4))
    args = dict(max_new_tokens=4) | kwargs
    with pytest.raises(ValueError, match=match):
        self_speculative_generate(model, ids, attention_mask=mask, **args)


def test_bad_prompts_are_named(model):
    with pytest.raises(ValueError, match="batch, prompt_len"):
        prompt_rows(torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="empty"):
        prompt_rows(torch.tensor([[1, 2], [3, 4]]), torch.tensor([[1, 1], [0, 0]]))
    with pytest.raises(ValueError, match="context"):
        self_speculative_generate(model, torch.zeros(1, 500, dtype=torch.long), 20)
