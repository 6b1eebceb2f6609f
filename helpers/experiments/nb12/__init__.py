"""Notebook 12 (what makes a good draft): its result rows from the parameters, and the analysis it prints.

:func:`measure` is called by the notebook and by ``python -m helpers.gpu_measure --only 12``, so that both build
the same configurations (:func:`helpers.experiments.nb12.study.draft_config` and ``scale_config``) and each
finds the other's rows. The analysis functions take the notebook's frames and return what it prints (``text``)
and the numbers the report quotes (``numbers``); the computations themselves live in
:mod:`helpers.experiments.nb12.study`.
"""
from __future__ import annotations

import os

import pandas as pd
import torch
from tqdm.auto import tqdm

from helpers.experiments.nb12.study import (depth_latency, draft_config, eq5_agrees, gamma_ties, leave_one_out,
                                              measure_draft, measure_scale, predictors, scale_config, timing_noise)
from helpers.stats import tied_with_best
from helpers.results import config_key, free_memory, measured_on, run_metadata

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
    from helpers.prompts import load_prompts, select_prompts

    return select_prompts(load_prompts("cpu"), params["design_prompts"])


def configs(params: dict) -> dict:
    """Every result-store configuration of the notebook: ``"scale"`` and one per draft (by name)."""
    ids = [row["id"] for row in prompt_rows(params)]
    return {"scale": scale_config(params), **{name: draft_config(params, name, ids) for name in params["design_drafts"]}}


def _meta(params: dict, weights: str) -> dict:
    return run_metadata(model_id=params["design_target"], weights=weights, dtype=params["design_dtype"],
                        device=params["device"], seed=0, load_average=os.getloadavg()[0])


def measure(params: dict, store, progress: bool = True) -> dict:
    """Measure what ``store(RESULTS)`` lacks, depth at scale first (random weights; on a GPU the launch-bound regime,
    the most valuable row of a short window), then every draft against the target; models are loaded only for a
    missing row. ``store`` is a factory ``store(result_name) -> ResultStore``; a ``store.budget`` (the GPU window's)
    is checked before loading. Returns ``{"rows": [one row per draft, in design_drafts order], "scale": [rows of
    the scale timing], "prompts": number of prompts, "measured_on" and "scale_measured_on": the machine (name, threads)
    that measured the drafts' and the scale's rows}``: a GPU's when its rows are rendered without it."""
    from helpers.models import load_model
    from helpers.prompts import encode_prompts

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
    """Section 3: which property predicts the speedup (r² of a line per property), the run's timing noise (the
    tolerance below which two speedups tie), whether c ranks at all under T_T's spread, the drafts tied with the
    fastest, and the held-out losses of the equal-size family. Returns ``ranked`` (to display), ``tolerance``,
    ``tied_fastest`` (a column for ``table``), ``text`` and ``numbers``."""
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
    kept = not any(flips.values())
    flipped = "; ".join(f"the {name} line without {', '.join(drafts)}" for name, drafts in flips.items() if drafts)
    text = [f"best accuracy predictor: {accuracy.property} (r2 {accuracy.r2:.2f}); best latency predictor: "
            f"{latency.property} (r2 {latency.r2:.2f}) -> {'latency' if latency_wins else 'accuracy'} predicts the "
            "speedup better here",
            f"with one draft left out in turn: the latency line's r2 {min(loo['latency'].values()):.2f} .. "
            f"{max(loo['latency'].values()):.2f} (most changed without {short(carrier)}: {loo['latency'][carrier]:.2f}), "
            f"the accuracy line's {min(loo['accuracy'].values()):.2f} .. {max(loo['accuracy'].values()):.2f}; the "
            f"verdict holds with every draft left out: {stable}",
            "which property separates the drafts: " + (("latency" if latency_wins else "accuracy") + " (settled: "
            "the verdict holds with every draft left out)" if stable else "not settled by these drafts (the verdict "
            "turns with one left out)"),
            f"directions: {accuracy.property} {accuracy.direction}, {latency.property} {latency.direction} (the signs "
            f"Eq. 5 gives: {expected}; kept with every draft left out: {kept}"
            + (f"; sloping the other way: {flipped})" if flipped else ")")]
    noise = timing_noise(rows)  # every draft's row timed the SAME target (T_T) and AR on the same prompts
    # a speedup is a ratio of two timings, each with about the AR time's relative std: two speedups compare four
    # such timings, so their ratio's relative std is about twice it; closer than that, two speedups are a tie
    tolerance = 2 * noise["ar_rel_std"]
    text.append(f"T_T of the one target over the {len(rows)} cost runs: {noise['tt_min_ms']:.2f} .. "
                f"{noise['tt_max_ms']:.2f} ms ({100 * noise['tt_rel_range']:.0f}% of its median; relative std "
                f"{100 * noise['tt_rel_std']:.1f}%); AR time of the same prompts over the {len(rows)} sweeps: relative "
                f"std {100 * noise['ar_rel_std']:.1f}% (range {100 * noise['ar_rel_range']:.0f}%) -> two speedups, four "
                f"such timings: within {100 * tolerance:.1f}% of each other they are ties")
    c_text, c_numbers = _c_ranks(table, noise, latency)
    text.append(c_text)
    tied = pd.Series(tied_with_best(table.speedup, tolerance), index=table.index)
    tied_fastest = [short(d) for d in table[tied].sort_values("speedup", ascending=False).draft]
    text.append(f"drafts within {100 * tolerance:.1f}% of the fastest: {tied_fastest}")
    fastest, slowest = table.loc[table.speedup.idxmax()], table.loc[table.speedup.idxmin()]
    most_accurate = table.loc[table.alpha.idxmax()]
    text.append(f"fastest: {short(fastest.draft)} ({fastest.speedup:.2f}x, alpha {fastest.alpha:.3f}, c_round "
                f"{fastest.c_round:.3f}); slowest: {short(slowest.draft)} ({slowest.speedup:.2f}x, alpha "
                f"{slowest.alpha:.3f}, c_round {slowest.c_round:.3f}); most accurate: {short(most_accurate.draft)} "
                f"(alpha {most_accurate.alpha:.3f} [{most_accurate.alpha_low:.3f}, {most_accurate.alpha_high:.3f}], "
                f"{most_accurate.speedup:.2f}x)")
    numbers = {"accuracy_property": accuracy.property, "accuracy_r2": accuracy.r2, "verdict_stable": int(stable),
               "directions_expected": int(expected), "directions_kept": int(kept), "direction_flips": flipped,
               "accuracy_direction": accuracy.direction, "latency_direction": latency.direction,
               "latency_r2_loo_min": min(loo["latency"].values()), "latency_r2_loo_max": max(loo["latency"].values()),
               "latency_r2_carrier": short(carrier), "latency_r2_without": loo["latency"][carrier],
               "latency_property": latency.property, "latency_r2": latency.r2, "latency_wins": int(latency_wins),
               "fastest": short(fastest.draft), "fastest_speedup": fastest.speedup, "fastest_alpha": fastest.alpha,
               "fastest_c": fastest.c_round, "slowest": short(slowest.draft), "slowest_speedup": slowest.speedup,
               "slowest_alpha": slowest.alpha, "slowest_c": slowest.c_round, "accurate": short(most_accurate.draft),
               "accurate_alpha": most_accurate.alpha, "accurate_speedup": most_accurate.speedup,
               "tt_min_ms": noise["tt_min_ms"], "tt_max_ms": noise["tt_max_ms"],
               "tt_range_pct": 100 * noise["tt_rel_range"], "tolerance_pct": 100 * tolerance,
               "ar_std_pct": 100 * noise["ar_rel_std"],
               "ar_range_pct": 100 * noise["ar_rel_range"], **c_numbers,
               "fastest_tied": ", ".join(tied_fastest), "fastest_tied_count": len(tied_fastest),
               "fastest_tied_low": table[tied].speedup.min(), "alpha_min": table.alpha.min(),
               "alpha_max": table.alpha.max(), "c_min": table.c_round.min(), "c_max": table.c_round.max()}
    family_losses = table[table.draft.str.contains("x")].heldout_loss
    losses_differ = bool(family_losses.max() - family_losses.min() > 0.1)  # more than 0.1 nats/token apart
    text.append(f"held-out loss over the equal-size family: {family_losses.min():.2f} .. {family_losses.max():.2f} "
                f"nats/token (the shapes learnt unequally well, > 0.1 apart: {losses_differ})")
    numbers.update({"family_loss_min": family_losses.min(), "family_loss_max": family_losses.max(),
                    "losses_differ": int(losses_differ)})
    return {"ranked": ranked, "tolerance": tolerance, "tied_fastest": tied.tolist(), "text": "\n".join(text),
            "numbers": numbers}


def _c_ranks(table: pd.DataFrame, noise: dict, latency) -> tuple[str, dict]:
    """c = T_D/T_T uses each run's own T_T: pairs of drafts whose c differ by less than T_T's spread do not rank;
    the same ordering and r² with one T_T (the median) for every draft."""
    c_sorted = table.sort_values("c_round")
    c_gaps = c_sorted.c_round.iloc[1:].values / c_sorted.c_round.iloc[:-1].values - 1
    c_close = int((c_gaps < noise["tt_rel_range"]).sum())
    c_common = table.T_D_round_ms / pd.Series(noise["tt_ms"]).median()  # every c over one T_T (the median)
    c_order_same = c_common.rank().tolist() == table.c_round.rank().tolist()
    order_own = [short(d) for d in table.sort_values("c_round").draft]
    order_common = [short(d) for d in table.assign(c_common=c_common).sort_values("c_common").draft]
    r2_common = float(pd.Series(c_common).corr(table.speedup) ** 2)
    text = (f"neighbouring c values (sorted) closer than T_T's {100 * noise['tt_rel_range']:.0f}% spread: {c_close} of "
            f"{len(c_gaps)} pairs; ordering of c unchanged with the median T_T for every draft: {c_order_same}\n"
            f"  c ascending, own T_T: {order_own}\n  c ascending, median T_T: {order_common}\n"
            f"  r2 of the speedup against c: {latency.r2 if latency.column == 'c_round' else float('nan'):.2f} with "
            f"each run's T_T, {r2_common:.2f} with the median T_T")
    return text, {"c_close": c_close, "c_pairs": len(c_gaps), "c_order_same": int(c_order_same),
                  "c_r2_common": r2_common}


def depth_summary(depth: dict) -> dict:
    """Section 4: the line T_D = fixed + per layer over the equal-size family (``depth``:
    :func:`~helpers.experiments.nb12.study.depth_latency`), and whether the per-layer term dominates."""
    proportional = depth["per_layer_share"] > 0.5  # most of the deepest draft's step is per-layer cost
    text = (f"T_D = {depth['fixed_ms']:.3f} ms + {depth['ms_per_layer']:.3f} ms per layer (r2 {depth['r2_layers']:.2f}); "
            f"{short(depth['deep'])} costs {depth['latency_ratio']:.2f}x {short(depth['shallow'])} at "
            f"{depth['depth_ratio']:.0f}x the depth and the same parameters; the per-layer term is "
            f"{100 * depth['per_layer_share']:.0f}% of its step -> depth "
            f"{'dominates' if proportional else 'does not dominate'} latency here")
    return {"text": text, "numbers": {
        "fixed_ms": depth["fixed_ms"], "ms_per_layer": depth["ms_per_layer"], "depth_r2": depth["r2_layers"],
        "deep": short(depth["deep"]), "shallow": short(depth["shallow"]), "latency_ratio": depth["latency_ratio"],
        "depth_ratio": depth["depth_ratio"], "depth_dominates": int(proportional),
        "per_layer_share_pct": 100 * depth["per_layer_share"]}}


def gamma_agreement(table: pd.DataFrame, rows: list[dict], tolerance: float, gammas) -> dict:
    """Section 5: Eq. 5's optimum γ against the measured one per draft, strictly and against the set of γs tied
    with the best; drafts whose best γ is at the edge of the sweep apart. Returns ``table`` with the columns
    ``gamma_gap``, ``tied_gammas``, ``eq5_agrees`` and ``eq5_error_pct`` added, ``text`` and ``numbers``."""
    table = table.copy()
    table["gamma_gap"] = table.eq5_gamma - table.best_gamma
    agree = int((table.gamma_gap.abs() <= 1).sum())
    ties = gamma_ties(rows, tolerance)  # per draft, the gammas within the tolerance of its best: the measured optimum
    table["tied_gammas"] = table.draft.map(ties)
    table["eq5_agrees"] = [eq5_agrees(g, t) for g, t in zip(table.eq5_gamma, table.tied_gammas)]
    agree_ties = int(table.eq5_agrees.sum())
    misses = table[table.gamma_gap.abs() > 1]
    table["eq5_error_pct"] = 100 * (table.eq5_at_best / table.speedup - 1)
    text = [f"Eq. 5's optimum gamma within 1 of the measured optimum for {agree} of {len(table)} drafts; Eq. 5 at the "
            f"measured optimum within {table.eq5_error_pct.abs().max():.1f}% of the measured speedup (mean "
            f"{table.eq5_error_pct.abs().mean():.1f}%)",
            f"the measured optimum as a set (every gamma within {100 * tolerance:.1f}% of the best): Eq. 5's optimum "
            f"within 1 of it for {agree_ties} of {len(table)} drafts; the strict misses: "
            + (", ".join(f"{short(r.draft)} (Eq. 5 {r.eq5_gamma}, measured {r.best_gamma}, tied {r.tied_gammas})"
                         for r in misses.itertuples()) or "none")]
    swept = sorted(int(g) for g in gammas)
    edge, inner = table[table.best_at_edge], table[~table.best_at_edge]
    agree_inner = int((inner.gamma_gap.abs() <= 1).sum())
    text.append(f"measured best gamma at the edge of the sweep ({swept[0]}..{swept[-1]}): "
                + (", ".join(f"{short(r.draft)} (gamma {r.best_gamma})" for r in edge.itertuples()) or "no draft")
                + f"; among the {len(inner)} drafts whose best gamma lies inside it, Eq. 5's optimum is within 1 for "
                f"{agree_inner}")
    numbers = {"gamma_agree": agree, "drafts": len(table), "eq5_max_error": table.eq5_error_pct.abs().max(),
               "eq5_mean_error": table.eq5_error_pct.abs().mean(), "gamma_max": swept[-1],
               "edge_count": len(edge), "edge_drafts": ", ".join(short(d) for d in edge.draft) or "none",
               "inner_count": len(inner), "agree_inner": agree_inner, "gamma_agree_ties": agree_ties,
               "gamma_misses": len(misses), "gamma_misses_tied": int(misses.eq5_agrees.sum()),
               "gamma_miss_drafts": ", ".join(short(d) for d in misses.draft) or "none"}
    return {"table": table, "text": "\n".join(text), "numbers": numbers}


def depth_at_scale(scale: pd.DataFrame, depth: dict, scale_model: str) -> dict:
    """Section 6: random-weight models of ``scale_model``'s size at several depths against the CPU pair's drafts
    (``depth``: their :func:`~helpers.experiments.nb12.study.depth_latency`). Returns ``series`` (the table: one
    row per depth with the least-squares line in depth and its residual), ``fit_text`` (does depth explain the
    series?), ``text`` (the comparison with the drafts) and ``numbers``."""
    scale_name = scale_model.split("/")[-1]
    deep_s, shallow_s = scale.loc[scale.layers.idxmax()], scale.loc[scale.layers.idxmin()]
    scale_ratio = deep_s.step_ms / shallow_s.step_ms
    scale_depth = depth_latency(scale, "step_ms")
    series = scale.sort_values("layers")[["layers", "hidden_size", "parameters", "step_ms"]].assign(
        parameters_m=lambda f: f.parameters / 1e6, fit_ms=lambda f: f.step_ms - scale_depth["residuals_ms"],
        residual_ms=scale_depth["residuals_ms"]).drop(columns="parameters")
    # does depth explain the series? a line in depth must account for most of its variation, and time must not fall
    # as depth grows; otherwise the per-layer share read off the line describes nothing
    depth_explains = bool(scale_depth["r2_layers"] >= 0.8 and scale_depth["monotone"])
    fit_text = (f"step time against depth: r2 {scale_depth['r2_layers']:.2f}, residuals up to "
                f"{scale_depth['max_residual_ms']:.1f} ms ({scale_depth['max_residual_pct']:.0f}% of a step), rising "
                f"with depth at every step: {scale_depth['monotone']}; parameters {series.parameters_m.min():.0f}M .. "
                f"{series.parameters_m.max():.0f}M -> depth explains the series: {depth_explains}")
    text = (f"{scale_name} size: {int(deep_s.layers)} layers x {int(deep_s.hidden_size)} take {deep_s.step_ms:.1f} ms "
            f"per step, {int(shallow_s.layers)} x {int(shallow_s.hidden_size)} take {shallow_s.step_ms:.1f} ms: "
            f"{scale_ratio:.2f}x at {deep_s.layers / shallow_s.layers:.0f}x the depth; the CPU pair's drafts: "
            f"{depth['latency_ratio']:.2f}x at {depth['depth_ratio']:.0f}x; per-layer share of the deepest step "
            f"{100 * scale_depth['per_layer_share']:.0f}% here against {100 * depth['per_layer_share']:.0f}% for the "
            "drafts")
    numbers = {"scale_model": scale_name, "scale_deep": int(deep_s.layers), "scale_shallow": int(shallow_s.layers),
               "scale_deep_ms": deep_s.step_ms, "scale_shallow_ms": shallow_s.step_ms, "scale_ratio": scale_ratio,
               "scale_depth_ratio": deep_s.layers / shallow_s.layers,
               "scale_parameters_m": scale.parameters.mean() / 1e6,
               "scale_per_layer_pct": 100 * scale_depth["per_layer_share"],
               "scale_depth_dominates": int(scale_depth["per_layer_share"] > 0.5),
               "scale_r2": scale_depth["r2_layers"], "scale_max_residual_ms": scale_depth["max_residual_ms"],
               "scale_max_residual_pct": scale_depth["max_residual_pct"],
               "scale_monotone": int(scale_depth["monotone"]), "scale_depth_explains": int(depth_explains),
               "scale_params_min_m": series.parameters_m.min(), "scale_params_max_m": series.parameters_m.max(),
               "scale_slowest": int(scale.loc[scale.step_ms.idxmax()].layers),
               "scale_slowest_ms": scale.step_ms.max(), "scale_fastest": int(scale.loc[scale.step_ms.idxmin()].layers),
               "scale_fastest_ms": scale.step_ms.min()}
    return {"series": series, "fit_text": fit_text, "text": text, "numbers": numbers}


def embedding_sharing(by: pd.DataFrame, tolerance: float = 0.1) -> dict:
    """The draft sharing the target's embedding against the same shape with its own (``by``: the design table
    indexed by short name): what a round adds to each draft forward (in-round minus alone, ms), and whether sharing
    cuts (``sharing_helps``) or raises (``sharing_hurts``) that addition by more than ``tolerance`` (relative: the
    spread of the cost runs' T_T, which every in-round cost is measured against); printed. The report's numbers."""
    missing = {"draft-2x192-shared", "draft-2x192"} - set(by.index)
    assert not missing, f"this comparison needs {sorted(missing)} in design_drafts"
    shared, own = by.loc["draft-2x192-shared"], by.loc["draft-2x192"]
    added = {name: row.T_D_round_ms - row.T_D_ms for name, row in (("shared", shared), ("own", own))}
    helps, hurts = added["shared"] < (1 - tolerance) * added["own"], added["shared"] > (1 + tolerance) * added["own"]
    print(f"draft-2x192-shared: T_D {shared.T_D_ms:.3f} ms alone, {shared.T_D_round_ms:.3f} ms in a round "
          f"(+{added['shared']:.3f} ms); draft-2x192: {own.T_D_ms:.3f} ms, {own.T_D_round_ms:.3f} ms "
          f"(+{added['own']:.3f} ms); alpha {shared.alpha:.3f} vs {own.alpha:.3f}; speedup {shared.speedup:.2f}x vs "
          f"{own.speedup:.2f}x -> what a round adds, shared over own: {added['shared'] / added['own']:.2f}x "
          f"(cut beyond the cost runs' {tolerance:.1%} spread: {helps}; raised beyond it: {hurts})")
    return {"shared_round_penalty": shared.T_D_round_ms / shared.T_D_ms,
            "own_round_penalty": own.T_D_round_ms / own.T_D_ms,
            "shared_round_added_ms": added["shared"], "own_round_added_ms": added["own"],
            "round_added_ratio": added["shared"] / added["own"], "sharing_helps": int(helps),
            "sharing_hurts": int(hurts), "shared_alpha": shared.alpha, "own_alpha": own.alpha,
            "shared_speedup": shared.speedup, "own_speedup": own.speedup,
            "shared_speedup_higher": int(shared.speedup > own.speedup)}


def same_shape_recipes(by: pd.DataFrame, card: dict) -> dict:
    """``draft-2l`` against the family's draft of its exact shape (``by``: the design table indexed by short name;
    ``card``: the training card): same layers and width, a different recipe (initialised from the target's first
    layers and trained the reference draft's steps, against a random initialisation and the family's steps), so
    what separates them is the recipe, not the shape (printed). The report's numbers (``same_shape`` 0 where the
    family has no draft of that shape)."""
    ref = by.loc["draft-2l"]
    twins = by[(by.layers == ref.layers) & (by.width == ref.width) & (by.index != "draft-2l") & ~by.shared_embedding]
    if twins.empty:
        print("no draft of the family has draft-2l's shape: the recipe is not separated from the shape")
        return {"same_shape": 0}
    twin = twins.iloc[0]
    steps = {"ref": card["stages"]["draft"]["steps"], "family": card["draft_family"]["stage"]["steps"]}
    print(f"{twin.name} has draft-2l's shape ({int(ref.layers)} x {int(ref.width)}): held-out loss "
          f"{twin.heldout_loss:.2f} vs {ref.heldout_loss:.2f}, alpha {twin.alpha:.3f} vs {ref.alpha:.3f}, speedup "
          f"{twin.speedup:.2f}x vs {ref.speedup:.2f}x; recipes: random initialisation, {steps['family']} steps vs the target's first layers, "
          f"{steps['ref']} steps")
    return {"same_shape": 1, "same_shape_draft": str(twin.name), "same_shape_loss": twin.heldout_loss,
            "same_shape_alpha": twin.alpha, "same_shape_speedup": twin.speedup, "ref_loss": ref.heldout_loss,
            "ref_steps": steps["ref"]}
