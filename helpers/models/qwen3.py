"""The workbook's one model file: a minimal Qwen3 decoder, reading and writing a preallocated KV cache.

The model is the Qwen3 architecture written out plainly: its config (:class:`DecoderConfig`), RMSNorm, rotary
position embeddings (RoPE), grouped-query attention with RMS-normalised queries and keys, a SwiGLU MLP, the
decoder (:class:`MiniQwen3`) and loading from transformers (:func:`from_hf`). Its parameter names mirror
transformers' ``Qwen3ForCausalLM`` (without the ``model.`` prefix), so :func:`from_hf` takes a real model's
weights as they are (no copy) and reproduces its logits.

The cache lives in :mod:`helpers.models.kv_cache` (:class:`~helpers.models.kv_cache.KVCache`, re-exported here):
one keys and one values buffer per layer, each row at its own fill level, so one cache serves a single sequence,
a ragged left-padded batch, per-row rollback and a token tree verified in one forward. A forward pass writes the
new tokens' keys and values into each row's next free slots and attends over the stored ones through the
cache's boolean mask. With ``cache.static_shapes`` the attention always spans the whole buffer (the same tensor
shapes at every decode step, which ``torch.compile`` and CUDA graphs need). Without a cache (``cache=None``) the
forward recomputes keys and values for every token it is given, which is what generation without a cache has
to do at every step.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from helpers.models.decoder_config import DecoderConfig
from helpers.models.kv_cache import KVCache

__all__ = ["Attention", "DecoderConfig", "DecoderLayer", "KVCache", "LAYER_KERNELS", "MLP", "MiniQwen3", "RMSNorm",
           "Rotary", "apply_rope", "attention_bias", "from_hf", "rope_cos_sin"]


# ------------------------------------------------------------------------------------------------ the model


class RMSNorm(nn.Module):
    """x / rms(x) * weight, rounded like transformers (the normalised x in fp32, cast to x's dtype, then times the
    weight), so that bf16 results agree too. ``F.rms_norm`` normalises in one fused kernel on a GPU where the
    written-out formula took seven, and an eager decode step there is bound by its kernel count."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * F.rms_norm(x, (x.shape[-1],), eps=self.eps)


class Rotary:
    """cos/sin tables of RoPE's angles, computed once up to the longest position seen (grown by doubling). The sin
    table has its first half negated, as :func:`apply_rope` takes it."""

    def __init__(self, head_dim: int, theta: float):
        self.head_dim, self.theta = head_dim, theta
        self.cos = self.sin = None

    def __call__(self, positions: torch.Tensor, end: int, dtype: torch.dtype):
        """cos and signed sin for ``positions`` (any shape, all below ``end``): shape ``positions.shape + (head_dim,)``."""
        if self.cos is None or self.cos.shape[0] < end or self.cos.dtype != dtype or self.cos.device != positions.device:
            size = max(end, 2 * self.cos.shape[0] if self.cos is not None else 256)
            self.cos, sin = rope_cos_sin(torch.arange(size, device=positions.device), self.head_dim, self.theta,
                                         dtype)
            self.sin = torch.cat((-sin[:, :self.head_dim // 2], sin[:, self.head_dim // 2:]), dim=-1)
        return self.cos[positions], self.sin[positions]


def rope_cos_sin(positions: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype):
    """cos and sin of RoPE's angles for the given absolute positions: shape (len(positions), head_dim)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float, device=positions.device) / head_dim))
    angles = positions.float()[:, None] * inv_freq[None, :]
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x_i, x_{i+d/2}) of every head by the angle of the token's position: x cos + (-x2, x1) sin.
    ``signed_sin`` is sin with its first half negated (:class:`Rotary`'s table), so that the rotated halves are one
    roll of x: roll(x, d/2) * signed_sin == (-x2, x1) * sin exactly, in four kernels instead of six."""
    return x * cos + x.roll(x.shape[-1] // 2, dims=-1) * signed_sin


LAYER_KERNELS = 26  # kernel-launching ops per layer of a decode step (tests/test_model_kernels.py holds it; the
# written-out layer took 56). On a GPU a small model's step is bound by its kernel count, so GPU rows record it.
FOLD_QUERIES = 64  # at most this many query rows per KV head take the folded-GQA path (Attention.forward)


def folds(group: int, seq: int) -> bool:
    """Whether attention folds the ``group`` query heads of a KV head into one block of ``group * seq`` queries."""
    return 1 < group and seq * group <= FOLD_QUERIES


def attention_bias(mask: torch.Tensor | None, group: int, seq: int, dtype: torch.dtype) -> torch.Tensor | None:
    """A forward's boolean mask (..., seq, width) as every layer's attention takes it, built once per forward
    instead of once per layer: additive (0 where visible, -inf elsewhere; attention would convert a boolean mask
    in every layer) and, where attention folds the query heads (:func:`folds`), repeated for the ``group`` heads."""
    if mask is None:
        return None
    bias = torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, float("-inf"))
    return bias.repeat(1, 1, group, 1) if folds(group, seq) else bias


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

    def forward(self, x, cos, sin, mask, cache: KVCache | None, slots=None):
        """``mask``: the forward's :func:`attention_bias` (None: every stored slot is visible)."""
        batch, seq, _ = x.shape
        heads, kv_heads = self.num_heads, self.num_kv_heads
        # Queries and keys side by side, (batch, seq, heads + kv_heads, head_dim): each head is normalised over its
        # own head_dim (q_norm's weight on query heads, k_norm's on key heads) and rotated, in one kernel per step
        # for both instead of one each (a GPU step at batch 1 is bound by its kernel count)
        qk = torch.cat([self.q_proj(x).view(batch, seq, heads, self.head_dim),
                        self.k_proj(x).view(batch, seq, kv_heads, self.head_dim)], dim=2)
        weight = torch.cat([self.q_norm.weight.expand(heads, -1), self.k_norm.weight.expand(kv_heads, -1)])
        qk = weight * F.rms_norm(qk, (self.head_dim,), eps=self.q_norm.eps)
        qk = apply_rope(qk.transpose(1, 2), cos, sin)  # (batch, heads + kv_heads, seq, head_dim)
        q, k = qk[:, :heads], qk[:, heads:]
        v = self.v_proj(x).view(batch, seq, kv_heads, self.head_dim).transpose(1, 2)

        if cache is None:
            # Without a cache: x holds the whole sequence, so k and v are (re)computed for all of it.
            keys, values = k, v
        elif slots is not None:
            # A compiled decode step: ``cache`` is the (keys, values) buffer lists; write at the slot tensor.
            keys, values = cache[0][self.layer_idx], cache[1][self.layer_idx]
            index = slots[:, None, :, None].expand_as(k)
            keys.scatter_(2, index, k)
            values.scatter_(2, index, v)
        else:
            # With a cache: x holds only the new tokens; store their k, v and attend over everything stored.
            keys, values = cache.update(self.layer_idx, k, v)

        group = self.num_heads // self.num_kv_heads
        if folds(group, seq):
            # Decode, verify and draft steps (few queries): fold each KV head's query heads into one query block,
            # (batch, kv_heads, group * seq, head_dim), so every key is read once for all of them. On a CPU this
            # is about twice as fast as enable_gqa over a long cache; the mask arrives folded (attention_bias).
            q = q.reshape(batch, self.num_kv_heads, group * seq, self.head_dim)
            out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
            out = out.view(batch, self.num_heads, seq, self.head_dim)
        else:
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

    def forward(self, x, cos, sin, mask, cache, slots=None):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, cache, slots)
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
        self.rotary = Rotary(config.head_dim, config.rope_theta)
        self.compiled_step = None  # set by compile_decode()

    def new_cache(self, batch_size: int, capacity: int, *, static_shapes: bool = False) -> KVCache:
        """An empty cache for ``batch_size`` sequences of up to ``capacity`` tokens, on the model's device."""
        weight = self.embed_tokens.weight
        return KVCache(self.config, batch_size, capacity, dtype=weight.dtype, device=weight.device,
                       static_shapes=static_shapes)

    def forward(self, input_ids: torch.Tensor, cache: KVCache | None = None, last_only: bool = False, *,
                attention_mask: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
                tree_mask: torch.Tensor | None = None, return_hidden: bool = False,
                inputs_embeds: torch.Tensor | None = None):
        """Logits for ``input_ids`` (batch, q), placed after the tokens already in ``cache``.

        Prefill is a call with the prompt, a decode step a call with one token per sequence; both extend the
        cache. ``last_only`` returns only the last position's logits (all that generation needs).

        - ``attention_mask`` (batch, q): 0 marks left padding of ragged prompts (a cache's first chunk only);
        - ``position_ids`` (batch, q) or (q,): explicit positions (a tree's nodes sit at their depth), default
          each row's next positions;
        - ``tree_mask`` (q, q) or (batch, q, q) bool: which new tokens each new token sees (default causal);
          (q, m) with m > q also covers the last m - q stored tokens (:meth:`KVCache.attention_mask`);
        - ``return_hidden``: ``(logits, hidden)``, with the hidden states the LM head reads (after the final norm),
          the features that Medusa heads and a feature-level draft work on;
        - ``inputs_embeds`` (batch, q, hidden): the first layer's input instead of the embeddings of ``input_ids``
          (a feature-level draft feeds its own mix of features and token embeddings).
        """
        batch, seq = (input_ids if inputs_embeds is None else inputs_embeds).shape[:2]
        device = (input_ids if inputs_embeds is None else inputs_embeds).device
        if cache is None:
            if attention_mask is not None or tree_mask is not None:
                raise ValueError("attention_mask and tree_mask need a cache (model.new_cache(batch, capacity))")
            positions = torch.arange(seq, device=device) if position_ids is None else position_ids
            end = seq if position_ids is None else int(position_ids.max()) + 1
            mask = None if seq == 1 else torch.ones(seq, seq, dtype=torch.bool, device=device).tril()
        else:
            cache.check_room(batch, seq)
            if attention_mask is not None:
                cache.mark_padding(attention_mask)
            if position_ids is not None:
                positions = position_ids
            elif cache.uniform:
                start = cache.lengths[0]
                positions = torch.arange(start, start + seq, device=device)
            elif attention_mask is not None:  # a ragged prefill: each row's first real token is position 0
                positions = (attention_mask.to(device).long().cumsum(1) - 1).clamp(min=0)
            else:
                positions = cache.positions()[:, None] + torch.arange(seq, device=device)
            end = cache.next_position_bound() + seq  # new tokens (tree nodes too) never sit past this
            mask = cache.attention_mask(seq, tree_mask)
        if end > self.config.max_seq_len:
            raise ValueError(
                f"position {end - 1} is past the model's context limit of {self.config.max_seq_len} tokens; "
                "shorten the prompt or max_new_tokens"
            )

        cos, sin = self.rotary(positions, cache.capacity if cache is not None and cache.static_shapes else end,
                               self.embed_tokens.weight.dtype)
        if positions.dim() == 2:  # per-row positions: broadcast over heads
            cos, sin = cos[:, None], sin[:, None]
        if (self.compiled_step is not None and cache is not None and cache.static_shapes and seq == 1
                and not return_hidden and inputs_embeds is None):
            # A decode step with the same shapes every call: the compiled graph writes through a slot tensor.
            if positions.dim() == 1:
                cos, sin = cos.expand(batch, 1, 1, -1), sin.expand(batch, 1, 1, -1)
            cuda_graphs = input_ids.device.type == "cuda"
            if cuda_graphs:  # reduce-overhead: a new step, whose replay may overwrite the previous step's outputs
                torch.compiler.cudagraph_mark_step_begin()
            # the buffers, not the cache object, go in: a new cache per generation must not trigger a recompile
            logits = self.compiled_step(input_ids, cos, sin, mask, (cache.keys, cache.values),
                                        cache.lengths_tensor()[:, None])
            cache.advance(1)
            return logits.clone() if cuda_graphs else logits  # the graph's output buffer is reused by its next replay
        x = self.embed_tokens(input_ids) if inputs_embeds is None else inputs_embeds
        mask = attention_bias(mask, self.config.num_heads // self.config.num_kv_heads, seq, x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin, mask, cache)
        if cache is not None:
            cache.advance(seq)
        if last_only:
            x = x[:, -1:]
        hidden = self.norm(x)
        return (self.lm_head(hidden), hidden) if return_hidden else self.lm_head(hidden)

    def _step(self, input_ids, cos, sin, mask, buffers, slots):
        """One decode step over the whole static cache (what ``torch.compile`` traces)."""
        x = self.embed_tokens(input_ids)
        mask = attention_bias(mask, self.config.num_heads // self.config.num_kv_heads, input_ids.shape[1], x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin, mask, buffers, slots)
        return self.lm_head(self.norm(x))

    def compile_decode(self, mode: str | None = None) -> "MiniQwen3":
        """Run decode steps (one token per row, on a cache made with ``static_shapes=True``) through
        ``torch.compile`` (CPU: inductor, needs a C++ compiler; CUDA: ``mode="reduce-overhead"`` adds CUDA
        graphs). Prefill and multi-token calls stay eager. Returns the model."""
        # dynamo caches graphs per code object: every model (target and draft, their shapes, grad modes) shares
        # _step's, so the default limit of 8 graphs is too small for a speculative pair
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
        self.compiled_step = torch.compile(self._step, mode=mode, dynamic=False, fullgraph=True)
        return self


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
