"""The tiny random Qwen3 models the unit tests build (no download, built in milliseconds).

One factory for every test file: each file passes the sizes it needs as Qwen3Config overrides, so a file's
models are exactly what they were when each file built its own (same config, same seed, same weights).
Importable from any test module (pytest puts ``tests/`` on the path because of ``conftest.py``).
"""
from __future__ import annotations

import copy

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from helpers.results import run_metadata

PEAK = 10.0  # an LM-head scale that makes next-token distributions peaked rather than nearly uniform
DEFAULTS = dict(
    vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
)


def tiny_qwen3(seed: int = 0, tie: bool = False, *, head_scale: float | None = None,
               **overrides) -> Qwen3ForCausalLM:
    """A random Qwen3 with GQA (4 query heads, 2 KV heads by default), in eval mode, float32.

    ``overrides`` are Qwen3Config fields (``vocab_size=97``, ``num_hidden_layers=1``, ...). ``head_scale``
    multiplies the (untied) LM head so the top logits are far apart: float noise between two code paths
    (batched vs single sequence, different reduction orders) then cannot flip a greedy choice. A large
    ``initializer_range`` does the same for every layer.
    """
    if head_scale is not None and tie:
        raise ValueError("head_scale would also scale the tied input embeddings")
    settings = {**DEFAULTS, "tie_word_embeddings": tie, **overrides}
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(Qwen3Config(**settings)).eval()
    if head_scale is not None:
        with torch.no_grad():
            model.lm_head.weight.mul_(head_scale)
    return model


def perturbed_copy(model, scale: float, seed: int = 1, relative: bool = False):
    """A draft that agrees with ``model`` only partly: a deep copy with Gaussian noise on every weight.

    The noise has standard deviation ``scale``, or ``scale`` times each tensor's own standard deviation
    (floored at 1e-3) when ``relative``.
    """
    draft = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in draft.parameters():
            noise = torch.randn(param.shape, generator=generator).to(param.dtype) * scale
            if relative:
                noise = noise * param.std().clamp_min(1e-3)
            param.add_(noise)
    return draft


# Prompts of four different lengths (7, 2, 4, 11 tokens; ids below 64): a ragged batch for batched decoding.
RAGGED_PROMPTS = [[5, 17, 3, 9, 22, 41, 7], [8, 2], [60, 61, 62, 63], [11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21]]


def tiny_meta(seed: int = 0) -> dict:
    """Result-row metadata for a tiny random model on the CPU."""
    return run_metadata(model_id="tiny", weights="random", dtype=torch.float32, device="cpu", seed=seed)


# One tiny random model of every family the model file implements (and each variant that changes its code path):
# Llama 3 with its scaled RoPE tied and untied, Llama 2 (full multi-head attention, plain RoPE), OLMo (LayerNorm
# without parameters, clip_qkv) and Qwen3. ``original_max_position_embeddings`` is small so that Llama 3's
# scaling bends frequencies at these short lengths too.
LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 32}
FAMILIES = {
    "qwen3": ("Qwen3", dict(num_key_value_heads=2)),
    "llama3": ("Llama", dict(num_key_value_heads=2, rope_parameters=LLAMA3_ROPE)),
    "llama3-tied": ("Llama", dict(num_key_value_heads=2, rope_parameters=LLAMA3_ROPE, tie_word_embeddings=True)),
    "llama2": ("Llama", dict(num_key_value_heads=4, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    "olmo": ("Olmo", dict(num_key_value_heads=4, clip_qkv=0.1, pad_token_id=1, eos_token_id=None)),
}


def tiny_family(family: str, seed: int = 0, *, head_scale: float | None = PEAK, **overrides):
    """A tiny random causal LM of ``family`` (a key of :data:`FAMILIES`), float32, eval mode; ``head_scale`` as for
    :func:`tiny_qwen3` (with tied embeddings it scales the input embeddings too, which the first norm undoes)."""
    import transformers

    prefix, settings = FAMILIES[family]
    settings = {**DEFAULTS, "num_hidden_layers": 2, "bos_token_id": None, "eos_token_id": None, **settings,
                **overrides}
    torch.manual_seed(seed)
    config = getattr(transformers, f"{prefix}Config")(**settings)
    model = getattr(transformers, f"{prefix}ForCausalLM")(config).eval()
    if head_scale is not None:
        with torch.no_grad():
            model.get_output_embeddings().weight.mul_(head_scale)
    return model
