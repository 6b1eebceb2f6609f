"""Notebook 13 (drafting from the target itself: Medusa heads and a feature-level draft): its workloads, method list
and result rows from the parameters, and the analysis it prints.

Every method runs on the same prompts in one interleaved comparison (:func:`helpers.experiments.tree_study.
compare_methods`): AR, the distilled draft's linear speculation and its best dynamic tree (notebook 10's), prompt
lookup, Medusa heads as a chain and as static trees, and the feature draft as a chain, with and without its
confidence stop. Two workloads: held-out text like the training corpus (the CPU prompts, every source), and text far
from it (the handout's GPU prompts: English summarisation, QA, translation, chat, read by a Python-trained pair).
"""
from __future__ import annotations

import os

import numpy as np
import pandas as pd

from helpers.experiments.tree_study import depth_acceptance, expected_tau, predicted_speedup, summarise_methods

RESULTS = "13_drafting_from_the_target"
PARAMETERS = ("device", "fd_target", "fd_draft", "fd_dtype", "fd_threads", "fd_prompt_count", "fd_far_count",
              "fd_new_tokens", "fd_repeats", "fd_gammas", "fd_dynamic", "fd_medusa_trees", "fd_stop_below",
              "fd_cost_repeats")
FAMILIES = {"linear": "draft model", "dynamic": "draft model", "lookup": "prompt lookup", "medusa": "Medusa heads",
            "eagle": "feature draft"}


def specs(params: dict) -> list[dict]:
    """AR first, then the draft model's linear γ and dynamic tree, prompt lookup, Medusa (chain, then each static
    tree) and the feature draft (each γ, then the largest γ with the confidence stop)."""
    depth, topk, budget = params["fd_dynamic"]
    gammas = [int(g) for g in params["fd_gammas"]]
    return ([{"method": "ar"}]
            + [{"method": "linear", "gamma": g} for g in gammas]
            + [{"method": "dynamic", "depth": int(depth), "topk": int(topk), "budget": int(budget)},
               {"method": "lookup", "ngram": 3, "num_draft": 8, "adaptive": False},
               {"method": "medusa", "topk": None}]
            + [{"method": "medusa", "topk": [int(w) for w in shape]} for shape in params["fd_medusa_trees"]]
            + [{"method": "eagle", "gamma": g} for g in gammas]
            + [{"method": "eagle", "gamma": max(gammas), "stop_below": float(params["fd_stop_below"])}])


def workloads(params: dict, tokenizer) -> dict:
    """``{workload: encoded cases}``: ``held-out`` (CPU prompts, round-robin over sources) and ``far`` (the GPU
    profile's prompts, round-robin over theirs)."""
    from helpers.prompts import encode_prompts, load_prompts, select_prompts

    return {"held-out": encode_prompts(tokenizer, select_prompts(load_prompts("cpu"), params["fd_prompt_count"]),
                                       params["device"]),
            "far": encode_prompts(tokenizer, select_prompts(load_prompts("gpu"), params["fd_far_count"]),
                                  params["device"], max_prompt_tokens=512)}


def _setup(params: dict) -> dict:
    return {"target": params["fd_target"], "draft": params["fd_draft"], "dtype": params["fd_dtype"],
            "device": params["device"], "threads": params["fd_threads"]}


def configs(params: dict, cases: dict) -> dict:
    """Every result-store configuration: ``"costs"`` and ``(workload, prompt id)`` for the method comparison."""
    found = {"costs": {"kind": "costs", **_setup(params), "repeats": params["fd_cost_repeats"],
                       "gammas": [int(g) for g in params["fd_gammas"]]}}
    for workload, group in cases.items():
        for case in group:
            found[workload, case["id"]] = {"kind": "methods", **_setup(params), "workload": workload,
                                           "prompt": case["id"], "new_tokens": params["fd_new_tokens"],
                                           "repeats": params["fd_repeats"], "specs": specs(params)}
    return found


def load_models(params: dict) -> tuple:
    """``(target, drafters, tokenizer)``: the drafters as :func:`~helpers.experiments.tree_study.run_method` takes
    them: the distilled draft, the Medusa heads and the feature draft of the CPU pair."""
    import torch

    from helpers.models import load_model
    from helpers.specdec import load_feature_draft, load_medusa_heads

    dtype = getattr(torch, params["fd_dtype"])
    target, tokenizer = load_model(params["fd_target"], device=params["device"], dtype=dtype)
    draft, _ = load_model(params["fd_draft"], device=params["device"], dtype=dtype)
    drafters = {"draft": draft, "medusa": load_medusa_heads(target), "eagle": load_feature_draft(target)}
    return target, drafters, tokenizer


def measure(params: dict, store, progress: bool = True, *, models=None, cases: dict | None = None) -> dict:
    """Measure what ``store(RESULTS)`` lacks; returns ``{"costs": ..., "rows": {workload: every method's runs}}``.
    ``models``: :func:`load_models`' result when the caller has it; ``store.budget`` (the GPU window's) is checked
    before loading."""
    import torch
    from tqdm.auto import tqdm

    from helpers.experiments.tree_study import compare_methods
    from helpers.results import run_metadata

    if params["device"] == "cpu" and params["fd_threads"] > 0:
        torch.set_num_threads(params["fd_threads"])
    if models is None:
        budget = getattr(store, "budget", None)
        if budget is not None:
            budget.check(f"loading {params['fd_target']} and its drafters")
        models = load_models(params)
    target, drafters, tokenizer = models
    cases = cases if cases is not None else workloads(params, tokenizer)
    results, wanted = store(RESULTS), configs(params, cases)
    meta = run_metadata(model_id=params["fd_target"], weights=target.weights_label, dtype=params["fd_dtype"],
                        device=params["device"], seed=0, draft_id=params["fd_draft"], load_average=os.getloadavg()[0])
    costs = results.run(wanted["costs"], lambda: step_costs(target, drafters, cases["held-out"][0]["input_ids"],
                                                            wanted["costs"]["gammas"], params["fd_cost_repeats"]),
                        meta=meta)
    rows = {}
    for workload, group in cases.items():
        rows[workload] = []
        for case in tqdm(group, desc=workload, disable=not progress):
            done = results.run(wanted[workload, case["id"]], lambda: {"runs": compare_methods(
                target, drafters, [case], specs(params), params["fd_new_tokens"], repeats=params["fd_repeats"])},
                meta=meta)
            rows[workload] += [{**row, "workload": workload} for row in done["runs"]]
    return {"costs": costs, "rows": rows}


def step_costs(target, drafters: dict, context, gammas, repeats: int) -> dict:
    """Median seconds of each drafter's step alone and of the target's forwards, after a cached ``context``:
    ``T_T`` (one target token), ``T_V[n]`` (n target positions), and one draft step of the distilled draft, of the
    Medusa heads (all K guesses) and of the feature draft (``c`` = step / T_T)."""
    import torch

    from helpers.experiments.specdec_costs import forward_time
    from helpers.timing import measure as time_it

    median = lambda model, n: float(np.median(forward_time(model, context, n, all_logits=n > 1,  # noqa: E731
                                                           repeats=repeats).samples))
    costs = {"T_T": median(target, 1), "T_V": {int(n): median(target, int(n)) for n in range(1, max(gammas) + 2)},
             "draft": median(drafters["draft"], 1)}
    with torch.inference_mode():
        hidden = target(input_ids=context, output_hidden_states=True).hidden_states[-1]
        features, tokens = hidden[:, :-1], context[:, 1:]
        heads, eagle = drafters["medusa"], drafters["eagle"]
        costs["medusa"] = time_it(lambda: heads(hidden[:, -1]), warmup=2, repeats=repeats).median

        def feature_step():  # one token on a cache holding the context's pairs, then rolled back
            eagle(hidden[:, -1:], context[:, -1:], cache, last_only=True)
            cache.rollback(1)

        cache = eagle.new_cache(context.shape[1] + 4)
        eagle(features, tokens, cache, last_only=True)
        costs["eagle"] = time_it(feature_step, warmup=2, repeats=repeats).median
    costs["c"] = {name: costs[name] / costs["T_T"] for name in ("draft", "medusa", "eagle")}
    return costs


# ------------------------------------------------------------------------------------------------ analysis


def family(label: str) -> str:
    return FAMILIES.get(label.split()[0], "AR") if label != "AR" else "AR"


def comparison(rows: list[dict]) -> pd.DataFrame:
    """Per method (pooled over the workload's prompts): speedup over AR, τ, draft/verify shares, lossless, and
    which family drafted."""
    summary = summarise_methods(rows)
    summary.insert(1, "drafter", summary.label.map(family))
    return summary


def alpha_by_position(rows: list[dict], labels) -> pd.DataFrame:
    """a_d (the chance a round's accepted chain reaches draft position d, given d - 1) per method, by source."""
    frame = pd.DataFrame(rows)
    out = []
    for (label, source), group in frame[frame.label.isin(labels)].groupby(["label", "source"], sort=False):
        rates = depth_acceptance([n for per_round in group.accepted_per_round for n in per_round])
        out += [{"label": label, "source": source, "position": d + 1, "alpha": rate} for d, rate in enumerate(rates)
                if rate == rate]
    return pd.DataFrame(out)


def costs_in_round(rows: list[dict]) -> pd.DataFrame:
    """c in a round: the measured draft seconds per draft step over the measured AR seconds per token, pooled over
    the prompts (what the round really paid, next to the step timed alone)."""
    frame = pd.DataFrame(rows)
    ar = frame[frame.method == "ar"]
    t_t = ar.seconds.sum() / ar.new_tokens.sum()
    drafted = frame[(frame.draft_forwards > 0) & frame.method.isin(["linear", "medusa", "eagle"])]
    grouped = drafted.groupby("label", sort=False)[["draft_s", "draft_forwards"]].sum()
    return (grouped.draft_s / grouped.draft_forwards / t_t).rename("c_round").reset_index()


def eq5_table(rows: list[dict], costs: dict, summary: pd.DataFrame) -> pd.DataFrame:
    """Eq. 5 for each chain method from its measured acceptance by position and its step cost alone: τ = 1 +
    Σ_d Π_{j<=d} a_j, speedup = τ / (γ c + T_V(γ+1)/T_T), next to the measured τ and speedup."""
    frame = pd.DataFrame(rows)
    out = []
    for label, group in frame[frame.method.isin(["linear", "medusa", "eagle"])].groupby("label", sort=False):
        spec = group.spec.iloc[0]
        if spec.get("topk") or spec.get("stop_below"):
            continue  # trees and the confidence stop draft a varying number of tokens: no single γ
        gamma = int(np.max([d for per_round in group.depth_per_round for d in per_round]))
        rates = depth_acceptance([n for per_round in group.accepted_per_round for n in per_round])[:gamma]
        c = costs["c"]["medusa"] / gamma if spec["method"] == "medusa" else costs["c"][
            "draft" if spec["method"] == "linear" else "eagle"]
        verify = costs["T_V"][str(gamma + 1)] / costs["T_T"] if str(gamma + 1) in costs["T_V"] else costs["T_V"][
            gamma + 1] / costs["T_T"]
        tau = expected_tau(rates)
        measured = summary[summary.label == label].iloc[0]
        out.append({"label": label, "gamma": gamma, "c": c, "T_V/T_T": verify, "tau_eq4": tau,
                    "tau_measured": measured.tau, "speedup_eq5": predicted_speedup(tau, [c] * gamma, verify),
                    "speedup_measured": measured.speedup})
    return pd.DataFrame(out)


def by_source(rows: list[dict], labels) -> pd.DataFrame:
    """Speedup over AR per source (rows) and method (columns), pooled over each source's prompts."""
    frame = pd.DataFrame(rows)
    table = summarise_methods(frame[frame.label.isin(["AR", *labels])].to_dict("records"), by=("source", "label"))
    return table.pivot(index="source", columns="label", values="speedup")[list(labels)]
