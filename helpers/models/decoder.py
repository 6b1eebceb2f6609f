"""The workbook's one model file: a minimal decoder for Qwen3, Llama (2 and 3.x) and OLMo over a preallocated KV cache.

The handout's three families are one architecture written out plainly: pre-norm blocks of grouped-query attention
with rotary position embeddings (RoPE) and a SwiGLU MLP, the decoder (:class:`MiniDecoder`) and loading from
transformers (:func:`from_hf`). They differ in four places, each chosen from the config (:class:`DecoderConfig`), never
by a copy of the layer: the norm (:class:`RMSNorm`, or OLMo's :class:`LayerNorm` without parameters), the RoPE table
(plain, or Llama 3's scaled frequencies), a per-head RMSNorm of queries and keys (Qwen3) and a clip of the
projections (OLMo's ``clip_qkv``).

The projections are fused: q, k and v are one matrix product (``qkv_proj``) and gate and up one (``gate_up_proj``),
which on a GPU at batch 1 means fewer and larger kernels. :func:`from_hf` builds the fused matrices from a
transformers model's separate ones and then rebinds the transformers parameters to row blocks of them (a row block of
a row-major matrix is contiguous), so both models keep sharing ONE copy of every weight and reproduce each other's
logits.

The cache lives in :mod:`helpers.models.kv_cache` (:class:`~helpers.models.kv_cache.KVCache`, re-exported here):
one keys and one values buffer per layer, each row at its own fill level, so one cache serves a single sequence,
a ragged left-padded batch, per-row rollback and a token tree verified in one forward. It prepares what a forward
needs once (positions, the mask); each layer writes the new tokens' keys and values into the rows' next free slots and
attends over the stored ones. Without a cache (``cache=None``) the forward recomputes keys and values for every
token it is given, which is what generation without a cache has to do at every step. The static decode step that
CUDA graphs capture (and inductor compiles) is in :mod:`helpers.models.graphs`.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from helpers.models.decoder_config import DecoderConfig
from helpers.models.kv_cache import KVCache

__all__ = ["Attention", "DecoderConfig", "DecoderLayer", "KVCache", "LayerNorm", "MLP", "MiniDecoder", "RMSNorm",
           "Rotary", "apply_rope", "attention_bias", "from_hf", "layer_kernels"]


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


class LayerNorm(nn.Module):
    """OLMo's norm: LayerNorm without weight or bias, computed in fp32 and cast back (eps 1e-5, as transformers)."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x.float(), (self.dim,), eps=1e-5).to(x.dtype)


def make_norm(config: DecoderConfig, dim: int) -> nn.Module:
    return RMSNorm(dim, config.rms_norm_eps) if config.norm == "rms" else LayerNorm(dim)


class Rotary:
    """cos/sin tables of RoPE's angles, computed once up to the longest position seen (grown by doubling). The sin
    table has its first half negated, as :func:`apply_rope` takes it."""

    def __init__(self, config: DecoderConfig):
        self.config = config
        self.cos = self.sin = None

    def __call__(self, positions: torch.Tensor, end: int, dtype: torch.dtype):
        """cos and signed sin for ``positions`` (any shape, all below ``end``): shape ``positions.shape + (head_dim,)``."""
        if self.cos is None or self.cos.shape[0] < end or self.cos.dtype != dtype or self.cos.device != positions.device:
            self._build(positions.device, max(end, 2 * self.cos.shape[0] if self.cos is not None else 256), dtype)
        return self.cos[positions], self.sin[positions]

    @torch.inference_mode(False)  # plain tensors even when first built in inference mode: training reuses them
    @torch.no_grad()
    def _build(self, device, size: int, dtype: torch.dtype) -> None:
        angles = torch.arange(size, device=device).float()[:, None] * self.config.inv_freq(device)[None, :]
        angles = torch.cat((angles, angles), dim=-1)
        half = self.config.head_dim // 2
        self.cos, sin = angles.cos().to(dtype), angles.sin().to(dtype)
        self.sin = torch.cat((-sin[:, :half], sin[:, half:]), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x_i, x_{i+d/2}) of every head by the angle of the token's position: x cos + (-x2, x1) sin.
    ``signed_sin`` is sin with its first half negated (:class:`Rotary`'s table), so that the rotated halves are one
    roll of x: roll(x, d/2) * signed_sin == (-x2, x1) * sin exactly, in four kernels instead of six."""
    return x * cos + x.roll(x.shape[-1] // 2, dims=-1) * signed_sin


def layer_kernels(config: DecoderConfig) -> int:
    """Kernel-launching ops per layer of an eager decode step in float32 (``tests/test_model_kernels.py`` holds it; the
    written-out Qwen3 layer took 56, the unfused one 26). On a GPU a small model's step is bound by its kernel count,
    so GPU rows record it. Every family: the q/k/v and gate/up products, o and down, RoPE 4, 2 cache writes,
    attention, SiLU, the gate product, 2 residual adds; two norms, each a fused RMSNorm and its weight product, or
    OLMo's LayerNorm and its two casts (no-ops in float32, kernels in bf16); with q/k norm its weight join, norm and
    product; with a clip one clamp."""
    count = 15 + 2 * (2 if config.norm == "rms" else 3) + (3 if config.qk_norm else 0)
    return count + (1 if config.clip_qkv is not None else 0)


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
    """Grouped-query attention over one fused q/k/v product; Qwen3's per-head q/k RMSNorm and OLMo's clip where the
    config has them."""

    def __init__(self, config: DecoderConfig, layer_idx: int):
        super().__init__()
        self.layer_idx = layer_idx
        self.num_heads, self.num_kv_heads, self.head_dim = config.num_heads, config.num_kv_heads, config.head_dim
        self.clip = config.clip_qkv
        width = (config.num_heads + 2 * config.num_kv_heads) * config.head_dim
        self.qkv_proj = nn.Linear(config.hidden_size, width, bias=config.attention_bias)
        self.o_proj = nn.Linear(config.num_heads * config.head_dim, config.hidden_size, bias=config.attention_bias)
        if config.qk_norm:
            self.q_norm = RMSNorm(config.head_dim, config.rms_norm_eps)
            self.k_norm = RMSNorm(config.head_dim, config.rms_norm_eps)
        self._register_load_state_dict_pre_hook(_fuse_keys(("q_proj", "k_proj", "v_proj"), "qkv_proj"))

    def forward(self, x, cos, sin, mask, cache, slots=None):
        """``mask``: the forward's :func:`attention_bias` (None: every stored slot is visible). ``cache``: None (no
        cache), a :class:`KVCache` (or a view of one), or this layer's (keys, values) buffers of a static step, which
        the new keys and values are written into at ``slots`` (batch, new)."""
        batch, seq, _ = x.shape
        heads, kv_heads = self.num_heads, self.num_kv_heads
        qkv = self.qkv_proj(x)
        if self.clip is not None:
            qkv = qkv.clamp(-self.clip, self.clip)
        qkv = qkv.view(batch, seq, heads + 2 * kv_heads, self.head_dim)
        # queries and keys side by side (batch, seq, heads + kv_heads, head_dim): each head is normalised over its own
        # head_dim (q_norm's weight on query heads, k_norm's on key heads) and rotated, one kernel each for both
        qk, v = qkv[:, :, :heads + kv_heads], qkv[:, :, heads + kv_heads:].transpose(1, 2)
        if hasattr(self, "q_norm"):
            weight = torch.cat([self.q_norm.weight.expand(heads, -1), self.k_norm.weight.expand(kv_heads, -1)])
            qk = weight * F.rms_norm(qk, (self.head_dim,), eps=self.q_norm.eps)
        qk = apply_rope(qk.transpose(1, 2), cos, sin)  # (batch, heads + kv_heads, seq, head_dim)
        q, k = qk[:, :heads], qk[:, heads:]

        if cache is None:  # x holds the whole sequence, so k and v are (re)computed for all of it
            keys, values = k, v
        elif slots is not None:  # a static step: write at the slot tensor, attend over the whole buffer
            keys, values = cache
            # an index_put_ (not scatter_): inductor writes it in place instead of copying the whole buffer back
            rows = torch.arange(batch, device=x.device)[:, None]
            keys[rows, :, slots] = k.transpose(1, 2)
            values[rows, :, slots] = v.transpose(1, 2)
        else:  # x holds only the new tokens; store their k, v and attend over everything stored
            keys, values = cache.update(self.layer_idx, k, v)

        group = heads // kv_heads
        if folds(group, seq):
            # Decode, verify and draft steps (few queries): fold each KV head's query heads into one query block,
            # (batch, kv_heads, group * seq, head_dim), so every key is read once for all of them. On a CPU this
            # is about twice as fast as enable_gqa over a long cache; the mask arrives folded (attention_bias).
            q = q.reshape(batch, kv_heads, group * seq, self.head_dim)
            out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
            out = out.view(batch, heads, seq, self.head_dim)
        else:
            # enable_gqa: each of the num_kv_heads key/value heads serves num_heads / num_kv_heads query heads.
            out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=group > 1)
        return self.o_proj(out.transpose(1, 2).reshape(batch, seq, heads * self.head_dim))


class MLP(nn.Module):
    """SwiGLU over one fused gate/up product: down(silu(gate(x)) * up(x))."""

    def __init__(self, config: DecoderConfig):
        super().__init__()
        self.gate_up_proj = nn.Linear(config.hidden_size, 2 * config.intermediate_size, bias=config.mlp_bias)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=config.mlp_bias)
        self._register_load_state_dict_pre_hook(_fuse_keys(("gate_proj", "up_proj"), "gate_up_proj"))

    def forward(self, x):
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class DecoderLayer(nn.Module):
    """Pre-norm block: x + attention(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, config: DecoderConfig, layer_idx: int):
        super().__init__()
        self.input_layernorm = make_norm(config, config.hidden_size)
        self.self_attn = Attention(config, layer_idx)
        self.post_attention_layernorm = make_norm(config, config.hidden_size)
        self.mlp = MLP(config)

    def forward(self, x, cos, sin, mask, cache, slots=None):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, cache, slots)
        return x + self.mlp(self.post_attention_layernorm(x))


class MiniDecoder(nn.Module):
    """The whole decoder: embeddings, layers, final norm, LM head."""

    def __init__(self, config: DecoderConfig):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config, i) for i in range(config.num_layers))
        self.norm = make_norm(config, config.hidden_size)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        self.rotary = Rotary(config)

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
        x = self.embed_tokens(input_ids) if inputs_embeds is None else inputs_embeds
        positions, end, mask = self._placement(x, cache, attention_mask, position_ids, tree_mask)
        cos, sin = self.rotary(positions, cache.capacity if cache is not None and cache.static_shapes else end,
                               x.dtype)
        if positions.dim() == 2:  # per-row positions: broadcast over heads
            cos, sin = cos[:, None], sin[:, None]
        mask = attention_bias(mask, self.config.num_heads // self.config.num_kv_heads, x.shape[1], x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin, mask, cache)
        if cache is not None:
            cache.advance(x.shape[1])
        if last_only:
            x = x[:, -1:]
        hidden = self.norm(x)
        return (self.lm_head(hidden), hidden) if return_hidden else self.lm_head(hidden)

    def _placement(self, x, cache, attention_mask, position_ids, tree_mask):
        """The new tokens' positions, the end of the RoPE table they need and the boolean attention mask."""
        batch, seq = x.shape[:2]
        if cache is None:
            if attention_mask is not None or tree_mask is not None:
                raise ValueError("attention_mask and tree_mask need a cache (model.new_cache(batch, capacity))")
            positions = torch.arange(seq, device=x.device) if position_ids is None else position_ids
            end = seq if position_ids is None else int(position_ids.max()) + 1
            mask = None if seq == 1 else torch.ones(seq, seq, dtype=torch.bool, device=x.device).tril()
        else:
            cache.check_room(batch, seq)
            if attention_mask is not None:
                cache.mark_padding(attention_mask)
            positions = cache.new_positions(seq, attention_mask) if position_ids is None else position_ids
            end = cache.next_position_bound() + seq  # new tokens (tree nodes too) never sit past this
            mask = cache.attention_mask(seq, tree_mask)
        if end > self.config.max_seq_len:
            raise ValueError(
                f"position {end - 1} is past the model's context limit of {self.config.max_seq_len} tokens; "
                "shorten the prompt or max_new_tokens"
            )
        return positions, end, mask


def _fuse_keys(parts: tuple[str, ...], fused: str):
    """A load_state_dict pre-hook: separate ``parts`` projections (transformers' names, and the model file's before
    fusion: the committed drafters' files) are joined into the ``fused`` one, row blocks in order."""

    def hook(state, prefix, *args):
        for kind in ("weight", "bias"):
            names = [f"{prefix}{part}.{kind}" for part in parts]
            if all(name in state for name in names):
                state[f"{prefix}{fused}.{kind}"] = torch.cat([state.pop(name) for name in names])

    return hook


FUSED = {"self_attn.qkv_proj": ("q_proj", "k_proj", "v_proj"), "mlp.gate_up_proj": ("gate_proj", "up_proj")}


def _fuse_projections(hf_layer) -> None:
    """Join each group of a transformers layer's projections into one matrix and rebind its parameters to row blocks
    of it (``.data``: the same Parameter objects, so an optimizer holding them still trains them): the model file's
    fused product and transformers' separate ones then read one copy of the weights."""
    for fused, parts in FUSED.items():
        block, _ = fused.split(".")
        linears = [getattr(getattr(hf_layer, block), part) for part in parts]
        for kind in ("weight", "bias"):
            tensors = [getattr(linear, kind) for linear in linears]
            if tensors[0] is None or _adjacent(tensors):
                continue
            joined = torch.cat([t.data for t in tensors])
            for tensor, rows in zip(tensors, joined.split([t.shape[0] for t in tensors])):
                tensor.data = rows


def _adjacent(tensors) -> bool:
    """Whether ``tensors`` are already consecutive row blocks of one storage (fused by an earlier :func:`from_hf`)."""
    first = tensors[0]
    if first.is_meta or not all(t.is_contiguous() for t in tensors):
        return False
    offset = first.storage_offset()
    for tensor in tensors:
        if tensor.untyped_storage().data_ptr() != first.untyped_storage().data_ptr() or tensor.storage_offset() != offset:
            return False
        offset += tensor.numel()
    return True


@torch.inference_mode(False)  # the fused weights become the transformers model's too: never inference tensors
@torch.no_grad()
def from_hf(hf_model) -> MiniDecoder:
    """The model file's decoder over a transformers Qwen3, Llama or OLMo causal LM, holding the SAME weights (no
    copy: the q/k/v and gate/up parameters of ``hf_model`` become row blocks of the fused matrices, see the module
    docstring). Dtype and device follow the transformers model."""
    config = DecoderConfig.from_hf(hf_model.config)
    for layer in hf_model.model.layers:
        _fuse_projections(layer)
    with torch.device("meta"):
        model = MiniDecoder(config)
    state = {name.removeprefix("model."): tensor for name, tensor in hf_model.state_dict().items()}
    for layer in range(config.num_layers):  # the fused matrices: the storage the parameters' row blocks share
        for fused, parts in FUSED.items():
            for kind in ("weight", "bias"):
                names = [f"layers.{layer}.{fused.split('.')[0]}.{part}.{kind}" for part in parts]
                if names[0] in state:
                    first = state.pop(names[0])
                    rows = sum(state.pop(name).shape[0] for name in names[1:]) + first.shape[0]
                    state[f"layers.{layer}.{fused}.{kind}"] = first.as_strided((rows, *first.shape[1:]),
                                                                               first.stride())
    model.load_state_dict(state, strict=True, assign=True)
    if config.tie_word_embeddings:  # assign=True replaced the tied Parameter: tie again
        model.lm_head.weight = model.embed_tokens.weight
    return model.eval()
