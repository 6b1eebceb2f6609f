"""Notebook 11 (long-context self-speculation, MagicDec): its result rows from the parameters (:func:`measure`: one
configuration per (context, batch) point of the sweep, and the window study, measuring only what the store lacks)
and the numbers and flags the notebook prints and the report quotes; the measurements live in
:mod:`helpers.experiments.nb11.study`.
"""
from __future__ import annotations

import os

import pandas as pd
import torch
from tqdm.auto import tqdm

from helpers.experiments.packages import SAME_SHAPE, notebook_part, step_record
from helpers.experiments.nb11.study import against_one, byte_terms, compare_at, prefill_long, tied_with_best
from helpers.models import load_model
from helpers.models.runtime import minimal_view
from helpers.prompts import long_heldout_prompts
from helpers.results import results_only, run_metadata
from helpers.specdec.analysis import predicted_speedup

RESULTS = "11_long_context_self_speculation"
# the notebook parameters the measurement reads (the notebook passes exactly these)
PARAMETERS = ("device", "selfspec_model", "selfspec_dtype", "selfspec_contexts", "selfspec_batches", "selfspec_gamma",
              "selfspec_window", "selfspec_sinks", "selfspec_new_tokens", "selfspec_repeats", "window_context",
              "window_batch", "window_sizes", "selfspec_remeasure")


def _base(params: dict) -> dict:
    return {"model": params["selfspec_model"], "dtype": params["selfspec_dtype"], "device": params["device"],
            "gamma": params["selfspec_gamma"], "sinks": params["selfspec_sinks"],
            "new_tokens": params["selfspec_new_tokens"], "repeats": params["selfspec_repeats"]}


def point_config(params: dict, context: int, batch: int) -> dict:
    """The result-store configuration of one (context, batch) point of the sweep."""
    return {"kind": "speedup", **_base(params), "context": context, "batch": batch, "window": params["selfspec_window"]}


def window_config(params: dict) -> dict:
    """The result-store configuration of the window study (one row holding every window)."""
    return {"kind": "windows", **_base(params), "context": params["window_context"], "batch": params["window_batch"],
            "windows": list(params["window_sizes"])}


def load(params: dict) -> tuple:
    """``(hf_model, model, tokenizer)``: the model as loaded, and the model file over the same weights (meta tensors
    when rendering results only)."""
    hf_model, tokenizer = load_model(params["selfspec_model"], device=params["device"],
                                     dtype=getattr(torch, params["selfspec_dtype"]))
    return hf_model, minimal_view(hf_model), tokenizer


def measure(params: dict, store, progress: bool = True, *, models=None) -> dict:
    """Measure what ``store(RESULTS)`` lacks (everything with ``selfspec_remeasure``) and return ``{"sweep": one row
    per point with its byte terms, "windows": one row per window}``. For each context the largest batch still needed
    is prefilled once and every batch decodes from copies of it. ``models``: :func:`load`'s triple when the caller
    has it; a ``store.budget`` (the GPU window's) is checked before a prefill."""
    hf_model, model, tokenizer = models if models is not None else load(params)
    results, budget = store(RESULTS), getattr(store, "budget", None)
    rerun, room = params["selfspec_remeasure"], params["selfspec_new_tokens"] + params["selfspec_gamma"] + 1
    meta = run_metadata(model_id=params["selfspec_model"], weights=hf_model.weights_label,
                        dtype=params["selfspec_dtype"], device=params["device"], seed=0,
                        load_average=os.getloadavg()[0])
    settings = {key: params[f"selfspec_{key}"] for key in ("gamma", "window", "sinks", "repeats")}
    points = []
    bar = tqdm(total=len(params["selfspec_contexts"]) * len(params["selfspec_batches"]),
               desc="(context, batch) points", disable=not progress)
    for context in params["selfspec_contexts"]:
        needed = [b for b in params["selfspec_batches"] if rerun or not results.has(point_config(params, context, b))]
        state = None
        if needed and not results_only():
            if budget is not None:
                budget.check(f"prefill of {max(needed)} x {context} tokens")
            state = prefill_long(model, long_heldout_prompts(tokenizer, max(needed), context), room=room)
        for batch in params["selfspec_batches"]:
            config = point_config(params, context, batch)
            row = results.run(config, lambda: {key: value for key, value in compare_at(
                state.copy(batch), max_new_tokens=params["selfspec_new_tokens"], **settings)[0].items()
                if key not in config}, meta=meta, rerun=rerun)  # the settings are in the config
            points.append({**row, **byte_terms(model, context, batch)})
            bar.update()
        del state
    bar.close()
    windows = results.run(window_config(params), lambda: {"rows": compare_at(prefill_long(
        model, long_heldout_prompts(tokenizer, params["window_batch"], params["window_context"]), room=room),
        max_new_tokens=params["selfspec_new_tokens"], **settings, windows=tuple(params["window_sizes"]))},
        meta=meta, rerun=rerun)
    return {"sweep": pd.DataFrame(points), "windows": pd.DataFrame(windows["rows"])}


def _at(sweep: pd.DataFrame, context: int) -> pd.DataFrame:
    return sweep[sweep.context == context].sort_values("batch")


def _sweep_frames(sweep: pd.DataFrame, contexts, gamma: int) -> tuple:
    """The sweep with the columns section 3 compares (Eq. 5's error, c of a full step at the shortest context,
    Eq. 5 with T_V = T_T), and the corner of context >= 2048 and batch >= 8 with each speedup against 1."""
    # what holds the speedup back: a full step of the same batch at the shortest context, over T_T, is what the draft
    # would cost if the KV it reads did not matter. Not a floor: the draft reads window + sinks tokens, fewer than the
    # shortest context, so it may cost a little less; near it, reading less KV has little left to save
    short_step = sweep[sweep.context == min(contexts)].set_index("batch").target_step_s
    sweep = sweep.assign(eq5_error_pct=100 * (sweep.eq5_speedup / sweep.full_batch_speedup - 1),
                         c_short_step=sweep.batch.map(short_step).values / sweep.target_step_s,
                         eq5_if_v1=predicted_speedup(gamma, sweep.alpha, sweep.draft_ratio, 1.0))
    region = sweep[(sweep.context >= 2048) & (sweep.batch >= 8)].copy()
    # against 1, beyond each point's own repeat spread ((max - min) / median of its per-repeat ratios): a speedup
    # closer to 1 than that is within the noise, neither faster nor slower
    region["full_vs_ar"] = [against_one(s, d) for s, d in zip(region.full_batch_speedup, region.full_batch_spread)]
    region["run_vs_ar"] = [against_one(s, d) for s, d in zip(region.speedup, region.speedup_spread)]
    return sweep, region.assign(vs_short=region.draft_ratio / region.c_short_step)  # 1: c is a short-context step


def sweep_summary(sweep: pd.DataFrame, contexts, gamma: int) -> dict:
    """Section 3: the long-context, large-batch corner where MagicDec's mechanism should show (each speedup against
    1 beyond its own repeat spread), how the speedup and c move with the batch at the longest and the shortest
    context, Eq. 5's error, verification's cost, and what holds the speedup back (c against a full step at the
    shortest context, T_V/T_T). Returns frames to display (``region``; ``held``: the corner against the
    short-context step and Eq. 5 with T_V = T_T; ``verify_ends``: T_V/T_T at the smallest and the largest batch per
    context), ``long_ctx``, ``long_rows``, ``long_rises`` (section 5 reads them) and ``numbers``."""
    sweep, region = _sweep_frames(sweep, contexts, gamma)
    long_ctx = max(c for c in contexts if c >= 2048) if max(contexts) >= 2048 else max(contexts)
    rows = {"long": _at(sweep, long_ctx), "short": _at(sweep, min(contexts))}
    ends = lambda ctx, column: (rows[ctx][column].iloc[0], rows[ctx][column].iloc[-1])  # noqa: E731 (batch ends)
    span = lambda **series: {f"{name}_{end}": getattr(values, end)()  # noqa: E731
                             for name, values in series.items() for end in ("min", "max")}
    verify_ends = pd.DataFrame({ctx: (_at(sweep, ctx).verify_ratio.iloc[0], _at(sweep, ctx).verify_ratio.iloc[-1])
                                for ctx in contexts}, index=["first_batch", "last_batch"]).T.rename_axis("context")
    rounds = [gamma * c + v for c, v in zip(ends("long", "draft_ratio"), ends("long", "verify_ratio"))]  # in T_T
    speedups, verify = ({ctx: ends(ctx, column) for ctx in rows} for column in ("full_batch_speedup", "verify_ratio"))
    long_rises = bool(speedups["long"][1] > speedups["long"][0])
    run_above = region[region.run_vs_ar == "above"]
    worst, best = sweep.loc[sweep.eq5_error_pct.abs().idxmax()], sweep.loc[sweep.full_batch_speedup.idxmax()]
    numbers = {
        **span(region=region.full_batch_speedup, region_run=region.speedup), "region_points": len(region),
        **{f"region_{name}_{side}": int((region[f"{name}_vs_ar"] == side).sum()) for name in ("full", "run")
           for side in ("above", "within", "below")},
        "region_run_above_points": ", ".join(f"{r.context}x{r.batch}" for r in run_above.itertuples()),
        "region_run_above_long_only": int(sorted(set(run_above.context)) == [max(contexts)]),
        "region_full_spread_max": 100 * region.full_batch_spread.max(), "region_kv_min": region.kv_weight_ratio.min(),
        **span(tail=sweep.full_batch_speedup / sweep.speedup), "straggler_max": sweep.straggler.max(),
        "long_ctx": long_ctx, "short_ctx": min(contexts),
        **{f"{ctx}_{end}": value for ctx in rows for end, value in zip(("first", "last"), speedups[ctx])},
        **dict(zip(("first_batch", "last_batch"), map(int, ends("long", "batch")))), "long_rises": int(long_rises),
        "short_falls": int(speedups["short"][1] < speedups["short"][0]),
        **{f"c_{ctx}_{end}": value for ctx in rows for end, value in zip(("first", "last"), ends(ctx, "draft_ratio"))},
        "v_long_last": verify["long"][1], "v_short_last": verify["short"][1],
        "eq5_mean_error": sweep.eq5_error_pct.abs().mean(), "eq5_worst_error": abs(worst.eq5_error_pct),
        "eq5_worst_context": int(worst.context), "eq5_worst_batch": int(worst.batch),
        "eq5_points": len(sweep), "eq5_below": int((sweep.eq5_error_pct < 0).sum()),
        "eq5_below_max": max(0.0, -sweep.eq5_error_pct.min()), "eq5_above": int((sweep.eq5_error_pct > 0).sum()),
        "v_long_first": verify["long"][0], "v_short_first": verify["short"][0],
        "v_above_step": int(sweep.verify_ratio.min() > 1),
        "v_grows": int((verify_ends.last_batch > verify_ends.first_batch).all()),
        "round_long_first": rounds[0], "round_long_last": rounds[1], "round_falls": int(rounds[1] < rounds[0]),
        "short_c_near_one": int((rows["short"].draft_ratio - 1).abs().max() <= 0.15),
        "short_kv_max": rows["short"].kv_weight_ratio.max(),
        **span(held_c=region.draft_ratio, held_short=region.c_short_step, held_v=region.verify_ratio,
               held_if_v1=region.eq5_if_v1, v=sweep.verify_ratio),
        "best_speedup": best.full_batch_speedup, "best_context": int(best.context), "best_batch": int(best.batch),
        **span(alpha=sweep.alpha),
        # near, on both sides: within 30% of the short-context step
        "c_near_short_step": int(len(region) > 0 and 1 / 1.3 <= region.vs_short.median() <= 1.3),
        "verify_costly": int(len(region) > 0 and region.verify_ratio.min() >= 1.2),
        "draft_kv_tokens": int(sweep.window.iloc[0] + sweep.sinks.iloc[0]), **span(vs_short=region.vs_short)}
    held = region[["context", "batch", "draft_ratio", "c_short_step", "vs_short", "verify_ratio", "eq5_if_v1"]]
    return {"region": region, "held": held, "verify_ends": verify_ends, "long_ctx": long_ctx,
            "long_rows": rows["long"], "long_rises": long_rises, "numbers": numbers}


def window_summary(windows: pd.DataFrame) -> dict:
    """Section 4: α and c from the smallest to the largest window, the fastest window, and the windows within the
    repeats' spread of it (the best window cannot be named among those)."""
    best = windows.loc[windows.full_batch_speedup.idxmax()]
    tied = pd.Series(tied_with_best(windows.full_batch_speedup, windows.full_batch_spread), index=windows.index)
    tied_windows = windows[tied].window.tolist()
    smallest, largest = windows.iloc[0], windows.iloc[-1]
    return {"win_small": int(smallest.window), "win_large": int(largest.window), "win_alpha_small": smallest.alpha,
            "win_alpha_large": largest.alpha, "win_c_small": smallest.draft_ratio,
            "win_c_large": largest.draft_ratio, "win_best": int(best.window),
            "win_best_speedup": best.full_batch_speedup, "win_tied": ", ".join(map(str, tied_windows)),
            "win_tied_count": len(tied_windows), "win_tied_min": min(tied_windows),
            "win_tied_others": ", ".join(str(w) for w in tied_windows if w != int(best.window)),
            "win_tied_max": max(tied_windows), "win_tied_low": windows[tied].full_batch_speedup.min()}


def window_against_grid(windows: pd.DataFrame, sweep: pd.DataFrame, window: int, context: int, batch: int) -> dict:
    """The window study's row at the grid's window against the grid's row at the same context and batch, two runs
    of one configuration: ``within`` when their full-batch speedups differ by no more than the larger of the two
    rows' repeat spreads; ``window_grid_compared`` 0 (and ``within`` True) where the grid lacks the point."""
    mine = windows[windows.window == window]
    grid = sweep[(sweep.context == context) & (sweep.batch == batch)]
    if mine.empty or grid.empty:
        return {"window_grid_compared": 0, "within": True}
    a, b = mine.iloc[0], grid.iloc[0]
    apart = abs(a.full_batch_speedup / b.full_batch_speedup - 1)
    spread = max(a.full_batch_spread, b.full_batch_spread)
    return {"window_grid_compared": 1, "within": bool(apart <= spread), "window_grid_apart_pct": 100 * apart,
            "window_grid_spread_pct": 100 * spread, "here": a.full_batch_speedup, "grid": b.full_batch_speedup}


GPU_PARTS = (notebook_part("11", (RESULTS,), measure),)  # what the GPU window measures (packages.Part)


def target_steps(rows: dict) -> list[dict]:
    """The AR step at batch 1 of the target and target-long (the same shape) (run-info page)."""
    return [step_record("11", f"AR step of {row['model'].split('/')[-1]}", row["target_step_s"], "minimal", 1,
                        row["context"], row) for row in rows.get(RESULTS, [])
            if row.get("kind") == "speedup" and row.get("model") in SAME_SHAPE and row.get("batch") == 1]
