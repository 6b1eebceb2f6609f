"""Notebook 10's study of the method comparison (:mod:`helpers.experiments.comparison`): what a round's forwards
cost (:func:`forward_costs`) and Eq. 5 from them (:func:`cost_model`), which methods the prompts cannot tell from
the fastest (:func:`tied_with_fastest`), how much of an output its context holds (:func:`context_coverage`), and
the draft's calibration in a tree (:func:`first_choice_calibration`). A method is a *spec*
(:mod:`helpers.specdec.methods`), e.g. ``{"method": "dynamic", "depth": 6, "topk": 3, "budget": 12}``.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from helpers.experiments.comparison import decode_seconds, depth_acceptance, median_forward, predicted_speedup
from helpers.specdec import methods
from helpers.specdec.linear import autoregressive_generate
from helpers.stats import bootstrap_ratio_interval, wilson_interval

# the methods whose specs notebook 10's parameters build (any other registered method joins with its defaults)
CONFIGURED = ("ar", "linear", "adaptive", "static", "dynamic", "lookup")


def forward_costs(target, draft, context: torch.Tensor, node_counts, draft_widths, *, repeats: int = 10) -> dict:
    """Median seconds of the forwards a round is made of, after a cached ``context``: ``T_T`` (one target token),
    ``T_V[n]`` (the target over n positions, Eq. 5's T_V(n - 1)) and ``T_D[k]`` (the draft over k nodes of one tree
    level). Causal forwards: a tree mask costs the same to these timers' rounding (built once per forward)."""
    return {"target_step_s": median_forward(target, context, 1, repeats),
            "T_V": {int(n): median_forward(target, context, int(n), repeats) for n in node_counts},
            "T_D": {int(k): median_forward(draft, context, int(k), repeats) for k in draft_widths}}


def _interp(table: dict, x: float) -> float:
    return float(np.interp(x, sorted(table), [table[k] for k in sorted(table)]))


def round_cost(spec: dict, costs: dict, nodes: float) -> tuple[float, float]:
    """(draft, verify) cost of one round of ``spec`` in units of T_T, from :func:`forward_costs` (interpolated at the
    round's mean node count): T_V(nodes), a target forward over nodes + 1 positions, and for a method drafting with
    the draft model (:attr:`~helpers.specdec.methods.Method.drafter`) one draft forward per tree level (its width)
    or, for a chain, ``nodes`` one-token steps; a method drafting from the context pays no draft forwards."""
    step = lambda width: _interp(costs["T_D"], width)  # noqa: E731
    topk = spec.get("topk")
    if methods.get(spec["method"]).drafter != "draft":
        draft = 0.0
    elif isinstance(topk, list):  # a static tree: one forward per level, as wide as the level
        draft = sum(step(int(np.prod(topk[:i]))) for i in range(len(topk)))
    elif topk:  # a dynamic tree: the root's children, then top-k expansions
        draft = step(1) + (spec["depth"] - 1) * step(topk)
    else:
        draft = nodes * step(1)
    return draft / costs["target_step_s"], _interp(costs["T_V"], nodes + 1) / costs["target_step_s"]


def method_specs(gammas, adaptive, static_shapes, dynamic, *, ngram: int, num_draft: int) -> list[dict]:
    """Notebook 10's method list from its parameters: AR first, then linear γ, adaptive (γ_max, stop_below),
    static shapes, dynamic (depth, topk, budget) and prompt lookup with a fixed and with an adaptive draft length;
    then the default specs of every other registered method that needs no drafter or the draft model."""
    return ([{"method": "ar"}]
            + [{"method": "linear", "gamma": int(g)} for g in gammas]
            + [{"method": "adaptive", "gamma": int(g), "stop_below": float(p)} for g, p in adaptive]
            + [{"method": "static", "topk": [int(w) for w in shape]} for shape in static_shapes]
            + [{"method": "dynamic", "depth": int(d), "topk": int(k), "budget": int(n)} for d, k, n in dynamic]
            + [{"method": "lookup", "ngram": int(ngram), "num_draft": int(num_draft), "adaptive": flag}
               for flag in (False, True)]
            + methods.extra_specs(CONFIGURED, drafters=("draft",)))


def cost_model(rows, costs: dict) -> pd.DataFrame:
    """Per method (pooled over prompts): the measured τ, the round's cost from the measured forwards
    (:func:`round_cost`), Eq. 5's predicted decode speedup and the measured one (prefill excluded on both sides).

    τ is fed in as measured: Eq. 4 with the measured per-depth acceptance (kept in ``acceptance_by_depth``)
    reproduces it exactly, so it would predict nothing; the table tests the round-cost half of Eq. 5."""
    frame = pd.DataFrame(rows)
    ar_decode = decode_seconds(frame[frame.method == "ar"])
    out = []
    for label, group in frame[frame.method != "ar"].groupby("label", sort=False):
        nodes = (group.nodes * group.rounds).sum() / group.rounds.sum()
        spec = group.spec.iloc[0]
        draft, verify = round_cost(spec, costs, nodes)
        if not spec.get("topk"):
            # a chain's rounds differ in their draft count (no lookup match, an adaptive stop): T_V is concave in
            # the positions, so average it over the rounds rather than take it at the mean count
            verify = float(np.mean([round_cost(spec, costs, n)[1] for per in group.depth_per_round for n in per]))
        tau = group.new_tokens.sum() / group.rounds.sum()
        out.append({"label": label, "method": spec["method"], "nodes": nodes, "tau": tau,
                    "draft_cost": draft, "verify_cost": verify, "predicted": predicted_speedup(tau, [draft], verify),
                    "measured": ar_decode / decode_seconds(group),
                    "acceptance_by_depth": depth_acceptance([a for per in group.accepted_per_round for a in per])})
    table = pd.DataFrame(out)
    table["error_pct"] = 100 * (table.predicted / table.measured - 1)
    return table


def draft_model_methods() -> tuple[str, ...]:
    """The registered methods that draft with a separate draft model (linear, adaptive, static, dynamic, ...)."""
    return tuple(name for name in methods.names() if methods.get(name).drafter == "draft")


def cost_model_agreement(table: pd.DataFrame) -> dict:
    """How far Eq. 5 (:func:`cost_model`) can be trusted to RANK the methods: ``by_family`` (mean predicted/measured
    per method), ``family_spread`` (the largest of those over the smallest; 1: the errors cancel in a ranking),
    ``rank_corr`` (Spearman, predicted against measured), and among the :func:`draft_model_methods` the one Eq. 5
    puts first (``top_predicted``), its measured rank (``top_measured_rank``, 1 = fastest) and the measured fastest."""
    if table.empty:
        raise ValueError("an empty cost-model table")
    by_family = (table.predicted / table.measured).groupby(table.method, sort=False).mean()
    ranks = table[["predicted", "measured"]].rank()
    models = table[table.method.isin(draft_model_methods())]
    out = {"by_family": {family: float(value) for family, value in by_family.items()},
           "family_spread": float(by_family.max() / by_family.min()),
           "rank_corr": float(ranks.predicted.corr(ranks.measured)) if len(table) > 1 else float("nan")}
    if len(models):
        top = models.loc[models.predicted.idxmax()]
        out.update({"top_predicted": top.label,
                    "top_measured_rank": int(models.measured.rank(ascending=False, method="min")[top.name]),
                    "draft_model_methods": len(models), "top_measured": models.loc[models.measured.idxmax()].label})
    return out


def context_coverage(prompt_ids, generated_ids, ngram: int = 3) -> dict:
    """The share of generated tokens that continue an n-gram seen before them: token t_i counts when the ``ngram``
    tokens before it followed by t_i occur in the prompt (``"prompt"``), or in the prompt or the output before t_i
    (``"context"``: the text prompt lookup searches, where an output repeating its own earlier lines scores)."""
    if isinstance(ngram, bool) or not isinstance(ngram, int) or ngram < 1:
        raise ValueError(f"ngram (tokens before the continued token) must be an int >= 1, got {ngram!r}")
    prompt, out = [int(t) for t in prompt_ids], [int(t) for t in generated_ids]
    if not out:
        raise ValueError("no generated tokens to measure")
    seq, k = prompt + out, ngram + 1
    in_prompt = {tuple(prompt[j:j + k]) for j in range(len(prompt) - k + 1)}
    seen = set(in_prompt)
    from_prompt = from_context = 0
    for i in range(max(len(prompt), ngram), len(seq)):
        gram = tuple(seq[i - ngram:i + 1])
        from_prompt += gram in in_prompt
        from_context += gram in seen
        seen.add(gram)  # the context of every later token contains it
    return {"prompt": from_prompt / len(out), "context": from_context / len(out)}


def greedy_continuation(model, tokenizer, new_tokens: int):
    """A callable text -> the text ``model`` writes after it (greedy, exactly ``new_tokens`` tokens, EOS ignored):
    the ``continuation`` of :func:`helpers.prompts.in_context_prompts`."""
    device = next(model.parameters()).device

    def continue_text(text: str) -> str:
        ids = tokenizer(text, return_tensors="pt")["input_ids"].to(device)
        tokens = autoregressive_generate(model, ids, new_tokens, eos_token_id=-1).tokens
        return tokenizer.decode([int(t) for t in tokens.reshape(-1)])

    return continue_text


def per_prompt_speedup(rows, label: str) -> pd.Series:
    """Speedup over AR of the method ``label`` on each prompt (by ``id``) of :func:`compare_methods`'s rows."""
    frame = pd.DataFrame(rows)
    ar = frame[frame.method == "ar"].set_index("id").seconds
    own = frame[frame.label == label].set_index("id").seconds
    if own.empty:
        raise ValueError(f"no rows for {label!r}")
    return (ar.loc[own.index] / own).rename(label)


def first_choice_calibration(rounds) -> dict:
    """How the draft's probability compares with the target's agreement in verified trees (``record_rounds=True``):
    at every node of each accepted path, the draft's first choice among its children, its draft probability
    (``scores`` are cumulative log-probabilities) and whether the target took it. Returns ``mean_probability``,
    ``accepted_rate`` with its 95% Wilson interval (``accepted_low``, ``accepted_high``) and ``tested``."""
    probs, hits = [], []
    for tree in rounds:
        for depth, node in enumerate(tree.path):
            children = [child for child, parent in enumerate(tree.parents) if parent == node]
            if not children:
                continue
            first = max(children, key=lambda child: tree.scores[child])
            probs.append(float(np.exp(tree.scores[first] - tree.scores[node])))
            hits.append(depth + 1 < len(tree.path) and tree.path[depth + 1] == first)
    if not probs:
        raise ValueError("no verified node with children: record rounds of a tree generation")
    low, high = wilson_interval(int(sum(hits)), len(hits))
    return {"mean_probability": float(np.mean(probs)), "accepted_rate": float(np.mean(hits)), "accepted_low": low,
            "accepted_high": high, "tested": len(probs)}


def copied_prefix(tokenizer, case: dict, generated) -> tuple[int, int]:
    """(tokens of ``generated`` that equal the start of ``case["reference"]``, reference length in tokens). The
    reference is tokenised in context (prompt + reference), so that a merge across the boundary does not misalign."""
    prompt = tokenizer(case["prompt"])["input_ids"]
    full = tokenizer(case["prompt"] + case["reference"])["input_ids"]
    reference = full[len(prompt) if full[: len(prompt)] == prompt else len(prompt) - 1:]
    pairs = list(zip([int(t) for t in generated], reference))
    return next((i for i, (ours, theirs) in enumerate(pairs) if ours != theirs), len(pairs)), len(reference)


def nominal_depth(spec: dict) -> int | None:
    """The most draft tokens a round can accept: γ for linear speculation, the number of levels for a tree."""
    depth = {"linear": lambda: spec["gamma"], "static": lambda: len(spec["topk"]), "dynamic": lambda: spec["depth"]}
    return int(depth[spec["method"]]()) if spec["method"] in depth else None


def tau_against_linear(summary: pd.DataFrame) -> pd.DataFrame:
    """Every tree next to linear speculation of the same depth (γ = the tree's levels), where that γ was measured:
    how much τ the extra nodes buy at equal depth, and at what wall-clock price."""
    linear = {nominal_depth(r.spec): r for r in summary.itertuples() if r.method == "linear"}
    out = [{"tree": row.label, "linear": linear[depth].label, "depth": depth, "nodes": row.nodes,
            "tau_ratio": row.tau / linear[depth].tau, "speedup_ratio": row.speedup / linear[depth].speedup}
           for row in summary.itertuples()
           if (depth := nominal_depth(row.spec) if row.method in ("static", "dynamic") else None) in linear]
    return pd.DataFrame(out, columns=["tree", "linear", "depth", "nodes", "tau_ratio", "speedup_ratio"])


def tied_with_fastest(rows, families=None, *, decode: bool = False, level: float = 0.95,
                      resamples: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Which methods of ``families`` (default :func:`draft_model_methods`) the measurement cannot tell from the
    fastest, in :func:`compare_methods` rows: ``speedup`` over AR (pooled; decode time alone when ``decode``),
    ``slower`` (its pooled seconds over the fastest's) and a paired percentile bootstrap interval of that ratio over
    prompts (``low``, ``high``: prompts carry both timing noise and prompt-to-prompt spread). ``tied`` when
    ``low <= 1``; with a single prompt there is no interval (nan) and every method ties. Sorted fastest first."""
    frame = pd.DataFrame(rows)
    frame = frame.assign(time=frame.seconds - frame.prefill_s if decode else frame.seconds)
    times = frame.pivot_table(index="id", columns="label", values="time", aggfunc="sum")
    ar = times[frame[frame.method == "ar"].label.iloc[0]]
    families = draft_model_methods() if families is None else families
    labels = frame[frame.method.isin(families)].label.unique()
    if not len(labels):
        raise ValueError(f"no rows for {families}")
    speedup = pd.Series({label: ar.sum() / times[label].sum() for label in labels}).sort_values(ascending=False)
    fastest = speedup.index[0]
    out = []
    for label in speedup.index:
        low, high = ((1.0, 1.0) if label == fastest else (float("nan"), float("nan")) if len(times) < 2 else
                     bootstrap_ratio_interval(times[label], times[fastest], level=level, resamples=resamples,
                                              seed=seed))
        out.append({"label": label, "speedup": float(speedup[label]),
                    "slower": float(times[label].sum() / times[fastest].sum()), "low": low, "high": high,
                    "tied": bool(low <= 1 or low != low)})
    return pd.DataFrame(out)


def ranking_beyond_noise(table: pd.DataFrame, ties: pd.DataFrame) -> dict:
    """Whether Eq. 5 (:func:`cost_model`'s ``predicted``) ranks the methods as far as the measurement can, ``ties``
    (:func:`tied_with_fastest`, decode times) splitting them into the tied and the clearly slower: ``top_tied`` (Eq.
    5's first choice is tied), ``misplaced`` (clearly slower methods predicted above a tied one), ``separates``."""
    pred = table.set_index("label").predicted.reindex(ties.label)
    tied = ties.set_index("label").tied
    top, floor = pred.idxmax(), pred[tied].min()
    misplaced = [label for label in pred.index if not tied[label] and pred[label] > floor]
    return {"tied": [label for label in pred.index if tied[label]], "top_predicted": top,
            "top_tied": bool(tied[top]), "misplaced": misplaced, "separates": not misplaced}
