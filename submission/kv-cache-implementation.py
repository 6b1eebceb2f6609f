# Name / Andrew ID: <your name> / <your Andrew ID>
"""A minimal transformer decoder with a KV cache (handout §2.2), behind the starter file's interface.

    python submission/kv-cache-implementation.py                      # CPU pair target, offline
    python submission/kv-cache-implementation.py --max-new-tokens 64 --prompt "def parse(text):"
    python submission/kv-cache-implementation.py --model Qwen/Qwen3-0.6B --device cuda   # a real Qwen3 (Hub)

It generates greedily with and without the cache, checks that both give the same tokens, and prints both times.
(``kv_cache_implementation.py`` next to this file is the same module under an importable name.)

The decoder is the workbook's :mod:`helpers.kv_cache`: the Qwen3 architecture written out plainly (RMSNorm,
RoPE, grouped-query attention with normalised queries and keys, SwiGLU), sharing a transformers model's weights
(:func:`helpers.kv_cache.from_hf`). The places where the starter code leaves work are marked with the starter's
TODO lines, kept intact: the cache itself (TODO 1), attention writing and reading it (TODO 2), and generation
with and without it (TODO 3). TODO 1 and 2 are answered by the workbook's classes, named at each TODO; TODO 3
is written out here.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

from helpers import kv_cache as workbook
from helpers.kv_cache import MiniQwen3, from_hf

DEFAULT_MODEL = "cpu-pair/target"


# ============================================================================ TODO 1: the cache

# TODO: implement the KV cache: for every layer, storage for the keys and values of every token seen so far
#   -> helpers.kv_cache.KVCache: ONE allocation per generation, keys[layer] and values[layer] of shape
#      (batch, kv_heads, capacity, head_dim), and one `length` pointer shared by all layers. Nothing grows with
#      torch.cat, so a decode step costs the same at any length.
KVCache = workbook.KVCache


def new_cache(model: MiniQwen3, batch_size: int, capacity: int) -> KVCache:
    """An empty cache for ``batch_size`` sequences of up to ``capacity`` tokens (prompt + new tokens)."""
    return model.new_cache(batch_size, capacity)


# ============================================================================ TODO 2: attention uses the cache

# TODO: in attention, store the new tokens' keys and values in the cache and attend over all cached tokens
#   -> helpers.kv_cache.Attention.forward: with a cache, `keys, values = cache.update(self.layer_idx, k, v)`
#      writes this chunk's k, v after the `length` tokens already stored and returns all of them; without a
#      cache the keys and values of the whole sequence are recomputed. The query of the new token(s) attends
#      over positions [0, length + new); RoPE uses the tokens' absolute positions (length onwards).
# TODO: advance the cache's length once per forward pass, after every layer has written
#   -> helpers.kv_cache.MiniQwen3.forward: `cache.advance(seq)` after the layer loop
Attention = workbook.Attention


# ============================================================================ TODO 3: generation

@torch.inference_mode()
def generate(model: MiniQwen3, input_ids: torch.Tensor, max_new_tokens: int, use_cache: bool = True) -> torch.Tensor:
    """Greedy generation: the new token ids, shape (batch, max_new_tokens); ``max_new_tokens`` forward passes."""
    if input_ids.dim() != 2 or input_ids.shape[1] == 0:
        raise ValueError(f"input_ids must have shape (batch, prompt_len) with prompt_len >= 1, got {tuple(input_ids.shape)}")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
    batch, prompt_len = input_ids.shape
    new_tokens = []
    if use_cache:
        # TODO: prefill: run the whole prompt through the model once, filling the cache
        cache = new_cache(model, batch, capacity=prompt_len + max_new_tokens)
        logits = model(input_ids, cache, last_only=True)[:, -1]
    else:
        sequence = input_ids
        logits = model(sequence, last_only=True)[:, -1]
    for step in range(max_new_tokens):
        next_token = logits.argmax(dim=-1, keepdim=True)
        new_tokens.append(next_token)
        if step == max_new_tokens - 1:
            break
        if use_cache:
            # TODO: decode step: feed ONLY the newest token; its keys and values join the cache
            logits = model(next_token, cache, last_only=True)[:, -1]
        else:
            # without a cache: the whole sequence so far goes through the model again
            sequence = torch.cat([sequence, next_token], dim=1)
            logits = model(sequence, last_only=True)[:, -1]
    return torch.cat(new_tokens, dim=1)


# ============================================================================ provided: loading and the check

def load(name: str = DEFAULT_MODEL, device="auto", dtype: torch.dtype | None = None):
    """``(MiniQwen3, tokenizer)`` from a helpers.models name of a Qwen3 model (same weights, no copy)."""
    from helpers.models import load_model

    hf_model, tokenizer = load_model(name, device=device, dtype=dtype)
    if tokenizer is None:
        raise ValueError(f"{name!r} has random weights and no tokenizer; use {DEFAULT_MODEL!r} or a Qwen3 model id")
    return from_hf(hf_model), tokenizer


def compare(model: MiniQwen3, input_ids: torch.Tensor, max_new_tokens: int) -> dict:
    """Generate with and without the cache; time both (helpers.timing.Timer) and compare the tokens."""
    from helpers.timing import Timer

    device = input_ids.device
    generate(model, input_ids, 2)  # warm-up, not timed
    with Timer(device) as cached_time:
        cached = generate(model, input_ids, max_new_tokens, use_cache=True)
    with Timer(device) as uncached_time:
        uncached = generate(model, input_ids, max_new_tokens, use_cache=False)
    return {"cached": cached, "uncached": uncached, "identical": torch.equal(cached, uncached),
            "cached_s": cached_time.seconds, "uncached_s": uncached_time.seconds}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description="Greedy generation with and without a KV cache (handout §2.2).")
    parser.add_argument("--model", default=DEFAULT_MODEL, help="a Qwen3 model (helpers.models name)")
    parser.add_argument("--device", default="auto", help="'cpu', 'cuda' or 'auto'")
    parser.add_argument("--prompt", default=None, help="prompt text (default: the first of prompts.jsonl)")
    parser.add_argument("--max-new-tokens", type=int, default=32, help="new tokens")
    args = parser.parse_args(argv)

    torch.manual_seed(42)
    model, tokenizer = load(args.model, args.device)
    if args.prompt is None:
        from submission.make_prompts import read_prompts

        args.prompt = read_prompts()[0]["prompt"]
    input_ids = tokenizer(args.prompt, return_tensors="pt")["input_ids"].to(model.embed_tokens.weight.device)
    out = compare(model, input_ids, args.max_new_tokens)
    print(args.prompt + tokenizer.decode(out["cached"][0]))
    print(f"\n{args.max_new_tokens} new tokens: with cache {out['cached_s']:.3f} s, without {out['uncached_s']:.3f} s; "
          f"identical tokens: {out['identical']}")
    if not out["identical"]:
        raise SystemExit("cached and uncached generation differ: the cache is wrong")
    return out


if __name__ == "__main__":
    main()
