"""Notebook 01 (handout §1.1): the empirical check that ``kv_cache_bytes`` equals the bytes a real cache holds. A
miniature of each architecture family (the same query and KV head counts, so GQA is exercised exactly) generates
with transformers' ``DynamicCache`` on the profile's device, one row per family (also measured by the GPU window).
"""
from __future__ import annotations

import pandas as pd
import torch
from transformers import AutoModelForCausalLM

from helpers import memory
from helpers.experiments.packages import notebook_part
from helpers.hardware import resolve_device
from helpers.results import run_metadata

RESULT = "01_gpu_memory_math"
CHECK_MODELS = ("Qwen/Qwen3-8B", "meta-llama/Llama-3.1-8B", "meta-llama/Llama-2-7b-hf", "allenai/OLMo-7B-0724-hf")
DTYPE = torch.float32


def cached_tokens(params: dict) -> int:
    """Positions the cache holds after generation: the prompt and every generated token but the last, which has
    not been fed back yet."""
    return params["check_prompt_len"] + params["check_new_tokens"] - 1


def held_bytes(model_id: str, params: dict, device: torch.device) -> dict:
    """Generate with ``model_id``'s miniature on ``device`` (random weights, seed 0) and count its cache's bytes."""
    config = memory.miniature_config(model_id)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=DTYPE).to(device).eval()
    prompt = torch.randint(0, config.vocab_size, (params["check_batch_size"], params["check_prompt_len"]),
                           device=device)
    out = model.generate(prompt, max_new_tokens=params["check_new_tokens"], min_new_tokens=params["check_new_tokens"],
                         do_sample=False, return_dict_in_generate=True, pad_token_id=0)
    cached = out.past_key_values.get_seq_length()
    if cached != cached_tokens(params):
        raise RuntimeError(f"{model_id}'s cache holds {cached} positions, expected {cached_tokens(params)} (prompt + "
                           "generated - 1): transformers' caching changed; update cached_tokens")
    return {"bytes_held": memory.cache_tensor_bytes(out.past_key_values),
            "bytes_predicted": memory.kv_cache_bytes(config, cached, params["check_batch_size"],
                                                     bytes_per_elem=DTYPE.itemsize)}


def measure(params: dict, store, progress: bool = True) -> pd.DataFrame:
    """The check's table, one row per family, measuring the rows ``store(RESULT)`` lacks on ``params["device"]``."""
    results = store(RESULT)
    meta = run_metadata(model_id="miniatures of " + ", ".join(CHECK_MODELS), weights="random", dtype="float32",
                        device=params["device"], seed=0)
    rows = []
    for model_id in CHECK_MODELS:
        config = {"kind": "kv_bytes", "family_of": model_id, "batch": params["check_batch_size"],
                  "tokens": cached_tokens(params)}
        found = results.run(config, lambda: held_bytes(model_id, params, resolve_device(params["device"])), meta=meta)
        shape = memory.miniature_config(model_id)
        predicted = memory.kv_cache_bytes(shape, config["tokens"], config["batch"], bytes_per_elem=DTYPE.itemsize)
        rows.append({"family of": model_id, "q heads": shape.num_attention_heads,
                     "KV heads": shape.num_key_value_heads, "tokens cached": config["tokens"],
                     "bytes held": found["bytes_held"], "kv_cache_bytes": predicted,
                     "equal": found["bytes_held"] == predicted})
    return pd.DataFrame(rows)


GPU_PARTS = (notebook_part("01", (RESULT,), measure),)  # what the GPU window measures (packages.Part)
