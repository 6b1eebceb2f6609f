"""report/report.tex opens with the homework's answers (section 01 first) and keeps where the numbers came from
(run information, the step-time table) for an appendix at the end."""
from __future__ import annotations

from helpers import paths


def test_report_opens_with_the_answers_and_ends_with_the_provenance():
    """Regression: the report's first page was the CPU target's step time across notebooks (``00_step_times``); a
    grader looking for the handout's §1.1 found run provenance."""
    tex = (paths.REPORT_DIR / "report.tex").read_text()
    body = tex[tex.index(r"\begin{document}"):]
    first_section = body.index(r"\section{")
    assert body.index(r"\wbsection{01_gpu_memory_math}") < body.index(r"\wbsection{02_generation_benchmarks}")
    assert body[first_section:].startswith(r"\section{Optimization for available hardware}")
    appendix = body.index(r"\appendix")
    assert appendix > body.index(r"\wbsection{13_drafting_from_the_target}")
    for provenance in ("00_run_info.numbers.tex", "00_step_times"):
        assert body.index(provenance) > appendix, f"{provenance} belongs in the appendix"
    for gpu_table in ("00_gpu_decode", "00_gpu_graphs", "00_gpu_kernels"):  # GPU results: after the analysis
        assert body.index(r"\wbsection{09_speedup_analysis}") < body.index(gpu_table) < appendix


def test_a_number_compared_by_ifnum_ends_before_the_next_conditional():
    """Regression (the GPU student's rehearsal): `\\ifnum\\wb{a}=1\\ifnum\\wb{b}=1` made TeX read on for more digits
    of "1", expand the inner \\ifnum and need \\wb{b}, which a profile without GPU rows never sets: the report failed.
    A space (or \\relax) after the digits ends the number."""
    import re

    from helpers import paths

    for tex in sorted((paths.REPORT_DIR / "sections").glob("*.tex")) + [paths.REPORT_DIR / "report.tex"]:
        bad = re.findall(r"\\ifnum[^\n]*?=\d+\\if", tex.read_text(encoding="utf-8"))
        assert not bad, f"{tex.name}: {bad}"
