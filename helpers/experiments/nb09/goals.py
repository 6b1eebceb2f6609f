"""The GPU issues' goals judged on one window's rows: each a row of a label, the measured value, its bound and whether
it is met (:func:`goal`), printed one line each (:func:`goal_line`) by the window's summary, ``--unpack`` and notebook
09; after them the profiled steps' diagnostics. The rows are read once and each table is built once."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from helpers.experiments import gpu_costs
from helpers.experiments.nb09 import decode_modes, step_profile

GOAL_SHARE = 0.70  # of the HBM roofline, for the 8B targets compiled
GOAL_PEER_RATIO = 1.2  # faster than transformers' compiled static-cache decoding
GOAL_C = 0.2  # T_D/T_T of the two pairs with a 1B-class draft
GOAL_BREAK_EVEN = 0.35  # the lowest alpha at which a handout pair pays at its best gamma
GOAL_COMPILE_S = 90.0
GOAL_GRAPHS_C = 0.15  # the Qwen3-8B pairs' c with CUDA graphs
GOAL_GRAPHS_SHARE = 0.7  # the Qwen3-8B step with graphs, of its HBM roofline (beside the 0.6B draft)
GOAL_E2E_SPEEDUP = 1.5  # the CPU pair end to end on the GPU, identical to AR
TARGETS_8B = ("Qwen/Qwen3-8B", "meta-llama/Llama-3.1-8B")
SMALL_DRAFT_PAIRS = (("Qwen/Qwen3-8B", "Qwen/Qwen3-0.6B"), ("meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.2-1B"))
NONE_YET = "no goal rows yet (parts eq5 and graphs measure them)"


def goal(name: str, value: float, op: str, bound: float, ran: bool = True) -> dict:
    """One goal as a row: its label, the measured value, the bound (``op`` ``>=`` or ``<=``) and whether it is met
    (never where ``ran`` is False: graphs claimed but not replayed, or an output not identical; nor for a NaN)."""
    met = value >= bound if op == ">=" else value <= bound
    return {"goal": name, "value": float(value), "bound": f"{op} {bound:g}", "met": bool(ran and met)}


def goal_line(row: dict) -> str:
    """A goal row (:func:`goal`) as one line: ``label: value (goal <bound>: met|missed)``."""
    return f"{row['goal']}: {row['value']:.3g} (goal {row['bound']}: {'met' if row['met'] else 'missed'})"


def decode_goals(decode: pd.DataFrame, peer: pd.DataFrame, terms: pd.DataFrame) -> list[dict]:
    """The model-file issue's goals from the ``decode`` part's table (:func:`~decode_modes.decode_table`), its ratios
    to transformers' (:func:`~decode_modes.speed_against_peer`) and the eq5 pairs' terms
    (:func:`~decode_modes.pair_terms`): each 8B target's compiled step as a share of its HBM roofline and its first
    call, transformers' compiled static cache over our compiled step, each pair's compiled c (1B-class drafts) and
    break-even alpha."""
    rows = []
    for target in TARGETS_8B:
        mine = decode[(decode["model"] == target) & (decode["mode"] == "compiled")] if len(decode) else decode
        if len(mine):
            row = mine.iloc[-1]
            rows += [goal(f"{target} compiled step, roofline share", row["roofline share"], ">=", GOAL_SHARE,
                          (row["graph replays"] or 0) > 0),
                     goal(f"{target} compiled step, first call s", row["compile s"], "<=", GOAL_COMPILE_S)]
    for _, row in peer.iterrows():
        rows.append(goal(f"{row['model']}: hf-static-compiled / compiled", row["ratio"], ">=", GOAL_PEER_RATIO))
    for _, row in terms[terms["decode"] == "compiled"].iterrows() if len(terms) else []:
        pair = f"{row['target']} / {row['draft']} compiled"
        if (row["target"], row["draft"]) in SMALL_DRAFT_PAIRS:
            rows.append(goal(f"{pair}: c", row["c"], "<=", GOAL_C))
        rows.append(goal(f"{pair}: break-even alpha (gamma {row['at gamma']})", row["break-even alpha"], "<=",
                         GOAL_BREAK_EVEN))
    return rows


def graph_goals(costs: pd.DataFrame, e2e: pd.DataFrame) -> list[dict]:
    """The graphs goals from :func:`~gpu_costs.cost_table` and :func:`~gpu_costs.e2e_table`: the Qwen3-8B pairs' c
    with graphs (and the 8B step's roofline share beside the 0.6B draft), the CPU pair's best speedup end to end."""
    rows = []
    for _, row in costs[costs["decode"] == "graphs"].iterrows() if len(costs) else []:
        if "Qwen3-8B" not in row["target"]:
            continue
        eager = costs[(costs["decode"] == "eager") & (costs["draft"] == row["draft"])
                      & (costs["target"] == row["target"])]
        ran, eager_c = (row["graph replays"] or 0) > 0, f"{eager['c'].iloc[0]:.3f}" if len(eager) else "not measured"
        rows.append(goal(f"{row['target']} / {row['draft']} graphs: c (eager {eager_c}; "
                         f"{int(row['graph replays'] or 0)} replays)", row["c"], "<=", GOAL_GRAPHS_C, ran))
        if row["draft"].endswith("0.6B") and row["roofline share"] == row["roofline share"] and row["roofline share"]:
            rows.append(goal(f"{row['target']} step with graphs: roofline share", row["roofline share"], ">=",
                             GOAL_GRAPHS_SHARE, ran))
    if len(e2e):
        best = e2e.loc[e2e["speedup"].idxmax()]
        identical = bool(e2e["identical_to_ar"].all())
        ran = bool((e2e["graph_replays"].fillna(0) > 0).all() or (e2e["pair_replays"].fillna(0) > 0).all())
        rows.append(goal(f"CPU pair end to end ({best['decode']}): best speedup, identical to AR: {identical}",
                         best["speedup"], ">=", GOAL_E2E_SPEEDUP, identical and ran))
    return rows


def goal_lines(folder: Path) -> list[str]:
    """Every goal the rows in ``folder`` measure, one line each (or :data:`NONE_YET`), then a diagnostic line per
    profiled step (:func:`~step_profile.diagnostic_lines`). No Eq. 5 term comes from a timing artefact."""
    rows = {name: gpu_costs.read_rows(folder, name) for name in
            (decode_modes.DECODE_STEPS, gpu_costs.COSTS, gpu_costs.GRAPHS, step_profile.STEP_PROFILE)}
    costs, e2e = gpu_costs.cost_table(rows[gpu_costs.COSTS]), gpu_costs.e2e_table(rows[gpu_costs.GRAPHS])
    trusted = [gpu_costs.without_artefacts(row) for row in rows[gpu_costs.COSTS]]
    decode = decode_modes.decode_table(rows[decode_modes.DECODE_STEPS]) if rows[decode_modes.DECODE_STEPS] \
        else pd.DataFrame()
    peer = decode_modes.speed_against_peer(decode) if len(decode) else pd.DataFrame()
    terms = decode_modes.pair_terms(trusted) if trusted else pd.DataFrame()
    diagnostics = step_profile.diagnostic_lines(rows[step_profile.STEP_PROFILE])
    goals = decode_goals(decode, peer, terms) + graph_goals(costs, e2e)
    return ([goal_line(g) for g in goals] or [NONE_YET]) + diagnostics
