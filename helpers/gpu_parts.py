"""A GPU measurement is one declaration: :class:`Part` in the package of the notebook it feeds.

Each notebook package ``helpers.experiments.nbNN`` that the GPU window measures for lists its parts in
``GPU_PARTS``; :func:`declared` collects them, and :mod:`helpers.gpu_measure` runs them in its window order
(``gpu_measure.PARTS``). A part names the result files it writes (they come back from the GPU machine) and how to
measure its missing rows; ``report`` (optional) writes the report's tables of the part's rows and returns the goal
lines the window prints. Adding a measurement: a ``Part`` in the notebook's package and its name in
``gpu_measure.PARTS`` (see docs/CONTRIBUTING.md, "Add a GPU measurement").
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

NOTEBOOK_PACKAGES = tuple(f"nb{n:02d}" for n in range(1, 14))  # the packages that may declare GPU_PARTS


@dataclass(frozen=True)
class Part:
    """``measure(params, store, settings)`` measures the rows ``files`` still lack (``store(name)`` gives the
    budgeted result store of one file; ``settings`` is the window's :class:`helpers.experiments.gpu_costs.WindowSettings`)."""
    name: str
    files: tuple[str, ...]
    measure: Callable
    report: Callable[[str], list[str]] | None = None


def notebook_part(name: str, files: tuple[str, ...], measure: Callable) -> Part:
    """The part of a notebook whose own ``measure(params, store, progress=)`` writes its rows (configurations
    declared once, there): the window calls it without a progress bar."""
    return Part(name, tuple(files), lambda params, store, settings: measure(params, store, progress=False))


def declared() -> dict[str, Part]:
    """Every part the notebook packages declare, by name (imported when asked: a package may import torch)."""
    parts: dict[str, Part] = {}
    for package in NOTEBOOK_PACKAGES:
        try:
            module = importlib.import_module(f"helpers.experiments.{package}")
        except ModuleNotFoundError as missing:
            if missing.name != f"helpers.experiments.{package}":
                raise
            continue
        for part in getattr(module, "GPU_PARTS", ()):
            if part.name in parts:
                raise ValueError(f"GPU part {part.name!r} is declared twice ({package} and another package)")
            parts[part.name] = part
    return parts
