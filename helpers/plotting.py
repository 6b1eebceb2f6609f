"""One look for every figure, saved reproducibly per profile.

Figures are sized for the report's ``\\textwidth`` (6.5 in on letter paper with 1 in margins), use
seaborn's ``paper`` context, embed TrueType fonts, and carry no creation date, so rerunning a notebook
with the same numbers gives byte-identical PDFs. A PNG preview is written beside each PDF for quick looks.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib
import seaborn as sns

from helpers import paths

TEXTWIDTH_IN = 6.5
_SAVED_KW = dict(bbox_inches="tight", pad_inches=0.02)


def set_theme() -> None:
    """The workbook's theme: seaborn paper context, colour-blind palette, embedded fonts."""
    sns.set_theme(context="paper", style="whitegrid", palette="colorblind")
    matplotlib.rcParams.update(
        {
            "pdf.fonttype": 42,  # embed TrueType, not Type 3 (journals and arXiv ask for it)
            "ps.fonttype": 42,
            "figure.dpi": 110,
            "savefig.dpi": 200,
            "figure.figsize": (TEXTWIDTH_IN, TEXTWIDTH_IN * 0.45),
            "axes.titlesize": "medium",
            "legend.frameon": False,
            "svg.hashsalt": "workbook",
        }
    )


def figsize(height_ratio: float = 0.45, width_fraction: float = 1.0) -> tuple[float, float]:
    """(width, height) in inches for a figure spanning ``width_fraction`` of the text width."""
    width = TEXTWIDTH_IN * width_fraction
    return (width, width * height_ratio)


def save_figure(fig, name: str, profile: str, png: bool = True) -> Path:
    """Write ``figures/<profile>/<name>.pdf`` (and a PNG preview); return the PDF path."""
    if not name or "/" in name or name.endswith(".pdf"):
        raise ValueError(f"figure name {name!r} must be a bare name such as 'kv_cache_vs_batch'")
    out = paths.figures_dir(profile) / f"{name}.pdf"
    fig.savefig(out, metadata={"CreationDate": None, "ModDate": None, "Producer": None, "Creator": None}, **_SAVED_KW)
    if png:
        fig.savefig(out.with_suffix(".png"), metadata={"Software": None}, **_SAVED_KW)
    return out
