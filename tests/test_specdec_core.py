"""helpers.specdec.core: the acceptance rule every method shares, how a row finishes, the input checks every
generator makes once, the phase clock and the statistics base."""
from __future__ import annotations

import math

import pytest
import torch

from helpers.specdec import (autoregressive_generate, batched_autoregressive_generate, batched_speculative_generate,
                             prompt_lookup_generate, self_speculative_generate, speculative_generate, tree_generate)
from helpers.specdec.core import GenerationStats, PhaseClock, accept, finish_row
from tiny_models import tiny_qwen3


@pytest.fixture(scope="module")
def target():
    return tiny_qwen3(seed=0, vocab_size=64)


def test_accept_greedy_takes_the_longest_agreeing_prefix_per_row():
    logits = torch.full((2, 4, 5), -1.0)
    for b, choice in enumerate([[1, 2, 3, 4], [1, 0, 3, 2]]):
        logits[b, torch.arange(4), torch.tensor(choice)] = 1.0
    k, nxt = accept(logits, torch.tensor([[1, 2, 3], [1, 2, 3]]))
    assert k.tolist() == [3, 1] and nxt.tolist() == [4, 0]


def test_accept_without_drafts_is_a_plain_step():
    logits = torch.tensor([[[0.0, 3.0, 1.0]]])
    k, nxt = accept(logits, torch.zeros(1, 0, dtype=torch.long))
    assert k.tolist() == [0] and nxt.tolist() == [1]
    generator = torch.Generator().manual_seed(0)
    draws = [int(accept(logits, torch.zeros(1, 0, dtype=torch.long), torch.zeros(1, 0, 3), 1.0, generator)[1])
             for _ in range(2000)]
    share = torch.bincount(torch.tensor(draws), minlength=3).float() / len(draws)
    assert torch.allclose(share, torch.softmax(logits[0, 0], -1), atol=0.04)


def test_accept_sampling_rows_are_independent_tests():
    """Row 0's draft has q = p (always kept); row 1's draft has q = 0 (always rejected, next token from q)."""
    q = torch.tensor([[0.5, 0.5, 0.0], [0.0, 0.5, 0.5]])
    target_logits = torch.log(torch.stack([torch.stack([q[0], q[0]]), torch.stack([q[1], q[1]])]))
    draft_probs = torch.stack([q[0][None], torch.tensor([[1.0, 0.0, 0.0]])])
    drafts = torch.tensor([[1], [0]])
    for seed in range(20):
        k, nxt = accept(target_logits, drafts, draft_probs, 1.0, torch.Generator().manual_seed(seed))
        assert k.tolist() == [1, 0]
        assert nxt[1] in (1, 2)


def test_finish_row_cuts_at_eos_and_budget():
    row: list[int] = []
    assert not finish_row(row, [1, 2], 5, {9})
    assert finish_row(row, [3, 9, 4], 5, {9}) and row == [1, 2, 3, 9]
    row = [1, 2, 3]
    assert finish_row(row, [4, 5, 6], 5, set()) and row == [1, 2, 3, 4, 5]


def test_phase_clock_laps_add_up():
    clock = PhaseClock("cpu")
    first = clock.lap()
    clock.mark()
    second = clock.lap()
    assert first >= 0 and second >= 0 and clock.total() >= first + second
    assert PhaseClock("cpu", sync_phases=False).lap() >= 0  # a CPU computes synchronously: its laps stay exact


def test_unsynchronised_cuda_phases_are_unknown_not_launch_times():
    """Regression: the H100 window's end-to-end rows split their time into draft/verify laps read without a sync,
    which timed kernel launches (draft 0.31 s, verify 0.07 s of a 3.3 s run): such laps are nan now."""
    clock = PhaseClock("cuda", sync_phases=False)  # no sync is made, so no GPU is needed to build it
    assert math.isnan(clock.lap())
    stats = GenerationStats(new_tokens=4, time_total_s=2.0, time_prefill_s=0.5, time_verify_s=clock.lap())
    assert math.isnan(stats.finish().time_other_s)  # not max(0, nan) == 0: the rest is unknown too


def test_ar_on_an_unsynchronised_device_charges_its_decode_to_target_forwards(target, monkeypatch):
    """AR's clock never syncs (one host read per token is its only sync): where its laps are unknown (CUDA), the
    decode time after the prefill is the target's forwards, as the split says on a CPU."""
    from helpers.specdec import linear

    class LaunchClock(PhaseClock):  # what a CUDA device gives: laps without a sync are not work
        def __init__(self, device, sync_phases=True):
            super().__init__(device, sync_phases)
            self.exact = False

    monkeypatch.setattr(linear, "PhaseClock", LaunchClock)
    stats = autoregressive_generate(target, torch.tensor([[1, 2, 3]]), 4).stats
    assert stats.time_verify_s == pytest.approx(stats.time_total_s - stats.time_prefill_s) and stats.time_other_s == 0


def test_stats_rows_leave_out_the_per_round_logs():
    stats = GenerationStats(new_tokens=4, time_total_s=2.0)
    stats.record_round(2, 3)
    row = stats.finish().as_dict()
    assert "accepted_per_round" not in row and "gamma_per_round" not in row
    assert row["tokens_per_second"] == 2.0 and row["alpha"] == pytest.approx(2 / 3)


SINGLE = {
    "autoregressive": lambda t, ids: autoregressive_generate(t, ids, 4),
    "speculative": lambda t, ids: speculative_generate(t, t, ids, 4, 2),
    "lookup": lambda t, ids: prompt_lookup_generate(t, ids, 4),
    "tree": lambda t, ids: tree_generate(t, t, ids, 4),
}
BATCHED = {
    "self-speculative": lambda t, ids: self_speculative_generate(t, ids, 4, gamma=2),
    "batched speculative": lambda t, ids: batched_speculative_generate(t, t, list(ids), 4, 2),
    "batched autoregressive": lambda t, ids: batched_autoregressive_generate(t, list(ids), 4),
}


@pytest.mark.parametrize("method", list(SINGLE) + list(BATCHED))
@pytest.mark.parametrize("ids,match", [
    (torch.tensor([[1, 2, 64]]), "token id 64, outside the model's vocabulary of 64"),
    (torch.tensor([[1, -3, 2]]), "token id -3, outside"),
    (torch.tensor([[1.0, 2.0, 3.0]]), "integer token ids"),
])
def test_every_method_names_bad_token_ids(target, method, ids, match):
    run = SINGLE.get(method) or BATCHED[method]
    with pytest.raises(ValueError, match=match):
        run(target, ids)


@pytest.mark.parametrize("method", list(SINGLE))
def test_single_prompt_methods_point_a_batch_to_the_batched_ones(target, method):
    with pytest.raises(ValueError, match="one prompt at a time.*batched_speculative_generate"):
        SINGLE[method](target, torch.tensor([[1, 2, 3], [4, 5, 6]]))
