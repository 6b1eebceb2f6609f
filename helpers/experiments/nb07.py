"""Notebook 07 (handout §4.3-4.4): speculative decoding's sweep over pairs and gammas, the per-source study and the
sampled run of the best configuration: the configurations built from the notebook's ``sd_*`` parameters, written
once for the notebook and :mod:`helpers.gpu_measure`; the measurement of what the result files lack; and the
summaries the notebook prints."""
from __future__ import annotations

import torch

from helpers.experiments.common import LoadedModels, check_budget, seed_and_threads, took
from helpers.prompts import encode_prompts, load_prompts, select_prompts
from helpers.results import config_key, run_metadata
from helpers.specdec.costs import measure_costs, median_length_case
from helpers.specdec.sweeps import gamma_rows, measure_config, measure_pair, select_sweep, sweep_configs

RESULT = "07_speculative_decoding"  # the sweep (08 and 09 read it)
BY_SOURCE = "07_speculative_decoding_by_source"  # the best configuration on the per-source prompt set
SAMPLED = "07_speculative_decoding_sampled"  # the best configuration at the sampling temperature
HANDOUT_GAMMAS = (2, 3, 5, 7)  # the rows of the handout's Table 1
COST_REPEATS = 30  # timed forwards per Eq. 5 term (means: stalls average out)


def setup(params: dict) -> LoadedModels:
    """Seed and threads as the notebook's derived-values cell sets them; the model cache of the run."""
    seed_and_threads(params["sd_seed"], params["device"], params["sd_threads"])
    return LoadedModels(params["device"], getattr(torch, params["sd_dtype"]))


def prompt_sets(params: dict) -> tuple[list[dict], list[dict]]:
    """The sweep's prompts and the per-source study's prompts (round-robin over sources)."""
    prompts = load_prompts(params["sd_prompt_profile"])
    return (select_prompts(prompts, params["sd_prompt_count"]),
            select_prompts(prompts, params["sd_source_prompt_count"]))


def common_config(params: dict) -> dict:
    """The configuration of every run of the notebook, besides pair, gamma and prompts."""
    return dict(temperature=params["sd_temperature"], max_new_tokens=params["sd_max_new_tokens"],
                repeats=params["sd_repeats"], dtype=params["sd_dtype"], device=params["device"])


def pair_configs(params: dict, prompt_rows: list[dict]) -> dict[tuple[str, str], list[dict]]:
    """Per (target, draft) of ``sd_pairs``: one result-store configuration per gamma of ``sd_gammas``."""
    prompt_ids = [row["id"] for row in prompt_rows]
    return {(t, d): sweep_configs(t, d, params["sd_gammas"], prompt_ids=prompt_ids, **common_config(params))
            for t, d in params["sd_pairs"]}


def _measure_pair(params: dict, store, models: LoadedModels, configs: list[dict], prompt_rows, progress) -> float:
    """Eq. 5's costs on the median-length prompt, then every gamma of one pair with its AR baseline (and the
    assisted-generation peer); one row per gamma. Returns c = T_D / T_T."""
    target_name, draft_name = configs[0]["target"], configs[0]["draft"]
    models.keep_only((target_name, draft_name))  # keep GPU memory for this pair
    (target, tokenizer), (draft, _) = models(target_name), models(draft_name)
    cases = encode_prompts(tokenizer, prompt_rows, target.device)
    cost_case = median_length_case(cases)  # Eq. 5's terms on a typical context, not the first prompt's
    costs = measure_costs(target, draft, cost_case["input_ids"], params["sd_gammas"], repeats=COST_REPEATS)
    rows = measure_pair(target, draft, cases, params["sd_gammas"], params["sd_max_new_tokens"],
                        repeats=params["sd_repeats"], temperature=params["sd_temperature"], seed=params["sd_seed"],
                        peer=params["sd_peer"], peer_gammas=params["sd_peer_gammas"], progress=progress)
    meta = run_metadata(model_id=target_name, weights=target.weights_label, dtype=params["sd_dtype"],
                        device=params["device"], seed=params["sd_seed"], draft_id=draft_name,
                        draft_weights=draft.weights_label)
    for config, row in zip(configs, gamma_rows(rows, costs)):
        row["handout_gamma"] = config["gamma"] in HANDOUT_GAMMAS  # 08 picks best/worst among these
        row["cost_prompt"] = cost_case["id"]
        store.append(config, {k: v for k, v in row.items() if k not in config}, meta)
    return costs["T_D"] / costs["T_T"]


def measure_sweep(params: dict, store, models: LoadedModels, prompt_rows: list[dict], *, rerun: bool = False,
                  progress: bool = True) -> dict[tuple[str, str], list[dict]]:
    """Measure every pair of the sweep whose rows the result file lacks (all of them with ``rerun``); returns
    :func:`pair_configs`."""
    sweep_store = store(RESULT)
    by_pair = pair_configs(params, prompt_rows)
    for configs in by_pair.values():
        if not rerun and all(sweep_store.has(config) for config in configs):
            print(f"{configs[0]['pair']}: already measured")
            continue
        check_budget(sweep_store, f"07 pair {configs[0]['pair']}")
        models.store = sweep_store
        with took(sweep_store):
            c = _measure_pair(params, sweep_store, models, configs, prompt_rows, progress)
        print(f"{configs[0]['pair']}: c = T_D/T_T = {c:.3f}", flush=True)
    return by_pair


def sweep_frame(store, by_pair: dict):
    """The sweep's rows that answer its configurations (:func:`helpers.specdec.sweeps.select_sweep`)."""
    return select_sweep(store(RESULT).frame(), [config for configs in by_pair.values() for config in configs])


def best_config(params: dict, best, name: str, prompt_rows: list[dict], source_rows: list[dict]) -> dict:
    """The configuration of the best sweep row's follow-up run ``name`` (:data:`BY_SOURCE` or :data:`SAMPLED`)."""
    rows, temperature = ((source_rows, params["sd_temperature"]) if name == BY_SOURCE
                         else (prompt_rows, params["sd_sample_temperature"]))
    return sweep_configs(best["target"], best["draft"], [int(best["gamma"])], prompt_ids=[r["id"] for r in rows],
                         **{**common_config(params), "temperature": temperature})[0]


def measure_best(params: dict, store, models: LoadedModels, best, name: str, prompt_rows: list[dict],
                 source_rows: list[dict], *, rerun: bool = False, progress: bool = True) -> dict:
    """The best sweep row's configuration rerun as ``name``, AR and speculative decoding only: the stored row, or
    measured when the file lacks it (or ``rerun``)."""
    run_store = store(name)
    config = best_config(params, best, name, prompt_rows, source_rows)
    rows = source_rows if name == BY_SOURCE else prompt_rows
    if not rerun and run_store.has(config):
        return run_store.done()[config_key(config)]
    models.store = run_store
    (target, tokenizer), (draft, _) = models(best["target"]), models(best["draft"])
    meta = run_metadata(model_id=best["target"], weights=target.weights_label, dtype=params["sd_dtype"],
                        device=params["device"], seed=params["sd_seed"], draft_id=best["draft"])
    return run_store.run(config, lambda: measure_config(
        target, draft, encode_prompts(tokenizer, rows, target.device), int(best["gamma"]),
        params["sd_max_new_tokens"], exclude=config, repeats=params["sd_repeats"],
        temperature=config["temperature"], seed=params["sd_seed"], progress=progress), rerun=rerun, meta=meta)


def measure(params: dict, store, progress: bool = True) -> None:
    """Everything notebook 07 measures, for what the result files lack: the sweep, then the per-source and the
    sampled runs of its best configuration (chosen from the sweep's rows as the notebook does)."""
    models = setup(params)
    prompt_rows, source_rows = prompt_sets(params)
    by_pair = measure_sweep(params, store, models, prompt_rows, progress=progress)
    frame = sweep_frame(store, by_pair)
    best = frame.loc[frame["speedup"].idxmax()]
    for name in (BY_SOURCE, SAMPLED):
        measure_best(params, store, models, best, name, prompt_rows, source_rows, progress=progress)
    models.clear()
