"""Notebook 05 (continuous batching): its code is the ``helpers.batching`` package; here what the report's
run-info page reads from its rows.
"""
from __future__ import annotations

from helpers.experiments.packages import TARGET, step_record


def target_steps(rows: dict) -> list[dict]:
    """The engine's decode step (minimal runtime, ragged cache) after a 64-token prompt, by batch (run-info page)."""
    return [step_record("05", f"step at batch {point['batch']}", point["step_s"], "minimal, ragged batch",
                        point["batch"], row.get("prompt_len", 64), row)
            for row in rows.get("05_continuous_batching", [])
            if row.get("kind") == "step_time" and row.get("model") == TARGET for point in row["rows"]]
