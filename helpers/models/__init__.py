"""Models: names and loading, the minimal Qwen3 decoder, the decoding runtime, the CPU pair's trainer.

- ``configs``: the handout's model configs, read offline from ``data/configs/``;
- ``registry``: :func:`load_model` for every name (handout ids, CPU analogs, the trained CPU pair),
  :func:`load_cpu_pair`, random weights built on the meta device;
- ``qwen3``: the minimal Qwen3 decoder with its preallocated KV cache (the one model file);
- ``runtime``: one cached-decoder interface over it, with a transformers ``DynamicCache`` adapter for other
  architectures;
- ``train_cpu_pair``: ``python -m helpers.models.train_cpu_pair`` trains and measures the CPU pair.
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
