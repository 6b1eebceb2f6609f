"""How every trained model starts: from a seed (:func:`make_model`), or from the target's own weights."""
from __future__ import annotations

import torch
import transformers

from helpers.models.cpu_pair_shapes import make_config


def make_model(shape: str, tokenizer, seed: int):
    """A randomly initialised ``Qwen3ForCausalLM`` of ``shape`` (:func:`~helpers.models.cpu_pair_shapes.make_config`),
    the same weights for the same seed."""
    torch.manual_seed(seed)
    config = make_config(shape, tokenizer)
    config._attn_implementation = "sdpa"
    return transformers.Qwen3ForCausalLM(config)


def init_from_target(draft, target) -> None:
    """Copy the target's embedding (tied LM head), final norm and first ``n`` layers into an ``n``-layer draft.

    The draft then starts out computing a truncated target (early exit after ``n`` layers), which distillation
    turns into a good predictor much faster than training from random weights.
    """
    if draft.config.hidden_size != target.config.hidden_size:
        raise ValueError(f"a draft initialised from the target needs its width ({target.config.hidden_size}), "
                         f"got {draft.config.hidden_size}")
    source = target.state_dict()  # the draft's layer i has the same parameter names as the target's layer i
    with torch.no_grad():
        for name, tensor in draft.state_dict().items():
            tensor.copy_(source[name])


def share_target_embedding(draft, target) -> None:
    """Give ``draft`` the target's embedding (its tied LM head too), frozen: distillation trains the rest."""
    with torch.no_grad():
        draft.model.embed_tokens.weight.copy_(target.model.embed_tokens.weight)
    draft.model.embed_tokens.weight.requires_grad_(False)
