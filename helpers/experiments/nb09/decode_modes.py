"""The GPU window's parts ``decode`` and ``peers``: how fast the model file decodes each handout model (random weights
of the real configs, bf16, batch 1, 256 cached tokens) in each of its :data:`MODES` (eager, explicit CUDA graphs, the
inductor-compiled layer inside them), beside transformers' own ``generate`` at the same shapes (:data:`PEERS`: eager
with its dynamic cache, what the handout's student runs, and its static cache under ``torch.compile``, its documented
fast path). A row per configuration (``kind`` ``decode_step`` or ``decode_peer``); a mode or peer that fails is
printed and skipped. Read by notebook 09's GPU section and the window's goals.
"""
from __future__ import annotations

import time

import pandas as pd
import torch

from helpers.gpu_specs import memory_bandwidth

DECODE_STEPS = "09_decode_modes"  # the part's result file
MODELS = ("Qwen/Qwen3-0.6B", "Qwen/Qwen3-1.7B", "Qwen/Qwen3-8B", "meta-llama/Llama-3.2-1B", "meta-llama/Llama-3.1-8B",
          "allenai/OLMo-7B-0724-hf")
PEER_MODELS = ("Qwen/Qwen3-8B", "meta-llama/Llama-3.1-8B")  # the targets of the goal "faster than the compiled peer"
MODES = ("eager", "graphs", "compiled")
PEERS = ("hf-eager", "hf-static-compiled")
CONTEXT = 256
PEER_TOKENS = 32  # tokens a peer's timed generate() decodes (its per-token time: the difference to a 1-token one)
PEER_REPEATS = 5  # a peer's generate() of 32 tokens takes about as long as 30 repeats of one step
REPEATS = 30


def settings(dry_run: bool) -> dict:
    """The part's models, context and repeats; ``dry_run``: the Llama analog on the CPU, a few tokens."""
    if dry_run:
        return {"models": ["cpu/Llama-3.1-8B"], "peer_models": ["cpu/Llama-3.1-8B"], "context": 8,
                "repeats": 2, "peer_tokens": 16, "peer_repeats": 2, "dtype": "float32"}
    return {"models": list(MODELS), "peer_models": list(PEER_MODELS), "context": CONTEXT, "repeats": REPEATS,
            "peer_tokens": PEER_TOKENS, "peer_repeats": PEER_REPEATS, "dtype": "bfloat16"}


@torch.inference_mode()
def peer_step_ms(model, context: torch.Tensor, peer: str, new_tokens: int, repeats: int) -> dict:
    """transformers' greedy ``generate`` of ``model`` after ``context`` (1, S): ms per new token as the difference of
    the medians of a ``new_tokens`` and a 1-token generation (timed alternately: the prefill cancels) over
    new_tokens - 1; ``"hf-static-compiled"`` with a ``StaticCache`` of one size for both (nothing recompiles) under
    ``torch.compile``. ``compile_s``: the first two generations' seconds."""
    from transformers import CompileConfig, StaticCache

    from helpers.timing import measure_interleaved, sync

    if peer not in PEERS:
        raise ValueError(f"peer must be one of {PEERS}, got {peer!r}")
    options = dict(do_sample=False, pad_token_id=0)
    if peer == "hf-static-compiled":
        config = CompileConfig(fullgraph=True)
        config._compile_all_devices = context.device.type != "cuda"  # generate() compiles on GPUs by itself
        options["compile_config"] = config

    def generate(n: int):
        def run():
            cache = (StaticCache(config=model.config, max_cache_len=context.shape[1] + new_tokens)
                     if peer == "hf-static-compiled" else None)
            return model.generate(context, max_new_tokens=n, min_new_tokens=n, past_key_values=cache, **options)
        return run

    start = time.perf_counter()
    generate(new_tokens)()
    generate(1)()
    sync(context.device)
    compile_s = time.perf_counter() - start
    runs = measure_interleaved({n: generate(n) for n in (1, new_tokens)}, repeats=repeats, warmup=1,
                               device=context.device, statistic="median")
    per_token = (runs[new_tokens].median - runs[1].median) / (new_tokens - 1)
    return {"wall_ms": per_token * 1e3, "generate_ms": runs[new_tokens].median * 1e3, "compile_s": compile_s,
            "wall_spread": runs[new_tokens].spread}


def measure(p: dict, store, s: dict, fatal: tuple = (), peers: bool = False) -> None:
    """Part ``decode`` (:func:`settings` ``s``): every missing row of :data:`MODES` x models; with ``peers``, part
    ``peers``: of :data:`PEERS` x peer models (a part of its own, after eq5: compiling a whole 8B model under
    ``torch.compile`` is the dearest step of all)."""
    from helpers.experiments.common import check_budget, took, tolerate_graph_failure
    from helpers.experiments.nb09.step_profile import measure_step
    from helpers.models import load_model
    from helpers.results import free_memory, run_metadata

    def config_of(model: str, key: str) -> dict:
        base = {"model": model, "weights": "random", "dtype": s["dtype"], "device": p["device"],
                "context_len": s["context"], "batch_size": 1}
        return ({"kind": "decode_peer", **base, "peer": key, "new_tokens": s["peer_tokens"]} if peers else
                {"kind": "decode_step", **base, "decode": key, "width": 1})

    def run(model, context, key):
        return (peer_step_ms(model, context, key, s["peer_tokens"], s["peer_repeats"]) if peers else
                measure_step(model, context, 1, repeats=s["repeats"], mode=key))

    keys = PEERS if peers else [mode for mode in MODES if mode in s.get("modes", MODES)]  # eager: graphs failed
    rows = store(DECODE_STEPS)
    for name in s["peer_models"] if peers else s["models"]:
        configs = {key: config_of(name, key) for key in keys}
        if all(rows.has(c) for c in configs.values()):
            continue
        check_budget(rows, f"decode rows of {name}")
        with took(rows):
            model, _ = load_model(name, weights="random", device=p["device"], dtype=getattr(torch, s["dtype"]))
            context = torch.randint(0, model.config.vocab_size, (1, s["context"]),
                                    generator=torch.Generator().manual_seed(0)).to(p["device"])
            meta = run_metadata(model_id=name, weights="random", dtype=s["dtype"], device=p["device"], seed=0)
        for key, config in configs.items():
            if rows.has(config):
                continue
            check_budget(rows, f"{key} decode of {name}")
            with took(rows):
                tolerate_graph_failure(key, config, lambda config=config, key=key: rows.run(
                    config, lambda: run(model, context, key), meta=meta), fatal)
        del model, context
        free_memory()


# ------------------------------------------------------------------------------------------------ reading the rows


def decode_table(rows: list[dict]) -> pd.DataFrame:
    """One line per (model, mode or peer): ms per decode step, the HBM floor (the weight bytes a step reads over the
    GPU's datasheet bandwidth, the short context's KV left out) and the step's share of it, kernels per step and per
    layer, and the first call's seconds (compile and capture)."""
    steps = {row["model"]: row for row in rows if row.get("kind") == "decode_step" and row.get("decode_bytes")}
    lines = []
    for row in rows:
        bytes_read = (row if row.get("kind") == "decode_step" else steps.get(row["model"], {})).get("decode_bytes")
        bandwidth = memory_bandwidth(row.get("device_name", ""))
        floor_ms = bytes_read / bandwidth * 1e3 if bytes_read and bandwidth else float("nan")
        kernels = row.get("kernels")
        lines.append({"device_name": row.get("device_name"), "model": row["model"],
                      "mode": row.get("decode") or row.get("peer"), "ms/step": row["wall_ms"],
                      "HBM floor ms": floor_ms, "roofline share": floor_ms / row["wall_ms"],
                      "kernels": kernels,
                      "kernels/layer": kernels / row["num_layers"] if kernels and row.get("num_layers") else None,
                      "compile s": row.get("compile_s"), "graph replays": row.get("graph_replays")})
    return pd.DataFrame(lines)


def speed_against_peer(table: pd.DataFrame, mode: str = "compiled", peer: str = "hf-static-compiled") -> pd.DataFrame:
    """Per model with both: the peer's ms per step over ``mode``'s (above 1: the model file is faster)."""
    pivot = table.pivot_table(index="model", columns="mode", values="ms/step", aggfunc="last")
    if mode not in pivot or peer not in pivot:
        return pd.DataFrame(columns=["model", "ratio"])
    ratio = (pivot[peer] / pivot[mode]).dropna()
    return ratio.rename("ratio").reset_index()


def pair_terms(cost_rows: list[dict]) -> pd.DataFrame:
    """One line per (handout pair, decode mode) of the eq5 part's rows: c, and the break-even alpha at Eq. 5's
    optimal gamma (:func:`helpers.specdec.analysis.break_even_alpha`) with that gamma."""
    from helpers.specdec.analysis import break_even_alpha

    lines = []
    for row in cost_rows:
        verify = {int(g): float(v) for g, v in row.get("verify_ratio", {}).items()}
        alpha, gamma = break_even_alpha(float(row["c"]), verify) if verify else (float("nan"), None)
        lines.append({"target": row["target"], "draft": row["draft"], "decode": row.get("decode", "eager"),
                      "c": float(row["c"]), "break-even alpha": alpha, "at gamma": gamma,
                      "T_T ms": row["target_step_s"] * 1e3, "T_D ms": row["T_D"] * 1e3})
    return pd.DataFrame(lines)
