"""Warm-up + repeat timing with the right clock for the device.

GPU work is asynchronous: reading a host clock without ``torch.cuda.synchronize()`` times the launch, not
the work. On CUDA we synchronize around every sample (or use CUDA events when asked); on CPU we use
``time.perf_counter``. The first calls (allocation, autotuning, compilation) are never timed.

- :func:`measure`: one function, warm-up then repeats; optionally an untimed ``setup`` before every call (the state
  a call must find, e.g. the target's forward a draft step follows), a ``statistic`` for :attr:`Timing.summary`,
  ``own_clock`` (seconds read from what a call returns: a generator that times itself) and ``keep_results``.
- :func:`measure_interleaved`: the ONE interleaved timer. Several functions (modes, lengths, ...) are timed in
  rounds, each round calling every function once, so that a change in machine load hits all of them alike
  instead of biasing whichever ran later; adaptive: a function whose samples still spread more than
  ``max_spread`` (relative interquartile range, :func:`relative_spread`) gets more rounds, up to
  ``max_repeats``.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Hashable, Iterable, Mapping, Sequence

import torch

STATISTICS = ("mean", "median", "min")


@dataclass(frozen=True)
class Timing:
    """Seconds per call: summary statistics and the raw samples; ``statistic``: the one :attr:`summary` reports (the
    mean by default); ``results``: what each timed call returned, in order (only where the timer was asked to keep
    them)."""

    samples: list[float] = field(repr=False)
    statistic: str = "mean"
    results: Sequence = field(default=(), repr=False)

    def __post_init__(self):
        if self.statistic not in STATISTICS:
            raise ValueError(f"statistic must be one of {STATISTICS}, got {self.statistic!r}")

    @property
    def mean(self) -> float:
        return statistics.fmean(self.samples)

    @property
    def std(self) -> float:
        return statistics.stdev(self.samples) if len(self.samples) > 1 else 0.0

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def min(self) -> float:
        """The fastest call: the least disturbed one on a shared machine."""
        return min(self.samples)

    @property
    def summary(self) -> float:
        """The chosen ``statistic`` of the samples."""
        return getattr(self, self.statistic)

    def fastest_result(self):
        """What the fastest timed call returned (the first of equals); needs the timer's ``keep_results``."""
        if not self.results:
            raise ValueError("no results kept: time with keep_results=True")
        return self.results[self.samples.index(self.min)]

    @property
    def spread(self) -> float:
        """Relative spread of the samples: interquartile range / median (:func:`relative_spread`)."""
        return relative_spread(self.samples)

    def as_dict(self, prefix: str = "time_s") -> dict:
        return {
            f"{prefix}_mean": self.mean,
            f"{prefix}_std": self.std,
            f"{prefix}_median": self.median,
            f"{prefix}_samples": list(self.samples),
        }


def relative_spread(samples) -> float:
    """Interquartile range / median; 0 for fewer than two samples.

    Robust to a single disturbed run once there are a handful of samples (unlike max - min or the standard
    deviation), so "repeat until the spread is small" converges when most runs agree. With three samples it
    is half the range over the median.
    """
    values = sorted(float(v) for v in samples)
    if len(values) < 2:
        return 0.0
    median = statistics.median(values)
    if median <= 0:
        raise ValueError(f"timings must be positive to have a relative spread, got median {median}")
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return (q3 - q1) / median


def _is_cuda(device) -> bool:
    return device is not None and torch.device(device).type == "cuda"


def sync(device) -> None:
    """Wait for ``device``'s queued work (CUDA); nothing to wait for on the CPU. The workbook's one sync."""
    if _is_cuda(device):
        torch.cuda.synchronize(device)


def _time_once(fn, *, device, cuda_events: bool, clock, own_clock=None) -> tuple[float, object]:
    """Seconds of one call of ``fn`` (synchronised on CUDA) and what it returned; ``own_clock(result)``: the seconds
    the call reports itself, in place of the host clock's."""
    if cuda_events:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        result = fn()
        end.record()
        sync(device)
        seconds = start.elapsed_time(end) / 1000.0
    else:
        t0 = clock()
        result = fn()
        sync(device)
        seconds = clock() - t0
    return (seconds if own_clock is None else float(own_clock(result))), result


def _check_options(repeats: int, warmup: int, device, cuda_events: bool, own_clock, statistic: str) -> None:
    """The options both timers share, checked before anything is timed."""
    if statistic not in STATISTICS:
        raise ValueError(f"statistic must be one of {STATISTICS}, got {statistic!r}")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}")
    if cuda_events and not _is_cuda(device):
        raise ValueError("cuda_events=True needs a CUDA device; pass device='cuda' or use the host clock on CPU")
    if cuda_events and own_clock is not None:
        raise ValueError("cuda_events and own_clock are two clocks: pass one of them")


def measure(
    fn: Callable[[], object],
    *,
    warmup: int = 2,
    repeats: int = 5,
    device: str | torch.device | None = None,
    cuda_events: bool = False,
    clock: Callable[[], float] = time.perf_counter,
    setup: Callable[[], object] | None = None,
    statistic: str = "mean",
    own_clock: Callable[[object], float] | None = None,
    keep_results: bool = False,
) -> Timing:
    """Call ``fn`` ``warmup`` times untimed, then ``repeats`` times timed.

    ``clock`` is the host clock (the handout's §1.3 asks for ``time.time``); ``cuda_events`` times with
    ``torch.cuda.Event`` pairs instead (CUDA only); ``own_clock(result)`` reads a call's seconds from what it
    returned (a generation that times itself, e.g. ``lambda r: r.stats.time_total_s``). ``setup()`` runs untimed
    before every call, warm-up included, and its queued device work is waited for before the clock starts (the
    state a call must find: e.g. the target's verify forward that a round's draft steps follow). ``statistic``:
    what the returned :attr:`Timing.summary` is; ``keep_results``: the timed calls' return values travel in
    :attr:`Timing.results` (off by default: they may hold device memory).
    """
    _check_options(repeats, warmup, device, cuda_events, own_clock, statistic)
    for _ in range(warmup):
        if setup is not None:
            setup()
        fn()
    sync(device)
    samples, results = [], []
    for _ in range(repeats):
        if setup is not None:
            setup()
            sync(device)
        seconds, result = _time_once(fn, device=device, cuda_events=cuda_events, clock=clock, own_clock=own_clock)
        samples.append(seconds)
        if keep_results:
            results.append(result)
        del result  # not kept: free it before the next call
    return Timing(samples, statistic, tuple(results))


def measure_interleaved(
    fns: Mapping[Hashable, Callable[[], object]],
    *,
    repeats: int = 3,
    max_repeats: int | None = None,
    max_spread: float | None = None,
    needs_more: Callable[[dict], Iterable[Hashable]] | None = None,
    warmup: int = 0,
    device: str | torch.device | None = None,
    cuda_events: bool = False,
    clock: Callable[[], float] = time.perf_counter,
    on_call: Callable[[Hashable], None] | None = None,
    statistic: str = "mean",
    own_clock: Callable[[object], float] | None = None,
    keep_results: bool = False,
) -> dict:
    """Time every ``fns[key]()`` in interleaved rounds; returns ``{key: Timing}``.

    Each function is first called ``warmup`` times untimed. Then every round calls each still-active
    function once, alternating the order (forward, backward, forward, ...) so that a drift in machine load
    during a round is shared evenly. A function stays active until it has ``repeats`` samples and, if
    ``max_spread`` is given, until its :func:`relative_spread` is at most ``max_spread`` — but never past
    ``max_repeats`` samples (the cap that bounds the run time). ``needs_more(samples)`` (``{key: [seconds]}``)
    may name further keys that need more samples (e.g. points that contradict each other), within the same
    cap. ``on_call(key)`` is called after each timed call (progress bars). ``statistic``, ``own_clock`` and
    ``keep_results`` as in :func:`measure`.
    """
    _check_options(repeats, warmup, device, cuda_events, own_clock, statistic)
    max_repeats = repeats if max_repeats is None else max_repeats
    if max_repeats < repeats:
        raise ValueError(f"max_repeats ({max_repeats}) must be >= repeats ({repeats})")
    if max_spread is not None and max_spread <= 0:
        raise ValueError(f"max_spread must be positive, got {max_spread}")
    keys = list(fns)
    for key in keys:
        for _ in range(warmup):
            fns[key]()
    sync(device)
    samples, results = {key: [] for key in keys}, {key: [] for key in keys}

    def active_keys() -> list:
        more = set(needs_more(samples)) if needs_more is not None and all(samples.values()) else set()
        active = []
        for key in keys:
            count = len(samples[key])
            if count < repeats:
                active.append(key)
            elif count < max_repeats and (
                    key in more or (max_spread is not None and relative_spread(samples[key]) > max_spread)):
                active.append(key)
        return active

    round_index = 0
    while active := active_keys():
        for key in (active if round_index % 2 == 0 else active[::-1]):
            seconds, result = _time_once(fns[key], device=device, cuda_events=cuda_events, clock=clock,
                                         own_clock=own_clock)
            samples[key].append(seconds)
            if keep_results:
                results[key].append(result)
            del result  # not kept: free it before the next call
            if on_call is not None:
                on_call(key)
        round_index += 1
    return {key: Timing(values, statistic, tuple(results[key])) for key, values in samples.items()}


class Timer:
    """``with Timer(device) as t: ...`` then ``t.seconds`` (synchronizes on CUDA)."""

    def __init__(self, device: str | torch.device | None = None):
        self.cuda = _is_cuda(device)
        self.device = device
        self.seconds = float("nan")

    def __enter__(self) -> "Timer":
        sync(self.device)
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        sync(self.device)
        self.seconds = time.perf_counter() - self._start
