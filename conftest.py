"""Shared by tests/ and nbval's notebook items: keep every run away from the committed outputs.

Executing a notebook writes results, figures and report tables; under pytest they go to a temporary
WORKBOOK_OUTPUT_ROOT (kernels inherit the environment), so the committed results/ never change in a test.

The temporary root starts with a copy of the committed results/: the notebook tests then render those results
(every table, figure, generated number and claim check is recomputed from them) instead of re-measuring every
sweep, which would double the test time. The measuring code is covered by the unit tests. To measure every
notebook afresh under test, as a clean checkout without results/ would: ``WORKBOOK_TEST_MEASURE=1 make test``.
"""
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

import pytest

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


# Run on one pytest-xdist worker, in collection order: the notebooks (nbval, cell after cell), the tests that render
# them in JupyterLab into the same output root, then the report build over what they all wrote.
NOTEBOOK_WORKER = ("notebooks/", "tests/test_browser.py", "tests/test_notebooks.py::test_report_compiles_from_this_run")
# The longest test files after those (minutes each), started next so that no worker is left with one at the end.
LONGEST = ("tests/test_rehearse.py", "tests/test_gpu_measure.py")


def _start_rank(nodeid: str) -> int:
    path = nodeid.split("::", 1)[0]
    return 0 if nodeid.startswith(NOTEBOOK_WORKER) else 1 + LONGEST.index(path) if path in LONGEST else 1 + len(LONGEST)


def pytest_collection_modifyitems(config, items):
    """The longest work first (the notebooks' share, then ``LONGEST``), each test file otherwise in its order;
    ``@pytest.mark.after_notebooks`` puts a test behind the notebooks."""
    order = {id(item): i for i, item in enumerate(items)}
    items.sort(key=lambda item: (_start_rank(item.nodeid), item.get_closest_marker("after_notebooks") is not None,
                                 order[id(item)]))


if importlib.util.find_spec("xdist") is not None:
    def pytest_xdist_make_scheduler(config, log):
        """``make test`` runs on several workers: each test file stays on one worker (its module fixtures are built
        once), ``NOTEBOOK_WORKER`` shares one, and the work starts in collection order (longest first). (xdist's
        own ``--dist loadgroup`` renames node ids, which pytest 9 no longer allows.)"""
        from xdist.scheduler import LoadScopeScheduling

        class Scheduling(LoadScopeScheduling):
            def _split_scope(self, nodeid: str) -> str:
                return "notebooks" if nodeid.startswith(NOTEBOOK_WORKER) else nodeid.split("::", 1)[0]

        config.option.loadscopereorder = False  # (it orders by number of tests, not by their length)
        return Scheduling(config, log)
