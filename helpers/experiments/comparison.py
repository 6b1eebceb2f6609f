"""Decoding methods side by side, as notebooks 10 and 13 compare them: every spec (:mod:`helpers.specdec.methods`)
on every prompt in interleaved rounds, each method's fastest run per prompt kept (:func:`compare_methods`), pooled
over the prompts (:func:`summarise_methods`); the result-store loop both notebooks measure with
(:func:`measure_comparison`) and the Eq. 4/5 terms both compute from the rows.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from helpers.experiments.specdec_costs import forward_time, interleaved_runs
from helpers.specdec import methods
from helpers.specdec.divergence import greedy_divergence, greedy_lossless, near_ties


def method_configs(cases: dict, setup: dict, *, new_tokens: int, repeats: int, specs: list[dict]) -> dict:
    """The result-store configuration of every ``(workload, prompt id)`` of ``cases``: ``setup`` (models, dtype,
    device, ...) plus the workload, the prompt, the tokens, the repeats and the specs."""
    return {(workload, case["id"]): {"kind": "methods", **setup, "workload": workload, "prompt": case["id"],
                                     "new_tokens": new_tokens, "repeats": repeats, "specs": specs}
            for workload, group in cases.items() for case in group}


def measure_comparison(results, wanted: dict, cases: dict, measure_costs, compare, meta: dict,
                       progress: bool = False) -> dict:
    """``{"costs": the cost row (T_V and T_D keyed by int), "rows": {workload: every method's runs}}``, measuring
    only what ``results`` lacks: ``measure_costs()`` for ``wanted["costs"]``, ``compare(case)`` (the rows of
    :func:`compare_methods`) for each ``wanted[workload, prompt id]``."""
    costs = results.run(wanted["costs"], measure_costs, meta=meta)
    costs = {**costs, **{key: {int(n): t for n, t in costs[key].items()} for key in ("T_V", "T_D") if key in costs}}
    rows = {workload: [{**row, "workload": workload} for case in tqdm(group, desc=workload, disable=not progress)
                       for row in results.run(wanted[workload, case["id"]], lambda case=case: {"runs": compare(case)},
                                              meta=meta)["runs"]]
            for workload, group in cases.items()}
    return {"costs": costs, "rows": rows}


def median_forward(model, context, positions: int, repeats: int) -> float:
    """Median seconds of one forward of ``model`` over ``positions`` new positions after a cached ``context``."""
    return float(np.median(forward_time(model, context, positions, all_logits=positions > 1, repeats=repeats).samples))


def add_bench_arguments(parser, prompts: int, prompts_help: str) -> None:
    """The options ``python -m helpers.bench tree`` and ``heads`` share: prompts, tokens, repeats and threads."""
    parser.add_argument("--prompts", type=int, default=prompts, help=prompts_help)
    parser.add_argument("--max-new-tokens", type=int, default=64, help="new tokens per prompt")
    parser.add_argument("--repeats", type=int, default=2,
                        help="interleaved runs per method and prompt; the fastest is kept")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (recorded in the output)")


def compare_methods(target, draft, cases: list[dict], specs: list[dict], max_new_tokens: int, *, repeats: int = 2,
                    progress: bool = False) -> list[dict]:
    """Rows (one per prompt and spec): the fastest of ``repeats`` interleaved runs, its τ, nodes per round, phase
    times, whether its tokens equal AR's and, where not, whether they part at a near-tie (``near_tie``, bf16
    rounding: :mod:`helpers.specdec.divergence`). ``specs`` must start with ``{"method": "ar"}``, the reference.
    Every run generates exactly ``max_new_tokens`` (EOS ignored). ``draft``: the draft model, or the drafters by
    :attr:`helpers.specdec.methods.Method.drafter`."""
    if not specs or specs[0] != {"method": "ar"}:
        raise ValueError('specs must start with {"method": "ar"}: AR is the reference of every speedup')
    for spec in specs:
        methods.label(spec)  # unknown methods fail before anything runs
    device = next(target.parameters()).device
    timed = device.type != "cuda"  # phase timing would add a synchronize per phase on a GPU
    generate = lambda spec, ids, tokens: methods.run(spec, target, draft, ids, tokens,  # noqa: E731
                                                     eos_token_id=-1, time_phases=timed)
    for spec in specs:  # warm-up: allocator, lazy imports
        generate(spec, cases[0]["input_ids"], min(8, max_new_tokens))
    rows = []
    for case in tqdm(cases, desc="prompts", disable=not progress):
        runs = interleaved_runs({i: (lambda spec=spec: generate(spec, case["input_ids"], max_new_tokens))
                                 for i, spec in enumerate(specs)}, repeats, device=device)
        reference, prompt_rows = None, []
        for i, spec in enumerate(specs):
            seconds, results = runs[i]
            best = int(np.argmin(seconds))
            tokens, stats = results[best].tokens, results[best].stats
            reference = tokens if reference is None else reference
            identical = bool(torch.equal(tokens, reference))
            # in bf16 an output may part from AR's where the target's two best tokens tie within rounding
            near_tie = (None if identical else
                        greedy_divergence(target, case["input_ids"], reference, tokens)["near_tie"])
            prompt_rows.append({
                **{k: case[k] for k in ("id", "source") if k in case},
                "prompt_tokens": int(case["input_ids"].shape[1]),
                "method": spec["method"], "label": methods.label(spec), "spec": spec,
                "seconds": float(seconds[best]), "new_tokens": stats.new_tokens, "rounds": stats.rounds,
                "accepted": stats.accepted, "proposed": stats.proposed, "draft_forwards": stats.draft_forwards,
                "target_forwards": stats.target_forwards,
                "nodes": float(np.mean(getattr(stats, "nodes_per_round", None) or stats.gamma_per_round or [0])),
                "depth": float(np.mean(stats.gamma_per_round or [0])),
                "accepted_per_round": stats.accepted_per_round, "depth_per_round": stats.gamma_per_round,
                "prefill_s": stats.time_prefill_s, "draft_s": stats.time_draft_s, "verify_s": stats.time_verify_s,
                "identical_to_ar": identical, "near_tie": near_tie, "max_new_tokens": max_new_tokens,
            })
        rows.extend(prompt_rows)
    return rows


def summarise_methods(rows, by=("label",)) -> pd.DataFrame:
    """Pooled over prompts per method (and ``by``): the family that drafted (``drafter``), seconds, speedup over AR
    on the same prompts, τ (new tokens per target forward of the decode rounds), nodes verified per round,
    draft/verify shares, all lossless?"""
    frame = pd.DataFrame(rows)
    keys = [k for k in by if k != "label"]
    ar = frame[frame.method == "ar"].groupby(keys + ["id"]).seconds.sum()
    out = []
    for key, group in frame.groupby(list(by) if len(by) > 1 else by[0], sort=False):
        ar_seconds = sum(ar[tuple(r[k] for k in keys) + (r["id"],)] if keys else ar[r["id"]]
                         for _, r in group.iterrows())
        seconds, rounds = group.seconds.sum(), group.rounds.sum()
        out.append({
            **dict(zip(by, key if isinstance(key, tuple) else (key,))),
            "drafter": methods.get(group.method.iloc[0]).family or group.method.iloc[0],
            "method": group.method.iloc[0], "spec": group.spec.iloc[0],
            "prompts": len(group), "seconds": seconds, "speedup": ar_seconds / seconds,
            "tau": group.new_tokens.sum() / rounds, "nodes": (group.nodes * group.rounds).sum() / rounds,
            "depth": (group.depth * group.rounds).sum() / rounds,
            "draft_share": group.draft_s.sum() / seconds, "verify_share": group.verify_s.sum() / seconds,
            "lossless": greedy_lossless(group), "near_ties": near_ties(group),
        })
    summary = pd.DataFrame(out)
    summary["order"] = summary.method.map(lambda name: methods.get(name).order)
    summary = summary.sort_values(["order", "speedup"], ascending=[True, False])
    return summary.drop(columns="order").reset_index(drop=True)


def decode_seconds(frame: pd.DataFrame) -> float:
    """The summed decode time of rows of :func:`compare_methods` (prefill left out, as Eq. 5 models)."""
    return float((frame.seconds - frame.prefill_s).sum())


def best_of(summary: pd.DataFrame, methods) -> pd.Series:
    """The fastest row among ``methods`` (a name or a tuple of names)."""
    pick = summary[summary.method.isin((methods,) if isinstance(methods, str) else tuple(methods))]
    if pick.empty:
        raise ValueError(f"no rows for {methods}")
    return pick.loc[pick.speedup.idxmax()]


def depth_acceptance(accepted_per_round) -> list[float]:
    """a_d = P(a round's accepted path reaches depth d | it reached d - 1), d = 1, 2, ... over all rounds.

    A round that drafted fewer than d tokens (adaptive lookahead, a lookup without a long match, the last round)
    counts as not reaching d: its draft length is part of the method, as the tree's shape is."""
    accepted = np.asarray(accepted_per_round)
    reached = [accepted >= d - 1 for d in range(1, int(accepted.max(initial=0)) + 2)]
    return [float((accepted[r] >= d).mean()) if r.any() else float("nan") for d, r in enumerate(reached, 1)]


def expected_tau(rates) -> float:
    """Eq. 4 generalised to any tree: 1 + Σ_d Π_{j≤d} a_j (the target's own token plus the expected path length)."""
    tau, reach = 1.0, 1.0
    for rate in rates:
        if rate != rate:  # never reached
            break
        reach *= rate
        tau += reach
    return tau


def predicted_speedup(tau: float, draft_costs, verify_cost: float) -> float:
    """Eq. 5 for one round of any shape, in units of a target decode step T_T: τ / (Σ T_D(k_i)/T_T + T_V(n)/T_T)."""
    return tau / (float(np.sum(draft_costs)) + verify_cost)
