"""Notebook 07 (handout §4.3-4.4): speculative decoding's sweep over pairs and gammas, the per-source study and the
sampled run of the best configuration: their configurations from the ``sd_*`` parameters, the measurement of what
the result files lack (also the GPU window's end-to-end rows), and the numbers the notebook and the report print."""
from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from helpers.experiments.packages import TARGET, notebook_part, step_record
from helpers.experiments.common import (HANDOUT_PAIRS, LoadedModels, check_budget, seed_and_threads,
                                       tolerate_graph_failure, took)
from helpers.experiments.nb07.study import alpha_speed_inversions, correlation_word, select_sweep
from helpers.experiments.specdec_costs import graph_proof, measure_costs
from helpers.experiments.specdec_sweeps import gamma_rows, measure_pair, sweep_configs
from helpers.prompts import encode_prompts, load_prompts, select_prompts
from helpers.results import config_key, free_memory, run_metadata
from helpers.stats import order_of_sets

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
    """Eq. 5's costs, then every gamma of one pair with its AR baseline (and the peer); a row per gamma. Returns c."""
    target_name, draft_name = configs[0]["target"], configs[0]["draft"]
    models.keep_only((target_name, draft_name))  # keep GPU memory for this pair
    (target, tokenizer), (draft, _) = models(target_name), models(draft_name)
    cases = encode_prompts(tokenizer, prompt_rows, target.device)
    # Eq. 5's terms on the median-length prompt's context: a typical round, not the first prompt's (7 tokens)
    cost_case = sorted(cases, key=lambda case: case["input_ids"].shape[1])[len(cases) // 2]
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
        row["context_len"] = int(cost_case["input_ids"].shape[1])  # the cached context Eq. 5's terms were timed at
        store.add_row(config, {k: v for k, v in row.items() if k not in config}, meta)
    return costs["T_D"] / costs["target_step_s"]


def measure_sweep(params: dict, store, models: LoadedModels, prompt_rows: list[dict], *, rerun: bool = False,
                  progress: bool = True) -> dict[tuple[str, str], list[dict]]:
    """Every pair of the sweep whose rows the result file lacks (all with ``rerun``); returns :func:`pair_configs`."""
    sweep_store = store(RESULT)
    by_pair = pair_configs(params, prompt_rows)
    for configs in by_pair.values():
        missing = [config for config in configs if rerun or not sweep_store.has(config)]
        if not missing:
            print(f"{configs[0]['pair']}: already measured")
            continue
        sweep_store.refuse_in_results_only(missing[0])  # before the pair's warm-up, which needs real weights
        check_budget(sweep_store, f"07 pair {configs[0]['pair']}")
        models.store = sweep_store
        with took(sweep_store):
            c = _measure_pair(params, sweep_store, models, configs, prompt_rows, progress)
        print(f"{configs[0]['pair']}: c = T_D/T_T = {c:.3f}", flush=True)
    return by_pair


def sweep_frame(store, by_pair: dict):
    """The sweep's rows that answer its configurations (:func:`helpers.experiments.nb07.study.select_sweep`)."""
    return select_sweep(store(RESULT).frame(), [config for configs in by_pair.values() for config in configs])


def best_config(params: dict, best, name: str, prompt_rows: list[dict], source_rows: list[dict]) -> dict:
    """The configuration of the best sweep row's follow-up run ``name`` (:data:`BY_SOURCE` or :data:`SAMPLED`)."""
    rows, temperature = ((source_rows, params["sd_temperature"]) if name == BY_SOURCE
                         else (prompt_rows, params["sd_sample_temperature"]))
    return sweep_configs(best["target"], best["draft"], [int(best["gamma"])], prompt_ids=[r["id"] for r in rows],
                         **{**common_config(params), "temperature": temperature})[0]


def measure_config(target, draft, cases: list[dict], gamma: int, max_new_tokens: int, *, exclude=(), **options) -> dict:
    """Ours at one ``gamma`` against AR (no peer): the :func:`~helpers.experiments.specdec_sweeps.gamma_rows` row
    without the keys in ``exclude``; ``options`` go to :func:`~helpers.experiments.specdec_sweeps.measure_pair`."""
    rows = measure_pair(target, draft, cases, [int(gamma)], max_new_tokens, peer=False, **options)
    return {k: v for k, v in gamma_rows(rows)[0].items() if k not in exclude}


def measure_best(params: dict, store, models: LoadedModels, best, name: str, prompt_rows: list[dict],
                 source_rows: list[dict], *, rerun: bool = False, progress: bool = True) -> dict:
    """The best sweep row's configuration rerun as ``name`` (AR and ours only): the stored row, or measured."""
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
    """Everything notebook 07 measures that the result files lack: the sweep, then the per-source and sampled runs
    of its best configuration (chosen as the notebook does)."""
    models = setup(params)
    prompt_rows, source_rows = prompt_sets(params)
    by_pair = measure_sweep(params, store, models, prompt_rows, progress=progress)
    frame = sweep_frame(store, by_pair)
    best = frame.loc[frame["speedup"].idxmax()]
    for name in (BY_SOURCE, SAMPLED):
        measure_best(params, store, models, best, name, prompt_rows, source_rows, progress=progress)
    models.clear()


def measure_decode_mode(params: dict, store, target_name: str, draft_name: str, gammas, mode: str, compile,
                        fatal: tuple = ()) -> None:
    """The GPU window's end-to-end rows of one pair (part ``graphs``): the sweep's configurations at ``gammas``,
    speculative decoding against AR both in decode ``mode`` (``compile``: the generators' option), a synchronized
    phase run per gamma and :func:`~helpers.experiments.specdec_costs.graph_proof`; the rows ``store`` lacks."""
    prompt_rows, _ = prompt_sets(params)
    configs = [{**c, "decode": mode} for c in sweep_configs(
        target_name, draft_name, gammas, prompt_ids=[r["id"] for r in prompt_rows], **common_config(params))]
    if all(store.has(c) for c in configs):
        return
    check_budget(store, f"{mode} e2e {target_name} / {draft_name}")
    with took(store):
        from helpers.models import load_model

        dtype = getattr(torch, params["sd_dtype"])
        (target, tokenizer), (draft, _) = (load_model(name, device=params["device"], dtype=dtype)
                                           for name in (target_name, draft_name))
        cases = encode_prompts(tokenizer, prompt_rows, target.device)
        meta = run_metadata(model_id=target_name, weights="cpu-pair", dtype=params["sd_dtype"],
                            device=params["device"], seed=params["sd_seed"], draft_id=draft_name)

        def e2e():
            proof = graph_proof(mode, (target, draft), lambda: {"rows": gamma_rows(measure_pair(
                target, draft, cases, gammas, params["sd_max_new_tokens"], repeats=params["sd_repeats"],
                temperature=params["sd_temperature"], seed=params["sd_seed"], peer=False, compile=compile,
                phase_run=True))})
            if "graph_replays" in proof:  # the whole pair's run (AR, every gamma, the phase runs): not a row's own
                proof["pair_graph_replays"] = proof.pop("graph_replays")
            for config, row in zip(configs, proof.pop("rows")):
                store.add_row(config, {**{k: v for k, v in row.items() if k not in config}, **proof}, meta)

        tolerate_graph_failure(mode, configs[0], e2e, fatal)
        del target, draft
        free_memory()


# ------------------------------------------------------------------------------------------- what the notebook prints

TABLE_COLUMNS = {"target": "Target", "draft": "Draft", "gamma": "γ", "alpha": "α", "acceptance_rate": "acc. rate",
                 "mean_accepted_per_round": "accepted/round", "speedup": "speedup", "eq5": "Eq. 5",
                 "tokens_per_s": "tok/s", "ar_tokens_per_s": "AR tok/s", "c": "c", "verify_ratio": "T_V/T_T"}
ASSISTED_COLUMNS = {"assisted_tokens_per_s": "assisted tok/s", "speedup_vs_assisted": "vs assisted"}


def sweep_table(frame, device_label: str):
    """The handout's Table 1 with more columns (assisted generation's where it ran), the device in front."""
    columns = TABLE_COLUMNS | (ASSISTED_COLUMNS if "assisted_tokens_per_s" in frame else {})
    table = frame[list(columns)].rename(columns=columns)
    table.insert(0, "device", device_label)
    return table


def verify_slopes(frame) -> dict:
    """T_V/T_T per extra draft token, an unclamped :func:`helpers.stats.line_fit` per pair (one T_T per pair)."""
    from helpers.stats import line_fit

    return {pair: line_fit(group["gamma"], group["verify_ratio"]).slope
            for pair, group in frame.groupby("pair", observed=True)}


def rounds_without_draft(frame) -> dict:
    """Per pair at gamma 1: (rounds that proposed no draft, rounds), after checking that alpha is accepted / tests.
    A prompt's last token comes from the target alone, a round that counts in accepted/round but not in alpha: why
    accepted/round sits below alpha at gamma 1. Empty without gamma 1."""
    counts = {}
    for _, row in frame[frame["gamma"] == 1].iterrows():
        none, rounds = int(row["rounds"] - row["proposed"]), int(row["rounds"])
        assert abs(row["accepted"] / (rounds - none) - row["alpha"]) < 1e-9, "alpha is not accepted / tests"
        counts[row["pair"]] = (none, rounds)
    return counts


def pair_numbers(pairs) -> dict:
    """Which of the handout's Table 1 pairs this profile's sweep measured: the report's numbers."""
    measured = [tuple(pair) for pair in pairs]
    missing = [f"{t.split('/')[-1]} / {d.split('/')[-1]}" for t, d in HANDOUT_PAIRS if (t, d) not in measured]
    return {"n_pairs": len(measured), "handout_pairs_missing": len(missing),
            "handout_pairs_missing_list": ", ".join(missing) or "none"}


def prefill_share(frame):
    """Whether the prefill was timed as a phase (not on CUDA) and its share of each speculative run's time."""
    timed = bool((frame["device"] != "cuda").all()) if "device" in frame else True
    return timed, frame["time_prefill_s"] / frame["time_s"]


def assisted_over_ar(frame):
    """transformers' assisted generation over OUR AR baseline, per row where it ran: below ~1, "vs assisted" mostly
    compares the runtimes, not the algorithms."""
    if "assisted_tokens_per_s" not in frame or not frame["assisted_tokens_per_s"].notna().any():
        return pd.Series(dtype=float)
    peer_rows = frame.dropna(subset=["assisted_tokens_per_s"])
    return peer_rows["assisted_tokens_per_s"] / peer_rows["ar_tokens_per_s"]


def alpha_deviation(frame) -> dict:
    """Per pair: the largest distance of a gamma's alpha from the pair's pooled alpha, in standard errors."""
    out = {}
    for pair, group in frame.groupby("pair", observed=True):
        tests = group["accepted"] + group["rejections"]
        pooled = group["accepted"].sum() / tests.sum()
        out[pair] = float(((group["alpha"] - pooled) / np.sqrt(pooled * (1 - pooled) / tests)).abs().max())
    return out


def cost_numbers(cost_claims) -> dict:
    """The report's numbers on the cost terms (:func:`helpers.experiments.nb07.study.cost_check`'s claims)."""
    shared = bool(cost_claims["shared_targets"])
    return {
        "cost_shared": int(shared), "cost_targets": ", ".join(cost_claims["shared_targets"]),
        "cost_tt_spread_pct": int(round(100 * cost_claims["tt_spread"])) if shared else 0,
        "cost_tv_spread_pct": int(round(100 * cost_claims["tv_spread"])) if shared else 0,
        "cost_sides_by_pair": int(cost_claims["sides_by_pair"]), "cost_low_tt_above": int(cost_claims["low_tt_above"]),
        "cost_ratios_overlap": int(cost_claims["ratios_overlap"]),
        "cost_slow_count": len(cost_claims["tt_over_ar_step"]),
        "cost_slow_pairs": "; ".join(cost_claims["tt_over_ar_step"]),
    }


def source_numbers(by_source, by_source_run: dict, checks: dict) -> dict:
    """The report's numbers of the per-source study: flags and counts of
    :func:`~helpers.experiments.nb07.study.source_checks`, the first departure from the expected order of alpha and
    the first pair of sources whose alpha and speedup disagree (``dep_*``, ``inv_*``; absent without one)."""
    fast, slow = checks["fast"], checks["slow"]
    inversions = alpha_speed_inversions(by_source)
    numbers = {
        "sources_inversions": inversions["inversions"], "sources_inversions_longer": inversions["inversions_longer"],
        "source_overall_speedup": float(by_source_run["speedup"]),
        "source_overall_alpha": float(by_source_run["alpha"]),
        "fast_source": fast, "fast_source_speedup": float(by_source.loc[fast, "speedup"]),
        "fast_source_alpha": float(by_source.loc[fast, "alpha"]),
        "slow_source": slow, "slow_source_speedup": float(by_source.loc[slow, "speedup"]),
        "slow_source_alpha": float(by_source.loc[slow, "alpha"]),
        "sources_alpha_order": " > ".join(checks["measured_order"]),
        "sources_order_swaps": len(checks["order_swaps"]),
        "sources_swaps_within_noise": int(checks["swaps_within_noise"]),
        "sources_separated": int(checks["separated"]),
        "sources_correlation": round(float(checks["correlation"]), 2),
        "sources_rank_correlation": round(float(checks["rank_correlation"]), 2),
        "sources_same_order": int(checks["same_order"]),
        "sources_overlapping_pairs": checks["overlapping_pairs"], "sources_pairs": checks["source_pairs"],
        "sources_all_overlap": int(checks["overlapping_pairs"] == checks["source_pairs"]),
        "source_prompt_points": checks["prompts"], "source_count": len(by_source),
        "prompt_alpha_rho": round(checks["prompt_alpha_rho"], 2),
        "prompt_alpha_word": correlation_word(checks["prompt_alpha_rho"]),
        "prompt_length_partial_rho": round(checks["prompt_length_partial_rho"], 2),
        "prompt_length_word": correlation_word(checks["prompt_length_partial_rho"]),
    }
    for a, b, _ in checks["order_swaps"][:1]:  # b measured above a, expected below
        numbers.update(dep_above=b, dep_below=a)
        numbers.update({f"dep_{side}_{end}": round(float(by_source.loc[src, f"alpha_{end}"]), 2)
                        for side, src in (("above", b), ("below", a)) for end in ("low", "high")})
    for faster, slower in inversions["pairs"][:1]:
        for role, src in (("fast", faster), ("slow", slower)):
            numbers.update({f"inv_{role}": src, f"inv_{role}_alpha": round(float(by_source.loc[src, "alpha"]), 3),
                            f"inv_{role}_tokens": int(round(by_source.loc[src, "prompt_tokens"]))})
    return numbers


def optimum_numbers(optimum: dict) -> dict:
    """Whether every pair's optimum lies inside the sweep; for two pairs (``a``, ``b`` in the sweep's order) which
    peaks later as far as the data can tell (``later_order``: :func:`helpers.stats.order_of_sets` of the gammas tied
    with each best) and whether ``b`` costs more per token and agrees more often (``drafts_tradeoff``)."""
    numbers = {"optimum_all_inside": int(all(o["shape"] == "inside" for o in optimum.values())),
               "optimum_at_edge": sum(o["shape"] != "inside" for o in optimum.values()),
               "two_drafts": int(len(optimum) == 2)}
    if len(optimum) != 2:
        return {**numbers, "drafts_tradeoff": 0}
    (pair_a, opt_a), (pair_b, opt_b) = optimum.items()
    order = order_of_sets(opt_a["tied"], opt_b["tied"])
    return {**numbers, "later_order": order, "later_resolved": int(order != "overlapping"),
            "pair_a": str(pair_a), "pair_b": str(pair_b), "draft_a": str(pair_a).split(" / ")[-1],
            "draft_b": str(pair_b).split(" / ")[-1], "tied_a": ", ".join(map(str, opt_a["tied"])),
            "tied_b": ", ".join(map(str, opt_b["tied"])), "c_a": round(float(opt_a["c"]), 3),
            "c_b": round(float(opt_b["c"]), 3), "alpha_a_max": round(float(max(opt_a["alpha_range"])), 3),
            "alpha_b_min": round(float(min(opt_b["alpha_range"])), 3),
            "drafts_tradeoff": int(opt_b["c"] > opt_a["c"] and min(opt_b["alpha_range"]) > max(opt_a["alpha_range"]))}


def tau_shortfall(frame: pd.DataFrame) -> dict:
    """Eq. 5's acceptance term against the rounds measured: the range of tau / Omega(gamma, alpha) (tau falls short
    where acceptances cluster or a round has no draft to offer), in how many rows it falls short, and the range of
    the measured speedup over Eq. 5 with tau in place of Omega (the cost terms alone)."""
    from helpers.specdec.analysis import expected_tokens_per_round

    omega = expected_tokens_per_round(frame["gamma"].to_numpy(), frame["alpha"].to_numpy(dtype=float))
    tau_share = frame["tokens_per_round"].to_numpy() / omega
    with_tau = frame["speedup"].to_numpy() / (frame["eq5"].to_numpy() * tau_share)  # Eq. 5 = Omega / round cost
    return {"tau_share_low": float(tau_share.min()), "tau_share_high": float(tau_share.max()),
            "tau_short_all": int((tau_share < 1).all()), "tau_short_rows": int((tau_share < 1).sum()),
            "eq5tau_ratio_low": float(with_tau.min()), "eq5tau_ratio_high": float(with_tau.max())}


def verify_06(rows_06) -> dict:
    """Notebook 06's T_V(1)/T_T per model (its 2-token forward over its 1-token one, medians after a random prefix):
    ``{model: (ratio, prefix tokens)}``, empty where its rows lack it."""
    if "kind" not in rows_06:
        return {}
    out = {}
    for model, group in rows_06[rows_06["kind"] == "verify"].groupby("model"):
        medians = group.set_index("new_tokens")["time_s_median"]
        if {1, 2} <= set(medians.index):
            out[model] = (float(medians[2] / medians[1]), int(group["prefix_len"].iloc[0]))
    return out


def verify_numbers(frame, slopes: dict) -> dict:
    """T_V/T_T over gamma for the report: how many pairs' :func:`verify_slopes` exceed 0.01 per draft token, the
    slopes' and ratios' range, and whether even the cheapest verify costs 5 % over a step (``verify_not_free``)."""
    values = [float(s) for s in slopes.values()]
    return {"verify_pairs": len(values), "verify_grows_pairs": sum(s > 0.01 for s in values),
            "verify_slope_low": round(min(values), 3), "verify_slope_high": round(max(values), 3),
            "verify_min": float(frame["verify_ratio"].min()), "verify_max": float(frame["verify_ratio"].max()),
            "verify_not_free": int(frame["verify_ratio"].min() > 1.05)}


def pair_table(optimum: dict, costs_by_pair) -> pd.DataFrame:
    """The report's table of the pairs: best gamma, speedup and where it lies (:func:`~.study.pair_optimum`), alpha's
    range, c, T_T as timed for Eq. 5, and how its rows fall against Eq. 5 (:func:`~.study.cost_check`)."""
    costs = costs_by_pair.set_index("pair")
    return pd.DataFrame([{
        "pair": str(pair), "best gamma": o["gamma"], "speedup": round(o["speedup"], 2), "optimum": o["shape"],
        "alpha": f"{o['alpha_range'][0]:.2f}-{o['alpha_range'][1]:.2f}", "c": round(float(o["c"]), 3),
        "T_T (ms)": round(float(cost["T_T (ms)"]), 2), "above Eq. 5": int(cost["above Eq. 5"]),
        "below Eq. 5": int(cost["below Eq. 5"]),
        "measured / Eq. 5": f"{cost['ratio low']:.2f}-{cost['ratio high']:.2f}",
    } for pair, o in optimum.items() for cost in [costs.loc[str(pair)]]])


GPU_PARTS = (notebook_part("07", (RESULT, BY_SOURCE, SAMPLED), measure),)  # the GPU window measures these rows


def target_steps(rows: dict) -> list[dict]:
    """T_T of each pair at its lowest gamma (run-info page)."""
    sweep = rows.get(RESULT, [])
    return [step_record("07", f"T_T (pair with {row['draft'].split('/')[-1]})", row["target_step_s"],
                        row.get("runtime", "minimal"), 1, row.get("context_len"), row)
            for row in sweep if row.get("target") == TARGET and row.get("target_step_s")
            and row.get("gamma") == min(r["gamma"] for r in sweep if r.get("draft") == row.get("draft"))]
