"""Notebook 12 (what makes a good draft): its result rows from the parameters (:func:`measure`, which the notebook
and the GPU window both call, so that each finds the other's rows), and the numbers and flags the notebook prints and
the report quotes; the computations live in :mod:`helpers.experiments.nb12.study`.
"""
from __future__ import annotations

import os
import re

import pandas as pd
import torch
from tqdm.auto import tqdm

from helpers.experiments.packages import TARGET, notebook_part, step_record
from helpers.experiments.nb12.study import (depth_latency, draft_config, eq5_agrees, gamma_ties, leave_one_out,
                                              measure_draft, measure_scale, predictors, scale_config, timing_noise)
from helpers.models import load_model
from helpers.models.registry import DRAFT_FAMILY
from helpers.prompts import encode_prompts, load_prompts, select_prompts
from helpers.results import config_key, free_memory, measured_on, run_metadata
from helpers.stats import tied_with_best

RESULTS = "12_draft_design"
# the notebook parameters the measurement reads (the notebook passes exactly these)
PARAMETERS = ("device", "design_target", "design_drafts", "design_dtype", "design_gammas", "design_prompts",
              "design_new_tokens", "design_repeats", "scale_model", "scale_depths", "scale_dtype", "scale_context",
              "scale_repeats")


def short(name: str) -> str:
    """A draft's name without the ``cpu-pair/`` prefix (as the tables and prose write it)."""
    return name.removeprefix("cpu-pair/")


def prompt_rows(params: dict) -> list[dict]:
    """The CPU prompts every draft decodes (held-out sources, round-robin)."""
    return select_prompts(load_prompts("cpu"), params["design_prompts"])


FAMILY_NAME = re.compile(r"draft-(\d+)x\d+$")  # the equal-size family's own-embedding drafts: draft-<layers>x<width>


COMPARED = ("draft-2x192", "draft-2x192-shared", "draft-2l")  # section 5: sharing the embedding, and the recipe


def check_drafts(drafts: list[str]) -> None:
    """Refuse up front what the sections cannot use: section 4 fits T_D over depth across the equal-size family (two
    of its depths at least), section 5 compares :data:`COMPARED`."""
    depths = {int(match.group(1)) for name in drafts if (match := FAMILY_NAME.search(name))}
    if len(depths) < 2:
        raise ValueError(f"design_drafts needs drafts of at least two depths from the equal-size family "
                         f"(draft-<layers>x<width>, e.g. cpu-pair/{DRAFT_FAMILY[0]} and cpu-pair/{DRAFT_FAMILY[1]}) "
                         f"for section 4's line of draft latency over depth; got {drafts}")
    missing = [name for name in COMPARED if name not in {short(d) for d in drafts}]
    if missing:
        raise ValueError(f"design_drafts lacks {', '.join('cpu-pair/' + m for m in missing)}: section 5 compares "
                         f"{', '.join(COMPARED)}; got {drafts}")


def configs(params: dict) -> dict:
    """Every result-store configuration of the notebook: ``"scale"`` and one per draft (by name)."""
    check_drafts(params["design_drafts"])
    ids = [row["id"] for row in prompt_rows(params)]
    return {"scale": scale_config(params), **{name: draft_config(params, name, ids)
                                               for name in params["design_drafts"]}}


def _meta(params: dict, weights: str) -> dict:
    return run_metadata(model_id=params["design_target"], weights=weights, dtype=params["design_dtype"],
                        device=params["device"], seed=0, load_average=os.getloadavg()[0])


def measure(params: dict, store, progress: bool = True) -> dict:
    """Measure what ``store(RESULTS)`` lacks, depth at scale first (random weights; on a GPU the launch-bound regime,
    the most valuable row of a short window), then every draft against the target, loading models only for a missing
    row (a ``store.budget``, the GPU window's, checked before). Returns ``{"rows": one per draft in design_drafts
    order, "scale": the scale timing's rows, "prompts": their number, "measured_on" and "scale_measured_on": the
    machine that measured them}``."""
    budget = getattr(store, "budget", None)
    results = store(RESULTS)
    wanted = configs(params)
    scale_meta = {**_meta(params, "random"), "model_id": params["scale_model"], "dtype": params["scale_dtype"]}
    scale = results.run(wanted.pop("scale"), lambda: measure_scale(params, progress=progress), meta=scale_meta)
    prompts = prompt_rows(params)
    if not all(results.has(config) for config in wanted.values()):
        if budget is not None:
            budget.check(f"loading {params['design_target']}")
        dtype = getattr(torch, params["design_dtype"])
        target, tokenizer = load_model(params["design_target"], device=params["device"], dtype=dtype)
        cases = encode_prompts(tokenizer, prompts, target.device)
        meta = _meta(params, target.weights_label)
        for name in tqdm([n for n, c in wanted.items() if not results.has(c)], desc="drafts", disable=not progress):
            draft, _ = load_model(name, device=params["device"], dtype=dtype)
            results.run(wanted[name], lambda draft=draft: measure_draft(
                target, draft, cases, params["design_gammas"], params["design_new_tokens"],
                repeats=params["design_repeats"]), meta=meta)
            del draft
        del target
        free_memory()
    done = results.done()
    rows = [done[config_key(config)] for config in wanted.values()]
    return {"rows": rows, "scale": scale["rows"], "prompts": len(prompts),
            "measured_on": measured_on(rows), "scale_measured_on": measured_on(scale)}


def accuracy_or_latency(table: pd.DataFrame, rows: list[dict]) -> dict:
    """Section 3: which property predicts the speedup (r² of a line per property, each with every draft and with
    one left out), the run's timing noise (the tolerance below which two speedups tie), whether c ranks at all
    under T_T's spread, the drafts tied with the fastest, and the held-out losses of the equal-size family.
    Returns ``ranked`` (to display), ``tolerance``, ``tied_fastest`` (a column for ``table``), ``loo`` (per line,
    the r² with each draft left out), ``noise`` (:func:`~helpers.experiments.nb12.study.timing_noise`), ``c_order``
    (the drafts by c with each run's T_T and with the median one, and ``r2_own``) and ``numbers``."""
    ranked = predictors(table)
    accuracy = ranked[ranked.column.isin(["alpha", "agreement", "heldout_loss"])].iloc[0]
    latency = ranked[ranked.column.isin(["c_round", "T_D_ms"])].iloc[0]
    latency_wins = bool(latency.r2 > accuracy.r2)
    held_out = {name: leave_one_out(table, row.column) for name, row in (("accuracy", accuracy), ("latency", latency))}
    loo = {name: frame.r2.to_dict() for name, frame in held_out.items()}
    stable = all((loo["latency"][d] > loo["accuracy"][d]) == latency_wins for d in loo["latency"])
    carrier = max(loo["latency"], key=lambda d: abs(loo["latency"][d] - latency.r2))  # the draft the line leans on
    # an r2 says how well a line fits, not which way it slopes: each line must slope as Eq. 5 says, with every draft
    expected = bool(accuracy.as_expected and latency.as_expected)
    flips = {name: [short(d) for d in held_out[name].index[held_out[name].direction != row.direction]]
             for name, row in (("accuracy", accuracy), ("latency", latency))}
    noise = timing_noise(rows)  # every draft's row timed the SAME target (T_T) and AR on the same prompts
    # a speedup is a ratio of two timings, each with about the AR time's relative std: two speedups compare four
    # such timings, so their ratio's relative std is about twice it; closer than that, two speedups are a tie
    tolerance = 2 * noise["ar_rel_std"]
    c_order, c_numbers = _c_ranks(table, noise)
    c_order["r2_own"] = latency.r2 if latency.column == "c_round" else float("nan")  # the speedup on c, own T_T
    tied = pd.Series(tied_with_best(table.speedup, tolerance), index=table.index)
    tied_fastest = [short(d) for d in table[tied].sort_values("speedup", ascending=False).draft]
    ends = {"fastest": table.loc[table.speedup.idxmax()], "slowest": table.loc[table.speedup.idxmin()]}
    most_accurate = table.loc[table.alpha.idxmax()]
    family_losses = table[table.draft.str.contains("x")].heldout_loss
    span = lambda **series: {f"{name}_{end}": getattr(values, end)()  # noqa: E731
                             for name, values in series.items() for end in ("min", "max")}
    numbers = {"accuracy_property": accuracy.property, "accuracy_r2": accuracy.r2, "verdict_stable": int(stable),
               "directions_expected": int(expected), "directions_kept": int(not any(flips.values())),
               # per line, the drafts whose omission turns its slope
               **{f"flips_{name}": ", ".join(drafts) for name, drafts in flips.items()},
               **{f"flips_{name}_count": len(drafts) for name, drafts in flips.items()},
               "accuracy_direction": accuracy.direction, "latency_direction": latency.direction,
               "latency_r2_loo_min": min(loo["latency"].values()), "latency_r2_loo_max": max(loo["latency"].values()),
               "latency_r2_carrier": short(carrier), "latency_r2_without": loo["latency"][carrier],
               "latency_property": latency.property, "latency_r2": latency.r2, "latency_wins": int(latency_wins),
               **{f"{name}{key}": value for name, row in ends.items() for key, value in (
                   ("", short(row.draft)), ("_speedup", row.speedup), ("_alpha", row.alpha), ("_c", row.c_round))},
               "accurate": short(most_accurate.draft),
               "accurate_alpha": most_accurate.alpha, "accurate_speedup": most_accurate.speedup,
               "tt_min_ms": noise["tt_min_ms"], "tt_max_ms": noise["tt_max_ms"],
               "tt_range_pct": 100 * noise["tt_rel_range"], "tolerance_pct": 100 * tolerance,
               "ar_std_pct": 100 * noise["ar_rel_std"], "ar_range_pct": 100 * noise["ar_rel_range"], **c_numbers,
               "fastest_tied": ", ".join(tied_fastest), "fastest_tied_count": len(tied_fastest),
               "fastest_tied_low": table[tied].speedup.min(),
               **span(alpha=table.alpha, c=table.c_round, family_loss=family_losses),
               # the shapes learnt unequally well: more than 0.1 nats/token apart
               "losses_differ": int(family_losses.max() - family_losses.min() > 0.1)}
    return {"ranked": ranked, "tolerance": tolerance, "tied_fastest": tied.tolist(), "loo": loo, "noise": noise,
            "c_order": c_order, "numbers": numbers}


def _c_ranks(table: pd.DataFrame, noise: dict) -> tuple[dict, dict]:
    """c = T_D/T_T uses each run's own T_T: pairs of drafts whose c differ by less than T_T's spread do not rank;
    the same ordering and r² with one T_T (the median) for every draft."""
    c_sorted = table.sort_values("c_round")
    c_gaps = c_sorted.c_round.iloc[1:].values / c_sorted.c_round.iloc[:-1].values - 1
    c_common = table.T_D_round_ms / pd.Series(noise["tt_ms"]).median()  # every c over one T_T (the median)
    order = {"own": [short(d) for d in c_sorted.draft],
             "common": [short(d) for d in table.assign(c_common=c_common).sort_values("c_common").draft]}
    return order, {"c_close": int((c_gaps < noise["tt_rel_range"]).sum()), "c_pairs": len(c_gaps),
                   "c_order_same": int(c_common.rank().tolist() == table.c_round.rank().tolist()),
                   "c_r2_common": float(pd.Series(c_common).corr(table.speedup) ** 2)}


def depth_summary(depth: dict) -> dict:
    """Section 4: the line T_D = fixed + per layer over the equal-size family (``depth``:
    :func:`~helpers.experiments.nb12.study.depth_latency`), and whether the per-layer term dominates (most of the
    deepest draft's step): the report's numbers."""
    return {"fixed_ms": depth["fixed_ms"], "ms_per_layer": depth["ms_per_layer"], "depth_r2": depth["r2_layers"],
            "deep": short(depth["deep"]), "shallow": short(depth["shallow"]), "latency_ratio": depth["latency_ratio"],
            "depth_ratio": depth["depth_ratio"], "depth_dominates": int(depth["per_layer_share"] > 0.5),
            "per_layer_share_pct": 100 * depth["per_layer_share"]}


def gamma_agreement(table: pd.DataFrame, rows: list[dict], tolerance: float, gammas) -> dict:
    """Section 5: Eq. 5's optimum γ against the measured one per draft, strictly and against the set of γs tied
    with the best; drafts whose best γ is at the edge of the sweep apart. Returns ``table`` with the columns
    ``gamma_gap``, ``tied_gammas``, ``eq5_agrees`` and ``eq5_error_pct`` added, and ``numbers``."""
    table = table.copy()
    table["gamma_gap"] = table.eq5_gamma - table.best_gamma
    ties = gamma_ties(rows, tolerance)  # per draft, the gammas within the tolerance of its best: the measured optimum
    table["tied_gammas"] = table.draft.map(ties)
    table["eq5_agrees"] = [eq5_agrees(g, t) for g, t in zip(table.eq5_gamma, table.tied_gammas)]
    table["eq5_error_pct"] = 100 * (table.eq5_at_best / table.speedup - 1)
    misses = table[table.gamma_gap.abs() > 1]
    edge, inner = table[table.best_at_edge], table[~table.best_at_edge]
    return {"table": table, "numbers": {
        "gamma_agree": int((table.gamma_gap.abs() <= 1).sum()), "drafts": len(table),
        "eq5_max_error": table.eq5_error_pct.abs().max(), "eq5_mean_error": table.eq5_error_pct.abs().mean(),
        "gamma_max": max(int(g) for g in gammas), "edge_count": len(edge),
        "edge_drafts": ", ".join(short(d) for d in edge.draft) or "none", "inner_count": len(inner),
        "agree_inner": int((inner.gamma_gap.abs() <= 1).sum()), "gamma_agree_ties": int(table.eq5_agrees.sum()),
        "gamma_misses": len(misses), "gamma_misses_tied": int(misses.eq5_agrees.sum()),
        "gamma_miss_drafts": ", ".join(short(d) for d in misses.draft) or "none"}}


def depth_at_scale(scale: pd.DataFrame, depth: dict, scale_model: str) -> dict:
    """Section 6: random-weight models of ``scale_model``'s size at several depths against the CPU pair's drafts
    (``depth``: their :func:`~helpers.experiments.nb12.study.depth_latency`). Returns ``series`` (one row per depth
    with the least-squares line in depth and its residual) and ``numbers``."""
    deep_s, shallow_s = scale.loc[scale.layers.idxmax()], scale.loc[scale.layers.idxmin()]
    scale_depth = depth_latency(scale, "step_ms")
    series = scale.sort_values("layers")[["layers", "hidden_size", "parameters", "step_ms"]].assign(
        parameters_m=lambda f: f.parameters / 1e6, fit_ms=lambda f: f.step_ms - scale_depth["residuals_ms"],
        residual_ms=scale_depth["residuals_ms"]).drop(columns="parameters")
    # does depth explain the series? a line in depth must account for most of its variation, and time must not fall
    # as depth grows; otherwise the per-layer share read off the line describes nothing
    depth_explains = bool(scale_depth["r2_layers"] >= 0.8 and scale_depth["monotone"])
    numbers = {"scale_model": scale_model.split("/")[-1], "scale_deep": int(deep_s.layers),
               "scale_shallow": int(shallow_s.layers), "scale_deep_ms": deep_s.step_ms,
               "scale_shallow_ms": shallow_s.step_ms, "scale_ratio": deep_s.step_ms / shallow_s.step_ms,
               "scale_depth_ratio": deep_s.layers / shallow_s.layers,
               "scale_parameters_m": scale.parameters.mean() / 1e6,
               "scale_per_layer_pct": 100 * scale_depth["per_layer_share"],
               "scale_depth_dominates": int(scale_depth["per_layer_share"] > 0.5),
               "scale_r2": scale_depth["r2_layers"],
               **{f"scale_{key}": scale_depth[key] for key in ("max_residual_ms", "max_residual_pct")},
               "scale_monotone": int(scale_depth["monotone"]), "scale_depth_explains": int(depth_explains),
               "scale_params_min_m": series.parameters_m.min(), "scale_params_max_m": series.parameters_m.max(),
               **{f"scale_{name}{key}": value for name, row in (("slowest", scale.loc[scale.step_ms.idxmax()]),
                                                                ("fastest", scale.loc[scale.step_ms.idxmin()]))
                  for key, value in (("", int(row.layers)), ("_ms", row.step_ms))}}
    return {"series": series, "numbers": numbers}


def embedding_sharing(by: pd.DataFrame, tolerance: float = 0.1) -> dict:
    """The draft sharing the target's embedding against the same shape with its own (``by``: the design table
    indexed by short name): what a round adds to each draft forward (in-round minus alone, ms), and whether sharing
    cuts (``sharing_helps``) or raises (``sharing_hurts``) it by more than ``tolerance`` (the cost runs' T_T spread)."""
    missing = {"draft-2x192-shared", "draft-2x192"} - set(by.index)
    if missing:
        raise ValueError(f"this comparison needs {sorted(missing)} in design_drafts")
    pair = {"shared": by.loc["draft-2x192-shared"], "own": by.loc["draft-2x192"]}
    added = {name: row.T_D_round_ms - row.T_D_ms for name, row in pair.items()}
    return {**{f"{name}_round_penalty": row.T_D_round_ms / row.T_D_ms for name, row in pair.items()},
            **{f"{name}_round_added_ms": added[name] for name in pair},
            "round_added_ratio": added["shared"] / added["own"],
            "sharing_helps": int(added["shared"] < (1 - tolerance) * added["own"]),
            "sharing_hurts": int(added["shared"] > (1 + tolerance) * added["own"]),
            **{f"{name}_{column}": pair[name][column] for column in ("alpha", "speedup") for name in pair},
            "shared_speedup_higher": int(pair["shared"].speedup > pair["own"].speedup)}


def same_shape_recipes(by: pd.DataFrame, card: dict) -> dict:
    """``draft-2l`` against the family's draft of its exact shape (``by``: the design table indexed by short name;
    ``card``: the training card): initialised from the target's first layers against a random initialisation, so
    what separates them is the recipe, not the shape (``same_shape`` 0 where the family has no such draft)."""
    ref = by.loc["draft-2l"]
    twins = by[(by.layers == ref.layers) & (by.width == ref.width) & (by.index != "draft-2l") & ~by.shared_embedding]
    if twins.empty:
        return {"same_shape": 0}
    twin = twins.iloc[0]
    return {"same_shape": 1, "same_shape_draft": str(twin.name), "same_shape_loss": twin.heldout_loss,
            "same_shape_alpha": twin.alpha, "same_shape_speedup": twin.speedup, "ref_loss": ref.heldout_loss,
            "ref_steps": card["stages"]["draft"]["steps"]}


GPU_PARTS = (notebook_part("12", (RESULTS,), measure),)  # what the GPU window measures (packages.Part)


def target_steps(rows: dict) -> list[dict]:
    """T_T measured beside each draft (run-info page)."""
    return [step_record("12", f"T_T (with {str(row.get('draft', '')).split('/')[-1]})", row["costs"]["target_step_s"],
                        row["costs"].get("runtime", "minimal"), 1, row.get("context_len"), row)
            for row in rows.get(RESULTS, [])
            if row.get("target") == TARGET and isinstance(row.get("costs"), dict) and row["costs"].get("target_step_s")]
