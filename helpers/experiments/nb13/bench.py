"""Drafting from the target itself vs a distilled draft on the CPU pair: ``python -m helpers.bench heads``.

One interleaved run (greedy, EOS ignored) on held-out prompts of every source of notebook 13's methods
(:func:`helpers.experiments.nb13.specs`). Prints τ, α̂ and the speedup of every method and returns the headline
figures.
"""
from __future__ import annotations

import torch

from helpers.experiments import nb13
from helpers.experiments.comparison import add_bench_arguments, best_of, compare_methods, summarise_methods
from helpers.prompts import encode_prompts, load_prompts, select_prompts


def add_arguments(parser) -> None:
    parser.add_argument("--draft", default="cpu-pair/draft-2l", help="the distilled draft the others are compared with")
    parser.add_argument("--gammas", type=int, nargs="+", default=[3, 4, 5, 6], help="γ of linear and feature drafts")
    parser.add_argument("--medusa-trees", default="2-2-1-1,3-2-2-1", help="static Medusa trees, widths per depth")
    parser.add_argument("--stop-below", type=float, default=0.1, help="the feature draft's confidence stop")
    parser.add_argument("--backoff", type=int, default=0,
                        help="the feature draft's back-off: most rounds to pause (0: never)")
    add_bench_arguments(parser, 8, "held-out CPU prompts (round-robin over sources)")


def _params(args) -> dict:
    return {"device": "cpu", "fd_target": "cpu-pair/target", "fd_draft": args.draft, "fd_dtype": "float32",
            "fd_gammas": args.gammas, "fd_dynamic": [6, 2, 10], "fd_stop_below": args.stop_below,
            "fd_backoff": args.backoff,
            "fd_medusa_trees": [[int(w) for w in shape.split("-")] for shape in args.medusa_trees.split(",") if shape]}


def run(args) -> dict:
    torch.set_num_threads(args.threads)
    params = _params(args)
    target, drafters, tokenizer = nb13.load_models(params)
    cases = encode_prompts(tokenizer, select_prompts(load_prompts("cpu"), args.prompts), "cpu")
    print(f"threads: {torch.get_num_threads()}; {len(cases)} prompts, {args.max_new_tokens} new tokens, "
          f"{args.repeats} interleaved repeats")
    rows = compare_methods(target, drafters, cases, nb13.specs(params), args.max_new_tokens, repeats=args.repeats,
                           progress=True)
    summary = summarise_methods(rows)
    print(f"\n{'method':<22}{'drafter':<15}{'speedup':>9}{'tau':>7}{'alpha':>7}{'same':>6}")
    figures = {"threads": torch.get_num_threads(), "draft": args.draft, "max_new_tokens": args.max_new_tokens,
               "prompts": len(cases), "methods": {}}
    for row in summary.itertuples():
        alpha = nb13.method_alpha(rows, row.label)
        print(f"{row.label:<22}{row.drafter:<15}{row.speedup:>8.2f}x{row.tau:>7.2f}{alpha:>7.3f}"
              f"{'yes' if row.lossless else 'NO':>6}")
        figures["methods"][row.label] = {"speedup": row.speedup, "tau": row.tau, "alpha": alpha}
    for name, methods in (("best_linear", "linear"), ("medusa", "medusa"), ("eagle", "eagle"), ("lookup", "lookup")):
        best = best_of(summary, methods)
        figures[f"{name}_label"], figures[f"{name}_speedup"] = best.label, best.speedup
    figures["eagle_over_best_linear"] = figures["eagle_speedup"] / figures["best_linear_speedup"]
    figures["lossless"] = bool(summary.lossless.all())
    return figures
