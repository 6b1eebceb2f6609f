"""A minimal Qwen3 decoder with its own KV cache (handout §2.2).

The model is the Qwen3 architecture written out plainly: RMSNorm, rotary position embeddings (RoPE),
grouped-query attention with RMS-normalised queries and keys, and a SwiGLU MLP. Its parameter names mirror
transformers' ``Qwen3ForCausalLM`` (without the ``model.`` prefix), so :func:`from_hf` takes a real model's
weights as they are and reproduces its logits.

The cache (:class:`KVCache`) is allocated once per generation: for every layer one keys and one values
tensor of shape ``(batch, kv_heads, capacity, head_dim)`` plus ONE length pointer shared by all layers.
A forward pass writes its keys and values into the next free slots and attends over ``[0, length)``;
nothing grows with ``torch.cat``. Without a cache (``cache=None``) the same forward recomputes keys and
values for every token it is given, which is what generation without a cache has to do at every step.

    model = from_hf(hf_model)                                   # same weights, no copy
    new_ids = generate(model, input_ids, max_new_tokens=64)     # greedy, with the cache
    same_ids = generate(model, input_ids, 64, use_cache=False)  # recomputes the prefix every step

Batches are sequences of equal length (no padding).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class DecoderConfig:
    """The few numbers that define a Qwen3 decoder."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    max_seq_len: int  # context limit (transformers: max_position_embeddings)
    rope_theta: float = 1_000_000.0
    rms_norm_eps: float = 1e-6
    attention_bias: bool = False
    tie_word_embeddings: bool = False

    def __post_init__(self):
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads}) "
                "for grouped-query attention"
            )

    @classmethod
    def from_hf(cls, hf_config) -> "DecoderConfig":
        """Read a transformers ``Qwen3Config``; refuse features this minimal model does not implement."""
        if getattr(hf_config, "model_type", None) != "qwen3":
            raise ValueError(
                f"the minimal decoder implements the Qwen3 architecture, got model_type="
                f"{getattr(hf_config, 'model_type', None)!r}; load a Qwen3 model (e.g. the CPU pair's target)"
            )
        rope = getattr(hf_config, "rope_parameters", None) or {"rope_type": "default", "rope_theta": hf_config.rope_theta}
        if rope.get("rope_type", "default") != "default":
            raise ValueError(f"only plain RoPE is implemented, the config asks for rope_type={rope['rope_type']!r}")
        if "sliding_attention" in (getattr(hf_config, "layer_types", None) or []):
            raise ValueError("sliding-window layers are not implemented; use a config with use_sliding_window=False")
        if hf_config.hidden_act != "silu":
            raise ValueError(f"SwiGLU needs hidden_act='silu', the config has {hf_config.hidden_act!r}")
        return cls(
            vocab_size=hf_config.vocab_size,
            hidden_size=hf_config.hidden_size,
            intermediate_size=hf_config.intermediate_size,
            num_layers=hf_config.num_hidden_layers,
            num_heads=hf_config.num_attention_heads,
            num_kv_heads=hf_config.num_key_value_heads,
            head_dim=getattr(hf_config, "head_dim", None) or hf_config.hidden_size // hf_config.num_attention_heads,
            max_seq_len=hf_config.max_position_embeddings,
            rope_theta=float(rope["rope_theta"]),
            rms_norm_eps=hf_config.rms_norm_eps,
            attention_bias=bool(getattr(hf_config, "attention_bias", False)),
            tie_word_embeddings=bool(getattr(hf_config, "tie_word_embeddings", False)),
        )


class KVCache:
    """Preallocated keys and values for every layer, filled up to ``length``.

    ``keys[layer]`` and ``values[layer]`` have shape ``(batch, kv_heads, capacity, head_dim)``. Slots
    ``[0, length)`` hold the tokens seen so far; a forward pass writes the next ones in place, so appending
    never copies or reallocates and rolling back (speculative decoding) is just lowering ``length``. A decode
    step still grows slightly with ``length``: its attention reads all stored keys and values (the projections
    and the MLP, most of the work at short contexts, do not depend on it).
    """

    def __init__(self, config: DecoderConfig, batch_size: int, capacity: int, *, dtype: torch.dtype, device):
        if not 1 <= capacity <= config.max_seq_len:
            raise ValueError(
                f"cache capacity {capacity} must be between 1 and the model's context limit {config.max_seq_len}"
            )
        shape = (batch_size, config.num_kv_heads, capacity, config.head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.num_layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.num_layers)]
        self.length = 0

    @property
    def batch_size(self) -> int:
        return self.keys[0].shape[0]

    @property
    def capacity(self) -> int:
        return self.keys[0].shape[2]

    @property
    def nbytes(self) -> int:
        """Bytes allocated for keys and values (what ``helpers.memory.kv_cache_bytes`` predicts)."""
        return sum(t.numel() * t.element_size() for t in self.keys + self.values)

    def check_room(self, batch_size: int, new_tokens: int) -> None:
        if batch_size != self.batch_size:
            raise ValueError(f"the cache was allocated for batch size {self.batch_size}, got a batch of {batch_size}")
        if self.length + new_tokens > self.capacity:
            raise ValueError(
                f"the cache holds {self.capacity} tokens: {self.length} stored + {new_tokens} new do not fit; "
                "allocate a larger cache (capacity = prompt length + max_new_tokens)"
            )

    def update(self, layer: int, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store this chunk's keys/values after the ``length`` tokens already stored; return all of them.

        ``length`` itself moves once per forward pass (:meth:`advance`), after every layer has written.
        """
        end = self.length + keys.shape[2]
        self.keys[layer][:, :, self.length : end] = keys
        self.values[layer][:, :, self.length : end] = values
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]

    def advance(self, new_tokens: int) -> None:
        self.length += new_tokens

    def crop(self, length: int) -> None:
        """Forget every token from position ``length`` on (no data moves; later writes overwrite them)."""
        if not 0 <= length <= self.length:
            raise ValueError(f"can crop to a length in [0, {self.length}], got {length}")
        self.length = length


class RMSNorm(nn.Module):
    """x / rms(x) * weight, computed in fp32 like transformers so that bf16 results agree too."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


def rope_cos_sin(positions: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype):
    """cos and sin of RoPE's angles for the given absolute positions: shape (len(positions), head_dim)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float, device=positions.device) / head_dim))
    angles = positions.float()[:, None] * inv_freq[None, :]
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x_i, x_{i+d/2}) of every head by the angle of the token's position."""
    first, second = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-second, first), dim=-1) * sin


class Attention(nn.Module):
    """Grouped-query attention with per-head RMSNorm on queries and keys (the Qwen3 recipe)."""

    def __init__(self, config: DecoderConfig, layer_idx: int):
        super().__init__()
        self.layer_idx = layer_idx
        self.num_heads, self.num_kv_heads, self.head_dim = config.num_heads, config.num_kv_heads, config.head_dim
        bias = config.attention_bias
        self.q_proj = nn.Linear(config.hidden_size, config.num_heads * config.head_dim, bias=bias)
        self.k_proj = nn.Linear(config.hidden_size, config.num_kv_heads * config.head_dim, bias=bias)
        self.v_proj = nn.Linear(config.hidden_size, config.num_kv_heads * config.head_dim, bias=bias)
        self.o_proj = nn.Linear(config.num_heads * config.head_dim, config.hidden_size, bias=bias)
        self.q_norm = RMSNorm(config.head_dim, config.rms_norm_eps)
        self.k_norm = RMSNorm(config.head_dim, config.rms_norm_eps)

    def forward(self, x, cos, sin, mask, cache: KVCache | None):
        batch, seq, _ = x.shape
        # (batch, seq, heads * head_dim) -> (batch, heads, seq, head_dim)
        q = self.q_norm(self.q_proj(x).view(batch, seq, self.num_heads, self.head_dim)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(batch, seq, self.num_kv_heads, self.head_dim)).transpose(1, 2)
        v = self.v_proj(x).view(batch, seq, self.num_kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)

        if cache is None:
            # Without a cache: x holds the whole sequence, so k and v are (re)computed for all of it.
            keys, values = k, v
        else:
            # With a cache: x holds only the new tokens; store their k, v and attend over everything stored.
            keys, values = cache.update(self.layer_idx, k, v)

        # enable_gqa: each of the num_kv_heads key/value heads serves num_heads / num_kv_heads query heads.
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=True)
        return self.o_proj(out.transpose(1, 2).reshape(batch, seq, self.num_heads * self.head_dim))


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, config: DecoderConfig):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """Pre-norm block: x + attention(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, config: DecoderConfig, layer_idx: int):
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Attention(config, layer_idx)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MLP(config)

    def forward(self, x, cos, sin, mask, cache):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, cache)
        return x + self.mlp(self.post_attention_layernorm(x))


class MiniQwen3(nn.Module):
    """The whole decoder: embeddings, layers, final norm, LM head."""

    def __init__(self, config: DecoderConfig):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config, i) for i in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight

    def new_cache(self, batch_size: int, capacity: int) -> KVCache:
        """An empty cache for ``batch_size`` sequences of up to ``capacity`` tokens, on the model's device."""
        weight = self.embed_tokens.weight
        return KVCache(self.config, batch_size, capacity, dtype=weight.dtype, device=weight.device)

    def forward(self, input_ids: torch.Tensor, cache: KVCache | None = None, last_only: bool = False) -> torch.Tensor:
        """Logits for ``input_ids`` (batch, seq), placed after the ``cache.length`` tokens already cached.

        Prefill is a call with the prompt, a decode step a call with one token per sequence; both extend
        the cache. ``last_only`` returns only the last position's logits (all that generation needs).
        """
        batch, seq = input_ids.shape
        start = cache.length if cache is not None else 0
        end = start + seq
        if end > self.config.max_seq_len:
            raise ValueError(
                f"position {end - 1} is past the model's context limit of {self.config.max_seq_len} tokens "
                f"({start} cached + {seq} new); shorten the prompt or max_new_tokens"
            )
        if cache is not None:
            cache.check_room(batch, seq)

        positions = torch.arange(start, end, device=input_ids.device)
        cos, sin = rope_cos_sin(positions, self.config.head_dim, self.config.rope_theta, self.embed_tokens.weight.dtype)
        # Token at position p may attend to positions <= p. A single new token may attend to all of them.
        mask = None if seq == 1 else positions[:, None] >= torch.arange(end, device=input_ids.device)[None, :]

        x = self.embed_tokens(input_ids)
        for layer in self.layers:
            x = layer(x, cos, sin, mask, cache)
        if cache is not None:
            cache.advance(seq)
        if last_only:
            x = x[:, -1:]
        return self.lm_head(self.norm(x))


def from_hf(hf_model) -> MiniQwen3:
    """The minimal decoder holding the SAME weight tensors as a transformers ``Qwen3ForCausalLM`` (no copy).

    Dtype and device follow the transformers model.
    """
    config = DecoderConfig.from_hf(hf_model.config)
    with torch.device("meta"):
        model = MiniQwen3(config)
    state = {name.removeprefix("model."): tensor for name, tensor in hf_model.state_dict().items()}
    model.load_state_dict(state, strict=True, assign=True)
    if config.tie_word_embeddings:  # assign=True replaced the tied Parameter: tie again
        model.lm_head.weight = model.embed_tokens.weight
    return model.eval()


@torch.inference_mode()
def generate(
    model: MiniQwen3,
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

    def __init__(self, model: MiniQwen3, times: list):
        self.model, self.times = model, times
        self.cuda = model.embed_tokens.weight.device.type == "cuda"

    def new_cache(self, *args, **kwargs) -> KVCache:
        return self.model.new_cache(*args, **kwargs)

    def __call__(self, *args, **kwargs):
        import time

        if self.cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        out = self.model(*args, **kwargs)
        if self.cuda:
            torch.cuda.synchronize()
        self.times.append(time.perf_counter() - start)
        return out
