"""Every decoding method of notebook 10 side by side: AR, linear speculation (fixed and adaptive γ), static and
dynamic trees, prompt lookup — on the same prompts, interleaved, with τ next to every speedup.

A method is a small dict (a *spec*) so that a result row can carry it: ``{"method": "ar"}``,
``{"method": "linear", "gamma": 5}``, ``{"method": "adaptive", "gamma": 8, "stop_below": 0.3}``,
``{"method": "static", "topk": [2, 1, 1, 1, 1]}``, ``{"method": "dynamic", "depth": 6, "topk": 3, "budget": 12}``,
``{"method": "lookup", "ngram": 3, "num_draft": 8, "adaptive": False}``, and notebook 13's drafters from the target
itself, ``{"method": "medusa", "topk": None}`` (a chain; a list of widths: a static tree) and
``{"method": "eagle", "gamma": 5, "stop_below": 0.5}`` (a chain) or ``{"method": "eagle", "tree": "dynamic",
"depth": 6, "topk": 2, "budget": 10}``. :func:`compare_methods` runs every spec on every prompt
in interleaved rounds (a slow phase of a shared machine hits all methods alike) and keeps each method's fastest
run per prompt; :func:`summarise_methods` pools the prompts.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from helpers.experiments.specdec_costs import interleaved_runs
from helpers.specdec.feature_draft import eagle_generate
from helpers.specdec.linear import autoregressive_generate, speculative_generate
from helpers.specdec.lookup import prompt_lookup_generate
from helpers.specdec.divergence import greedy_divergence, greedy_lossless, near_ties
from helpers.specdec.medusa import medusa_generate
from helpers.specdec.tree import tree_generate

METHODS = ("ar", "linear", "adaptive", "static", "dynamic", "lookup", "medusa", "eagle")
ORDER = {name: i for i, name in enumerate(METHODS)}


def method_label(spec: dict) -> str:
    """A short ASCII name for tables, plots and the LaTeX report: 'linear g5', 'adaptive g8 p<0.3',
    'static 2-1-1-1-1', 'dynamic d6 k3 n12' (depth, top-k, node budget), 'lookup n3'."""
    method = spec["method"]
    if method == "ar":
        return "AR"
    if method == "linear":
        return f"linear g{spec['gamma']}"
    if method == "adaptive":
        return f"adaptive g{spec['gamma']} p<{spec['stop_below']:g}"
    if method == "static":
        return "static " + "-".join(str(w) for w in spec["topk"])
    if method == "dynamic":
        return f"dynamic d{spec['depth']} k{spec['topk']} n{spec['budget']}"
    if method == "lookup":
        return f"lookup n{spec['ngram']} {'adaptive' if spec.get('adaptive') else 'fixed'} {spec['num_draft']}"
    if method == "medusa":
        return "medusa chain" if spec.get("topk") is None else "medusa " + "-".join(str(w) for w in spec["topk"])
    if method == "eagle" and spec.get("tree"):
        return f"eagle tree d{spec['depth']} k{spec['topk']} n{spec['budget']}"
    if method == "eagle":
        return (f"eagle g{spec['gamma']}" + (f" p<{spec['stop_below']:g}" if spec.get("stop_below") else "")
                + (f" b{spec['backoff']}" if spec.get("backoff") else ""))
    raise ValueError(f"unknown method {method!r}; choose one of {METHODS}")


def run_method(spec: dict, target, draft, input_ids: torch.Tensor, max_new_tokens: int, *,
               eos_token_id=-1, time_phases: bool = True, **options):
    """One generation of ``spec`` (greedy unless ``options`` say otherwise); returns the GenerationResult.
    ``draft``: the draft model, or a dict of drafters ``{"draft": model, "medusa": MedusaHeads, "eagle":
    FeatureDraft}`` for the methods that draft from the target itself."""
    drafters = draft if isinstance(draft, dict) else {"draft": draft}
    method = spec["method"]
    common = dict(eos_token_id=eos_token_id, time_phases=time_phases, **options)
    if method == "ar":
        return autoregressive_generate(target, input_ids, max_new_tokens, **options, eos_token_id=eos_token_id)
    if method in ("linear", "adaptive"):
        return speculative_generate(target, drafters["draft"], input_ids, max_new_tokens, spec["gamma"],
                                    stop_below=spec.get("stop_below"), **common)
    if method in ("static", "dynamic"):
        shape = (dict(topk=tuple(spec["topk"]), depth=None, budget=None) if method == "static" else
                 dict(depth=spec["depth"], topk=spec["topk"], budget=spec["budget"]))
        return tree_generate(target, drafters["draft"], input_ids, max_new_tokens, tree=method, **shape, **common)
    if method == "lookup":
        return prompt_lookup_generate(target, input_ids, max_new_tokens, ngram=spec["ngram"],
                                      num_draft=spec["num_draft"], adaptive=spec.get("adaptive", False), **common)
    if method == "medusa":
        topk = spec.get("topk")
        return medusa_generate(target, drafters["medusa"], input_ids, max_new_tokens,
                               topk=None if topk is None else tuple(topk), **common)
    if method == "eagle" and spec.get("tree"):
        return eagle_generate(target, drafters["eagle"], input_ids, max_new_tokens, tree=spec["tree"],
                              depth=spec["depth"], topk=spec["topk"], budget=spec["budget"], **common)
    if method == "eagle":
        return eagle_generate(target, drafters["eagle"], input_ids, max_new_tokens, gamma=spec["gamma"],
                              stop_below=spec.get("stop_below"), backoff=spec.get("backoff", 0), **common)
    raise ValueError(f"unknown method {method!r}; choose one of {METHODS}")


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
    ``on_prompt(rows)`` is called with each prompt's rows as soon as they exist (append them to a result file)."""
    if not specs or specs[0] != {"method": "ar"}:
        raise ValueError('specs must start with {"method": "ar"}: AR is the reference of every speedup')
    for spec in specs:
        method_label(spec)  # unknown methods fail before anything runs
    device = next(target.parameters()).device
    timed = device.type != "cuda"  # phase timing would add a synchronize per phase on a GPU
    for spec in specs:  # warm-up: allocator, lazy imports
        run_method(spec, target, draft, cases[0]["input_ids"], min(8, max_new_tokens), time_phases=timed)
    rows = []
    for case in tqdm(cases, desc="prompts", disable=not progress):
        runs = interleaved_runs({i: (lambda spec=spec: run_method(spec, target, draft, case["input_ids"],
                                                                   max_new_tokens, time_phases=timed))
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
                "method": spec["method"], "label": method_label(spec), "spec": spec,
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
    summary["order"] = summary.method.map(ORDER)
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


def forward_costs(target, draft, context: torch.Tensor, node_counts, draft_widths, *, repeats: int = 10) -> dict:
    """Median seconds of the forwards a round is made of, after a cached ``context``: ``T_T`` (one target token),
    ``T_V[n]`` (the target over n positions: the root and n - 1 nodes, Eq. 5's T_V(n - 1)) and ``T_D[k]`` (the
    draft over k nodes of one tree level; k = 1 is a linear draft step). Multi-token costs are causal forwards: a
    tree mask costs the same to the rounding of these timers (the mask is built once per forward, not per layer)."""
    from helpers.experiments.specdec_costs import forward_time

    median = lambda model, n: float(np.median(forward_time(model, context, n, all_logits=n > 1,  # noqa: E731
                                                           repeats=repeats).samples))
    return {"T_T": median(target, 1), "T_V": {int(n): median(target, int(n)) for n in node_counts},
            "T_D": {int(k): median(draft, int(k)) for k in draft_widths}}


def round_cost(spec: dict, costs: dict, nodes: float) -> tuple[float, float]:
    """(draft, verify) cost of one round of ``spec`` in units of T_T, from :func:`forward_costs` (interpolated at
    the round's mean node count): linear γ pays γ one-token draft steps and T_V(γ), a target forward over γ + 1
    positions; a tree pays one draft forward per level (its width) and T_V(nodes), over nodes + 1 positions;
    lookup pays no draft forwards."""
    t_t = costs["T_T"]
    interp = lambda table, x: float(np.interp(x, sorted(table), [table[k] for k in sorted(table)]))  # noqa: E731
    method = spec["method"]
    if method == "ar":
        return 0.0, 1.0
    if method in ("linear", "adaptive"):
        draft = nodes * interp(costs["T_D"], 1)
    elif method == "static":
        widths, level, draft = spec["topk"], 1, interp(costs["T_D"], 1)
        for width in widths[:-1]:
            level *= width
            draft += interp(costs["T_D"], level)
    elif method == "dynamic":
        draft = interp(costs["T_D"], 1) + (spec["depth"] - 1) * interp(costs["T_D"], spec["topk"])
    else:
        draft = 0.0
    return draft / t_t, interp(costs["T_V"], nodes + 1) / t_t


def method_specs(gammas, adaptive, static_shapes, dynamic, *, ngram: int, num_draft: int) -> list[dict]:
    """Notebook 10's method list from its parameters: AR first, then linear γ, adaptive (γ_max, stop_below),
    static shapes, dynamic (depth, topk, budget) and prompt lookup with a fixed and with an adaptive draft length."""
    return ([{"method": "ar"}]
            + [{"method": "linear", "gamma": int(g)} for g in gammas]
            + [{"method": "adaptive", "gamma": int(g), "stop_below": float(p)} for g, p in adaptive]
            + [{"method": "static", "topk": [int(w) for w in shape]} for shape in static_shapes]
            + [{"method": "dynamic", "depth": int(d), "topk": int(k), "budget": int(n)} for d, k, n in dynamic]
            + [{"method": "lookup", "ngram": int(ngram), "num_draft": int(num_draft), "adaptive": flag}
               for flag in (False, True)])


def cost_model(rows, costs: dict) -> pd.DataFrame:
    """Per method (pooled over prompts): the measured τ, the round's cost from the measured forwards
    (:func:`round_cost`), Eq. 5's predicted decode speedup from them, and the measured decode speedup (prefill
    excluded on both sides, as Eq. 5 models).

    τ is fed in as measured, not predicted: Eq. 4 generalised with the measured per-depth acceptance
    (:func:`expected_tau` of :func:`depth_acceptance`, kept in ``acceptance_by_depth``) reproduces it exactly
    (Σ_d P(accepted ≥ d) is the mean accepted count), so it would predict nothing. What this table tests is the
    round-cost half of Eq. 5: whether τ tokens for the price of the measured draft and verify forwards give the
    measured speed."""
    frame = pd.DataFrame(rows)
    ar = frame[frame.method == "ar"]
    ar_decode = (ar.seconds - ar.prefill_s).sum()
    out = []
    for label, group in frame[frame.method != "ar"].groupby("label", sort=False):
        accepted = [a for per in group.accepted_per_round for a in per]
        nodes = (group.nodes * group.rounds).sum() / group.rounds.sum()
        spec = group.spec.iloc[0]
        draft, verify = round_cost(spec, costs, nodes)
        if spec["method"] in ("linear", "adaptive", "lookup"):
            # rounds differ in their draft count (no lookup match, an adaptive stop): T_V is concave in the
            # positions, so average it over the rounds rather than take it at the mean count
            per_round = [n for per in group.depth_per_round for n in per]
            verify = float(np.mean([round_cost(spec, costs, n)[1] for n in per_round]))
        tau = group.new_tokens.sum() / group.rounds.sum()
        out.append({"label": label, "method": spec["method"], "nodes": nodes, "tau": tau,
                    "draft_cost": draft, "verify_cost": verify,
                    "predicted": predicted_speedup(tau, [draft], verify),
                    "measured": ar_decode / (group.seconds - group.prefill_s).sum(),
                    "acceptance_by_depth": depth_acceptance(accepted)})
    table = pd.DataFrame(out)
    table["error_pct"] = 100 * (table.predicted / table.measured - 1)
    return table


DRAFT_MODEL_METHODS = ("linear", "adaptive", "static", "dynamic")


def cost_model_agreement(table: pd.DataFrame) -> dict:
    """How far Eq. 5 (:func:`cost_model`) can be trusted to RANK the methods, from its own table.

    ``by_family``: mean predicted/measured per method family; ``family_spread``: the largest of those over the
    smallest (1: every family mispredicted by the same factor, so the errors cancel in a ranking);
    ``rank_corr``: Spearman correlation of predicted and measured speedups over all methods; ``top_predicted``:
    the draft-model method (linear, adaptive, static, dynamic) Eq. 5 puts first, with ``top_measured_rank``
    its measured rank among the ``draft_model_methods`` of them (1 = fastest) and ``top_measured`` the one
    measured fastest."""
    if table.empty:
        raise ValueError("an empty cost-model table")
    ratio = table.predicted / table.measured
    by_family = ratio.groupby(table.method, sort=False).mean()
    ranks = table[["predicted", "measured"]].rank()
    rank_corr = float(ranks.predicted.corr(ranks.measured)) if len(table) > 1 else float("nan")
    models = table[table.method.isin(DRAFT_MODEL_METHODS)]
    out = {"by_family": {family: float(value) for family, value in by_family.items()},
           "family_spread": float(by_family.max() / by_family.min()), "rank_corr": rank_corr}
    if len(models):
        top = models.loc[models.predicted.idxmax()]
        out.update({"top_predicted": top.label,
                    "top_measured_rank": int(models.measured.rank(ascending=False, method="min")[top.name]),
                    "draft_model_methods": len(models), "top_measured": models.loc[models.measured.idxmax()].label})
    return out


def context_coverage(prompt_ids, generated_ids, ngram: int = 3) -> dict:
    """How much of an output its context contains: the share of generated tokens that continue an n-gram seen
    before them. Token t_i counts when the ``ngram`` tokens before it followed by t_i (``ngram`` + 1 tokens)
    occur in the prompt (``"prompt"``), or in the prompt or the output before t_i (``"context"``: the text prompt
    lookup searches; a continuation that repeats its own earlier lines scores here, not in ``"prompt"``)."""
    if isinstance(ngram, bool) or not isinstance(ngram, int) or ngram < 1:
        raise ValueError(f"ngram (tokens before the continued token) must be an int >= 1, got {ngram!r}")
    prompt = [int(t) for t in prompt_ids]
    out = [int(t) for t in generated_ids]
    if not out:
        raise ValueError("no generated tokens to measure")
    seq, k = prompt + out, ngram + 1
    in_prompt = {tuple(prompt[j:j + k]) for j in range(len(prompt) - k + 1)}
    seen = set(in_prompt)
    from_prompt = from_context = 0
    for i in range(len(prompt), len(seq)):
        if i < ngram:
            continue
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
    """How the draft's probability compares with the target's agreement, from verified trees
    (``tree_generate(..., record_rounds=True).rounds``): at every node of each round's accepted path, the draft's
    first choice among that node's children, its draft probability (``scores`` are cumulative log-probabilities)
    and whether the target took it. Returns ``mean_probability``, ``accepted_rate``, its 95% Wilson interval
    (``accepted_low``, ``accepted_high``: one example holds a few dozen such nodes) and ``tested`` (how many)."""
    from helpers.stats import wilson_interval

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
    """(tokens of ``generated`` that equal the start of ``case["reference"]``, reference length in tokens): how
    far the model re-emits the text a grounded or in-context prompt holds for it before it diverges. The reference is
    tokenised in context (prompt + reference) so that a merge across the boundary does not misalign it."""
    prompt = tokenizer(case["prompt"])["input_ids"]
    full = tokenizer(case["prompt"] + case["reference"])["input_ids"]
    start = len(prompt) if full[: len(prompt)] == prompt else len(prompt) - 1
    reference = full[start:]
    generated = [int(t) for t in generated]
    count = 0
    for ours, theirs in zip(generated, reference):
        if ours != theirs:
            break
        count += 1
    return count, len(reference)


def nominal_depth(spec: dict) -> int | None:
    """The most draft tokens a round can accept: γ for linear speculation, the number of levels for a tree."""
    if spec["method"] == "linear":
        return int(spec["gamma"])
    if spec["method"] == "static":
        return len(spec["topk"])
    if spec["method"] == "dynamic":
        return int(spec["depth"])
    return None


def tau_against_linear(summary: pd.DataFrame) -> pd.DataFrame:
    """Every tree next to linear speculation of the same depth (γ = the tree's levels), where that γ was measured:
    how much τ the extra nodes buy at equal depth, and at what wall-clock price."""
    linear = {nominal_depth(r.spec): r for r in summary.itertuples() if r.method == "linear"}
    out = []
    for row in summary.itertuples():
        depth = nominal_depth(row.spec) if row.method in ("static", "dynamic") else None
        if depth in linear:
            match = linear[depth]
            out.append({"tree": row.label, "linear": match.label, "depth": depth, "nodes": row.nodes,
                        "tau_ratio": row.tau / match.tau, "speedup_ratio": row.speedup / match.speedup})
    return pd.DataFrame(out, columns=["tree", "linear", "depth", "nodes", "tau_ratio", "speedup_ratio"])


def tied_with_fastest(rows, methods=DRAFT_MODEL_METHODS, *, decode: bool = False, level: float = 0.95,
                      resamples: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Which methods the measurement cannot tell from the fastest, per method of ``methods`` (families) in
    :func:`compare_methods` rows: ``speedup`` over AR (pooled; prefill excluded when ``decode``, as Eq. 5 models),
    ``slower`` = its pooled seconds over the fastest's on the same prompts, and a paired percentile bootstrap
    interval of that ratio over prompts (``low``, ``high``; :func:`helpers.stats.bootstrap_ratio_interval`:
    prompts are the unit that varies, and resampling them carries both the timing noise and the prompt-to-prompt
    spread). ``tied`` when ``low <= 1``: a resampling of the prompts can make it as fast as the fastest. With a
    single prompt there is no interval (nan) and every method counts as tied: one prompt separates nothing. Sorted
    fastest first; the fastest is tied with itself."""
    from helpers.stats import bootstrap_ratio_interval

    frame = pd.DataFrame(rows)
    frame = frame.assign(time=frame.seconds - frame.prefill_s if decode else frame.seconds)
    times = frame.pivot_table(index="id", columns="label", values="time", aggfunc="sum")
    ar = times[frame[frame.method == "ar"].label.iloc[0]]
    labels = frame[frame.method.isin(methods)].label.unique()
    if not len(labels):
        raise ValueError(f"no rows for {methods}")
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
    """Whether Eq. 5 (:func:`cost_model`'s ``predicted``) ranks the methods as far as the measurement can:
    ``ties`` (:func:`tied_with_fastest` over the same methods, decode times) splits them into those tied with the
    fastest and those clearly slower. ``top_tied``: Eq. 5's first choice is one of the tied; ``misplaced``: the
    clearly slower methods Eq. 5 predicts above at least one tied method (the rankings the data can check and
    Eq. 5 gets wrong); ``separates``: none misplaced."""
    pred = table.set_index("label").predicted.reindex(ties.label)
    tied = ties.set_index("label").tied
    top = pred.idxmax()
    floor = pred[tied].min()
    misplaced = [label for label in pred.index if not tied[label] and pred[label] > floor]
    return {"tied": [label for label in pred.index if tied[label]], "top_predicted": top,
            "top_tied": bool(tied[top]), "misplaced": misplaced, "separates": not misplaced}
