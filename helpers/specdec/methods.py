"""Every decoding method by name: its label and how to run it, so that a comparison (notebooks 10 and 13,
``python -m helpers.bench tree`` and ``heads``) keeps no list of its own.

A configuration of a method is a *spec*, a small dict a result row can carry (``{"method": "linear", "gamma": 5}``).
The module that implements a method registers it below its generate function (``register(Method(...))``), so
importing :mod:`helpers.specdec` registers them all; this module imports none of them.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

__all__ = ["Method", "extra_specs", "get", "label", "names", "register", "run", "unregister"]


@dataclass(frozen=True)
class Method:
    """One decoding method.

    ``name``: the specs' ``"method"``; ``label(spec)``: a short ASCII name for tables, plots and the report;
    ``run(spec, target, drafter, input_ids, max_new_tokens, **options)``: one generation, a
    :class:`~helpers.specdec.core.GenerationResult` (``options``: ``eos_token_id``, ``time_phases``, ...);
    ``drafter``: which of a comparison's drafters it is handed (``"draft"``: a draft model; ``"medusa"``,
    ``"eagle"``: the target's own heads or feature draft; None: it drafts from the context or not at all);
    ``family``: the drafter's name in tables and legends; ``defaults``: the specs a comparison runs for it when its
    own parameters do not configure it (so a new method joins every comparison that holds its drafter);
    ``order``: its place in a summary table (lower first)."""

    name: str
    label: Callable[[dict], str]
    run: Callable
    drafter: str | None = None
    family: str = ""
    defaults: tuple = ()
    order: int = 100


_METHODS: dict[str, Method] = {}


def register(method: Method) -> Method:
    """Add ``method`` (replacing one of the same name: a module reloaded)."""
    _METHODS[method.name] = method
    return method


def unregister(name: str) -> None:
    """Remove the method ``name`` (a test's own method, afterwards)."""
    _METHODS.pop(name, None)


def get(name: str) -> Method:
    if name not in _METHODS:
        raise ValueError(f"unknown method {name!r}; choose one of {names()}")
    return _METHODS[name]


def names() -> tuple[str, ...]:
    """Every registered method, in summary-table order."""
    return tuple(sorted(_METHODS, key=lambda name: _METHODS[name].order))


def label(spec: dict) -> str:
    """The spec's short name: 'linear g5', 'dynamic d6 k3 n12', 'lookup n3 fixed 8', ..."""
    return get(spec["method"]).label(spec)


def run(spec: dict, target, drafters, input_ids, max_new_tokens: int, **options):
    """One generation of ``spec``. ``drafters``: a draft model, or a dict of them by :attr:`Method.drafter`
    (``{"draft": model, "medusa": MedusaHeads, "eagle": FeatureDraft}``)."""
    method = get(spec["method"])
    drafters = drafters if isinstance(drafters, dict) else {"draft": drafters}
    drafter = None if method.drafter is None else drafters[method.drafter]
    return method.run(spec, target, drafter, input_ids, max_new_tokens, **options)


def extra_specs(configured: Iterable[str], drafters: Iterable[str]) -> list[dict]:
    """The default specs of every method a comparison's parameters do not configure (``configured``: the names it
    builds specs for) and can run (its drafter is among ``drafters``, or it needs none)."""
    configured, drafters = set(configured), set(drafters)
    return [dict(spec) for name in names() if name not in configured
            for spec in get(name).defaults if get(name).drafter is None or get(name).drafter in drafters]
