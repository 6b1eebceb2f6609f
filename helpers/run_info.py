"""Which machine and which run a profile's results come from, and one quantity every notebook measures: the CPU
target's decode step, side by side with the conditions that make it differ.

``python -m helpers.run_all`` writes ``report/generated/<profile>/00_run_info.numbers.tex`` (the report's first
page names the machine and says whether every row came from one run) and the table ``00_step_times`` from here.
A measuring run of :mod:`helpers.run_all` sets ``WORKBOOK_RUN_ID`` so that every row records its run
(:func:`helpers.results.run_metadata`).
"""
from __future__ import annotations

import re

import pandas as pd

from helpers import paths
from helpers.experiments import packages
from helpers.results import latest_ok_rows

SHORT_CONTEXT = 256  # tokens: the reference is the batch-1 minimal-runtime step at most this far into the cache
DEFAULT_TOLERANCE = 1.15  # max/min counted as agreeing where no notebook timed the step twice under equal conditions


def read_all(profile: str) -> dict[str, list[dict]]:
    """Every ok row of the profile by result file (latest row per configuration)."""
    return {path.stem: latest_ok_rows(path)
            for path in sorted(paths.results_dir(profile, create=False).glob("*.jsonl"))}


BYTES_ONLY = {"01_gpu_memory_math"}  # result files that measure bytes, not time: their thread count is immaterial


def machine_summary(rows: dict[str, list[dict]]) -> dict:
    """Devices, thread counts (of the files that time something), runs and dates over every row: what the report's
    Appendix A states."""
    flat = [r for file_rows in rows.values() for r in file_rows]
    timed = [r for name, file_rows in rows.items() if name not in BYTES_ONLY for r in file_rows]
    stamps = sorted(r["timestamp"][:10] for r in flat if r.get("timestamp"))
    runs = sorted({str(r.get("run_id")) for r in flat})
    file_runs = {name: sorted({str(r.get("run_id")) for r in file_rows}) for name, file_rows in rows.items()}
    return {
        "devices": sorted({str(r.get("device_name")) for r in flat}),
        "threads": sorted({int(r["threads"]) for r in timed if r.get("threads") is not None}),
        "runs": runs,
        "one_run": len(runs) == 1 and runs[0] != "None",
        # a notebook added later is measured in a run of its own; no file may mix runs
        "one_run_per_file": all(len(found) == 1 and found[0] != "None" for found in file_runs.values()),
        "runs_by_file": {name: found[0] if len(found) == 1 else found for name, found in file_runs.items()},
        "first_day": stamps[0] if stamps else "",
        "last_day": stamps[-1] if stamps else "",
        "rows": len(flat),
        "files": len(rows),
    }


def run_start(run_id) -> str:
    """A run id (``cpu-20261127T034439Z``) as its start, ``11-27 03:44``; other values as they are."""
    found = re.search(r"\d{4}(\d\d)(\d\d)T(\d\d)(\d\d)", str(run_id))
    return f"{found[1]}-{found[2]} {found[3]}:{found[4]}" if found else str(run_id)


def other_sources(profile: str) -> list[str]:
    """The rows of other profiles that this profile's sections may quote (a CPU report sets the GPU window's
    measurements beside its own), one label per folder: its rows, devices, torch versions and thread counts."""
    from helpers.tables import count

    root = paths.results_dir(profile, create=False).parent
    found = []
    for folder in sorted(p for p in root.glob("*/") if p.name != profile):
        by_file = read_all(folder.name)
        summary = machine_summary(by_file)  # threads of the files that time something, as for this profile
        if summary["rows"]:
            torches = ", ".join(sorted({str(r.get("torch_version")) for rows in by_file.values() for r in rows}))
            threads = summary["threads"]
            threads = count(threads[0], "CPU thread") if len(threads) == 1 else \
                f"{', '.join(map(str, threads)) or 'unrecorded'} CPU threads"
            found.append(f"results/{folder.name}/ ({count(summary['rows'], 'row')}: {', '.join(summary['devices'])}, "
                         f"torch {torches}, {threads})")
    return found


def target_step_times(rows: dict[str, list[dict]]) -> pd.DataFrame:
    """The CPU target's one-token decode step as each notebook measured it, with its conditions."""
    return pd.DataFrame(packages.target_steps(rows))


def same_conditions_spread(steps: pd.DataFrame) -> float:
    """max/min of the step times one notebook measured more than once under equal conditions (runtime, batch,
    context, run): how far two timings of the same thing drift apart on this machine; :data:`DEFAULT_TOLERANCE`
    where no notebook timed a step twice."""
    keys = ["notebook", "runtime", "batch", "context", "run"]
    groups = steps.assign(context=steps["context"].fillna(-1), run=steps["run"].map(str)).groupby(keys)["ms"]
    spreads = [group.max() / group.min() for _, group in groups if len(group) >= 2]
    return max(spreads) if spreads else DEFAULT_TOLERANCE


def explain(steps: pd.DataFrame) -> pd.DataFrame:
    """Each step time against the median batch-1 minimal-runtime step at a short context (:data:`SHORT_CONTEXT`, or
    unrecorded): the ratio, and which condition explains a ratio outside the square root of
    :func:`same_conditions_spread`, so that any two rows that agree lie within that spread of each other (runtime,
    batch, a longer context, threads, run; ``timing drift`` for the reference's own conditions timed at
    another moment); ``unexplained`` where none does. ``attrs`` holds the tolerance, the band and the range of the
    reference's rows (``base_low_ms``, ``base_high_ms``)."""
    if steps.empty:
        return steps
    steps = steps.copy()
    tolerance = same_conditions_spread(steps)
    short = steps["context"].isna() | (steps["context"] <= SHORT_CONTEXT)
    base = steps[(steps["runtime"] == "minimal") & (steps["batch"] == 1) & short]
    reference = base["ms"].median() if len(base) else steps["ms"].median()
    reference_threads = base["threads"].mode().iloc[0] if len(base) else None
    runs = steps["run"].map(str)
    reference_run = runs[base.index].mode().iloc[0] if len(base) else None
    steps["vs reference"] = steps["ms"] / reference
    band = tolerance ** 0.5  # agreeing rows lie within band of the reference, so any two within the tolerance
    reasons = []
    for index, row in steps.iterrows():
        ratio = row["vs reference"]
        if 1 / band <= ratio <= band:
            reasons.append("agrees")
        elif not row["runtime"].startswith("minimal") and ratio > 1:  # a generic runtime: more overhead, never less
            reasons.append(f"{row['runtime']} runtime")
        elif row["batch"] != 1 and ratio > 1:  # a step of B rows does B rows' work
            reasons.append(f"batch {row['batch']}")
        elif pd.notna(row["context"]) and row["context"] > SHORT_CONTEXT and ratio > 1:  # attention over more cache
            reasons.append(f"context {int(row['context'])}")
        elif reference_threads is not None and row["threads"] != reference_threads:
            reasons.append(f"{row['threads']} threads")
        elif reference_run is not None and str(row["run"]) != reference_run:
            reasons.append("another run")
        elif row["batch"] == 1 and row["runtime"].startswith("minimal") and short[index]:
            reasons.append("timing drift")  # the reference's conditions, timed minutes apart
        else:
            reasons.append("unexplained")
    steps["why"] = reasons
    steps.attrs["tolerance"], steps.attrs["band"] = tolerance, band
    steps.attrs["reference_ms"] = float(reference)
    steps.attrs["base_low_ms"], steps.attrs["base_high_ms"] = float(base["ms"].min()), float(base["ms"].max())
    return steps


def write(profile: str) -> dict:
    """Write ``00_run_info.numbers.tex`` and the table ``00_step_times``; return the summary (printed by run_all)."""
    from helpers import tables

    rows = read_all(profile)
    summary = machine_summary(rows)
    steps = explain(target_step_times(rows))
    summary["unexplained"] = int((steps["why"] == "unexplained").sum()) if len(steps) else 0
    summary["runs_text"] = ("one run" if summary["one_run"] else "runs that recorded no run id"
                            if summary["runs"] == ["None"] else f"{len(summary['runs'])} runs")  # run_all prints it too
    numbers = {"machine": ", ".join(summary["devices"]), "threads": ", ".join(map(str, summary["threads"])),
               "one_run": f"in {summary['runs_text']}",
               "first_day": summary["first_day"], "last_day": summary["last_day"], "rows": summary["rows"],
               "dates": (f"on {summary['first_day']}" if summary["first_day"] == summary["last_day"] else
                         f"from {summary['first_day']} to {summary['last_day']}"),
               "files": summary["files"]}
    others = other_sources(profile)
    if others:  # the report's first page names them (report.tex)
        numbers["others"] = "; ".join(others)
    if len(steps):
        tolerance, band = steps.attrs["tolerance"], steps.attrs["band"]
        ordered = steps.sort_values("notebook", kind="stable")  # notebook order; each notebook's rows as measured
        columns = ["notebook", "what", "ms", "runtime", "batch", "context", "threads", "vs reference", "why"]
        if ordered["run"].map(str).nunique() > 1:  # rows of several runs: name each row's run by its start
            ordered = ordered.assign(run=ordered["run"].map(run_start))
            columns.insert(-2, "run")
        tables.write_table(ordered[columns], "00_step_times", profile, float_format="{:.3g}",
                           formats={"ms": "{:.2f}", "vs reference": "{:.3f}"})
        numbers.update({"step_reference_ms": f"{steps.attrs['reference_ms']:.2f}", "step_band": f"{band:.3f}",
                        "short_context": SHORT_CONTEXT, "step_tolerance": f"{tolerance:.3f}",  # the table's caption
                        "step_low_ms": f"{steps.attrs['base_low_ms']:.2f}",
                        "step_high_ms": f"{steps.attrs['base_high_ms']:.2f}",
                        "step_spread": f"{steps.attrs['base_high_ms'] / steps.attrs['base_low_ms']:.2f}"})
    tables.write_numbers("00_run_info", profile, numbers)
    return summary
