"""Notebook 14's measurements: speculation in a closed batch (:func:`closed_batch`: one ragged batch, plain rounds
against fixed-γ rounds, with Eq. 5's terms), and the two-process engine serving a Poisson workload
(:func:`serve`: one run of one policy, summarised, every output checked)."""
from __future__ import annotations

import statistics
import time

import numpy as np
import torch

from helpers.batching.engine import busy_seconds, run_continuous, summarize
from helpers.batching.model_ops import prefill
from helpers.batching.policy import SpecConfig
from helpers.batching.request import Request
from helpers.batching.speculation import SpecDecodeBatch, make_drafter
from helpers.batching.workers import EngineConfig
from helpers.specdec.analysis import predicted_speedup
from helpers.stats import range_spread

POLICIES = ("none", "fixed", "adaptive")  # the engine without a drafter, every row γ every step, Eq. 5 per step


def poisson_arrivals(count: int, rate_per_s: float, seed: int) -> list[float]:
    """``count`` arrival times (seconds, the first at 0) of a Poisson process of ``rate_per_s`` requests/s."""
    if not rate_per_s > 0:
        raise ValueError(f"the arrival rate must be > 0 requests/s, got {rate_per_s!r}")
    gaps = np.random.default_rng(seed).exponential(1 / rate_per_s, count)
    return (np.cumsum(gaps) - gaps[0]).tolist()


def with_arrivals(requests: list[Request], arrivals: list[float]) -> list[Request]:
    """Fresh copies of ``requests`` arriving at ``arrivals``."""
    return [Request(r.id, list(r.input_tokens), r.output_length, arrival_s=t) for r, t in zip(requests, arrivals)]


@torch.inference_mode()
def _run_rounds(target, drafter, prompts: list[list[int]], new_tokens: int, gamma: int) -> dict:
    """One closed batch: prefill ``prompts``, then rounds of ``gamma`` drafts per row (0: plain steps) until the
    first row has ``new_tokens``; every row stays in the batch, so each round runs at the full batch size."""
    requests = [Request(i, list(p), new_tokens + gamma + 1) for i, p in enumerate(prompts)]
    first, *prefilled = prefill(target, requests, features=drafter.needs_features)
    for request, token in zip(requests, first):
        request.generated.append(token)
    batch = SpecDecodeBatch(target, drafter)
    batch.add(requests, *prefilled)
    drafted = accepted = rejections = rounds = 0
    draft_s = verify_s = 0.0
    committed = 0
    start = time.perf_counter()
    while min(len(r.generated) for r in requests) < new_tokens:
        new, info = batch.advance([gamma] * len(requests))
        for request, tokens in zip(requests, new):
            request.generated.extend(tokens)
            committed += len(tokens)
        rounds += 1
        draft_s, verify_s = draft_s + info["draft_s"], verify_s + info["verify_s"]
        drafted += sum(info["drafted"])
        accepted += sum(info["accepted"])
        rejections += sum(a < d for a, d in zip(info["accepted"], info["drafted"]))
    seconds = time.perf_counter() - start
    return {"tokens": [r.generated for r in requests], "seconds": seconds, "committed": committed,
            "rounds": rounds, "draft_s": draft_s / rounds, "verify_s": verify_s / rounds, "drafted": drafted,
            "accepted": accepted, "rejections": rejections}


def closed_batch(target, make, prompts: list[list[int]], *, new_tokens: int, gamma: int, repeats: int) -> dict:
    """Plain decoding against fixed-γ speculation over one closed batch of ``prompts`` (``make()``: a fresh
    drafter), interleaved, the order alternating, after one warm-up pair. Returns the median tokens/s ratio
    (``speedup``) and its spread, ``T_T`` (a plain step), the round's ``T_D`` and ``T_V``, α (accepted drafts over
    acceptance tests), Eq. 5's speedup from those terms, and ``identical`` (the tokens both produced agree)."""
    runs = {"plain": [], "spec": []}
    for r in range(repeats + 1):
        order = [("plain", 0), ("spec", gamma)]
        for name, g in (order if r % 2 else order[::-1]):
            out = _run_rounds(target, make(), prompts, new_tokens, g)
            if r:
                runs[name].append(out)
    rate = lambda out: out["committed"] / out["seconds"]  # noqa: E731
    ratios = [rate(s) / rate(p) for p, s in zip(runs["plain"], runs["spec"])]
    step_s = statistics.median(p["seconds"] / p["rounds"] for p in runs["plain"])
    spec = runs["spec"]
    draft_s, verify_s = (statistics.median(s[k] for s in spec) for k in ("draft_s", "verify_s"))
    tests = spec[0]["accepted"] + spec[0]["rejections"]
    alpha = spec[0]["accepted"] / tests if tests else 0.0
    c, v = draft_s / gamma / step_s, verify_s / step_s
    plain_tokens = runs["plain"][0]["tokens"]
    identical = all(a[:len(b)] == b[:len(a)] for out in spec for a, b in zip(out["tokens"], plain_tokens))
    return {"speedup": statistics.median(ratios), "spread": range_spread(ratios),
            "target_step_s": step_s, "T_D_s": draft_s / gamma, "T_V_s": verify_s, "draft_ratio": c, "verify_ratio": v,
            "alpha": alpha, "tau": spec[0]["committed"] / spec[0]["rounds"] / len(prompts),
            "eq5_speedup": float(predicted_speedup(gamma, min(alpha, 0.999), c, v)), "identical": identical}


def drafter_factory(name: str, *, draft_model=None, limit: int, window: int, sinks: int):
    return lambda: make_drafter(name, draft_model=draft_model, limit=limit, window=window, sinks=sinks)


def speculation_config(policy: str, *, drafter: str, draft: str | None, gamma: int, window: int = 64,
                       sinks: int = 4) -> SpecConfig | None:
    """The engine's speculation for ``policy`` (``POLICIES``): None for ``none`` (notebook 05's decode step)."""
    if policy not in POLICIES:
        raise ValueError(f"unknown serving policy {policy!r}; choose one of {', '.join(POLICIES)}")
    if policy == "none":
        return None
    return SpecConfig(drafter=drafter, draft=draft, policy=policy, gamma=gamma, window=window, sinks=sinks)


def serve(source, requests: list[Request], cfg: EngineConfig) -> tuple[dict, dict[int, list[int]]]:
    """One engine run: :func:`~helpers.batching.engine.summarize`'s numbers, ``decode_tok_s`` (output tokens over
    the time some request was decoding: the decode worker's rate, without the prefill) and what speculation did
    (the share of steps that drafted, their mean γ, α: accepted drafts over acceptance tests); and every request's output by id."""
    result = run_continuous(source, requests, cfg)
    out = summarize(result)
    tokens = out["output_tokens"]
    out["decode_tok_s"] = tokens / busy_seconds([(r.t_first_token, r.t_done) for r in result.requests])
    steps, rows = result.timeline, result.extra["speculation"].values()
    drafting = [s for s in steps if s.get("gamma", 0) > 0]
    accepted, rejections = sum(r["accepted"] for r in rows), sum(r["rejections"] for r in rows)
    out.update({"drafting_steps": len(drafting) / len(steps) if steps else 0.0,
                "mean_gamma": float(np.mean([s["gamma"] for s in drafting])) if drafting else 0.0,
                "alpha": accepted / (accepted + rejections) if accepted + rejections else float("nan")})
    return out, {r.id: r.generated for r in result.requests}
