"""Notebook 10 (tree speculation and prompt lookup): its workloads and result rows from the parameters
(:func:`measure`: the forward costs, then one row per prompt and workload with every method, measuring only what the
store lacks), and the numbers and flags the notebook prints and the report quotes; the computations live in
:mod:`helpers.experiments.nb10.study` and :mod:`helpers.experiments.comparison`.
"""
from __future__ import annotations

import os

import numpy as np
import pandas as pd
import torch

from helpers.experiments.common import check_budget
from helpers.experiments.packages import notebook_part, step_record
from helpers.experiments.comparison import (best_of, compare_methods, measure_comparison, method_configs,
                                            summarise_methods)
from helpers.experiments.nb10.study import (context_coverage, copied_prefix, cost_model_agreement,
                                            draft_model_methods, forward_costs, greedy_continuation, method_specs,
                                            per_prompt_speedup, ranking_beyond_noise, tau_against_linear,
                                            tied_with_fastest)
from helpers.hardware import resolve_device
from helpers.models import load_model
from helpers.prompts import (GROUNDED_HEAD_LINES, encode_prompts, grounded_prompts, in_context_prompts, load_prompts,
                             select_prompts)
from helpers.results import gpu_result_folders, latest_ok_rows, run_metadata
from helpers.specdec import autoregressive_generate
from helpers.stats import REPETITIVE_SHARE, repeated_ngram_share

RESULTS = "10_tree_and_lookup_decoding"
# the notebook parameters the measurement reads (the notebook passes exactly these)
PARAMETERS = ("device", "tree_target", "tree_draft", "tree_dtype", "tree_prompt_profile", "tree_prompt_count",
              "tree_grounded_count", "tree_new_tokens", "tree_repeats", "tree_gammas", "tree_adaptive",
              "tree_static_shapes", "tree_dynamic", "pld_ngram", "pld_num_draft", "tree_cost_nodes",
              "tree_cost_repeats")
TREES = ("static", "dynamic")


def specs(params: dict) -> list[dict]:
    """Every method configuration compared, AR first."""
    return method_specs(params["tree_gammas"], params["tree_adaptive"], params["tree_static_shapes"],
                        params["tree_dynamic"], ngram=params["pld_ngram"], num_draft=params["pld_num_draft"])


def workloads(params: dict, target, tokenizer) -> tuple[list[dict], dict]:
    """``(open-ended prompt rows, {workload: encoded cases})``. An in-context prompt is a held-out function, the
    target's own greedy continuation of it, a blank line and the function again, the continuation written on the CPU
    in float32 (:func:`cpu_writer`) so that a GPU run and a renderer without its GPU build the same prompts."""
    open_rows = select_prompts(load_prompts(params["tree_prompt_profile"]), params["tree_prompt_count"])
    in_context_rows = in_context_prompts(tokenizer, params["tree_grounded_count"], greedy_continuation(
        cpu_writer(target, params), tokenizer, params["tree_new_tokens"]))
    device = next(target.parameters()).device
    return open_rows, {"open-ended": encode_prompts(tokenizer, open_rows, device),
                       "in-context": encode_prompts(tokenizer, in_context_rows, device)}


# the prompt of section 1's drawn round, per prompt profile: one where the small target writes sensible code (its
# greedy continuation, a short function with a docstring, repeats 4 % of its 4-grams); the first open-ended prompt
# wrote `self.assertEqual(self.(self.(...`, a loop that makes any draft look good. Elsewhere: the first code prompt.
SHOWCASE_PROMPTS = {"cpu": "cpu-code-6"}


def showcase_case(params: dict, tokenizer, device) -> dict:
    """The encoded prompt of section 1's demonstration (:data:`SHOWCASE_PROMPTS`, else the profile's first code
    prompt, else its first prompt)."""
    rows = load_prompts(params["tree_prompt_profile"])
    wanted = SHOWCASE_PROMPTS.get(params["tree_prompt_profile"])
    row = next((r for r in rows if r["id"] == wanted), next((r for r in rows if r["source"] == "code"), rows[0]))
    return encode_prompts(tokenizer, [row], device)[0]


def repetition(tokens) -> dict:
    """How much of an output repeats itself (:func:`helpers.stats.repeated_ngram_share`) and whether it passes
    :data:`helpers.stats.REPETITIVE_SHARE` (``threshold``): a loop is easy to draft, so its speedup flatters."""
    share = repeated_ngram_share(tokens)
    return {"share": share, "repetitive": share > REPETITIVE_SHARE, "threshold": REPETITIVE_SHARE}


def round_to_draw(rounds) -> int:
    """The index of the round section 1 draws: the first whose accepted path leaves the draft's first choice
    somewhere (the tree's point), else the deepest."""
    def first_choice_path(tree):
        return all(tree.parents.index(parent) == node for parent, node in zip(tree.path, tree.path[1:]))
    return next((i for i, r in enumerate(rounds) if len(r.path) > 2 and not first_choice_path(r)),
                max(range(len(rounds)), key=lambda i: len(rounds[i].path)))


def cpu_writer(target, params: dict):
    """The target in float32 on the CPU (itself when it already is): what writes the texts built from the target's
    greedy output, the same on every machine (a GPU run, a renderer whose models sit on meta)."""
    weight = next(target.parameters())
    if (weight.device.type, weight.dtype) == ("cpu", torch.float32):
        return target
    return load_model(params["tree_target"], device="cpu", dtype=torch.float32)[0]


def cost_widths(params: dict) -> list[int]:
    """The draft forward widths a round can have: 1 (the root's children), every dynamic top-k and every static
    level's width."""
    return sorted({1, *[k for _, k, _ in params["tree_dynamic"]],
                   *[int(np.prod(s[:i])) for s in params["tree_static_shapes"] for i in range(1, len(s))]})


def configs(params: dict, cases: dict) -> dict:
    """Every result-store configuration: ``"costs"`` (on the first open-ended prompt) and ``(workload, prompt id)``
    for the method comparison."""
    pair = {"target": params["tree_target"], "draft": params["tree_draft"], "dtype": params["tree_dtype"],
            "device": params["device"]}
    found = {"costs": {"kind": "costs", **pair, "context_len": int(cases["open-ended"][0]["input_ids"].shape[1]),
                       "nodes": params["tree_cost_nodes"], "widths": cost_widths(params)}}
    return found | method_configs(cases, pair, new_tokens=params["tree_new_tokens"], repeats=params["tree_repeats"],
                                  specs=specs(params))


def measure(params: dict, store, progress: bool = True, *, models=None, cases: dict | None = None) -> dict:
    """Measure what ``store(RESULTS)`` lacks (:func:`~helpers.experiments.comparison.measure_comparison`): the
    forward costs and every workload's runs. ``models`` (``(target, draft, tokenizer)``) and ``cases``
    (:func:`workloads`) when the caller has them; a ``store.budget`` (the GPU window's) is checked before loading."""
    if models is None:
        check_budget(store, f"loading {params['tree_target']}")
        models = load_pair(params)
    target, draft, tokenizer = models
    cases = cases if cases is not None else workloads(params, target, tokenizer)[1]
    wanted, context = configs(params, cases), cases["open-ended"][0]["input_ids"]
    meta = run_metadata(model_id=params["tree_target"], weights=target.weights_label, dtype=params["tree_dtype"],
                        device=params["device"], seed=0, draft_id=params["tree_draft"],
                        load_average=os.getloadavg()[0])
    return measure_comparison(
        store(RESULTS), wanted, cases, lambda: forward_costs(target, draft, context, params["tree_cost_nodes"],
                                                            wanted["costs"]["widths"],
                                                            repeats=params["tree_cost_repeats"]),
        lambda case: compare_methods(target, draft, [case], specs(params), params["tree_new_tokens"],
                                     repeats=params["tree_repeats"]), meta)


def load_pair(params: dict) -> tuple:
    """``(target, draft, tokenizer)`` at the notebook's dtype and device; on the CPU instead of the meta device
    when rendering without the GPU, so that the notebook's live demonstrations run (every measurement is a row)."""
    dtype = getattr(torch, params["tree_dtype"])
    device = resolve_device(params["device"])
    device = torch.device("cpu") if device.type == "meta" else device
    target, tokenizer = load_model(params["tree_target"], device=device, dtype=dtype)
    draft, _ = load_model(params["tree_draft"], device=device, dtype=dtype)
    return target, draft, tokenizer


def cost_summary(costs: dict) -> dict:
    """Section 2's numbers: T_T, a target forward over one, eight and the most positions (``tv_max_nodes``) in target
    steps (``tv_grows``: does it grow?), T_D(1)/T_T. ``costs["T_V"]`` is keyed by the positions, so the widest
    verifies ``tv_max_nodes - 1`` drafted tokens (Eq. 5's T_V argument)."""
    tt, tv, td = costs["target_step_s"], costs["T_V"], costs["T_D"]
    nodes_max = max(tv)
    tv_one, tv_max = tv[min(tv)] / tt, tv[nodes_max] / tt
    tv_eight = float(np.interp(8, sorted(tv), [tv[n] for n in sorted(tv)])) / tt
    return {"tv_one": tv_one, "tv_grows": int(tv_one < tv_eight < tv_max), "T_T_ms": tt * 1e3,
            "tv_max_nodes": nodes_max, "tv_max_ratio": tv[nodes_max] / tt, "td_one": td[1] / tt, "tv_eight": tv_eight}


def best_methods(open_summary: pd.DataFrame) -> dict:
    """Section 3: the best linear, static and dynamic configurations on the open-ended prompts, the best tree against
    the best linear (wall clock and τ; the largest τ gain at equal depth), and whether the fastest tree of each family
    is its smallest. Returns ``at_depth`` (to display), ``linear``, ``tree_best``, ``smallest_fastest`` and
    ``numbers``."""
    linear, tree_best = best_of(open_summary, "linear"), best_of(open_summary, TREES)
    at_depth = tau_against_linear(open_summary)
    best_at_depth = at_depth.loc[at_depth.tau_ratio.idxmax()]
    tree_over_linear = tree_best.speedup / linear.speedup
    smallest_fastest = {family: best_of(open_summary, family).label
                        == open_summary[open_summary.method == family].sort_values("nodes").label.iloc[0]
                        for family in TREES}
    bests = {family: best_of(open_summary, family) for family in ("linear", *TREES)}
    numbers = {**{f"best_{family}{key}": getattr(row, column) for family, row in bests.items()
                  for key, column in (("", "label"), ("_speedup", "speedup"), ("_tau", "tau"))},
               "best_dynamic_nodes": bests["dynamic"].nodes, "tree_over_linear": tree_over_linear,
               "tree_faster": int(tree_over_linear > 1), "tau_gain": tree_best.tau / linear.tau,
               "tau_same_depth": best_at_depth.tau_ratio, "tau_depth_tree": best_at_depth.tree,
               "tau_depth_linear": best_at_depth.linear, "tau_depth_speed": best_at_depth.speedup_ratio,
               "smallest_trees_fastest": int(all(smallest_fastest.values()))}
    return {"at_depth": at_depth, "linear": linear, "tree_best": tree_best, "smallest_fastest": smallest_fastest,
            "numbers": numbers}


def ties_with_fastest(open_rows: list[dict], open_summary: pd.DataFrame, best: dict) -> dict:
    """Section 3: the draft-model methods the measurement cannot tell from the fastest (:func:`tied_with_fastest`:
    the stored rows keep each method's fastest run per prompt, so the prompts carry the spread), per tree family
    whether its smallest tree ties with the family's fastest, and adaptive γ against the best fixed γ (``best``:
    :func:`best_methods`). Returns ``ties`` (to display), ``tied_labels``, ``smallest_tied`` and ``numbers``."""
    linear, tree_best = best["linear"], best["tree_best"]
    ties = tied_with_fastest(open_rows)
    tied_labels = ties[ties.tied].label.tolist()
    by_label = ties.set_index("label")
    adaptive = best_of(open_summary, "adaptive")
    smallest_tied = {family: bool(tied_with_fastest(open_rows, (family,)).set_index("label").loc[
        open_summary[open_summary.method == family].sort_values("nodes").label.iloc[0], "tied"]) for family in TREES}
    numbers = {"smallest_trees_tied": int(all(smallest_tied.values())),
               "adaptive": adaptive.label, "adaptive_speedup": adaptive.speedup,
               "adaptive_over_linear": adaptive.speedup / linear.speedup, "adaptive_depth": adaptive.depth,
               "adaptive_wins": int(adaptive.speedup > linear.speedup),
               "adaptive_tied": int(adaptive.label in tied_labels),
               "tied_fastest": ", ".join(tied_labels), "tied_count": len(tied_labels),
               "tied_low": ties[ties.tied].speedup.min(), "tied_fastest_label": ties.label.iloc[0],
               "tied_high": ties.speedup.iloc[0],
               "tied_others": ", ".join(label for label in tied_labels if label != ties.label.iloc[0]),
               "tree_tied": int(bool(tree_best.label in tied_labels)),
               "trees_all_slower": int(not any(open_summary.set_index("label").loc[label].method in TREES
                                               for label in tied_labels)),
               "tree_slower_low": by_label.loc[tree_best.label, "low"],
               "tree_slower_high": by_label.loc[tree_best.label, "high"]}
    return {"ties": ties, "tied_labels": tied_labels, "smallest_tied": smallest_tied, "numbers": numbers}


def by_source(open_rows: list[dict]) -> pd.DataFrame:
    """The best linear and best tree configuration (and the best prompt lookup) per source of the open-ended
    prompts."""
    per_source = []
    for source, group in summarise_methods(open_rows, by=("source", "label")).groupby("source", sort=False):
        lin, tree = best_of(group, "linear"), best_of(group, TREES)
        per_source.append({"source": source, "prompts": int(lin.prompts), "best linear": lin.label,
                           "linear x": lin.speedup, "linear tau": lin.tau, "best tree": tree.label,
                           "tree x": tree.speedup, "tree tau": tree.tau, "tree/linear": tree.speedup / lin.speedup,
                           "lookup x": best_of(group, "lookup").speedup})
    return pd.DataFrame(per_source)


def greedy_outputs(target, cases: dict, new_tokens: int) -> dict:
    """The tokens every method writes (each identical to greedy AR, asserted in section 3), by prompt id."""
    return {case["id"]: autoregressive_generate(target, case["input_ids"], new_tokens, eos_token_id=-1).tokens
            for group in cases.values() for case in group}


def coverage(cases: dict, greedy: dict, rows: dict, pld_label: str, ngram: int) -> pd.DataFrame:
    """Per prompt: the share of the output that continues an ``ngram`` of the prompt, or of the prompt and the
    output before it (:func:`~helpers.experiments.nb10.study.context_coverage`), and prompt lookup's speedup."""
    return pd.DataFrame([{"workload": workload, "id": case["id"], "source": case["source"],
                          **context_coverage(case["input_ids"][0], greedy[case["id"]], ngram),
                          "pld_speedup": per_prompt_speedup(rows[workload], pld_label)[case["id"]]}
                         for workload, group in cases.items() for case in group])


def lookup_summary(coverage_frame: pd.DataFrame, summaries: dict, per_source: pd.DataFrame, pld_label: str,
                   in_context_rows: list[dict]) -> dict:
    """Section 4: does prompt lookup follow the share of the output in the context (rank correlation over the
    prompts), PLD against the best draft-model method on each workload (with the draft-model methods the in-context
    prompts cannot tell from that best), and PLD per source (``by_source``, with the share of each source's output
    in its context). Returns that, the slowest prompt and its share, both workloads' best lookup labels and
    ``numbers``."""
    share = coverage_frame.groupby("workload", sort=False)[["prompt", "context"]].mean()
    pld_corr = coverage_frame[["context", "pld_speedup"]].rank().corr().iloc[0, 1]
    slowest = coverage_frame.loc[coverage_frame.pld_speedup.idxmin()]
    in_context, open_summary = summaries["in-context"], summaries["open-ended"]
    pld_in, pld_open = best_of(in_context, "lookup"), best_of(open_summary, "lookup")
    in_model = best_of(in_context, draft_model_methods())
    in_ties = tied_with_fastest(in_context_rows)
    in_tied = in_ties[in_ties.tied]
    open_cover = coverage_frame[coverage_frame.workload == "open-ended"].groupby("source", sort=False).context.mean()
    pld_by_source = per_source.set_index("source")["lookup x"]
    numbers = {
        **{f"cover_{short}_{kind}": 100 * share.loc[workload, kind]
           for workload, short in (("open-ended", "open"), ("in-context", "in")) for kind in ("prompt", "context")},
        "in_covered_more": int(share.loc["in-context", "prompt"] > share.loc["open-ended", "prompt"]),
        "pld_label": pld_label, "pld_cover_corr": pld_corr, "pld_follows_cover": int(pld_corr >= 0.5),
        "pld_prompt_min": coverage_frame.pld_speedup.min(), "pld_prompt_max": coverage_frame.pld_speedup.max(),
        "pld_in": pld_in.speedup, "pld_in_tau": pld_in.tau, "pld_open": pld_open.speedup, "pld_open_tau": pld_open.tau,
        "pld_in_faster": int(pld_in.speedup > pld_open.speedup),
        "in_model": in_model.label, "in_model_speedup": in_model.speedup, "in_model_tau": in_model.tau,
        "in_model_tied_count": len(in_tied), "in_model_tied_low": in_tied.speedup.min(),
        "pld_over_model": pld_in.speedup / in_model.speedup, "pld_beats_model": int(pld_in.speedup > in_model.speedup),
        "pld_best_source": pld_by_source.idxmax(), "pld_best_source_speedup": pld_by_source.max(),
        "pld_best_source_cover": 100 * open_cover[pld_by_source.idxmax()],
        "pld_best_source_most_covered": int(pld_by_source.idxmax() == open_cover.idxmax())}
    return {"slowest": slowest.id, "slowest_context": slowest.context, "pld_in_label": pld_in.label,
            "pld_open_label": pld_open.label,
            "by_source": pd.DataFrame({"PLD x": pld_by_source, "context": open_cover[pld_by_source.index]}),
            "numbers": numbers}


def copies(tokenizer, in_context_cases: list[dict], greedy: dict) -> dict:
    """Is the in-context workload what it claims to be? How much of the continuation in its prompt the target
    re-emits before it first diverges (``share``; the notebook asserts more than half)."""
    found = [copied_prefix(tokenizer, case, greedy[case["id"]]) for case in in_context_cases]
    share = sum(c for c, _ in found) / sum(n for _, n in found)
    full = sum(c >= n for c, n in found)
    return {"share": share, "prompts": len(found), "numbers": {"in_copied_pct": 100 * share, "in_full_copies": full}}


def copy_task(target, tokenizer, params: dict) -> dict:
    """The copy task the target fails: a held-out function, then its first lines again; how many tokens of the rest
    its greedy output (written on the CPU: :func:`cpu_writer`) re-emits before it diverges, on average."""
    writer = cpu_writer(target, params)
    cases = encode_prompts(tokenizer, grounded_prompts(tokenizer, params["tree_grounded_count"]), "cpu")
    found = [copied_prefix(tokenizer, case, autoregressive_generate(
        writer, case["input_ids"], params["tree_new_tokens"], eos_token_id=-1).tokens) for case in cases]
    return {"copy_tokens": np.mean([c for c, _ in found]), "copy_reference": np.mean([n for _, n in found]),
            "copy_head_lines": GROUNDED_HEAD_LINES}


def eq5_summary(model_table: pd.DataFrame, open_rows: list[dict], best: dict) -> dict:
    """Section 5: Eq. 5 with measured terms against the measurement: its error, its bias per family, whether it ranks
    the methods as measured (and as far as the measurement can: the decode-time ties with the fastest), and the
    best tree against the best linear configuration in Eq. 5's terms (τ ratio over round-cost ratio). Returns the
    number of methods, the fastest method in decode time (``decode_fastest``) and ``numbers``."""
    agreement = cost_model_agreement(model_table)
    bias = agreement["by_family"]
    decode_ties = tied_with_fastest(open_rows, decode=True)  # decode times, as Eq. 5 models
    beyond = ranking_beyond_noise(model_table, decode_ties)
    tree_bias = float(np.mean([bias[f] for f in TREES if f in bias]))
    tree, linear = (model_table.set_index("label").loc[best[key].label] for key in ("tree_best", "linear"))
    cost_ratio = (tree.draft_cost + tree.verify_cost) / (linear.draft_cost + linear.verify_cost)
    model_ratio, measured_ratio = tree.tau / linear.tau / cost_ratio, tree.measured / linear.measured
    numbers = {"eq5_tree_error_pct": model_table.error_pct.abs().mean(), "eq5_rank_corr": agreement["rank_corr"],
               **{f"eq5_bias_{family}": value for family, value in bias.items()}, "eq5_bias_tree": tree_bias,
               "eq5_family_spread": agreement["family_spread"],
               # every family mispredicted by the same factor, within 5%
               "eq5_families_alike": int(agreement["family_spread"] <= 1.05),
               "eq5_ranks_as_measured": int(agreement["rank_corr"] >= 0.9 and agreement["top_measured_rank"] == 1),
               "eq5_top_predicted": agreement["top_predicted"], "eq5_top_rank": agreement["top_measured_rank"],
               "eq5_model_methods": agreement["draft_model_methods"], "eq5_top_measured": agreement["top_measured"],
               "trees_overpredicted": int(tree_bias > bias["linear"]),
               "eq5_top_tied": int(beyond["top_tied"]), "eq5_separates": int(beyond["separates"]),
               "eq5_misplaced": ", ".join(beyond["misplaced"]) or "none",
               "eq5_misplaced_count": len(beyond["misplaced"]),
               "eq5_tied": ", ".join(beyond["tied"]), "eq5_tied_count": len(beyond["tied"]),
               "eq5_tied_low": decode_ties[decode_ties.tied].speedup.min(),
               "eq5_fastest_decode": decode_ties.speedup.iloc[0],
               "tree_tau_ratio": tree.tau / linear.tau, "tree_cost_ratio": cost_ratio,
               **{f"{name}_{part}_cost": row[f"{part}_cost"] for part in ("draft", "verify")
                  for name, row in (("tree", tree), ("linear", linear))},
               "tree_model_ratio": model_ratio, "tree_model_wins": int(model_ratio > 1),
               "tree_measured_ratio": measured_ratio, "tree_measured_wins": int(measured_ratio > 1)}
    return {"methods": len(model_table), "decode_fastest": decode_ties.label.iloc[0], "numbers": numbers}


def gpu_width_costs(folders=None) -> pd.DataFrame:
    """What a wider verify forward costs on a GPU, as measured: for each (GPU, model) profiled by the window's
    ``09_step_profile`` part (steps replayed as CUDA graphs), the wall time at width 1 and at the widest profiled
    width, and their ratio. ``folders``: the ``results/<profile>/`` folders to read (default: every one with GPU
    rows, :func:`helpers.results.gpu_result_folders`). Empty where no GPU profiled a step."""
    found = []
    for folder in gpu_result_folders("09_step_profile") if folders is None else folders:
        rows = [r for r in latest_ok_rows(folder / "09_step_profile.jsonl") if r.get("device") == "cuda"]
        for (device, model), group in pd.DataFrame(rows).groupby(["device_name", "model_id"], sort=False):
            by_width = group.set_index(group.width.astype(int)).wall_ms.sort_index()
            if 1 in by_width.index and by_width.index.max() > 1:
                wide = int(by_width.index.max())
                found.append({"device": device, "model": model, "dtype": group.dtype.iloc[0], "wide": wide,
                              "ms_1": float(by_width[1]), "ms_wide": float(by_width[wide]),
                              "ratio": float(by_width[wide] / by_width[1])})
    return pd.DataFrame(found, columns=["device", "model", "dtype", "wide", "ms_1", "ms_wide", "ratio"])


def gpu_width_numbers(table: pd.DataFrame, model: str, handout_target: str = "Qwen/Qwen3-8B") -> dict:
    """The report's numbers from :func:`gpu_width_costs`: the notebook's own target (``model``, ``gpuwide_own_*``)
    and, where it is another model, the handout's target (``gpuwide_handout_*``), each on the first GPU that profiled
    it; ``{}`` where no GPU profiled ``model``. ``gpuwide_flat``: the widest forward of the handout's target (else
    the own one) cost under 1.25x its one-position step, "little more than" in prose."""
    numbers = {}
    for key, name in (("own", model), ("handout", handout_target)):
        rows = table[table.model == name]
        if rows.empty or (key == "handout" and name == model):
            continue
        row = rows.iloc[0]
        numbers.update({f"gpuwide_{key}_device": row.device, f"gpuwide_{key}_model": row.model,
                        f"gpuwide_{key}_wide": int(row.wide),
                        **{f"gpuwide_{key}_{field}": float(row[field]) for field in ("ms_1", "ms_wide", "ratio")}})
    if "gpuwide_own_ratio" not in numbers:
        return {}
    numbers["gpuwide_flat"] = int(numbers.get("gpuwide_handout_ratio", numbers["gpuwide_own_ratio"]) < 1.25)
    return numbers


GPU_PARTS = (notebook_part("10", (RESULTS,), measure),)  # what the GPU window measures (packages.Part)


def target_steps(rows: dict) -> list[dict]:
    """T_T of the cost rows (run-info page)."""
    return [step_record("10", "T_T", row["target_step_s"], row.get("runtime", "minimal"), 1, row["context_len"], row)
            for row in rows.get(RESULTS, []) if row.get("kind") == "costs" and row.get("target_step_s")]
