"""Continuous batching (disaggregated prefill/decode) vs static batching: throughput and latency.

Two workloads with the same prompts: output lengths of high variance (log-normal) and uniform ones. For each,
the continuous engine (two processes, KV over torch.distributed) and the static baseline (same model, same
batch size) serve every request; every output is checked against the request generated alone (greedy, batch
size 1), which also measures what serving one request at a time would give.
"""
from __future__ import annotations

import time

import torch

from helpers.batching.engine import run_continuous, run_static_baseline, summarize
from helpers.batching.model_ops import generate_alone, model_max_len, model_source
from helpers.batching.workers import EngineConfig
from helpers.batching.workload import WORKLOADS, make_workload, prompt_token_stream
from helpers.models import load_cpu_tokenizer
from helpers.timing import measure_interleaved

COLUMNS = [("policy", "{:>10}"), ("throughput_tok_s", "{:>8.0f}"), ("ttft_p50_s", "{:>7.3f}"), ("ttft_p90_s", "{:>7.3f}"),
           ("tpot_p50_s", "{:>7.4f}"), ("tpot_p90_s", "{:>7.4f}"), ("e2e_p50_s", "{:>7.2f}"), ("e2e_p90_s", "{:>7.2f}"),
           ("e2e_p99_s", "{:>7.2f}"), ("mean_rows", "{:>5.2f}"), ("wasted_row_fraction", "{:>6.2f}"),
           ("prefill_padding_fraction", "{:>6.2f}")]
HEADINGS = ["policy", "tok/s", "TTFT50", "TTFT90", "TPOT50", "TPOT90", "E2E50", "E2E90", "E2E99", "rows", "waste",
            "pad"]


def add_arguments(parser) -> None:
    parser.add_argument("--model", default="cpu-pair/target", help="helpers.models name or a saved model directory")
    parser.add_argument("--requests", type=int, default=64, help="requests per workload")
    parser.add_argument("--mean-output", type=int, default=32, help="mean output length (tokens)")
    parser.add_argument("--max-output", type=int, default=256, help="longest output of the high-variance workload")
    parser.add_argument("--batch", type=int, default=8, help="decode batch size (static batch size too)")
    parser.add_argument("--prefill-batch", type=int, default=4, help="most prompts per prefill forward")
    parser.add_argument("--kv-blocks", type=int, default=256, help="decode worker KV memory in blocks")
    parser.add_argument("--block-size", type=int, default=16, help="tokens per KV block")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads of the decode worker (the prefill worker: as many, or the cores left)")
    parser.add_argument("--static-threads", type=int, default=1,
                        help="torch threads of the single-process static baseline (default: as one engine worker)")
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated: " + ", ".join(WORKLOADS))
    parser.add_argument("--repeats", type=int, default=3,
                        help="continuous/static pairs per workload, in alternating order (the machine's load drifts)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-check", action="store_true", help="skip the per-request greedy reference")


def reference_outputs(model, requests, cfg: EngineConfig, threads: int) -> tuple[dict[int, list[int]], float]:
    """Every request generated alone, greedy; returns outputs and the seconds it took (batch size 1 serving)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        start = time.perf_counter()
        outputs = {r.id: generate_alone(model, r.input_tokens, r.max_new_tokens(cfg.max_seq_len), cfg.eos_token_id)
                   for r in requests}
        return outputs, time.perf_counter() - start
    finally:
        torch.set_num_threads(previous)


def compare(workload: str, requests, cfg: EngineConfig, source, model, *, static_threads: int, check: bool,
            repeats: int = 1) -> dict:
    """Serve one workload both ways ``repeats`` times, alternating which goes first (on a shared machine the load
    drifts, and a fixed order would hand one policy the quieter minutes: the interleaved rounds of
    :func:`helpers.timing.measure_interleaved`); keeps the pair with the median speedup. The speedup is the ratio
    of the runs' own throughputs (tokens over makespan, from the requests' timestamps), not of wall times, which
    would count the worker processes' start-up. Checks every output against the request generated alone when
    ``check``."""
    results = {"continuous": [], "static": []}
    serve = {"continuous": lambda: results["continuous"].append(run_continuous(source, requests, cfg)),
             "static": lambda: results["static"].append(
                 run_static_baseline(model, requests, cfg, threads=static_threads))}
    measure_interleaved(serve, repeats=repeats)
    pairs = []
    for continuous, static in zip(results["continuous"], results["static"]):
        speedup = summarize(continuous)["throughput_tok_s"] / summarize(static)["throughput_tok_s"]
        pairs.append((speedup, {"continuous": continuous, "static": static}))
    pairs.sort(key=lambda pair: pair[0])
    speedup, runs = pairs[len(pairs) // 2]
    out = {"workload": workload, "speedup": speedup, "speedups": [round(p[0], 3) for p in pairs], "runs": runs,
           "continuous": summarize(runs["continuous"]), "static": summarize(runs["static"])}
    if check:
        reference, seconds = reference_outputs(model, requests, cfg, cfg.threads_per_worker)
        out["alone_tok_s"] = sum(map(len, reference.values())) / seconds
        out["mismatches"] = sorted({(policy, r.id) for _, pair_runs in pairs for policy, run in pair_runs.items()
                                    for r in run.requests if r.generated != reference[r.id]})
    return out


def print_table(results: list[dict]) -> None:
    print(f"{'workload':>14} " + " ".join(f"{h:>{len(f.format(0) if 'f' in f else 'x' * 10)}}"
                                         for h, (_, f) in zip(HEADINGS, COLUMNS)))
    for res in results:
        for policy in ("continuous", "static"):
            row = res[policy]
            print(f"{res['workload']:>14} " + " ".join(f.format(row[key]) for key, f in COLUMNS))
        extra = f"  alone (batch 1): {res['alone_tok_s']:.0f} tok/s" if "alone_tok_s" in res else ""
        print(f"{'':>14} continuous/static throughput: {res['speedup']:.2f}x (median of {res['speedups']}){extra}")


def run(args) -> dict:
    source = model_source(args.model)
    model = source()
    tokenizer = load_cpu_tokenizer()
    tokens = prompt_token_stream(tokenizer)
    cfg = EngineConfig(kv_capacity_blocks=args.kv_blocks, block_size=args.block_size, max_seq_len=model_max_len(model),
                       max_decode_batch=args.batch, max_prefill_batch=args.prefill_batch,
                       threads_per_worker=args.threads)
    results = []
    for workload in args.workloads.split(","):
        requests = make_workload(workload, args.requests, tokens, seed=args.seed, mean_output=args.mean_output,
                                 max_output=args.max_output)
        results.append(compare(workload, requests, cfg, source, model, static_threads=args.static_threads,
                               check=not args.no_check, repeats=args.repeats))
    print_table(results)
    figures = {"model": args.model, "requests": args.requests, "batch": args.batch, "threads": args.threads,
               "static_threads": args.static_threads, "repeats": args.repeats}
    for res in results:
        w = res["workload"]
        figures[f"{w}_speedup"] = round(res["speedup"], 3)
        figures[f"{w}_speedups"] = res["speedups"]
        for policy in ("continuous", "static"):
            for key in ("throughput_tok_s", "ttft_p50_s", "tpot_p50_s", "e2e_p90_s"):
                figures[f"{w}_{policy}_{key}"] = round(res[policy][key], 4)
        if "mismatches" in res:
            figures[f"{w}_alone_tok_s"] = round(res["alone_tok_s"], 1)
            figures[f"{w}_outputs_equal_alone"] = not res["mismatches"]
    if "high_variance_speedup" in figures:
        figures["goal_speedup_1_5x_met"] = figures["high_variance_speedup"] >= 1.5
    return figures
