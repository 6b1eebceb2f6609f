"""Notebook 09 (handout §4.6): the cost terms, the gamma sweep and the batched points of its pair: the
configurations built from the notebook's ``analysis_*`` parameters, written once for the notebook and
:mod:`helpers.gpu_measure`, the measurement of what the result file lacks, and the tables the notebook prints."""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from helpers.experiments.common import check_budget, seed_and_threads
from helpers.results import free_memory, run_metadata

RESULT = "09_speedup_analysis"


def pair_config(params: dict) -> dict:
    """The keys every configuration of the notebook starts with."""
    return {"target": params["analysis_target"], "draft": params["analysis_draft"],
            "dtype": params["analysis_dtype"], "device": params["device"]}


def cost_config(params: dict) -> dict:
    return {"kind": "costs", **pair_config(params), "context_len": params["analysis_prompt_len"],
            "gammas": params["analysis_gammas"]}


def sweep_config(params: dict) -> dict:
    return {"kind": "gamma_sweep", **pair_config(params), "prompts": params["analysis_prompt_count"],
            "prompt_len": params["analysis_prompt_len"], "new_tokens": params["analysis_new_tokens"],
            "gamma_list": params["analysis_gammas"]}


def batch_config(params: dict, batch_size: int) -> dict:
    return {"kind": "batched", **pair_config(params), "batch_size": batch_size, "gamma": params["analysis_batch_gamma"],
            "new_tokens": params["analysis_batch_new_tokens"], "prompt_len": params["analysis_prompt_len"],
            "phases": True}


def configs(params: dict) -> list[dict]:
    """Every configuration the notebook measures: costs, the gamma sweep, one batched point per batch size."""
    return ([cost_config(params), sweep_config(params)]
            + [batch_config(params, b) for b in params["analysis_batch_sizes"]])


@dataclass
class Pair:
    """The loaded pair, its held-out prompts and the metadata of every row it measures."""
    target: torch.nn.Module
    tokenizer: object
    draft: torch.nn.Module
    prompts: list
    meta: dict


def load_pair(params: dict) -> Pair:
    """Seed and threads, both models, ``max(analysis_prompt_count, max(analysis_batch_sizes))`` held-out prompts of
    ``analysis_prompt_len`` tokens, and the rows' metadata (the machine load when the pair was loaded)."""
    from helpers.models import load_model
    from helpers.prompts import heldout_source_prompts

    device = params["device"]
    seed_and_threads(0, device, params["analysis_threads"])
    dtype = getattr(torch, params["analysis_dtype"])
    target, tokenizer = load_model(params["analysis_target"], device=device, dtype=dtype)
    draft, _ = load_model(params["analysis_draft"], device=device, dtype=dtype)
    prompts = heldout_source_prompts(tokenizer, max(params["analysis_prompt_count"],
                                                    max(params["analysis_batch_sizes"])), params["analysis_prompt_len"])
    meta = run_metadata(model_id=params["analysis_target"], weights=target.weights_label,
                        dtype=params["analysis_dtype"], device=device, seed=0, draft_id=params["analysis_draft"],
                        load_average=os.getloadavg()[0])
    return Pair(target, tokenizer, draft, prompts, meta)


def cost_row(params: dict, store, pair: Pair) -> dict:
    """T_T, T_D, T_V(gamma) on the cached first prompt (stored row, or measured)."""
    from helpers.specdec.costs import measure_costs

    context = torch.tensor(pair.prompts[:1], device=params["device"])
    return store.run(cost_config(params), lambda: measure_costs(
        pair.target, pair.draft, context, params["analysis_gammas"], repeats=params["analysis_timing_repeats"]),
        meta=pair.meta)


def sweep_row(params: dict, store, pair: Pair) -> dict:
    """Greedy speculative decoding per gamma against AR on the held-out prompts (stored row, or measured)."""
    from helpers.specdec.costs import speedup_sweep

    return store.run(sweep_config(params), lambda: speedup_sweep(
        pair.target, pair.draft, pair.prompts[:params["analysis_prompt_count"]], params["analysis_gammas"],
        params["analysis_new_tokens"], repeats=params["analysis_generation_repeats"]), meta=pair.meta)


def batch_rows(params: dict, store, pair: Pair) -> list[dict]:
    """One batched point per batch size B, on the first B prompts (stored rows, or measured)."""
    from helpers.specdec.costs import batched_point

    return [store.run(batch_config(params, b), lambda b=b: batched_point(
        pair.target, pair.draft, pair.prompts[:b], params["analysis_batch_new_tokens"], params["analysis_batch_gamma"],
        repeats=params["analysis_batch_repeats"], timing_repeats=params["analysis_timing_repeats"]), meta=pair.meta)
        for b in params["analysis_batch_sizes"]]


def measure(params: dict, store, progress: bool = True) -> None:
    """Everything notebook 09 measures, for what its result file lacks (no model is loaded when nothing is)."""
    results = store(RESULT)
    if all(results.has(config) for config in configs(params)):
        return
    check_budget(results, f"loading {params['analysis_target']}")
    pair = load_pair(params)
    cost_row(params, results, pair)
    sweep_row(params, results, pair)
    batch_rows(params, results, pair)
    del pair
    free_memory()
