"""Where a batch-1 decode step's time goes on a GPU (the window's part ``profile``): the kernels one step runs, their
summed device time (``busy_ms``: slow kernels keep the GPU busy) against their span (``span_ms``: many tiny kernels
leave it idle between launches, even inside a graph) and a replay's wall time, by kernel family. Read by the report's
table ``00_gpu_kernels`` and the window's goal lines. On a CPU (the dry run) the "kernels" are the ops that would
launch one on a GPU.
"""
from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path

import pandas as pd
import torch

from helpers.timing import measure, sync

STEP_PROFILE = "09_step_profile"
PROFILED = {"Qwen/Qwen3-8B": [1, 8], "Qwen/Qwen3-0.6B": [1], "cpu-pair/target": [1, 6, 8]}  # model -> widths
FAMILIES = (  # first match wins (attention first: fmha_cutlass... is attention); kernel names, lower-cased
    ("attention", ("fmha", "flash", "attention", "efficient", "softmax")),
    ("matmul", ("gemv", "gemm", "cutlass", "xmma", "cublas", "splitk", "matmul", "nvjet", "aten::mm", "aten::addmm",
                "aten::bmm", "aten::linear")),
    ("norm", ("norm",)),
    ("copy", ("memcpy", "memset", "copy", "scatter", "gather", "index", "aten::cat", "roll")),
)


# Rule 2 added "nvjet" (cuBLAS's Hopper kernels): the H200's first rows (rule 1, no rule recorded) counted them as
# "other"; :func:`row_families` moves their top-listed kernels back. Rows measured since record ``families_rule``.
FAMILIES_RULE = 2
_RULE_1 = tuple((label, tuple(k for k in keys if k != "nvjet")) for label, keys in FAMILIES)

# ops that only re-describe a tensor's memory: no kernel on a GPU
VIEW_OPS = {"aten::view", "aten::transpose", "aten::reshape", "aten::slice", "aten::narrow", "aten::expand",
            "aten::as_strided", "aten::unsqueeze", "aten::select", "aten::t", "aten::chunk", "aten::split",
            "aten::_unsafe_view", "aten::alias", "aten::detach"}


def cpu_kernel_ops(events) -> list:
    """The events of a CPU profile that would each launch a kernel on a GPU: top-level aten ops, not views."""
    return [e for e in events if e.cpu_parent is None and e.name.startswith("aten::") and e.name not in VIEW_OPS]


def family(name: str, families: tuple = FAMILIES) -> str:
    """The kernel family of a profiler event's name (``other``: element-wise and the rest)."""
    lowered = name.lower()
    for label, keys in families:
        if any(key in lowered for key in keys):
            return label
    return "other"


def kernel_summary(kernels, top: int = 8) -> dict:
    """Of one step's ``kernels`` (name, start_us, end_us): count, summed time, span, idle share of the span, time and
    count per :func:`family`, and the ``top`` kernels."""
    if not kernels:
        raise ValueError("no kernels in the profile (CUDA kernels need the profiler's CUDA activity)")
    kernels = sorted(kernels, key=lambda k: k[1])
    busy = sum(end - start for _, start, end in kernels)
    span = max(end for _, _, end in kernels) - kernels[0][1]
    by_family, by_name = defaultdict(lambda: [0, 0.0]), defaultdict(lambda: [0, 0.0])
    for name, start, end in kernels:
        for table, key in ((by_family, family(name)), (by_name, name[:120])):
            table[key][0] += 1
            table[key][1] += end - start
    ranked = sorted(by_name.items(), key=lambda item: -item[1][1])[:top]
    return {"kernels": len(kernels), "busy_ms": busy / 1e3, "span_ms": span / 1e3,
            "idle_share": max(0.0, 1 - busy / span) if span > 0 else 0.0,
            "families": {key: {"count": n, "ms": t / 1e3} for key, (n, t) in sorted(by_family.items())},
            "top_kernels": [{"name": key, "count": n, "ms": t / 1e3} for key, (n, t) in ranked]}


def profiled_kernels(run, device: torch.device) -> list[tuple[str, float, float]]:
    """(name, start_us, end_us) of the kernels one ``run()`` launches: on a GPU its CUDA kernels and copies (none
    where the profiler does not trace graph replays), on a CPU :func:`cpu_kernel_ops`."""
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        run()
        sync(device)
    events = prof.events()
    chosen = ([e for e in events if e.device_type == torch.autograd.DeviceType.CUDA] if cuda
              else cpu_kernel_ops(events))
    return [(e.name, e.time_range.start, e.time_range.end) for e in chosen]


@torch.inference_mode()
def measure_step(model, context: torch.Tensor, width: int, *, repeats: int = 20, mode: str = "graphs") -> dict:
    """One ``width``-token step of ``model`` after the cached ``context`` (1, S) through the model file in decode
    ``mode`` (eager, graphs: a CUDA graph replay of :func:`helpers.models.graphs.graphed_steps`, or compiled): its
    median wall time, its first calls' seconds (``compile_s``) and :func:`kernel_summary` of one profiled step (an
    eager one where the profiler does not trace graph replays: ``kernels_from``)."""
    from helpers.memory import decode_weight_bytes
    from helpers.models.decoder import layer_kernels
    from helpers.models.graphs import StepOwner, graphed_steps
    from helpers.models.runtime import minimal_view

    if mode not in ("eager", "graphs", "compiled"):
        raise ValueError(f"mode must be 'eager', 'graphs' or 'compiled', got {mode!r}")
    view = minimal_view(model)
    device = context.device
    block = context[:, -width:]
    owner = StepOwner()  # holds the steps while this profile replays them

    def eager_step():  # the model file's eager forward, on a cache of its own that holds the context
        cache = view.new_cache(1, context.shape[1] + width)
        view(context, cache)

        def step():
            view(block, cache)
            cache.rollback(width)
        return step

    start = time.perf_counter()
    if mode == "eager":
        replay, steps = eager_step(), None
        replay()
        sync(device)
        compile_s = time.perf_counter() - start
    else:
        # the generators' own static cache (capacity rounded up to a power of two: an aligned mask, as in timed rows)
        steps = graphed_steps(view, 1, context.shape[1] + width, owner=owner, compiled=mode == "compiled")
        view(context, steps.cache)

        def replay():
            steps(block)
            steps.cache.rollback(width)

        replay()  # compiles (compiled mode) and captures (on a GPU) the width
        sync(device)
        compile_s = steps.compile_s
    wall = measure(replay, warmup=3, repeats=repeats, device=device, statistic="median")
    kernels, source = profiled_kernels(replay, device), ("cpu ops" if device.type != "cuda" else mode)
    if not kernels:  # the profiler did not trace the graph's replays: profile an eager step instead
        step = eager_step()
        step()  # warm: the eager path's first call may pick kernels
        kernels, source = profiled_kernels(step, device), "eager"
    return {**kernel_summary(kernels), "families_rule": FAMILIES_RULE, "kernels_from": source,
            "wall_ms": wall.median * 1e3, "wall_spread": wall.spread,
            "graph_replays": steps.replays if steps is not None else 0, "layer_kernels": layer_kernels(view.config),
            "num_layers": view.config.num_layers, "compile_s": compile_s,
            "decode_bytes": decode_weight_bytes(model.config, next(model.parameters()).element_size())}


def measure_profiles(p: dict, store, eq5: dict, fatal: tuple = ()) -> None:
    """Part ``profile``: a :func:`measure_step` row per model and width of ``eq5.profile_models`` (the handout's
    models random in ``eq5.dtype``, the CPU pair its own); a failure is printed and skipped (only a diagnostic)."""
    from helpers.experiments.common import check_budget, took
    from helpers.models import PAIR_PREFIX, load_model
    from helpers.results import free_memory, run_metadata

    rows = store(STEP_PROFILE)
    for name, widths in eq5.profile_models.items():
        label = "cpu-pair" if name.startswith(PAIR_PREFIX) else "random"
        dtype = p["sd_dtype"] if label == "cpu-pair" else eq5.dtype  # as the pair's Eq. 5 rows
        configs = [{"kind": "step_profile", "model": name, "weights": label, "dtype": dtype, "device": p["device"],
                    "context_len": eq5.context, "width": int(w), "decode": "graphs"} for w in widths]
        if all(rows.has(c) for c in configs):
            continue
        check_budget(rows, f"profiling {name}")
        model = context = None
        try:
            with took(rows):
                model, _ = load_model(name, device=p["device"], dtype=getattr(torch, dtype),
                                      **({} if label == "cpu-pair" else {"weights": "random"}))
                context = torch.randint(0, model.config.vocab_size, (1, eq5.context),
                                        generator=torch.Generator().manual_seed(0)).to(p["device"])
                meta = run_metadata(model_id=name, weights=label, dtype=dtype, device=p["device"], seed=0)
                for config in configs:
                    rows.run(config, lambda config=config: measure_step(model, context, config["width"]), meta=meta)
        except fatal:
            raise
        except Exception as error:  # noqa: BLE001 - a diagnostic: printed, the window goes on
            print(f"  STEP PROFILE FAILED, skipped: {name}: {type(error).__name__}: {error}"[:2000], flush=True)
        del model, context
        free_memory()


# ------------------------------------------------------------------------------------------------ reading the rows


def row_families(row: dict) -> dict:
    """A row's time and count per family under the current :data:`FAMILIES`; an older rule's row corrected from its
    ``top_kernels`` only (the others keep the old family: a corrected matmul time is a lower bound)."""
    families = {key: dict(value) for key, value in row.get("families", {}).items()}
    if row.get("families_rule", 1) >= FAMILIES_RULE:
        return families
    for kernel in row.get("top_kernels", []):
        old, new = family(kernel["name"], _RULE_1), family(kernel["name"])
        if old != new:
            for key, sign in ((old, -1), (new, 1)):
                entry = families.setdefault(key, {"count": 0, "ms": 0.0})
                entry["count"] += sign * kernel["count"]
                entry["ms"] += sign * kernel["ms"]
    return families


def step_table(rows: list[dict]) -> pd.DataFrame:
    """One line per profiled (model, width): kernels (and per layer), wall and busy ms, the idle share, the matrix
    products' ms and kernels, and the HBM floor (the weights a step reads once at any width, over the bandwidth)."""
    from helpers.gpu_specs import memory_bandwidth

    lines = []
    for row in rows:
        bandwidth = memory_bandwidth(row.get("device_name", ""))
        lines.append({"model": row["model"], "width": row["width"], "kernels": row["kernels"],
                      "kernels/layer": row["kernels"] / row["num_layers"], "wall ms": row["wall_ms"],
                      "busy ms": row["busy_ms"], "idle": row["idle_share"],
                      "matmul ms": row_families(row).get("matmul", {}).get("ms", 0.0),
                      "HBM floor ms": row["decode_bytes"] / bandwidth * 1e3 if bandwidth else None,
                      "from": row["kernels_from"],
                      "matmul kernels": frozenset(k["name"] for k in row.get("top_kernels", [])
                                                  if family(k["name"]) == "matmul")})
    frame = pd.DataFrame(lines)
    return frame.sort_values(["model", "width"]).reset_index(drop=True) if len(frame) else frame


def gap_split(row) -> dict:
    """A :func:`step_table` line's time above its HBM floor in three parts adding up to it (ms): the matrix products
    beyond the floor (GEMVs below bandwidth), the other kernels, the gaps (wall minus busy); and the floor as a share
    of the matrix products' time (``matmul_bandwidth``)."""
    floor, matmul, busy, wall = row["HBM floor ms"], row["matmul ms"], row["busy ms"], row["wall ms"]
    return {"matmul_excess": matmul - floor, "other_kernels": busy - matmul, "gaps": wall - busy,
            "matmul_bandwidth": floor / matmul if matmul > 0 else float("nan")}


def width_jump(table: pd.DataFrame) -> dict | None:
    """The largest rise of the matrix products' time between consecutive widths of one model, and whether the wider
    step lists a matrix-product kernel the narrower does not (None without two widths of a model)."""
    best = None
    for model, lines in table.groupby("model") if len(table) else []:
        lines = lines.sort_values("width")
        for (_, low), (_, high) in zip(lines.iloc[:-1].iterrows(), lines.iloc[1:].iterrows()):
            if low["matmul ms"] > 0 and (best is None or high["matmul ms"] / low["matmul ms"] > best["ratio"]):
                best = {"model": model, "from_width": int(low["width"]), "to_width": int(high["width"]),
                        "from_ms": low["matmul ms"], "to_ms": high["matmul ms"],
                        "ratio": high["matmul ms"] / low["matmul ms"],
                        "new_kernels": int(bool(high["matmul kernels"] - low["matmul kernels"]))}
    return best


def report_numbers(rows: list[dict]) -> dict:
    """The report's numbers on the profile rows: :func:`gap_split` of the width-1 step with the largest HBM floor
    (``gpu_step_*``), :func:`width_jump` (``gpu_jump_*``) and whether a row's families were corrected."""
    table, numbers = step_table(rows), {}
    single = table[(table["width"] == 1) & table["HBM floor ms"].notna()] if len(table) else table
    if len(single):
        row = single.loc[single["HBM floor ms"].idxmax()]
        split = gap_split(row)
        numbers.update(gpu_step_model=row["model"].split("/")[-1], gpu_step_wall_ms=float(row["wall ms"]),
                       gpu_step_floor_ms=float(row["HBM floor ms"]), gpu_step_matmul_ms=float(row["matmul ms"]),
                       gpu_step_matmul_bw_pct=100 * split["matmul_bandwidth"],
                       **{f"gpu_step_{key}_ms": float(split[key])
                          for key in ("matmul_excess", "other_kernels", "gaps")})
        parts = {"matmul_excess": "matrix products below bandwidth", "other_kernels": "the other kernels",
                 "gaps": "the gaps"}
        numbers["gpu_step_largest"] = parts[max(parts, key=lambda key: split[key])]
    jump = width_jump(table)
    if jump:
        numbers.update({f"gpu_jump_{key}": value for key, value in jump.items()})
    numbers["gpu_step_corrected"] = int(any(row.get("families_rule", 1) < FAMILIES_RULE for row in rows))
    return numbers


def diagnostic_lines(rows: list[dict]) -> list[str]:
    """A line of labelled numbers per profiled width-1 step of the part's ``rows``: wall, kernels, busy and
    matrix-product ms, and :func:`gap_split` where there is an HBM floor."""
    table = step_table(rows)
    lines = []
    for _, row in table[table["width"] == 1].iterrows() if len(table) else []:
        parts = {"wall ms": row["wall ms"], "kernels": row["kernels"], "per layer": row["kernels/layer"],
                 "busy ms": row["busy ms"], "matmul ms": row["matmul ms"], "idle": row["idle"]}
        if pd.notna(row["HBM floor ms"]):
            split = gap_split(row)
            parts |= {"HBM floor ms": row["HBM floor ms"], "matmul bandwidth": split["matmul_bandwidth"],
                      **{f"over floor: {key.replace('_', ' ')} ms": split[key]
                         for key in ("matmul_excess", "other_kernels", "gaps")}}
        lines.append(f"diagnostic {row['model']} (kernels from {row['from']}): "
                     + "; ".join(f"{key} {value:.3g}" for key, value in parts.items()))
    return lines
