# Name / Andrew ID: Test Student / tests
# (the name and Andrew ID the handout is issued to; a student handing these files in puts their own here)
"""A minimal transformer decoder with a KV cache, and greedy generation with and without it (handout section 2.2).

    python submission/kv-cache-implementation.py                      # CPU pair target, offline
    python submission/kv-cache-implementation.py --max-new-tokens 64 --prompt "def parse(text):"
    python submission/kv-cache-implementation.py --model Qwen/Qwen3-0.6B --device cuda   # a real Qwen3 (Hub)

Run as a script, it generates greedily with and without the cache, checks that both give the same tokens, and
prints both times. (``kv_cache_implementation.py`` next to this file is the same module under an importable name.)

Everything the KV cache needs is written out in this file:

* the decoder: the Qwen3 architecture (RMSNorm, rotary position embeddings, grouped-query attention with
  RMS-normalised queries and keys, a SwiGLU MLP), built around the weight tensors of a transformers
  ``Qwen3ForCausalLM`` (the same tensors, not a copy);
* TODO 1, :class:`KVCache`: for every layer, ONE preallocated keys tensor and ONE values tensor of shape
  ``(batch, kv_heads, capacity, head_dim)``, and one ``length`` pointer shared by all layers. Nothing grows
  with ``torch.cat``, so appending a token never copies the cache (a decode step still reads every stored key
  and value, so it grows slowly with length: notebook 04 measures how much);
* TODO 2, :meth:`Attention.forward`: with a cache, the new tokens' keys and values are written into it and the
  queries attend over everything stored; without one, keys and values are computed for the whole sequence;
* TODO 3, :func:`generate`: prefill once and feed one token per step with the cache; rerun the whole sequence at
  every step without it.

Only *loading* a transformers model and its tokenizer comes from the workbook (``load_hf``: the CPU pair's
trained weights from ``data/cpu_pair``, or a Hub id). Batches are supported when all prompts have the same length
(no padding). ``tests/test_submission.py`` checks this file against the workbook's own decoder
(``helpers.kv_cache``): the same logits up to rounding, the same cache contents, and the same tokens, token for
token, with and without the cache.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

DEFAULT_MODEL = "cpu-pair/target"


# ============================================================================ TODO 1: the cache

# TODO: implement the KV cache: for every layer, storage for the keys and values of every token seen so far
class KVCache:
    """Keys and values of every layer for the tokens seen so far, allocated once for ``capacity`` tokens.

    ``keys[layer]`` and ``values[layer]`` have shape ``(batch, kv_heads, capacity, head_dim)``; slots
    ``[0, length)`` hold the tokens seen so far (the same number in every row and every layer). A forward pass
    writes its new tokens into slots ``[length, length + new)`` of every layer (:meth:`update`) and then moves
    ``length`` on once (:meth:`advance`).
    """

    def __init__(self, num_layers: int, batch_size: int, kv_heads: int, head_dim: int, capacity: int, *,
                 dtype: torch.dtype, device):
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1 token, got {capacity}")
        shape = (batch_size, kv_heads, capacity, head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.length = 0  # tokens stored

    @property
    def capacity(self) -> int:
        return self.keys[0].shape[2]

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store the new tokens' ``k`` and ``v`` (batch, kv_heads, new, head_dim) after the ``length`` stored ones;
        return this layer's keys and values of ALL tokens, stored and new: (batch, kv_heads, length + new, head_dim)."""
        start, end = self.length, self.length + k.shape[2]
        if end > self.capacity:
            raise ValueError(f"the cache holds {self.capacity} tokens: {self.length} stored + {k.shape[2]} new do not "
                             "fit; allocate capacity = prompt length + max_new_tokens")
        self.keys[layer][:, :, start:end] = k  # written in place: no reallocation, no copy of the old tokens
        self.values[layer][:, :, start:end] = v
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]

    def advance(self, new_tokens: int) -> None:
        """Called once per forward pass, after every layer has written its ``new_tokens`` keys and values."""
        self.length += new_tokens


# ============================================================================ the decoder (Qwen3)

class RMSNorm(nn.Module):
    """x / rms(x) * weight, computed in float32 (as transformers does, so that bf16 models agree too)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


def rope_cos_sin(positions: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype):
    """cos and sin of the rotary angles of the given absolute positions: shape (len(positions), head_dim)."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float, device=positions.device) / head_dim)
    angles = positions.float()[:, None] * inv_freq[None, :]
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the pairs (x_i, x_{i + head_dim/2}) of every head by the angle of the token's position."""
    first, second = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-second, first), dim=-1) * sin


class Attention(nn.Module):
    """Grouped-query attention: ``num_heads`` query heads share ``num_kv_heads`` key/value heads."""

    def __init__(self, cfg, layer_idx: int):
        super().__init__()
        self.layer_idx = layer_idx
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        bias = bool(getattr(cfg, "attention_bias", False))
        self.q_proj = nn.Linear(cfg.hidden_size, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(cfg.hidden_size, self.num_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(cfg.hidden_size, self.num_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, cfg.hidden_size, bias=bias)
        self.q_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: KVCache | None) -> torch.Tensor:
        """``x``: (batch, seq, hidden), the tokens of this forward pass; ``cos``/``sin``: their positions' angles."""
        batch, seq, _ = x.shape
        # (batch, seq, heads * head_dim) -> (batch, heads, seq, head_dim)
        q = self.q_norm(self.q_proj(x).view(batch, seq, self.num_heads, self.head_dim)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(batch, seq, self.num_kv_heads, self.head_dim)).transpose(1, 2)
        v = self.v_proj(x).view(batch, seq, self.num_kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)

        # TODO: in attention, store the new tokens' keys and values in the cache and attend over all cached tokens
        if cache is not None:
            # x holds only the new tokens: keep their k, v and attend over every token stored so far
            k, v = cache.update(self.layer_idx, k, v)
        # else: x holds the whole sequence, so k and v were just (re)computed for all of it

        # query i of this pass sits at position (total - seq + i) and sees keys 0 .. that position (causal)
        total = k.shape[2]
        mask = None if seq == 1 else torch.ones(seq, total, dtype=torch.bool, device=x.device).tril(total - seq)
        group = self.num_heads // self.num_kv_heads  # query heads per key/value head
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.o_proj(out.transpose(1, 2).reshape(batch, seq, self.num_heads * self.head_dim))


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, cfg):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """Pre-norm block: x + attention(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, cfg, layer_idx: int):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg, layer_idx)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, cache):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, cache)
        return x + self.mlp(self.post_attention_layernorm(x))


class MiniQwen3(nn.Module):
    """Embeddings, decoder layers, final norm and LM head; parameter names as in transformers' Qwen3 (without
    its ``model.`` prefix), so :meth:`from_hf` takes a transformers model's weights as they are."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        rope = getattr(cfg, "rope_parameters", None) or {"rope_theta": cfg.rope_theta}
        self.rope_theta = float(rope["rope_theta"])
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg, i) for i in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    @classmethod
    def from_hf(cls, hf_model) -> "MiniQwen3":
        """The decoder holding the SAME weight tensors as a transformers ``Qwen3ForCausalLM`` (no copy)."""
        cfg = hf_model.config
        if getattr(cfg, "model_type", None) != "qwen3":
            raise ValueError(f"this decoder implements Qwen3, got model_type={getattr(cfg, 'model_type', None)!r}")
        with torch.device("meta"):  # no memory until the real tensors are assigned
            model = cls(cfg)
        state = {name.removeprefix("model."): tensor for name, tensor in hf_model.state_dict().items()}
        model.load_state_dict(state, strict=True, assign=True)
        if getattr(cfg, "tie_word_embeddings", False):  # assign=True replaced the tied parameter: tie again
            model.lm_head.weight = model.embed_tokens.weight
        return model.eval()

    def new_cache(self, batch_size: int, capacity: int) -> KVCache:
        """An empty cache for ``batch_size`` sequences of up to ``capacity`` tokens (prompt + new tokens)."""
        weight = self.embed_tokens.weight
        return KVCache(self.cfg.num_hidden_layers, batch_size, self.cfg.num_key_value_heads, self.cfg.head_dim,
                       capacity, dtype=weight.dtype, device=weight.device)

    def forward(self, input_ids: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        """Logits of the LAST position, shape (batch, vocab), for ``input_ids`` (batch, seq).

        With a cache, ``input_ids`` are the tokens after those already stored (the prompt at prefill, one token
        per decode step) and they are stored too. Without one, ``input_ids`` must be the whole sequence.
        """
        seq = input_ids.shape[1]
        start = cache.length if cache is not None else 0
        if start + seq > self.cfg.max_position_embeddings:
            raise ValueError(f"{start + seq} tokens exceed the model's context of {self.cfg.max_position_embeddings}")
        positions = torch.arange(start, start + seq, device=input_ids.device)  # absolute positions, for RoPE
        cos, sin = rope_cos_sin(positions, self.cfg.head_dim, self.rope_theta, self.embed_tokens.weight.dtype)
        x = self.embed_tokens(input_ids)
        for layer in self.layers:
            x = layer(x, cos, sin, cache)
        # TODO: advance the cache's length once per forward pass, after every layer has written
        if cache is not None:
            cache.advance(seq)
        return self.lm_head(self.norm(x[:, -1]))


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
        cache = model.new_cache(batch, capacity=prompt_len + max_new_tokens)
        logits = model(input_ids, cache)
    else:
        sequence = input_ids
        logits = model(sequence)
    for step in range(max_new_tokens):
        next_token = logits.argmax(dim=-1, keepdim=True)  # (batch, 1)
        new_tokens.append(next_token)
        if step == max_new_tokens - 1:
            break
        if use_cache:
            # TODO: decode step: feed ONLY the newest token; its keys and values join the cache
            logits = model(next_token, cache)
        else:
            # without a cache: the whole sequence so far goes through the model again
            sequence = torch.cat([sequence, next_token], dim=1)
            logits = model(sequence)
    return torch.cat(new_tokens, dim=1)


# ============================================================================ provided: loading and the check

def load_hf(name: str = DEFAULT_MODEL, device="auto", dtype: torch.dtype | None = None):
    """``(transformers model, tokenizer)`` of a Qwen3 model named as in the workbook's ``helpers.models``."""
    if str(Path(__file__).resolve().parent.parent) not in sys.path:  # run as a file: make the repository importable
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from helpers.models import load_model

    hf_model, tokenizer = load_model(name, device=device, dtype=dtype)
    if tokenizer is None:
        raise ValueError(f"{name!r} has random weights and no tokenizer; use {DEFAULT_MODEL!r} or a Qwen3 model id")
    return hf_model, tokenizer


def load(name: str = DEFAULT_MODEL, device="auto", dtype: torch.dtype | None = None):
    """``(MiniQwen3, tokenizer)``: this file's decoder over the weights of ``name``."""
    hf_model, tokenizer = load_hf(name, device, dtype)
    return MiniQwen3.from_hf(hf_model), tokenizer


def _timed(fn, device: torch.device):
    """``(fn(), wall-clock seconds)``, synchronised on CUDA so that the GPU's work is inside the interval."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    out = fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return out, time.perf_counter() - start


def compare(model: MiniQwen3, input_ids: torch.Tensor, max_new_tokens: int) -> dict:
    """Generate with and without the cache (after an untimed warm-up); time both and compare the tokens."""
    device = input_ids.device
    generate(model, input_ids, 2)  # warm-up, not timed
    generate(model, input_ids, 2, use_cache=False)
    cached, cached_s = _timed(lambda: generate(model, input_ids, max_new_tokens, use_cache=True), device)
    uncached, uncached_s = _timed(lambda: generate(model, input_ids, max_new_tokens, use_cache=False), device)
    return {"cached": cached, "uncached": uncached, "identical": torch.equal(cached, uncached),
            "cached_s": cached_s, "uncached_s": uncached_s}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description="Greedy generation with and without a KV cache (handout section 2.2).")
    parser.add_argument("--model", default=DEFAULT_MODEL, help="a Qwen3 model (helpers.models name)")
    parser.add_argument("--device", default="auto", help="'cpu', 'cuda' or 'auto'")
    parser.add_argument("--prompt", default=None,
                        help="prompt text (default: the first of the workbook's stand-in prompts.jsonl)")
    parser.add_argument("--max-new-tokens", type=int, default=32, help="new tokens")
    args = parser.parse_args(argv)

    torch.manual_seed(42)
    model, tokenizer = load(args.model, args.device)
    if args.prompt is None:
        first = (Path(__file__).resolve().parent / "prompts.jsonl").read_text(encoding="utf-8").splitlines()[0]
        args.prompt = json.loads(first)["prompt"]
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
