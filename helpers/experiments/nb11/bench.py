"""Long-context self-speculation vs batched AR on the CPU: ``python -m helpers.bench selfspec``.

For every context length one prefill of held-out files (the largest batch), then for every batch size AR and
self-speculation from copies of it (:func:`helpers.experiments.nb11.study.compare_at`). Prints per point the
speedups, whether every row equalled AR, the KV/weight byte ratio and the Eq. 5 terms; returns the speedups.
"""
from __future__ import annotations

import torch
from tqdm.auto import tqdm

from helpers.experiments.nb11.study import byte_terms, compare_at, prefill_long
from helpers.models import load_model
from helpers.models.runtime import minimal_view
from helpers.prompts import long_heldout_prompts


def add_arguments(parser) -> None:
    parser.add_argument("--model", default="cpu-pair/target-long", help="the model that drafts for itself")
    parser.add_argument("--contexts", type=int, nargs="+", default=[512, 2048, 4096], help="prompt tokens per row")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 4, 8, 16], help="batch sizes")
    parser.add_argument("--gamma", type=int, default=3, help="draft tokens per round")
    parser.add_argument("--window", type=int, default=64, help="recent tokens the self-draft attends to")
    parser.add_argument("--sinks", type=int, default=4, help="first tokens the self-draft always attends to")
    parser.add_argument("--max-new-tokens", type=int, default=96, help="new tokens per row")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats per point (after one warm-up)")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")


def run(args) -> dict:
    if args.threads:
        torch.set_num_threads(args.threads)
    hf_model, tokenizer = load_model(args.model)
    model = minimal_view(hf_model)
    print(f"{args.model}: gamma {args.gamma}, window {args.window} + {args.sinks} sinks, {args.max_new_tokens} new "
          f"tokens, {args.repeats} repeats, {torch.get_num_threads()} threads")
    print("speedups over batched AR. full: while every row decodes; run: to the slowest row")
    print(f"{'context':>8}{'batch':>6}{'KV/W':>7}{'T_T ms':>8}{'full':>8}{'spread':>8}{'Eq.5':>7}{'run':>7}"
          f"{'alpha':>7}{'tau':>6}{'c':>7}{'v':>7}{'same':>6}")
    figures, rows = {"full_batch_speedup": {}, "eq5_speedup": {}, "speedup": {}}, []
    bar = tqdm(total=len(args.contexts) * len(args.batches), desc="points", leave=False)
    for context in args.contexts:
        prompts = long_heldout_prompts(tokenizer, max(args.batches), context)
        state = prefill_long(model, prompts, room=args.max_new_tokens + args.gamma + 1)
        for batch in args.batches:
            row = compare_at(state.copy(batch), max_new_tokens=args.max_new_tokens, gamma=args.gamma,
                             window=args.window, sinks=args.sinks, repeats=args.repeats)[0]
            row.update(context=context, batch=batch, **byte_terms(model, context, batch))
            rows.append(row)
            bar.update()
            tqdm.write(f"{context:>8}{batch:>6}{row['kv_weight_ratio']:>7.2f}{row['target_step_s'] * 1e3:>8.1f}"
                       f"{row['full_batch_speedup']:>7.2f}x{row['full_batch_spread']:>8.2f}{row['eq5_speedup']:>7.2f}"
                       f"{row['speedup']:>6.2f}x{row['alpha']:>7.3f}{row['tau']:>6.2f}{row['draft_ratio']:>7.3f}"
                       f"{row['verify_ratio']:>7.2f}{'yes' if row['identical'] else 'NO':>6}")
            key = f"{context}x{batch}"
            for name in figures:
                figures[name][key] = round(row[name], 3)
        del state
    bar.close()
    figures["all_identical"] = all(row["identical"] for row in rows)
    figures["eq5_max_relative_error"] = round(max(abs(r["eq5_speedup"] / r["full_batch_speedup"] - 1)
                                                  for r in rows), 3)
    figures["threads"] = torch.get_num_threads()
    return figures
