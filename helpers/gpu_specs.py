"""Datasheet facts about common GPUs and the roofline model that turns them into step times.

``data/gpu_specs.csv`` holds VRAM, memory bandwidth, compute capability and dense bf16 tensor throughput
(without 2:4 sparsity, which datasheets print first), each row naming its datasheet. The roofline model:
a forward pass that does F FLOPs and moves M bytes takes at least max(F / peak_flops, M / bandwidth); its
arithmetic intensity F / M against the GPU's ridge point peak_flops / bandwidth says which bound applies.
"""
from __future__ import annotations

import re

import pandas as pd

from helpers import memory
from helpers.paths import DATA_DIR

SPECS_PATH = DATA_DIR / "gpu_specs.csv"


def load_gpu_specs() -> pd.DataFrame:
    """The spec table, with the ridge point (FLOP/byte) computed."""
    specs = pd.read_csv(SPECS_PATH, dtype={"compute_capability": str})
    specs["ridge_flop_per_byte"] = specs["bf16_tensor_tflops"] * 1e12 / (specs["bandwidth_gbs"] * 1e9)
    return specs


def gpu_spec(name: str) -> pd.Series:
    """The row for a GPU, by its table name ('H100 SXM') or a device name ('NVIDIA H100 80GB HBM3')."""
    specs = load_gpu_specs()
    exact = specs[specs["gpu"] == name]
    if len(exact):
        return exact.iloc[0]
    for _, row in specs.iterrows():
        if re.search(row["name_pattern"], name):
            return row
    raise KeyError(f"no datasheet row for GPU {name!r}; add it to {SPECS_PATH} (known: {', '.join(specs['gpu'])})")


def forward_flops_bytes(config, batch_size: int, new_tokens: int, context_len: int,
                        bytes_per_param: int = 2) -> tuple[float, float]:
    """FLOPs and bytes moved by one forward of ``new_tokens`` per row over ``context_len`` cached tokens.

    FLOPs: 2 per parameter per token (every matmul, LM head included) plus attention's QK^T and AV over the
    context. Bytes: all weights once, the rows' KV caches once, and the new tokens' KV written.
    """
    params = memory.param_count(config)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    tokens = batch_size * new_tokens
    attention = 4 * config.num_hidden_layers * config.num_attention_heads * head_dim * (context_len + new_tokens)
    flops = tokens * (2 * params + attention)
    kv = memory.kv_cache_bytes(config, context_len + new_tokens, batch_size, bytes_per_elem=bytes_per_param)
    return float(flops), float(params * bytes_per_param + kv)


def arithmetic_intensity(config, batch_size: int, new_tokens: int, context_len: int) -> float:
    flops, moved = forward_flops_bytes(config, batch_size, new_tokens, context_len)
    return flops / moved


def roofline_seconds(config, gpu: pd.Series, batch_size: int, new_tokens: int, context_len: int,
                     overhead_s: float = 0.0) -> float:
    """Lower bound on a forward's time from the roofline, plus a fixed per-forward ``overhead_s``
    (kernel launches and host work: in eager PyTorch at batch 1 this, not the GPU, often dominates)."""
    flops, moved = forward_flops_bytes(config, batch_size, new_tokens, context_len)
    peak = gpu["bf16_tensor_tflops"] * 1e12
    bandwidth = gpu["bandwidth_gbs"] * 1e9
    return max(flops / peak, moved / bandwidth) + overhead_s


def collect_results(notebook: str) -> pd.DataFrame:
    """Every profile's rows of one notebook's results (``results/*/<notebook>.jsonl``), with a ``profile`` column.

    Comparing GPUs means comparing runs made on different machines, each written under its own profile."""
    from helpers.paths import output_root
    from helpers.results import ResultStore

    frames = []
    for directory in sorted((output_root() / "results").glob("*/")):
        if (directory / f"{notebook}.jsonl").exists():
            frame = ResultStore(directory.name, notebook).frame()
            frames.append(frame.assign(profile=directory.name))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
