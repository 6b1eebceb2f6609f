"""helpers.timing.measure's options for the loops that used to time themselves (issue 25): an untimed ``setup``
before every call, a ``statistic`` for the summary, a generator's ``own_clock`` and the kept results; the
speculative-decoding cost helpers routed through them."""
from types import SimpleNamespace

import pytest
import torch

from helpers import timing
from helpers.experiments.nb09.costs import least_disturbed_pair
from helpers.experiments.specdec_costs import draft_time_in_round


def _ticking_clock():
    """A fake host clock that advances one second per reading."""
    ticks = iter(range(1000))
    return lambda: float(next(ticks))


def test_setup_runs_untimed_before_every_call_warmup_included():
    calls = []
    clock = _ticking_clock()
    result = timing.measure(lambda: calls.append("fn"), setup=lambda: calls.append("setup"), warmup=2, repeats=3,
                            clock=clock)
    assert calls == ["setup", "fn"] * 5
    assert result.samples == [1.0, 1.0, 1.0]  # the clock is read around fn only: setup is never timed


def test_statistic_picks_the_summary_and_defaults_stay():
    samples = [3.0, 1.0, 2.0, 10.0]
    assert timing.Timing(samples).summary == timing.Timing(samples).mean == 4.0  # the default: the mean
    assert timing.Timing(samples, "median").summary == 2.5
    assert timing.Timing(samples, "min").summary == timing.Timing(samples).min == 1.0
    durations = iter([0.0, 3.0, 3.0, 4.0, 4.0, 6.0])  # the clock's readings: calls of 3, 1 and 2 seconds
    result = timing.measure(lambda: None, warmup=0, repeats=3, clock=lambda: next(durations), statistic="median")
    assert result.statistic == "median" and result.summary == 2.0 and result.mean == 2.0
    with pytest.raises(ValueError, match="statistic"):
        timing.measure(lambda: None, statistic="mode")
    with pytest.raises(ValueError, match="statistic"):
        timing.measure_interleaved({"a": lambda: None}, statistic="mode")
    with pytest.raises(ValueError, match="statistic"):
        timing.Timing([1.0], "max")


def test_own_clock_and_kept_results():
    seconds = iter([0.5, 0.2, 0.9])
    runs = iter(range(3))
    make = lambda: SimpleNamespace(index=next(runs), stats=SimpleNamespace(time_total_s=next(seconds)))  # noqa: E731
    result = timing.measure(make, warmup=0, repeats=3, own_clock=lambda r: r.stats.time_total_s, keep_results=True)
    assert result.samples == [0.5, 0.2, 0.9] and result.fastest_result().index == 1
    assert timing.measure(lambda: 1, warmup=0, repeats=2).results == ()  # not kept unless asked
    with pytest.raises(ValueError, match="keep_results"):
        timing.measure(lambda: 1, warmup=0, repeats=2).fastest_result()
    with pytest.raises(ValueError, match="two clocks"):
        timing.measure(lambda: 1, own_clock=float, cuda_events=True, device="cuda")


def test_interleaved_results_exclude_warmups_and_follow_the_own_clock():
    count = {"a": 0, "b": 0}

    def run(key, times):
        def call():
            count[key] += 1
            return SimpleNamespace(call=count[key], stats=SimpleNamespace(time_total_s=times[count[key] - 1]))
        return call

    result = timing.measure_interleaved({"a": run("a", [9.0, 3.0, 1.0, 2.0]), "b": run("b", [9.0, 5.0, 6.0, 4.0])},
                                        repeats=3, warmup=1, own_clock=lambda r: r.stats.time_total_s,
                                        statistic="min", keep_results=True)
    assert [r.call for r in result["a"].results] == [2, 3, 4]
    assert result["a"].samples == [3.0, 1.0, 2.0] and result["a"].summary == 1.0
    assert result["a"].fastest_result().call == 3 and result["b"].fastest_result().call == 4


def test_least_disturbed_pair_keeps_the_fastest_run_of_each_by_its_own_clock():
    def runs(times):
        index = iter(range(len(times)))
        return lambda: SimpleNamespace(id=(i := next(index)), stats=SimpleNamespace(time_total_s=times[i]))

    a, b = least_disturbed_pair(runs([0.3, 0.1, 0.2]), runs([0.2, 0.4, 0.1]), repeats=3)
    assert (a.id, a.stats.time_total_s) == (1, 0.1) and (b.id, b.stats.time_total_s) == (2, 0.1)


def test_draft_time_in_round_puts_the_target_forward_between_timed_draft_steps(float64_pair, monkeypatch):
    """The target's verify forward runs before every timed group of draft steps and is not timed; the draft's
    cache is back at the context each time; the result is the mean per draft forward."""
    target, draft = float64_pair
    seen = {}
    real_measure = timing.measure

    def spy(fn, **options):
        seen.update(options)
        return real_measure(fn, **options)

    monkeypatch.setattr("helpers.experiments.specdec_costs.measure", spy)
    context = torch.tensor([[1, 2, 3, 4, 5]])
    seconds = draft_time_in_round(target, draft, context, 3, warmup=1, repeats=2)
    assert seconds > 0 and seen["statistic"] == "mean" and callable(seen["setup"])
    assert (seen["warmup"], seen["repeats"]) == (1, 2)
