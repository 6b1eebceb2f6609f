"""The workbook's statistics, one implementation each: straight-line least-squares fits with an explicit clamp,
the coefficient of determination R², the Wilson score interval of a proportion and the percentile bootstrap
interval of a ratio of sums over independent units (prompts)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CLAMPS = ("none", "flat_if_falling", "nonnegative")


@dataclass(frozen=True)
class LineFit:
    """``y = intercept + slope * x``, fitted to ``points`` points; ``clamped``: the clamp changed the least-squares
    line (it no longer minimises the squared error); ``r2`` of the returned line (nan below three points)."""
    slope: float
    intercept: float
    points: int
    r2: float
    clamped: bool

    def __call__(self, x):
        """The line at ``x`` (a number or an array)."""
        return self.intercept + self.slope * x


def r_squared(y, fitted) -> float:
    """1 - SS_res / SS_tot of ``fitted`` against ``y`` (nan without spread in ``y``)."""
    y, fitted = np.asarray(y, dtype=float), np.asarray(fitted, dtype=float)
    ss_res, ss_tot = float(((y - fitted) ** 2).sum()), float(((y - y.mean()) ** 2).sum())
    return 1 - ss_res / ss_tot if ss_tot > 0 else float("nan")


def line_fit(x, y, *, clamp: str = "none", weights=None) -> LineFit:
    """Least-squares line through ``(x, y)`` (``numpy.polyfit`` of degree 1, ``weights`` as its ``w``).

    ``clamp`` says what a fit may not do, explicitly:

    - ``"none"``: the least-squares line; needs two distinct x.
    - ``"flat_if_falling"``: a quantity that cannot fall with x (a verify step's cost over the tokens it checks):
      a falling fit, or a single distinct x, gives the flat line at the mean of ``y``.
    - ``"nonnegative"``: a fixed cost plus a cost per unit (seconds over layers): intercept and slope each
      clipped at 0; needs two distinct x.
    """
    if clamp not in CLAMPS:
        raise ValueError(f"clamp must be one of {CLAMPS}, got {clamp!r}")
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.size == 0 or x.shape != y.shape:
        raise ValueError(f"need as many y as x, at least one, got {x.shape} and {y.shape}")
    if np.unique(x).size < 2:
        if clamp != "flat_if_falling":
            raise ValueError(f"a line needs at least two distinct x, got {list(x)}")
        return _fit(0.0, float(y.mean()), x, y, clamped=False)
    slope, intercept = (float(v) for v in np.polyfit(x, y, 1, w=weights))
    if clamp == "flat_if_falling" and slope < 0:
        return _fit(0.0, float(y.mean()), x, y, clamped=True)
    if clamp == "nonnegative" and (slope < 0 or intercept < 0):
        return _fit(max(slope, 0.0), max(intercept, 0.0), x, y, clamped=True)
    return _fit(slope, intercept, x, y, clamped=False)


def _fit(slope: float, intercept: float, x, y, *, clamped: bool) -> LineFit:
    r2 = r_squared(y, intercept + slope * x) if x.size >= 3 else float("nan")
    return LineFit(slope=slope, intercept=intercept, points=int(x.size), r2=r2, clamped=clamped)


def wilson_interval(successes: int, trials: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion. For alpha it treats every acceptance test as
    independent, which tokens of one prompt are not (easy tokens come in runs): too narrow for alpha, shown
    next to the bootstrap over prompts to make that point."""
    if trials <= 0 or not 0 <= successes <= trials:
        raise ValueError(f"need 0 <= successes <= trials and trials > 0, got {successes}/{trials}")
    p = successes / trials
    denominator = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denominator
    half = z * (p * (1 - p) / trials + z * z / (4 * trials * trials)) ** 0.5 / denominator
    # at p = 0 (or 1) the bound is exactly 0 (or 1); centre - half rounds to a tiny positive number
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == trials else min(1.0, centre + half)
    return low, high


def bootstrap_ratio_interval(numerators, denominators, *, level: float = 0.95, resamples: int = 2000,
                             seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of sum(numerators) / sum(denominators), resampling whole prompts (the
    per-prompt pairs) with replacement: the unit that varies independently is the prompt, not the token.
    Deterministic for a given ``seed``."""
    num, den = np.asarray(numerators, dtype=float), np.asarray(denominators, dtype=float)
    if num.shape != den.shape or num.ndim != 1 or len(num) < 2:
        raise ValueError(f"need two equal-length 1-D sequences of at least 2 prompts, got {num.shape} and {den.shape}")
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    index = np.random.default_rng(seed).integers(0, len(num), size=(resamples, len(num)))
    sums_num, sums_den = num[index].sum(axis=1), den[index].sum(axis=1)
    ratios = sums_num[sums_den > 0] / sums_den[sums_den > 0]
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(ratios, [tail, 100 - tail])
    return float(low), float(high)


def range_spread(values) -> float:
    """(max - min) / median of repeated measurements: how far apart the repeats were (0 for one, nan for none)."""
    values = [float(v) for v in values]
    if not values:
        return float("nan")
    return (max(values) - min(values)) / float(np.median(values))


def tied_with_best(values, tolerance: float) -> list[bool]:
    """For each value (a speedup), whether it lies within ``tolerance`` (relative) of the largest: a tie."""
    values = np.asarray(values, dtype=float)
    if values.size == 0 or tolerance < 0:
        raise ValueError("need values and a non-negative tolerance")
    return [bool(v >= values.max() * (1 - tolerance)) for v in values]


def order_of_sets(low, high) -> str:
    """How two sets of tied optima (e.g. the gammas within the noise of each draft's best) compare: ``"larger"`` when
    every member of ``high`` exceeds every member of ``low``, ``"smaller"`` the other way, else ``"overlapping"``
    (the noise cannot order them)."""
    if not len(low) or not len(high):
        raise ValueError("need two non-empty sets")
    return "larger" if min(high) > max(low) else "smaller" if max(high) < min(low) else "overlapping"


REPETITIVE_SHARE = 0.5  # above it, most of an output repeats itself: speculation (and lookup) wins easily on it


def repeated_ngram_share(tokens, n: int = 4) -> float:
    """The share of an output's ``n``-grams that already occurred earlier in it (0 for fewer than ``n + 1`` tokens).

    A generation stuck in a loop scores near 1, sensible text near 0; flag an output whose share exceeds
    :data:`REPETITIVE_SHARE` beside any speedup measured on it, since a loop is what makes drafts easy to guess.

    >>> repeated_ngram_share([1, 2, 3, 1, 2, 3, 1, 2, 3], n=3)
    0.5714285714285714
    """
    tokens = [int(t) for t in tokens]
    grams = [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]
    if len(grams) < 2:
        return 0.0
    seen, repeats = set(), 0
    for gram in grams:
        repeats += gram in seen
        seen.add(gram)
    return repeats / len(grams)
