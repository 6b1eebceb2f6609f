"""What a notebook package ``helpers.experiments.nbNN`` may declare, and how it is found: ``GPU_PARTS``, the GPU
window's measurements of its rows (:class:`Part`), and ``target_steps(rows)``, its timings of the CPU target's decode
step as :func:`step_record` rows for the run-info page (:mod:`helpers.run_info`)."""
from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

TARGET = "cpu-pair/target"  # the CPU target, whose step every speculative-decoding notebook times
SAME_SHAPE = ("cpu-pair/target", "cpu-pair/target-long")  # target-long: the target trained further, the same shape


def notebook_packages():
    """The notebook packages (``helpers/experiments/nbNN/``), imported, in notebook order."""
    for init in sorted(Path(__file__).parent.glob("nb[0-9][0-9]/__init__.py")):
        yield importlib.import_module(f"helpers.experiments.{init.parent.name}")


@dataclass(frozen=True)
class Part:
    """``measure(params, store, settings)`` measures the rows ``files`` lack (``store(name)``: one file's budgeted
    store; ``settings``: the window's); ``report(profile)`` writes the part's report tables, returns its goal lines."""
    name: str
    files: tuple[str, ...]
    measure: Callable
    report: Callable[[str], list[str]] | None = None


def notebook_part(name: str, files: tuple[str, ...], measure: Callable) -> Part:
    """The part of a notebook whose own ``measure(params, store, progress=)`` writes its rows (no progress bar)."""
    return Part(name, tuple(files), lambda params, store, settings: measure(params, store, progress=False))


def declared_parts() -> dict[str, Part]:
    """Every GPU part the notebook packages declare, by name."""
    parts: dict[str, Part] = {}
    for package in notebook_packages():
        for part in getattr(package, "GPU_PARTS", ()):
            if part.name in parts:
                raise ValueError(f"GPU part {part.name!r} is declared twice (the second in {package.__name__})")
            parts[part.name] = part
    return parts


def step_record(notebook, what, seconds, runtime, batch, context, row) -> dict:
    """One row of the run-info page's table: a notebook's timing of the CPU target's step and its conditions."""
    return {"notebook": notebook, "what": what, "ms": 1e3 * float(seconds), "runtime": runtime, "batch": int(batch),
            "context": None if context is None else int(context), "threads": row.get("threads"),
            "run": row.get("run_id")}


def target_steps(rows: dict[str, list[dict]]) -> list[dict]:
    """Every notebook package's timings of the CPU target's decode step (its ``target_steps(rows)``)."""
    return [step for package in notebook_packages() if hasattr(package, "target_steps")
            for step in package.target_steps(rows)]
