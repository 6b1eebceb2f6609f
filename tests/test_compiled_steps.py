"""compile="compiled": the static step with its decoder layer compiled by inductor once (regional compilation), inside
the same explicit CUDA graphs on a GPU and run without capture here (inductor's C++ backend, which .ci/run installs
g++ for). The logits are eager's within float rounding, the cache holds the same keys and values, every layer of a
model reuses one compiled graph, and generation through it gives eager's tokens on every family."""
from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters

from helpers.models.decoder import from_hf
from helpers.models.graphs import GraphedSteps
from helpers.models.runtime import cached_decoder
from helpers.specdec import autoregressive_generate, speculative_generate
from tiny_models import perturbed_copy, tiny_family

pytestmark = pytest.mark.slow


def ids(shape, seed: int) -> torch.Tensor:
    return torch.randint(0, 256, shape, generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def model():
    torch.compiler.reset()
    return from_hf(tiny_family("llama3", 4, num_hidden_layers=3, max_position_embeddings=512))


def test_compiled_steps_give_eager_logits_and_cache_for_ragged_rows(model):
    steps = GraphedSteps(model, 2, 256, compiled=True)
    eager = model.new_cache(2, 256)
    prompt, mask = ids((2, 6), 2), torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    with torch.no_grad():
        model(prompt, steps.cache, attention_mask=mask), model(prompt, eager, attention_mask=mask)
        for k in (1, 3, 1):
            block = ids((2, k), 10 + k)
            torch.testing.assert_close(steps(block), model(block, eager), rtol=1e-5, atol=1e-5)
        steps.cache.rollback([2, 1]), eager.rollback([2, 1])
        torch.testing.assert_close(steps(ids((2, 1), 5)), model(ids((2, 1), 5), eager), rtol=1e-5, atol=1e-5)
    for layer in range(3):
        for mine, theirs in ((steps.cache.keys, eager.keys), (steps.cache.values, eager.values)):
            stored = max(eager.lengths)
            torch.testing.assert_close(mine[layer][:, :, :stored], theirs[layer][:, :, :stored], rtol=1e-5, atol=1e-5)
    assert steps.compile_s > 0


def test_every_layer_reuses_two_compiled_graphs_for_every_width(model):
    torch.compiler.reset()
    before = counters["stats"]["unique_graphs"]
    steps = GraphedSteps(model, 1, 256, compiled=True)
    with torch.no_grad():
        model(ids((1, 4), 0), steps.cache)
        for k in (1, 2, 3, 1, 5, 2):
            steps(ids((1, k), k))
    # the decode width, then one graph with a symbolic width for 2, 3 and 5: not 4 widths x 3 layers
    assert counters["stats"]["unique_graphs"] - before == 2


@pytest.mark.parametrize("family", ["qwen3", "llama3-tied", "olmo"])
def test_generation_through_compiled_steps_gives_eager_tokens(family):
    target = tiny_family(family, 5)
    draft = perturbed_copy(target, 0.3, relative=True)
    prompt = torch.tensor([[5, 17, 3, 9, 22, 41, 7]])
    reference = autoregressive_generate(target, prompt, 12, eos_token_id=-1).tokens
    assert torch.equal(autoregressive_generate(target, prompt, 12, eos_token_id=-1, compile="compiled").tokens,
                       reference)
    result = speculative_generate(target, draft, prompt, 12, 2, eos_token_id=-1, compile="compiled")
    assert torch.equal(result.tokens, reference) and result.stats.compiled == "compiled"


def test_unknown_compile_modes_are_clear_errors(model):
    with pytest.raises(ValueError, match="'graphs'.*'compiled'"):
        cached_decoder(model, "minimal", 16, compile=True)
