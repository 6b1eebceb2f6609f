"""The one switch of the environment that changes what a run may do: ``WORKBOOK_RESULTS_ONLY``.

Its own module, below both readers: :mod:`helpers.results` (a missing row is an error, never a measurement) and
:mod:`helpers.hardware` (a CUDA profile on a machine without a GPU builds models on the meta device), which
imports nothing of ``helpers.results``.
"""
from __future__ import annotations

import os

RESULTS_ONLY_ENV = "WORKBOOK_RESULTS_ONLY"  # set to 1: render committed rows, never measure (e.g. GPU rows on a CPU)


def results_only() -> bool:
    """True when ``WORKBOOK_RESULTS_ONLY`` is set (not empty, not 0): a missing row is an error, not a measurement."""
    return os.environ.get(RESULTS_ONLY_ENV, "").strip() not in ("", "0")
