"""The handout's model configs, read offline from ``data/configs/`` (no Hub access), and tiny variants of them."""
from __future__ import annotations

import json
from functools import lru_cache

from transformers import AutoConfig

from helpers import paths

# The handout's models, in the order its tables list them.
KNOWN_MODELS = (
    "Qwen/Qwen3-0.6B",
    "Qwen/Qwen3-1.7B",
    "Qwen/Qwen3-4B",
    "Qwen/Qwen3-8B",
    "Qwen/Qwen3-14B",
    "Qwen/Qwen3-32B",
    "meta-llama/Llama-3.1-8B",
    "meta-llama/Llama-3.2-1B",
    "meta-llama/Llama-2-7b-hf",
    "allenai/OLMo-7B-0724-hf",
)
QWEN3_FAMILY = KNOWN_MODELS[:6]


def config_path(model_id: str):
    return paths.CONFIGS_DIR / (model_id.replace("/", "__") + ".json")


@lru_cache(maxsize=None)
def _config_dict(model_id: str) -> str:
    path = config_path(model_id)
    if model_id not in KNOWN_MODELS or not path.exists():
        known = "\n  ".join(KNOWN_MODELS)
        raise KeyError(
            f"unknown model id {model_id!r}: no config in {paths.CONFIGS_DIR}. Known model ids:\n  {known}\n"
            "(ids are case-sensitive, e.g. 'Qwen/Qwen3-8B'; add a config JSON there to support another model)"
        )
    return path.read_text(encoding="utf-8")


def load_config(model_id: str):
    """The transformers config of a handout model, read offline from ``data/configs/``."""
    data = json.loads(_config_dict(model_id))
    model_type = data.pop("model_type")
    data.pop("_name_or_path", None)
    config = AutoConfig.for_model(model_type, **data)
    config._name_or_path = model_id
    return config


def miniature_config(model_id: str, num_layers: int = 2, head_dim: int = 8, vocab_size: int = 512):
    """A tiny config of the same family that keeps the attention layout (query heads, KV heads).

    The KV-cache formula depends on layers, KV heads and head size; keeping the real head counts (e.g.
    Llama-3.1-8B's 32 query / 8 KV heads) lets a CPU check exercise GQA exactly as the real model does.
    """
    config = load_config(model_id)
    heads = config.num_attention_heads
    config.num_hidden_layers = num_layers
    config.head_dim = head_dim
    config.hidden_size = heads * head_dim
    config.intermediate_size = 2 * config.hidden_size
    config.vocab_size = vocab_size
    config.max_position_embeddings = min(config.max_position_embeddings, 4096)
    for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
        setattr(config, name, None)
    if hasattr(config, "layer_types") and config.layer_types is not None:
        config.layer_types = config.layer_types[:num_layers]
    return config
