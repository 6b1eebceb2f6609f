"""The main job: run every notebook with a profile's parameters, then build the report.

    python -m helpers.run_all                      # CPU profile (params/cpu.yaml)
    python -m helpers.run_all --profile gpu        # params/gpu.yaml, needs an NVIDIA GPU
    python -m helpers.run_all --only 01 07         # a subset, by number prefix
    python -m helpers.run_all --report-only        # just rebuild the PDF from what results/ already holds

Executed notebooks land in build/<profile>/, results in results/<profile>/, figures in figures/<profile>/,
tables in report/generated/<profile>/ and the PDF in report/report.pdf (CPU) or report/report-<profile>.pdf.
Sweeps resume from results/, so rerunning after an interruption only measures what is missing.

Rendering stored rows only (``WORKBOOK_RESULTS_ONLY=1``, e.g. a GPU profile on a laptop), a notebook whose rows are
not all measured yet stops at the first missing one (:class:`helpers.results.MissingResultError`): it is listed as
pending, the others still render, and the report shows a pending box in its place.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import tempfile
import uuid
import sys
import time
from pathlib import Path

import yaml

from helpers import paths, run_info
from helpers.profile_env import results_only
from helpers.tables import latex_escape


class Pending(Exception):
    """A notebook stopped at a row that is not measured yet, under results-only rendering (not a failure)."""


class ClaimContradicted(Pending):
    """A notebook's check of its own prose (an assert beside a sentence) failed: the sentence was written from other
    rows (another profile's, another machine's, other parameters') and needs revising for these. The notebook is
    pending like one missing rows, its measured rows kept, so the rest still runs and the report still builds;
    ``main`` then exits non-zero, naming the claim."""


class CellTimedOut(SystemExit):
    """A cell ran past ``WORKBOOK_CELL_TIMEOUT`` seconds (unset: no limit, as GPU cells can run long). The rehearsal
    sets one because a kernel message lost under papermill leaves both sides waiting for ever: the one hang seen
    (notebook 10's widget cell, kernel idle, client polling for 13 minutes) passed when run again."""


def cell_timeout() -> int | None:
    value = os.environ.get("WORKBOOK_CELL_TIMEOUT", "").strip()
    if not value:
        return None
    if not value.isdigit() or int(value) == 0:
        raise ValueError(f"WORKBOOK_CELL_TIMEOUT={value!r}: give whole seconds above 0, or unset it for no limit")
    return int(value)


def load_params(profile: str, params_file: str | Path | None = None) -> dict:
    path = Path(params_file) if params_file else paths.PARAMS_DIR / f"{paths.check_profile(profile)}.yaml"
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in paths.PARAMS_DIR.glob("*.yaml")))
        raise FileNotFoundError(f"no parameter file {path}; known profiles: {known}")
    params = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if params_file is None and params.get("profile", profile) != profile:
        raise ValueError(f"{path} sets profile={params['profile']!r} but was selected as profile {profile!r}")
    params["profile"] = params.get("profile", profile)
    return params


def notebooks(only: list[str] | None = None) -> list[Path]:
    found = sorted(paths.NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb"))
    if only:
        found = [nb for nb in found if any(nb.name.startswith(prefix) for prefix in only)]
        if not found:
            raise SystemExit(f"no notebook matches {only}; notebooks are named like 01_gpu_memory_math.ipynb")
    return found


def kernel_manager_class(blocking: bool = False):
    """jupyter_client's kernel manager (AsyncKernelManager, or KernelManager with ``blocking``, as nbval uses) over
    local IPC sockets instead of TCP: nothing leaves the machine, and ipykernel no longer warns on every run that it
    is "running over TCP without encryption". TCP on Windows, which has no IPC transport. (Imported lazily: helpers
    must import on a GPU machine without Jupyter.)"""
    from jupyter_client import AsyncKernelManager, KernelManager

    base = KernelManager if blocking else AsyncKernelManager
    if os.name == "nt":
        return base

    class IPCKernelManager(base):
        def __init__(self, **kwargs):
            kwargs.setdefault("transport", "ipc")
            # an absolute socket path: the kernel runs in the notebook's folder, the client in ours, and a relative
            # one ("kernel-ipc", the default before a connection file exists) would name two different sockets
            kwargs.setdefault("ip", os.path.join(tempfile.gettempdir(), f"wb-kernel-{uuid.uuid4().hex[:12]}-ipc"))
            super().__init__(**kwargs)

    return IPCKernelManager


def execute(notebook: Path, params: dict, out_dir: Path, progress: bool = True) -> float:
    """Run one notebook with papermill; on failure, name the cell and the error and stop (:class:`Pending` where
    results-only rendering met a row that is not measured yet)."""
    # Jupyter tooling is imported where it is used: helpers must import on a GPU machine without it
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    out_dir.mkdir(parents=True, exist_ok=True)
    declared = pm.inspect_notebook(str(notebook))  # pass only what this notebook declares
    start = time.perf_counter()
    try:
        pm.execute_notebook(
            str(notebook),
            str(out_dir / notebook.name),
            parameters={name: value for name, value in params.items() if name in declared},
            kernel_name="python3",
            kernel_manager_class=kernel_manager_class(),
            cwd=str(paths.NOTEBOOKS_DIR),
            progress_bar=progress,
            report_mode=False,
            execution_timeout=cell_timeout(),
        )
    except TimeoutError:  # nbclient's CellTimeoutError, which papermill lets through
        raise CellTimedOut(f"\nTIMED OUT: {notebook.name}: a cell ran past WORKBOOK_CELL_TIMEOUT="
                           f"{cell_timeout()} s (the partly executed notebook is {out_dir / notebook.name})") from None
    except PapermillExecutionError as err:
        if err.ename == "MissingResultError" and results_only():
            raise Pending(f"{notebook.name}: {err.evalue}") from None
        if err.ename == "AssertionError":
            raise ClaimContradicted(f"{notebook.name}, cell {err.exec_count}: {err.evalue or 'an assert failed'} "
                                    f"(see {out_dir / notebook.name})") from None
        raise SystemExit(
            f"\nFAILED: {notebook.name}, cell {err.exec_count} ({err.ename}): {err.evalue}\n"
            f"The executed notebook with the full traceback is {out_dir / notebook.name}"
        ) from None
    return time.perf_counter() - start


def execute_in_place(notebook: Path) -> float:
    """Run a notebook with its own defaults (the CPU profile) and save the outputs into it.

    This is how the committed notebooks get the outputs that nbval compares against.
    """
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(notebook, as_version=4)
    start = time.perf_counter()
    try:
        NotebookClient(nb, kernel_name="python3", timeout=1800, kernel_manager_class=kernel_manager_class(),
                       resources={"metadata": {"path": str(paths.NOTEBOOKS_DIR)}}).execute()
    except CellExecutionError as err:
        raise SystemExit(f"\nFAILED: {notebook.name}: {err}") from None
    nbformat.write(nb, notebook)
    return time.perf_counter() - start


def mark_pending(notebook: Path, profile: str, message: str = "") -> None:
    """Remove the pending notebook's numbers for ``profile`` (an earlier render's would be stale), so the report shows
    a pending box for its section instead of prose about numbers this run did not compute, and under it the rows
    measured so far (:func:`helpers.partial_rows.write_partial`)."""
    from helpers import partial_rows

    (paths.generated_dir(profile) / f"{notebook.stem}.numbers.tex").unlink(missing_ok=True)
    partial_rows.write_partial(notebook.stem, profile, partial_rows.missing_config(message))


def report_pdf_path(profile: str, report_dir: Path | None = None) -> Path:
    """Where :func:`build_report` puts a profile's PDF: report.pdf for cpu, report-<profile>.pdf for the others."""
    report_dir = report_dir or paths.output_root() / "report"
    return report_dir / ("report.pdf" if profile == "cpu" else f"report-{profile}.pdf")


def texlive_install_command() -> str:
    """The one apt line that gives the report everything it needs (CI, README and this advice share the list)."""
    packages = (paths.REPORT_DIR / "texlive-packages.txt").read_text().split()
    return "sudo apt-get install --no-install-recommends " + " ".join(packages)


STUDENT_HEADER = re.compile(r"# Name / Andrew ID: (?P<name>[^<>/]*?) / (?P<andrew_id>[^<>/]*?)\s*")
STUDENT_FILE = paths.REPO_ROOT / "submission" / "specdec.py"  # its first line names the student


def student_header(path: Path = STUDENT_FILE) -> tuple[str, str] | None:
    """(name, Andrew ID) from a hand-in file's first line ``# Name / Andrew ID: <name> / <andrew id>``; None when
    the line is missing, still holds a ``<...>`` placeholder, or leaves the name or the ID empty."""
    try:
        first = Path(path).read_text(encoding="utf-8").splitlines()[0]
    except (OSError, IndexError):
        return None
    match = STUDENT_HEADER.fullmatch(first)
    if not match or not match["name"].strip() or not match["andrew_id"].strip():
        return None
    return match["name"].strip(), match["andrew_id"].strip()


def write_student_macro(report_dir: Path, source: Path = STUDENT_FILE) -> Path:
    """Write ``report_dir/build/student.tex``, the name and Andrew ID the report's \\author line inputs (LaTeX
    specials escaped), read from ``source``'s header; "name not filled in" when it has none. The report builds
    without the file too (it then says so)."""
    header = student_header(source)
    text = (f"{latex_escape(header[0])} ({latex_escape(header[1])})" if header
            else f"name not filled in (the first line of {latex_escape(Path(source).name)})")
    target = report_dir / "build" / "student.tex"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text + "%\n", encoding="utf-8")
    return target


def notebook_title(stem: str) -> str:
    """A notebook's first heading without its number (``# 13 · Beyond the handout: ...``), or its file name."""
    path = paths.NOTEBOOKS_DIR / f"{stem}.ipynb"
    cells = json.loads(path.read_text())["cells"] if path.exists() else []
    heading = next((line for cell in cells if cell["cell_type"] == "markdown"
                    for line in "".join(cell["source"]).splitlines() if line.startswith("# ")), None)
    return re.sub(r"^#\s*\d+\s*[·.:-]?\s*", "", heading).strip() if heading else stem


def write_section_list(report_dir: Path) -> Path:
    """Write ``report_dir/build/more_sections.tex``: a subsection (titled by its notebook's first heading) and
    ``\\wbsection`` for each ``sections/NN_*.tex`` that report.tex does not place itself, so that a new notebook's
    section enters the report without editing report.tex."""
    main = report_dir / "report.tex"
    placed = set(re.findall(r"\\wbsection\{([^}]*)\}", main.read_text())) if main.exists() else set()
    lines = [f"\\subsection{{{latex_escape(notebook_title(section.stem))}}}\n\\wbsection{{{section.stem}}}"
             for section in sorted((report_dir / "sections").glob("[0-9][0-9]_*.tex")) if section.stem not in placed]
    target = report_dir / "build" / "more_sections.tex"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return target


def build_report(profile: str, report_dir: Path | None = None) -> Path | None:
    """latexmk the report for ``profile``; returns the PDF, or None (with advice) when TeX is missing."""
    report_dir = report_dir or paths.output_root() / "report"
    if report_dir.resolve() != paths.REPORT_DIR.resolve():  # an output root elsewhere: its own copy of the sources
        report_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy(paths.REPORT_DIR / "report.tex", report_dir / "report.tex")
        shutil.copytree(paths.REPORT_DIR / "sections", report_dir / "sections", dirs_exist_ok=True)
    write_student_macro(report_dir)  # the title block's name: submission/specdec.py's header
    write_section_list(report_dir)  # sections report.tex does not place (a new notebook's)
    if shutil.which("latexmk") is None or shutil.which("pdflatex") is None:
        print(
            "latexmk/pdflatex not found, so the PDF was not built (tables and figures are ready in "
            f"{report_dir / 'generated' / profile}). Install TeX Live, e.g. on Debian/Ubuntu:\n"
            f"  {texlive_install_command()}\n"
            "then run: python -m helpers.run_all --report-only"
        )
        return None
    jobname = f"report-{profile}"
    build_dir = report_dir / "build" / profile
    build_dir.mkdir(parents=True, exist_ok=True)
    command = [
        "latexmk", "-pdf", "-interaction=nonstopmode", "-halt-on-error", "-file-line-error",
        f"-jobname={jobname}", f"-outdir={build_dir}",
        f"-usepretex=\\def\\wbprofile{{{profile}}}",  # TeX code run before report.tex
        "report.tex",
    ]
    result = subprocess.run(command, cwd=report_dir, capture_output=True, text=True, errors="replace")
    if result.returncode != 0:
        log = (build_dir / f"{jobname}.log")
        tail = log.read_text(errors="replace").splitlines()[-30:] if log.exists() else result.stdout.splitlines()[-30:]
        raise SystemExit("LaTeX failed:\n" + "\n".join(tail))
    pdf = report_pdf_path(profile, report_dir)
    shutil.copyfile(build_dir / f"{jobname}.pdf", pdf)
    return pdf


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m helpers.run_all", description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="cpu", help="parameter profile: params/<profile>.yaml (default cpu)")
    parser.add_argument("--params", help="a parameter file to use instead of params/<profile>.yaml")
    parser.add_argument("--only", nargs="*", help="notebook number prefixes to run, e.g. 01 07")
    parser.add_argument("--inplace", action="store_true",
                        help="execute the notebooks in place with their defaults (CPU) to refresh their saved outputs")
    parser.add_argument("--report-only", action="store_true", help="skip the notebooks, just build the PDF")
    parser.add_argument("--no-report", action="store_true", help="run the notebooks but do not build the PDF")
    args = parser.parse_args(argv)

    params = load_params(args.profile, args.params)
    profile = params["profile"]
    # every row measured by this invocation records the same run id (helpers.results.run_metadata)
    os.environ.setdefault("WORKBOOK_RUN_ID", f"{profile}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
    if not args.report_only:
        out_dir = paths.output_root() / "build" / profile
        selected = notebooks(args.only)
        total, pending, contradicted = time.perf_counter(), [], []
        for index, notebook in enumerate(selected, 1):
            print(f"[{index}/{len(selected)}] {notebook.name} (profile {profile})", flush=True)
            if args.inplace:
                if profile != "cpu":
                    raise SystemExit("--inplace runs the notebooks' defaults, which are the CPU profile")
                seconds = execute_in_place(notebook)
                print(f"    done in {seconds:.0f} s (outputs saved in {notebook})", flush=True)
                continue
            try:
                seconds = execute(notebook, params, out_dir)
            except Pending as missing:
                pending.append(notebook.stem)
                mark_pending(notebook, profile, str(missing))
                if isinstance(missing, ClaimContradicted):
                    contradicted.append(str(missing))
                    print(f"    PENDING (a claim of its prose does not hold for these rows): {missing}", flush=True)
                else:
                    print(f"    PENDING (rows not measured yet): {str(missing)[:600]}", flush=True)
                continue
            from helpers.partial_rows import clear_partial

            clear_partial(notebook.stem, profile)  # rendered in full: its section replaces the rows-so-far table
            print(f"    done in {seconds:.0f} s -> {out_dir / notebook.name}", flush=True)
        unmeasured = [stem for stem in pending if not any(claim.startswith(stem) for claim in contradicted)]
        claimed = [stem for stem in pending if stem not in unmeasured]
        print(f"{len(selected) - len(pending)} of {len(selected)} notebooks ran in {time.perf_counter() - total:.0f} s"
              + (f"; pending, their rows not measured yet: {', '.join(unmeasured)}" if unmeasured else "")
              + (f"; pending, a claim of their prose contradicted: {', '.join(claimed)}" if claimed else ""))
    info = run_info.write(profile)
    print(f"results of {profile}: {info['rows']} rows from {', '.join(info['devices'])}, threads "
          f"{info['threads']}, {info['runs_text']}"
          + (f"; {info['unexplained']} step time(s) differ without a stated reason" if info["unexplained"] else ""))
    from helpers.experiments.packages import declared_parts  # the notebook packages: imported when needed

    for part in declared_parts().values():  # the GPU window's tables: in the report even while notebooks wait
        for line in part.report(profile) if part.report else ():
            print(f"GPU goal: {line}")
    if not args.no_report:
        pdf = build_report(profile)
        if pdf:
            print(f"report: {pdf}")
    if not args.report_only and contradicted:
        raise SystemExit("claims that this profile's rows contradict (revise each sentence beside its assert, or make "
                         "it a printed verdict):\n  " + "\n  ".join(contradicted))


if __name__ == "__main__":
    main(sys.argv[1:])
