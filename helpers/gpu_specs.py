"""Datasheet facts about common GPUs and the roofline model that turns them into step times.

``data/gpu_specs.csv`` holds VRAM, memory bandwidth, compute capability and dense bf16 tensor throughput
(without 2:4 sparsity, which datasheets print first), each row naming its datasheet. The roofline model:
a forward pass that does F FLOPs and moves M bytes takes at least max(F / peak_flops, M / bandwidth); its
arithmetic intensity F / M against the GPU's ridge point peak_flops / bandwidth says which bound applies.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

from helpers import memory
from helpers.paths import DATA_DIR, output_root
from helpers.stats import line_fit

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


def memory_bandwidth(device_name: str) -> float | None:
    """Bytes per second of a GPU's memory (datasheet), or None for a device without a datasheet row (a CPU)."""
    try:
        return float(gpu_spec(device_name)["bandwidth_gbs"]) * 1e9
    except KeyError:
        return None


def forward_flops_bytes(config, batch_size: int, new_tokens: int, context_len: int,
                        bytes_per_param: int = 2) -> tuple[float, float]:
    """FLOPs and bytes moved by one forward of ``new_tokens`` per row over ``context_len`` cached tokens.

    FLOPs: 2 per parameter per token (every matmul, LM head included) plus attention's QK^T and AV over the
    context. Bytes: the weights once, the rows' KV caches once, and the new tokens' KV written. Parameters are those
    a forward reads in full (:func:`helpers.memory.decode_param_count`): an input embedding untied from the LM head
    gives one row per token, not its matrix, and is left out of both.
    """
    params = memory.decode_param_count(config)
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


def collect_results(notebook: str, root=None) -> pd.DataFrame:
    """Every profile's rows of one notebook's results (``results/*/<notebook>.jsonl``), with a ``profile`` column.

    Comparing GPUs means comparing runs made on different machines, each written under its own profile.
    ``root``: where ``results/`` lives (default: the output root; ``helpers.paths.REPO_ROOT`` reads the committed
    results, e.g. when a notebook is validated alone in a fresh temporary output root)."""
    frames = []
    for directory in sorted((Path(root) if root is not None else output_root()).joinpath("results").glob("*/")):
        path = directory / f"{notebook}.jsonl"
        if path.exists():
            rows = []
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    continue  # blank, or a row cut short mid-write (ResultStore skips it too)
            if rows:  # the latest row of each configuration, as ResultStore.frame() gives
                frame = pd.DataFrame(rows)
                if "config_key" in frame:
                    frame = frame.drop_duplicates("config_key", keep="last").reset_index(drop=True)
                frames.append(frame.assign(profile=directory.name))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def best_and_worst(rows: pd.DataFrame, metric: str = "speedup", tolerance: float = 0.0) -> pd.DataFrame:
    """The rows with the highest and the lowest ``metric`` (status 'ok' rows only), with a ``which`` column.

    ``tolerance`` (relative, e.g. the measured run-to-run spread of the timings): rows whose ``metric`` lies within it
    of the best (``best / value - 1 <= tolerance``) or of the worst (``value / worst - 1 <= tolerance``) cannot be told
    apart from it by one measurement each; the ``ties`` column holds, per picked row, the frame of all such rows
    (the picked one included, sorted by the metric) and ``n_tied`` their number (1: no tie). :func:`describe_ties`
    names them.

    Where the rows carry a ``handout_gamma`` flag (notebook 07 writes it: gamma is one of the handout's
    {2, 3, 5, 7}), only the flagged rows compete: §4.5 reruns the best and worst configurations of §4.4's
    Table 1, not the extra gammas a sweep adds to locate the optimum. Rows without the flag (older results)
    all compete."""
    if rows.empty or metric not in rows:
        raise ValueError(f"no rows with a {metric!r} column to pick the best and worst configuration from")
    ok = rows[rows["status"] == "ok"] if "status" in rows else rows
    if "handout_gamma" in ok:
        flagged = ok["handout_gamma"].astype("boolean").fillna(False).astype(bool)
        if not flagged.any():
            raise ValueError("no row has handout_gamma set: the handout's gammas {2, 3, 5, 7} were not measured")
        ok = ok[flagged]
    ok = ok.dropna(subset=[metric])
    if ok.empty:
        raise ValueError(f"no successful rows with a {metric!r} value")
    picked = ok.loc[[ok[metric].idxmax(), ok[metric].idxmin()]].copy()
    picked.insert(0, "which", ["best", "worst"])
    top, bottom = float(ok[metric].max()), float(ok[metric].min())
    eps = 1e-12
    ties = [ok[top / ok[metric] - 1 <= tolerance + eps].sort_values(metric, ascending=False),
            ok[ok[metric] / bottom - 1 <= tolerance + eps].sort_values(metric)]
    picked = picked.reset_index(drop=True)
    picked["ties"] = pd.Series(ties, dtype=object)
    picked["n_tied"] = [len(t) for t in ties]
    return picked


def describe_ties(tied: pd.DataFrame, group: str = "draft", key: str = "gamma") -> str:
    """The configurations of one ``ties`` frame of :func:`best_and_worst` as a short label, per ``group``:
    "cpu-pair/draft at gamma in {2, 7}" (one: "cpu-pair/draft at gamma=7"); the metric's range is the caller's."""
    parts = []
    for name, rows in tied.groupby(group, sort=False):
        keys = sorted(int(k) for k in rows[key])
        parts.append(f"{name} at {key}={keys[0]}" if len(keys) == 1 else
                     f"{name} at {key} in {{{', '.join(str(k) for k in keys)}}}")
    return "; ".join(parts)


def run_to_run_spread(rows: pd.DataFrame, column: str = "target_step_s", by: str = "target",
                      per: str = "draft") -> float:
    """The largest relative spread (max/min - 1) of one quantity timed once per ``per`` for the same ``by``: e.g. a
    target's T_T, timed once before each of its pairs' sweeps under the same conditions. Any difference between those
    timings is run-to-run variation, the noise floor of a single measurement; nan where no ``by`` has two ``per``."""
    spread = float("nan")
    for _, group in rows.dropna(subset=[column]).groupby(by):
        values = group.groupby(per)[column].first()
        if len(values) >= 2:
            spread = float(np.nanmax([spread, values.max() / values.min() - 1]))
    return spread


def fit_layer_cost(layers, seconds) -> tuple[float, float]:
    """Least-squares fit ``seconds = fixed + per_layer * layers`` over models of different depth.

    Returns ``(fixed_s, per_layer_s)``, each clipped at 0. Needs at least two distinct layer counts."""
    x, y = np.asarray(layers, dtype=float), np.asarray(seconds, dtype=float)
    if x.shape != y.shape or len(np.unique(x)) < 2:
        raise ValueError(f"need times of models with at least two different layer counts, got layers={list(x)}")
    line = line_fit(x, y, clamp="nonnegative")
    return line.intercept, line.slope


def layer_cost_fit(layers, seconds, names=None) -> dict:
    """:func:`fit_layer_cost` with what a reader needs to judge it: ``fixed_s``, ``per_layer_s`` (clipped at 0),
    ``clipped`` (the least-squares intercept or slope was negative and set to 0, so the line no longer minimises the
    squared error), ``points``, ``r2`` of the fitted line (nan below three points), and ``residuals``: a frame of
    measured, fitted and residual relative to the measurement ((measured - fitted) / measured) per point, indexed by
    ``names``."""
    x, y = np.asarray(layers, dtype=float), np.asarray(seconds, dtype=float)
    fixed, per_layer = fit_layer_cost(x, y)
    line = line_fit(x, y, clamp="nonnegative")
    fitted = line(x)
    residuals = pd.DataFrame({"layers": x.astype(int), "measured (ms)": y * 1e3, "fitted (ms)": fitted * 1e3,
                              "residual": (y - fitted) / y}, index=list(names) if names is not None else None)
    return {"fixed_s": fixed, "per_layer_s": per_layer, "clipped": line.clamped,
            "points": len(x), "r2": line.r2,
            "residuals": residuals, "max_abs_residual": float(residuals["residual"].abs().max())}


def map_by_size(source: dict, dest: dict) -> dict:
    """Map each ``source`` model to a ``dest`` model of the same size rank (both: id -> parameter count).

    The smallest source model maps to the smallest destination model, the largest to the largest, and ranks
    in between proportionally; used to carry a measured pair's drafts over to the handout's drafts."""
    if not source or not dest:
        raise ValueError("map_by_size needs at least one source and one destination model")
    src, dst = sorted(source, key=source.get), sorted(dest, key=dest.get)
    if len(src) == 1:
        return {src[0]: dst[-1]}
    return {name: dst[round(i * (len(dst) - 1) / (len(src) - 1))] for i, name in enumerate(src)}
