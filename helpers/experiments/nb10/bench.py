"""Trees and lookup vs linear speculation vs plain decoding on the CPU pair: ``python -m helpers.bench tree``.

One interleaved run of every method per workload (greedy, EOS ignored), open-ended and in-context prompts. Prints τ
and the speedup of every method per workload, and returns the headline figures.
"""
from __future__ import annotations

import torch

from helpers.experiments.comparison import add_bench_arguments, best_of, compare_methods, summarise_methods
from helpers.experiments.nb10.study import greedy_continuation, method_specs, tau_against_linear
from helpers.models import load_cpu_model, load_cpu_tokenizer
from helpers.prompts import encode_prompts, in_context_prompts, load_prompts, select_prompts


def default_specs() -> list[dict]:
    """AR, linear γ 3-6, adaptive γ 8 at three stops, three static and three dynamic trees, prompt lookup fixed and
    adaptive; then every other registered method's defaults (:func:`helpers.experiments.nb10.study.method_specs`)."""
    return method_specs((3, 4, 5, 6), [(8, p) for p in (0.02, 0.05, 0.1)],
                        ((2, 1, 1, 1, 1), (2, 2, 1, 1, 1), (3, 2, 1, 1)), ((5, 2, 8), (6, 2, 10), (6, 3, 12)),
                        ngram=3, num_draft=8)


def add_arguments(parser) -> None:
    parser.add_argument("--draft", default="draft-2l", help="CPU pair draft: 'draft' (1 layer) or 'draft-2l'")
    parser.add_argument("--grounded", type=int, default=6,
                        help="in-context prompts: the target's own continuation is in the prompt "
                             "(helpers.prompts.in_context_prompts)")
    add_bench_arguments(parser, 6, "open-ended prompts (data/prompts.jsonl, every source)")


def _figures(summary) -> dict:
    best = {family: best_of(summary, family) for family in ("linear", "static", "dynamic", "adaptive", "lookup")}
    at_depth = tau_against_linear(summary)
    return {**{f"best_{family}{key}": getattr(best[family], column) for family in ("linear", "static", "dynamic")
               for key, column in (("", "label"), ("_speedup", "speedup"))},
            "best_linear_tau": best["linear"].tau,
            "best_tree_over_best_linear": best_of(summary, ("static", "dynamic")).speedup / best["linear"].speedup,
            "tree_tau_over_linear_tau_same_depth": float(at_depth.tau_ratio.max()) if len(at_depth) else None,
            "adaptive_speedup": best["adaptive"].speedup, "lookup_speedup": best["lookup"].speedup,
            "lookup_tau": best["lookup"].tau, "lossless": bool(summary.lossless.all())}


def run(args) -> dict:
    torch.set_num_threads(args.threads)
    target, draft = load_cpu_model("target"), load_cpu_model(args.draft)
    tokenizer = load_cpu_tokenizer()
    workloads = {
        "open-ended": encode_prompts(tokenizer, select_prompts(load_prompts("cpu"), args.prompts), "cpu"),
        "in-context": encode_prompts(tokenizer, in_context_prompts(
            tokenizer, args.grounded, greedy_continuation(target, tokenizer, args.max_new_tokens)), "cpu"),
    }
    figures = {"threads": torch.get_num_threads(), "draft": args.draft, "max_new_tokens": args.max_new_tokens}
    print(f"threads: {torch.get_num_threads()}")
    for name, cases in workloads.items():
        print(f"{name}: {len(cases)} prompts, {args.max_new_tokens} new tokens, {args.repeats} interleaved repeats")
        summary = summarise_methods(compare_methods(target, draft, cases, default_specs(), args.max_new_tokens,
                                                    repeats=args.repeats, progress=True))
        print(f"\n{name} (speedup over AR on the same prompts; draft/verify = shares of the wall time)")
        print(f"{'method':<26}{'speedup':>9}{'tau':>7}{'nodes':>7}{'draft':>7}{'verify':>7}{'same':>6}")
        for row in summary.itertuples():
            print(f"{row.label:<26}{row.speedup:>8.2f}x{row.tau:>7.2f}{row.nodes:>7.1f}{row.draft_share:>7.2f}"
                  f"{row.verify_share:>7.2f}{'yes' if row.lossless else 'NO':>6}")
        figures[name] = _figures(summary)
    return figures
