"""What every experiment module shares: its parameters from a notebook's namespace, the optional budget of the GPU
window's result stores, a cache of loaded models, and a configuration in one line.

``measure(params, store)`` takes ``store`` as a factory, ``store(result_name) -> ResultStore``; only the GPU window's
(:mod:`helpers.gpu_measure`) has a ``budget``, so :func:`check_budget` and :func:`took` do nothing in a notebook.
"""
from __future__ import annotations

import time
from contextlib import contextmanager

import torch

from helpers.results import free_memory

# (target, draft) of the handout's Table 1: notebook 07 names those it did not measure, notebook 09 and the GPU window
# measure their cost terms
HANDOUT_PAIRS = (("Qwen/Qwen3-8B", "Qwen/Qwen3-1.7B"), ("Qwen/Qwen3-8B", "Qwen/Qwen3-0.6B"),
                 ("meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.2-1B"))


class BudgetExhausted(Exception):
    """Raised before a measurement that would not finish inside the GPU window's budget (:mod:`helpers.budget`); a
    part's measuring code lets it through (``fatal=``) where it records any other failure in a row."""


def notebook_params(namespace: dict, prefix: str) -> dict:
    """A notebook's parameters from its ``globals()``: ``profile``, ``device`` and every name starting with ``prefix``,
    the keys :mod:`helpers.gpu_measure` reads from a profile's file."""
    return {k: v for k, v in namespace.items()
            if k in ("profile", "device") or (k.startswith(prefix) and not callable(v))}


def describe_config(config: dict) -> str:
    """A configuration in one short line (its first eight scalar keys) for progress messages."""
    keep = {k: v for k, v in config.items() if k not in ("prompt_ids",) and not isinstance(v, (list, dict))}
    return ", ".join(f"{k}={v}" for k, v in list(keep.items())[:8])


def check_budget(store, what: str) -> None:
    """Stop before ``what`` when the store's budget (the GPU window's) cannot fit it; no budget, no check."""
    budget = getattr(store, "budget", None)
    if budget is not None:
        budget.check(what)


@contextmanager
def took(store):
    """Tell the store's budget how long the block took (it reserves twice the longest step for the next)."""
    start = time.monotonic()
    yield
    budget = getattr(store, "budget", None)
    if budget is not None:
        budget.took(time.monotonic() - start)


def seed_and_threads(seed: int, device: str, threads: int) -> None:
    """``torch.manual_seed(seed)`` and, on a CPU with ``threads > 0``, that many torch threads."""
    torch.manual_seed(seed)
    if device == "cpu" and threads > 0:
        torch.set_num_threads(threads)


class LoadedModels:
    """Models loaded once and kept while needed: ``models(name) -> (model, tokenizer)``, the budget of ``store``
    (optional) checked before a load."""

    def __init__(self, device: str, dtype: torch.dtype, store=None):
        from helpers.models import load_model

        self._load, self.device, self.dtype, self.store = load_model, device, dtype, store
        self.loaded: dict[str, tuple] = {}

    def __call__(self, name: str):
        if name not in self.loaded:
            check_budget(self.store, f"loading {name}")
            self.loaded[name] = self._load(name, device=self.device, dtype=self.dtype)
        return self.loaded[name]

    def keep_only(self, names) -> None:
        """Drop every model not in ``names`` (GPU memory for the next pair)."""
        for name in [n for n in self.loaded if n not in names]:
            del self.loaded[name]
        free_memory()

    def clear(self) -> None:
        self.keep_only(())


def tolerate_graph_failure(mode: str, config: dict, measure, fatal: tuple = ()) -> None:
    """Run ``measure()``; a graphs or compiled measurement that fails (a capture error, no C compiler for triton, a
    dynamo limit) is reported and skipped, so the eager rows and other parts still come back. Eager failures and
    ``fatal`` (the window's budget) stay errors."""
    try:
        measure()
    except fatal:
        raise
    except Exception as error:  # noqa: BLE001 - reported, and only for graphs/compiled measurements
        if mode == "eager":
            raise
        print(f"  {mode.upper()} MEASUREMENT FAILED, skipped: {describe_config(config)}: {type(error).__name__}: "
              f"{error}"[:2000], flush=True)
        free_memory()
