"""The GPU window's cost rows as tables: Eq. 5's terms of the handout pairs eager and as CUDA graphs, the decode
step against the HBM roofline, and the CPU pair end to end with graphs. Read by notebook 09 (results only: no GPU
needed to render them) and by the window's own summary of goals (:func:`helpers.gpu_window.goals`)."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd
import torch

from helpers.experiments.common import HANDOUT_PAIRS, tolerate_graph_failure
from helpers.gpu_specs import memory_bandwidth
from helpers.results import gpu_result_folders, latest_ok_rows, run_metadata

COSTS = "09_handout_costs"  # eq5 part: the handout pairs, random weights, bf16
GRAPHS = "09_compiled_decode"  # graphs part: the CPU pair's terms and end-to-end runs


def read_rows(folder: Path, name: str) -> list[dict]:
    """The latest ok row per configuration of ``folder/name.jsonl`` (empty when the file does not exist)."""
    return latest_ok_rows(Path(folder) / f"{name}.jsonl")


def gpu_cost_folders() -> list[Path]:
    """The profiles' result folders that hold Eq. 5 cost rows measured on a GPU
    (:func:`helpers.results.gpu_result_folders`)."""
    return gpu_result_folders(COSTS)


def measured_cost_tables() -> list[tuple[Path, pd.DataFrame]]:
    """Every GPU profile's :func:`cost_table` of its Eq. 5 rows, with its folder (:func:`gpu_cost_folders`)."""
    return [(folder, cost_table(read_rows(folder, COSTS))) for folder in gpu_cost_folders()]


def read_bytes(row: dict, role: str = "target") -> float:
    """The weight bytes one decode step of the pair's ``role`` model reads (an untied input embedding is not read;
    rows from before they recorded it: all its weights)."""
    return row.get(f"{role}_decode_bytes", row[f"{role}_weight_bytes"])


def hbm_floor_s(row: dict) -> float | None:
    """The target's weight-read floor of a cost row: :func:`read_bytes` over its GPU's datasheet bandwidth (None for
    a device without one)."""
    bandwidth = memory_bandwidth(row.get("device_name", ""))
    return read_bytes(row) / bandwidth if bandwidth else None


VERIFY_FLOOR = 1.0  # T_V(gamma)/T_T below this for gamma >= 1 verifies gamma + 1 positions cheaper than one decode
# step (the same forward over fewer positions): a timing artefact, excluded from every Eq. 5 prediction


def verify_artefacts(row: dict) -> list[int]:
    """The gammas >= 1 of a cost row whose measured T_V(gamma)/T_T is below :data:`VERIFY_FLOOR`: timing artefacts."""
    return sorted(int(g) for g, v in (row.get("verify_ratio") or {}).items() if int(g) >= 1 and float(v) < VERIFY_FLOOR)


def trusted_verify_ratios(row: dict) -> dict[int, float]:
    """A cost row's T_V(gamma)/T_T ``{gamma: ratio}`` without its artefacts (:func:`verify_artefacts`): the only
    verify ratios an Eq. 5 prediction may use."""
    bad = set(verify_artefacts(row))
    return {int(g): float(v) for g, v in (row.get("verify_ratio") or {}).items() if int(g) not in bad}


def without_artefacts(row: dict) -> dict:
    """A cost row whose ``verify_ratio`` holds only its trusted ratios (:func:`trusted_verify_ratios`), for code that
    turns a row's verify ratios into Eq. 5 numbers (e.g. :func:`helpers.experiments.nb09.decode_modes.pair_terms`)."""
    return {**row, "verify_ratio": {str(g): v for g, v in trusted_verify_ratios(row).items()}}


def cost_table(rows: list[dict]) -> pd.DataFrame:
    """One line per (pair, decode mode): T_T, T_D in ms, c, T_V(gamma)/T_T at the smallest and largest gamma, the
    graph replays that prove graphs ran, and the target's weight-read floor (the weight bytes a decode step reads,
    an untied input embedding excluded, over bandwidth; the KV of the short context is left out) as a share of the
    measured decode step."""
    lines = []
    for row in rows:
        floor = hbm_floor_s(row)
        gammas = sorted(row.get("verify_ratio", {}), key=int)
        lines.append({
            "device_name": row.get("device_name"), "target": row["target"], "draft": row["draft"],
            "target_layers": row.get("target_layers"), "decode": row.get("decode", "eager"),
            "T_T ms": row["T_T"] * 1e3, "T_D ms": row["T_D"] * 1e3, "c": row["c"],
            "T_V/T_T (lowest gamma)": row["verify_ratio"][gammas[0]] if gammas else None,
            "T_V/T_T (highest gamma)": row["verify_ratio"][gammas[-1]] if gammas else None,
            "T_V<T_T at gamma": ", ".join(map(str, verify_artefacts(row))) or "none",  # artefacts: no Eq. 5 from them
            "graph replays": row.get("graph_replays"),
            "kernels per layer": row.get("layer_kernels"),  # rows measured before the model file recorded it: None
            "HBM floor ms": floor * 1e3 if floor else None,
            "roofline share": floor / row["T_T"] if floor else None,
        })
    return pd.DataFrame(lines)


def _models_per_layer(rows: list[dict]) -> pd.DataFrame:
    """Each model of ``rows`` (target and draft of every pair) once: its step in ms per layer and the MB of weights a
    layer reads per step (the decode bytes over the layers), medians over the rows that measured it."""
    seen = [{"model": row[role], "ms": row[time] * 1e3 / row[f"{role}_layers"],
             "mb": read_bytes(row, role) / 1e6 / row[f"{role}_layers"]}
            for row in rows for role, time in (("target", "T_T"), ("draft", "T_D")) if row.get(f"{role}_layers")]
    return pd.DataFrame(seen).groupby("model").median() if seen else pd.DataFrame(columns=["ms", "mb"])


LAUNCH_BOUND_FACTOR = 5  # a layer's time varies at least this many times less than its bytes: launches set it


def report_numbers(rows: list[dict]) -> dict:
    """The report's sentences about the eager and graph rows, from the rows (``gpu_*`` keys; empty without them).

    Eager: the step per layer of every model measured against the bytes a layer reads; ``gpu_launch_bound`` where
    the time per layer varies :data:`LAUNCH_BOUND_FACTOR` times less than the bytes (a launch-bound step costs about
    the same per layer whatever the layer's size), and the eager c of the handout pairs. Graphs: the target's step
    eager over graphs and what it costs per layer above its HBM floor (every model), the floor's share of the step
    (the handout pairs: the CPU pair's fp32 target reads too little for a share to mean anything)."""
    eager = [row for row in rows if row.get("decode", "eager") == "eager"]
    numbers = {}
    layers = _models_per_layer(eager)
    handout_c = [row["c"] for row in eager if row.get("weights") == "random"]
    if len(layers) >= 2 and handout_c:
        time_spread = float(layers.ms.max() / layers.ms.min())
        bytes_spread = float(layers.mb.max() / layers.mb.min())
        numbers.update(gpu_eager_models=len(layers), gpu_eager_layer_ms_min=float(layers.ms.min()),
                       gpu_eager_layer_ms_max=float(layers.ms.max()), gpu_eager_time_spread=time_spread,
                       gpu_eager_bytes_spread=bytes_spread,
                       gpu_launch_bound=int(bytes_spread >= LAUNCH_BOUND_FACTOR * time_spread),
                       gpu_eager_c_min=min(handout_c), gpu_eager_c_max=max(handout_c))
    steps = []
    for row in rows:
        if row.get("decode") != "graphs" or not row.get("target_layers"):
            continue
        twin = [e for e in eager if (e["target"], e["draft"]) == (row["target"], row["draft"])]
        floor = hbm_floor_s(row)
        handout = floor and row.get("weights") == "random"
        steps.append({"target": row["target"], "speedup": twin[0]["T_T"] / row["T_T"] if twin else None,
                      "share_pct": 100 * floor / row["T_T"] if handout else None,
                      "above_us": (row["T_T"] - floor) * 1e6 / row["target_layers"] if floor else None,
                      "mb": read_bytes(row) / 1e6 / row["target_layers"]})
    steps = pd.DataFrame(steps)
    for key in ("speedup", "share_pct", "above_us") if len(steps) else ():
        known = steps[key].dropna()
        if len(known):
            numbers.update({f"gpu_graphs_{key}_min": float(known.min()), f"gpu_graphs_{key}_max": float(known.max())})
    numbers.update(repeat_spread(rows))
    above = steps.dropna(subset=["above_us"]).groupby("target").median(numeric_only=True) if len(steps) else steps
    if len(above) >= 2:  # what a layer costs above its floor, against the bytes it reads, over the targets
        spread, bytes_spread = above.above_us.max() / above.above_us.min(), above.mb.max() / above.mb.min()
        numbers.update(gpu_graphs_targets=len(above), gpu_graphs_above_spread=float(spread),
                       gpu_graphs_bytes_spread=float(bytes_spread),
                       gpu_graphs_kernel_bound=int(bytes_spread >= LAUNCH_BOUND_FACTOR * spread))
    return numbers


def repeat_spread(rows: list[dict]) -> dict:
    """How far the same target's step moved between the pairs' runs (each pair times its target again), eager and
    as graphs: the target with the largest eager spread (max over min of its T_T), with its graph spread beside it
    (``gpu_repeat_*``; empty without a target timed twice in both modes). Eager steps are host timings."""
    times = pd.DataFrame([{"target": row["target"], "decode": row.get("decode", "eager"), "T_T": row["T_T"] * 1e3}
                          for row in rows])
    if not len(times):
        return {}
    spread = times.groupby(["target", "decode"])["T_T"].agg(["min", "max", "count"])
    spread = spread[spread["count"] >= 2].assign(ratio=lambda f: f["max"] / f["min"])["ratio"].unstack()
    both = spread[["eager", "graphs"]].dropna() if {"eager", "graphs"} <= set(spread.columns) else spread.iloc[:0]
    if both.empty:
        return {}
    target = both["eager"].idxmax()
    eager = times[(times["target"] == target) & (times["decode"] == "eager")]["T_T"]
    return {"gpu_repeat_target": short_name(target), "gpu_repeat_eager_min_ms": float(eager.min()),
            "gpu_repeat_eager_max_ms": float(eager.max()), "gpu_repeat_eager_spread": float(both.loc[target, "eager"]),
            "gpu_repeat_graphs_pct": 100 * float(both.loc[target, "graphs"] - 1)}


E2E_PHASES = {"time_draft_s": "draft s", "time_verify_s": "verify s", "time_prefill_s": "prefill s"}


def e2e_table(rows: list[dict]) -> pd.DataFrame:
    """The CPU pair's end-to-end rows: per draft and gamma, speedup over AR (both in the same decode mode), alpha,
    whether every greedy output equals AR's, graph replays (the pair's total in rows from before they counted per row:
    see :func:`e2e_report_table`) and the phase seconds (None where the row did not time them)."""
    keep = ["draft", "gamma", "decode", "speedup", "alpha", "identical_to_ar", "graph_replays", *E2E_PHASES]
    frame = pd.DataFrame([{**{k: row.get(k) for k in keep},
                           "replays_per_row": row.get("graph_replays_scope") == "row",
                           "pair_replays": row.get("pair_graph_replays", None if row.get("graph_replays_scope") == "row"
                                                   else row.get("graph_replays"))}
                          for row in rows if row.get("kind") == "e2e"])
    return frame.sort_values(["draft", "gamma"]).reset_index(drop=True) if len(frame) else frame


def real_phases(e2e: pd.DataFrame) -> list[str]:
    """The phase columns every row really timed: a phase that ran cannot take 0.0 s (a CUDA run timed whole recorded
    0.0 for each, from a sum over prompts of unknown laps), nor be missing."""
    return [c for c in E2E_PHASES if c in e2e and e2e[c].notna().all() and (e2e[c].astype(float) > 0).all()]


def e2e_report_table(e2e: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """``(table, caption note)`` for the report: only the columns the rows really carry. Graph replays per row where
    every row counted its own; else none in the table and the pairs' totals (one count per pair, over AR and every
    gamma) in the note. Phase seconds where every row timed them (:func:`real_phases`), else left out, said so."""
    phases = real_phases(e2e)
    table = e2e[["draft", "gamma", "decode", "speedup", "alpha", "identical_to_ar"]].copy()
    notes = []
    if e2e["replays_per_row"].all():
        table["replays"] = e2e["graph_replays"]
    else:
        totals = e2e.dropna(subset=["pair_replays"]).groupby("draft")["pair_replays"].first()
        notes.append("CUDA-graph replays counted per pair, not per row: " + "; ".join(
            f"{short_name(d)} {int(n):,} over its whole run (AR and every gamma)" for d, n in totals.items())
                     if len(totals) else "no CUDA-graph replays recorded")
    for column in phases:
        table[E2E_PHASES[column]] = e2e[column]
    if len(phases) < len(E2E_PHASES):
        notes.append("phase seconds (draft, verify, prefill) " + ("only for " + ", ".join(E2E_PHASES[c] for c in phases)
                                                                   if phases else "not timed")
                     + ": these rows' runs were timed whole, and a split recorded as 0.0 s is no measurement")
    return table.assign(draft=table["draft"].map(short_name)), "; ".join(notes)


def jump_drops_all(e2e: pd.DataFrame, from_width: int | None, to_width: int | None) -> bool | None:
    """Whether every draft's end-to-end speedup (:func:`e2e_table`) is lower at the lookahead whose verify is
    ``to_width`` tokens wide (gamma + 1) than at the one ``from_width`` wide; None where either was not measured."""
    if not (from_width and to_width and len(e2e)):
        return None
    by = e2e.pivot_table(index="draft", columns="gamma", values="speedup")
    low, high = from_width - 1, to_width - 1
    both = by[[low, high]].dropna() if low in by and high in by else ()
    return bool((both[high] < both[low]).all()) if len(both) else None


def goal_lines(folder: Path) -> list[str]:
    """The GPU issue's goals as measured by the rows in ``folder`` (one profile's results), one line each
    (:func:`helpers.experiments.nb09.decode_modes.goal_line`): the model file's decode goals first
    (:func:`~helpers.experiments.nb09.decode_modes.goal_rows`), then the Qwen3-8B pairs' c with graphs (and the
    roofline share of the step beside the 0.6B draft), the CPU pair end to end; then the profiled steps' diagnostics."""
    from helpers.experiments.nb09 import decode_modes, step_profile  # notebook 09's parts: imported when needed
    from helpers.experiments.nb09.decode_modes import goal

    cost_rows = read_rows(folder, COSTS)
    goals = decode_modes.goal_rows(read_rows(folder, decode_modes.DECODE_STEPS),
                                   [without_artefacts(row) for row in cost_rows])  # no Eq. 5 from an artefact
    costs = cost_table(cost_rows)
    for _, row in costs[costs["decode"] == "graphs"].iterrows() if len(costs) else []:
        if "Qwen3-8B" not in row["target"]:
            continue
        eager = costs[(costs["decode"] == "eager") & (costs["draft"] == row["draft"])
                      & (costs["target"] == row["target"])]
        ran, eager_c = (row["graph replays"] or 0) > 0, f"{eager['c'].iloc[0]:.3f}" if len(eager) else "not measured"
        pair = f"{row['target']} / {row['draft']} graphs"
        goals.append(goal(f"{pair}: c (eager {eager_c}; {int(row['graph replays'] or 0)} replays)", row["c"], "<=",
                          0.15, ran))
        if row["draft"].endswith("0.6B") and row["roofline share"] == row["roofline share"] and row["roofline share"]:
            goals.append(goal(f"{row['target']} step with graphs: roofline share", row["roofline share"], ">=", 0.7,
                              ran))
    e2e = e2e_table(read_rows(folder, GRAPHS))
    if len(e2e):
        best = e2e.loc[e2e["speedup"].idxmax()]
        identical = bool(e2e["identical_to_ar"].all())
        ran = bool((e2e["graph_replays"].fillna(0) > 0).all() or (e2e["pair_replays"].fillna(0) > 0).all())
        goals.append(goal(f"CPU pair end to end ({best['decode']}): best speedup, identical to AR: {identical}",
                          best["speedup"], ">=", 1.5, identical and ran))
    lines = [decode_modes.goal_line(g) for g in goals] or ["no goal rows yet (parts eq5 and graphs measure them)"]
    return lines + step_profile.diagnostic_lines(folder)


def short_name(name: str) -> str:
    """A Hub model without its organisation (the CPU pair's names stay whole: ``target`` alone says nothing)."""
    return name if name.startswith("cpu-pair/") else name.split("/")[-1]


def write_report_tables(profile: str) -> list[str]:
    """The window's decode-cost rows as the report's tables, whatever notebook is still pending: ``00_gpu_graphs``
    (Eq. 5 terms eager and as CUDA graphs, roofline share), ``00_gpu_e2e`` (the CPU pair end to end) and
    ``00_gpu_kernels`` (where a step's time goes: :mod:`helpers.experiments.nb09.step_profile`). Written by
    ``python -m helpers.run_all`` for every profile that has such rows; returns the goal lines (empty without rows)."""
    from helpers import tables
    from helpers.experiments.nb09 import step_profile
    from helpers.paths import results_dir

    folder = results_dir(profile, create=False)
    pair_rows = read_rows(folder, GRAPHS)  # the CPU pair's terms (kind eq5_terms) and its end-to-end rows
    cost_rows = read_rows(folder, COSTS) + [row for row in pair_rows if row.get("kind") == "eq5_terms"]
    costs = cost_table(cost_rows)
    step_rows = read_rows(folder, step_profile.STEP_PROFILE)
    numbers = {**report_numbers(cost_rows), **(step_profile.report_numbers(step_rows) if step_rows else {})}
    e2e = e2e_table(pair_rows)
    drops = jump_drops_all(e2e, numbers.get("gpu_jump_from_width"), numbers.get("gpu_jump_to_width"))
    if drops is not None:
        numbers["gpu_jump_drops_all"] = int(drops)
    decode = _write_decode_table(folder, profile)
    if numbers or decode:  # the report's paragraph on eager against graphs, and the tables' captions (report.tex)
        tables.write_numbers("00_gpu", profile, {**numbers, "gpu_context": EQ5_CONTEXT})
    if len(costs):
        short = costs.drop(columns=["HBM floor ms", "device_name", "target_layers"]).assign(
            target=costs["target"].map(short_name), draft=costs["draft"].map(short_name))
        short = short.rename(columns={"T_V/T_T (lowest gamma)": "T_V/T_T min g", "T_V/T_T (highest gamma)":
                                      "T_V/T_T max g", "T_V<T_T at gamma": "artefact g",
                                      "graph replays": "replays", "kernels per layer": "kernels/layer",
                                      "roofline share": "roofline"})
        tables.write_table(short, "00_gpu_graphs", profile, float_format="{:.3g}")  # caption: report.tex
    if len(e2e):
        table, note = e2e_report_table(e2e)
        tables.write_table(table, "00_gpu_e2e", profile, float_format="{:.3g}",
                           caption="The CPU pair on the GPU end to end: speculative decoding over AR, both in the same "
                                   "decode mode (real acceptance; every greedy output compared with AR's)"
                                   + (f"; {note}" if note else ""))
    steps = step_profile.step_table(step_rows)
    if len(steps):
        tables.write_table(steps.drop(columns="matmul kernels").assign(model=steps["model"].map(short_name)),
                           "00_gpu_kernels", profile, float_format="{:.3g}")  # caption: report.tex
    return goal_lines(folder) if len(costs) or len(e2e) or len(steps) or decode else []


def _write_decode_table(folder: Path, profile: str) -> bool:
    """``00_gpu_decode``: the window's ``decode`` part (the model file's modes beside transformers'); False without
    rows."""
    from helpers import tables
    from helpers.experiments.nb09 import decode_modes

    rows = read_rows(folder, decode_modes.DECODE_STEPS)
    if not rows:
        return False
    table = decode_modes.decode_table(rows)
    table = table.drop(columns=["device_name", "HBM floor ms"]).assign(model=table["model"].map(short_name))
    tables.write_table(table.rename(columns={"roofline share": "roofline", "graph replays": "replays"}),
                       "00_gpu_decode", profile, float_format="{:.3g}")  # caption: report.tex
    return True


# ------------------------------------------------------------------------------------------ measuring (GPU window)

# The handout's pairs and lookaheads (no notebook has a parameter for them yet): parts eq5 and graphs.
EQ5_GAMMAS = [2, 3, 5, 7]
EQ5_CONTEXT = 256  # cached tokens before the timed forward
EQ5_REPEATS = 30
EQ5_ALPHAS = [0.5, 0.6, 0.7, 0.8, 0.9]  # the grid of Eq. 5's *predicted* speedup
EQ5_DTYPE = "bfloat16"  # the handout pairs; the CPU pair keeps sd_dtype (float32: greedy outputs stay exact)
CPU_PAIRS = [["cpu-pair/target", "cpu-pair/draft"], ["cpu-pair/target", "cpu-pair/draft-2l"]]
DECODE_MODES = {"eager": False, "graphs": "graphs", "compiled": "compiled"}  # row label -> the generators' ``compile``


@dataclass(frozen=True)
class WindowSettings:
    """What the window's cost parts measure (``python -m helpers.gpu_measure``; the dry run replaces fields): the
    handout ``pairs`` and the ``cpu_pairs`` at each of ``gammas`` after ``context`` cached tokens, ``repeats`` timings
    each, in ``dtype`` (the CPU pair keeps ``sd_dtype``) and each decode ``mode``; Eq. 5's prediction over ``alphas``;
    the step profile's ``profile_models`` (model -> widths); part decode's ``decode`` settings."""
    pairs: tuple = HANDOUT_PAIRS
    gammas: list = field(default_factory=lambda: list(EQ5_GAMMAS))
    context: int = EQ5_CONTEXT
    repeats: int = EQ5_REPEATS
    alphas: list = field(default_factory=lambda: list(EQ5_ALPHAS))
    cpu_pairs: list = field(default_factory=lambda: [list(pair) for pair in CPU_PAIRS])
    dtype: str = EQ5_DTYPE
    modes: list = field(default_factory=lambda: list(DECODE_MODES))
    profile_models: dict = field(default_factory=dict)
    decode: dict = field(default_factory=dict)


def graph_proof(mode: str, models_, measure) -> dict:
    """``measure()``'s row plus the proof that graphs ran where the row claims them: the CUDA-graph replays of the
    explicit steps (0 on a CPU, where the same static step runs without capture) and the seconds their first calls
    took (``compile_s``: compiling the layer in mode compiled, warming up, capturing); and, where the model file ran every
    model, the target's kernels per layer (``layer_kernels``, the eager count: what a GPU step's time follows)."""
    from helpers.models.decoder import layer_kernels
    from helpers.models.graphs import graph_compile_s, graph_replays
    from helpers.models.runtime import minimal_supported, minimal_view

    layer = ({"layer_kernels": layer_kernels(minimal_view(models_[0]).config)}
             if all(minimal_supported(m) for m in models_) else {})
    if mode == "eager":  # nothing to prove, and the model may have no minimal view (another architecture)
        return {**measure(), **layer}
    views = [minimal_view(m) for m in models_]
    before = sum(graph_replays(v) for v in views), sum(graph_compile_s(v) for v in views)
    row = measure()
    return {**row, **layer, "graph_replays": sum(graph_replays(v) for v in views) - before[0],
            "compile_s": sum(graph_compile_s(v) for v in views) - before[1]}


def pair_dtype(weights: str, p: dict, eq5: dict) -> str:
    """The CPU pair keeps notebook 07's dtype (exact greedy outputs); the handout pairs run in ``eq5.dtype``."""
    return p["sd_dtype"] if weights == "cpu-pair" else eq5.dtype


def cost_config(target: str, draft: str, weights: str, p: dict, eq5: dict, mode: str) -> dict:
    """The configuration of one pair's Eq. 5 terms in one decode mode."""
    return {"kind": "eq5_terms", "target": target, "draft": draft, "weights": weights,
            "dtype": pair_dtype(weights, p, eq5), "device": p["device"], "context_len": eq5.context,
            "gammas": eq5.gammas, "repeats": eq5.repeats, "decode": mode}


def decode_weight_bytes(model) -> int:
    """Weight bytes one decode step of ``model`` reads, at its stored precision: the rule of
    :func:`helpers.memory.decode_weight_bytes` (an input embedding untied from the LM head is not read)."""
    from helpers.memory import decode_weight_bytes as config_bytes

    return config_bytes(model.config, next(model.parameters()).element_size())


def eq5_row(costs: dict, target, draft, eq5: dict) -> dict:
    """The measured terms plus Eq. 5's predicted speedup over a grid of alpha (a prediction, labelled so) and the
    weight bytes a decode step reads (the HBM roofline: decode bytes / bandwidth)."""
    from helpers.specdec.analysis import predicted_speedup

    c = costs["T_D"] / costs["T_T"]
    return {**{k: v for k, v in costs.items() if k != "compiled"}, "c": c,
            "verify_ratio": {g: t / costs["T_T"] for g, t in costs["T_V"].items()},
            "eq5_prediction": {f"{a:g}": {g: float(predicted_speedup(int(g), a, c, costs["T_V"][g] / costs["T_T"]))
                                          if costs["T_V"][g] / costs["T_T"] >= VERIFY_FLOOR or int(g) < 1 else None
                                          for g in costs["T_V"]} for a in eq5.alphas},  # none from an artefact
            "eq5_note": "prediction from the measured terms at an assumed alpha (random weights: no real alpha)",
            "target_weight_bytes": sum(t.numel() * t.element_size() for t in target.parameters()),
            "draft_weight_bytes": sum(t.numel() * t.element_size() for t in draft.parameters()),
            "target_decode_bytes": decode_weight_bytes(target), "draft_decode_bytes": decode_weight_bytes(draft),
            "target_layers": target.config.num_hidden_layers, "draft_layers": draft.config.num_hidden_layers}


def _load_cost_pair(p: dict, eq5: dict, target_name: str, draft_name: str, label: str, weights: str):
    """Both models of a pair and a random cached context of ``eq5.context`` tokens (seeded)."""
    from helpers.models import load_model

    dtype = getattr(torch, pair_dtype(label, p, eq5))
    kwargs = {} if label == "cpu-pair" else {"weights": weights}
    target, _ = load_model(target_name, device=p["device"], dtype=dtype, **kwargs)
    draft, _ = load_model(draft_name, device=p["device"], dtype=dtype, **kwargs)
    vocab = min(target.config.vocab_size, draft.config.vocab_size)
    context = torch.randint(0, vocab, (1, eq5.context), generator=torch.Generator().manual_seed(0))
    meta = run_metadata(model_id=target_name, weights=label, dtype=dtype, device=p["device"], seed=0,
                        draft_id=draft_name)
    return target, draft, context.to(p["device"]), meta


def outdated(store, configs: dict) -> bool:
    """Whether a pair's rows (``configs`` by decode mode) were measured with a model file whose layer launched a
    different number of kernels than now (:func:`~helpers.models.decoder.layer_kernels` of its target): its graphs
    row records the count (rows from before it did record none). Such a pair is measured again in every mode, the new
    rows superseding the old (the file keeps both); a pair without a graphs row never is."""
    from helpers.models import model_config
    from helpers.models.decoder import DecoderConfig, layer_kernels
    from helpers.results import config_key

    row = store.done().get(config_key(configs["graphs"])) if "graphs" in configs else None
    if row is None:
        return False
    return row.get("layer_kernels") != layer_kernels(DecoderConfig.from_hf(model_config(configs["graphs"]["target"])))


def measure_eq5(p: dict, store, eq5: dict, pairs, weights: str, fatal: tuple = ()) -> None:
    """Eq. 5's terms of each pair in every decode mode of ``eq5.modes`` (graphs only where the model file runs
    the pair: Qwen3), one row per (pair, mode)."""
    from helpers.experiments.common import check_budget
    from helpers.models import PAIR_PREFIX
    from helpers.models.runtime import minimal_supported
    from helpers.results import free_memory
    from helpers.experiments.specdec_costs import measure_costs

    for target_name, draft_name in pairs:
        label = "cpu-pair" if target_name.startswith(PAIR_PREFIX) else weights
        configs = {mode: cost_config(target_name, draft_name, label, p, eq5, mode) for mode in eq5.modes}
        stale = outdated(store, configs)
        if not stale and all(store.has(c) for c in configs.values()):
            continue
        check_budget(store, f"loading {target_name} / {draft_name}")
        target, draft, context, meta = _load_cost_pair(p, eq5, target_name, draft_name, label, weights)
        for mode, config in configs.items():
            if mode != "eager" and not (minimal_supported(target) and minimal_supported(draft)):
                print(f"  {target_name} / {draft_name}: no {mode} decode (the model file does not run this "
                      "architecture), skipped")
                continue
            tolerate_graph_failure(mode, config, lambda mode=mode, config=config: store.run(
                config, lambda: graph_proof(mode, (target, draft), lambda: eq5_row(measure_costs(
                    target, draft, context, eq5.gammas, repeats=eq5.repeats, compile=DECODE_MODES[mode]),
                    target, draft, eq5)), meta=meta, rerun=stale), fatal)
        del target, draft
        free_memory()


def _measure_e2e(p: dict, graphs, eq5: dict, configs: list[dict], mode: str, prompt_rows, fatal: tuple) -> None:
    """One CPU pair's speculative decoding end to end against AR, both in decode ``mode``; a row per gamma."""
    from helpers.models import load_model
    from helpers.prompts import encode_prompts
    from helpers.results import free_memory
    from helpers.experiments.specdec_sweeps import gamma_rows, measure_pair

    dtype = getattr(torch, p["sd_dtype"])
    (target, tokenizer), (draft, _) = (load_model(configs[0]["target"], device=p["device"], dtype=dtype),
                                       load_model(configs[0]["draft"], device=p["device"], dtype=dtype))
    cases = encode_prompts(tokenizer, prompt_rows, target.device)
    meta = run_metadata(model_id=configs[0]["target"], weights="cpu-pair", dtype=p["sd_dtype"], device=p["device"],
                        seed=p["sd_seed"], draft_id=configs[0]["draft"])

    def e2e():
        proof = graph_proof(mode, (target, draft), lambda: {"rows": measure_pair(
            target, draft, cases, eq5.gammas, p["sd_max_new_tokens"], repeats=p["sd_repeats"],
            temperature=p["sd_temperature"], seed=p["sd_seed"], peer=False, compile=DECODE_MODES[mode],
            phase_run=True)})
        rows = gamma_rows(proof.pop("rows"))
        if "graph_replays" in proof:  # the whole pair's run (AR, every gamma, the phase runs): not a row's own count
            proof["pair_graph_replays"] = proof.pop("graph_replays")
        for config, row in zip(configs, rows):
            graphs.append(config, {**{k: v for k, v in row.items() if k not in config}, **proof}, meta)

    tolerate_graph_failure(mode, configs[0], e2e, fatal)
    del target, draft
    free_memory()


def measure_graphs(p: dict, store, eq5: dict, fatal: tuple = ()) -> None:
    """The CPU pair on the GPU: its cost terms eager and as graphs, then speculative decoding end to end with
    graphs against AR with graphs (real alpha; lossless checked on every prompt). ``store`` is the factory."""
    from helpers.experiments import nb07
    from helpers.experiments.common import check_budget, took
    from helpers.experiments.specdec_sweeps import sweep_configs

    graphs = store(GRAPHS)
    # the CPU pair's float32 rows keep eager and graphs: what the part has measured since the first window
    eq5 = replace(eq5, modes=[mode for mode in eq5.modes if mode != "compiled"])
    measure_eq5(p, graphs, eq5, eq5.cpu_pairs, "cpu-pair", fatal)
    prompt_rows, _ = nb07.prompt_sets(p)
    mode = eq5.modes[-1]  # the fastest mode the part runs: graphs (eager where graphs failed the self-check)
    for target_name, draft_name in eq5.cpu_pairs:
        configs = [{**c, "kind": "e2e", "decode": mode} for c in sweep_configs(
            target_name, draft_name, eq5.gammas, prompt_ids=[r["id"] for r in prompt_rows],
            **nb07.common_config(p))]
        if all(graphs.has(c) for c in configs):
            continue
        check_budget(graphs, f"{mode} e2e {target_name} / {draft_name}")
        with took(graphs):
            _measure_e2e(p, graphs, eq5, configs, mode, prompt_rows, fatal)
