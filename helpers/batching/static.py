"""The static-batching baseline: fixed batches in arrival order, padded to the longest prompt, kept together
until the slowest request is done (finished rows keep computing, as ``generate()`` on a padded batch does).
Same model, same forward passes as the continuous engine; only the scheduling differs."""
from __future__ import annotations

import time

import torch

from helpers.batching.model_ops import DecodeBatch, prefill
from helpers.batching.request import Request, State


def run_static(model, requests: list[Request], *, batch_size: int, max_seq_len: int,
               eos_token_id: int | None = None, threads: int | None = None) -> dict:
    """Serve ``requests`` (updated in place) with static batches; returns the per-step timeline and batches."""
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size} must be at least 1")
    for request in requests:
        request.check_length(max_seq_len)
    previous_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        return _serve(model, requests, batch_size, max_seq_len, eos_token_id)
    finally:
        torch.set_num_threads(previous_threads)


def _serve(model, requests, batch_size, max_seq_len, eos_token_id) -> dict:
    timeline, batches = [], []
    t0 = time.perf_counter()
    for start in range(0, len(requests), batch_size):
        batch_requests = requests[start:start + batch_size]
        t_start = time.perf_counter() - t0
        for request in batch_requests:
            request.advance(State.PREFILL)
            request.t_prefill_start = t_start
        first_tokens, kvs = prefill(model, batch_requests)
        t_first = time.perf_counter() - t0
        batches.append({"t_start": t_start, "t_end": t_first, "size": len(batch_requests),
                        "padded_len": max(r.prompt_len for r in batch_requests),
                        "prompt_tokens": sum(r.prompt_len for r in batch_requests)})
        output_len = {}  # request id -> its real output length, once it stopped
        for request, token in zip(batch_requests, first_tokens):
            request.advance(State.DECODE)
            request.t_first_token = t_first
            if request.add_token(token, eos_token_id=eos_token_id, max_seq_len=max_seq_len):
                request.t_last_token = t_first
                output_len[request.id] = len(request.generated)
        batch = DecodeBatch(model)
        batch.add(batch_requests, kvs)
        while len(output_len) < len(batch_requests):  # every row steps until the slowest is done
            tokens = batch.step()
            now = time.perf_counter() - t0
            timeline.append({"t": now, "rows": len(batch), "active": len(batch_requests) - len(output_len)})
            for request, token in zip(batch.requests, tokens):
                if request.id in output_len:
                    request.generated.append(token)  # a wasted row: feeds its next input, dropped below
                elif request.add_token(token, eos_token_id=eos_token_id, max_seq_len=max_seq_len):
                    request.t_last_token = now
                    output_len[request.id] = len(request.generated)
        t_done = time.perf_counter() - t0
        for request in batch_requests:
            del request.generated[output_len[request.id]:]
            request.advance(State.DONE)
            request.t_done = t_done  # the batch returns all outputs together
    return {"timeline": timeline, "batches": batches}
