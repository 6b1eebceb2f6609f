"""A StreamingLLM view of a :class:`~helpers.models.kv_cache.KVCache`: attention-sink tokens plus a recent window.

Long-context self-speculation (notebook 11, MagicDec) drafts with the model itself, but lets the draft attend
only to each row's first ``sinks`` tokens and its last ``window`` stored tokens (StreamingLLM: the first tokens
soak up attention mass that softmax must put somewhere, the recent ones carry most of the information). The
view is passed to the model in place of the cache::

    logits = model(next_tokens, StreamingView(cache, sinks=4, window=256))

It writes the new tokens' keys and values into the SAME cache (no second copy of the KV) and hands attention
only the ``sinks + window + new`` slots it gathers per row, so a draft step reads a bounded number of KV bytes
whatever the context length: that is what keeps the draft cheap when the KV cache, not the weights, dominates
memory traffic. Positions stay absolute (RoPE sees the true distance to every visible token).

Everything but :meth:`attention_mask` and :meth:`update` is the underlying cache's (the model's forward calls
``check_room``, ``positions``, ``advance`` ... on the view and they reach the cache).
"""
from __future__ import annotations

import torch

from helpers.models.kv_cache import KVCache


class StreamingView:
    """The draft's view of ``cache``: per row its first ``sinks`` real tokens, its last ``window`` stored tokens
    and the tokens being added (causal among themselves)."""

    def __init__(self, cache: KVCache, *, sinks: int, window: int):
        if cache.static_shapes:
            raise ValueError("a streaming view gathers a different set of slots every step: use a cache made "
                             "without static_shapes")
        if sinks < 0 or window < 1:
            raise ValueError(f"need sinks >= 0 and window >= 1, got sinks={sinks}, window={window}")
        self.cache, self.sinks, self.window = cache, int(sinks), int(window)
        self._index: torch.Tensor | None = None  # (batch, 1, slots, 1) or (slots,) when every row agrees

    def __getattr__(self, name):  # everything the view does not change is the cache's
        return getattr(self.cache, name)

    def attention_mask(self, new: int, tree_mask: torch.Tensor | None = None):
        """Prepare the gather of this forward's visible slots; return the mask over them (None: all visible)."""
        if tree_mask is not None:
            raise ValueError("a streaming view attends causally over the new tokens; tree masks are not supported")
        cache, device = self.cache, self.cache.device
        fresh_mask = None if new == 1 else torch.ones(new, new, dtype=torch.bool, device=device).tril()
        if cache.uniform:  # every row stores the same slots: one index for all rows, a shared mask
            stored = cache.lengths[0]
            kept = list(range(min(self.sinks, max(stored - self.window, 0)))) + list(
                range(max(stored - self.window, 0), stored))
            self._index = torch.tensor(kept + list(range(stored, stored + new)), device=device)
            if fresh_mask is None:
                return None
            return torch.cat([fresh_mask.new_ones(new, len(kept)), fresh_mask], dim=1)[None, None]
        lengths, pads = cache.lengths_tensor()[:, None], cache.pads[:, None]
        sink = pads + torch.arange(self.sinks, device=device)
        recent = lengths - self.window + torch.arange(self.window, device=device)
        fresh = lengths + torch.arange(new, device=device)
        # a sink inside the window would be seen twice; a window slot before the row's first token is padding
        stored_visible = torch.cat([sink < lengths - self.window, recent >= pads], dim=1)  # (batch, sinks + window)
        index = torch.cat([sink, recent, fresh], dim=1).clamp(0, cache.capacity - 1)
        self._index = index[:, None, :, None]
        if fresh_mask is None:
            fresh_mask = torch.ones(1, 1, dtype=torch.bool, device=device)
        visible = torch.cat([stored_visible[:, None, :].expand(-1, new, -1),
                             fresh_mask.expand(cache.batch_size, new, new)], dim=2)
        return visible[:, None]  # (batch, 1, new, sinks + window + new)

    def update(self, layer: int, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write the new keys/values into the cache, then return only the visible slots."""
        self.cache.update(layer, keys, values)
        stored_keys, stored_values = self.cache.keys[layer], self.cache.values[layer]
        if self._index.dim() == 1:
            return stored_keys.index_select(2, self._index), stored_values.index_select(2, self._index)
        index = self._index.expand(-1, keys.shape[1], -1, keys.shape[3])
        return stored_keys.gather(2, index), stored_values.gather(2, index)
