"""Run a workload with continuous batching (two worker processes) or the static baseline, and summarise it."""
from __future__ import annotations

import copy
import socket
import time
from dataclasses import dataclass, field
from multiprocessing import connection

import numpy as np
import torch.multiprocessing as mp

from helpers.batching.model_ops import DecodeBatch, prefill
from helpers.batching.request import Request, State
from helpers.batching.static import run_static
from helpers.batching.workers import DECODE_RANK, PREFILL_RANK, ROLES, EngineConfig, worker_main
from helpers.timing import measure


class WorkerFailed(RuntimeError):
    """A worker process crashed or reported an error; the message says which and what the other one saw."""


@dataclass
class RunResult:
    policy: str  # "continuous" or "static"
    requests: list[Request]
    timeline: list[dict]  # one row per decode step
    batches: list[dict]  # one row per prefill batch
    extra: dict = field(default_factory=dict)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def validate_workload(requests: list[Request], cfg: EngineConfig) -> None:
    """Raise before starting anything if a request is malformed or could never be served."""
    ids = [r.id for r in requests]
    if len(set(ids)) != len(ids):
        raise ValueError("request ids must be unique")
    memory = cfg.memory()
    for request in requests:
        if request.state is not State.QUEUED:
            raise ValueError(f"request {request.id} is {request.state.value}; pass fresh (queued) requests")
        memory.check_can_ever_fit(request)


def run_continuous(model_source, requests: list[Request], cfg: EngineConfig, *, grace_s: float = 30.0) -> RunResult:
    """Serve ``requests`` with a prefill process and a decode process; returns copies of them, filled in.

    ``model_source`` is a picklable zero-argument callable that loads the model (each process calls it). If a
    worker dies, the other one notices through the transport and exits; this waits at most ``grace_s`` for that
    and raises ``WorkerFailed`` with both sides' story, so nothing hangs.
    """
    validate_workload(requests, cfg)
    if cfg.headroom and hasattr(model_source, "config"):  # before any process starts, where the config is cheap
        cfg.check_context(int(model_source.config().max_position_embeddings))
    requests = copy.deepcopy(requests)
    ctx = mp.get_context("spawn")
    port = _free_port()
    pipes = {role: ctx.Pipe(duplex=False) for role in ROLES.values()}  # (parent end, worker end)
    procs = {ROLES[rank]: ctx.Process(target=worker_main, name=f"{ROLES[rank]}-worker", daemon=True,
                                      args=(rank, port, model_source, requests if rank == PREFILL_RANK else [], cfg,
                                            pipes[ROLES[rank]][1]))
             for rank in (PREFILL_RANK, DECODE_RANK)}
    for role, proc in procs.items():
        proc.start()
        pipes[role][1].close()  # the worker holds its end; ours closing lets a dead worker show up as EOF
    reports, first_failure = {}, None
    try:
        while len(reports) < 2:
            waiting = {pipes[role][0]: role for role in pipes if role not in reports}
            for conn in connection.wait(list(waiting), timeout=0.5):  # sleeps: no polling beside the workers
                role = waiting[conn]
                try:
                    reports[role] = conn.recv()[1:]
                except EOFError:  # died without a word (killed, segfault)
                    procs[role].join(timeout=5)
                    reports[role] = ("died", f"exited with code {procs[role].exitcode} without reporting")
            if first_failure is None and any(status != "ok" for status, _ in reports.values()):
                first_failure = time.monotonic()
            if first_failure is not None and time.monotonic() - first_failure > grace_s:
                for role, proc in procs.items():
                    if role not in reports:
                        proc.kill()
                        reports[role] = ("hung", f"did not notice within {grace_s:.0f} s and was killed")
    finally:
        for role, proc in procs.items():
            proc.join(timeout=grace_s)
            if proc.is_alive():
                proc.kill()
            pipes[role][0].close()
    if any(status != "ok" for status, _ in reports.values()):
        story = "; ".join(f"{role} worker {status}: {payload}" for role, (status, payload) in sorted(reports.items())
                          if status != "ok")
        raise WorkerFailed(f"continuous batching failed: {story}")
    decoded = {row["id"]: row for row in reports["decode"][1]["requests"]}
    speculation = {i: {k: row[k] for k in ("rounds", "accepted", "rejections")} for i, row in decoded.items()
                   if "rounds" in row}
    for request in requests:
        row = decoded[request.id]
        request.generated, request.finish_reason = row["generated"], row["finish_reason"]
        for key in ("t_prefill_start", "t_first_token", "t_last_token", "t_done"):
            setattr(request, key, row[key])
        request.state = State.DONE
    return RunResult("continuous", requests, reports["decode"][1]["timeline"], reports["prefill"][1]["batches"],
                     {"exit_codes": {role: proc.exitcode for role, proc in procs.items()}, "speculation": speculation})


def run_static_baseline(model, requests: list[Request], cfg: EngineConfig, threads: int | None = None) -> RunResult:
    """The static baseline with the same batch size, stop rules and model as ``cfg``; on copies of the requests."""
    validate_workload(requests, cfg)
    requests = copy.deepcopy(requests)
    out = run_static(model, requests, batch_size=cfg.max_decode_batch, max_seq_len=cfg.max_seq_len,
                     eos_token_id=cfg.eos_token_id, threads=threads)
    return RunResult("static", requests, out["timeline"], out["batches"])


def summarize(result: RunResult) -> dict:
    """Throughput, latency percentiles (seconds), padding waste and batch occupancy of one run."""
    reqs = result.requests
    tokens = sum(len(r.generated) for r in reqs)
    makespan = max(r.t_done for r in reqs)
    tpot = np.array([r.tpot for r in reqs if len(r.generated) > 1])
    busy = busy_seconds([(r.arrival_s, r.t_done) for r in reqs])
    out = {"policy": result.policy, "requests": len(reqs), "output_tokens": tokens, "makespan_s": makespan,
           "throughput_tok_s": tokens / makespan, "busy_s": busy, "goodput_tok_s": tokens / busy}
    for name, values in (("ttft", np.array([r.ttft for r in reqs])), ("tpot", tpot),
                         ("e2e", np.array([r.e2e for r in reqs]))):
        for q in (50, 90, 99):
            out[f"{name}_p{q}_s"] = float(np.percentile(values, q)) if len(values) else float("nan")
    rows = np.array([s["rows"] for s in result.timeline])
    active = np.array([s["active"] for s in result.timeline])
    out["decode_steps"] = len(rows)
    out["mean_rows"] = float(rows.mean()) if len(rows) else 0.0
    out["wasted_row_fraction"] = float(1 - active.sum() / rows.sum()) if rows.sum() else 0.0
    padded = sum(b["size"] * b["padded_len"] for b in result.batches)
    out["prefill_padding_fraction"] = 1 - sum(b["prompt_tokens"] for b in result.batches) / padded
    out["mean_prefill_batch"] = float(np.mean([b["size"] for b in result.batches]))
    out["prefill_busy_fraction"] = sum(b["t_end"] - b["t_start"] for b in result.batches) / makespan
    return out


def busy_seconds(intervals) -> float:
    """The length of the union of ``(start, end)`` intervals: the time the engine held at least one request.

    Output tokens over it is the goodput: at a low load the engine idles between requests and tokens over the
    makespan would only repeat the arrival rate, whatever the decoder's speed."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def full_batch_share(timeline, batch_size: int) -> dict:
    """How well a run kept its decode batch full, from a stored timeline (``[[t, rows, active], ...]`` per step):
    between the first and the last step that ran ``batch_size`` rows, the share of steps running at least
    ``batch_size - 1`` rows (``near_full``) and the mean rows there. Before that window the batch is filling up,
    after it only requests that were already running remain. ``first``/``last``: the window's step indices
    (``None`` and a share of 0 when the batch was never full)."""
    rows = np.array([step[1] for step in timeline])
    full = np.flatnonzero(rows >= batch_size)
    if not len(full):
        return {"first": None, "last": None, "near_full": 0.0, "mean_rows": float(rows.mean()) if len(rows) else 0.0}
    window = rows[full[0] : full[-1] + 1]
    return {"first": int(full[0]), "last": int(full[-1]), "near_full": float((window >= batch_size - 1).mean()),
            "mean_rows": float(window.mean())}


def latency_by_length(latencies) -> dict:
    """From stored per-request ``[[ttft, tpot, e2e, output_tokens], ...]``: the median end-to-end latency of the
    short requests (output length at most the median) and of the long ones, and the median TTFT over the shortest
    (a request served at once waits for its prefill only, so the ratio shows how much of TTFT is queueing)."""
    data = np.array(latencies, dtype=float)
    if data.ndim != 2 or data.shape[1] != 4 or not len(data):
        raise ValueError("latencies must be a non-empty list of [ttft, tpot, e2e, output_tokens] rows")
    ttft, e2e, length = data[:, 0], data[:, 2], data[:, 3]
    short = length <= np.median(length)
    return {"short_e2e_p50_s": float(np.median(e2e[short])),
            "long_e2e_p50_s": float(np.median(e2e[~short])) if (~short).any() else float("nan"),
            "ttft_p50_over_min": float(np.median(ttft) / ttft.min())}


def step_time_by_batch(model, batch_sizes: list[int], *, prompt_len: int = 64, steps: int = 16,
                       warmup: int = 3) -> list[dict]:
    """Seconds per decode step at each batch size (same context for every row): the cost of batching.

    Each step appends a token to every row, so ``warmup`` untimed steps are followed by ``steps`` timed ones
    (:func:`helpers.timing.measure`, synchronised on CUDA)."""
    rows = []
    for size in batch_sizes:
        requests = [Request(i, [(7 * i + j) % 97 + 3 for j in range(prompt_len)], steps + warmup + 1)
                    for i in range(size)]
        first_tokens, kvs = prefill(model, requests)
        for request, token in zip(requests, first_tokens):
            request.generated.append(token)
        batch = DecodeBatch(model)
        batch.add(requests, kvs)

        def step():
            for request, token in zip(requests, batch.step()):
                request.generated.append(token)

        seconds = measure(step, warmup=warmup, repeats=steps, device=model.device).mean
        rows.append({"batch": size, "step_s": seconds, "tok_s": size / seconds})
    return rows
