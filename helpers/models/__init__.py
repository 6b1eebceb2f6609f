"""Models: names and loading, the minimal decoder (Qwen3, Llama, OLMo) and its KV cache, the decoding runtime, the CPU pair's shapes.

- ``configs``: the handout's model configs, read offline from ``data/configs/``;
- ``registry``: :func:`load_model` for every name (handout ids, CPU analogs, the trained CPU pair),
  :func:`load_cpu_pair`, random weights built on the meta device;
- ``decoder``: the one model file for Qwen3, Llama and OLMo (config, layers, model, loading from transformers);
- ``kv_cache``: its preallocated KV cache and every operation on it (write, roll back, compact, drop, copy rows);
- ``streaming``: a StreamingLLM view of that cache (sinks + recent window) for self-speculation;
- ``runtime``: one cached-decoder interface over it, with a transformers ``DynamicCache`` adapter for other
  architectures; ``graphs``: its decode and verify steps as ``torch.compile`` or captured CUDA graphs;
- ``cpu_pair_shapes``: the CPU pair's shapes (:func:`~helpers.models.cpu_pair_shapes.make_config`);
  ``corpus``: the text it is trained on. Training itself is :mod:`helpers.training` (``python -m helpers.training``).
"""
from helpers.models.registry import (
    ANALOG_PREFIX,
    ANALOGS,
    CPU_PAIR_DIR,
    CPU_PAIR_MODELS,
    DRAFT_FAMILY,
    KNOWN_MODELS,
    PAIR_PREFIX,
    analog_config,
    cpu_pair_info,
    describe,
    init_random_weights_,
    load_cpu_model,
    load_cpu_pair,
    load_cpu_tokenizer,
    load_model,
    model_config,
    parameter_count,
    random_model,
)

__all__ = ["ANALOG_PREFIX", "ANALOGS", "CPU_PAIR_DIR", "CPU_PAIR_MODELS", "DRAFT_FAMILY", "KNOWN_MODELS", "PAIR_PREFIX",
           "analog_config", "cpu_pair_info", "describe", "init_random_weights_", "load_cpu_model", "load_cpu_pair",
           "load_cpu_tokenizer", "load_model", "model_config", "parameter_count",
           "random_model"]
