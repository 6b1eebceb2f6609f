"""Continuous batching with disaggregated prefill and decode (handout §3), small enough to read.

- ``request``: the ``Request`` and its states (queued -> prefill -> decode -> done).
- ``queue``: a priority queue that buckets requests by input length; ``constrained_get(condition)``.
- ``kv_memory``: KV memory accounted in fixed-size blocks (paged); ``does_fit``.
- ``transport``: messages and KV tensors between the two workers over ``torch.distributed``.
- ``model_ops``: batched prefill and a ragged decode batch on the workbook's model file.
- ``workers``: the prefill and decode loops, each in its own process.
- ``static``: the static-batching baseline (pad to the longest, wait for the slowest).
- ``engine``: run a workload either way and summarise it; ``workload``: seeded workloads.
- ``bench``: both policies on both workloads (``python -m helpers.bench batching``); ``plots``: the notebook's
  figures (import it as ``from helpers.batching import plots``; it is not imported here, so the worker
  processes do not load matplotlib).

The names below are what notebook 05 and the tests use.
"""
from helpers.batching.bench import reference_outputs
from helpers.batching.engine import (RunResult, WorkerFailed, full_batch_share, latency_by_length, run_continuous,
                                     run_static_baseline, step_time_by_batch, summarize)
from helpers.batching.model_ops import NamedModel, PretrainedDir, divergence_margin, generate_alone, model_max_len
from helpers.batching.request import Request, State
from helpers.batching.workers import EngineConfig
from helpers.batching.workload import HIGH_VARIANCE_SIGMA, WORKLOADS, make_workload, prompt_token_stream

__all__ = [
    "EngineConfig", "HIGH_VARIANCE_SIGMA", "NamedModel", "PretrainedDir", "Request", "RunResult", "State", "WORKLOADS",
    "WorkerFailed", "divergence_margin", "full_batch_share", "generate_alone", "latency_by_length", "make_workload",
    "model_max_len", "prompt_token_stream",
    "reference_outputs", "run_continuous", "run_static_baseline", "step_time_by_batch", "summarize",
]
