"""One look for every figure, saved reproducibly per profile.

Figures are sized for the report's ``\\textwidth`` (6.5 in on letter paper with 1 in margins), use
seaborn's ``paper`` context, embed TrueType fonts, and carry no creation date, so rerunning a notebook
with the same numbers gives byte-identical PDFs. A PNG preview is written beside each PDF for quick looks.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
from matplotlib.transforms import Bbox

from helpers import memory, paths

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


def _label_offsets() -> list[tuple[float, float, str]]:
    """(dx, dy, alignment) in points, nearest first: beside the marker, then rings of 12 directions farther out."""
    offsets = [(5, 0, "left"), (-5, 0, "right"), (4, 7, "left"), (4, -7, "left"), (-4, 7, "right"), (-4, -7, "right"),
               (0, 11, "center"), (0, -11, "center")]
    for radius in (16, 24, 34, 46):
        for step in range(12):
            dx, dy = radius * np.cos(np.pi * step / 6), 0.6 * radius * np.sin(np.pi * step / 6)  # labels are wide
            align = "left" if dx > 1 else "right" if dx < -1 else "center"
            offsets.append((round(float(dx), 1), round(float(dy), 1), align))
    return offsets


LABEL_OFFSETS = _label_offsets()
LEADER_BEYOND = 12  # points: a label placed farther from its marker gets a thin line to it


def _overlap(box, other) -> float:
    """The area two display boxes share (0 when apart)."""
    width = min(box.x1, other.x1) - max(box.x0, other.x0)
    height = min(box.y1, other.y1) - max(box.y0, other.y0)
    return max(width, 0.0) * max(height, 0.0)


def plain_log_axis(axis) -> None:
    """A log ``axis`` (``ax.xaxis`` / ``ax.yaxis``) labelled at 1, 2 and 5 times each power of ten in plain numbers
    (0.2, 5, 50, not 2x10^-1): a curve inside one decade still gets values a reader can read off."""
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_formatter(NullFormatter())


def _distance(box, point) -> float:
    """Display distance from ``point`` to ``box`` (0 inside it)."""
    dx = max(box.x0 - point[0], 0.0, point[0] - box.x1)
    dy = max(box.y0 - point[1], 0.0, point[1] - box.y1)
    return float(np.hypot(dx, dy))


def place_labels(ax, points, texts, colours, fontsize: float = 6) -> list:
    """Annotate each point with its text at the first of :data:`LABEL_OFFSETS` whose box overlaps no marker, no
    label placed before it and no legend, and stays inside the axes (in drawn pixels); where none is free, at the
    place inside the axes that overlaps least. A label away from its marker, or nearer another marker than its own,
    gets a thin leader line; labels sit on a faint white ground, so lines through them stay legible. Draw the figure
    (``fig.canvas.draw()``) after its final layout and before calling this."""
    renderer = ax.figure.canvas.get_renderer()
    inside = ax.get_window_extent(renderer)
    half = 2.8 * ax.figure.dpi / 72  # a marker of s=28 is about 5.3 points across
    pixels = ax.transData.transform(list(points))
    boxes = [Bbox.from_extents(px - half, py - half, px + half, py + half) for px, py in pixels]
    if ax.get_legend() is not None:
        boxes.append(ax.get_legend().get_window_extent(renderer))
    placed = []
    for index, ((x, y), text, colour) in enumerate(zip(points, texts, colours)):
        best = None  # (overlap, offset) of the least crowded place inside the axes
        for dx, dy, align in LABEL_OFFSETS:
            label = ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=fontsize,
                                ha=align, va="center")
            box = label.get_window_extent(renderer).expanded(1.02, 1.05)
            label.remove()
            if not (inside.x0 <= box.x0 and box.x1 <= inside.x1 and inside.y0 <= box.y0 and box.y1 <= inside.y1):
                continue
            crowding = sum(_overlap(box, other) for other in boxes)
            if best is None or crowding < best[0]:
                best = (crowding, (dx, dy, align), box)
            if crowding == 0:
                break
        (dx, dy, align), box = best[1:] if best else (LABEL_OFFSETS[0], None)
        ambiguous = box is not None and any(_distance(box, other) < _distance(box, pixels[index])
                                            for j, other in enumerate(pixels) if j != index)
        leader = (dict(arrowstyle="-", color=colour, lw=0.4, shrinkA=0, shrinkB=2)
                  if max(abs(dx), abs(dy)) > LEADER_BEYOND or ambiguous else None)
        label = ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=fontsize,
                            color=colour, ha=align, va="center", arrowprops=leader,
                            bbox=dict(boxstyle="square,pad=0.1", fc="white", ec="none", alpha=0.75))
        placed.append(label)
        boxes.append(box or label.get_window_extent(renderer))  # the text's box, not its leader line's
    return placed


def memory_breakdown_figure(model_id: str = "Qwen/Qwen3-14B", gpu: str = "L40S (48 GB)", batch_size: int = 8,
                            seq_len: int = 14000):
    """A bar of weights, KV cache and what is left (red when it does not fit) of ``model_id`` on ``gpu`` (a key of
    :data:`helpers.memory.GPU_MEMORY_GB`) at ``batch_size`` sequences of ``seq_len`` tokens; returns the figure."""
    cfg = memory.load_config(model_id)
    gpu_gb = memory.GPU_MEMORY_GB[gpu]
    parts = memory.memory_breakdown(cfg, gpu_gb * memory.GB, batch_size, seq_len)
    fig, ax = plt.subplots(figsize=figsize(0.18))
    left = 0.0
    for name, color in [("weights", "C0"), ("kv_cache", "C1")]:
        ax.barh(0, parts[name] / memory.GB, left=left, color=color, label=f"{name}: {parts[name] / memory.GB:.1f} GB")
        left += parts[name] / memory.GB
    ok = parts["headroom"] >= 0
    ax.barh(0, abs(parts["headroom"]) / memory.GB, left=left if ok else gpu_gb, color="0.85" if ok else "red",
            label=("headroom" if ok else "OVER by") + f": {abs(parts['headroom']) / memory.GB:.1f} GB")
    ax.axvline(gpu_gb, color="k", lw=1)
    ax.set(yticks=[], xlabel="GB (1e9 bytes)", title=f"{model_id} on {gpu}: B={batch_size}, S={seq_len:,}")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.6), ncol=3, fontsize="x-small")
    return fig


def show_memory_breakdown(model_id: str = "Qwen/Qwen3-14B", gpu: str = "L40S (48 GB)", batch_size: int = 8,
                          seq_len: int = 14000) -> None:
    """:func:`memory_breakdown_figure`, shown (the callback of notebook 01's calculator widget)."""
    memory_breakdown_figure(model_id, gpu, batch_size, seq_len)
    plt.show()
