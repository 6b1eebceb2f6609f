"""Speculation inside the continuous-batching engine: ``python -m helpers.bench serving``.

Notebook 14's measurement (closed batches, the engine under Poisson load for no speculation / fixed γ / the policy,
interleaved, and the long-context regime) at the CPU profile's settings unless overridden, kept in memory (nothing is
written to results/). Prints the comparison per load; returns the goal figures: ``low_load_ratio`` (the policy's
goodput over no speculation at the lowest load), ``min_ratio`` (the policy's lowest ratio over every load),
``min_vs_best`` (the policy over the better of fixed γ and none, lowest over the loads), ``long_context_ratio``
(self-draft over none at long context, decode tokens/s), ``lossless`` and ``threads``.
"""
from __future__ import annotations

import torch
import yaml

from helpers import paths
from helpers.batching.speculation import DRAFTERS
from helpers.experiments import nb14


class MemoryStore:
    """A result store that measures every configuration and keeps nothing."""

    budget = None

    def has(self, config: dict) -> bool:
        return False

    def run(self, config: dict, fn, *, meta: dict, rerun: bool = False) -> dict:
        return {**config, **fn(), **meta}


def add_arguments(parser) -> None:
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the decode worker and in process "
                        "(the prefill worker: as many, or the cores left)")
    parser.add_argument("--loads", type=float, nargs="+", help="offered loads (default: params/cpu.yaml)")
    parser.add_argument("--requests", type=int, help="requests per load")
    parser.add_argument("--new-tokens", type=int, help="output tokens per request")
    parser.add_argument("--repeats", type=int, help="interleaved repeats per load and batch size")
    parser.add_argument("--batch-sizes", type=int, nargs="+", help="closed-batch sizes")
    parser.add_argument("--long-requests", type=int, help="long-context requests (0: skip that regime)")
    parser.add_argument("--long-context", type=int, help="tokens per long prompt")
    parser.add_argument("--drafter", choices=DRAFTERS, help="the short requests' drafter (default: params/cpu.yaml)")
    parser.add_argument("--draft", help="its draft: a model name for 'draft', a folder or 'cpu-pair/eagle' for 'feature'")
    parser.add_argument("--gamma", type=int, help="the fixed policy's gamma, the largest the policy considers")


def run(args) -> dict:
    cpu = yaml.safe_load((paths.PARAMS_DIR / "cpu.yaml").read_text(encoding="utf-8"))
    params = {k: v for k, v in cpu.items() if k in nb14.PARAMETERS}
    overrides = {"serving_loads": args.loads, "serving_requests": args.requests,
                 "serving_new_tokens": args.new_tokens, "serving_repeats": args.repeats,
                 "serving_batch_sizes": args.batch_sizes, "serving_long_requests": args.long_requests,
                 "serving_long_context": args.long_context, "serving_drafter": args.drafter,
                 "serving_draft": args.draft, "serving_gamma": args.gamma}
    params.update({k: v for k, v in overrides.items() if v is not None}, serving_threads=args.threads)
    torch.set_num_threads(args.threads)
    frames = nb14.measure(params, lambda name: MemoryStore(), progress=True)
    found = nb14.summary(frames)
    table, n = found["table"], found["numbers"]
    print(f"{params['serving_target']} + {params['serving_draft']} ({params['serving_drafter']}), gamma {params['serving_gamma']}, "
          f"{params['serving_requests']} requests x {params['serving_new_tokens']} tokens, {args.threads} thread(s)")
    print(f"{'load':>6}{'policy':>10}{'rows':>6}{'goodput':>9}{'vs none':>9}{'spread':>8}{'TPOT50':>8}"
          f"{'TTFT99':>8}{'drafts':>8}{'alpha':>7}{'same':>6}")
    for r in table.itertuples():
        print(f"{r.load:>6g}{r.policy:>10}{r.mean_rows:>6.2f}{r.goodput_tok_s:>9.1f}{r.goodput_ratio:>8.2f}x"
              f"{r.goodput_ratio_spread:>8.2f}{1e3 * r.tpot_p50_s:>8.1f}{1e3 * r.ttft_p99_s:>8.0f}"
              f"{r.drafting_steps:>8.2f}{r.alpha:>7.2f}{'yes' if r.lossless else 'NO':>6}")
    for r in frames["batch"].sort_values("batch").itertuples():
        print(f"closed batch {r.batch}: {r.speedup:.2f}x (Eq. 5 {r.eq5_speedup:.2f}x), c {r.draft_ratio:.3f}, "
              f"T_V/T_T {r.verify_ratio:.2f}, alpha {r.alpha:.2f}")
    keys = ("low_load_ratio", "low_tpot_ratio", "low_mean_rows", "min_ratio", "min_vs_best", "noise_pct",
            "crossover_measured", "crossover_eq5", "long_context_ratio", "long_goodput_ratio", "lossless")
    figures = {key: round(n[key], 3) if isinstance(n[key], float) else n[key] for key in keys if key in n}
    figures["lossless"] = bool(n["lossless"])
    figures["threads"] = args.threads
    return figures
