"""The GPU window's cost rows as tables: Eq. 5's terms of the handout pairs eager and as CUDA graphs, the decode
step against the HBM roofline, and the CPU pair end to end with graphs. Read by notebook 09 (results only: no GPU
needed to render them) and by the window's own summary of goals (:func:`helpers.gpu_window.goals`)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from helpers.results import latest_ok_rows

COSTS = "09_handout_costs"  # eq5 part: the handout pairs, random weights, bf16
GRAPHS = "09_compiled_decode"  # graphs part: the CPU pair's terms and end-to-end runs


def read_rows(folder: Path, name: str) -> list[dict]:
    """The latest ok row per configuration of ``folder/name.jsonl`` (empty when the file does not exist)."""
    return latest_ok_rows(Path(folder) / f"{name}.jsonl")


def _bandwidth(device_name: str) -> float | None:
    """Bytes per second of the GPU's memory (datasheet), or None for a device without a datasheet row."""
    from helpers.gpu_specs import gpu_spec

    try:
        return float(gpu_spec(device_name)["bandwidth_gbs"]) * 1e9
    except KeyError:
        return None


def cost_table(rows: list[dict]) -> pd.DataFrame:
    """One line per (pair, decode mode): T_T, T_D in ms, c, T_V(gamma)/T_T at the smallest and largest gamma, the
    graph replays that prove graphs ran, and the target's weight-read floor (the weight bytes a decode step reads,
    an untied input embedding excluded, over bandwidth; the KV of the short context is left out) as a share of the
    measured decode step."""
    lines = []
    for row in rows:
        bandwidth = _bandwidth(row.get("device_name", ""))
        read = row.get("target_decode_bytes", row["target_weight_bytes"])  # an untied input embedding is not read
        floor = read / bandwidth if bandwidth else None
        gammas = sorted(row.get("verify_ratio", {}), key=int)
        lines.append({
            "target": row["target"], "draft": row["draft"], "decode": row.get("decode", "eager"),
            "T_T ms": row["T_T"] * 1e3, "T_D ms": row["T_D"] * 1e3, "c": row["c"],
            "T_V/T_T (lowest gamma)": row["verify_ratio"][gammas[0]] if gammas else None,
            "T_V/T_T (highest gamma)": row["verify_ratio"][gammas[-1]] if gammas else None,
            "graph replays": row.get("graph_replays"),
            "HBM floor ms": floor * 1e3 if floor else None,
            "roofline share": floor / row["T_T"] if floor else None,
        })
    return pd.DataFrame(lines)


def e2e_table(rows: list[dict]) -> pd.DataFrame:
    """The CPU pair's end-to-end rows: per draft and gamma, speedup over AR (both in the same decode mode), alpha,
    whether every greedy output equals AR's, graph replays."""
    keep = ["draft", "gamma", "decode", "speedup", "alpha", "identical_to_ar", "graph_replays"]
    frame = pd.DataFrame([{k: row.get(k) for k in keep} for row in rows if row.get("kind") == "e2e"])
    return frame.sort_values(["draft", "gamma"]).reset_index(drop=True) if len(frame) else frame


def goal_lines(folder: Path) -> list[str]:
    """The GPU issue's goals as measured by the rows in ``folder`` (one profile's results), one line each."""
    lines = []
    costs = cost_table(read_rows(folder, COSTS))
    for _, row in costs[costs["decode"] == "graphs"].iterrows() if len(costs) else []:
        if "Qwen3-8B" not in row["target"]:
            continue
        eager = costs[(costs["decode"] == "eager") & (costs["draft"] == row["draft"])
                      & (costs["target"] == row["target"])]
        ran = (row["graph replays"] or 0) > 0
        eager_c = f"{eager['c'].iloc[0]:.3f}" if len(eager) else "not measured"
        lines.append(f"c = T_D/T_T of {row['target']} / {row['draft']}: {row['c']:.3f} with graphs, {eager_c} eager "
                     f"(goal <= 0.15 with graphs: {'met' if row['c'] <= 0.15 and ran else 'missed'}; "
                     f"{int(row['graph replays'] or 0)} graph replays)")
        if row["draft"].endswith("0.6B") and row["roofline share"] == row["roofline share"] and row["roofline share"]:
            lines.append(f"{row['target']} decode step with graphs: {row['T_T ms']:.2f} ms against the HBM floor "
                         f"{row['HBM floor ms']:.2f} ms = {row['roofline share']:.0%} of the roofline (goal >= 70%: "
                         f"{'met' if row['roofline share'] >= 0.7 and ran else 'missed'})")
    e2e = e2e_table(read_rows(folder, GRAPHS))
    if len(e2e):
        best = e2e.loc[e2e["speedup"].idxmax()]
        identical = bool(e2e["identical_to_ar"].all())
        ran = bool((e2e["graph_replays"].fillna(0) > 0).all())
        lines.append(f"CPU pair end to end ({best['decode']}): every greedy output identical to AR: {identical}; "
                     f"best {best['speedup']:.2f}x at gamma {best['gamma']} ({best['draft']}); median over rows "
                     f"{e2e['speedup'].median():.2f}x (goal >= 1.5x with graphs: "
                     f"{'met' if best['speedup'] >= 1.5 and identical and ran else 'missed'})")
    return lines or ["no goal rows yet (parts eq5 and graphs measure them)"]
