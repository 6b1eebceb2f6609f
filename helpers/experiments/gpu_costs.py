"""The GPU window's cost rows as tables: Eq. 5's terms of the handout pairs eager and as CUDA graphs, the decode
step against the HBM roofline, and the CPU pair end to end with graphs (read by notebook 09 and the report without a
GPU, and by the window's goal lines); and the window's parts ``eq5`` and ``graphs`` that measure them."""
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
VERIFY_FLOOR = 1.0  # T_V(gamma)/T_T below this for gamma >= 1 verifies gamma + 1 positions cheaper than one decode
# step (the same forward over fewer positions): a timing artefact, excluded from every Eq. 5 prediction
LAUNCH_BOUND_FACTOR = 5  # a layer's time varies at least this many times less than its bytes: launches set it
E2E_PHASES = {"time_draft_s": "draft s", "time_verify_s": "verify s", "time_prefill_s": "prefill s"}


def read_rows(folder: Path, name: str) -> list[dict]:
    """The latest ok row per configuration of ``folder/name.jsonl`` (empty without the file)."""
    return latest_ok_rows(Path(folder) / f"{name}.jsonl")


def gpu_cost_folders() -> list[Path]:
    """The profiles' result folders that hold Eq. 5 cost rows measured on a GPU."""
    return gpu_result_folders(COSTS)


def measured_cost_tables() -> list[tuple[Path, pd.DataFrame]]:
    """Every GPU profile's :func:`cost_table` of its Eq. 5 rows, with its folder."""
    return [(folder, cost_table(read_rows(folder, COSTS))) for folder in gpu_cost_folders()]


def read_bytes(row: dict, role: str = "target") -> float:
    """The weight bytes one decode step of the pair's ``role`` model reads (older rows: all its weights)."""
    return row.get(f"{role}_decode_bytes", row[f"{role}_weight_bytes"])


def hbm_floor_s(row: dict) -> float | None:
    """The target's weight-read floor: :func:`read_bytes` over the datasheet bandwidth (None without one)."""
    bandwidth = memory_bandwidth(row.get("device_name", ""))
    return read_bytes(row) / bandwidth if bandwidth else None


def verify_artefacts(row: dict) -> list[int]:
    """The gammas >= 1 of a cost row whose T_V(gamma)/T_T is below :data:`VERIFY_FLOOR`: timing artefacts."""
    return sorted(int(g) for g, v in (row.get("verify_ratio") or {}).items() if int(g) >= 1 and float(v) < VERIFY_FLOOR)


def trusted_verify_ratios(row: dict) -> dict[int, float]:
    """A cost row's ``{gamma: T_V/T_T}`` without its artefacts: the only ratios an Eq. 5 prediction may use."""
    bad = set(verify_artefacts(row))
    return {int(g): float(v) for g, v in (row.get("verify_ratio") or {}).items() if int(g) not in bad}


def without_artefacts(row: dict) -> dict:
    """A cost row whose ``verify_ratio`` holds only its :func:`trusted_verify_ratios`."""
    return {**row, "verify_ratio": {str(g): v for g, v in trusted_verify_ratios(row).items()}}


def cost_table(rows: list[dict]) -> pd.DataFrame:
    """One line per (pair, decode mode): T_T, T_D in ms, c, T_V/T_T at the smallest and largest gamma, the graph
    replays that prove graphs ran, and the target's weight-read floor (:func:`hbm_floor_s`; the short context's KV
    left out) with its share of the measured step."""
    lines = []
    for row in rows:
        floor = hbm_floor_s(row)
        gammas = sorted(row.get("verify_ratio", {}), key=int)
        lines.append({
            "device_name": row.get("device_name"), "target": row["target"], "draft": row["draft"],
            "target_layers": row.get("target_layers"), "decode": row.get("decode", "eager"),
            "T_T ms": row["target_step_s"] * 1e3, "T_D ms": row["T_D"] * 1e3, "c": row["c"],
            "T_V/T_T (lowest gamma)": row["verify_ratio"][gammas[0]] if gammas else None,
            "T_V/T_T (highest gamma)": row["verify_ratio"][gammas[-1]] if gammas else None,
            "T_V<T_T at gamma": ", ".join(map(str, verify_artefacts(row))) or "none",  # artefacts: no Eq. 5 from them
            "graph replays": row.get("graph_replays"),
            "kernels per layer": row.get("layer_kernels"),  # rows measured before the model file recorded it: None
            "HBM floor ms": floor * 1e3 if floor else None,
            "roofline share": floor / row["target_step_s"] if floor else None,
        })
    return pd.DataFrame(lines)


def _spreads(frame: pd.DataFrame, time: str) -> tuple[float, float, int]:
    """Max over min of ``frame[time]`` and of its bytes per layer (``mb``), and whether the bytes vary
    :data:`LAUNCH_BOUND_FACTOR` times more than the time (launch-bound: a layer costs the same whatever its size)."""
    time_spread, bytes_spread = float(frame[time].max() / frame[time].min()), float(frame.mb.max() / frame.mb.min())
    return time_spread, bytes_spread, int(bytes_spread >= LAUNCH_BOUND_FACTOR * time_spread)


def report_numbers(rows: list[dict]) -> dict:
    """The report's numbers on the eager and graph rows (``gpu_*``; empty without them): eager, each model's step
    per layer against the bytes a layer reads (medians over its rows) and the handout pairs' c; with graphs, the
    target's step eager over graphs, its cost per layer above the HBM floor and the floor's share of the step (the
    handout pairs only: the CPU pair's fp32 target reads too little for a share to mean anything)."""
    eager = [row for row in rows if row.get("decode", "eager") == "eager"]
    numbers = {}
    seen = [{"model": row[role], "ms": row[time] * 1e3 / row[f"{role}_layers"],
             "mb": read_bytes(row, role) / 1e6 / row[f"{role}_layers"]}
            for row in eager for role, time in (("target", "target_step_s"), ("draft", "T_D"))
            if row.get(f"{role}_layers")]
    layers = pd.DataFrame(seen).groupby("model").median() if seen else pd.DataFrame(columns=["ms", "mb"])
    handout_c = [row["c"] for row in eager if row.get("weights") == "random"]
    if len(layers) >= 2 and handout_c:
        time_spread, bytes_spread, bound = _spreads(layers, "ms")
        numbers.update(gpu_eager_models=len(layers), gpu_eager_layer_ms_min=float(layers.ms.min()),
                       gpu_eager_layer_ms_max=float(layers.ms.max()), gpu_eager_time_spread=time_spread,
                       gpu_eager_bytes_spread=bytes_spread, gpu_launch_bound=bound,
                       gpu_eager_c_min=min(handout_c), gpu_eager_c_max=max(handout_c))
    steps = []
    for row in rows:
        if row.get("decode") != "graphs" or not row.get("target_layers"):
            continue
        twin = [e for e in eager if (e["target"], e["draft"]) == (row["target"], row["draft"])]
        floor = hbm_floor_s(row)
        handout = floor and row.get("weights") == "random"
        speedup = twin[0]["target_step_s"] / row["target_step_s"] if twin else None
        steps.append({"target": row["target"], "speedup": speedup,
                      "share_pct": 100 * floor / row["target_step_s"] if handout else None,
                      "above_us": (row["target_step_s"] - floor) * 1e6 / row["target_layers"] if floor else None,
                      "mb": read_bytes(row) / 1e6 / row["target_layers"]})
    steps = pd.DataFrame(steps)
    for key in ("speedup", "share_pct", "above_us") if len(steps) else ():
        known = steps[key].dropna()
        if len(known):
            numbers.update({f"gpu_graphs_{key}_min": float(known.min()), f"gpu_graphs_{key}_max": float(known.max())})
    numbers.update(repeat_spread(rows))
    above = steps.dropna(subset=["above_us"]).groupby("target").median(numeric_only=True) if len(steps) else steps
    if len(above) >= 2:  # what a layer costs above its floor, against the bytes it reads, over the targets
        spread, bytes_spread, bound = _spreads(above, "above_us")
        numbers.update(gpu_graphs_targets=len(above), gpu_graphs_above_spread=spread,
                       gpu_graphs_bytes_spread=bytes_spread, gpu_graphs_kernel_bound=bound)
    return numbers


def repeat_spread(rows: list[dict]) -> dict:
    """How far one target's step moved between the pairs' runs (each pair times its target again): the target with
    the largest eager spread (max over min of its T_T, a host timing) with its graph spread beside it
    (``gpu_repeat_*``; empty without a target timed twice in both modes)."""
    times = pd.DataFrame([{"target": row["target"], "decode": row.get("decode", "eager"),
                           "ms": row["target_step_s"] * 1e3} for row in rows])
    if not len(times):
        return {}
    spread = times.groupby(["target", "decode"])["ms"].agg(["min", "max", "count"])
    spread = spread[spread["count"] >= 2].assign(ratio=lambda f: f["max"] / f["min"])["ratio"].unstack()
    both = spread[["eager", "graphs"]].dropna() if {"eager", "graphs"} <= set(spread.columns) else spread.iloc[:0]
    if both.empty:
        return {}
    target = both["eager"].idxmax()
    eager = times[(times["target"] == target) & (times["decode"] == "eager")]["ms"]
    return {"gpu_repeat_target": short_name(target), "gpu_repeat_eager_min_ms": float(eager.min()),
            "gpu_repeat_eager_max_ms": float(eager.max()), "gpu_repeat_eager_spread": float(both.loc[target, "eager"]),
            "gpu_repeat_graphs_pct": 100 * float(both.loc[target, "graphs"] - 1)}


def e2e_table(rows: list[dict]) -> pd.DataFrame:
    """The CPU pair's end-to-end rows: per draft and gamma, speedup over AR (both in the same decode mode), alpha,
    whether every greedy output equals AR's, graph replays (per row, or the pair's total in older rows) and the
    phase seconds (None where the row did not time them)."""
    keep = ["draft", "gamma", "decode", "speedup", "alpha", "identical_to_ar", "graph_replays", *E2E_PHASES]
    frame = pd.DataFrame([{**{k: row.get(k) for k in keep},
                           "replays_per_row": row.get("graph_replays_scope") == "row",
                           "pair_replays": row.get("pair_graph_replays", None if row.get("graph_replays_scope") == "row"
                                                   else row.get("graph_replays"))}
                          for row in rows if row.get("kind") == "e2e"])
    return frame.sort_values(["draft", "gamma"]).reset_index(drop=True) if len(frame) else frame


def e2e_report_table(e2e: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """``(table, caption note)`` of :func:`e2e_table` for the report, with only the columns the rows really carry:
    replays per row where every row counted its own (else the pairs' totals in the note), and the phase seconds
    where every row timed them (a phase that ran cannot take 0.0 s: CUDA runs timed whole recorded 0.0 for each)."""
    phases = [c for c in E2E_PHASES if c in e2e and e2e[c].notna().all() and (e2e[c].astype(float) > 0).all()]
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
    """Whether every draft's end-to-end speedup is lower at the gamma whose verify is ``to_width`` tokens wide than
    at the one ``from_width`` wide; None where either was not measured."""
    if not (from_width and to_width and len(e2e)):
        return None
    by = e2e.pivot_table(index="draft", columns="gamma", values="speedup")
    low, high = from_width - 1, to_width - 1
    both = by[[low, high]].dropna() if low in by and high in by else ()
    return bool((both[high] < both[low]).all()) if len(both) else None


def short_name(name: str) -> str:
    """A Hub model without its organisation (the CPU pair's names stay whole: ``target`` alone says nothing)."""
    return name if name.startswith("cpu-pair/") else name.split("/")[-1]


def write_report_tables(profile: str) -> bool:
    """The window's rows as the report's tables, whatever notebook is still pending (``python -m helpers.run_all``,
    captions in report.tex): ``00_gpu_graphs`` (Eq. 5 terms), ``00_gpu_e2e`` (the CPU pair end to end),
    ``00_gpu_kernels`` (:mod:`~helpers.experiments.nb09.step_profile`) and ``00_gpu_decode`` (part ``decode``: the
    model file's modes beside transformers'); returns whether the folder held any of their rows."""
    from helpers import tables
    from helpers.experiments.nb09 import decode_modes, step_profile
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
    decode_rows = read_rows(folder, decode_modes.DECODE_STEPS)
    if decode_rows:
        decode = decode_modes.decode_table(decode_rows)
        decode = decode.drop(columns=["device_name", "HBM floor ms"]).assign(model=decode["model"].map(short_name))
        tables.write_table(decode.rename(columns={"roofline share": "roofline", "graph replays": "replays"}),
                           "00_gpu_decode", profile, float_format="{:.3g}")
    if numbers or decode_rows:  # the report's paragraph on eager against graphs, and the tables' captions
        tables.write_numbers("00_gpu", profile, {**numbers, "gpu_context": EQ5_CONTEXT})
    if len(costs):
        short = costs.drop(columns=["HBM floor ms", "device_name", "target_layers"]).assign(
            target=costs["target"].map(short_name), draft=costs["draft"].map(short_name))
        short = short.rename(columns={"T_V/T_T (lowest gamma)": "T_V/T_T min g", "T_V/T_T (highest gamma)":
                                      "T_V/T_T max g", "T_V<T_T at gamma": "artefact g",
                                      "graph replays": "replays", "kernels per layer": "kernels/layer",
                                      "roofline share": "roofline"})
        tables.write_table(short, "00_gpu_graphs", profile, float_format="{:.3g}")
    if len(e2e):
        table, note = e2e_report_table(e2e)
        tables.write_table(table, "00_gpu_e2e", profile, float_format="{:.3g}",
                           caption="The CPU pair on the GPU end to end: speculative decoding over AR, both in the same "
                                   "decode mode (real acceptance; every greedy output compared with AR's)"
                                   + (f"; {note}" if note else ""))
    steps = step_profile.step_table(step_rows)
    if len(steps):
        tables.write_table(steps.drop(columns="matmul kernels").assign(model=steps["model"].map(short_name)),
                           "00_gpu_kernels", profile, float_format="{:.3g}")
    return bool(len(costs) or len(e2e) or len(steps) or decode_rows)


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
    """What the window's cost parts measure (the dry run replaces fields): the handout ``pairs`` and the
    ``cpu_pairs`` at each of ``gammas`` after ``context`` cached tokens, ``repeats`` timings each, in ``dtype`` (the
    CPU pair keeps ``sd_dtype``) and each decode mode of ``modes``; Eq. 5's prediction over ``alphas``; the step
    profile's ``profile_models`` (model -> widths); part decode's ``decode`` settings."""
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


def cost_config(target: str, draft: str, weights: str, p: dict, eq5: dict, mode: str) -> dict:
    """The configuration of one pair's Eq. 5 terms in one decode mode (the CPU pair in notebook 07's dtype: exact
    greedy outputs)."""
    return {"kind": "eq5_terms", "target": target, "draft": draft, "weights": weights,
            "dtype": p["sd_dtype"] if weights == "cpu-pair" else eq5.dtype, "device": p["device"],
            "context_len": eq5.context, "gammas": eq5.gammas, "repeats": eq5.repeats, "decode": mode}


def decode_weight_bytes(model) -> int:
    """Weight bytes one decode step of ``model`` reads at its stored precision
    (:func:`helpers.memory.decode_weight_bytes`)."""
    from helpers.memory import decode_weight_bytes as config_bytes

    return config_bytes(model.config, next(model.parameters()).element_size())


def eq5_row(costs: dict, target, draft, eq5: dict) -> dict:
    """The measured terms plus Eq. 5's predicted speedup over ``eq5.alphas`` (a prediction, labelled so; none from
    an artefact) and the weight bytes a decode step reads (the HBM roofline)."""
    from helpers.specdec.analysis import predicted_speedup

    c = costs["T_D"] / costs["target_step_s"]
    verify = {g: t / costs["target_step_s"] for g, t in costs["T_V"].items()}
    return {**{k: v for k, v in costs.items() if k != "compiled"}, "c": c, "verify_ratio": verify,
            "eq5_prediction": {f"{a:g}": {g: float(predicted_speedup(int(g), a, c, verify[g]))
                                          if verify[g] >= VERIFY_FLOOR or int(g) < 1 else None
                                          for g in costs["T_V"]} for a in eq5.alphas},
            "eq5_note": "prediction from the measured terms at an assumed alpha (random weights: no real alpha)",
            "target_weight_bytes": sum(t.numel() * t.element_size() for t in target.parameters()),
            "draft_weight_bytes": sum(t.numel() * t.element_size() for t in draft.parameters()),
            "target_decode_bytes": decode_weight_bytes(target), "draft_decode_bytes": decode_weight_bytes(draft),
            "target_layers": target.config.num_hidden_layers, "draft_layers": draft.config.num_hidden_layers}


def outdated(store, configs: dict) -> bool:
    """Whether a pair's graphs row (``configs`` by decode mode) records another kernel count per layer than the model
    file launches now (:func:`~helpers.models.decoder.layer_kernels`; older rows record none): then the pair is
    measured again in every mode, the new rows superseding the old. A pair without a graphs row never is."""
    from helpers.models import model_config
    from helpers.models.decoder import DecoderConfig, layer_kernels
    from helpers.results import config_key

    row = store.done().get(config_key(configs["graphs"])) if "graphs" in configs else None
    if row is None:
        return False
    return row.get("layer_kernels") != layer_kernels(DecoderConfig.from_hf(model_config(configs["graphs"]["target"])))


def measure_eq5(p: dict, store, eq5: dict, pairs, weights: str, fatal: tuple = ()) -> None:
    """Eq. 5's terms of each pair after a seeded random context, one row per decode mode of ``eq5.modes`` (graphs
    only where the model file runs the pair)."""
    from helpers.experiments.common import check_budget
    from helpers.experiments.specdec_costs import graph_proof, measure_costs
    from helpers.models import PAIR_PREFIX, load_model
    from helpers.models.runtime import minimal_supported
    from helpers.results import free_memory

    for target_name, draft_name in pairs:
        label = "cpu-pair" if target_name.startswith(PAIR_PREFIX) else weights
        configs = {mode: cost_config(target_name, draft_name, label, p, eq5, mode) for mode in eq5.modes}
        stale = outdated(store, configs)
        if not stale and all(store.has(c) for c in configs.values()):
            continue
        check_budget(store, f"loading {target_name} / {draft_name}")
        dtype = getattr(torch, configs[eq5.modes[0]]["dtype"])
        (target, _), (draft, _) = (load_model(name, device=p["device"], dtype=dtype,
                                              **({} if label == "cpu-pair" else {"weights": weights}))
                                   for name in (target_name, draft_name))
        context = torch.randint(0, min(target.config.vocab_size, draft.config.vocab_size), (1, eq5.context),
                                generator=torch.Generator().manual_seed(0)).to(p["device"])
        meta = run_metadata(model_id=target_name, weights=label, dtype=dtype, device=p["device"], seed=0,
                            draft_id=draft_name)
        for mode, config in configs.items():
            if mode != "eager" and not (minimal_supported(target) and minimal_supported(draft)):
                print(f"  {target_name} / {draft_name}: no {mode} decode (the model file does not run this "
                      "architecture), skipped")
                continue
            tolerate_graph_failure(mode, config, lambda mode=mode, config=config: store.run(
                config, lambda: eq5_row(graph_proof(mode, (target, draft), lambda: measure_costs(
                    target, draft, context, eq5.gammas, repeats=eq5.repeats, compile=DECODE_MODES[mode])),
                    target, draft, eq5), meta=meta, rerun=stale), fatal)
        del target, draft
        free_memory()


def measure_graphs(p: dict, store, eq5: dict, fatal: tuple = ()) -> None:
    """The CPU pair on the GPU: its cost terms eager and as graphs, then speculative decoding end to end with
    graphs against AR with graphs (real alpha; lossless checked on every prompt). ``store`` is the factory."""
    from helpers.experiments import nb07

    graphs = store(GRAPHS)
    # the CPU pair's float32 rows keep eager and graphs: what the part has measured since the first window
    eq5 = replace(eq5, modes=[mode for mode in eq5.modes if mode != "compiled"])
    measure_eq5(p, graphs, eq5, eq5.cpu_pairs, "cpu-pair", fatal)
    mode = eq5.modes[-1]  # the fastest mode the part runs: graphs (eager where graphs failed the self-check)
    for target_name, draft_name in eq5.cpu_pairs:
        nb07.measure_decode_mode(p, graphs, target_name, draft_name, eq5.gammas, mode, DECODE_MODES[mode], fatal)
