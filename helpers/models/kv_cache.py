"""The minimal decoder's KV cache: preallocated keys and values, and every operation on them.

The cache (:class:`KVCache`) is allocated once: for every layer one keys and one values tensor of shape
``(batch, kv_heads, capacity, head_dim)``. Each row has its own fill level (``lengths[b]`` slots used), so one
cache serves

* a single sequence or a batch of equal-length rows (the fast path: slice writes, a causal mask);
* a *ragged* batch: left-padded prompts whose padding slots are marked invalid, per-row positions for RoPE;
* rows that roll back by different amounts (speculative decoding: :meth:`KVCache.rollback`);
* a *token tree* of new tokens: any ``(q, q)`` mask over the new tokens with explicit position ids, after
  which :meth:`KVCache.compact` keeps the accepted path in place (nothing is recomputed);
* rows that leave (:meth:`KVCache.select_rows`, :meth:`KVCache.retain_rows`), join (:meth:`KVCache.append_rows`)
  or are copied into a new cache (:meth:`KVCache.copy`: a generation consumes the cache it is given).

A forward pass of :class:`~helpers.models.decoder.MiniDecoder` writes the new tokens' keys and values into each row's
next free slots (:meth:`KVCache.update`) and attends over the stored ones through a boolean mask
(:meth:`KVCache.attention_mask`). With ``static_shapes`` the attention always spans the whole buffer (the same
tensor shapes at every decode step, which ``torch.compile`` and CUDA graphs need); otherwise it spans only the
slots in use.

Position of the token in slot ``s`` of row ``b``: ``s - pads[b]`` (``pads[b]`` = padding slots at the row's
start). Rows never hold padding after their first token, so rollback and compaction keep positions right.
Only this file reads or writes the cache's private fields; callers use its methods.
"""
from __future__ import annotations

import copy as _copy
import operator
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

if TYPE_CHECKING:  # only for annotations: the model file imports this one
    from helpers.models.decoder_config import DecoderConfig


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

    def new_positions(self, new: int, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Positions of ``new`` tokens about to be written: (new,) when every row is at the same one, else
        (batch, new); a ragged prefill's (``attention_mask`` 0 marks its left padding) start at 0 in every row."""
        if self.uniform:
            start = self.lengths[0]
            return torch.arange(start, start + new, device=self.device)
        if attention_mask is not None:
            return (attention_mask.to(self.device).long().cumsum(1) - 1).clamp(min=0)
        return self.positions()[:, None] + torch.arange(new, device=self.device)

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

        The lengths move once per forward pass (:meth:`advance`), after every layer has written. (A static step
        writes through a slot tensor instead, see :mod:`helpers.models.graphs`.)
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

    # -------------------------------------------------------------- rows leaving, joining, copied

    def select_rows(self, rows) -> None:
        """Keep only ``rows`` (indices, in the order given): finished sequences leave the batch."""
        rows = self._row_indices(rows)
        index = torch.tensor(rows, dtype=torch.long, device=self.device)
        self.keys = [k.index_select(0, index) for k in self.keys]
        self.values = [v.index_select(0, index) for v in self.values]
        self._keep_row_state(rows)

    def retain_rows(self, rows) -> list[int]:
        """Keep only ``rows`` (a set of indices) with the fewest copies; return the kept rows' new order.

        :meth:`select_rows` copies every kept row into new buffers — a whole cache's bytes each time a row leaves,
        as much traffic as a long-context decode step. Here each kept row past the new batch size moves into the
        slot of a leaving row, and the buffers become views of their first rows: over a generation in which all
        rows leave one by one, at most one cache's worth of rows is copied. ``order[i]`` is the old index of the
        row now at index ``i``.
        """
        keep = sorted(set(self._row_indices(rows)))
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
        self._keep_row_state(order)
        return order

    def copy(self, rows=None) -> KVCache:
        """A new cache with its own buffers holding ``rows`` of this one: their stored keys and values, padding
        and lengths (``None``: every row; an int ``n``: the first ``n``; or a list of indices, in that order).

        A generation consumes the cache it is given (it writes, rolls back and drops rows), so a run that
        starts twice from one prefill starts each time from a copy. This cache is left as it is.
        """
        if rows is None:
            rows = range(self.batch_size)
        elif isinstance(rows, int):
            if not 1 <= rows <= self.batch_size:
                raise ValueError(f"can copy 1 to {self.batch_size} rows, got {rows}")
            rows = range(rows)
        copied = _copy.copy(self)  # shares every field until select_rows replaces it with a new one
        copied.select_rows(rows)  # index_select: new buffers, even for every row in order
        return copied

    def _row_indices(self, rows) -> list[int]:
        """``rows`` as a list of valid row indices, or a ValueError that says what was wrong."""
        try:
            indices = [operator.index(r) for r in rows]
        except TypeError:
            raise ValueError(f"rows must be integer row indices, got {rows!r}") from None
        bad = [r for r in indices if not 0 <= r < self.batch_size]
        if bad:
            raise ValueError(f"row indices {bad} are outside the cache's {self.batch_size} rows")
        return indices

    def _keep_row_state(self, rows: list[int]) -> None:
        """Padding, validity and lengths of ``rows`` (old indices, in their new order), after the buffers moved."""
        index = torch.tensor(rows, dtype=torch.long, device=self.device)
        self.pads = self.pads.index_select(0, index)
        self._pads_host = [self._pads_host[r] for r in rows]
        if self.valid is not None:
            self.valid = self.valid.index_select(0, index)
        self.set_lengths([self.lengths[r] for r in rows])

    def reserve(self, capacity: int) -> None:
        """Grow every row's room to ``capacity`` slots (a copy; for batches whose output length is unknown)."""
        if capacity > self.capacity:
            grow = lambda t: F.pad(t, (0, 0, 0, capacity - t.shape[2]))  # noqa: E731 (pads the slot axis)
            self.keys, self.values = [grow(k) for k in self.keys], [grow(v) for v in self.values]
            if self.valid is not None:
                self.valid = F.pad(self.valid, (0, capacity - self.valid.shape[1]), value=True)

    def append_rows(self, rows: list[torch.Tensor], capacity: int = 0) -> None:
        """New rows join the batch with their cached keys/values, ``rows[i]`` shaped
        ``(layers, 2, kv_heads, length_i, head_dim)`` (what a prefill worker sends); each starts at slot 0. Every
        row gets room for at least ``capacity`` slots."""
        lengths = [row.shape[3] for row in rows]
        self.reserve(max(lengths + [capacity]))
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
