"""Speculative decoding vs plain decoding vs transformers' assisted generation, on one target/draft pair: our
autoregressive baseline (``ar``), our speculative decoding for each gamma (``sd``) and ``target.generate(
assistant_model=draft)`` (``assisted``, the peer) with the same gammas and with its own default schedule.

Notebook 07 (and its benchmark, ``python -m helpers.bench specdec``) runs :func:`measure_pair` per pair and stores
:func:`gamma_rows` in ``results/<profile>/07_speculative_decoding.jsonl``: ONE ROW PER (pair, gamma), for our
speculative decoding, with the AR baseline and the assisted-generation peer of the same prompts in columns (so every
row has an integer ``gamma``). Columns, besides the metadata of ``run_metadata`` (device_name, device_memory_bytes, ...):

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
  ``assisted_default_tokens_per_s`` and ``assisted_default_identical_to_ar`` (its default adaptive schedule; the
  same in every row of a pair);
  null (absent) when the peer was not run at that gamma (``measure_pair(peer_gammas=...)``);
- ``handout_gamma`` (written by notebook 07): gamma is one of the handout's {2, 3, 5, 7} (the rows of its
  Table 1, among which §4.5 picks the best and worst configurations);
- Eq. 5 terms measured on the device (:func:`helpers.experiments.specdec_costs.measure_costs`): ``T_T_s``,
  ``T_D_s``, ``c`` = T_D/T_T, ``T_V_s`` and ``verify_ratio`` = T_V(gamma)/T_T;
- ``per_prompt``: a list with one dict per prompt (``prompt_id``, ``source``, ``prompt_tokens``,
  ``new_tokens``, ``ar_time_s``, ``time_s``, ``assisted_time_s``, ``accepted``, ``rejections``, ``rounds``,
  ``identical_to_ar``) for per-source breakdowns (:func:`helpers.experiments.nb07.study.source_breakdown`).
  Notebook 07 stores a row of the same shape for the best configuration on the per-source prompt set in
  ``07_speculative_decoding_by_source.jsonl``.

:func:`measure_pair` itself returns one row per method x gamma x prompt (``method`` "ar", "sd" or "assisted";
``gamma`` null for ar and for assisted's default schedule).
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
from helpers.experiments.specdec_costs import interleaved_runs
from helpers.specdec.analysis import pooled_alpha, pooled_speedup
from helpers.specdec.divergence import greedy_divergence, greedy_lossless, near_ties
from helpers.specdec.linear import GenerationStats, autoregressive_generate, speculative_generate

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
            row["assisted_default_identical_to_ar"] = bool(peer_default["identical_to_ar"].all())
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


def sweep_configs(target: str, draft: str, gammas, *, prompt_ids: list, temperature: float, max_new_tokens: int,
                  repeats: int, dtype: str, device: str) -> list[dict]:
    """The result-store configurations of one pair's sweep, one per gamma (the config columns of the module
    docstring, with the weights of both models, :func:`weights_tag`)."""
    weights = {"target_weights": weights_tag(target), "draft_weights": weights_tag(draft)}
    return [{"pair": f"{target} / {draft}", "target": target, "draft": draft, "gamma": int(g),
             "temperature": temperature, "max_new_tokens": max_new_tokens, "prompt_ids": list(prompt_ids),
             "repeats": repeats, "dtype": dtype, "device": device, **weights} for g in gammas]
