"""Notebook 12's computations: one measurement per draft (:func:`measure_draft`: the Eq. 5 cost terms and greedy
speculative decoding against AR at every gamma), one row per draft from the stored rows (:func:`design_table`),
which property predicts the speedup (:func:`predictors`), whether depth sets a draft's latency
(:func:`depth_latency`), and the same at a larger scale with random weights (:func:`scale_latency`).
"""
from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from helpers.experiments.specdec_costs import forward_time, measure_costs
from helpers.experiments.specdec_sweeps import gamma_rows, measure_pair
from helpers.models import model_config, random_model
from helpers.models.registry import parameter_count
from helpers.results import free_memory
from helpers.specdec.analysis import linear_verify_cost, pooled_alpha, predicted_speedup
from helpers.stats import bootstrap_ratio_interval, line_fit, tied_with_best, wilson_interval


def measure_draft(target, draft, cases: list[dict], gammas, max_new_tokens: int, *, repeats: int = 2,
                  cost_repeats: int = 20) -> dict:
    """The cost terms and the greedy sweep of one draft with ``target`` (a result-store row: JSON types only):
    ``costs`` (T_T, T_D and per gamma T_V and T_D inside a round: :func:`measure_costs` on the first prompt) and
    ``per_gamma`` (one :func:`gamma_rows` row per gamma, with ``c_round`` and Eq. 5 from it)."""
    costs = measure_costs(target, draft, cases[0]["input_ids"], gammas, repeats=cost_repeats)
    rows = measure_pair(target, draft, cases, gammas, max_new_tokens, repeats=repeats, peer=False)
    per_gamma = gamma_rows(rows, costs)
    for row in per_gamma:
        row["c_round"] = costs["T_D_round"][row["gamma"]] / costs["target_step_s"]
        row["eq5"] = float(predicted_speedup(row["gamma"], row["alpha"], row["c_round"], row["verify_ratio"]))
    return {"costs": {"target_step_s": costs["target_step_s"], "T_D": costs["T_D"], "runtime": costs["runtime"],
                      "T_V": [[int(g), t] for g, t in sorted(costs["T_V"].items())],
                      "T_D_round": [[int(g), t] for g, t in sorted(costs["T_D_round"].items())]},
            "per_gamma": per_gamma}


def gamma_frame(rows) -> pd.DataFrame:
    """One row per (draft, gamma) of stored :func:`measure_draft` rows (each with a ``draft`` column)."""
    return pd.DataFrame([{"draft": row["draft"], **{k: v for k, v in g.items() if k != "per_prompt"}}
                         for row in rows for g in row["per_gamma"]])


def _alpha_with_interval(per_gamma: list[dict]) -> dict:
    """Pooled alpha over every gamma of a draft, a 95% bootstrap interval over prompts (the unit that varies
    independently) and the narrower Wilson interval over acceptance tests."""
    prompts = pd.DataFrame([p for g in per_gamma for p in g["per_prompt"]])
    by_prompt = prompts.groupby("prompt_id")[["accepted", "rejections"]].sum()
    accepted, rejections = int(by_prompt.accepted.sum()), int(by_prompt.rejections.sum())
    low, high = bootstrap_ratio_interval(by_prompt.accepted, by_prompt.accepted + by_prompt.rejections)
    wilson_low, wilson_high = wilson_interval(accepted, accepted + rejections)
    return {"alpha": pooled_alpha(accepted, rejections), "alpha_low": low, "alpha_high": high,
            "alpha_wilson_low": wilson_low, "alpha_wilson_high": wilson_high, "prompts": len(by_prompt)}


def best_at_edge(best_gamma: int, gammas) -> bool:
    """Whether the best gamma of a sweep lies at its edge, so that a larger (or, for a sweep that does not start at
    gamma = 1, a smaller) gamma might be faster still: the largest gamma swept, or the smallest when it is above 1."""
    gammas = sorted(int(g) for g in gammas)
    if best_gamma not in gammas:
        raise ValueError(f"gamma {best_gamma} is not in the sweep {gammas}")
    return best_gamma == gammas[-1] or (best_gamma == gammas[0] and gammas[0] > 1)


def eq5_curve(alpha: float, T_T: float, draft_round: dict, verify: dict, gammas) -> dict[int, float]:
    """Eq. 5's speedup at every gamma of ``gammas`` from one draft's measured terms: the pooled ``alpha``, the draft's
    seconds per step inside a round (``draft_round``, by gamma) and T_V/T_T (``verify``) as measured where a gamma was
    measured, elsewhere least-squares lines through them (a round's draft time as a fixed part, its first step being
    the dearest, plus a part per step; :func:`linear_verify_cost`). So its optimum is never below Eq. 5 at a measured
    gamma (regression: a mean of the per-gamma draft costs put it below Eq. 5 at the measured best)."""
    gammas = [int(g) for g in gammas]
    if len(draft_round) > 1:  # seconds of a round's g draft steps (fixed part and part per step each >= 0)
        round_draft = line_fit(list(draft_round), [g * t for g, t in draft_round.items()], clamp="nonnegative")
    else:
        round_draft = lambda g: g * next(iter(draft_round.values()))  # noqa: E731
    line_v = linear_verify_cost(list(verify), list(verify.values()))
    return {g: float(predicted_speedup(g, alpha, (draft_round[g] if g in draft_round else round_draft(g) / g) / T_T,
                                       verify[g] if g in verify else line_v(g))) for g in gammas}


def design_table(rows, card_models: dict, *, eq5_gammas=range(1, 13)) -> pd.DataFrame:
    """One row per draft: shape and card figures (``card_models``: name -> the training card's entry), alpha with
    intervals, the costs in ms and as ratios, the measured best gamma and its speedup (``best_at_edge``: at the
    sweep's edge, :func:`best_at_edge`), and Eq. 5's optimum gamma and its value at the measured best, both from one
    curve (:func:`eq5_curve`)."""
    out = []
    for row in rows:
        name, costs, per_gamma = row["draft"], row["costs"], row["per_gamma"]
        card = card_models[name]
        best = max(per_gamma, key=lambda g: g["speedup"])
        alpha = _alpha_with_interval(per_gamma)
        T_T = costs["target_step_s"]
        d_round = dict((int(g), t) for g, t in costs["T_D_round"])
        verify = dict((int(g), t / T_T) for g, t in costs["T_V"])
        c_round = float(np.mean(list(d_round.values()))) / T_T
        curve = eq5_curve(alpha["alpha"], T_T, d_round, verify, sorted(set(eq5_gammas) | set(d_round)))
        eq5_gamma = max(curve, key=curve.get)
        eq5_speedup = curve[eq5_gamma]
        out.append({
            "draft": name, "layers": card["layers"], "width": card["hidden_size"], "parameters": card["parameters"],
            "shared_embedding": bool(card.get("shared_embedding", False)), "heldout_loss": card["heldout_loss"],
            "agreement": card["greedy_agreement"], **alpha,
            "T_T_ms": 1e3 * T_T, "T_D_ms": 1e3 * costs["T_D"], "T_D_round_ms": 1e3 * c_round * T_T,
            "c": costs["T_D"] / T_T, "c_round": c_round,
            "best_gamma": int(best["gamma"]), "speedup": float(best["speedup"]),
            "best_at_edge": best_at_edge(int(best["gamma"]), [int(g["gamma"]) for g in per_gamma]),
            "eq5_at_best": curve[int(best["gamma"])], "eq5_gamma": int(eq5_gamma), "eq5_speedup": eq5_speedup,
            "eq5_curve": curve,
            "identical": all(g["identical_to_ar"] for g in per_gamma),
        })
    return pd.DataFrame(out)


def _line(x, y) -> dict:
    """``r2`` of the least-squares line of ``y`` on ``x`` (:func:`helpers.stats.line_fit`; nan below three points or
    where either has no spread) and its ``direction`` (``"higher is faster"`` where ``y`` rises with ``x``)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    r2 = float("nan") if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0 else line_fit(x, y).r2
    return {"r2": r2, "direction": "higher is faster" if np.corrcoef(x, y)[0, 1] > 0 else "lower is faster"}


# each property's label and the sign Eq. 5 gives it: a more accurate draft (higher alpha, lower loss) or a cheaper
# one is faster
PREDICTORS = {"alpha": ("acceptance alpha", "higher is faster"), "agreement": ("greedy agreement", "higher is faster"),
              "heldout_loss": ("held-out loss", "lower is faster"), "c_round": ("latency c (in a round)",
                                                                                 "lower is faster"),
              "T_D_ms": ("draft latency T_D", "lower is faster")}


def predictors(table: pd.DataFrame) -> pd.DataFrame:
    """How much of the variation of the best speedup over drafts each property explains (r^2 of a straight
    line), the sign of the relation and whether it is the sign Eq. 5 gives (``as_expected``: an r^2 earned with
    the wrong sign explains nothing); sorted best first. On few drafts a single r^2 is a hint, not a test."""
    lines = {column: _line(table[column], table.speedup) for column in PREDICTORS}
    frame = pd.DataFrame([{"property": label, "column": column, **lines[column],
                           "as_expected": lines[column]["direction"] == expected}
                          for column, (label, expected) in PREDICTORS.items()])
    return frame.sort_values("r2", ascending=False).reset_index(drop=True)


def leave_one_out(table: pd.DataFrame, column: str) -> pd.DataFrame:
    """The speedup's line on ``column`` with each draft left out in turn (index: the draft left out; columns
    ``r2`` and ``direction``): on a handful of drafts one point can carry a fit, or its sign, and this shows
    whether one does."""
    return pd.DataFrame([{"draft": d, **_line(rest[column], rest.speedup)}
                         for d, rest in ((d, table[table.draft != d]) for d in table.draft)]).set_index("draft")


def depth_latency(frame: pd.DataFrame, column: str = "T_D_ms") -> dict:
    """Does depth set a model's latency at equal parameters? A least-squares line of ``column`` (ms) against layers
    over the rows (those sharing an embedding left out): ms per layer, fixed ms, r^2 and ``per_layer_share`` (the
    part of the deepest model's time the per-layer term accounts for; above one half, depth sets the latency), with
    the deepest/shallowest latency and depth ratios; ``residuals_ms`` (shallowest first), their largest and
    ``monotone`` (time never falls as depth grows) say whether the line describes the points at all."""
    own = frame[~frame.shared_embedding] if "shared_embedding" in frame else frame
    # unclamped: a negative fixed cost or slope is what the points say, and the residuals below judge the line
    fit = line_fit(own.layers, own[column], clamp="none")
    slope, intercept = fit.slope, fit.intercept
    deep, shallow = own.loc[own.layers.idxmax()], own.loc[own.layers.idxmin()]
    by_depth = own.sort_values("layers")
    residuals = by_depth[column] - (intercept + slope * by_depth.layers)
    return {"r2_layers": fit.r2, "ms_per_layer": float(slope),
            "residuals_ms": [float(r) for r in residuals], "max_residual_ms": float(residuals.abs().max()),
            "max_residual_pct": float(100 * (residuals.abs() / by_depth[column]).max()),
            "monotone": bool(by_depth[column].is_monotonic_increasing),
            "fixed_ms": float(intercept), "per_layer_share": float(slope * deep.layers / deep[column]),
            "deep": deep.get("draft", f"{int(deep.layers)} layers"),
            "shallow": shallow.get("draft", f"{int(shallow.layers)} layers"),
            "latency_ratio": float(deep[column] / shallow[column]), "depth_ratio": float(deep.layers / shallow.layers)}


# ------------------------------------------------------------------------------------- depth at a larger scale

def equal_size_config(config, layers: int, *, multiple: int = 128):
    """A copy of ``config`` with ``layers`` layers and, among widths that are multiples of ``multiple``, the one
    whose parameter count is closest to ``config``'s: the MLP and the query and KV heads scale with the width
    (head size and the query/KV group kept), so only the depth/width split changes."""
    if layers < 1 or multiple < 1:
        raise ValueError(f"need layers >= 1 and multiple >= 1, got {layers} and {multiple}")
    group = config.num_attention_heads // config.num_key_value_heads

    def shaped(width: int):
        scale = width / config.hidden_size
        shape = copy.deepcopy(config)
        shape.num_hidden_layers = layers
        shape.hidden_size = width
        shape.intermediate_size = max(multiple, round(config.intermediate_size * scale / multiple) * multiple)
        shape.num_key_value_heads = max(1, round(config.num_key_value_heads * scale))
        shape.num_attention_heads = shape.num_key_value_heads * group
        if getattr(shape, "layer_types", None):
            shape.layer_types = [config.layer_types[0]] * layers
        return shape

    target = parameter_count(config)
    low, high = 1, max(2, 16 * config.hidden_size // multiple)  # widths in units of ``multiple``
    while high - low > 1:  # the count rises with the width: bisect for the last width at or below the target
        middle = (low + high) // 2
        low, high = (middle, high) if parameter_count(shaped(middle * multiple)) <= target else (low, middle)
    candidates = [shaped(units * multiple) for units in (low, high)]
    return min(candidates, key=lambda c: abs(parameter_count(c) - target))


def scale_latency(config, depths, *, device="cpu", dtype=torch.float32, context: int = 64, repeats: int = 5,
                  seed: int = 0, multiple: int = 128, progress: bool = False) -> list[dict]:
    """Decode-step time of random-weight models of ``config``'s parameter count at each depth in ``depths``
    (:func:`equal_size_config`), one at a time on ``device``: one new token after a cached ``context``, the mean of
    ``repeats`` after warm-up (:func:`helpers.experiments.specdec_costs.forward_time`)."""
    rows = []
    for layers in tqdm(list(depths), desc="depths", disable=not progress):
        shape = equal_size_config(config, int(layers), multiple=multiple)
        model = random_model(shape, device=device, dtype=dtype, seed=seed)
        ids = torch.randint(0, shape.vocab_size, (1, context), generator=torch.Generator().manual_seed(seed))
        timing = forward_time(model, ids.to(next(model.parameters()).device), 1, repeats=repeats)
        rows.append({"layers": int(layers), "hidden_size": shape.hidden_size, "heads": shape.num_attention_heads,
                     "kv_heads": shape.num_key_value_heads, "intermediate_size": shape.intermediate_size,
                     "parameters": parameter_count(shape), "step_ms": 1e3 * timing.mean,
                     "step_ms_median": 1e3 * timing.median})
        del model
        free_memory()
    return rows


# ------------------------------------------------------------------------------------- result-store configurations

def draft_config(p: dict, draft: str, prompt_ids) -> dict:
    """The result-store configuration of one draft's measurement, from notebook 12's parameters ``p`` (shared by the
    notebook and ``python -m helpers.gpu_measure --only 12`` so that each finds the other's rows)."""
    return {"kind": "draft", "target": p["design_target"], "gammas": [int(g) for g in p["design_gammas"]],
            "prompt_ids": list(prompt_ids), "new_tokens": p["design_new_tokens"], "repeats": p["design_repeats"],
            "dtype": p["design_dtype"], "device": p["device"], "draft": draft}


def scale_config(p: dict) -> dict:
    """The result-store configuration of notebook 12's depth-at-scale timing (see :func:`draft_config`)."""
    return {"kind": "scale", "model": p["scale_model"], "depths": [int(d) for d in p["scale_depths"]],
            "dtype": p["scale_dtype"], "device": p["device"], "context": p["scale_context"],
            "repeats": p["scale_repeats"]}


def measure_scale(p: dict, *, progress: bool = False) -> dict:
    """The row of :func:`scale_config`: :func:`scale_latency` with notebook 12's parameters."""
    return {"rows": scale_latency(model_config(p["scale_model"]), p["scale_depths"], device=p["device"],
                                  dtype=getattr(torch, p["scale_dtype"]), context=p["scale_context"],
                                  repeats=p["scale_repeats"], progress=progress)}


# ------------------------------------------------------------------------------------- noise and near-ties

def timing_noise(rows) -> dict:
    """How much the same measurement moved over the run, from stored :func:`measure_draft` rows (each timing the SAME
    target on the same prompts): ``T_T`` (ms) of each draft's cost run with its min, max and (max - min) / median
    (``tt_rel_range``: c values closer than that do not rank), and the AR time of the same prompts in each sweep with
    its relative standard deviation ``ar_rel_std`` (twice it: the tolerance below which two speedups do not rank)."""
    tt = np.array([1e3 * row["costs"]["target_step_s"] for row in rows], dtype=float)
    ar = np.array([row["per_gamma"][0]["ar_time_s"] for row in rows], dtype=float)
    if len(rows) < 2:
        raise ValueError("need at least two drafts' rows to see the run's noise")
    return {"tt_ms": tt.tolist(), "tt_min_ms": float(tt.min()), "tt_max_ms": float(tt.max()),
            "tt_rel_range": float((tt.max() - tt.min()) / np.median(tt)), "tt_rel_std": float(tt.std() / tt.mean()),
            "ar_s": ar.tolist(), "ar_rel_std": float(ar.std() / ar.mean()),
            "ar_rel_range": float((ar.max() - ar.min()) / np.median(ar))}


def gamma_ties(rows, tolerance: float) -> dict:
    """Per draft (stored :func:`measure_draft` rows), the gammas whose measured speedup is within ``tolerance`` of
    that draft's best: the measured optimum as far as the noise lets it be named."""
    return {row["draft"]: [int(g["gamma"]) for g, tied in
                           zip(row["per_gamma"], tied_with_best([g["speedup"] for g in row["per_gamma"]], tolerance))
                           if tied] for row in rows}


def eq5_agrees(eq5_gamma: int, tied_gammas) -> bool:
    """Whether Eq. 5's optimum lies within one of a measured optimum, any gamma tied with the best counting."""
    return any(abs(int(eq5_gamma) - int(g)) <= 1 for g in tied_gammas)
