"""What the experiment-module tests share: a notebook's CPU parameters, and its ``measure`` run over the committed CPU
rows with ``WORKBOOK_RESULTS_ONLY`` set, so that a missing row raises instead of being measured (importable from any
test module, like tiny_models)."""
from __future__ import annotations

import pytest

from helpers.results import ResultStore
from helpers.run_all import load_params


def cpu_params(module) -> dict:
    """The CPU profile's values of the parameters ``module`` (an experiment module) reads."""
    found = load_params("cpu")
    return {name: found[name] for name in module.PARAMETERS}


def measure_committed(module, params: dict, **options):
    """``module.measure(params, store, **options)`` over results/cpu/, measuring nothing."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WORKBOOK_RESULTS_ONLY", "1")
        return module.measure(params, lambda name: ResultStore("cpu", name), **options)
