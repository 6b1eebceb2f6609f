"""Speculative decoding against plain decoding and transformers' assisted generation on one target/draft pair: our
autoregressive baseline (``ar``), our speculative decoding per gamma (``sd``) and ``target.generate(
assistant_model=draft)`` (``assisted``, the peer) at the same gammas and at its own default schedule.

:func:`measure_pair` returns one row per method x gamma x prompt (``gamma`` null for ar and for the peer's default
schedule); :func:`gamma_rows` pools them into ONE ROW PER (pair, gamma) of ours, the AR baseline and the peer in
columns: the rows of ``results/<profile>/07_speculative_decoding.jsonl`` and ``python -m helpers.bench specdec``.
Their columns, besides :func:`helpers.results.run_metadata`'s:

- config (:func:`sweep_configs`): ``kind`` (``e2e``), ``pair``, ``target``, ``draft``, ``gamma``, ``temperature``,
  ``max_new_tokens``, ``prompt_ids``, ``repeats``, ``dtype``, ``device``, both models' weights; notebook 07 adds
  ``handout_gamma`` (gamma is one of the handout's Table 1: 2, 3, 5, 7), ``cost_prompt`` and ``context_len``;
- ours: ``alpha`` (pooled MLE: accepted / (accepted + rejections)), ``acceptance_rate`` (accepted / proposed),
  ``mean_accepted_per_round``, ``tokens_per_round``, the counts, ``time_s`` (summed over prompts, the fastest of
  ``repeats`` runs each), ``tokens_per_s``, the phase seconds, ``runtime`` and ``identical_to_ar``;
- baseline: ``ar_time_s``, ``ar_tokens_per_s``, ``speedup`` (AR's time over ours; the ratio of tokens/s where
  sampling ends prompts at different lengths);
- peer, where it ran at that gamma: ``assisted_time_s``, ``assisted_tokens_per_s`` (constant
  ``num_assistant_tokens = gamma``), ``assisted_identical_to_ar``, ``speedup_vs_assisted``, and its default
  schedule's ``assisted_default_tokens_per_s`` and ``assisted_default_identical_to_ar``;
- Eq. 5 terms (:func:`helpers.experiments.specdec_costs.measure_costs`): ``target_step_s``, ``T_D_s``, ``c`` = T_D/T_T,
  ``T_V_s`` and ``verify_ratio`` = T_V(gamma)/T_T;
- ``per_prompt``: one dict per prompt (its counts and times) for per-source breakdowns
  (:func:`helpers.experiments.nb07.study.source_breakdown`).
"""
from __future__ import annotations

import copy
import hashlib

import pandas as pd
import torch
from tqdm.auto import tqdm

from helpers.experiments.specdec_costs import graph_counts
from helpers.models import CPU_PAIR_DIR, PAIR_PREFIX
from helpers.models.graphs import capture_steps
from helpers.models.runtime import minimal_view
from helpers.specdec.analysis import pooled_alpha, pooled_speedup
from helpers.specdec.divergence import greedy_divergence, greedy_lossless, near_ties
from helpers.specdec.linear import autoregressive_generate, speculative_generate
from helpers.timing import measure_interleaved

PHASE_COLUMNS = ("time_prefill_s", "time_draft_s", "time_verify_s", "time_other_s")
SD_STAT_COLUMNS = ("rounds", "proposed", "accepted", "rejections", "acceptance_rate", "alpha",
                   "mean_accepted_per_round", "tokens_per_round", *PHASE_COLUMNS)
COUNTS = ("rounds", "proposed", "accepted", "rejections", "new_tokens")  # summed over prompts per gamma


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
    """transformers' assisted generation: the new tokens (1-D, CPU). ``gamma`` None keeps its default adaptive
    schedule; an int fixes ``num_assistant_tokens`` (constant schedule, no early stop). The draft's generation
    config is restored afterwards: the adaptive schedule writes its state there."""
    saved = copy.deepcopy(draft.generation_config)
    options = {} if gamma is None else {"num_assistant_tokens": gamma, "num_assistant_tokens_schedule": "constant",
                                        "assistant_confidence_threshold": 0.0}
    sampling = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0} if temperature > 0 else {
        "do_sample": False}
    if eos_token_id is not None:
        sampling["eos_token_id"] = eos_token_id
    try:
        out = target.generate(input_ids, attention_mask=torch.ones_like(input_ids), assistant_model=draft,
                              max_new_tokens=max_new_tokens, min_new_tokens=0,
                              pad_token_id=target.config.pad_token_id or 0, **options, **sampling)
    finally:
        draft.generation_config = saved
    return out[0, input_ids.shape[1]:].cpu()


def measure_pair(target, draft, cases: list[dict], gammas, max_new_tokens: int, *, repeats: int = 1,
                 temperature: float = 0.0, seed: int = 42, peer: bool = True, peer_default: bool = True,
                 peer_gammas=None, eos_token_id=None, progress: bool = False, compile: bool = False,
                 phase_run: bool = False) -> list[dict]:
    """AR, speculative decoding per gamma and (``peer``) assisted generation at ``peer_gammas`` (default ``gammas``),
    prompt by prompt in ``repeats`` interleaved rounds (:func:`helpers.timing.measure_interleaved`: a slow phase of a
    shared machine hits every method alike), the fastest run of each kept, every run seeded with ``seed``, after one
    untimed warm-up of each method. ``compile`` (``"graphs"`` or ``"compiled"``): ours and AR replay CUDA graphs
    captured before anything is timed, and each row records ``graph_replays``, its own timed runs' replays. A timed
    CUDA run leaves the phase split unknown; ``phase_run`` adds one synchronized run of each gamma whose phase seconds
    the row records (``phases_from``), its time not counted in ``time_s``."""
    device = next(target.parameters()).device
    gammas = [int(g) for g in gammas]
    methods = [("ar", None)] + [("sd", g) for g in gammas]
    if peer:
        methods += [("assisted", int(g)) for g in (gammas if peer_gammas is None else peer_gammas)]
        methods += [("assisted", None)] if peer_default else []

    def call(method, gamma, ids, tokens=max_new_tokens, time_phases=device.type != "cuda"):
        if method == "assisted":
            torch.manual_seed(seed)
            return assisted_generate(target, draft, ids, tokens, gamma, temperature, eos_token_id), None
        result = (autoregressive_generate(target, ids, tokens, temperature, seed, eos_token_id=eos_token_id,
                                          compile=compile) if method == "ar" else
                  speculative_generate(target, draft, ids, tokens, gamma, temperature, seed, eos_token_id=eos_token_id,
                                       time_phases=time_phases, compile=compile))
        return result.tokens, result.stats

    views = [minimal_view(target), minimal_view(draft)] if compile else []
    capacity = max(case["input_ids"].shape[1] for case in cases) + max_new_tokens
    for view, widths in zip(views, (range(1, max(gammas) + 2), (1, 2))):  # the target verifies, the draft drafts
        capture_steps(view, capacity, widths, compiled=compile == "compiled")  # before anything is timed
    for method, gamma in methods:  # warm-up: allocator, kernels, lazy imports of generate()
        call(method, gamma, cases[0]["input_ids"], min(8, max_new_tokens))
    rows = []
    for case in tqdm(cases, desc="prompts", disable=not progress):
        ids, counted = case["input_ids"], dict.fromkeys(methods, 0)

        def timed(m):
            before = graph_counts(views)[0]
            out = call(*m, ids)
            counted[m] += graph_counts(views)[0] - before
            return out

        runs = measure_interleaved({m: (lambda m=m: timed(m)) for m in methods}, repeats=repeats, device=device,
                                   keep_results=True)
        reference = runs[("ar", None)].fastest_result()[0]
        for (method, gamma), timing in runs.items():
            (tokens, stats), best = timing.fastest_result(), timing.min
            sd = stats.as_dict() if method == "sd" else {}
            row = {"method": method, "gamma": gamma, "prompt_id": case["id"], "source": case["source"],
                   "prompt_tokens": int(ids.shape[1]), "new_tokens": int(tokens.numel()), "time_s": best,
                   "time_s_runs": timing.samples, "tokens_per_s": tokens.numel() / best,
                   "identical_to_ar": method == "ar" or torch.equal(tokens, reference),
                   # ours: helpers.models.runtime's runtime; the peer always runs transformers' generate()
                   "runtime": stats.runtime if stats is not None else "transformers generate()",
                   **{column: sd.get(column) for column in SD_STAT_COLUMNS}}
            if not row["identical_to_ar"] and temperature == 0:  # bf16: parted from AR's at a near-tie?
                row["near_tie"] = greedy_divergence(target, ids, reference, tokens)["near_tie"]
            if compile:
                row["graph_replays"] = counted[(method, gamma)]
            if phase_run and device.type == "cuda" and method == "sd":
                phased = call(method, gamma, ids, time_phases=True)[1].as_dict()
                row.update({k: phased.get(k) for k in PHASE_COLUMNS},
                           phases_from="one synchronized run after the timed ones")
            rows.append({**row, "temperature": temperature, "max_new_tokens": max_new_tokens})
    return rows


def _phase_total(column) -> float | None:
    """The phase's seconds summed over prompts; None where no prompt's run timed it (a CUDA run timed whole leaves
    its split unknown, nan: a sum of nothing must not read 0.0 s)."""
    known = column.dropna()
    return float(known.sum()) if len(known) == len(column) and len(column) else None


def gamma_rows(rows: list[dict], costs: dict | None = None) -> list[dict]:
    """One row per gamma of our speculative decoding, the baseline and the peer in columns (module docstring)."""
    frame = pd.DataFrame(rows)
    ar = frame[frame["method"] == "ar"].set_index("prompt_id")
    peer = frame[frame["method"] == "assisted"]
    out = []
    for gamma, sd in frame[frame["method"] == "sd"].groupby("gamma"):
        gamma, sd = int(gamma), sd.set_index("prompt_id")
        total = {key: int(sd[key].sum()) for key in COUNTS}
        identical = greedy_lossless(sd)
        time_s, ar_time_s = float(sd["time_s"].sum()), float(ar.loc[sd.index, "time_s"].sum())
        new_tokens, ar_tokens = total["new_tokens"], int(ar.loc[sd.index, "new_tokens"].sum())
        row = {
            "gamma": gamma, "runtime": str(sd["runtime"].iloc[0]), "temperature": float(sd["temperature"].iloc[0]),
            "max_new_tokens": int(sd["max_new_tokens"].iloc[0]), "prompt_ids": list(sd.index),
            "alpha": pooled_alpha(total["accepted"], total["rejections"], empty=None),
            "acceptance_rate": total["accepted"] / total["proposed"],
            "mean_accepted_per_round": total["accepted"] / total["rounds"],
            "tokens_per_round": new_tokens / total["rounds"], **total,
            "time_s": time_s, "tokens_per_s": new_tokens / time_s,
            **{column: _phase_total(sd[column]) for column in PHASE_COLUMNS},
            "identical_to_ar": identical, "near_ties": near_ties(sd), "ar_time_s": ar_time_s,
            "ar_tokens_per_s": ar_tokens / ar_time_s,
            "speedup": pooled_speedup(ar_time_s, time_s, new_tokens=new_tokens, ar_tokens=ar_tokens,
                                      identical=identical),
        }
        if "graph_replays" in sd:  # counted per row (decode with graphs): this gamma's own timed runs
            row["graph_replays"], row["graph_replays_scope"] = int(sd["graph_replays"].sum()), "row"
        if "phases_from" in sd:
            row["phases_from"] = str(sd["phases_from"].iloc[0])
        same_gamma, peer_default = peer[peer["gamma"] == gamma].set_index("prompt_id"), peer[peer["gamma"].isna()]
        if len(same_gamma):
            row.update(assisted_time_s=float(same_gamma["time_s"].sum()),
                       assisted_tokens_per_s=float(same_gamma["new_tokens"].sum() / same_gamma["time_s"].sum()),
                       assisted_identical_to_ar=bool(same_gamma["identical_to_ar"].all()))
            row["speedup_vs_assisted"] = row["tokens_per_s"] / row["assisted_tokens_per_s"]
        if len(peer_default):
            row.update(assisted_default_tokens_per_s=float(peer_default["new_tokens"].sum()
                                                           / peer_default["time_s"].sum()),
                       assisted_default_identical_to_ar=bool(peer_default["identical_to_ar"].all()))
        if costs is not None:
            step = costs["target_step_s"]
            row.update(target_step_s=step, T_D_s=costs["T_D"], c=costs["T_D"] / step, T_V_s=costs["T_V"].get(gamma),
                       verify_ratio=costs["T_V"].get(gamma, float("nan")) / step)
        row["per_prompt"] = [
            {"prompt_id": pid, "source": run["source"], "prompt_tokens": int(run["prompt_tokens"]),
             "new_tokens": int(run["new_tokens"]), "ar_time_s": float(ar.loc[pid, "time_s"]),
             "time_s": float(run["time_s"]),
             "assisted_time_s": float(same_gamma.loc[pid, "time_s"]) if pid in same_gamma.index else None,
             **{key: int(run[key]) for key in ("accepted", "rejections", "rounds")},
             "identical_to_ar": bool(run["identical_to_ar"])} for pid, run in sd.iterrows()]
        out.append(row)
    return out


def sweep_configs(target: str, draft: str, gammas, *, prompt_ids: list, temperature: float, max_new_tokens: int,
                  repeats: int, dtype: str, device: str) -> list[dict]:
    """The result-store configurations of one pair's sweep, one per gamma (the config columns of the module
    docstring, with the weights of both models, :func:`weights_tag`)."""
    weights = {"target_weights": weights_tag(target), "draft_weights": weights_tag(draft)}
    return [{"kind": "e2e", "pair": f"{target} / {draft}", "target": target, "draft": draft, "gamma": int(g),
             "temperature": temperature, "max_new_tokens": max_new_tokens, "prompt_ids": list(prompt_ids),
             "repeats": repeats, "dtype": dtype, "device": device, **weights} for g in gammas]
