"""Static vs continuous batching as a scheduler simulation over the engine's own pieces.

The real engine (two processes, a model in each) takes seconds per run; this replays its scheduling decisions
instead, step by step. Requests (:class:`helpers.batching.Request`) wait in its length-bucketed queue
(:class:`helpers.batching.queue.BucketedQueue`, first come first served) and are admitted only when their worst-case
KV blocks fit (:func:`helpers.batching.kv_memory.does_fit`) and a row is free. Time advances by one decode step per
iteration, a step over ``b`` rows costing what notebook 05 measured for that batch size (interpolated); prefill is
left out (in the engine it runs on the other worker, overlapped with decoding).

- continuous: every step, waiting requests fill free rows; a finished request leaves after its last token;
- static: when the batch is empty, up to ``batch_size`` waiting requests form a batch that runs until its longest
  request is done; finished rows keep computing (as ``generate()`` does), which is the wasted work.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from helpers.batching.kv_memory import does_fit
from helpers.batching.queue import BucketedQueue
from helpers.batching.request import Request

POLICIES = ("static", "continuous")


def output_lengths(n: int, mean: float, sigma: float, *, max_output: int = 192, seed: int = 0) -> list[int]:
    """``n`` output lengths, log-normal with spread ``sigma`` and mean ``mean`` before clipping to ``[1,
    max_output]`` (sigma 0: every request ``mean`` tokens), as the high-variance workload of notebook 05 draws them."""
    if n < 1 or mean < 1 or sigma < 0:
        raise ValueError(f"need n >= 1, mean >= 1 and sigma >= 0, got n={n}, mean={mean}, sigma={sigma}")
    if sigma == 0:
        return [int(round(mean))] * n
    rng = np.random.default_rng(seed)
    median = mean / np.exp(sigma**2 / 2)
    return np.clip(np.round(rng.lognormal(np.log(median), sigma, n)), 1, max_output).astype(int).tolist()


def poisson_arrivals(n: int, rate_per_s: float, *, seed: int = 0) -> list[float]:
    """Arrival times (s) of ``n`` requests of a Poisson process with ``rate_per_s``; rate 0: all arrive at time 0
    (the handout's offline setting). The first request arrives at 0."""
    if n < 1 or rate_per_s < 0:
        raise ValueError(f"need n >= 1 and rate >= 0, got n={n}, rate={rate_per_s}")
    if rate_per_s == 0:
        return [0.0] * n
    gaps = np.random.default_rng(seed + 1).exponential(1.0 / rate_per_s, n)
    gaps[0] = 0.0
    return np.cumsum(gaps).tolist()


def step_time_function(step_seconds: Mapping[int, float] | Callable[[int], float] | float | None) -> Callable[[int], float]:
    """Seconds of one decode step over ``b`` rows: a callable, a constant, or measured ``{batch: seconds}``
    interpolated linearly in ``b`` (extrapolated with the last segment's slope); None: 1 (time in steps)."""
    if step_seconds is None:
        return lambda rows: 1.0
    if callable(step_seconds):
        return step_seconds
    if isinstance(step_seconds, (int, float)):
        if step_seconds <= 0:
            raise ValueError(f"a step must take positive time, got {step_seconds}")
        return lambda rows: float(step_seconds)
    points = sorted((int(b), float(s)) for b, s in step_seconds.items())
    if not points or any(s <= 0 for _, s in points):
        raise ValueError(f"measured step times must be positive, at least one: {step_seconds}")
    xs, ys = np.array([b for b, _ in points], float), np.array([s for _, s in points])
    if len(xs) == 1:
        return lambda rows: float(ys[0])
    slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])

    def at(rows: int) -> float:
        if rows > xs[-1]:
            return float(max(ys[-1] + slope * (rows - xs[-1]), ys[-1]))
        return float(np.interp(rows, xs, ys))
    return at


def simulate_batching(lengths: Sequence[int], arrivals: Sequence[float], *, policy: str, batch_size: int,
                      step_seconds=None, prompt_lens: Sequence[int] | None = None, kv_blocks: int | None = None,
                      block_size: int = 16, max_seq_len: int = 4096) -> dict:
    """Serve requests with output ``lengths`` arriving at ``arrivals`` (s) under ``policy`` ("static" or
    "continuous"), at most ``batch_size`` rows per decode step and, if ``kv_blocks`` is given, within that many KV
    blocks of ``block_size`` tokens (worst case reserved at admission, as the engine does).

    Returns ``timeline`` (a frame: step start/end times, rows computed, rows still producing tokens),
    ``finish`` (per request, s), ``latency`` (finish - arrival), ``tokens``, ``makespan``, ``throughput`` (tokens/s
    over the makespan), ``wasted`` (share of computed rows that belonged to finished requests) and ``mean_rows``.
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; choose one of {', '.join(POLICIES)}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if len(lengths) != len(arrivals) or not len(lengths):
        raise ValueError(f"one arrival per request, at least one: {len(lengths)} lengths, {len(arrivals)} arrivals")
    prompt_lens = list(prompt_lens) if prompt_lens is not None else [32] * len(lengths)
    step = step_time_function(step_seconds)
    requests = [Request(i, [0] * p, int(n)) for i, (p, n) in enumerate(zip(prompt_lens, lengths))]
    capacity = kv_blocks if kv_blocks is not None else 10**9
    for request in requests:
        if not does_fit(request, [], capacity, block_size=block_size, max_seq_len=max_seq_len):
            raise ValueError(f"request {request.id} alone needs more than the {kv_blocks} KV blocks; raise kv_blocks")
    order = sorted(range(len(requests)), key=lambda i: (arrivals[i], i))
    queue, next_arrival = BucketedQueue(), 0
    remaining = {r.id: r.output_length for r in requests}
    finish = [float("nan")] * len(requests)
    rows_log = []  # (start, end, rows computed, rows producing tokens)
    t = 0.0

    def take_arrivals(now: float) -> None:
        nonlocal next_arrival
        while next_arrival < len(order) and arrivals[order[next_arrival]] <= now + 1e-12:
            queue.put(requests[order[next_arrival]])
            next_arrival += 1

    def admit(resident: list[Request]) -> None:
        while len(resident) < batch_size:
            request = queue.constrained_get(lambda r: does_fit(r, resident, capacity, block_size=block_size,
                                                               max_seq_len=max_seq_len))
            if request is None:
                return
            resident.append(request)

    active: list[Request] = []
    while any(remaining.values()):
        take_arrivals(t)
        if policy == "continuous" or not active:
            admit(active)
        if not active:  # nothing to run: wait for the next request
            t = max(t, arrivals[order[next_arrival]])
            continue
        useful = [r for r in active if remaining[r.id] > 0]
        dt = step(len(active))
        rows_log.append((t, t + dt, len(active), len(useful)))
        t += dt
        for request in useful:
            remaining[request.id] -= 1
            if remaining[request.id] == 0:
                finish[request.id] = t
        if policy == "continuous":
            active = [r for r in active if remaining[r.id] > 0]
        elif all(remaining[r.id] == 0 for r in active):  # static: the batch ends with its slowest request
            active = []
    timeline = pd.DataFrame(rows_log, columns=["start", "end", "rows", "useful"])
    tokens = int(sum(lengths))
    computed = int(timeline["rows"].sum())
    latency = np.array(finish) - np.array(arrivals, dtype=float)
    return {"policy": policy, "timeline": timeline, "finish": finish, "latency": latency.tolist(), "tokens": tokens,
            "makespan": t, "throughput": tokens / t, "wasted": 1 - tokens / computed if computed else 0.0,
            "mean_rows": float((timeline["rows"] * (timeline["end"] - timeline["start"])).sum() / t),
            "steps": len(timeline)}


def compare_policies(lengths, arrivals, *, batch_size: int, **kwargs) -> dict[str, dict]:
    """:func:`simulate_batching` for both policies on the same requests."""
    return {policy: simulate_batching(lengths, arrivals, policy=policy, batch_size=batch_size, **kwargs)
            for policy in POLICIES}
