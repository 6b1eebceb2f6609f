"""Decoding methods side by side, as notebooks 10 and 13 compare them: every spec (:mod:`helpers.specdec.methods`)
on every prompt in interleaved rounds (a slow phase of a shared machine hits all methods alike), each method's fastest
run per prompt kept (:func:`compare_methods`), pooled over the prompts (:func:`summarise_methods`); and the Eq. 4/5
terms both notebooks compute from those rows.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from helpers.experiments.specdec_costs import interleaved_runs
from helpers.specdec import methods
from helpers.specdec.divergence import greedy_divergence, greedy_lossless, near_ties


def method_configs(cases: dict, setup: dict, *, new_tokens: int, repeats: int, specs: list[dict]) -> dict:
    """The result-store configuration of every ``(workload, prompt id)`` of ``cases`` for :func:`compare_methods`:
    ``setup`` (models, dtype, device, ...) plus the workload, the prompt, the tokens, the repeats and the specs."""
    return {(workload, case["id"]): {"kind": "methods", **setup, "workload": workload, "prompt": case["id"],
                                     "new_tokens": new_tokens, "repeats": repeats, "specs": specs}
            for workload, group in cases.items() for case in group}


def compare_methods(target, draft, cases: list[dict], specs: list[dict], max_new_tokens: int, *, repeats: int = 2,
                    progress: bool = False, on_prompt=None) -> list[dict]:
    """Rows (one per prompt and spec): the fastest of ``repeats`` interleaved runs, its τ, nodes per round, phase
    times, whether its tokens equal AR's and, where not, whether they part at a near-tie (``near_tie``, bf16
    rounding: :mod:`helpers.specdec.divergence`). ``specs`` must start with ``{"method": "ar"}`` (the reference).
    Every run generates exactly ``max_new_tokens`` (EOS ignored), so all methods produce the same tokens.
    ``draft``: the draft model, or the drafters by :attr:`helpers.specdec.methods.Method.drafter`.
    ``on_prompt(rows)`` is called with each prompt's rows as soon as they exist (append them to a result file)."""
    if not specs or specs[0] != {"method": "ar"}:
        raise ValueError('specs must start with {"method": "ar"}: AR is the reference of every speedup')
    for spec in specs:
        methods.label(spec)  # unknown methods fail before anything runs
    device = next(target.parameters()).device
    timed = device.type != "cuda"  # phase timing would add a synchronize per phase on a GPU
    for spec in specs:  # warm-up: allocator, lazy imports
        methods.run(spec, target, draft, cases[0]["input_ids"], min(8, max_new_tokens), eos_token_id=-1,
                    time_phases=timed)
    rows = []
    for case in tqdm(cases, desc="prompts", disable=not progress):
        runs = interleaved_runs({i: (lambda spec=spec: methods.run(spec, target, draft, case["input_ids"],
                                                                    max_new_tokens, eos_token_id=-1,
                                                                    time_phases=timed))
                                 for i, spec in enumerate(specs)}, repeats, device=device)
        reference = None
        prompt_rows = []
        for i, spec in enumerate(specs):
            seconds, results = runs[i]
            best = int(np.argmin(seconds))
            result = results[best]
            reference = result.tokens if reference is None else reference
            stats = result.stats
            # in bf16 an output may part from AR's where the target's two best tokens tie within rounding
            identical, near_tie = _against_ar(target, case, reference, result.tokens)
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
                "identical_to_ar": identical, "near_tie": near_tie,
                "max_new_tokens": max_new_tokens,
            })
        if on_prompt is not None:
            on_prompt(prompt_rows)
        rows.extend(prompt_rows)
    return rows


def _against_ar(target, case: dict, reference, tokens) -> tuple[bool, bool | None]:
    """(identical to AR's tokens, and where not whether they part at a near-tie; None where identical)."""
    if torch.equal(tokens, reference):
        return True, None
    return False, greedy_divergence(target, case["input_ids"], reference, tokens)["near_tie"]


def summarise_methods(rows, by=("label",)) -> pd.DataFrame:
    """Pooled over prompts per method (and ``by``): seconds, speedup over AR on the same prompts, τ (new tokens
    per target forward of the decode rounds), nodes verified per round, draft/verify shares, all lossless?"""
    frame = pd.DataFrame(rows)
    keys = [k for k in by if k != "label"]
    ar = frame[frame.method == "ar"].groupby(keys + ["id"] if keys else ["id"]).seconds.sum()
    out = []
    for key, group in frame.groupby(list(by) if len(by) > 1 else by[0], sort=False):
        ar_seconds = sum(ar[tuple(r[k] for k in keys) + (r["id"],)] if keys else ar[r["id"]]
                         for _, r in group.iterrows())
        seconds = group.seconds.sum()
        out.append({
            **dict(zip(by, key if isinstance(key, tuple) else (key,))),
            "method": group.method.iloc[0], "spec": group.spec.iloc[0],
            "prompts": len(group), "seconds": seconds, "speedup": ar_seconds / seconds,
            "tau": group.new_tokens.sum() / group.rounds.sum(),
            "nodes": (group.nodes * group.rounds).sum() / group.rounds.sum(),
            "depth": (group.depth * group.rounds).sum() / group.rounds.sum(),
            "draft_share": group.draft_s.sum() / seconds, "verify_share": group.verify_s.sum() / seconds,
            "lossless": greedy_lossless(group), "near_ties": near_ties(group),
        })
    summary = pd.DataFrame(out)
    summary["order"] = summary.method.map(lambda name: methods.get(name).order)
    return summary.sort_values(["order", "speedup"], ascending=[True, False]).drop(columns="order").reset_index(drop=True)


def best_of(summary: pd.DataFrame, methods) -> pd.Series:
    """The fastest row among ``methods`` (a name or a tuple of names)."""
    methods = (methods,) if isinstance(methods, str) else tuple(methods)
    pick = summary[summary.method.isin(methods)]
    if pick.empty:
        raise ValueError(f"no rows for {methods}")
    return pick.loc[pick.speedup.idxmax()]


def depth_acceptance(accepted_per_round) -> list[float]:
    """a_d = P(a round's accepted path reaches depth d | it reached d - 1), d = 1, 2, ... over all rounds.

    A round that drafted fewer than d tokens (adaptive lookahead, a lookup without a long match, the last round)
    counts as not reaching d: its draft length is part of the method, as the tree's shape is."""
    accepted = np.asarray(accepted_per_round)
    rates = []
    for d in range(1, int(accepted.max(initial=0)) + 2):
        reached = accepted >= d - 1
        rates.append(float((accepted[reached] >= d).mean()) if reached.any() else float("nan"))
    return rates


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
    """Eq. 5 for one round of any shape: τ tokens for the price of its draft forwards and one verify forward,
    all in units of a target decode step T_T: τ / (Σ T_D(k_i)/T_T + T_V(n)/T_T)."""
    return tau / (float(np.sum(draft_costs)) + verify_cost)
