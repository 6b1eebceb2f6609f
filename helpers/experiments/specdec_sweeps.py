"""Speculative decoding vs plain decoding vs transformers' assisted generation, on one target/draft pair.

``python -m helpers.bench specdec`` runs the CPU pair greedily over the CPU prompts: our autoregressive
baseline (``ar``), our speculative decoding for each gamma (``sd``) and ``target.generate(assistant_model=
draft)`` (``assisted``, the peer) with the same gammas and with its own default schedule. It prints a table,
the Eq. 5 terms (alpha, c = T_D/T_T, T_V(gamma)/T_T) and returns the headline figures as one JSON line.

Notebook 07 runs :func:`measure_pair` per pair and stores :func:`gamma_rows` in
``results/<profile>/07_speculative_decoding.jsonl``: ONE ROW PER (pair, gamma), for our speculative decoding,
with the AR baseline and the assisted-generation peer of the same prompts in columns (so every row has an
integer ``gamma``). Columns, besides the metadata of ``run_metadata`` (device_name, device_memory_bytes, ...):

- config: ``pair`` ("target / draft"), ``target``, ``draft``, ``gamma``, ``runtime`` (``helpers.models.runtime``'s
  runtime of ours and the AR baseline), ``temperature``, ``max_new_tokens``,
  ``prompt_ids`` (the prompts, in order), ``repeats``;
- ours: ``alpha`` (truncated-geometric MLE pooled over prompts: Σaccepted / (Σaccepted + Σrejections)),
  ``acceptance_rate`` (accepted / proposed), ``mean_accepted_per_round``, ``tokens_per_round``, ``rounds``,
  ``proposed``, ``accepted``, ``rejections``, ``new_tokens``, ``time_s`` (sum over prompts of the fastest of
  ``repeats`` runs), ``tokens_per_s``, ``time_prefill_s``, ``time_draft_s``, ``time_verify_s``,
  ``time_other_s``, ``identical_to_ar`` (all outputs equal the AR outputs; expected True when greedy);
- baseline: ``ar_time_s``, ``ar_tokens_per_s``, ``speedup`` (AR time / our time on the same prompts; the
  ratio of tokens/s when sampling ends prompts at different lengths);
- peer: ``assisted_time_s``, ``assisted_tokens_per_s`` (transformers' assisted generation with
  ``num_assistant_tokens = gamma``, constant), ``assisted_identical_to_ar``, ``speedup_vs_assisted``,
  ``assisted_default_tokens_per_s`` (its default adaptive schedule; the same in every row of a pair);
  null (absent) when the peer was not run at that gamma (``measure_pair(peer_gammas=...)``);
- ``handout_gamma`` (written by notebook 07): gamma is one of the handout's {2, 3, 5, 7} (the rows of its
  Table 1, among which §4.5 picks the best and worst configurations);
- Eq. 5 terms measured on the device (:func:`helpers.experiments.specdec_costs.measure_costs`): ``T_T_s``,
  ``T_D_s``, ``c`` = T_D/T_T, ``T_V_s`` and ``verify_ratio`` = T_V(gamma)/T_T;
- ``per_prompt``: a list with one dict per prompt (``prompt_id``, ``source``, ``prompt_tokens``,
  ``new_tokens``, ``ar_time_s``, ``time_s``, ``assisted_time_s``, ``accepted``, ``rejections``, ``rounds``,
  ``identical_to_ar``) for per-source breakdowns (:func:`source_breakdown`). Notebook 07 stores a row of the same
  shape for the best configuration on the per-source prompt set in ``07_speculative_decoding_by_source.jsonl``.

:func:`measure_pair` itself returns one row per method x gamma x prompt (``method`` "ar", "sd" or "assisted";
``gamma`` null for ar and for assisted's default schedule); :func:`summarise` aggregates those per
(pair, method, gamma) for the benchmark's table.
"""
from __future__ import annotations

import copy
import hashlib

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from helpers.models import CPU_PAIR_DIR, PAIR_PREFIX
from helpers.models.runtime import prepare_graphs
from helpers.experiments.specdec_costs import interleaved_runs, tied_gammas
from helpers.specdec.analysis import pooled_alpha, pooled_speedup, predicted_speedup
from helpers.specdec.divergence import greedy_divergence, greedy_lossless, near_ties
from helpers.specdec.linear import GenerationStats, autoregressive_generate, speculative_generate
from helpers.stats import bootstrap_ratio_interval, wilson_interval

SD_STAT_COLUMNS = ("rounds", "proposed", "accepted", "rejections", "acceptance_rate", "alpha",
                   "mean_accepted_per_round", "tokens_per_round", "time_prefill_s", "time_draft_s",
                   "time_verify_s", "time_other_s")


def weights_tag(model_name: str) -> str:
    """What identifies a model's weights in a result's config: a hash of the CPU pair's file (it may be
    retrained, and old rows must then not count as measured), else the name (pretrained / random)."""
    if not model_name.startswith(PAIR_PREFIX):
        return model_name
    path = CPU_PAIR_DIR / model_name[len(PAIR_PREFIX):] / "model.safetensors"
    return hashlib.sha1(path.read_bytes()).hexdigest()[:12]


@torch.inference_mode()
def assisted_generate(target, draft, input_ids, max_new_tokens: int, gamma: int | None = None,
                      temperature: float = 0.0, eos_token_id=None) -> torch.Tensor:
    """transformers' assisted generation: the new tokens (1-D, CPU).

    ``gamma`` = None keeps transformers' default schedule (adaptive number of drafts and draft confidence
    threshold); an int fixes ``num_assistant_tokens`` with a constant schedule and no early stop. The draft's
    generation config is restored after the call, because the adaptive schedule writes its state there.
    """
    saved = copy.deepcopy(draft.generation_config)
    options = {}
    if gamma is not None:
        options = {"num_assistant_tokens": gamma, "num_assistant_tokens_schedule": "constant",
                   "assistant_confidence_threshold": 0.0}
    sampling = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0} if temperature > 0 else {
        "do_sample": False}
    if eos_token_id is not None:
        sampling["eos_token_id"] = eos_token_id
    try:
        out = target.generate(
            input_ids, attention_mask=torch.ones_like(input_ids), assistant_model=draft,
            max_new_tokens=max_new_tokens, min_new_tokens=0, pad_token_id=target.config.pad_token_id or 0,
            **options, **sampling,
        )
    finally:
        draft.generation_config = saved
    return out[0, input_ids.shape[1]:].cpu()


def _row(case: dict, method: str, gamma, times: list[float], tokens: torch.Tensor, reference, stats) -> dict:
    best = min(times)
    row = {
        "method": method, "gamma": gamma, "prompt_id": case["id"], "source": case["source"],
        "prompt_tokens": int(case["input_ids"].shape[1]), "new_tokens": int(tokens.numel()),
        "time_s": best, "time_s_runs": times, "tokens_per_s": tokens.numel() / best,
        "identical_to_ar": reference is None or torch.equal(tokens, reference),
        # ours: helpers.models.runtime's runtime; the peer always runs transformers' generate()
        "runtime": stats.runtime if isinstance(stats, GenerationStats) else "transformers generate()",
    }
    sd = stats.as_dict() if isinstance(stats, GenerationStats) and method == "sd" else {}
    row.update({column: sd.get(column) for column in SD_STAT_COLUMNS})
    return row


def measure_pair(target, draft, cases: list[dict], gammas, max_new_tokens: int, *, repeats: int = 1,
                 temperature: float = 0.0, seed: int = 42, peer: bool = True, peer_default: bool = True,
                 peer_gammas=None, eos_token_id=None, progress: bool = False, compile: bool = False,
                 phase_run: bool = False) -> list[dict]:
    """AR, speculative decoding per gamma and (``peer``) assisted generation, prompt by prompt.

    For each prompt the methods run in interleaved rounds, ``repeats`` of them
    (:func:`helpers.experiments.specdec_costs.interleaved_runs`), so a slow phase of a shared machine hits all of them
    alike; the fastest run of each is kept. Every speculative or assisted run uses the same
    seed as the AR run (``seed``: private generators for ours, ``torch.manual_seed`` for transformers').
    One untimed warm-up of every method precedes the first prompt. ``peer_gammas``: the gammas of the peer
    (default: ``gammas``). ``compile``: ours and AR with ``"graphs"``, explicitly captured CUDA graphs
    (captured before the first timed run), or ``"compiled"``, the same over the inductor-compiled layer; each row
    then records ``graph_replays``, the CUDA-graph replays of its own timed runs (that method and gamma on that
    prompt: a count per row, not the pair's total). On CUDA the timed runs leave the phase split unknown (a split
    needs a synchronize at every phase boundary); ``phase_run`` adds, after a prompt's timed runs, one synchronized
    run of each gamma whose draft / verify / prefill seconds the row records (``phases_from``), its total time not
    counted in ``time_s``.
    """
    device = next(target.parameters()).device
    gammas = [int(g) for g in gammas]
    methods = [("ar", None)] + [("sd", g) for g in gammas]
    if peer:
        methods += [("assisted", int(g)) for g in (gammas if peer_gammas is None else peer_gammas)]
        methods += [("assisted", None)] if peer_default else []

    def call(method, gamma, ids, tokens=max_new_tokens):
        if method == "ar":
            result = autoregressive_generate(target, ids, tokens, temperature, seed, eos_token_id=eos_token_id,
                                             compile=compile)
            return result.tokens, result.stats
        if method == "sd":
            result = speculative_generate(target, draft, ids, tokens, gamma, temperature, seed,
                                          eos_token_id=eos_token_id, time_phases=device.type != "cuda",
                                          compile=compile)
            return result.tokens, result.stats
        torch.manual_seed(seed)
        return assisted_generate(target, draft, ids, tokens, gamma, temperature, eos_token_id), None

    if compile:  # every graph the runs will replay, compiled and captured before anything is timed
        capacity = max(case["input_ids"].shape[1] for case in cases) + max_new_tokens
        prepare_graphs({target: range(1, max(gammas) + 2), draft: (1, 2)}, capacity, compile=compile)
    for method, gamma in methods:  # warm-up: allocator, kernels, lazy imports of generate()
        call(method, gamma, cases[0]["input_ids"], min(8, max_new_tokens))

    replays = _replay_counter(target, draft) if compile else None
    rows = []
    for case in tqdm(cases, desc="prompts", disable=not progress):
        counted = dict.fromkeys(methods, 0)

        def timed(m, ids=case["input_ids"]):
            before = replays() if replays else 0
            out = call(*m, ids)
            if replays:
                counted[m] += replays() - before
            return out

        runs = interleaved_runs({m: (lambda m=m: timed(m)) for m in methods}, repeats, device=device)
        times = {m: seconds for m, (seconds, _) in runs.items()}
        outputs = {m: results[int(np.argmin(seconds))] for m, (seconds, results) in runs.items()}  # the fastest run's
        reference = outputs[("ar", None)][0]
        for method, gamma in methods:
            tokens, stats = outputs[(method, gamma)]
            row = _row(case, method, gamma, times[(method, gamma)], tokens, None if method == "ar" else reference,
                       stats)
            if not row["identical_to_ar"] and temperature == 0:  # bf16: parted from AR's at a near-tie?
                row["near_tie"] = greedy_divergence(target, case["input_ids"], reference, tokens)["near_tie"]
            if replays:
                row["graph_replays"] = counted[(method, gamma)]
            if phase_run and device.type == "cuda" and method == "sd":
                phased = speculative_generate(target, draft, case["input_ids"], max_new_tokens, gamma, temperature,
                                              seed, eos_token_id=eos_token_id, time_phases=True, compile=compile)
                row.update({k: phased.stats.as_dict().get(k) for k in PHASE_COLUMNS},
                           phases_from="one synchronized run after the timed ones")
            rows.append(row)
    for row in rows:
        row.update(temperature=temperature, max_new_tokens=max_new_tokens)
    return rows


PHASE_COLUMNS = ("time_prefill_s", "time_draft_s", "time_verify_s", "time_other_s")


def _replay_counter(target, draft):
    """CUDA-graph replays so far of both models' explicit steps (0 on a CPU, where nothing is captured)."""
    from helpers.models.graphs import graph_replays
    from helpers.models.runtime import minimal_view

    views = [minimal_view(target), minimal_view(draft)]
    return lambda: sum(graph_replays(v) for v in views)


def _phase_total(column) -> float | None:
    """The phase's seconds summed over prompts; None where no prompt's run timed it (a CUDA run timed whole leaves
    its split unknown, nan: a sum of nothing must not read 0.0 s)."""
    known = column.dropna()
    return float(known.sum()) if len(known) == len(column) and len(column) else None


def summarise(rows, by=("pair", "method", "gamma")):
    """Per configuration over the same prompts: totals, tokens/s, speedup over AR, pooled alpha.

    ``rows``: a list of row dicts or a DataFrame. ``speedup`` is the AR time over the configuration's time on
    the same prompts when the outputs are identical (greedy), else the ratio of tokens/s.
    """
    frame = pd.DataFrame(rows).copy()
    by = [c for c in by if c in frame.columns]
    frame["gamma_key"] = frame["gamma"].astype("Int64").astype(str)
    keys = [("gamma_key" if c == "gamma" else c) for c in by]
    ar = frame[frame["method"] == "ar"]
    ar_keys = [k for k in keys if k not in ("method", "gamma_key")]
    ar_totals = ar.groupby(ar_keys, dropna=False).agg(ar_time_s=("time_s", "sum"), ar_tokens=("new_tokens", "sum"))

    def pooled(group):
        accepted = group["accepted"].sum(min_count=1)
        return pd.Series({
            "gamma": group["gamma"].iloc[0],
            "prompts": len(group),
            "new_tokens": group["new_tokens"].sum(),
            "time_s": group["time_s"].sum(),
            "tokens_per_s": group["new_tokens"].sum() / group["time_s"].sum(),
            "identical_to_ar": greedy_lossless(group),  # near-ties counted apart, in near_ties
            "near_ties": near_ties(group),
            "alpha": pooled_alpha(accepted, group["rejections"].sum(min_count=1)),
            "acceptance_rate": accepted / group["proposed"].sum(min_count=1),
            "mean_accepted_per_round": accepted / group["rounds"].sum(min_count=1),
            "tokens_per_round": group["new_tokens"].sum() / group["rounds"].sum(min_count=1),
            "time_draft_s": group["time_draft_s"].sum(min_count=1),
            "time_verify_s": group["time_verify_s"].sum(min_count=1),
        })

    summary = frame.groupby(keys, dropna=False, sort=False).apply(pooled, include_groups=False).reset_index()
    summary = summary.join(ar_totals, on=ar_keys) if ar_keys else summary.assign(**ar_totals.iloc[0].to_dict())
    summary["speedup"] = [pooled_speedup(r.ar_time_s, r.time_s, new_tokens=r.new_tokens, ar_tokens=r.ar_tokens,
                                         identical=r.identical_to_ar) for r in summary.itertuples()]
    return summary.drop(columns=["gamma_key"])


def gamma_rows(rows: list[dict], costs: dict | None = None) -> list[dict]:
    """One row per gamma of our speculative decoding, with the baseline and the peer in columns (see above)."""
    frame = pd.DataFrame(rows)
    ar = frame[frame["method"] == "ar"].set_index("prompt_id")
    peer = frame[frame["method"] == "assisted"]
    peer_default = peer[peer["gamma"].isna()]
    out = []
    for gamma, sd in frame[frame["method"] == "sd"].groupby("gamma"):
        gamma = int(gamma)
        sd = sd.set_index("prompt_id")
        accepted, rejections = int(sd["accepted"].sum()), int(sd["rejections"].sum())
        identical = greedy_lossless(sd)
        time_s, ar_time_s = float(sd["time_s"].sum()), float(ar.loc[sd.index, "time_s"].sum())
        new_tokens, ar_tokens = int(sd["new_tokens"].sum()), int(ar.loc[sd.index, "new_tokens"].sum())
        row = {
            "gamma": gamma, "runtime": str(sd["runtime"].iloc[0]), "temperature": float(sd["temperature"].iloc[0]),
            "max_new_tokens": int(sd["max_new_tokens"].iloc[0]), "prompt_ids": list(sd.index),
            "alpha": pooled_alpha(accepted, rejections, empty=None),
            "acceptance_rate": accepted / int(sd["proposed"].sum()),
            "mean_accepted_per_round": accepted / int(sd["rounds"].sum()),
            "tokens_per_round": new_tokens / int(sd["rounds"].sum()),
            "rounds": int(sd["rounds"].sum()), "proposed": int(sd["proposed"].sum()), "accepted": accepted,
            "rejections": rejections, "new_tokens": new_tokens, "time_s": time_s, "tokens_per_s": new_tokens / time_s,
            **{column: _phase_total(sd[column]) for column in PHASE_COLUMNS},
            "identical_to_ar": identical, "near_ties": near_ties(sd), "ar_time_s": ar_time_s, "ar_tokens_per_s": ar_tokens / ar_time_s,
            "speedup": pooled_speedup(ar_time_s, time_s, new_tokens=new_tokens, ar_tokens=ar_tokens,
                                      identical=identical),
        }
        if "graph_replays" in sd:  # counted per row (decode with graphs): this gamma's own timed runs
            row["graph_replays"], row["graph_replays_scope"] = int(sd["graph_replays"].sum()), "row"
        if "phases_from" in sd:
            row["phases_from"] = str(sd["phases_from"].iloc[0])
        same_gamma = peer[peer["gamma"] == gamma].set_index("prompt_id")
        if len(same_gamma):
            row.update(
                assisted_time_s=float(same_gamma["time_s"].sum()),
                assisted_tokens_per_s=float(same_gamma["new_tokens"].sum() / same_gamma["time_s"].sum()),
                assisted_identical_to_ar=bool(same_gamma["identical_to_ar"].all()),
            )
            row["speedup_vs_assisted"] = row["tokens_per_s"] / row["assisted_tokens_per_s"]
        if len(peer_default):
            row["assisted_default_tokens_per_s"] = float(peer_default["new_tokens"].sum() / peer_default["time_s"].sum())
        if costs is not None:
            row.update(T_T_s=costs["T_T"], T_D_s=costs["T_D"], c=costs["T_D"] / costs["T_T"],
                       T_V_s=costs["T_V"].get(gamma), verify_ratio=costs["T_V"].get(gamma, float("nan")) / costs["T_T"])
        row["per_prompt"] = [
            {"prompt_id": pid, "source": sd.loc[pid, "source"], "prompt_tokens": int(sd.loc[pid, "prompt_tokens"]),
             "new_tokens": int(sd.loc[pid, "new_tokens"]), "ar_time_s": float(ar.loc[pid, "time_s"]),
             "time_s": float(sd.loc[pid, "time_s"]),
             "assisted_time_s": float(same_gamma.loc[pid, "time_s"]) if pid in same_gamma.index else None,
             "accepted": int(sd.loc[pid, "accepted"]), "rejections": int(sd.loc[pid, "rejections"]),
             "rounds": int(sd.loc[pid, "rounds"]), "identical_to_ar": bool(sd.loc[pid, "identical_to_ar"])}
            for pid in sd.index]
        out.append(row)
    return out


# ------------------------------------------------------------------------------------- statistics per source


def source_breakdown(per_prompt, *, level: float = 0.95, resamples: int = 2000, seed: int = 0):
    """Per source of a configuration's ``per_prompt`` list (see the module docstring): prompts, their mean length
    in tokens (``prompt_tokens``: the prefill a short generation pays), pooled alpha
    with a bootstrap interval over prompts (and the narrower Wilson interval over acceptance tests), tokens
    per round, the speedup (summed AR time / summed speculative time) with a bootstrap interval over prompts,
    and the spread of the per-prompt speedups (min, median, max). Sorted by speedup, fastest first."""
    frame = pd.DataFrame(list(per_prompt))
    if frame.empty:
        raise ValueError("per_prompt is empty")
    out = []
    for source, group in frame.groupby("source", sort=True):
        tested = group["accepted"] + group["rejections"]
        accepted, total = int(group["accepted"].sum()), int(tested.sum())
        per_prompt_speedup = group["ar_time_s"] / group["time_s"]
        row = {"source": source, "prompts": len(group), "prompt_tokens": float(group["prompt_tokens"].mean()),
               "alpha": pooled_alpha(accepted, total - accepted),
               "tokens_per_round": group["new_tokens"].sum() / group["rounds"].sum(),
               "speedup": group["ar_time_s"].sum() / group["time_s"].sum(),
               "speedup_min": float(per_prompt_speedup.min()), "speedup_median": float(per_prompt_speedup.median()),
               "speedup_max": float(per_prompt_speedup.max())}
        row["alpha_wilson_low"], row["alpha_wilson_high"] = wilson_interval(accepted, total) if total else (
            float("nan"), float("nan"))
        if len(group) >= 2:
            row["alpha_low"], row["alpha_high"] = bootstrap_ratio_interval(
                group["accepted"], tested, level=level, resamples=resamples, seed=seed)
            row["speedup_low"], row["speedup_high"] = bootstrap_ratio_interval(
                group["ar_time_s"], group["time_s"], level=level, resamples=resamples, seed=seed)
        else:
            row.update(alpha_low=float("nan"), alpha_high=float("nan"), speedup_low=float("nan"),
                       speedup_high=float("nan"))
        out.append(row)
    return pd.DataFrame(out).set_index("source").sort_values("speedup", ascending=False)


def with_overall(by_source, per_prompt, **kwargs):
    """``by_source`` (:func:`source_breakdown`) with an ``all sources`` row last: the same statistics over every
    prompt of ``per_prompt`` (its speedup is the configuration's pooled speedup)."""
    overall = source_breakdown([{**row, "source": "all sources"} for row in per_prompt], **kwargs)
    return pd.concat([by_source, overall])


def alpha_for_speedup(speedup: float, gamma: int, draft_ratio: float, verify_ratio: float) -> float:
    """The alpha at which Eq. 5 predicts ``speedup`` at this ``gamma``, cost ratio c and T_V/T_T (Eq. 5 rises
    monotonically with alpha); nan when even alpha = 1 falls short. Bisection to 1e-6."""
    def at(alpha):
        return float(predicted_speedup(gamma, alpha, draft_ratio, verify_ratio))

    if at(1.0) < speedup:
        return float("nan")
    if at(0.0) >= speedup:
        return 0.0
    low, high = 0.0, 1.0
    while high - low > 1e-6:
        middle = (low + high) / 2
        low, high = (middle, high) if at(middle) < speedup else (low, middle)
    return high


# ------------------------------------------------------------------------------------- notebook 07's configurations


def sweep_configs(target: str, draft: str, gammas, *, prompt_ids: list, temperature: float, max_new_tokens: int,
                  repeats: int, dtype: str, device: str) -> list[dict]:
    """The result-store configurations of one pair's sweep, one per gamma (the config columns of the module
    docstring, with the weights of both models, :func:`weights_tag`)."""
    weights = {"target_weights": weights_tag(target), "draft_weights": weights_tag(draft)}
    return [{"pair": f"{target} / {draft}", "target": target, "draft": draft, "gamma": int(g),
             "temperature": temperature, "max_new_tokens": max_new_tokens, "prompt_ids": list(prompt_ids),
             "repeats": repeats, "dtype": dtype, "device": device, **weights} for g in gammas]


def select_sweep(frame, configs: list[dict]):
    """The rows of a result frame that answer ``configs`` (:func:`sweep_configs`): same pair, gamma, temperature,
    output length, prompts and weights; pairs in the order of ``configs`` (an ordered categorical), then gamma;
    with the Eq. 5 prediction from each row's own alpha, c and T_V/T_T in a column ``eq5``."""
    keys = ("temperature", "max_new_tokens", "target_weights", "draft_weights")
    wanted = {(c["pair"], c["gamma"]): c for c in configs}

    def answers(row) -> bool:
        config = wanted.get((row["pair"], row["gamma"]))
        return (config is not None and all(row[k] == config[k] for k in keys)
                and list(row["prompt_ids"]) == list(config["prompt_ids"]))

    frame = frame[[answers(row) for _, row in frame.iterrows()]].copy()
    frame["pair"] = pd.Categorical(frame["pair"], list(dict.fromkeys(c["pair"] for c in configs)), ordered=True)
    frame = frame.sort_values(["pair", "gamma"]).reset_index(drop=True)
    frame["eq5"] = [float(predicted_speedup(int(g), a, c, v))
                    for g, a, c, v in zip(frame["gamma"], frame["alpha"], frame["c"], frame["verify_ratio"])]
    return frame


def measure_config(target, draft, cases: list[dict], gamma: int, max_new_tokens: int, *, exclude=(), **options) -> dict:
    """Our speculative decoding at one ``gamma`` with its AR baseline (no peer) over ``cases``: the
    :func:`gamma_rows` row, without the keys in ``exclude`` (a configuration's own columns). ``options`` go to
    :func:`measure_pair` (repeats, temperature, seed, progress, ...)."""
    rows = measure_pair(target, draft, cases, [int(gamma)], max_new_tokens, peer=False, **options)
    return {k: v for k, v in gamma_rows(rows)[0].items() if k not in exclude}


def pair_optimum(frame) -> dict:
    """Per pair of a sweep frame: the measured best gamma, its speedup, where it lies in the sweep (``shape``),
    the largest gamma measured, the range of alpha and c, and the gammas the prompts do not separate from the best
    (``tied``: :func:`~helpers.experiments.specdec_costs.tied_gammas`)."""
    optimum = {}
    for pair, group in frame.groupby("pair", observed=True):
        top = group.loc[group["speedup"].idxmax()]
        g, first, last = int(top["gamma"]), int(group["gamma"].min()), int(group["gamma"].max())
        shape = ("is still rising at the largest gamma measured" if g == last else
                 "is already falling from the smallest gamma measured" if g == first else "peaks inside the sweep")
        optimum[pair] = {"gamma": g, "speedup": float(top["speedup"]), "shape": shape, "first": first, "last": last,
                         "alpha_range": (group["alpha"].min(), group["alpha"].max()), "c": group["c"].iloc[0],
                         "tied": tied_gammas(group)}
    return optimum


# ------------------------------------------------------------------------------------- per-source claims and table

EXPECTED_SOURCE_ORDER = ("data", "code", "docstring", "prose")  # most to least predictable, as notebook 07 argues


def correlation_word(rho: float) -> str:
    """A (rank) correlation in words, for prose that must follow the number: "strong" (|rho| >= 0.7), "moderate"
    (>= 0.4), "weak" (>= 0.2), else "no clear" (also for nan); "negative" is added below zero."""
    if rho != rho or abs(rho) < 0.2:
        return "no clear"
    word = "strong" if abs(rho) >= 0.7 else "moderate" if abs(rho) >= 0.4 else "weak"
    return word if rho > 0 else f"{word} negative"


def _spearman(x, y) -> float:
    x, y = pd.Series(np.asarray(x, dtype=float)), pd.Series(np.asarray(y, dtype=float))
    return float(x.corr(y, method="spearman")) if len(x) > 2 else float("nan")


def _overlap(low_a, high_a, low_b, high_b) -> bool:
    return bool(low_a <= high_b and low_b <= high_a)


def source_claims(by_source, per_prompt=None) -> dict:
    """The checks behind notebook 07's per-source prose, on a :func:`source_breakdown` frame (fastest first):
    the expected and the measured order of alpha, the fastest and slowest source, whether their speedup (and alpha)
    intervals are separated, the correlation of alpha and speedup over sources (Pearson ``correlation`` and Spearman
    ``rank_correlation``; nan for two or fewer), whether alpha and speedup rank the sources alike (``same_order``),
    how many of the ``source_pairs`` pairs of sources have overlapping speedup intervals (``overlapping_pairs``), and
    for how many sources the Wilson interval is narrower than the bootstrap over prompts. Where the measured order of
    alpha departs from the expected one: ``order_swaps``, every pair of sources the two orders rank oppositely, as
    ``(expected first, expected second, alpha intervals overlap)``, and ``swaps_within_noise`` (every such pair's
    alpha intervals overlap: the departure does not exceed the prompt-to-prompt noise; True without a swap).

    With ``per_prompt`` (the row's list, see the module docstring) also the same question prompt by prompt, where
    there are enough points to answer it: ``prompts`` (those with at least one acceptance test), the Spearman
    correlation of a prompt's speedup with its alpha (``prompt_alpha_rho``) and with its length in tokens
    (``prompt_length_rho``), and the partial rank correlation with length at a given alpha
    (``prompt_length_partial_rho``)."""
    expected = [s for s in EXPECTED_SOURCE_ORDER if s in by_source.index]
    fast, slow = by_source.index[0], by_source.index[-1]
    sources = list(by_source.index)
    pairs = [(a, b) for i, a in enumerate(sources) for b in sources[i + 1:]]
    overlapping = sum(_overlap(by_source.loc[a, "speedup_low"], by_source.loc[a, "speedup_high"],
                               by_source.loc[b, "speedup_low"], by_source.loc[b, "speedup_high"]) for a, b in pairs)
    measured = [src for src in by_source.sort_values("alpha", ascending=False).index if src in expected]
    swaps = [(a, b, _overlap(by_source.loc[a, "alpha_low"], by_source.loc[a, "alpha_high"],
                             by_source.loc[b, "alpha_low"], by_source.loc[b, "alpha_high"]))
             for i, a in enumerate(expected) for b in expected[i + 1:] if measured.index(a) > measured.index(b)]
    claims = {
        "order_swaps": swaps, "swaps_within_noise": all(overlap for _, _, overlap in swaps),
        "expected": expected,
        "measured_order": [s for s in by_source.sort_values("alpha", ascending=False).index if s in expected],
        "fast": fast, "slow": slow,
        "separated": bool(by_source.loc[fast, "speedup_low"] > by_source.loc[slow, "speedup_high"]),
        "alpha_separated": bool(by_source.loc[fast, "alpha_low"] > by_source.loc[slow, "alpha_high"]),
        "correlation": by_source["alpha"].corr(by_source["speedup"]) if len(by_source) > 2 else float("nan"),
        "rank_correlation": _spearman(by_source["alpha"], by_source["speedup"]),
        "same_order": list(by_source.sort_values("alpha", ascending=False).index) == sources,
        "overlapping_pairs": int(overlapping), "source_pairs": len(pairs),
        "wilson_narrower": int(((by_source["alpha_wilson_high"] - by_source["alpha_wilson_low"])
                                < (by_source["alpha_high"] - by_source["alpha_low"])).sum()),
    }
    if per_prompt is not None:
        frame = pd.DataFrame(list(per_prompt))
        frame = frame[(frame["accepted"] + frame["rejections"]) > 0]
        alpha = frame["accepted"] / (frame["accepted"] + frame["rejections"])
        speedup = frame["ar_time_s"] / frame["time_s"]
        r_sa, r_sl = _spearman(speedup, alpha), _spearman(speedup, frame["prompt_tokens"])
        r_al = _spearman(alpha, frame["prompt_tokens"])
        partial = (r_sl - r_sa * r_al) / np.sqrt((1 - r_sa ** 2) * (1 - r_al ** 2)) if abs(r_sa) < 1 and abs(
            r_al) < 1 else float("nan")
        claims.update(prompts=len(frame), prompt_alpha_rho=r_sa, prompt_length_rho=r_sl,
                      prompt_length_partial_rho=float(partial))
    return claims


def cost_check(frame) -> tuple[pd.DataFrame, dict]:
    """What notebook 07's Eq. 5 terms were measured under, per pair of a :func:`select_sweep` frame, and the checks
    behind its prose about them.

    The table (one row per pair): the runtime, the prompt whose cached context the costs were timed on (the row's
    ``cost_prompt``: the median-length prompt of the sweep; older rows: its first prompt), when the pair was measured, ``T_T``, ``T_D`` and ``T_V`` at the smallest gamma (ms), c and
    T_V/T_T there, the AR generation's own time per token (its whole run, prefill included, ms), and how many of the
    pair's rows lie above and below Eq. 5's prediction.

    The claims: ``shared_targets`` (targets with two or more pairs, each pair with its own cost measurement);
    ``same_conditions`` (their pairs' costs ran on the same runtime and the same context prompt); ``tt_spread`` and
    ``tv_spread`` (largest relative spread, max/min - 1, of one target's T_T and of its T_V at the smallest gamma
    across its pairs; nan without a shared target); ``above``, ``below`` and ``rows`` (Eq. 5 sides over all rows);
    ``sides_by_pair`` (every pair's rows lie on one side of Eq. 5); ``low_tt_above`` (for every shared target, some
    row of its pairs lies above Eq. 5 and its pair with the lowest T_T has the most rows above it: a T_T timed low
    inflates c and T_V/T_T, so Eq. 5 comes out too low; False, never vacuously True, where no row lies above);
    ``ratios_overlap`` (for every shared target, the ranges of measured/Eq. 5 of its pairs overlap, so the spread of
    its T_T does not show in those ratios; False without a shared target); ``tt_over_ar_step`` (the pairs whose
    isolated T_T exceeds the AR generation's whole time per token, which includes the prefill: a T_T timed in a slow
    phase). The table also carries each pair's lowest and highest measured/Eq. 5 ratio."""
    out = []
    for pair, group in frame.groupby("pair", observed=True, sort=False):
        first = group.sort_values("gamma").iloc[0]
        out.append({
            "pair": str(pair), "target": first["target"], "draft": first["draft"], "runtime": first.get("runtime"),
            "cost prompt": first["cost_prompt"] if isinstance(first.get("cost_prompt"), str)
            else list(first["prompt_ids"])[0],  # rows before the cost_prompt column: the sweep's first prompt
            "stored at": str(group["timestamp"].min()) if "timestamp" in group else None,
            "T_T (ms)": 1e3 * first["T_T_s"], "T_D (ms)": 1e3 * first["T_D_s"], "gamma": int(first["gamma"]),
            "T_V (ms)": 1e3 * first["T_V_s"], "c": first["c"], "T_V/T_T": first["verify_ratio"],
            "AR ms/token": 1e3 / first["ar_tokens_per_s"],
            "above Eq. 5": int((group["speedup"] > group["eq5"]).sum()),
            "below Eq. 5": int((group["speedup"] < group["eq5"]).sum()),
            "ratio low": float((group["speedup"] / group["eq5"]).min()),
            "ratio high": float((group["speedup"] / group["eq5"]).max()),
        })
    table = pd.DataFrame(out)
    claims = {"above": int(table["above Eq. 5"].sum()), "below": int(table["below Eq. 5"].sum()),
              "rows": len(frame), "shared_targets": [], "same_conditions": True,
              "tt_spread": float("nan"), "tv_spread": float("nan"), "low_tt_above": True, "ratios_overlap": True,
              "sides_by_pair": bool(((table["above Eq. 5"] == 0) | (table["below Eq. 5"] == 0)).all()),
              "tt_over_ar_step": list(table.loc[table["T_T (ms)"] > table["AR ms/token"], "pair"])}
    for target, group in table.groupby("target", sort=False):
        if len(group) < 2:
            continue
        claims["shared_targets"].append(target)
        claims["same_conditions"] &= bool(group["runtime"].nunique() == 1 and group["cost prompt"].nunique() == 1
                                          and group["gamma"].nunique() == 1)
        claims["tt_spread"] = np.nanmax([claims["tt_spread"], group["T_T (ms)"].max() / group["T_T (ms)"].min() - 1])
        claims["tv_spread"] = np.nanmax([claims["tv_spread"], group["T_V (ms)"].max() / group["T_V (ms)"].min() - 1])
        # no claim without a row above Eq. 5: 0 == max(0, 0) would make "the low-T_T pair lies above" vacuously true
        claims["low_tt_above"] &= bool(group["above Eq. 5"].max() > 0 and group.loc[group["T_T (ms)"].idxmin(),
                                                                                     "above Eq. 5"]
                                       == group["above Eq. 5"].max())
        claims["ratios_overlap"] &= bool(group["ratio low"].max() <= group["ratio high"].min())
    claims["tt_spread"], claims["tv_spread"] = float(claims["tt_spread"]), float(claims["tv_spread"])
    claims["low_tt_above"] = bool(claims["low_tt_above"] and claims["shared_targets"])
    claims["ratios_overlap"] = bool(claims["ratios_overlap"] and claims["shared_targets"])
    return table, claims


def source_table(by_source):
    """The report's per-source table of a :func:`source_breakdown` frame: rounded values and intervals as text."""
    def interval(low, high):
        return [f"{lo:.2f}-{hi:.2f}" for lo, hi in zip(low, high)]

    return pd.DataFrame({
        "source": by_source.index, "prompts": by_source["prompts"].to_numpy(),
        "prompt tokens (mean)": by_source["prompt_tokens"].round(0).astype(int).to_numpy(),
        "alpha (MLE)": by_source["alpha"].round(3).to_numpy(),
        "95% CI (prompts)": interval(by_source["alpha_low"], by_source["alpha_high"]),
        "Wilson 95% CI": interval(by_source["alpha_wilson_low"], by_source["alpha_wilson_high"]),
        "tau (tokens/round)": by_source["tokens_per_round"].round(2).to_numpy(),
        "speedup": by_source["speedup"].round(2).to_numpy(),
        "95% CI": interval(by_source["speedup_low"], by_source["speedup_high"]),
        "per prompt min/median/max": [f"{a:.2f}/{b:.2f}/{c:.2f}" for a, b, c in
                                      zip(by_source["speedup_min"], by_source["speedup_median"],
                                          by_source["speedup_max"])],
    })


def alpha_speed_inversions(by_source) -> dict:
    """Pairs of sources (not the ``all sources`` row) where the one with the higher alpha has the lower speedup, and
    how many of those have the longer prompts (a longer prefill weighs on a short generation's speedup): the
    report's sentence on why alpha alone does not order the sources."""
    sources = by_source.drop(index="all sources", errors="ignore")
    pairs = [(fast, slow) for fast in sources.index for slow in sources.index
             if sources.loc[fast, "speedup"] > sources.loc[slow, "speedup"]
             and sources.loc[slow, "alpha"] > sources.loc[fast, "alpha"]]
    longer = [(f, s) for f, s in pairs if sources.loc[s, "prompt_tokens"] > sources.loc[f, "prompt_tokens"]]
    text = "; ".join(f"{s} (alpha {sources.loc[s, 'alpha']:.3f}, {sources.loc[s, 'prompt_tokens']:.0f}-token prompts) "
                     f"slower than {f} (alpha {sources.loc[f, 'alpha']:.3f}, {sources.loc[f, 'prompt_tokens']:.0f} "
                     f"tokens)" for f, s in pairs) or "none"
    return {"inversions": len(pairs), "inversions_longer": len(longer), "inversions_text": text}
