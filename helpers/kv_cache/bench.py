"""KV cache: greedy generation with vs without the cache on the minimal decoder (``helpers.kv_cache``).

    python -m helpers.bench kv_cache                      # CPU pair target, 256 new tokens, 1 thread
    python -m helpers.bench kv_cache --device cuda --model Qwen/Qwen3-0.6B --weights random

Goal on the 2-core CPU with the CPU pair's target: cached generation of 256 new tokens at least 5x faster
than uncached, with identical tokens. transformers' own ``generate`` (with its cache) is timed alongside as
a reference. When ``data/cpu_pair/target`` is not trained yet, the same architecture with random weights
stands in (labelled "random").
"""
from __future__ import annotations

import argparse

import torch

import pandas as pd

from helpers import tables
from helpers.generation.loading import CPU_PAIR_TARGET, load_model_or_stand_in
from helpers.kv_cache.decode import generate
from helpers.kv_cache.sweep import make_prompt
from helpers.models.decoder import from_hf
from helpers.hardware import device_info, resolve_device
from helpers.timing import measure_interleaved

GOAL_SPEEDUP = 5.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=CPU_PAIR_TARGET,
                        help="a Qwen3, Llama or OLMo name known to helpers.models (default: the CPU pair's target)")
    parser.add_argument("--weights", default=None, help="'random' for random weights of a handout id")
    parser.add_argument("--new-tokens", type=int, default=256, help="new tokens per generation")
    parser.add_argument("--prompt-len", type=int, default=32, help="prompt length in tokens")
    parser.add_argument("--batch-size", type=int, default=1, help="sequences per batch (equal length)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs before timing")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per mode (interleaved; medians reported)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads, recorded with the result (1: robust to other load on a small CPU)")
    parser.add_argument("--device", default="cpu", help="'cpu' or 'cuda'")
    parser.add_argument("--dtype", default=None, help="float32 (CPU default) or bfloat16 (CUDA default)")
    parser.add_argument("--skip-transformers", action="store_true", help="do not time transformers' generate")
    parser.add_argument("--report-profile", default=None,
                        help="also write the figures for the report (report/generated/<profile>/04_kv_bench.*)")


def time_interleaved(modes: dict, *, warmup: int, repeats: int, device) -> tuple[dict, dict]:
    """Warm every mode up, then time them in turn (A, B, C, C, B, A, ...: :func:`helpers.timing.measure_interleaved`)
    so that a change in machine load hits all modes alike. Returns ``({mode: Timing}, {mode: tokens of its last
    run})``."""
    tokens = {}

    def call(name):
        tokens[name] = modes[name]()

    timings = measure_interleaved({name: (lambda name=name: call(name)) for name in modes},
                                  warmup=warmup, repeats=repeats, device=device)
    return timings, tokens


def run(args: argparse.Namespace) -> dict:
    device = resolve_device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype) if args.dtype else (torch.bfloat16 if device.type == "cuda" else torch.float32)
    hf_model, tokenizer = load_model_or_stand_in(args.model, args.weights, device, dtype)
    model = from_hf(hf_model)
    input_ids = make_prompt(tokenizer, args.prompt_len, args.batch_size, model.config.vocab_size, device)
    n = args.new_tokens

    modes = {
        "minimal, with cache": lambda: generate(model, input_ids, n, use_cache=True),
        "minimal, without cache": lambda: generate(model, input_ids, n, use_cache=False),
    }
    if not args.skip_transformers:
        def transformers_cached():
            with torch.inference_mode():
                out = hf_model.generate(input_ids, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                                        use_cache=True, pad_token_id=hf_model.config.pad_token_id or 0)
            return out[:, input_ids.shape[1]:]

        modes["transformers, with cache"] = transformers_cached

    info = device_info(device)
    weights = getattr(hf_model, "weights_label", "unknown")
    print(f"KV cache benchmark: {args.model} ({weights} weights, {sum(p.numel() for p in model.parameters()):,} "
          f"parameters), {info['device_name']}, {info['cpu_threads']} threads, {dtype}")
    print(f"batch {args.batch_size}, prompt {args.prompt_len} tokens, {n} new tokens, "
          f"warm-up {args.warmup}, repeats {args.repeats}")
    timings, tokens = time_interleaved(modes, warmup=args.warmup, repeats=args.repeats, device=device)

    # Best of the repeats (timeit's convention): other load on a shared machine only ever adds time, so the
    # fastest run is the best estimate of what the code costs. Medians and mean ± std are printed beside it.
    best = {name: min(timing.samples) for name, timing in timings.items()}
    uncached = best["minimal, without cache"]
    print(f"\n{'mode':<26} {'best (s)':>9} {'median (s)':>10} {'mean ± std (s)':>17} {'ms/token':>9} {'tokens/s':>9} "
          f"{'vs uncached':>12}")
    for name, timing in timings.items():
        print(f"{name:<26} {best[name]:>9.3f} {timing.median:>10.3f} {timing.mean:>9.3f} ± {timing.std:<5.3f}"
              f"{1000 * best[name] / n:>9.2f}{args.batch_size * n / best[name]:>10.1f}{uncached / best[name]:>11.2f}x")
    median_speedup = timings["minimal, without cache"].median / timings["minimal, with cache"].median

    speedup = uncached / best["minimal, with cache"]
    identical = torch.equal(tokens["minimal, with cache"], tokens["minimal, without cache"])
    matches_transformers = (torch.equal(tokens["minimal, with cache"], tokens["transformers, with cache"])
                            if "transformers, with cache" in tokens else None)
    goal_met = identical and speedup >= GOAL_SPEEDUP
    print(f"\ncached vs uncached: {speedup:.2f}x (best of {args.repeats}; medians: {median_speedup:.2f}x), "
          f"identical tokens: {identical}"
          + ("" if matches_transformers is None else f", same tokens as transformers: {matches_transformers}")
          + f"; goal (>= {GOAL_SPEEDUP:g}x, identical): {'met' if goal_met else 'NOT met'}")

    figures = {
        "benchmark": "kv_cache",
        "model": args.model,
        "weights": weights,
        "device_name": info["device_name"],
        "threads": info["cpu_threads"],
        "dtype": str(dtype).replace("torch.", ""),
        "batch_size": args.batch_size,
        "prompt_len": args.prompt_len,
        "new_tokens": n,
        "cached_s": best["minimal, with cache"],
        "uncached_s": uncached,
        "speedup": speedup,
        "cached_median_s": timings["minimal, with cache"].median,
        "uncached_median_s": timings["minimal, without cache"].median,
        "median_speedup": median_speedup,
        "identical_tokens": identical,
        "goal_speedup": GOAL_SPEEDUP,
        "goal_met": goal_met,
    }
    if "transformers, with cache" in timings:
        figures["transformers_cached_s"] = best["transformers, with cache"]
        figures["matches_transformers"] = matches_transformers
    if args.report_profile:
        write_report(args.report_profile, figures, timings)
    return figures


def write_report(profile: str, figures: dict, timings: dict) -> None:
    """The benchmark's table and numbers for the report (section 2.2 quotes them)."""
    n, batch = figures["new_tokens"], figures["batch_size"]
    rows = [{"mode": name, "best (s)": min(t.samples), "median (s)": t.median, "mean (s)": t.mean, "std (s)": t.std,
             "ms/token": 1000 * min(t.samples) / n, "tokens/s": batch * n / min(t.samples),
             "vs uncached": figures["uncached_s"] / min(t.samples)} for name, t in timings.items()]
    tables.write_table(pd.DataFrame(rows), "04_kv_bench", profile, float_format="{:.3g}",
                       caption=f"python -m helpers.bench kv_cache: {figures['model']} ({figures['weights']} weights), "
                               f"{n} new tokens after {figures['prompt_len']} prompt tokens, "
                               f"{tables.count(figures['threads'], 'thread')}, {figures['device_name']}.")
    tables.write_numbers("04_kv_bench", profile, {
        "kvBenchSpeedup": figures["speedup"], "kvBenchMedianSpeedup": figures["median_speedup"],
        "kvBenchRepeats": len(next(iter(timings.values())).samples), "kvBenchNew": n, "kvBenchPrompt": figures["prompt_len"],
        "kvBenchCachedS": figures["cached_s"], "kvBenchUncachedS": figures["uncached_s"],
        "kvBenchIdentical": figures["identical_tokens"], "kvBenchThreads": figures["threads"],
        "kvBenchWeights": figures["weights"], "kvBenchGoal": figures["goal_speedup"],
        "kvBenchGoalMet": figures["goal_met"]})
