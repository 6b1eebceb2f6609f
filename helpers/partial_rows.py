"""What a pending notebook has measured so far, as a table the report prints under its pending box.

A GPU window measures in priority order under a deadline, so a notebook's rows can arrive over several windows; under
results-only rendering (``WORKBOOK_RESULTS_ONLY=1``) the notebook stops at its first missing row and its section of
the report is a pending box. The rows that did come back still belong in the report: :func:`write_partial` sets them
out as one table per pending notebook (``<notebook>_partial``), the columns that vary between rows next to the
headline measurements, with the settings the rows share in the caption (an earlier protocol's rows say so there).
The window's decode-cost rows have tables of their own (:func:`helpers.experiments.gpu_costs.write_report_tables`)
and are left out here.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from helpers import paths, tables
from helpers.results import read_rows

# measured columns worth a reader's eye, in this order: a file shows those its rows hold (the means only where the
# rows have no median). One statistic per table: a generation row's ``ms_per_step`` is its MEAN time over the new
# tokens, so beside the median time the table shows ``ms_per_step_median`` instead, derived from the same median
# (:func:`derived_fields`), and :func:`check_consistent` recomputes the columns from each other.
MEASURES = ["time_s_median", "time_ms_std", "ms_per_step_median", "throughput_tok_s_median", "speedup", "alpha", "c",
            "tokens_per_s", "peak_memory_gb"]
FALLBACK_MEASURES = ["time_ms_mean", "time_s_mean"]
SHOWN_ELSEWHERE = {"09_handout_costs", "09_compiled_decode", "09_step_profile"}  # gpu_costs' own tables
HIDDEN_SETTINGS = {"device"}  # every row of a profile shares it, and the report's first page names it


def partial_name(notebook: str) -> str:
    return f"{notebook}_partial"


def notebook_rows(notebook: str, folder: Path) -> dict[str, list[dict]]:
    """The rows in ``folder`` of every result file of ``notebook`` (``NN_*.jsonl`` for notebook ``NN_...``), by file,
    without the files the GPU cost tables show."""
    number = notebook.split("_")[0]
    found = {}
    for path in sorted(folder.glob(f"{number}_*.jsonl")):
        if path.stem in SHOWN_ELSEWHERE:
            continue
        rows = read_rows(path)  # every row, OOM and not-run ones too; a line a crash cut short is skipped
        if rows:
            found[path.stem] = rows
    return found


def derived_fields(row: dict, config: dict) -> dict:
    """A generation row (one that stores ``ms_per_step``, the MEAN time over its new tokens) with the per-step time of
    its MEDIAN batch (``ms_per_step_median`` = 1000 x ``time_s_median`` / new tokens), which the table shows instead;
    other rows (a verify forward's ``new_tokens`` are one step's width) unchanged."""
    new_tokens = row.get("new_tokens", config.get("new_tokens"))
    if "ms_per_step" in row and isinstance(row.get("time_s_median"), (int, float)) and new_tokens:  # a generation row
        return {**row, "ms_per_step_median": 1000 * row["time_s_median"] / new_tokens}
    return row


def check_consistent(table: pd.DataFrame, rows: list[dict], configs: list[dict], tol: float = 1e-9) -> None:
    """Recompute the table's medians from each other: ms per step = 1000 x median time / new tokens, throughput =
    batch x new tokens / median time (a ValueError names the first line that disagrees: the columns would mix
    statistics)."""
    for i, (row, config) in enumerate(zip(rows, configs)):
        t, new = row.get("time_s_median"), row.get("new_tokens", config.get("new_tokens"))
        if "ms_per_step" not in row or not isinstance(t, (int, float)) or not new or t <= 0:
            continue
        line = table.iloc[i]
        checks = {"ms_per_step_median": 1000 * t / new}
        batch = row.get("batch_size", config.get("batch_size"))
        if batch:
            checks["throughput_tok_s_median"] = batch * new / t
        for column, expected in checks.items():
            shown = line.get(column, "")
            if shown != "" and abs(float(shown) - expected) > tol * max(1.0, abs(expected)):
                raise ValueError(f"line {i}: {column} {shown} is not {expected:.6g}, recomputed from the median time")


def statistic_note(table: pd.DataFrame) -> str:
    """The caption's name of the statistic the table's time columns share (empty where it shows no median)."""
    if "time_s_median" not in table:
        return ""
    parts = ["time"] + [name for column, name in (("ms_per_step_median", "ms per step"),
                                                  ("throughput_tok_s_median", "throughput")) if column in table]
    return (f"{', '.join(parts)}: of the median batch" + (" (ms per step = median time / new tokens)"
                                                          if "ms_per_step_median" in table else ""))


def partial_table(rows: list[dict]) -> tuple[pd.DataFrame, dict]:
    """``(table, shared)``: one line per row, in the order measured, with the configuration values that differ
    between rows (blank where a row's configuration lacks the key) and the headline measurements; and the
    configuration values every row has alike (``config_key`` is each row's configuration)."""
    configs = [json.loads(row["config_key"]) for row in rows]
    rows = [derived_fields(row, config) for row, config in zip(rows, configs)]
    keys = sorted({key for config in configs for key in config} - HIDDEN_SETTINGS)
    seen = {key: {json.dumps(config.get(key, "<absent>"), sort_keys=True) for config in configs} for key in keys}
    shared = {key: configs[0][key] for key in keys if len(seen[key]) == 1}
    varying = [key for key in keys if key not in shared
               and all(not isinstance(config.get(key), (list, dict)) for config in configs)]
    measured = [m for m in MEASURES if any(m in row for row in rows)]
    measured = measured or [m for m in FALLBACK_MEASURES if any(m in row for row in rows)]
    table = pd.DataFrame([{**{key: config.get(key, "") for key in varying}, "status": row.get("status", ""),
                           **{m: row.get(m, "") for m in measured}} for config, row in zip(configs, rows)])
    check_consistent(table, rows, configs)
    return table, shared


def _settings_text(shared: dict) -> str:
    return "; ".join(f"{key} {', '.join(map(str, value)) if isinstance(value, list) else value}"
                     for key, value in shared.items())


def missing_config(message: str) -> dict | None:
    """The configuration a results-only render stopped at, from its :class:`helpers.results.MissingResultError`
    message ("... has no row for {config} ..."), or None."""
    found = re.search(r"has no row for (\{.*?\}), and ", message)
    return json.loads(found.group(1)) if found else None


def write_partial(notebook: str, profile: str, missing: dict | None = None) -> Path | None:
    """``report/generated/<profile>/<notebook>_partial.tex``: what the pending ``notebook`` has measured so far, one
    block per result file, and ``missing``, the first configuration it still lacks, in the caption (an earlier
    protocol's rows show there as settings that differ). None, and any earlier table removed, where it has no
    rows."""
    clear_partial(notebook, profile)
    found = notebook_rows(notebook, paths.results_dir(profile, create=False))
    if not found:
        return None
    frames, captions = [], []
    for name, rows in found.items():
        table, shared = partial_table(rows)
        frames.append(table.assign(file=name) if len(found) > 1 else table)
        note = statistic_note(table)
        captions.append(f"{name}: {len(rows)} rows" + (f" ({note})" if note else "")
                        + f"; shared settings: {_settings_text(shared)}")
    frame = pd.concat(frames, ignore_index=True).fillna("")  # files differ in their columns
    if missing:
        captions.append("the first row still to measure: "
                        + _settings_text({k: v for k, v in missing.items() if k not in HIDDEN_SETTINGS}))
    caption = (f"Measured so far for notebook {notebook} on this profile (it renders once all its rows are in): "
               + " | ".join(captions))
    return tables.write_table(frame, partial_name(notebook), profile, caption=caption, float_format="{:.3g}")


def clear_partial(notebook: str, profile: str) -> None:
    """Remove the table of a notebook that now renders in full (or is about to be written anew)."""
    for suffix in ("tex", "caption.tex"):
        (paths.generated_dir(profile) / f"{partial_name(notebook)}.{suffix}").unlink(missing_ok=True)
