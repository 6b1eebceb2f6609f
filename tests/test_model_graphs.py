"""helpers.models.graphs.compiled_forward: a verify step (several tokens per row) through the compiled decode graph
gives the eager forward's logits. Needs a C++ compiler (inductor on CPU), like test_qwen3_model's compiled test."""
from __future__ import annotations

import pytest
import torch

from helpers.models.graphs import compiled_forward
from helpers.models.qwen3 import from_hf
from tiny_models import tiny_qwen3

VOCAB = 128


def ids(shape, seed: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, shape, generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def models():
    hf = tiny_qwen3(2, vocab_size=VOCAB, hidden_size=32, intermediate_size=64, head_dim=8, max_position_embeddings=96)
    torch.compiler.reset()
    return from_hf(hf), from_hf(hf).compile_decode()


@pytest.mark.slow
@pytest.mark.parametrize("batch", [1, 2])
def test_compiled_verify_equals_eager_forward(models, batch):
    eager, compiled = models
    prompt = ids((batch, 7), 1)
    with torch.no_grad():
        caches = eager.new_cache(batch, 32), compiled.new_cache(batch, 32, static_shapes=True)
        eager(prompt, caches[0]), compiled(prompt, caches[1])
        for round_, k in enumerate((4, 3, 4)):  # verify blocks of gamma + 1 tokens, then a rollback, as in a round
            block = ids((batch, k), 10 + round_)
            expected = eager(block, caches[0], last_only=False)
            got = compiled_forward(compiled, block, caches[1])
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
            assert caches[1].lengths == caches[0].lengths
            caches[0].rollback(1), caches[1].rollback(1)
        token = ids((batch, 1), 99)  # a decode step after the verify steps still agrees
        torch.testing.assert_close(compiled(token, caches[1]), eager(token, caches[0]), rtol=1e-5, atol=1e-5)
        last = compiled_forward(compiled, ids((batch, 2), 5), caches[1], last_only=True)
        assert last.shape == (batch, 1, VOCAB)


def test_compiled_forward_refuses_what_it_cannot_run(models):
    eager, compiled = models
    with pytest.raises(ValueError, match="compile_decode"):
        compiled_forward(eager, ids((1, 2), 0), eager.new_cache(1, 8, static_shapes=True))
    with pytest.raises(ValueError, match="static-shape"):
        compiled_forward(compiled, ids((1, 2), 0), compiled.new_cache(1, 8))
    with pytest.raises(ValueError, match="allocate a larger cache"):
        compiled_forward(compiled, ids((1, 9), 0), compiled.new_cache(1, 8, static_shapes=True))
