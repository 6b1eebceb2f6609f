"""``python -m helpers.bench specdec``: the CPU pair greedily over the CPU prompts, our AR baseline, our speculative
decoding per gamma and transformers' assisted generation (:mod:`helpers.experiments.specdec_sweeps`); prints a table
with Eq. 5's terms and prediction, returns the headline figures."""
from __future__ import annotations

import pandas as pd
import torch

from helpers.experiments.specdec_costs import measure_costs
from helpers.experiments.specdec_sweeps import gamma_rows, measure_pair
from helpers.models import DRAFT_FAMILY, load_cpu_model, load_cpu_tokenizer
from helpers.prompts import encode_prompts, load_prompts, select_prompts
from helpers.specdec.analysis import predicted_speedup
from helpers.tables import count


def add_arguments(parser) -> None:
    parser.add_argument("--drafts", nargs="+", default=["draft", "draft-2l"],
                        help="CPU pair drafts to pair with the target: 'draft' (1 layer), 'draft-2l' and/or notebook "
                             "12's family (" + ", ".join(DRAFT_FAMILY) + ")")
    parser.add_argument("--gammas", type=int, nargs="+", default=[2, 3, 4, 5, 7], help="draft tokens per round")
    parser.add_argument("--prompts", type=int, default=10, help="number of CPU prompts (data/prompts.jsonl)")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="new tokens per prompt")
    parser.add_argument("--repeats", type=int, default=2, help="runs per configuration; the fastest is kept")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (1: these small models gain nothing from a second thread, and on "
                             "a busy 2-core machine two threads wait for each other)")
    parser.add_argument("--no-peer", action="store_true", help="skip transformers' assisted generation")
    parser.add_argument("--compile", action="store_true", help="decode steps through torch.compile over static-shape "
                                                                "caches (ours and AR; implies --no-peer)")


def method_rows(per_gamma: list[dict]) -> pd.DataFrame:
    """:func:`~helpers.experiments.specdec_sweeps.gamma_rows` as one row per method and gamma (AR, ours, the peer at
    each gamma and at its default schedule, gamma None), each with tokens/s and its speedup over AR."""
    first, ar = per_gamma[0], per_gamma[0]["ar_tokens_per_s"]
    peer = [{"method": "assisted", "gamma": row["gamma"], "tokens_per_s": row["assisted_tokens_per_s"],
             "identical_to_ar": row["assisted_identical_to_ar"]} for row in per_gamma if "assisted_tokens_per_s" in row]
    if "assisted_default_tokens_per_s" in first:
        peer.append({"method": "assisted", "gamma": None, "tokens_per_s": first["assisted_default_tokens_per_s"],
                     "identical_to_ar": first["assisted_default_identical_to_ar"]})
    frame = pd.DataFrame([{"method": "ar", "gamma": None, "tokens_per_s": ar, "speedup": 1.0, "identical_to_ar": True},
                          *({**row, "method": "sd"} for row in per_gamma), *peer])
    frame["speedup"] = frame["speedup"].fillna(frame["tokens_per_s"] / ar)  # the peer: its tokens/s over AR's
    return frame


def print_table(summary, costs: dict) -> None:
    """The comparison, with the terms of Eq. 5 and its prediction next to each measured speedup."""
    c = costs["T_D"] / costs["target_step_s"]

    def per_gamma(terms: dict, digits: int) -> str:
        return ", ".join(f"{g}: {t / costs['target_step_s']:.{digits}f}" for g, t in sorted(terms.items()))

    print(f"\nT_T = {costs['target_step_s'] * 1e3:.2f} ms, T_D = {costs['T_D'] * 1e3:.3f} ms, c = T_D/T_T = {c:.3f}")
    print(f"T_V(gamma)/T_T = {per_gamma(costs['T_V'], 2)}")
    print(f"c_round = T_D_round/T_T, a draft forward inside a round = {per_gamma(costs['T_D_round'], 3)}")
    print("Eq.5: with c; Eq.5r: with c_round, the draft's cost as the round pays it")
    print(f"{'method':<10}{'gamma':>6}{'tok/s':>9}{'speedup':>9}{'Eq.5':>7}{'Eq.5r':>7}{'alpha':>7}{'acc.rate':>9}"
          f"{'acc/round':>10}{'tok/round':>10}{'c':>7}{'c_round':>8}{'T_V/T_T':>8}{'same':>6}")
    for row in summary.itertuples():
        gamma = "-" if row.gamma is None or row.gamma != row.gamma else int(row.gamma)
        sd = row.method == "sd"
        verify = costs["T_V"].get(gamma, float("nan")) / costs["target_step_s"] if sd else float("nan")
        c_round = costs["T_D_round"].get(gamma, float("nan")) / costs["target_step_s"] if sd else float("nan")
        predicted = float(predicted_speedup(gamma, row.alpha, c, verify)) if sd else float("nan")
        predicted_round = float(predicted_speedup(gamma, row.alpha, c_round, verify)) if sd else float("nan")
        cost_ratio = c if row.method != "ar" else float("nan")
        print(f"{row.method:<10}{gamma!s:>6}{row.tokens_per_s:>9.1f}{row.speedup:>8.2f}x{predicted:>7.2f}"
              f"{predicted_round:>7.2f}{row.alpha:>7.3f}{row.acceptance_rate:>9.3f}{row.mean_accepted_per_round:>10.2f}"
              f"{row.tokens_per_round:>10.2f}{cost_ratio:>7.3f}{c_round:>8.3f}{verify:>8.2f}"
              f"{'yes' if row.identical_to_ar else 'NO':>6}")


def pair_figures(summary, costs: dict, draft_name: str) -> dict:
    """The headline of one pair: its best gamma against AR and against assisted generation's best setting."""
    sd = summary[summary["method"] == "sd"]
    best = sd.loc[sd["speedup"].idxmax()]
    gamma = int(best["gamma"])
    c = costs["T_D"] / costs["target_step_s"]
    verify_ratio = costs["T_V"][gamma] / costs["target_step_s"]
    figures = {
        "pair": f"cpu-pair/target / cpu-pair/{draft_name}", "best_gamma": gamma,
        "speedup_vs_ar": float(best["speedup"]), "tokens_per_s_sd": float(best["tokens_per_s"]),
        "tokens_per_s_ar": float(summary.loc[summary["method"] == "ar", "tokens_per_s"].iloc[0]),
        "identical_to_ar": bool(sd["identical_to_ar"].all()), "alpha": float(best["alpha"]),
        "acceptance_rate": float(best["acceptance_rate"]),
        "mean_accepted_per_round": float(best["mean_accepted_per_round"]), "c": c, "verify_ratio": verify_ratio,
        "eq5_predicted_speedup": float(predicted_speedup(gamma, float(best["alpha"]), c, verify_ratio)),
        "c_round": costs["T_D_round"][gamma] / costs["target_step_s"],
    }
    figures["eq5_round_predicted_speedup"] = float(predicted_speedup(gamma, figures["alpha"], figures["c_round"],
                                                                     verify_ratio))
    peer = summary[summary["method"] == "assisted"]
    if len(peer):
        best_peer = peer.loc[peer["tokens_per_s"].idxmax()]
        figures.update(
            tokens_per_s_assisted=float(best_peer["tokens_per_s"]),
            assisted_gamma=None if best_peer["gamma"] != best_peer["gamma"] else int(best_peer["gamma"]),
            assisted_identical_to_ar=bool(peer["identical_to_ar"].all()),
            speedup_vs_assisted=float(best["tokens_per_s"] / best_peer["tokens_per_s"]),
        )
    vs_peer = f"{figures['speedup_vs_assisted']:.2f}x over assisted generation's best" if len(peer) else "no peer"
    print(f"best for {figures['pair']}: gamma={gamma}, {figures['speedup_vs_ar']:.2f}x over AR, {vs_peer}")
    print(f"  Eq. 5: {figures['eq5_predicted_speedup']:.2f}x from alpha={figures['alpha']:.3f}, c={c:.3f}, "
          f"T_V/T_T={verify_ratio:.2f}; {figures['eq5_round_predicted_speedup']:.2f}x with c_round="
          f"{figures['c_round']:.3f}")
    return figures


def run(args) -> dict:
    torch.set_num_threads(args.threads)
    target, tokenizer = load_cpu_model("target"), load_cpu_tokenizer()
    cases = encode_prompts(tokenizer, select_prompts(load_prompts("cpu"), args.prompts), "cpu")
    per_pair = []
    for draft_name in args.drafts:
        draft = load_cpu_model(draft_name)
        rows = measure_pair(target, draft, cases, args.gammas, args.max_new_tokens, repeats=args.repeats,
                            peer=not args.no_peer and not args.compile, progress=False, compile=args.compile)
        summary = method_rows(gamma_rows(rows))
        costs = measure_costs(target, draft, cases[0]["input_ids"], args.gammas, repeats=20, compile=args.compile)
        setting = f"{len(cases)} prompts, {args.max_new_tokens} new tokens, greedy, {count(args.threads, 'thread')}"
        print(f"\n== cpu-pair/target / cpu-pair/{draft_name} ({setting})")
        print(f"ours and AR on the {costs['runtime']} runtime" + (", decode steps compiled" if args.compile else ""))
        print_table(summary, costs)
        per_pair.append(pair_figures(summary, costs, draft_name))
    best = max(per_pair, key=lambda f: f["speedup_vs_ar"])
    return {"benchmark": "specdec", "threads": args.threads, "prompts": len(cases), "runtime": costs["runtime"],
            "compiled": args.compile,
            "max_new_tokens": args.max_new_tokens, **best,
            "pairs": {f["pair"]: {k: v for k, v in f.items() if k != "pair"} for f in per_pair}}
