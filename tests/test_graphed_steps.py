"""helpers.models.graphs.GraphedSteps: the static step that a GPU captures as a CUDA graph, checked on the CPU where
it runs eagerly: the same logits as the model's eager forward, no host value read and no cache reallocated inside
the step (what capture needs), and generation through it (``compile="graphs"``) exactly AR's output."""
from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from helpers.models.graphs import GraphedSteps, graph_replays, graphed_steps
from helpers.models.decoder import from_hf
from helpers.models.runtime import cached_decoder
from helpers.specdec import autoregressive_generate, speculative_generate
from tiny_models import perturbed_copy, tiny_qwen3

VOCAB = 128
# ops that read a device value on the host, or build a tensor from host data: neither may sit inside a CUDA graph
HOST_OPS = {"_local_scalar_dense", "item", "nonzero", "lift_fresh", "lift_fresh_copy", "masked_select", "unique"}


def ids(shape, seed: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, shape, generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def model():
    hf = tiny_qwen3(3, vocab_size=VOCAB, hidden_size=32, intermediate_size=64, head_dim=8,
                    max_position_embeddings=512)
    return from_hf(hf)


class OpLog(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.names = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.add(func.__name__.split(".")[0])
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("batch", [1, 3])
def test_static_step_gives_the_eager_logits_for_every_width(model, batch):
    steps = GraphedSteps(model, batch, 256, capture=False)
    eager = model.new_cache(batch, 256)
    prompt = ids((batch, 9), 1)
    with torch.no_grad():
        model(prompt, steps.cache), model(prompt, eager)
        for k in (1, 4, 2, 1, 8):
            block = ids((batch, k), k)
            torch.testing.assert_close(steps(block), model(block, eager), rtol=1e-5, atol=1e-5)
        # a rollback (host lengths move back) is uploaded before the next step
        steps.cache.rollback(5), eager.rollback(5)
        block = ids((batch, 3), 7)
        torch.testing.assert_close(steps(block, last_only=True), model(block, eager, last_only=True),
                                   rtol=1e-5, atol=1e-5)
    assert steps.cache.lengths == eager.lengths and steps.lengths.tolist() == eager.lengths


def test_static_step_respects_left_padding(model):
    steps = GraphedSteps(model, 2, 256, capture=False)
    eager = model.new_cache(2, 256)
    prompt, mask = ids((2, 6), 2), torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    with torch.no_grad():
        model(prompt, steps.cache, attention_mask=mask), model(prompt, eager, attention_mask=mask)
        for k in (1, 3):
            block = ids((2, k), 10 + k)
            torch.testing.assert_close(steps(block), model(block, eager), rtol=1e-5, atol=1e-5)


def test_the_step_reads_no_host_value_and_keeps_its_buffers(model):
    steps = GraphedSteps(model, 2, 256, capture=False)
    with torch.no_grad():
        model(ids((2, 5), 3), steps.cache)
        steps(ids((2, 1), 4))  # uploads the lengths once, outside the step
        pointers = [t.data_ptr() for t in steps.cache.keys + steps.cache.values + [steps.lengths]]
        with OpLog() as log:
            steps._body(ids((2, 4), 5))
    assert not log.names & HOST_OPS, f"host reads inside the step: {sorted(log.names & HOST_OPS)}"
    assert "index_put_" in log.names  # the step writes the cache in place
    assert [t.data_ptr() for t in steps.cache.keys + steps.cache.values + [steps.lengths]] == pointers


def test_steps_are_reused_across_generations_and_never_shared_by_live_decoders(model):
    first = cached_decoder(model, "minimal", 40, compile="graphs")
    second = cached_decoder(model, "minimal", 40, compile="graphs")  # a model drafting for itself: both alive
    assert first.graphed is not second.graphed and first.cache is not second.cache
    kept = first.graphed
    del first, second
    again = cached_decoder(model, "minimal", 60, compile="graphs")  # same rounded capacity (256): reused, emptied
    assert again.graphed is kept and again.cache.lengths == [0]
    assert graph_replays(model) == 0  # nothing is captured on a CPU


def test_bad_inputs_are_clear_errors(model):
    steps = graphed_steps(model, 1, 8, owner=test_bad_inputs_are_clear_errors)
    with pytest.raises(ValueError, match="batch=1, 1..32"):
        steps(ids((2, 1), 0))
    with pytest.raises(ValueError, match="CUDA device"):
        GraphedSteps(model, 1, 16, capture=True)
    with pytest.raises(ValueError, match="'graphs'"):
        cached_decoder(model, "minimal", 16, compile="cuda")


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_generation_through_graphed_steps_is_exactly_the_eager_generation(temperature):
    hf = tiny_qwen3(5, vocab_size=VOCAB, hidden_size=32, intermediate_size=64, head_dim=8,
                    max_position_embeddings=512, head_scale=4.0)
    draft = perturbed_copy(hf, 0.02, relative=True)
    prompt = ids((1, 7), 6)
    ar = autoregressive_generate(hf, prompt, 30, temperature, seed=1)
    assert autoregressive_generate(hf, prompt, 30, temperature, seed=1, compile="graphs").tokens.tolist() \
        == ar.tokens.tolist()
    for gamma in (1, 3, 5):
        eager = speculative_generate(hf, draft, prompt, 30, gamma, temperature, seed=1)
        graphed = speculative_generate(hf, draft, prompt, 30, gamma, temperature, seed=1, compile="graphs")
        assert graphed.tokens.tolist() == eager.tokens.tolist()
        if temperature == 0:
            assert graphed.tokens.tolist() == ar.tokens.tolist()
