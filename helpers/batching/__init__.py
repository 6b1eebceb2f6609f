"""Continuous batching with disaggregated prefill and decode (handout §3), small enough to read.

- ``request``: the ``Request`` and its states (queued -> prefill -> decode -> done).
- ``queue``: a priority queue that buckets requests by input length; ``constrained_get(condition)``.
- ``kv_memory``: KV memory accounted in fixed-size blocks (paged); ``does_fit``.
- ``transport``: messages and KV tensors between the two workers over ``torch.distributed``.
- ``model_ops``: batched prefill and a ragged decode batch on a transformers causal LM.
- ``workers``: the prefill and decode loops, each in its own process.
- ``static``: the static-batching baseline (pad to the longest, wait for the slowest).
- ``engine``: run a workload either way and summarise it; ``workload``: seeded workloads.
"""
