"""Notebook 04 (the KV cache implemented): its code is the ``helpers.kv_cache`` package; here what the
report's run-info page reads from its rows.
"""
from __future__ import annotations

from helpers.experiments.packages import TARGET, step_record


def target_steps(rows: dict) -> list[dict]:
    """The CPU target's cached step at position 64 (the run-info page's table, :mod:`helpers.run_info`)."""
    return [step_record("04", "cached step at position 64", seconds, "minimal", 1, 64, row)
            for row in rows.get("04_kv_cache_implementation", [])
            if row.get("kind") == "step_cost_vs_position" and row.get("model") == TARGET
            for position, seconds in zip(row["cached_positions"], row["cached_s"]) if position == 64]
