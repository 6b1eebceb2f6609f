"""Shared by tests/ and nbval's notebook items: keep every run away from the committed outputs.

Executing a notebook writes results, figures and report tables; under pytest they go to a temporary
WORKBOOK_OUTPUT_ROOT (kernels inherit the environment), so the committed results/ never change in a test.

The temporary root starts with a copy of the committed results/: the notebook tests then render those results
(every table, figure, generated number and claim check is recomputed from them) instead of re-measuring every
sweep, which would double the test time. The measuring code is covered by the unit tests. To measure every
notebook afresh under test, as a clean checkout without results/ would: ``WORKBOOK_TEST_MEASURE=1 make test``.
"""
import os
import shutil
import tempfile
from pathlib import Path

if "WORKBOOK_OUTPUT_ROOT" not in os.environ:
    root = Path(tempfile.mkdtemp(prefix="workbook-test-"))
    committed = Path(__file__).resolve().parent / "results"
    if os.environ.get("WORKBOOK_TEST_MEASURE") != "1" and committed.is_dir():
        shutil.copytree(committed, root / "results")
    os.environ["WORKBOOK_OUTPUT_ROOT"] = str(root)
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

try:  # nbval's kernels over local IPC sockets, as helpers.run_all's (no "running over TCP without encryption")
    import nbval.kernel

    from helpers.run_all import kernel_manager_class

    nbval.kernel.KernelManager = kernel_manager_class(blocking=True)
except ImportError:  # nbval is pinned; without it there are no notebook items to start kernels for
    pass
