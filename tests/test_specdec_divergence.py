"""helpers.specdec.divergence: a greedy output that parts from AR's at a near-tie (bf16 rounding) is told from a
real error by the target's margin at the first differing position."""
from __future__ import annotations

import types

import torch

from helpers.specdec.divergence import greedy_divergence


class FixedLogits(torch.nn.Module):
    """A 'target' whose next-token logits are the same vector at every position."""

    def __init__(self, logits, dtype=torch.bfloat16):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1, dtype=dtype))
        self.logits = torch.tensor(logits, dtype=torch.float32)

    def forward(self, ids):
        return types.SimpleNamespace(logits=self.logits.expand(*ids.shape, -1))


def test_identical_outputs_are_no_divergence():
    found = greedy_divergence(FixedLogits([0.0, 1.0]), torch.tensor([[0]]), [1, 1, 1], [1, 1, 1])
    assert found["identical"] and found["near_tie"] and found["position"] is None


def test_a_near_tie_in_bf16_is_told_from_a_real_error():
    prompt = torch.tensor([[0, 1]])
    tie = greedy_divergence(FixedLogits([20.0, 19.99, 3.0]), prompt, [1, 0, 0], [1, 1, 2])
    assert not tie["identical"] and tie["position"] == 1 and tie["near_tie"], tie
    error = greedy_divergence(FixedLogits([20.0, 12.0, 3.0]), prompt, [0, 0, 0], [0, 2, 2])
    assert error["position"] == 1 and not error["near_tie"] and error["margin"] == 17.0
    # the same 0.01 gap is no tie in float32, whose resolution is far finer
    assert not greedy_divergence(FixedLogits([20.0, 19.99], torch.float32), prompt, [0], [1])["near_tie"]


def test_a_shorter_output_is_a_divergence_at_its_end():
    found = greedy_divergence(FixedLogits([0.0, 1.0]), torch.tensor([[0]]), [1, 1, 1], [1, 1])
    assert not found["identical"] and found["position"] == 2 and not found["near_tie"]
