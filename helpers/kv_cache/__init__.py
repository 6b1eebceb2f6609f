"""The KV cache (handout §2): the minimal decoder's cache, generation with and without it, sweeps, benchmark.

- ``decode``: :func:`generate`, greedy generation with the cache or recomputing the prefix every step;
- ``sweep``: notebook 03's paired sweeps (with vs without cache), growth fits and per-step costs;
- ``bench``: ``python -m helpers.bench kv_cache``.

The model lives in :mod:`helpers.models.decoder`, its cache in :mod:`helpers.models.kv_cache`; the names a KV-cache
lesson needs are re-exported here (``kv_cache.from_hf``, ``kv_cache.KVCache``, ``kv_cache.Attention``).
"""
from helpers.kv_cache.decode import generate
from helpers.models.kv_cache import KVCache
from helpers.models.decoder import Attention, DecoderConfig, MiniDecoder, from_hf

__all__ = ["Attention", "DecoderConfig", "KVCache", "MiniDecoder", "from_hf", "generate"]
