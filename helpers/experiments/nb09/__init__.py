"""Notebook 09 (handout §4.6): the cost terms, the gamma sweep and the batched points of its pair (configurations
from the ``analysis_*`` parameters, measured where the result file lacks them), the numbers the notebook and the
report print, and the GPU window's cost parts."""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from helpers.experiments.packages import TARGET, Part, notebook_part, step_record
from helpers.experiments import common, gpu_costs
from helpers.experiments.nb09 import decode_modes, goals, step_profile
from helpers.experiments.common import check_budget, seed_and_threads
from helpers.paths import results_dir
from helpers.results import free_memory, run_metadata

RESULT = "09_speedup_analysis"


def configs(params: dict) -> dict:
    """Every configuration the notebook measures: ``"costs"``, the gamma ``"sweep"`` and a batched point per batch
    size (keyed by it)."""
    pair = {"target": params["analysis_target"], "draft": params["analysis_draft"],
            "dtype": params["analysis_dtype"], "device": params["device"]}
    return {"costs": {"kind": "costs", **pair, "context_len": params["analysis_prompt_len"],
                      "gammas": params["analysis_gammas"]},
            "sweep": {"kind": "gamma_sweep", **pair, "prompts": params["analysis_prompt_count"],
                      "prompt_len": params["analysis_prompt_len"], "new_tokens": params["analysis_new_tokens"],
                      "gamma_list": params["analysis_gammas"]},
            **{b: {"kind": "batched", **pair, "batch_size": b, "gamma": params["analysis_batch_gamma"],
                   "new_tokens": params["analysis_batch_new_tokens"], "prompt_len": params["analysis_prompt_len"],
                   "phases": True, "costs_on": "the decoder's runtime"} for b in params["analysis_batch_sizes"]}}


@dataclass
class Pair:
    """The loaded pair, its held-out prompts and the metadata of every row it measures."""
    target: torch.nn.Module
    tokenizer: object
    draft: torch.nn.Module
    prompts: list
    meta: dict


def load_pair(params: dict) -> Pair:
    """Seed and threads, both models, enough held-out prompts of ``analysis_prompt_len`` tokens for the sweep and
    the largest batch, and the rows' metadata (with the machine load when the pair was loaded)."""
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
    from helpers.experiments.specdec_costs import measure_costs

    from helpers.experiments.nb09.costs import last_level_cache_bytes

    # the context tensor is built only where it measures (no GPU: meta)
    return store.run(configs(params)["costs"], lambda: {**measure_costs(
        pair.target, pair.draft, torch.tensor(pair.prompts[:1], device=params["device"]), params["analysis_gammas"],
        repeats=params["analysis_timing_repeats"]), "llc_bytes": last_level_cache_bytes()
        if params["device"] == "cpu" else None}, meta=pair.meta)


def row_cache_bytes(row: dict) -> int | None:
    """The last-level cache of the CPU that measured ``row``: the size it recorded, else this machine's where this
    is the CPU the row names, else None (a GPU, or another machine's rows rendered here)."""
    from helpers.experiments.nb09.costs import last_level_cache_bytes
    from helpers.hardware import cpu_name

    if row.get("llc_bytes"):
        return int(row["llc_bytes"])
    return last_level_cache_bytes() if row.get("device") == "cpu" and row.get("device_name") == cpu_name() else None


def sweep_row(params: dict, store, pair: Pair) -> dict:
    """Greedy speculative decoding per gamma against AR on the held-out prompts (stored row, or measured)."""
    from helpers.experiments.nb09.costs import speedup_sweep

    return store.run(configs(params)["sweep"], lambda: speedup_sweep(
        pair.target, pair.draft, pair.prompts[:params["analysis_prompt_count"]], params["analysis_gammas"],
        params["analysis_new_tokens"], repeats=params["analysis_generation_repeats"]), meta=pair.meta)


def batch_rows(params: dict, store, pair: Pair) -> list[dict]:
    """One batched point per batch size B, on the first B prompts (stored rows, or measured)."""
    from helpers.experiments.nb09.costs import batched_point

    return [store.run(configs(params)[b], lambda b=b: batched_point(
        pair.target, pair.draft, pair.prompts[:b], params["analysis_batch_new_tokens"], params["analysis_batch_gamma"],
        repeats=params["analysis_batch_repeats"], timing_repeats=params["analysis_timing_repeats"]), meta=pair.meta)
        for b in params["analysis_batch_sizes"]]


def measure(params: dict, store, progress: bool = True) -> None:
    """Everything notebook 09 measures, for what its result file lacks (no model is loaded when nothing is)."""
    results = store(RESULT)
    if all(results.has(config) for config in configs(params).values()):
        return
    check_budget(results, f"loading {params['analysis_target']}")
    pair = load_pair(params)
    cost_row(params, results, pair)
    sweep_row(params, results, pair)
    batch_rows(params, results, pair)
    del pair
    free_memory()


# ------------------------------------------------------------------------------------------- what the notebook prints

HANDOUT_MODELS = ("Qwen/Qwen3-8B", "Qwen/Qwen3-1.7B", "Qwen/Qwen3-0.6B", "meta-llama/Llama-3.1-8B",
                  "meta-llama/Llama-3.2-1B")
HANDOUT_PAIRS = {f"{draft.split('/')[-1]} / {target.split('/')[-1]}": (draft, target)
                 for target, draft in common.HANDOUT_PAIRS}  # "Qwen3-1.7B / Qwen3-8B" -> (draft, target)
C_KEYS = {f"{mode}_{size}": (f"Qwen3-{name} / Qwen3-8B", mode)  # the report's c of the Qwen3 pairs
          for size, name in (("06b", "0.6B"), ("17b", "1.7B")) for mode in ("eager", "graphs")}


def print_handout_depths() -> dict[str, int]:
    """The handout's models' layers, GB of bf16 weights, GB a decode step reads and whether the embedding is tied
    (printed); returns their layer counts."""
    from helpers.memory import decode_weight_bytes, load_config, weight_bytes

    configs = {model_id: load_config(model_id) for model_id in HANDOUT_MODELS}
    print(pd.DataFrame([{"model": m, "layers": c.num_hidden_layers, "weights GB": weight_bytes(c) / 1e9,
                         "read per decode step GB": decode_weight_bytes(c) / 1e9, "tied": c.tie_word_embeddings}
                        for m, c in configs.items()]).round(2).to_string(index=False))
    return {model_id: config.num_hidden_layers for model_id, config in configs.items()}


def print_draft_cost_ratios(layers: dict) -> tuple[dict, dict]:
    """Per handout pair, printed: the launch-bound c (layers over layers, and the smallest gamma with gamma * c > 1)
    and the memory-bound c (the weight bytes a decode step reads)."""
    from helpers.memory import decode_weight_bytes, load_config

    launch_c = {name: layers[d] / layers[t] for name, (d, t) in HANDOUT_PAIRS.items()}
    bytes_c = {name: decode_weight_bytes(load_config(d)) / decode_weight_bytes(load_config(t))
               for name, (d, t) in HANDOUT_PAIRS.items()}
    print(pd.DataFrame({"launch-bound c": launch_c, "gamma*c > 1 from": {n: int(np.floor(1 / r)) + 1
                                                                       for n, r in launch_c.items()},
                        "memory-bound c": bytes_c}).round(3).to_string())
    return launch_c, bytes_c


def gpu_draft_costs(launch_c: dict, bytes_c: dict) -> pd.DataFrame:
    """The handout pairs' c as the GPU windows measured it, eager and as CUDA graphs, beside the launch-bound and
    memory-bound c. Empty without GPU rows."""
    from helpers.experiments.gpu_costs import measured_cost_tables

    by_models = {models: name for name, models in HANDOUT_PAIRS.items()}
    lines = []
    for _, costs in measured_cost_tables():
        for _, row in costs.iterrows():
            name = by_models.get((row["draft"], row["target"]))
            if name is not None:
                lines.append({"gpu": row["device_name"], "pair": name, "decode": row["decode"], "c": row["c"],
                              "launch-bound c": launch_c[name], "memory-bound c": bytes_c[name],
                              "between": bytes_c[name] <= row["c"] <= launch_c[name]})
    return pd.DataFrame(lines)


def print_gpu_draft_costs(gpu_c: pd.DataFrame) -> dict:
    """:func:`gpu_draft_costs` printed, and the report's numbers (``gpu_c_measured`` 0 without both Qwen3 pairs in
    both modes): whether every c with graphs lies between the regimes and eager c nearer the launch-bound, the larger
    draft's c over the smaller's, the gamma from which gamma * c > 1 eager; ``gpu_c_other_*``: a second GPU."""
    if gpu_c.empty:
        print("no GPU window has measured the handout pairs' c yet")
        return {"gpu_c_measured": 0}
    print(gpu_c.round(3).to_string(index=False))

    def terms(gpu: str) -> dict | None:  # the four c of one GPU, None where one is missing
        by = gpu_c[gpu_c["gpu"] == gpu].set_index(["pair", "decode"])["c"]
        return {key: by[pair] for key, pair in C_KEYS.items()} if all(p in by.index for p in C_KEYS.values()) else None

    names = gpu_c["gpu"].unique()
    first, other = terms(names[0]), terms(names[1]) if len(names) > 1 else None  # a second GPU, beside the first
    if first is None:
        return {"gpu_c_measured": 0}
    graphs, eager = gpu_c[gpu_c["decode"] == "graphs"], gpu_c[gpu_c["decode"] == "eager"]
    nearer_launch = bool(((eager["c"] - eager["launch-bound c"]).abs()
                          < (eager["c"] - eager["memory-bound c"]).abs()).all())
    numbers = {}
    if other is not None:
        rows = eager[eager["gpu"] == names[1]]
        numbers = {"gpu_c_other_name": names[1], **{f"gpu_c_other_{key}": v for key, v in other.items()},
                   "gpu_c_other_graphs_ratio": other["graphs_17b"] / other["graphs_06b"],
                   "gpu_c_other_eager_above": int((rows["c"] > rows["launch-bound c"]).any())}
    numbers |= {"gpu_c_measured": 1, "gpu_c_name": names[0],
                "gpu_c_graphs_ratio": first["graphs_17b"] / first["graphs_06b"],
                "gpu_c_graphs_bytes_ratio": graphs["memory-bound c"].max() / graphs["memory-bound c"].min(),
                "gpu_c_eager_nearer_launch": int(nearer_launch),
                "gpu_c_eager_gamma": int(np.floor(1 / min(first["eager_06b"], first["eager_17b"]))) + 1,  # gamma*c > 1
                "gpu_c_graphs_between": int(graphs["between"].all()), **{f"gpu_c_{key}": v for key, v in first.items()}}
    print(numbers)
    return numbers


def model_file_gpu_rows(folders=None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The model file's decode on the GPUs that measured it (default every GPU profile's ``folders``): the
    :func:`~.decode_modes.decode_table` of part ``decode`` and the :func:`~.decode_modes.pair_terms` of part ``eq5``
    (trusted ratios only), each with a ``gpu`` column."""
    from helpers.experiments.nb09 import decode_modes
    from helpers.experiments.gpu_costs import COSTS, read_rows, without_artefacts
    from helpers.results import gpu_result_folders

    folders = gpu_result_folders(decode_modes.DECODE_STEPS) if folders is None else folders
    steps, pairs = [], []
    for folder in folders:
        rows = read_rows(folder, decode_modes.DECODE_STEPS)
        if rows:
            steps.append(decode_modes.decode_table(rows).rename(columns={"device_name": "gpu"}))
        cost_rows = read_rows(folder, COSTS)
        if cost_rows:
            gpu = cost_rows[0].get("device_name")
            trusted = [without_artefacts(row) for row in cost_rows]  # a T_V/T_T below 1 feeds no Eq. 5 number
            pairs.append(decode_modes.pair_terms(trusted).assign(gpu=gpu))
    return (pd.concat(steps, ignore_index=True) if steps else pd.DataFrame(),
            pd.concat(pairs, ignore_index=True) if pairs else pd.DataFrame())


def print_model_file_gpu(steps: pd.DataFrame, pairs: pd.DataFrame) -> dict:
    """The model-file goals on the first GPU that measured the compiled mode, printed; the report's numbers
    (``mf_measured`` 0 without one): the 8B targets' compiled step and roofline share, the smallest ratio of
    transformers' compiled static cache over it, and the handout pairs' compiled c and largest break-even alpha."""
    compiled = steps[steps["mode"] == "compiled"] if len(steps) else steps
    if not len(compiled):
        print("no GPU window has measured the compiled decode step yet (part 'decode')")
        return {"mf_measured": 0}
    from helpers.experiments.nb09 import decode_modes

    gpu = compiled["gpu"].iloc[0]
    mine = steps[steps["gpu"] == gpu]
    print(mine.round(3).to_string(index=False))
    numbers = {"mf_measured": 1, "mf_gpu": gpu}
    for key, model in (("qwen8b", "Qwen/Qwen3-8B"), ("llama8b", "meta-llama/Llama-3.1-8B")):
        row = compiled[(compiled["gpu"] == gpu) & (compiled["model"] == model)]
        if len(row):
            numbers.update({f"mf_{key}_ms": float(row["ms/step"].iloc[-1]),
                            f"mf_{key}_share_pct": 100 * float(row["roofline share"].iloc[-1])})
    peer = decode_modes.speed_against_peer(mine)
    if len(peer):
        numbers["mf_peer_ratio_min"] = float(peer["ratio"].min())
        print("transformers' compiled static cache over our compiled step:\n" + peer.round(2).to_string(index=False))
    terms = pairs[(pairs["gpu"] == gpu) & (pairs["decode"] == "compiled")] if len(pairs) else pairs
    if len(terms):
        print(terms.round(3).to_string(index=False))
        numbers.update({"mf_c_min": float(terms["c"].min()), "mf_c_max": float(terms["c"].max()),
                        "mf_break_even_max": float(terms["break-even alpha"].max())})
    return numbers


def compare_costs_with_07(rows_07, draft_name: str, tokenizer, T_T: float, T_D: float, c: float,
                          cost_row: dict) -> dict:
    """The same pair's cost terms in notebook 07 and here, what each was timed under (printed), and what could explain
    the gap (``c07_available`` 0 without 07's rows of this draft): ``c07_dearer``, how many of T_T and T_D were slower
    at the longer context (2: context may explain part of the gap; else timing variation does)."""
    from helpers.prompts import load_prompts

    same_07 = rows_07[rows_07["draft"] == draft_name] if not rows_07.empty else rows_07
    if not len(same_07):
        return {"c07_available": 0}
    r07 = same_07.iloc[0]  # 07 times the costs once per pair, on the cached context of the prompt it records
    text_07 = next((p["prompt"] for p in load_prompts() if p["id"] == r07.get("cost_prompt")), None)
    context_07 = len(tokenizer(text_07)["input_ids"]) if text_07 is not None else float("nan")
    conditions = pd.DataFrame({
        "notebook": ["07", "09"], "T_T (ms)": [1e3 * r07["target_step_s"], 1e3 * T_T],
        "T_D (ms)": [1e3 * r07["T_D_s"], 1e3 * T_D],
        "c": [r07["c"], c], "context (tokens)": [context_07, cost_row["context_len"]],
        "runtime": [r07.get("runtime"), cost_row.get("runtime")],
        "stored at": [r07.get("timestamp"), cost_row.get("timestamp")]})
    print(conditions.round(3).to_string(index=False))
    # a longer cached context can only make a forward dearer (unknown context: assume it may explain the gap)
    known = bool(conditions["context (tokens)"].notna().all())
    longer = conditions["context (tokens)"].idxmax() if known else None
    numbers = {"c07_same": float(r07["c"]), "c07_ctx": context_07 if text_07 is None else int(context_07),
               "c09_ctx": int(cost_row["context_len"]), "c07_tt_ms": 1e3 * float(r07["target_step_s"]),
               "c07_available": 1, "c07_ctx_known": int(known),
               "c07_dearer": sum(int(conditions[k].idxmax() == longer) for k in ("T_T (ms)", "T_D (ms)"))
               if known else 2,
               "c07_same_run": int(bool(r07.get("run_id")) and r07.get("run_id") == cost_row.get("run_id")),
               "c07_gap_pct": 100 * abs(r07["c"] / c - 1),
               "c07_same_runtime": int(conditions["runtime"].nunique() == 1)}
    print(numbers)
    return numbers


def source_run(by_source_07, rows_07, dear_draft: str):
    """Alpha per prompt source from ONE run of notebook 07: its per-source run where it exists (one gamma), else the
    gamma sweep pooled over its gammas; returns (sources, draft, the run's numbers)."""
    from helpers.experiments.nb09.costs import alpha_by_source

    if len(by_source_07):
        src_row = by_source_07.iloc[0]
        sources = alpha_by_source(by_source_07)
        prompts = len(src_row["prompt_ids"])
        return sources, src_row["draft"], {"q07_per_source_run": 1, "q07_source_prompts": prompts,
                                           "q07_source_per": prompts // max(len(sources), 1),
                                           "q07_source_gamma": int(src_row["gamma"]),
                                           "q07_source_draft": src_row["draft"]}
    sources = alpha_by_source(rows_07[rows_07["draft"] == dear_draft])
    return sources, dear_draft, {"q07_per_source_run": 0, "q07_source_prompts": len(rows_07["prompt_ids"].iloc[0]),
                                 "q07_source_gammas": rows_07.loc[rows_07["draft"] == dear_draft, "gamma"].nunique(),
                                 "q07_source_draft": dear_draft}


def other_draft_order(rows_07, other: str, src_draft: str, high_source: str) -> dict:
    """Whether the other draft (07's sweep, per gamma) puts the sources in ``src_draft``'s order (printed): its
    highest source where one is highest at every gamma, with its alpha's span, and the span of ``high_source``."""
    from helpers.experiments.nb09.costs import alpha_by_source

    per_gamma_src = {int(g): alpha_by_source(grp).set_index("source")["alpha"]
                     for g, grp in rows_07[rows_07["draft"] == other].groupby("gamma")}
    if not per_gamma_src or not all(len(s) >= 2 for s in per_gamma_src.values()):
        return {"q07_other_available": 0}
    other_high = {s.idxmax() for s in per_gamma_src.values()}
    other_top = other_high.pop() if len(other_high) == 1 else None

    def span(source):
        vals = [s[source] for s in per_gamma_src.values() if source in s]
        return min(vals), max(vals)

    numbers = {"q07_other_available": 1, "q07_other_draft": other, "q07_other_gammas": len(per_gamma_src),
               "q07_other_top_fixed": int(other_top is not None), "q07_other_top": other_top or "none",
               "q07_order_differs": int(other_top is not None and other_top != high_source)}
    numbers["q07_other_high_low"], numbers["q07_other_high_high"] = span(high_source)
    if other_top:
        numbers["q07_other_top_low"], numbers["q07_other_top_high"] = span(other_top)
    print(numbers)
    return numbers


def source_numbers(drafts_07: dict, rows_07, by_source_07) -> dict:
    """Alpha per prompt source (:func:`source_run`) and whether the other draft agrees, printed."""
    sources, src_draft, src_run = source_run(by_source_07, rows_07, drafts_07["dear"]["draft"])
    if len(sources) < 2:
        return {"q07_sources": 0, "q07_other_available": 0}
    low, high = sources.iloc[0], sources.iloc[-1]
    print(src_run, "\n", sources.round(3).to_string(index=False))
    numbers = {"q07_source_low": low["source"], "q07_source_low_alpha": low["alpha"],
               "q07_source_high": high["source"], "q07_source_high_alpha": high["alpha"], "q07_sources": 1, **src_run}
    cheap, dear = drafts_07["cheap"]["draft"], drafts_07["dear"]["draft"]
    other = cheap if src_draft != cheap else dear
    return numbers | other_draft_order(rows_07, other, src_draft, high["source"])


def print_batch_trend(by_batch) -> dict:
    """T_V/T_T, alpha and the decode speedup over the batch size (printed), and whether T_V/T_T grows (at the last B,
    and monotonically) and the decode speedup falls. Each B runs on its first B prompts: alpha and the speedup mix
    prompt effects with batch effects."""
    numbers = {}
    for key, column in (("speedup", "speedup"), ("decode_speedup", "decode_speedup"), ("predicted", "predicted"),
                        ("straggler", "straggler"), ("verify_ratio", "T_V/T_T")):
        numbers.update({f"batch{int(b)}_{key}": value for b, value in zip(by_batch["batch_size"], by_batch[column])})
    first_row, last_row = by_batch.iloc[0], by_batch.iloc[-1]
    verify_dip = by_batch.loc[by_batch["T_V/T_T"].idxmin()]
    flags = {"batch_verify_grows": int(last_row["T_V/T_T"] > first_row["T_V/T_T"]),
             "batch_verify_monotone": int(by_batch["T_V/T_T"].is_monotonic_increasing),
             "batch_speedup_falls": int(last_row["decode_speedup"] < first_row["decode_speedup"]),
             "batch_straggler_max": float(by_batch["straggler"].max())}
    print(by_batch[["batch_size", "alpha", "rounds", "T_V/T_T", "decode_speedup", "straggler"]].round(3)
          .to_string(index=False), "\n", flags)
    return numbers | flags | {
        "batch_verify_min": float(verify_dip["T_V/T_T"]), "batch_verify_min_b": int(verify_dip["batch_size"]),
        "batch_alpha_text": ", ".join(f"{a:.3f}" for a in by_batch["alpha"]),
        "batch_alpha_min": float(by_batch["alpha"].min()), "batch_alpha_max": float(by_batch["alpha"].max()),
        "batch_sizes_text": ", ".join(str(int(b)) for b in by_batch["batch_size"]),
        "batch1_rounds": int(by_batch["rounds"].iloc[0]),
        "batch_first": int(first_row["batch_size"]), "batch_last": int(last_row["batch_size"])}


def accounting_numbers(accounting, verdicts: dict, tolerance: float, largest_loss: str, factors: list) -> dict:
    """The report's numbers of the batch accounting (:func:`helpers.specdec.analysis.batch_accounting`)."""
    outside, above = verdicts["below"], verdicts["above"]
    within = sorted(verdicts["below_within"] + verdicts["above_within"])
    first_b, last_b = accounting.iloc[0], accounting.iloc[-1]
    numbers = {"batch_bracketed": int(not outside and not above),
               "batch_outside": ", ".join(str(b) for b in outside) or "none",
               "batch_outside_count": len(outside), "batch_above": ", ".join(str(b) for b in above) or "none",
               "batch_above_count": len(above), "batch_within": ", ".join(str(b) for b in within) or "none",
               "batch_within_count": len(within), "bound_tolerance_pct": 100 * tolerance,
               "batch_largest_loss": largest_loss.replace("_", " ")}
    for key in factors + ["eq5_over_straggler"]:
        numbers.update({f"acc_{key}_first": float(first_b[key]), f"acc_{key}_last": float(last_b[key])})
    return numbers | {"acc_b_first": int(first_b["B"]), "acc_b_last": int(last_b["B"]),
                      "acc_overhead_min": float(accounting["overhead"].min()),
                      "acc_overhead_max": float(accounting["overhead"].max())}


def kv_draft_ratio(gpu_name: str, context_len: int) -> float:
    """Qwen3-0.6B / Qwen3-8B memory-bound c with ``context_len`` tokens of KV (batch 1, ``gpu_name``'s roofline)."""
    from helpers.gpu_specs import gpu_spec, roofline_seconds
    from helpers.memory import load_config

    gpu = gpu_spec(gpu_name)
    q06, q8 = load_config("Qwen/Qwen3-0.6B"), load_config("Qwen/Qwen3-8B")
    return roofline_seconds(q06, gpu, 1, 1, context_len) / roofline_seconds(q8, gpu, 1, 1, context_len)


def report_window(profile: str) -> list[str]:
    """The window's cost tables for the report (:func:`~helpers.experiments.gpu_costs.write_report_tables`) and its
    goal lines (:func:`~helpers.experiments.nb09.goals.goal_lines`; none without rows)."""
    return goals.goal_lines(results_dir(profile, create=False)) if gpu_costs.write_report_tables(profile) else []


FATAL = (common.BudgetExhausted,)  # a budget stop ends the window's part; any other failure is recorded in its row
GPU_PARTS = (  # the window's parts of notebook 09 and the report: each handout model's decode step mode by mode,
    # transformers' own decoding beside it, Eq. 5's terms of the handout pairs, the CPU pair's terms and end-to-end
    # runs, where a step's time goes, and this notebook's own rows
    Part("decode", (decode_modes.DECODE_STEPS,), lambda params, store, settings: decode_modes.measure(
        params, store, {**settings.decode, "modes": settings.modes}, fatal=FATAL)),
    Part("peers", (decode_modes.DECODE_STEPS,), lambda params, store, settings: decode_modes.measure(
        params, store, settings.decode, fatal=FATAL, peers=True)),
    Part("eq5", (gpu_costs.COSTS,), lambda params, store, settings: gpu_costs.measure_eq5(
        params, store(gpu_costs.COSTS), settings, settings.pairs, "random", fatal=FATAL)),
    Part("graphs", (gpu_costs.GRAPHS,), lambda params, store, settings: gpu_costs.measure_graphs(
        params, store, settings, fatal=FATAL), report=report_window),
    Part("profile", (step_profile.STEP_PROFILE,), lambda params, store, settings: step_profile.measure_profiles(
        params, store, settings, fatal=FATAL)),
    notebook_part("09", (RESULT,), measure),
)


def target_steps(rows: dict) -> list[dict]:
    """T_T of the cost rows, and at each batch of the batched rows (run-info page)."""
    found = []
    for row in rows.get(RESULT, []):
        if row.get("target") == TARGET and row.get("kind") == "costs":
            found.append(step_record("09", "T_T", row["target_step_s"], row.get("runtime", "minimal"), 1,
                                     row["context_len"], row))
        if row.get("target") == TARGET and row.get("kind") == "batched":
            found.append(step_record("09", f"T_T at batch {row['batch_size']}", row["target_step_s"],
                                     "minimal, ragged batch", row["batch_size"], row["prompt_len"], row))
    return found
