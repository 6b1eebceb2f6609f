"""Every notebook prepares with params/gpu.yaml, and the report builds from what nbval's run of the notebooks wrote.

nbval (``make test``'s ``notebooks --nbval-lax``) executes every notebook with its defaults, which are
params/cpu.yaml (tests/test_params.py); papermill's path (``helpers.run_all.execute``) runs in the GPU-row renders
(tests/test_gpu_measure.py) and the rehearsal. Outputs go to the temporary WORKBOOK_OUTPUT_ROOT set in
conftest.py, and the report is compiled there from exactly what these runs wrote: every table and figure in it
came from this test session. That root starts with a copy of the committed results/ (conftest.py), so the
notebooks render them rather than re-measure; ``WORKBOOK_TEST_MEASURE=1`` measures afresh.
"""
import os
import shutil
import subprocess

import papermill as pm
import pytest

from helpers import paths, run_all

NOTEBOOKS = run_all.notebooks()
ROOT = paths.output_root()
SEEDED = {p.name for p in (ROOT / "results" / "cpu").glob("*.jsonl")}  # at collection, before any notebook ran


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_prepares_with_gpu_profile(notebook, tmp_path):
    params = run_all.load_params("gpu")
    declared = pm.inspect_notebook(str(notebook))
    pm.execute_notebook(str(notebook), str(tmp_path / notebook.name), prepare_only=True,
                        parameters={k: v for k, v in params.items() if k in declared}, progress_bar=False)


def test_notebook_tests_start_from_the_committed_results():
    """Regression (CI time): the notebooks measured every sweep twice per CI run; they now render the committed
    results, so each committed result file is in the test output root (unless WORKBOOK_TEST_MEASURE=1)."""
    if os.environ.get("WORKBOOK_TEST_MEASURE") == "1":
        pytest.skip("WORKBOOK_TEST_MEASURE=1: the notebooks measure afresh")
    committed = sorted(p.name for p in (paths.REPO_ROOT / "results" / "cpu").glob("*.jsonl"))
    assert committed, "no committed results/cpu"
    missing = sorted(set(committed) - SEEDED)
    assert not missing, f"not copied into the test output root before the notebooks ran: {missing}"


def test_unknown_profile_is_a_clear_error():
    with pytest.raises(FileNotFoundError, match="known profiles"):
        run_all.load_params("tpu")


@pytest.mark.notebooks
@pytest.mark.after_notebooks
def test_report_compiles_from_this_run(request):
    """Runs after nbval has run every notebook (conftest.py orders it last), on what their kernels generated."""
    ran = {item.nodeid.split("::")[0] for item in request.session.items if ".ipynb" in item.nodeid}
    if len(ran) < len(NOTEBOOKS):
        pytest.skip("the notebooks did not run in this session: run `make test` (tests and notebooks --nbval-lax)")
    if shutil.which("latexmk") is None:
        if os.environ.get("CI"):
            pytest.fail("latexmk is missing on CI: .ci/run must install TeX Live")
        pytest.skip(f"TeX Live not installed ({run_all.texlive_install_command()})")
    pdf = run_all.build_report("cpu", ROOT / "report")  # it copies the sources beside the tables this run wrote
    assert pdf is not None and pdf.stat().st_size > 10_000
    text = subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True).stdout if shutil.which("pdftotext") else ""
    if text:
        assert "??" not in text and "[fwdParamsB?]" not in text
