"""Greedy generation with and without a KV cache on the minimal decoder (handout §2.2).

    model = from_hf(hf_model)                                   # same weights, no copy
    new_ids = generate(model, input_ids, max_new_tokens=64)     # greedy, with the cache
    same_ids = generate(model, input_ids, 64, use_cache=False)  # recomputes the prefix every step
"""
from __future__ import annotations

import torch

from helpers.models.kv_cache import KVCache
from helpers.models.decoder import MiniDecoder
from helpers.timing import Timer


@torch.inference_mode()
def generate(
    model: MiniDecoder,
    input_ids: torch.Tensor,
    max_new_tokens: int,
    use_cache: bool = True,
    return_logits: bool = False,
    step_times: list | None = None,
):
    """Greedy generation; returns the new token ids, shape (batch, max_new_tokens).

    With ``use_cache`` the prompt is prefilled once and each step feeds only the newest token; without it
    every step runs the whole sequence so far through the model. Both make exactly ``max_new_tokens``
    forward passes. ``return_logits=True`` also returns the logits that chose each token,
    shape (batch, max_new_tokens, vocab). ``step_times``: a list to which the wall-clock seconds of every
    forward pass are appended (prefill first; synchronised on CUDA), for per-step cost measurements.
    """
    if input_ids.dim() != 2 or input_ids.shape[1] == 0:
        raise ValueError(f"input_ids must have shape (batch, prompt_len) with prompt_len >= 1, got {tuple(input_ids.shape)}")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
    batch, prompt_len = input_ids.shape
    total_len = prompt_len + max_new_tokens
    if total_len > model.config.max_seq_len:
        raise ValueError(
            f"prompt ({prompt_len}) + max_new_tokens ({max_new_tokens}) = {total_len} tokens exceeds the model's "
            f"context limit of {model.config.max_seq_len}; shorten the prompt or max_new_tokens"
        )

    if step_times is not None:
        model = _StepTimer(model, step_times)
    new_tokens, step_logits = [], []
    if use_cache:
        cache = model.new_cache(batch, capacity=total_len)  # the last token's slot stays unused
        logits = model(input_ids, cache, last_only=True)[:, -1]  # prefill: the whole prompt once
    else:
        sequence = input_ids
        logits = model(sequence, last_only=True)[:, -1]
    for step in range(max_new_tokens):
        next_token = logits.argmax(dim=-1, keepdim=True)
        new_tokens.append(next_token)
        step_logits.append(logits)
        if step == max_new_tokens - 1:
            break
        if use_cache:
            logits = model(next_token, cache, last_only=True)[:, -1]  # decode: one token, cache grows by one
        else:
            sequence = torch.cat([sequence, next_token], dim=1)
            logits = model(sequence, last_only=True)[:, -1]  # the whole prefix, recomputed
    tokens = torch.cat(new_tokens, dim=1)
    return (tokens, torch.stack(step_logits, dim=1)) if return_logits else tokens


class _StepTimer:
    """Wraps a model for :func:`generate`: every call is timed (synchronised on CUDA) into ``times``."""

    def __init__(self, model: MiniDecoder, times: list):
        self.model, self.times = model, times

    def new_cache(self, *args, **kwargs) -> KVCache:
        return self.model.new_cache(*args, **kwargs)

    def __call__(self, *args, **kwargs):
        with Timer(self.model.embed_tokens.weight.device) as timer:
            out = self.model(*args, **kwargs)
        self.times.append(timer.seconds)
        return out
