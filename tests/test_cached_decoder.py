"""helpers.models.runtime: both runtimes give the same logits through extend / rollback sequences."""
import pytest
import torch

from helpers.models.runtime import cached_decoder, minimal_supported, resolve_runtime
from tiny_models import tiny_qwen3


@pytest.fixture(scope="module")
def qwen3():
    return tiny_qwen3(0, tie=True, vocab_size=50, hidden_size=32, intermediate_size=64, head_dim=8,
                      max_position_embeddings=64)


@torch.inference_mode()
def test_extend_and_rollback_agree_across_runtimes(qwen3):
    ids = torch.randint(0, 50, (1, 20), generator=torch.Generator().manual_seed(1))
    decoders = {r: cached_decoder(qwen3, r, capacity=32) for r in ("minimal", "transformers")}
    outputs = {}
    for runtime, decoder in decoders.items():
        steps = [decoder.extend(ids[:, :8])]          # prefill, last position only
        steps.append(decoder.extend(ids[:, 8:13], last_only=False))  # a verify-like block
        decoder.rollback(3)                            # reject three of them
        assert decoder.length == 10
        steps.append(decoder.extend(ids[:, 10:12], last_only=False))
        decoder.rollback(0)
        assert decoder.length == 12
        outputs[runtime] = steps
    for a, b in zip(outputs["minimal"], outputs["transformers"]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    assert outputs["minimal"][0].shape == (1, 1, 50) and outputs["minimal"][1].shape == (1, 5, 50)
    # and both equal a fresh forward over the final sequence
    fresh = qwen3(input_ids=ids[:, :12]).logits[:, 10:12]
    torch.testing.assert_close(outputs["minimal"][2], fresh, rtol=1e-4, atol=1e-4)


def test_minimal_view_shares_weights_and_is_built_once(qwen3):
    first = cached_decoder(qwen3, "minimal", 8).model
    assert cached_decoder(qwen3, "minimal", 8).model is first
    assert first.embed_tokens.weight.data_ptr() == qwen3.model.embed_tokens.weight.data_ptr()
    assert "_workbook_minimal_view" not in dict(qwen3.named_modules())  # not registered as a submodule


def test_runtime_resolution(qwen3):
    assert minimal_supported(qwen3) and resolve_runtime("auto", qwen3) == "minimal"
    assert resolve_runtime("transformers", qwen3) == "transformers"
    with pytest.raises(ValueError, match="unknown runtime"):
        resolve_runtime("onnx", qwen3)
    with pytest.raises(ValueError, match="resolve the runtime"):
        cached_decoder(qwen3, "auto", 8)


@torch.inference_mode()
@pytest.mark.parametrize("last_only", [True, False])
def test_return_hidden_gives_the_lm_heads_input_in_both_runtimes(qwen3, last_only):
    """Medusa heads and a feature draft read the verify forward's hidden states: the final norm's output, the same
    in both runtimes, and the LM head of it is the logits."""
    ids = torch.randint(0, 50, (1, 9), generator=torch.Generator().manual_seed(2))
    got = {}
    for runtime in ("minimal", "transformers"):
        decoder = cached_decoder(qwen3, runtime, capacity=16)
        decoder.extend(ids[:, :4])
        logits, hidden = decoder.extend(ids[:, 4:], last_only=last_only, return_hidden=True)
        assert hidden.shape == (1, 1 if last_only else 5, 32)
        torch.testing.assert_close(qwen3.lm_head(hidden), logits, rtol=1e-4, atol=1e-4)
        got[runtime] = hidden
    torch.testing.assert_close(got["minimal"], got["transformers"], rtol=1e-4, atol=1e-4)
