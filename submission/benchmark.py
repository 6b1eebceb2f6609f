# Name / Andrew ID: Test Student / tests
# (the name and Andrew ID the handout is issued to; a student handing these files in puts their own here)
"""The handout's benchmarking script (§4.3): ``decode()`` against plain autoregressive decoding over prompts.jsonl.

    python submission/benchmark.py                          # CPU pair, gamma 3, 64 new tokens, greedy
    python submission/benchmark.py --gamma 2 3 5 7          # the handout's lookaheads
    python submission/benchmark.py --prompts course/prompts.jsonl --target Qwen/Qwen3-8B --draft Qwen/Qwen3-1.7B \
        --device cuda --gamma 2 3 5 7                       # the course's prompts on the handout's pair

Which prompts: ``--prompts PATH`` names a prompts.jsonl (one JSON object per line with the prompt text in
``prompt``, and ideally ``id`` and ``source``: :func:`submission.make_prompts.read_prompts` says what it accepts
and names the problem in a missing or malformed file). Without it the benchmark reads ``submission/prompts.jsonl``,
the workbook's *stand-in* for the course's file (20 prompts cut from the CPU pair's held-out text, written by
``make_prompts.py``), not the course's prompts: figures for the handout's table come from ``--prompts`` with the
course's file.

For every prompt it prints the autoregressive (AR) wall-clock time, the speculative wall-clock time, the
acceptance rate alpha and the speedup (AR time / speculative time); then the same per data source and in total,
and as its last line one JSON object with every figure.

How it measures: ``torch.manual_seed(42)`` first; one untimed warm-up of each method; then prompt by prompt, the
AR baseline and ``decode()`` at every gamma, each timed ``--repeats`` times (the fastest run counts) with
:class:`helpers.timing.Timer`, which synchronises on CUDA. The AR baseline is
:func:`helpers.specdec.autoregressive_generate` on transformers' forward with a ``DynamicCache``
(``runtime="transformers"``), the same forward and cache as ``decode()``, one target forward per token, so the
ratio measures speculation, not implementation quality.
alpha is the maximum-likelihood per-token acceptance (:func:`helpers.specdec.analysis.estimate_alpha`) pooled over
the rounds of the prompts it covers. At temperature 0 the benchmark also checks that ``decode()`` returned
exactly the AR tokens (speculative decoding is lossless). A prompt whose output mostly repeats itself (more than
half of its 4-grams seen before in it, :func:`helpers.stats.repeated_ngram_share`) is flagged "loop" beside its
speedup: drafts are easy to guess in a loop. Timings depend on the machine and on what else runs
on it: on a shared CPU, run it when the machine is otherwise idle.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file (python submission/benchmark.py): make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

from helpers.hardware import device_info
from helpers.specdec import autoregressive_generate
from helpers.specdec.analysis import estimate_alpha
from helpers.timing import Timer
from helpers.stats import REPETITIVE_SHARE, repeated_ngram_share
from submission.make_prompts import PROMPTS_PATH, PromptsFileError, read_prompts
from submission.specdec import DTYPES, SEED, add_model_arguments, decode, encode, load_models

BASELINE_RUNTIME = "transformers"  # the AR baseline runs on the forward and cache decode() uses


def _fastest(run, repeats: int, device):
    """(result of the last call, fastest wall-clock seconds of ``repeats`` calls)."""
    best, result = math.inf, None
    for _ in range(repeats):
        with Timer(device) as timer:
            result = run()
        best = min(best, timer.seconds)
    return result, best


def _alpha(results) -> float:
    accepted = [k for r in results for k in r.stats.accepted_per_round]
    gammas = [g for r in results for g in r.stats.gamma_per_round]
    if not any(gammas):
        return float("nan")
    return estimate_alpha(accepted, gammas)


def _summary(rows: list[dict], results: list) -> dict:
    ar, sd = sum(r["ar_s"] for r in rows), sum(r["sd_s"] for r in rows)
    return {"prompts": len(rows), "new_tokens": sum(r["new_tokens"] for r in rows), "ar_s": ar, "sd_s": sd,
            "alpha": _alpha(results), "speedup": ar / sd, "identical": all(r["identical"] for r in rows)}


def run_benchmark(target, draft, tokenizer, prompts: list[dict], gammas=(3,), max_new_tokens: int = 64,
                  temperature: float = 0.0, repeats: int = 1, verbose: bool = True) -> dict:
    """Time AR and ``decode()`` per prompt and gamma; returns {'device', 'per_prompt', 'per_source', 'total'}.

    ``per_prompt``: one row per (gamma, prompt) with ``ar_s``, ``sd_s``, ``alpha``, ``speedup``, ``new_tokens``,
    ``identical`` (decode() returned the AR tokens; only meaningful at temperature 0, else None),
    ``repeated_4gram_share`` and ``repetitive`` (the output is mostly a loop: its speedup is flattered).
    ``per_source`` and ``total``: keyed by gamma, the sums of the times, pooled alpha and the speedup of the sums.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    device = next(target.parameters()).device
    cases = [{**row, "input_ids": encode(tokenizer, row["prompt"], device)} for row in prompts]
    say = print if verbose else (lambda *a, **k: None)

    torch.manual_seed(SEED)
    warm = cases[0]["input_ids"]  # warm-up (allocation, kernel selection), not timed
    autoregressive_generate(target, warm, max_new_tokens, temperature, runtime=BASELINE_RUNTIME)
    decode(target, draft, warm, max_new_tokens, gammas[0], temperature)

    # prompt by prompt, AR then every gamma: each ratio compares runs taken close together in time
    ar, sd = {}, {gamma: {} for gamma in gammas}
    for case in cases:
        torch.manual_seed(SEED)
        ar[case["id"]] = _fastest(
            lambda: autoregressive_generate(target, case["input_ids"], max_new_tokens, temperature,
                                            runtime=BASELINE_RUNTIME), repeats, device)
        for gamma in gammas:
            torch.manual_seed(SEED)
            sd[gamma][case["id"]] = _fastest(
                lambda: decode(target, draft, case["input_ids"], max_new_tokens, gamma, temperature), repeats, device)

    per_prompt, per_source, total = [], {}, {}
    for gamma in gammas:
        say(f"\ngamma = {gamma}\n{'prompt':<14} {'source':<10} {'tokens':>6} {'AR s':>8} {'spec s':>8} "
            f"{'alpha':>6} {'speedup':>8}")
        results = {}
        for case in cases:
            result, seconds = sd[gamma][case["id"]]
            ar_result, ar_seconds = ar[case["id"]]
            results[case["id"]] = result
            row = {"gamma": gamma, "id": case["id"], "source": case["source"],
                   "prompt_tokens": int(case["input_ids"].shape[1]), "new_tokens": int(result.tokens.numel()),
                   "ar_s": ar_seconds, "sd_s": seconds, "alpha": _alpha([result]), "speedup": ar_seconds / seconds,
                   "identical": torch.equal(result.tokens, ar_result.tokens) if temperature == 0 else None,
                   "repeated_4gram_share": repeated_ngram_share(result.tokens.tolist())}
            row["repetitive"] = row["repeated_4gram_share"] > REPETITIVE_SHARE
            per_prompt.append(row)
            say(f"{row['id']:<14} {row['source']:<10} {row['new_tokens']:>6} {row['ar_s']:>8.3f} {row['sd_s']:>8.3f} "
                f"{row['alpha']:>6.3f} {row['speedup']:>7.2f}x"
                + (f"  loop ({row['repeated_4gram_share']:.0%} repeated 4-grams)" if row["repetitive"] else ""))
        rows = [r for r in per_prompt if r["gamma"] == gamma]
        sources = dict.fromkeys(r["source"] for r in rows)
        per_source[gamma] = {s: _summary([r for r in rows if r["source"] == s],
                                         [results[r["id"]] for r in rows if r["source"] == s]) for s in sources}
        total[gamma] = _summary(rows, list(results.values()))
        for name, summary in [*per_source[gamma].items(), ("TOTAL", total[gamma])]:
            say(f"{name:<25} {summary['new_tokens']:>6} {summary['ar_s']:>8.3f} {summary['sd_s']:>8.3f} "
                f"{summary['alpha']:>6.3f} {summary['speedup']:>7.2f}x")
        if temperature == 0 and not total[gamma]["identical"]:
            say("WARNING: decode() differs from greedy autoregressive decoding: it is not lossless")
    return {"device": device_info(device), "per_prompt": per_prompt, "per_source": per_source, "total": total}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description="Benchmark decode() against autoregressive decoding (§4.3).")
    add_model_arguments(parser)
    parser.add_argument("--gamma", type=int, nargs="+", default=[3], help="lookahead(s) to measure")
    parser.add_argument("--prompts", type=Path, default=PROMPTS_PATH,
                        help="a prompts.jsonl file, e.g. the course's (default: the workbook's stand-in, "
                             "submission/prompts.jsonl)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N prompts")
    parser.add_argument("--repeats", type=int, default=3,
                        help="timed runs per prompt and method; the fastest counts (robust to a busy machine)")
    args = parser.parse_args(argv)
    try:  # before loading any model: a wrong path fails at once
        prompts = read_prompts(args.prompts)[: args.limit]
    except PromptsFileError as error:
        parser.error(str(error))
    if args.prompts.resolve() == PROMPTS_PATH.resolve():
        print(f"prompts: {PROMPTS_PATH} (the workbook's stand-in; --prompts PATH for the course's file)")
    else:
        print(f"prompts: {args.prompts} ({len(prompts)} prompts)")

    torch.manual_seed(SEED)
    target, draft, tokenizer = load_models(args.target, args.draft, device=args.device, dtype=DTYPES.get(args.dtype))
    report = run_benchmark(target, draft, tokenizer, prompts, args.gamma, args.max_new_tokens, args.temperature,
                           args.repeats)
    info = report["device"]
    memory = f"{info['total_memory_bytes'] / 2**30:.0f} GiB" if info["total_memory_bytes"] else "memory unknown"
    print(f"\n{args.target} / {args.draft} on {info['device_name']} ({memory}, {info['cpu_threads']} CPU threads), "
          f"{args.max_new_tokens} new tokens, temperature {args.temperature}")
    print(json.dumps({"target": args.target, "draft": args.draft, "prompts": str(args.prompts),
                      "max_new_tokens": args.max_new_tokens,
                      "temperature": args.temperature, **report}))
    return report


if __name__ == "__main__":
    main()
