import os
import re
import shutil
import subprocess

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from helpers import paths, run_all


def test_failed_notebook_names_cell_and_error(tmp_path):
    nb = new_notebook(cells=[new_code_cell("x = 1"), new_code_cell("raise ValueError('gamma must be >= 1')")],
                      metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    path = tmp_path / "99_broken.ipynb"
    nbformat.write(nb, path)
    with pytest.raises(SystemExit) as info:
        run_all.execute(path, {"profile": "cpu"}, tmp_path / "out", progress=False)
    message = str(info.value)
    assert "99_broken.ipynb" in message and "ValueError" in message and "gamma must be >= 1" in message


def test_a_cell_past_the_cell_timeout_stops_with_a_named_time_out(tmp_path, monkeypatch):
    nb = new_notebook(cells=[new_code_cell("x = 1"), new_code_cell("import time; time.sleep(60)")],
                      metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    path = tmp_path / "99_hangs.ipynb"
    nbformat.write(nb, path)
    monkeypatch.setenv("WORKBOOK_CELL_TIMEOUT", "2")
    with pytest.raises(run_all.CellTimedOut, match=r"99_hangs.ipynb.*WORKBOOK_CELL_TIMEOUT=2 s"):
        run_all.execute(path, {"profile": "cpu"}, tmp_path / "out", progress=False)


@pytest.mark.parametrize("value", ["soon", "0", "-5", "1.5"])
def test_a_cell_timeout_that_is_not_whole_seconds_is_refused(value, monkeypatch):
    monkeypatch.setenv("WORKBOOK_CELL_TIMEOUT", value)
    with pytest.raises(ValueError, match="whole seconds"):
        run_all.cell_timeout()


def test_no_cell_timeout_unless_one_is_set(monkeypatch):
    monkeypatch.delenv("WORKBOOK_CELL_TIMEOUT", raising=False)
    assert run_all.cell_timeout() is None
    monkeypatch.setenv("WORKBOOK_CELL_TIMEOUT", "300")
    assert run_all.cell_timeout() == 300


def test_a_missing_row_under_results_only_is_pending_not_a_failure(tmp_path, monkeypatch):
    cells = [new_code_cell("from helpers.results import MissingResultError"),
             new_code_cell("raise MissingResultError('results/gpu-h100/07.jsonl has no row for gamma 3')")]
    path = tmp_path / "98_waiting.ipynb"
    nbformat.write(new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                                      "language": "python"}}), path)
    with pytest.raises(SystemExit, match="MissingResultError"):  # measuring is allowed: a missing row is a bug
        run_all.execute(path, {"profile": "cpu"}, tmp_path / "out", progress=False)
    monkeypatch.setenv("WORKBOOK_RESULTS_ONLY", "1")
    with pytest.raises(run_all.Pending, match="98_waiting.ipynb: results/gpu-h100/07.jsonl has no row"):
        run_all.execute(path, {"profile": "cpu"}, tmp_path / "out", progress=False)


def _stop_notebook_07(monkeypatch, error) -> list[str]:
    """Replace run_all.execute: notebook 07 raises ``error(its name)``, every other one "runs" and is listed (by its
    number) in the list returned."""
    ran = []

    def execute(notebook, params, out_dir, progress=True):
        if notebook.name.startswith("07"):
            raise error(notebook.name)
        ran.append(notebook.name[:2])
        return 0.0

    monkeypatch.setattr(run_all, "execute", execute)
    return ran


def test_a_claim_other_rows_contradict_is_pending_and_the_rest_runs(tmp_path, monkeypatch, capsys):
    """Regression: a GPU profile's rows can contradict a sentence written from the CPU's (its assert fails); that
    stopped the whole render, report included. Now the notebook is pending, the rest renders, and the run ends
    non-zero naming the claim. The same when measuring: rows measured on another machine or with other parameters
    (notebook 14 with two batch sizes: 'verification should cost more at the largest batch') stopped the main job
    at that notebook; any other error still stops it at once."""
    kernel = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
    path, broken = tmp_path / "97_claim.ipynb", tmp_path / "98_broken.ipynb"
    nbformat.write(new_notebook(cells=[new_code_cell("assert 1 > 2, 'the prose says one is more than two'")],
                                metadata=kernel), path)
    nbformat.write(new_notebook(cells=[new_code_cell("{}['missing']")], metadata=kernel), broken)
    for results_only in ("0", "1"):
        monkeypatch.setenv("WORKBOOK_RESULTS_ONLY", results_only)
        with pytest.raises(run_all.ClaimContradicted, match="97_claim.ipynb, cell 1: the prose says one is more"):
            run_all.execute(path, {"profile": "cpu"}, tmp_path / "out", progress=False)
        with pytest.raises(SystemExit, match="KeyError"):
            run_all.execute(broken, {"profile": "cpu"}, tmp_path / "out", progress=False)
    monkeypatch.setenv("WORKBOOK_OUTPUT_ROOT", str(tmp_path))
    ran = _stop_notebook_07(monkeypatch, lambda name: run_all.ClaimContradicted(f"{name}, cell 3: the prose says so"))
    with pytest.raises(SystemExit, match="07_speculative_decoding.ipynb, cell 3: the prose says so"):
        run_all.main(["--profile", "gpu-h100", "--only", "06", "07", "08", "--no-report"])
    out = capsys.readouterr().out
    assert ran == ["06", "08"] and "a claim of its prose does not hold" in out
    assert "pending, a claim of their prose contradicted: 07_speculative_decoding" in out
    assert "rows not measured yet" not in out  # its rows were there: a claim, not a missing row
    assert (paths.generated_dir("gpu-h100") / "00_run_info.numbers.tex").exists()  # the run went on to the end


def test_pending_notebooks_are_listed_and_the_others_still_run(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("WORKBOOK_OUTPUT_ROOT", str(tmp_path))
    stale = paths.generated_dir("gpu-h100") / "07_speculative_decoding.numbers.tex"
    stale.write_text("\\wbset{best_speedup}{9.9}\n")  # an earlier render's numbers: the section must not use them
    from helpers.results import ResultStore

    ResultStore("gpu-h100", "07_speculative_decoding").add_row({"gamma": 2}, {"speedup": 1.5}, {})
    leftover = paths.generated_dir("gpu-h100") / "08_hardware_analysis_partial.tex"
    leftover.write_text("% an earlier window's rows-so-far table\n")  # 08 now renders: its section replaces it
    ran = _stop_notebook_07(monkeypatch, lambda name: run_all.Pending(f"{name}: no row for gamma 3"))
    run_all.main(["--profile", "gpu-h100", "--only", "06", "07", "08", "--no-report"])
    out = capsys.readouterr().out
    assert ran == ["06", "08"] and not stale.exists() and not leftover.exists()
    # the pending notebook's rows measured so far: a table the report prints under its pending box
    assert (paths.generated_dir("gpu-h100") / "07_speculative_decoding_partial.tex").exists()
    assert "PENDING (rows not measured yet): 07_speculative_decoding.ipynb: no row for gamma 3" in out
    assert "2 of 3 notebooks ran" in out and "pending, their rows not measured yet: 07_speculative_decoding" in out


def test_live_notebooks_are_pending_where_their_device_is_missing(monkeypatch):
    import torch

    from helpers.results import MissingResultError, require_live

    require_live("cpu", "a check")  # measuring allowed, or the device is here: nothing to refuse
    monkeypatch.setenv("WORKBOOK_RESULTS_ONLY", "1")
    require_live("cpu", "a check")
    if not torch.cuda.is_available():
        with pytest.raises(MissingResultError, match="notebook 04's checks runs live on cuda"):
            require_live("cuda", "notebook 04's checks")


def test_profiles_and_selection():
    assert run_all.load_params("cpu")["device"] == "cpu"
    assert run_all.load_params("gpu")["device"] == "cuda"
    assert [nb.name for nb in run_all.notebooks(["01"])] == ["01_gpu_memory_math.ipynb"]
    with pytest.raises(SystemExit, match="no notebook"):
        run_all.notebooks(["77"])
    assert run_all.report_pdf_path("cpu").name == "report.pdf"
    assert run_all.report_pdf_path("gpu").name == "report-gpu.pdf"


def test_readme_tex_install_line_is_the_ci_list():
    """README, .ci/run and run_all's advice install one list: a package left out on one of them broke CI once."""
    readme = (paths.REPO_ROOT / "README.md").read_text()
    assert run_all.texlive_install_command() in readme
    assert "report/texlive-packages.txt" in (paths.REPO_ROOT / ".ci" / "run").read_text()


@pytest.mark.skipif(shutil.which("kpsewhich") is None, reason="TeX Live not installed")
def test_every_report_package_is_installed():
    """Regression: lmodern.sty was missing with --no-install-recommends; name what is missing, not a LaTeX log."""
    tex = (paths.REPORT_DIR / "report.tex").read_text()
    packages = {name.strip() for group in re.findall(r"\\usepackage(?:\[[^\]]*\])?\{([^}]*)\}", tex)
                for name in group.split(",")}
    assert {"lmodern", "booktabs", "hyperref"} <= packages
    missing = [name for name in sorted(packages)
               if not subprocess.run(["kpsewhich", f"{name}.sty"], capture_output=True, text=True).stdout.strip()]
    assert not missing, f"report.tex uses {missing}, not installed: add its Debian package to report/texlive-packages.txt"


def test_report_build_survives_non_utf8_latex_output(tmp_path, monkeypatch):
    """Regression: latexmk echoes the log's Latin-1 bytes; reading them as UTF-8 crashed --report-only."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "latexmk"
    fake.write_text(
        "#!/usr/bin/env bash\n"
        "for a in \"$@\"; do case $a in -outdir=*) out=${a#-outdir=};; -jobname=*) job=${a#-jobname=};; esac; done\n"
        "printf 'Overfull \\xe9\\xff box\\n'\n"
        "echo pdf > \"$out/$job.pdf\"\n"
    )
    fake.chmod(0o755)
    (bin_dir / "pdflatex").symlink_to(fake)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    pdf = run_all.build_report("cpu", tmp_path / "report")
    assert pdf is not None and pdf.read_text() == "pdf\n"


def test_gpu_paragraph_builds_from_whatever_numbers_the_rows_gave(tmp_path):
    """The report's eager-against-graphs paragraph is computed (helpers.experiments.gpu_costs.report_numbers): a
    window that measured only graph rows leaves the eager and speedup numbers out, and the paragraph must still read,
    without a missing-number marker."""
    if shutil.which("latexmk") is None or shutil.which("pdftotext") is None:
        pytest.skip(f"TeX Live not installed ({run_all.texlive_install_command()})")
    report = tmp_path / "report"
    shutil.copytree(paths.REPORT_DIR / "sections", report / "sections")
    shutil.copy(paths.REPORT_DIR / "report.tex", report / "report.tex")
    generated = report / "generated" / "gpu-h100"
    generated.mkdir(parents=True)
    (generated / "00_gpu_graphs.tex").write_text("\\begin{tabular}{lr}\\toprule a & b \\\\ \\bottomrule\\end{tabular}\n")
    (generated / "00_gpu.numbers.tex").write_text("\\wbset{gpu_graphs_above_us_min}{150}\n"  # + what the writer
                                                  "\\wbset{gpu_graphs_above_us_max}{170}\n"  # always adds
                                                  "\\wbset{gpu_context}{256}\n")
    text = subprocess.run(["pdftotext", str(run_all.build_report("gpu-h100", report)), "-"], capture_output=True,
                          text=True).stdout
    assert "each layer still costs 150–170" in " ".join(text.split()) and "less time" not in text
    assert "?]" not in text and "At batch 1" not in text  # no eager rows: no eager sentence, no red marker


def test_a_new_notebooks_section_enters_the_report_without_editing_report_tex(tmp_path):
    """Issue 42 (add a notebook in three files): sections report.tex does not place are listed, each under its
    notebook's first heading; those it places are not listed twice."""
    (tmp_path / "sections").mkdir()
    (tmp_path / "report.tex").write_text("\\wbsection{01_gpu_memory_math}\n")
    for stem in ("01_gpu_memory_math", "13_drafting_from_the_target", "99_new_notebook"):
        (tmp_path / "sections" / f"{stem}.tex").write_text("text\n")
    listed = run_all.write_section_list(tmp_path).read_text()
    assert "01_gpu" not in listed
    assert "\\subsection{Beyond the handout: drafting from the target itself" in listed
    assert "\\wbsection{13_drafting_from_the_target}" in listed
    assert "\\subsection{99\\_new\\_notebook}\n\\wbsection{99_new_notebook}" in listed
