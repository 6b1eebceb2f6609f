"""One model and its KV cache behind the three calls speculative decoding makes: extend, roll back, length.

Two runtimes implement it, and :func:`cached_decoder` picks one per model:

* ``"minimal"`` — :mod:`helpers.kv_cache`'s plain Qwen3 decoder sharing the transformers model's weights, with a
  preallocated cache (rolling back lowers a length pointer). On a CPU a small model's decode step is mostly
  framework overhead, and this runtime has far less of it than transformers' generic forward (mask builders,
  cache objects, output dataclasses): the CPU pair's 1-layer draft costs about 0.27 ms a token here against
  0.42 ms through transformers (target: 3.8 vs 4.6 ms), so the cost ratio c of Eq. 5 drops.
* ``"transformers"`` — the model's own forward with a ``DynamicCache`` (rolled back with ``crop(-n)``), for
  every architecture the minimal decoder does not implement (Llama, OLMo, Qwen3 with rope scaling or sliding
  windows).

``"auto"`` takes the minimal runtime wherever it applies, else transformers. The autoregressive baseline, the
speculative generator and the Eq. 5 cost measurements all go through here, so each comparison runs both sides
on the same runtime.
"""
from __future__ import annotations

import torch

RUNTIMES = ("auto", "minimal", "transformers")


class TransformersDecoder:
    """A transformers causal LM with a ``DynamicCache``."""

    runtime = "transformers"

    def __init__(self, model):
        from transformers import DynamicCache

        self.model = model
        self.cache = DynamicCache(config=model.config)

    @property
    def length(self) -> int:
        return self.cache.get_seq_length()

    def extend(self, input_ids: torch.Tensor, last_only: bool = True) -> torch.Tensor:
        """Logits (batch, positions, vocab) for ``input_ids`` placed after the cached tokens; caches them."""
        return self.model(input_ids=input_ids, past_key_values=self.cache, use_cache=True,
                          logits_to_keep=1 if last_only else 0).logits

    def rollback(self, tokens: int) -> None:
        """Forget the last ``tokens`` cached tokens."""
        if tokens:
            self.cache.crop(-tokens)  # transformers 5.x: a NEGATIVE count removes that many tokens


class MinimalDecoder:
    """:class:`helpers.kv_cache.MiniQwen3` (same weight tensors) with a preallocated ``KVCache``."""

    runtime = "minimal"

    def __init__(self, model, capacity: int, batch_size: int = 1):
        self.model = _minimal_view(model)
        self.cache = self.model.new_cache(batch_size, min(capacity, self.model.config.max_seq_len))

    @property
    def length(self) -> int:
        return self.cache.length

    def extend(self, input_ids: torch.Tensor, last_only: bool = True) -> torch.Tensor:
        return self.model(input_ids, self.cache, last_only=last_only)

    def rollback(self, tokens: int) -> None:
        self.cache.crop(self.cache.length - tokens)


def _minimal_view(model):
    """The minimal decoder over ``model``'s weights, built once per model (and rebuilt if its weights moved)."""
    from helpers.kv_cache import from_hf

    key = model.get_input_embeddings().weight.data_ptr()
    view = getattr(model, "_workbook_minimal_view", None)
    if view is None or view[0] != key:
        view = (key, from_hf(model))
        object.__setattr__(model, "_workbook_minimal_view", view)  # a plain attribute, not a submodule
    return view[1]


def minimal_supported(model) -> bool:
    """Whether the minimal decoder implements this model's architecture (Qwen3, plain RoPE, full attention)."""
    from helpers.kv_cache import DecoderConfig

    try:
        DecoderConfig.from_hf(model.config)
    except (ValueError, AttributeError):
        return False
    return True


def resolve_runtime(runtime: str, *models) -> str:
    """The runtime every one of ``models`` will use: ``auto`` becomes minimal only if all support it."""
    if runtime not in RUNTIMES:
        raise ValueError(f"unknown runtime {runtime!r}; choose one of {RUNTIMES}")
    if runtime == "auto":
        return "minimal" if all(minimal_supported(m) for m in models) else "transformers"
    if runtime == "minimal":
        from helpers.kv_cache import DecoderConfig

        for model in models:
            DecoderConfig.from_hf(model.config)  # raises the error that says what the minimal decoder lacks
    return runtime


def cached_decoder(model, runtime: str, capacity: int, batch_size: int = 1):
    """A fresh cache for ``model`` on a resolved ``runtime`` ("minimal" or "transformers"), room for ``capacity``
    tokens per row (the minimal runtime preallocates them; rows advance together)."""
    if runtime == "minimal":
        return MinimalDecoder(model, capacity, batch_size)
    if runtime == "transformers":
        return TransformersDecoder(model)
    raise ValueError(f"resolve the runtime first (resolve_runtime); got {runtime!r}")
