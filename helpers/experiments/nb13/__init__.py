"""Notebook 13 (drafting from the target itself: Medusa heads and a feature-level draft): its workloads, method list
and result rows from the parameters (every method on the same prompts in one interleaved comparison,
:mod:`helpers.experiments.comparison`), and the numbers and flags it prints. Two workloads: held-out text like the
training corpus (the CPU prompts) and text far from it (the workbook's GPU prompts, read by a Python-trained pair).
"""
from __future__ import annotations

import os

import numpy as np
import pandas as pd
import torch

from helpers.experiments.common import check_budget
from helpers.experiments.packages import TARGET, notebook_part, step_record
from helpers.experiments.comparison import (compare_methods, decode_seconds, depth_acceptance, expected_tau,
                                            measure_comparison, median_forward, method_configs, predicted_speedup,
                                            summarise_methods)
from helpers.hardware import resolve_device
from helpers.models import load_model
from helpers.prompts import encode_prompts, load_prompts, select_prompts
from helpers.results import run_metadata
from helpers.specdec import load_feature_draft, load_medusa_heads, methods
from helpers.specdec.analysis import estimate_alpha
from helpers.specdec.drafter_files import FEATURE_DRAFT_DIR, MEDUSA_DIR, drafter_fingerprint
from helpers.specdec.methods import label as method_label
from helpers.stats import bootstrap_ratio_interval
from helpers.timing import measure as time_it

RESULTS = "13_drafting_from_the_target"
PARAMETERS = ("device", "fd_target", "fd_draft", "fd_dtype", "fd_threads", "fd_prompt_count", "fd_far_count",
              "fd_new_tokens", "fd_repeats", "fd_gammas", "fd_dynamic", "fd_medusa_trees", "fd_stop_below",
              "fd_backoff", "fd_cost_repeats")
# the methods whose specs notebook 13's parameters build, and the drafters it loads (:func:`load_models`); any other
# registered method that needs no other drafter joins the comparison with its defaults
CONFIGURED = ("ar", "linear", "dynamic", "lookup", "medusa", "eagle")
DRAFTERS = ("draft", "medusa", "eagle")


def specs(params: dict) -> list[dict]:
    """AR first, then the draft model's linear γ and dynamic tree, prompt lookup, Medusa (chain, then each static
    tree) and the feature draft (each γ, the same dynamic tree, then the largest γ with the confidence stop and the
    back-off); then the defaults of every other registered method it has the drafter for."""
    depth, topk, budget = params["fd_dynamic"]
    gammas = [int(g) for g in params["fd_gammas"]]
    tree = {"depth": int(depth), "topk": int(topk), "budget": int(budget)}
    return ([{"method": "ar"}]
            + [{"method": "linear", "gamma": g} for g in gammas]
            + [{"method": "dynamic", **tree}, {"method": "lookup", "ngram": 3, "num_draft": 8, "adaptive": False},
               {"method": "medusa", "topk": None}]
            + [{"method": "medusa", "topk": [int(w) for w in shape]} for shape in params["fd_medusa_trees"]]
            + [{"method": "eagle", "gamma": g} for g in gammas]
            + [{"method": "eagle", "tree": "dynamic", **tree},
               {"method": "eagle", "gamma": max(gammas), "stop_below": float(params["fd_stop_below"]),
                "backoff": int(params["fd_backoff"])}]
            + methods.extra_specs(CONFIGURED, DRAFTERS))


def workloads(params: dict, tokenizer) -> dict:
    """``{workload: encoded cases}``: ``held-out`` (CPU prompts, round-robin over sources) and ``far`` (the GPU
    profile's prompts, round-robin over theirs)."""
    device = resolve_device(params["device"])  # the meta device when rendering GPU rows without the GPU
    return {"held-out": encode_prompts(tokenizer, select_prompts(load_prompts("cpu"), params["fd_prompt_count"]),
                                       device),
            "far": encode_prompts(tokenizer, select_prompts(load_prompts("gpu"), params["fd_far_count"]), device,
                                  max_prompt_tokens=512)}


def configs(params: dict, cases: dict) -> dict:
    """Every result-store configuration: ``"costs"`` and ``(workload, prompt id)`` for the method comparison. Each
    holds the Medusa heads' and feature draft's weights by fingerprint, so that retrained drafters are measured
    afresh."""
    setup = {"target": params["fd_target"], "draft": params["fd_draft"], "dtype": params["fd_dtype"],
             "device": params["device"], "threads": params["fd_threads"],
             "drafter_weights": {"medusa": drafter_fingerprint(MEDUSA_DIR),
                                 "eagle": drafter_fingerprint(FEATURE_DRAFT_DIR)}}
    found = {"costs": {"kind": "costs", **setup, "repeats": params["fd_cost_repeats"],
                       "gammas": [int(g) for g in params["fd_gammas"]]}}
    return found | method_configs(cases, setup, new_tokens=params["fd_new_tokens"], repeats=params["fd_repeats"],
                                  specs=specs(params))


def load_models(params: dict) -> tuple:
    """``(target, drafters, tokenizer)``, the drafters as :func:`helpers.specdec.methods.run` takes them: the
    distilled draft, the Medusa heads and the feature draft of the CPU pair."""
    dtype = getattr(torch, params["fd_dtype"])
    target, tokenizer = load_model(params["fd_target"], device=params["device"], dtype=dtype)
    draft, _ = load_model(params["fd_draft"], device=params["device"], dtype=dtype)
    return target, {"draft": draft, "medusa": load_medusa_heads(target), "eagle": load_feature_draft(target)}, tokenizer


def measure(params: dict, store, progress: bool = True, *, models=None, cases: dict | None = None) -> dict:
    """Measure what ``store(RESULTS)`` lacks (:func:`~helpers.experiments.comparison.measure_comparison`): the step
    costs and every workload's runs. ``models``: :func:`load_models`' result when the caller has it; a
    ``store.budget`` (the GPU window's) is checked before loading."""
    if params["device"] == "cpu" and params["fd_threads"] > 0:
        torch.set_num_threads(params["fd_threads"])
    if models is None:
        check_budget(store, f"loading {params['fd_target']} and its drafters")
        models = load_models(params)
    target, drafters, tokenizer = models
    cases = cases if cases is not None else workloads(params, tokenizer)
    wanted = configs(params, cases)
    meta = run_metadata(model_id=params["fd_target"], weights=target.weights_label, dtype=params["fd_dtype"],
                        device=params["device"], seed=0, draft_id=params["fd_draft"], load_average=os.getloadavg()[0])
    return measure_comparison(
        store(RESULTS), wanted, cases, lambda: step_costs(target, drafters, cases["held-out"][0]["input_ids"],
                                                          wanted["costs"]["gammas"], params["fd_cost_repeats"]),
        lambda case: compare_methods(target, drafters, [case], specs(params), params["fd_new_tokens"],
                                     repeats=params["fd_repeats"]), meta, progress)


def step_costs(target, drafters: dict, context, gammas, repeats: int) -> dict:
    """Median seconds of each drafter's step alone and of the target's forwards, after a cached ``context``:
    ``T_T``, ``T_V[n]`` (n target positions: Eq. 5's T_V(n - 1)), ``T_D_<drafter>`` (one step of the distilled
    draft, of the Medusa heads, all K guesses, and of the feature draft) and ``c[drafter]`` = its step / T_T."""
    costs = {"target_step_s": median_forward(target, context, 1, repeats),
             "T_V": {int(n): median_forward(target, context, int(n), repeats) for n in range(1, max(gammas) + 2)},
             "T_D_draft": median_forward(drafters["draft"], context, 1, repeats)}
    with torch.inference_mode():
        hidden = target(input_ids=context, output_hidden_states=True).hidden_states[-1]
        heads, eagle = drafters["medusa"], drafters["eagle"]
        device = context.device  # a CUDA step is timed after a synchronize
        costs["T_D_medusa"] = time_it(lambda: heads(hidden[:, -1]), warmup=2, repeats=repeats, device=device).median

        def feature_step():  # one token on a cache holding the context's pairs, then rolled back
            eagle(hidden[:, -1:], context[:, -1:], cache, last_only=True)
            cache.rollback(1)

        cache = eagle.new_cache(context.shape[1] + 4)
        eagle(hidden[:, :-1], context[:, 1:], cache, last_only=True)
        costs["T_D_eagle"] = time_it(feature_step, warmup=2, repeats=repeats, device=device).median
    costs["c"] = {name: costs[f"T_D_{name}"] / costs["target_step_s"] for name in DRAFTERS}
    return costs


# ------------------------------------------------------------------------------------------------ analysis


# the report's and the notebook's table of every method: columns, and one precision per column
METHOD_COLUMNS = {"label": "method", "drafter": "drafter", "speedup": "speedup", "tau": "tau", "draft_share": "draft",
                  "verify_share": "verify"}
METHOD_FORMATS = {"speedup": "{:.2f}", "tau": "{:.2f}", "draft": "{:.3f}", "verify": "{:.3f}"}
EQ5_FORMATS = {"c": "{:.3f}", "T_V/T_T": "{:.2f}", "tau from a_d": "{:.2f}", "tau": "{:.2f}", "Eq. 5": "{:.2f}",
               "measured (decode)": "{:.2f}"}


def methods_table(summary: pd.DataFrame, method_specs: list[dict]) -> pd.DataFrame:
    """The comparison's methods in the order of :func:`specs`, not by speedup, with :data:`METHOD_COLUMNS`' names;
    a label no spec names goes last."""
    order = {method_label(spec): i for i, spec in enumerate(method_specs)}
    ranked = summary.assign(_order=summary.label.map(order)).sort_values("_order", kind="stable", na_position="last")
    return ranked[list(METHOD_COLUMNS)].rename(columns=METHOD_COLUMNS).reset_index(drop=True)


def alpha_by_position(rows: list[dict], labels) -> pd.DataFrame:
    """a_d (the chance a round's accepted chain reaches draft position d, given d - 1) per method, by source and
    pooled over every round (source ``"all"``), for the positions the method drafts; ``drafter``: its family."""
    frame = pd.DataFrame(rows)
    frame = frame[frame.label.isin(labels)]
    out = []
    for (label, source), group in [*frame.groupby(["label", "source"], sort=False),
                                   *(((label, "all"), group) for label, group in frame.groupby("label", sort=False))]:
        rates = depth_acceptance([n for per_round in group.accepted_per_round for n in per_round])
        deepest = max(d for per_round in group.depth_per_round for d in per_round)  # no position past the drafts
        drafter = methods.get(group.method.iloc[0]).family
        out += [{"label": label, "source": source, "position": d + 1, "alpha": rate, "drafter": drafter}
                for d, rate in enumerate(rates) if rate == rate and d < deepest]
    return pd.DataFrame(out)


def method_alpha(rows: list[dict], label: str) -> float:
    """α̂ of the method ``label`` pooled over its rounds in ``rows`` (maximum likelihood, :func:`estimate_alpha`);
    nan where nothing was drafted (AR, or a stop that never let the draft propose)."""
    mine = [r for r in rows if r["label"] == label]
    if label == "AR" or not any(d for r in mine for d in r["depth_per_round"]):
        return float("nan")
    return estimate_alpha([n for r in mine for n in r["accepted_per_round"]],
                          [d for r in mine for d in r["depth_per_round"]])


def alpha_by_workload(rows: dict, labels) -> pd.DataFrame:
    """α̂ of each method in ``labels`` (rows) on each workload of ``rows`` ({workload: runs}, columns)."""
    return pd.DataFrame([{"label": label, **{workload: method_alpha(found, label) for workload, found in rows.items()}}
                         for label in labels]).set_index("label")


def accepted_less_far(alphas: pd.DataFrame, labels) -> dict[str, bool]:
    """Whether each method in ``labels`` is accepted less often far than held out (:func:`alpha_by_workload`)."""
    return {label: bool(alphas.loc[label, "far"] < alphas.loc[label, "held-out"]) for label in labels}


def costs_in_round(rows: list[dict]) -> pd.DataFrame:
    """c in a round: the draft seconds per draft step over AR's seconds per token, pooled over the prompts, for the
    chains and trees of each drafter's own method (what the round really paid, next to the step timed alone)."""
    frame = pd.DataFrame(rows)
    ar = frame[frame.method == "ar"]
    t_t = ar.seconds.sum() / ar.new_tokens.sum()
    drafted = frame[(frame.draft_forwards > 0) & frame.method.isin(["linear", "medusa", "eagle"])]
    grouped = drafted.groupby("label", sort=False)[["draft_s", "draft_forwards"]].sum()
    return (grouped.draft_s / grouped.draft_forwards / t_t).rename("c_round").reset_index()


def eq5_table(rows: list[dict], costs: dict, summary: pd.DataFrame) -> pd.DataFrame:
    """Eq. 5 for each fixed-γ chain of a drafter whose step was timed alone (``costs["c"]``, by the registry's
    :attr:`~helpers.specdec.methods.Method.drafter`): τ = 1 + Σ_d Π_{j<=d} a_j (Eq. 4 with the measured a_d; from the
    same rounds, so it differs from the measured τ only by rounds a generation's end cut short), speedup =
    τ / (γ c + T_V(γ)/T_T), next to the measured τ and decode speedup (prefill left out on both sides)."""
    frame = pd.DataFrame(rows)
    ar_decode = decode_seconds(frame[frame.method == "ar"])
    drafter = frame.method.map(lambda name: methods.get(name).drafter)
    out = []
    for label, group in frame[drafter.isin(list(costs["c"]))].groupby("label", sort=False):
        spec = group.spec.iloc[0]
        if spec.get("topk") or spec.get("stop_below"):
            continue  # trees and the stops draft a varying number of tokens: no single γ
        gamma = int(np.max([d for per_round in group.depth_per_round for d in per_round]))
        rates = depth_acceptance([n for per_round in group.accepted_per_round for n in per_round])[:gamma]
        name = methods.get(spec["method"]).drafter
        c = costs["c"][name] / (gamma if name == "medusa" else 1)  # the heads' one step drafts all γ guesses
        verify = costs["T_V"][gamma + 1] / costs["target_step_s"]
        tau = expected_tau(rates)
        out.append({"label": label, "gamma": gamma, "c": c, "T_V/T_T": verify, "tau_from_a": tau,
                    "tau_measured": summary[summary.label == label].iloc[0].tau,
                    "speedup_eq5": predicted_speedup(tau, [c] * gamma, verify),
                    "speedup_measured": ar_decode / decode_seconds(group)})
    return pd.DataFrame(out)


def uniform_tau(alpha: float, gamma: int) -> float:
    """Eq. 4: expected new tokens per round with γ drafts, each accepted with probability α given the ones before."""
    return gamma + 1.0 if alpha >= 1 else (1 - alpha ** (gamma + 1)) / (1 - alpha)


def _uniform_alpha(tau: float, gamma: int) -> float:
    """The α at which :func:`uniform_tau` equals ``tau`` (1 <= tau <= γ + 1), by bisection (τ grows with α)."""
    low, high = 0.0, 1.0
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if uniform_tau(middle, gamma) < tau else (low, middle)
    return (low + high) / 2


def what_it_takes(eq5: pd.DataFrame, label: str, goal: float) -> dict:
    """What the chain ``label`` (a row of :func:`eq5_table`) would need for ``goal`` x AR. A round costs τ / speedup
    target steps as measured, and γc + T_V(γ)/T_T by Eq. 5's terms timed alone; at each cost, the τ that reaches
    the goal and the uniform acceptance α giving it (Eq. 4; absent where even α = 1 falls short), beside the α its
    measured τ corresponds to; Eq. 5 with a free draft (c = 0) and the c that would reach the goal (absent: none).
    Flags: ``goal_alpha_reachable_<cost>``, ``goal_c_reachable``, ``goal_verify_larger`` (verification costs more
    than a decode step and than the round's draft steps together)."""
    row = eq5.set_index("label").loc[label]
    gamma, verify, c = int(row.gamma), float(row["T_V/T_T"]), float(row.c)
    tau, measured = float(row.tau_measured), float(row.speedup_measured)
    numbers = {"goal": goal, "goal_label": label, "goal_gamma": gamma, "goal_tau": tau, "goal_measured": measured,
               "goal_c": c, "goal_verify": verify, "goal_eq5": float(row.speedup_eq5),
               "goal_free_draft": tau / verify, "goal_alpha_equivalent": _uniform_alpha(tau, gamma)}
    for name, cost in (("eq5", gamma * c + verify), ("measured", tau / measured)):
        reachable = goal * cost <= gamma + 1
        numbers.update({f"goal_round_{name}": cost, f"goal_tau_needed_{name}": goal * cost,
                        f"goal_alpha_reachable_{name}": int(reachable)})
        if reachable:
            numbers[f"goal_alpha_needed_{name}"] = _uniform_alpha(goal * cost, gamma)
    numbers["goal_verify_larger"] = int(verify > max(1.0, gamma * c))
    c_needed = (tau / goal - verify) / gamma
    numbers["goal_c_reachable"] = int(c_needed > 0)
    if c_needed > 0:
        numbers["goal_c_needed"] = c_needed
    return numbers


def by_source(rows: list[dict], labels) -> pd.DataFrame:
    """Speedup over AR per source (rows) and method (columns), pooled over each source's prompts."""
    frame = pd.DataFrame(rows)
    table = summarise_methods(frame[frame.label.isin(["AR", *labels])].to_dict("records"), by=("source", "label"))
    return table.pivot(index="source", columns="label", values="speedup")[list(labels)]


def headline(summary: pd.DataFrame) -> dict:
    """The best configuration of each drafter family (label, speedup, τ) on a workload's comparison; the feature
    draft's chains and trees apart."""
    tree = summary.label.str.contains("tree")
    picks = {"linear": summary.method == "linear", "tree": summary.method == "dynamic",
             "lookup": summary.method == "lookup", "medusa": summary.method == "medusa",
             "eagle": (summary.method == "eagle") & ~tree, "eagle_tree": (summary.method == "eagle") & tree}
    best = {name: summary[mask].loc[summary[mask].speedup.idxmax()] for name, mask in picks.items()}
    return {name: {"label": row.label, "speedup": float(row.speedup), "tau": float(row.tau)}
            for name, row in best.items()}


def training_costs(card: dict, pair_dir) -> pd.DataFrame:
    """What each drafter cost to train, from the CPU pair's card and files: steps, tokens, minutes on the training
    machine and stored megabytes (the two distilled drafts were trained together: draft-2l is charged all of it)."""
    draft, d = card["stages"]["draft"], card["drafters"]
    megabytes = (pair_dir / "draft-2l" / "model.safetensors").stat().st_size / 1e6
    return pd.DataFrame([
        {"drafter": "draft-2l (distilled draft model)", "steps": draft["steps"], "tokens": draft["tokens"],
         "minutes": draft["seconds"] / 60, "megabytes": megabytes},
        {"drafter": f"Medusa heads (x{d['num_heads']}) + feature draft, together", "steps": d["steps"],
         "tokens": d["tokens"], "minutes": d["seconds"] / 60,
         "megabytes": d["megabytes"]["medusa"] + d["megabytes"]["eagle"]},
    ])


def _prompt_interval(rows: list[dict], value: str, numerator: str, denominator: str,
                     level: float) -> tuple[float, float]:
    """The percentile bootstrap interval over prompts (:func:`helpers.stats.bootstrap_ratio_interval`) of method
    ``numerator``'s summed ``value`` over ``denominator``'s, paired by prompt; nan with a single prompt."""
    per_prompt = pd.DataFrame(rows).pivot_table(index="id", columns="label", values=value, aggfunc="sum")
    if len(per_prompt) < 2:
        return float("nan"), float("nan")
    return bootstrap_ratio_interval(per_prompt[numerator], per_prompt[denominator], level=level)


def paired_side(rows: list[dict], label: str, other: str, level: float = 0.95) -> tuple[str, float, float]:
    """Whether ``label`` runs faster than ``other`` beyond what the prompts can tell (:func:`_prompt_interval` of
    ``other``'s seconds over ``label``'s): 'above' when the interval lies above 1, 'below' when below, else 'level
    with' (also with a single prompt: nan). Returns the word and the interval."""
    low, high = _prompt_interval(rows, "seconds", other, label, level)
    return ("above" if low > 1 else "below" if high < 1 else "level with"), low, high


def tau_interval(rows: list[dict], label: str, other: str, level: float = 0.95) -> tuple[float, float]:
    """The bootstrap interval over prompts of ``label``'s τ over ``other``'s: every prompt generates the same tokens
    for both, so the ratio is ``other``'s target forwards over ``label``'s; nan with a single prompt."""
    return _prompt_interval(rows, "target_forwards", other, label, level)


def round_accounting(summary: pd.DataFrame, label: str) -> dict:
    """The method ``label``'s measured round (a :func:`summarise_methods` row): τ, and its cost in AR token times
    (end to end, prefill included) ``round`` = τ / speedup (exact: the speedup is AR's seconds over the method's for
    the same tokens), split by the time shares into drafting, verifying and the rest (prefill, bookkeeping)."""
    row = summary.set_index("label").loc[label]
    cost = float(row.tau / row.speedup)
    return {"tau": float(row.tau), "round": cost, "drafting": float(row.draft_share) * cost,
            "verifying": float(row.verify_share) * cost,
            "rest": float(1 - row.draft_share - row.verify_share) * cost}


def separating_terms(feature: dict, linear: dict, tau_bounds: tuple[float, float] | None = None,
                     tolerance: float = 0.03) -> dict:
    """Which measured term separates two methods' speedups (:func:`round_accounting` of each): their τ (``tau_same``
    where ``tau_bounds``, the bootstrap interval over prompts of the τ ratio, holds 1, else within ``tolerance``;
    ``tau_change_pct`` signed, ``tau_higher`` its sign) and their round's cost (``cost_same`` within ``tolerance``;
    else ``cost_cheaper`` and ``cost_factor``, dearer over cheaper), with the part of it that differs most
    (``part``: "drafting", "verifying" or "the rest"; its values ``part_feature`` and ``part_linear``)."""
    tau_ratio = feature["tau"] / linear["tau"]
    by_interval = tau_bounds is not None and tau_bounds[0] == tau_bounds[0]
    same = tau_bounds[0] <= 1 <= tau_bounds[1] if by_interval else abs(tau_ratio - 1) <= tolerance
    cost_ratio = feature["round"] / linear["round"]
    part = max(("drafting", "verifying", "rest"), key=lambda k: abs(feature[k] - linear[k]))
    return {"tau_same": int(same), "tau_by_interval": int(by_interval), "tau_higher": int(tau_ratio > 1),
            "tau_change_pct": 100 * (tau_ratio - 1),
            "tau_low": tau_bounds[0] if by_interval else float("nan"),
            "tau_high": tau_bounds[1] if by_interval else float("nan"), "tau_tolerance_pct": 100 * tolerance,
            "cost_same": int(abs(cost_ratio - 1) <= tolerance), "cost_cheaper": int(cost_ratio < 1),
            "cost_change_pct": 100 * (cost_ratio - 1), "cost_factor": max(cost_ratio, 1 / cost_ratio),
            "part": "the rest" if part == "rest" else part, "part_feature": feature[part], "part_linear": linear[part]}


def who_wins(held: dict, alpha: pd.DataFrame, costs: dict, summary: pd.DataFrame, rows: list[dict]) -> dict:
    """The feature draft's best chain against the distilled draft's best linear speculation (:func:`paired_side`
    over ``rows``, the workload's runs), and why, from the measured rounds (:func:`round_accounting`;
    :func:`separating_terms` as ``eagle_<key>``), with a_1 and the step cost c timed alone beside them; the trees of
    both drafters alongside. Returns ``numbers``."""
    eagle, linear = held["eagle"], held["linear"]
    a1 = alpha[(alpha.position == 1) & (alpha.source == "all")].set_index("label").alpha
    side, low, high = paired_side(rows, eagle["label"], linear["label"])
    rounds = {name: round_accounting(summary, held[name]["label"]) for name in ("eagle", "linear")}
    reason = separating_terms(rounds["eagle"], rounds["linear"], tau_interval(rows, eagle["label"], linear["label"]))
    shown = lambda *names: {f"{name}_{key}": held[name][key]  # noqa: E731
                            for name in names for key in ("label", "speedup", "tau")}
    return {"numbers": {
        **shown("eagle_tree", "tree"), **{f"eagle_{key}": value for key, value in reason.items()},
        **shown("eagle", "linear"), "eagle_vs_linear": eagle["speedup"] / linear["speedup"], "eagle_side": side,
        "eagle_vs_linear_low": low, "eagle_vs_linear_high": high,
        **{f"{part}_{name}": rounds[name][part]
           for name in rounds for part in ("round", "drafting", "verifying", "rest")},
        **{f"{name}_a1": float(a1.get(held[name]["label"], float("nan"))) for name in ("eagle", "linear")},
        **{f"c_{name}": costs["c"][name] for name in ("eagle", "draft", "medusa")}}}


def linear_at_depth(summary: pd.DataFrame, depth: int) -> str:
    """The label of the linear chain whose γ is ``depth`` (Medusa's number of heads), or the nearest measured one."""
    chains = summary[summary.label.str.fullmatch(r"linear g\d+")]
    gammas = chains.label.str.removeprefix("linear g").astype(int)
    return chains.loc[(gammas - depth).abs().idxmin(), "label"]


def medusa_against_linear(summary: pd.DataFrame, rows: list[dict], num_heads: int) -> dict:
    """Medusa's chain against linear speculation at the same depth (:func:`linear_at_depth`): τ, speedup and the
    acceptance by position that separates them (head k guesses without seeing the k-1 drafts before it):
    ``pairs`` (position d, Medusa's a_d, linear's a_d) and ``numbers``."""
    medusa = summary[summary.label == "medusa chain"].iloc[0]
    linear = summary[summary.label == linear_at_depth(summary, num_heads)].iloc[0]
    pooled = alpha_by_position(rows, ["medusa chain", linear.label])
    rates = pooled[pooled.source == "all"].set_index(["label", "position"]).alpha
    pairs = [(d, rates.get(("medusa chain", d), float("nan")), rates.get((linear.label, d), float("nan")))
             for d in range(1, num_heads + 1)]
    return {"pairs": pairs, "numbers": {
        "medusa_speedup": float(medusa.speedup), "medusa_tau": float(medusa.tau), "medusa_linear_label": linear.label,
        "medusa_linear_speedup": float(linear.speedup), "medusa_linear_tau": float(linear.tau),
        "medusa_a1": pairs[0][1], "medusa_alast": pairs[-1][1], "medusa_linear_alast": pairs[-1][2],
        "medusa_heads": num_heads, "medusa_last_lowest": int(pairs[-1][1] <= min(m for _, m, _ in pairs))}}


def far_from_corpus(table: pd.DataFrame, stop_label: str, floor: float = 0.95) -> dict:
    """Per source of the far workload: the lowest speedup of each method; on how many sources the feature draft with
    its confidence stop stays at or above ``floor`` x AR. Returns ``lowest`` (by method), ``below`` (the sources
    under the floor) and ``numbers``."""
    lowest = table.min()
    below = table.index[table[stop_label] < floor].tolist()
    return {"lowest": lowest, "below": below, "numbers": {
        "far_stop_lowest": float(lowest[stop_label]), "far_stop_holds": int(not below),
        "far_stop_all_faster": int(lowest[stop_label] > 1), "far_floor": floor, "far_sources": len(table),
        "far_stop_below": len(below), "far_stop_worst_source": str(table[stop_label].idxmin())}}


def stop_against_plain(held_summary: pd.DataFrame, far: pd.DataFrame, stop_label: str, plain_label: str) -> dict:
    """The confidence stop against the plain feature-draft chain: on the held-out prompts (overall speedup) and on
    the far sources (lowest speedup, and on how many sources it is ahead)."""
    speed = held_summary.set_index("label").speedup
    return {"stop_held_speedup": float(speed[stop_label]), "plain_held_speedup": float(speed[plain_label]),
            "plain_far_lowest": float(far[plain_label].min()),
            "stop_far_ahead": int((far[stop_label] > far[plain_label]).sum())}


def with_prompt_counts(table: pd.DataFrame, rows: list[dict]) -> pd.DataFrame:
    """``table`` (indexed by source) with a ``prompts`` column: how many prompts each source's speedups pool."""
    return table.join(pd.DataFrame(rows).groupby("source")["id"].nunique().rename("prompts"))


def far_prompt_counts(rows: list[dict]) -> dict:
    """How many prompts each far source has (a source of one prompt ranks methods by one timing): the report's
    numbers, ``far_single_list`` naming the sources of one prompt."""
    counts = pd.DataFrame(rows).groupby("source")["id"].nunique()
    single = sorted(counts.index[counts == 1])
    return {"far_min_prompts": int(counts.min()), "far_max_prompts": int(counts.max()),
            "far_single_sources": len(single), "far_single_list": ", ".join(single) or "none"}


GPU_PARTS = (notebook_part("13", (RESULTS,), measure),)  # what the GPU window measures (packages.Part)


def target_steps(rows: dict) -> list[dict]:
    """T_T of the cost rows (run-info page)."""
    return [step_record("13", "T_T", row["target_step_s"], row.get("runtime", "minimal"), 1, row.get("context_len"),
                        row)
            for row in rows.get(RESULTS, [])
            if row.get("kind") == "costs" and row.get("target") == TARGET and row.get("target_step_s")]
