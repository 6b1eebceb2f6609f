"""helpers.stats: the line fits and their clamps, R², and the intervals (checked against hand values)."""
import numpy as np
import pytest

from helpers import stats


def test_line_fit_is_least_squares_with_r2():
    fit = stats.line_fit([1, 2, 3, 4], [3.1, 4.9, 7.2, 8.8])
    slope, intercept = np.polyfit([1, 2, 3, 4], [3.1, 4.9, 7.2, 8.8], 1)
    assert fit.slope == pytest.approx(slope) and fit.intercept == pytest.approx(intercept)
    assert fit.points == 4 and not fit.clamped and 0.99 < fit.r2 <= 1
    assert fit(2.5) == pytest.approx(intercept + 2.5 * slope)
    assert np.allclose(fit(np.array([1.0, 2.0])), intercept + slope * np.array([1.0, 2.0]))


def test_flat_if_falling_gives_the_mean():
    falling = stats.line_fit([1, 2, 3], [3.0, 2.0, 1.5], clamp="flat_if_falling")
    assert falling.slope == 0 and falling.intercept == pytest.approx(6.5 / 3) and falling.clamped
    single = stats.line_fit([2, 2], [1.0, 3.0], clamp="flat_if_falling")
    assert (single.slope, single.intercept, single.clamped) == (0.0, 2.0, False)


def test_nonnegative_clips_each_coefficient():
    fit = stats.line_fit([1, 2, 3], [0.5, 2.5, 4.5], clamp="nonnegative")  # raw intercept -1.5
    assert fit.intercept == 0 and fit.slope == pytest.approx(2.0) and fit.clamped
    assert np.isnan(stats.line_fit([1, 2], [1.0, 2.0]).r2)  # two points: R² says nothing


def test_line_fit_refuses_what_it_cannot_fit():
    with pytest.raises(ValueError, match="two distinct"):
        stats.line_fit([1, 1], [1.0, 2.0])
    with pytest.raises(ValueError, match="clamp"):
        stats.line_fit([1, 2], [1.0, 2.0], clamp="positive")
    with pytest.raises(ValueError, match="as many"):
        stats.line_fit([1, 2], [1.0])


def test_r_squared():
    assert stats.r_squared([1, 2, 3], [1, 2, 3]) == 1.0
    assert stats.r_squared([1, 2, 3], [2, 2, 2]) == 0.0
    assert np.isnan(stats.r_squared([2, 2], [2, 2]))


def test_intervals_known_values_and_determinism():
    low, high = stats.wilson_interval(8, 10)
    assert low == pytest.approx(0.4902, abs=1e-4) and high == pytest.approx(0.9433, abs=1e-4)
    assert stats.bootstrap_ratio_interval([1, 2, 3], [2, 2, 2], seed=1) == stats.bootstrap_ratio_interval(
        [1, 2, 3], [2, 2, 2], seed=1)


def test_explorer_and_analysis_draw_the_same_verify_line():
    from helpers.explorers.specdec import verify_line
    from helpers.specdec.analysis import linear_verify_cost

    for ratios in ([1.1, 1.3, 1.2, 1.6], [1.5, 1.4, 1.2, 1.3]):  # rising, and falling (flat at the mean)
        at_1, slope = verify_line([1, 2, 3, 4], ratios)
        line = linear_verify_cost([1, 2, 3, 4], ratios)
        for gamma in range(1, 9):
            assert max(min(ratios), at_1 + slope * (gamma - 1)) == pytest.approx(line(gamma))


def test_repeated_ngram_share_flags_loops_not_text():
    loop = [7, 8, 9] * 10
    assert stats.repeated_ngram_share(loop, n=4) > stats.REPETITIVE_SHARE
    assert stats.repeated_ngram_share(list(range(30)), n=4) == 0.0
    assert stats.repeated_ngram_share([1, 2, 3], n=4) == 0.0
    assert stats.repeated_ngram_share([1, 2, 3, 1, 2, 3, 1, 2, 3], n=3) == 4 / 7


def test_range_spread_is_the_range_over_the_median():
    from helpers.stats import range_spread

    assert range_spread([1.0, 2.0, 4.0]) == 1.5 and range_spread([3.0]) == 0.0
    assert range_spread([]) != range_spread([])  # nan: no repeats to judge by
