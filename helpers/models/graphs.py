"""Compiled verify steps: several tokens per row (a speculative round's gamma drafts + 1) through the compiled graph
of :meth:`helpers.models.qwen3.MiniQwen3.compile_decode`, over a static-shape cache.

``compile_decode`` compiles the model's ``_step``, which writes keys and values through a slot tensor and attends
over the whole static buffer through a mask, so nothing in it depends on how many tokens are stored: a call with k
tokens per row is one more graph (one per k; ``dynamic=False``), on CUDA with ``mode="reduce-overhead"`` captured
as a CUDA graph. ``MiniQwen3.forward`` sends only one-token calls there; :func:`compiled_forward` sends a block of
tokens, so the target's verify step runs as a graph too (issue 15: at batch 1 an eager forward is launch-bound).
"""
from __future__ import annotations

import torch

from helpers.models.qwen3 import KVCache, MiniQwen3


@torch.no_grad()
def compiled_forward(model: MiniQwen3, input_ids: torch.Tensor, cache: KVCache, *, last_only: bool = False):
    """Logits of ``input_ids`` (batch, k) after what ``cache`` holds, through ``model.compiled_step``; the same
    numbers as ``model(input_ids, cache, last_only=last_only)`` (causal among the k new tokens, each row at its own
    next positions, padding respected). The cache must be static-shape (``new_cache(..., static_shapes=True)``)."""
    if model.compiled_step is None:
        raise ValueError("compiled_forward needs model.compile_decode() first (it reuses the compiled step)")
    if not cache.static_shapes:
        raise ValueError("compiled_forward needs a static-shape cache: model.new_cache(batch, capacity, "
                         "static_shapes=True)")
    batch, seq = input_ids.shape
    cache.check_room(batch, seq)
    if cache.next_position_bound() + seq > model.config.max_seq_len:
        raise ValueError(f"position {cache.next_position_bound() + seq - 1} is past the model's context limit of "
                         f"{model.config.max_seq_len} tokens")
    device = input_ids.device
    steps = torch.arange(seq, device=device)
    positions = cache.positions()[:, None] + steps  # (batch, k): each row's next positions
    cos, sin = model.rotary(positions, cache.capacity, model.embed_tokens.weight.dtype)
    mask = cache.attention_mask(seq, None)  # (batch, 1, k, capacity): stored slots + causal among the new
    slots = cache.lengths_tensor()[:, None] + steps
    if device.type == "cuda":
        torch.compiler.cudagraph_mark_step_begin()  # a new step: the previous outputs may be overwritten
    logits = model.compiled_step(input_ids, cos[:, None], sin[:, None], mask, (cache.keys, cache.values), slots)
    cache.advance(seq)
    if device.type == "cuda":
        logits = logits.clone()  # a CUDA graph's output buffer is reused by its next replay
    return logits[:, -1:] if last_only else logits
