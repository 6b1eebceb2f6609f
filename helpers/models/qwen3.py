"""The workbook's one model file: a minimal Qwen3 decoder with a preallocated, static-shape KV cache.

The model is the Qwen3 architecture written out plainly: RMSNorm, rotary position embeddings (RoPE),
grouped-query attention with RMS-normalised queries and keys, and a SwiGLU MLP. Its parameter names mirror
transformers' ``Qwen3ForCausalLM`` (without the ``model.`` prefix), so :func:`from_hf` takes a real model's
weights as they are (no copy) and reproduces its logits.

The cache (:class:`KVCache`) is allocated once: for every layer one keys and one values tensor of shape
``(batch, kv_heads, capacity, head_dim)``. Each row has its own fill level (``lengths[b]`` slots used), so one
cache serves

* a single sequence or a batch of equal-length rows (the fast path: slice writes, a causal mask);
* a *ragged* batch: left-padded prompts whose padding slots are marked invalid, per-row positions for RoPE;
* rows that roll back by different amounts (speculative decoding: :meth:`KVCache.rollback`);
* a *token tree* of new tokens: any ``(q, q)`` mask over the new tokens with explicit position ids, after
  which :meth:`KVCache.compact` keeps the accepted path in place (nothing is recomputed).

A forward pass writes the new tokens' keys and values into each row's next free slots and attends over the
stored ones through a boolean mask. With ``cache.static_shapes`` the attention always spans the whole buffer
(the same tensor shapes at every decode step, which ``torch.compile`` and CUDA graphs need); otherwise it spans
only the slots in use. Without a cache (``cache=None``) the forward recomputes keys and values for every token
it is given, which is what generation without a cache has to do at every step.

Position of the token in slot ``s`` of row ``b``: ``s - pads[b]`` (``pads[b]`` = padding slots at the row's
start). Rows never hold padding after their first token, so rollback and compaction keep positions right.
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


# ------------------------------------------------------------------------------------------------ the cache


class KVCache:
    """Preallocated keys and values for every layer; row ``b`` fills slots ``[0, lengths[b])``.

    ``keys[layer]`` and ``values[layer]`` have shape ``(batch, kv_heads, capacity, head_dim)``. A forward pass
    writes the next tokens in place, so appending never copies or reallocates and rolling back is lowering a
    row's length. ``lengths`` is kept on the host (every caller knows it without a device sync) and mirrored on
    the device for masks.
    """

    def __init__(self, config: DecoderConfig, batch_size: int, capacity: int, *, dtype: torch.dtype, device,
                 static_shapes: bool = False):
        if not 1 <= capacity <= config.max_seq_len:
            raise ValueError(
                f"cache capacity {capacity} must be between 1 and the model's context limit {config.max_seq_len}"
            )
        if batch_size < 0:
            raise ValueError(f"batch_size must be >= 0, got {batch_size}")
        shape = (batch_size, config.num_kv_heads, capacity, config.head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.num_layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.num_layers)]
        self.static_shapes = static_shapes
        self.lengths: list[int] = [0] * batch_size
        self.pads = torch.zeros(batch_size, dtype=torch.long, device=device)
        self.valid: torch.Tensor | None = None  # (batch, capacity) bool once a padded chunk was written
        self._pads_host: list[int] = [0] * batch_size
        self._lengths_device: torch.Tensor | None = None

    # -------------------------------------------------------------- shape facts

    @property
    def batch_size(self) -> int:
        return self.keys[0].shape[0]

    @property
    def capacity(self) -> int:
        return self.keys[0].shape[2]

    @property
    def device(self) -> torch.device:
        return self.keys[0].device

    @property
    def nbytes(self) -> int:
        """Bytes allocated for keys and values (what ``helpers.memory.kv_cache_bytes`` predicts)."""
        return sum(t.numel() * t.element_size() for t in self.keys + self.values)

    @property
    def uniform(self) -> bool:
        """Every row holds the same number of slots and none is padding (the fast path)."""
        return self.valid is None and len(set(self.lengths)) <= 1

    @property
    def length(self) -> int:
        """Tokens stored per row, for caches whose rows advance together."""
        if min(self.lengths) != max(self.lengths):
            raise ValueError(f"rows hold different numbers of tokens ({self.lengths}); read cache.lengths")
        return self.lengths[0]

    def lengths_tensor(self) -> torch.Tensor:
        if self._lengths_device is None:
            self._lengths_device = torch.tensor(self.lengths, dtype=torch.long, device=self.device)
        return self._lengths_device

    def positions(self) -> torch.Tensor:
        """(batch,) position of each row's next token."""
        return self.lengths_tensor() - self.pads

    @property
    def token_counts(self) -> list[int]:
        """Tokens per row, padding excluded (= each row's next position)."""
        return [n - p for n, p in zip(self.lengths, self._pads_host)]

    def next_position_bound(self) -> int:
        """The largest next position over the rows (host arithmetic, no device sync)."""
        return max(self.token_counts, default=0)

    # -------------------------------------------------------------- writing

    def check_room(self, batch_size: int, new_tokens: int) -> None:
        if batch_size != self.batch_size:
            raise ValueError(f"the cache was allocated for batch size {self.batch_size}, got a batch of {batch_size}")
        if max(self.lengths, default=0) + new_tokens > self.capacity:
            raise ValueError(
                f"the cache holds {self.capacity} tokens per row: {max(self.lengths, default=0)} stored + {new_tokens} new do "
                "not fit; allocate a larger cache (capacity = prompt length + max_new_tokens)"
            )

    def update(self, layer: int, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store this chunk's keys/values in each row's next free slots; return the buffers to attend over.

        The lengths move once per forward pass (:meth:`advance`), after every layer has written. (A compiled
        decode step writes through a slot tensor instead, see :meth:`MiniQwen3.compile_decode`.)
        """
        start, new = self.lengths[0], keys.shape[2]
        if self.uniform:  # every row writes the same slots: a slice
            self.keys[layer][:, :, start : start + new] = keys
            self.values[layer][:, :, start : start + new] = values
        else:  # each row at its own fill level: scatter along the slot axis
            index = self._write_index(new)[:, None, :, None].expand_as(keys)
            self.keys[layer].scatter_(2, index, keys)
            self.values[layer].scatter_(2, index, values)
        width = self.capacity if self.static_shapes else max(self.lengths) + new
        return self.keys[layer][:, :, :width], self.values[layer][:, :, :width]

    def _write_index(self, new: int) -> torch.Tensor:
        return self.lengths_tensor()[:, None] + torch.arange(new, device=self.device)

    def mark_padding(self, attention_mask: torch.Tensor) -> None:
        """Record which slots of a ragged prefill hold left padding (``attention_mask`` 0); rows must be empty."""
        if any(self.lengths):
            raise ValueError("padding can only be written into empty rows: prefill the ragged prompts first")
        real = attention_mask.to(device=self.device, dtype=torch.bool)  # a row may be all padding (empty)
        if real.all():
            return  # no padding: the fast path stays open
        self.valid = torch.ones(self.batch_size, self.capacity, dtype=torch.bool, device=self.device)
        self.valid[:, : real.shape[1]] = real
        self.pads = (~real).sum(dim=1)
        self._pads_host = self.pads.tolist()

    def reset(self) -> None:
        """Empty every row (no padding, length 0) and keep the buffers: a new generation over the same memory."""
        self.valid = None
        self.pads = torch.zeros_like(self.pads)
        self._pads_host = [0] * self.batch_size
        self.set_lengths([0] * self.batch_size)

    def advance(self, new_tokens: int) -> None:
        self.set_lengths([length + new_tokens for length in self.lengths])

    def set_lengths(self, lengths) -> None:
        lengths = [int(n) for n in lengths]
        if len(lengths) != self.batch_size or min(lengths, default=0) < 0 or max(lengths, default=0) > self.capacity:
            raise ValueError(f"need {self.batch_size} lengths in [0, {self.capacity}], got {lengths}")
        self.lengths = lengths
        self._lengths_device = None

    # -------------------------------------------------------------- rolling back and compacting

    def crop(self, length: int) -> None:
        """Every row forgets its tokens from slot ``length`` on (no data moves; later writes overwrite them)."""
        if not 0 <= length <= min(self.lengths):
            raise ValueError(f"can crop to a length in [0, {min(self.lengths)}], got {length}")
        self.set_lengths([length] * self.batch_size)

    def rollback(self, tokens) -> None:
        """Row ``b`` forgets its last ``tokens[b]`` tokens (an int applies to every row)."""
        counts = [tokens] * self.batch_size if isinstance(tokens, int) else [int(t) for t in tokens]
        if any(t < 0 or t > n for t, n in zip(counts, self.lengths)):
            raise ValueError(f"cannot roll back {counts} tokens from rows holding {self.lengths}")
        self.set_lengths([n - t for n, t in zip(self.lengths, counts)])

    def compact(self, start, keep) -> None:
        """Keep, per row, the slots ``start[b] + keep[b][i]`` moved to ``start[b] + i``; the row then ends there.

        This is how a verified token tree keeps its accepted path: the round's nodes were written from slot
        ``start[b]`` on, ``keep[b]`` lists the accepted nodes in path order (offsets from ``start[b]``).
        """
        if len(start) != self.batch_size or len(keep) != self.batch_size:
            raise ValueError(f"need one start and one keep list per row ({self.batch_size} rows)")
        width = max(len(k) for k in keep)
        if width:
            # rows with fewer kept slots repeat their last move (or copy slot 0 onto itself when none is kept)
            src = torch.tensor([[s + k for k in row] + [s + row[-1] if row else 0] * (width - len(row))
                                for s, row in zip(start, keep)], device=self.device)
            dst = torch.tensor([[s + i for i in range(len(row))] + [s + len(row) - 1 if row else 0] * (width - len(row))
                                for s, row in zip(start, keep)], device=self.device)
            if int(src.max()) >= self.capacity:
                raise ValueError("compact(): a kept slot lies beyond the cache's capacity")
            rows = torch.arange(self.batch_size, device=self.device)[:, None].expand_as(src)
            for buffers in (self.keys, self.values):
                for buffer in buffers:
                    moved = buffer[rows, :, src]  # (batch, width, kv_heads, head_dim), gathered before writing
                    buffer[rows, :, dst] = moved
        self.set_lengths([s + len(row) for s, row in zip(start, keep)])

    def select_rows(self, rows) -> None:
        """Keep only ``rows`` (indices, in the order given): finished sequences leave the batch."""
        rows = [int(r) for r in rows]
        index = torch.tensor(rows, dtype=torch.long, device=self.device)
        self.keys = [k.index_select(0, index) for k in self.keys]
        self.values = [v.index_select(0, index) for v in self.values]
        self.pads = self.pads.index_select(0, index)
        self._pads_host = [self._pads_host[r] for r in rows]
        if self.valid is not None:
            self.valid = self.valid.index_select(0, index)
        self.set_lengths([self.lengths[r] for r in rows])

    def retain_rows(self, rows) -> list[int]:
        """Keep only ``rows`` (a set of indices) with the fewest copies; return the kept rows' new order.

        :meth:`select_rows` copies every kept row into new buffers — a whole cache's bytes each time a row leaves,
        as much traffic as a long-context decode step. Here each kept row past the new batch size moves into the
        slot of a leaving row, and the buffers become views of their first rows: over a generation in which all
        rows leave one by one, at most one cache's worth of rows is copied. ``order[i]`` is the old index of the
        row now at index ``i``.
        """
        keep = sorted({int(r) for r in rows})
        n = len(keep)
        if keep == list(range(n)) and n == self.batch_size:
            return keep
        holes = [i for i in range(n) if i not in set(keep)]
        movers = [r for r in keep if r >= n]
        order = [i if i in set(keep) else None for i in range(n)]
        if movers:
            src = torch.tensor(movers, device=self.device)
            dst = torch.tensor(holes, device=self.device)
            for buffer in self.keys + self.values:
                buffer[dst] = buffer[src]
            for hole, mover in zip(holes, movers):
                order[hole] = mover
        self.keys = [k[:n] for k in self.keys]
        self.values = [v[:n] for v in self.values]
        index = torch.tensor(order, dtype=torch.long, device=self.device)
        self.pads = self.pads.index_select(0, index)
        self._pads_host = [self._pads_host[r] for r in order]
        if self.valid is not None:
            self.valid = self.valid.index_select(0, index)
        self.set_lengths([self.lengths[r] for r in order])
        return order

    def reserve(self, capacity: int) -> None:
        """Grow every row's room to ``capacity`` slots (a copy; for batches whose output length is unknown)."""
        if capacity > self.capacity:
            grow = lambda t: F.pad(t, (0, 0, 0, capacity - t.shape[2]))  # noqa: E731 (pads the slot axis)
            self.keys, self.values = [grow(k) for k in self.keys], [grow(v) for v in self.values]
            if self.valid is not None:
                self.valid = F.pad(self.valid, (0, capacity - self.valid.shape[1]), value=True)

    def append_rows(self, rows: list[torch.Tensor]) -> None:
        """New rows join the batch with their cached keys/values, ``rows[i]`` shaped
        ``(layers, 2, kv_heads, length_i, head_dim)`` (what a prefill worker sends); each starts at slot 0."""
        lengths = [row.shape[3] for row in rows]
        self.reserve(max(lengths))
        shape = (len(rows),) + self.keys[0].shape[1:]
        for layer in range(len(self.keys)):
            new_keys, new_values = self.keys[layer].new_zeros(shape), self.values[layer].new_zeros(shape)
            for i, row in enumerate(rows):
                new_keys[i, :, : lengths[i]], new_values[i, :, : lengths[i]] = row[layer, 0], row[layer, 1]
            self.keys[layer] = torch.cat([self.keys[layer], new_keys])
            self.values[layer] = torch.cat([self.values[layer], new_values])
        self.pads = torch.cat([self.pads, self.pads.new_zeros(len(rows))])
        self._pads_host = self._pads_host + [0] * len(rows)
        if self.valid is not None:
            self.valid = torch.cat([self.valid, self.valid.new_ones(len(rows), self.capacity)])
        self.set_lengths(self.lengths + lengths)

    def row_kv(self, row: int) -> torch.Tensor:
        """Row ``row``'s stored tokens (padding excluded) as ``(layers, 2, kv_heads, tokens, head_dim)``."""
        start, end = self._pads_host[row], self.lengths[row]
        return torch.stack([torch.stack([k[row, :, start:end], v[row, :, start:end]])
                            for k, v in zip(self.keys, self.values)])

    # -------------------------------------------------------------- the mask

    def attention_mask(self, new: int, tree_mask: torch.Tensor | None) -> torch.Tensor | None:
        """Boolean mask (batch or 1, 1, new, width): what each new token may attend to (call before writing).

        Stored slots are visible where valid. ``tree_mask`` (default: causal over the new tokens) has shape
        ``(new, block)`` or ``(batch, new, block)`` with ``block >= new``: it covers the last ``block - new``
        stored slots and the new tokens, and ``tree_mask[i, j]`` says whether new token i sees slot j of that
        block (a draft expanding a token tree one level per forward sees only its own ancestors among the nodes
        it stored earlier in the round). ``None`` where no mask is needed (one new token on the fast path).
        """
        width = self.capacity if self.static_shapes else max(self.lengths) + new
        if self.uniform and tree_mask is None and not self.static_shapes:
            if new == 1:
                return None
            start = self.lengths[0]
            query = torch.arange(start, start + new, device=self.device)
            return (query[:, None] >= torch.arange(width, device=self.device)[None, :])[None, None]
        if tree_mask is None:
            tree_mask = torch.ones(new, new, dtype=torch.bool, device=self.device).tril()
        tree_mask = tree_mask.to(device=self.device, dtype=torch.bool)
        block = tree_mask.shape[-1]
        if tree_mask.shape[-2] != new or block < new or block > min(self.lengths, default=0) + new:
            raise ValueError(f"tree_mask must have shape (new={new}, block) with new <= block <= stored + new, "
                             f"got {tuple(tree_mask.shape)}")
        if tree_mask.dim() == 2:
            tree_mask = tree_mask.expand(self.batch_size, new, block)
        # slot offset from the start of the block (the block ends with the new tokens)
        relative = torch.arange(width, device=self.device)[None, :] - (self.lengths_tensor()[:, None] - (block - new))
        in_block = (relative >= 0) & (relative < block)
        index = relative.clamp(0, block - 1)[:, None, :].expand(self.batch_size, new, width)
        visible = (relative < 0)[:, None, :] | (tree_mask.gather(2, index) & in_block[:, None, :])
        if self.valid is not None:  # padding is invisible, except to itself (a query must see something)
            own = torch.arange(block - new, block, device=self.device)[None, :, None]
            visible = visible & self.valid[:, None, :width] | (relative[:, None, :] == own)
        return visible[:, None]


# ------------------------------------------------------------------------------------------------ the model


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


class Rotary:
    """cos/sin tables of RoPE's angles, computed once up to the longest position seen (grown by doubling)."""

    def __init__(self, head_dim: int, theta: float):
        self.head_dim, self.theta = head_dim, theta
        self.cos = self.sin = None

    def __call__(self, positions: torch.Tensor, end: int, dtype: torch.dtype):
        """cos and sin for ``positions`` (any shape, all below ``end``): shape ``positions.shape + (head_dim,)``."""
        if self.cos is None or self.cos.shape[0] < end or self.cos.dtype != dtype or self.cos.device != positions.device:
            size = max(end, 2 * self.cos.shape[0] if self.cos is not None else 256)
            self.cos, self.sin = rope_cos_sin(torch.arange(size, device=positions.device), self.head_dim,
                                              self.theta, dtype)
        return self.cos[positions], self.sin[positions]


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


FOLD_QUERIES = 64  # at most this many query rows per KV head take the folded-GQA path (Attention.forward)


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
        batch, seq, _ = x.shape
        # (batch, seq, heads * head_dim) -> (batch, heads, seq, head_dim)
        q = self.q_norm(self.q_proj(x).view(batch, seq, self.num_heads, self.head_dim)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(batch, seq, self.num_kv_heads, self.head_dim)).transpose(1, 2)
        v = self.v_proj(x).view(batch, seq, self.num_kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)

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
        if 1 < group and seq * group <= FOLD_QUERIES:
            # Decode, verify and draft steps (few queries): fold each KV head's query heads into one query block,
            # (batch, kv_heads, group * seq, head_dim), so every key is read once for all of them. On a CPU this
            # is about twice as fast as enable_gqa over a long cache; the mask is the same for every head.
            q = q.reshape(batch, self.num_kv_heads, group * seq, self.head_dim)
            if mask is not None:
                mask = mask.repeat(1, 1, group, 1)
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
                tree_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Logits for ``input_ids`` (batch, q), placed after the tokens already in ``cache``.

        Prefill is a call with the prompt, a decode step a call with one token per sequence; both extend the
        cache. ``last_only`` returns only the last position's logits (all that generation needs).

        - ``attention_mask`` (batch, q): 0 marks left padding of ragged prompts (a cache's first chunk only);
        - ``position_ids`` (batch, q) or (q,): explicit positions (a tree's nodes sit at their depth), default
          each row's next positions;
        - ``tree_mask`` (q, q) or (batch, q, q) bool: which new tokens each new token sees (default causal);
          (q, m) with m > q also covers the last m - q stored tokens (:meth:`KVCache.attention_mask`).
        """
        batch, seq = input_ids.shape
        device = input_ids.device
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
        if self.compiled_step is not None and cache is not None and cache.static_shapes and seq == 1:
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
        x = self.embed_tokens(input_ids)
        for layer in self.layers:
            x = layer(x, cos, sin, mask, cache)
        if cache is not None:
            cache.advance(seq)
        if last_only:
            x = x[:, -1:]
        return self.lm_head(self.norm(x))

    def _step(self, input_ids, cos, sin, mask, buffers, slots):
        """One decode step over the whole static cache (what ``torch.compile`` traces)."""
        x = self.embed_tokens(input_ids)
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
