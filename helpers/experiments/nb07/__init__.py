"""Notebook 07 (handout §4.3-4.4): speculative decoding's sweep over pairs and gammas, the per-source study and the
sampled run of the best configuration: the configurations built from the notebook's ``sd_*`` parameters, written
once for the notebook and :mod:`helpers.gpu_measure`; the measurement of what the result files lack; and the
summaries the notebook prints."""
from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from helpers.gpu_parts import notebook_part
from helpers.experiments.common import HANDOUT_PAIRS, LoadedModels, check_budget, seed_and_threads, took
from helpers.experiments.nb07.study import correlation_word, alpha_speed_inversions, measure_config, select_sweep
from helpers.experiments.specdec_costs import measure_costs
from helpers.experiments.specdec_sweeps import gamma_rows, measure_pair, sweep_configs
from helpers.prompts import encode_prompts, load_prompts, select_prompts
from helpers.results import config_key, run_metadata
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


def median_length_case(cases: list[dict]) -> dict:
    """The case (an :func:`helpers.prompts.encode_prompts` row) whose prompt length is the median of ``cases``: the
    context Eq. 5's terms are timed on, so that they describe a typical round of a sweep rather than whichever
    prompt comes first (notebook 07's first prompt is 7 tokens long)."""
    return sorted(cases, key=lambda case: case["input_ids"].shape[1])[len(cases) // 2]


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
        row["context_len"] = int(cost_case["input_ids"].shape[1])  # the cached context Eq. 5's terms were timed at
        store.append(config, {k: v for k, v in row.items() if k not in config}, meta)
    return costs["T_D"] / costs["T_T"]


def measure_sweep(params: dict, store, models: LoadedModels, prompt_rows: list[dict], *, rerun: bool = False,
                  progress: bool = True) -> dict[tuple[str, str], list[dict]]:
    """Measure every pair of the sweep whose rows the result file lacks (all of them with ``rerun``); returns
    :func:`pair_configs`."""
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
    """T_V/T_T per extra draft token, fitted per pair (each pair's ratios share one T_T, the pairs' do not):
    :func:`helpers.stats.line_fit`, unclamped."""
    from helpers.stats import line_fit

    return {pair: line_fit(group["gamma"], group["verify_ratio"]).slope
            for pair, group in frame.groupby("pair", observed=True)}


def rounds_without_draft(frame) -> dict:
    """Per pair at gamma 1: (rounds that proposed no draft, rounds). A prompt's last token comes from the target
    alone (the drafter is asked for at most the tokens left minus one), so such a round counts in accepted/round
    (accepted / rounds) but not in alpha (accepted / tests): accepted/round sits below alpha at gamma 1."""
    ones = frame[frame["gamma"] == 1]
    return {row["pair"]: (int(row["rounds"] - row["proposed"]), int(row["rounds"])) for _, row in ones.iterrows()}


def pair_numbers(pairs) -> dict:
    """Which of the handout's Table 1 pairs this profile's sweep measured (printed); the report's numbers."""
    measured = [tuple(pair) for pair in pairs]
    missing = [f"{t.split('/')[-1]} / {d.split('/')[-1]}" for t, d in HANDOUT_PAIRS if (t, d) not in measured]
    print(f"{len(measured)} pairs measured; of the handout's Table 1 pairs not measured here: "
          f"{', '.join(missing) or 'none'}")
    return {"n_pairs": len(measured), "handout_pairs_missing": len(missing),
            "handout_pairs_missing_list": ", ".join(missing) or "none"}


def print_rounds_without_draft(frame) -> None:
    """At gamma 1, alpha recomputed from the rounds that tested a draft (asserted equal to the row's alpha), and how
    many rounds proposed none (printed; nothing where the sweep has no gamma 1)."""
    counts = rounds_without_draft(frame)
    for _, row in frame[frame["gamma"] == 1].iterrows():
        none, rounds = counts[row["pair"]]
        assert abs(row["accepted"] / (rounds - none) - row["alpha"]) < 1e-9, "alpha is not accepted / tests"
    if counts:
        print("gamma 1: accepted/round lies below alpha because "
              + ", ".join(f"{none} of {rounds} rounds ({pair})" for pair, (none, rounds) in counts.items())
              + " proposed no draft: a prompt's last token, which the target gives alone")


def prefill_share(frame):
    """Whether the prefill was timed as a phase (not on CUDA, where that would need a sync per phase), and its
    share of each speculative run's time."""
    timed = bool((frame["device"] != "cuda").all()) if "device" in frame else True
    return timed, frame["time_prefill_s"] / frame["time_s"]


def print_cost_check(frame, costs_by_pair, cost_claims, cost_context_tokens: int, first_target: str,
                     rows_06) -> tuple[bool, object]:
    """Eq. 5's sides pair by pair, what each pair's cost terms were timed under, and notebook 06's verify ratio
    beside them (printed); returns :func:`prefill_share`."""
    print(costs_by_pair.drop(columns=["target", "draft"]).round(3).to_string(index=False))
    cost_prompt = costs_by_pair["cost prompt"].iloc[0]
    prefill_timed, share = prefill_share(frame)
    print(f"\nEq. 5 leaves out the prefill ("
          + (f"{share.min():.0%}-{share.max():.0%} of a speculative run's time" if prefill_timed else
             "not timed separately on this device") + ") "
          f"and per-round work outside the model; measured above Eq. 5 in {cost_claims['above']} of "
          f"{cost_claims['rows']} rows, below in {cost_claims['below']}; every pair's rows on one side: "
          f"{cost_claims['sides_by_pair']}")
    for target in cost_claims["shared_targets"]:
        mine = costs_by_pair[costs_by_pair["target"] == target]
        print(f"{target}: the same runtime ({mine['runtime'].iloc[0]}) and context ({cost_prompt}, "
              f"{cost_context_tokens} tokens for {first_target}'s tokenizer) for its {len(mine)} pairs, yet T_T "
              f"{' vs '.join(f'{t:.2f}' for t in mine['T_T (ms)'])} ms ({cost_claims['tt_spread']:.0%} apart) and T_V "
              f"at gamma={mine['gamma'].iloc[0]} {' vs '.join(f'{t:.2f}' for t in mine['T_V (ms)'])} ms "
              f"({cost_claims['tv_spread']:.0%} apart): timing variation between the two measurements")
    print("measured / Eq. 5 per pair: " + "; ".join(f"{r['pair']} {r['ratio low']:.2f}-{r['ratio high']:.2f} (T_T "
                                                    f"{r['T_T (ms)']:.2f} ms)" for _, r in costs_by_pair.iterrows()))
    if cost_claims["above"] == 0:
        print(f"no row lies above Eq. 5: all {cost_claims['rows']} below it, as the prefill and per-round work alone "
              "would put them")
    else:
        print("the pair whose T_T was timed lowest lies above Eq. 5 most often (a low T_T inflates c and T_V/T_T, so "
              f"Eq. 5 comes out low): {cost_claims['low_tt_above']}")
    if cost_claims["shared_targets"]:
        print(f"the ratio ranges of the pairs sharing a target overlap, so their {cost_claims['tt_spread']:.0%} T_T "
              f"difference does not show in the ratios: {cost_claims['ratios_overlap']}")
    _print_verify_06(rows_06)
    for pair in cost_claims["tt_over_ar_step"]:
        print(f"{pair}: its isolated T_T exceeds the AR generation's own time per token, prefill included: timed in a "
              "slow phase")
    return prefill_timed, share


def _print_verify_06(rows_06) -> None:
    """Notebook 06's T_V(1)/T_T, its 2-token forward over its 1-token one (§4.2's verify timing of the same ratio),
    where its rows have it."""
    if "measure" not in rows_06 or not (rows_06["measure"] == "verify").any():
        return
    for model_06, group in rows_06[rows_06["measure"] == "verify"].groupby("model"):
        medians = group.set_index("new_tokens")["time_s_median"]
        if {1, 2} <= set(medians.index):
            print(f"notebook 06's T_V(1)/T_T (2 tokens over 1) for {model_06}: {medians[2] / medians[1]:.2f}, timed "
                  f"with transformers' own forward (helpers.generation.sweeps.measure_verify) after a random prefix of "
                  f"{int(group['prefix_len'].iloc[0])} tokens, medians, another measurement: not this notebook's T_V(1)/T_T")


def print_best(best) -> None:
    """The best configuration of the sweep, and against assisted generation where the peer ran at its gamma."""
    print(f"best configuration: {best['pair']}, gamma = {int(best['gamma'])}: {best['speedup']:.2f}x over AR "
          f"({best['tokens_per_s']:.1f} vs {best['ar_tokens_per_s']:.1f} tok/s), alpha = {best['alpha']:.3f}, "
          f"{best['mean_accepted_per_round']:.2f} accepted drafts per round, c = {best['c']:.3f}, "
          f"T_V/T_T = {best['verify_ratio']:.2f}; Eq. 5 predicts {best['eq5']:.2f}x")
    if pd.notna(best.get("speedup_vs_assisted")):  # the peer ran at this gamma
        print(f"  against transformers' assisted generation at the same gamma: {best['speedup_vs_assisted']:.2f}x; "
              f"its default schedule: {best['assisted_default_tokens_per_s']:.1f} tok/s")


def assisted_over_ar(frame):
    """transformers' assisted generation over OUR AR baseline on the same prompts, per row where it ran (empty
    where it did not): below ~1, "vs assisted" mostly compares the runtimes, not the two algorithms."""
    if "assisted_tokens_per_s" not in frame or not frame["assisted_tokens_per_s"].notna().any():
        return pd.Series(dtype=float)
    peer_rows = frame.dropna(subset=["assisted_tokens_per_s"])
    return peer_rows["assisted_tokens_per_s"] / peer_rows["ar_tokens_per_s"]


def print_assisted(frame, ratio) -> bool:
    """Assisted generation's tokens/s per pair against our AR (printed); True when it is no faster than our AR."""
    peer_rows = frame.dropna(subset=["assisted_tokens_per_s"])
    for pair, group in peer_rows.groupby("pair", observed=True):
        print(f"{pair}: assisted generation {group['assisted_tokens_per_s'].min():.1f}-"
              f"{group['assisted_tokens_per_s'].max():.1f} tok/s against our AR {group['ar_tokens_per_s'].iloc[0]:.1f} "
              f"tok/s: {(group['assisted_tokens_per_s'] / group['ar_tokens_per_s']).min():.2f}-"
              f"{(group['assisted_tokens_per_s'] / group['ar_tokens_per_s']).max():.2f}x of our AR")
    no_gain = bool(ratio.max() < 1.05)  # assisted no faster than our plain decoding
    print(f"assisted generation / our AR: {ratio.min():.2f}-{ratio.max():.2f}x -> "
          + ("no faster than our AR: 'vs assisted' measures the runtimes more than the algorithms" if no_gain
             else "faster than our AR"))
    return no_gain


def alpha_deviation(frame) -> dict:
    """Per pair: the largest distance of a gamma's alpha from the pair's pooled alpha, in standard errors."""
    out = {}
    for pair, group in frame.groupby("pair", observed=True):
        tests = group["accepted"] + group["rejections"]
        pooled = group["accepted"].sum() / tests.sum()
        out[pair] = float(((group["alpha"] - pooled) / np.sqrt(pooled * (1 - pooled) / tests)).abs().max())
    return out


def verify_trend(frame, slopes: dict) -> str:
    """The report's sentence on T_V/T_T over gamma, pair by pair, from :func:`verify_slopes`."""
    def phrase(pair, slope):
        span = frame.loc[frame["pair"] == pair, "verify_ratio"]
        return (f"{'grows' if slope > 0.01 else 'does not grow measurably'} with gamma for {pair} (fitted slope "
                f"{slope:+.3f} per draft token, range {span.min():.2f}-{span.max():.2f})")

    return "; it ".join(phrase(pair, slope) for pair, slope in slopes.items())


def cost_numbers(costs_by_pair, cost_claims) -> dict:
    """The numbers behind the sentence about the cost terms (worded by
    :func:`helpers.experiments.nb07.study.cost_check`)."""
    shared = bool(cost_claims["shared_targets"])
    return {
        "cost_shared": int(shared), "cost_targets": ", ".join(cost_claims["shared_targets"]),
        "cost_tt_spread_pct": int(round(100 * cost_claims["tt_spread"])) if shared else 0,
        "cost_tv_spread_pct": int(round(100 * cost_claims["tv_spread"])) if shared else 0,
        "cost_sides_by_pair": int(cost_claims["sides_by_pair"]), "cost_low_tt_above": int(cost_claims["low_tt_above"]),
        "cost_ratios_overlap": int(cost_claims["ratios_overlap"]),
        "cost_ratio_ranges": "; ".join(f"{r['draft']}: {r['ratio low']:.2f}-{r['ratio high']:.2f} with the "
                                       f"target step timed at {r['T_T (ms)']:.2f} ms" for _, r in costs_by_pair.iterrows()),
        "cost_slow_count": len(cost_claims["tt_over_ar_step"]),
        "cost_slow_pairs": "; ".join(cost_claims["tt_over_ar_step"]),
    }


def print_source_claims(by_source, checks: dict) -> None:
    """The per-source prose's checks (:func:`helpers.experiments.nb07.study.source_claims`), printed."""
    expected, measured_order, fast, slow = checks["expected"], checks["measured_order"], checks["fast"], checks["slow"]
    print(f"order of alpha: {' > '.join(measured_order)}; expected {' > '.join(expected)}: "
          f"{'as expected' if measured_order == expected else 'NOT as expected'}")
    for a, b, overlap in checks["order_swaps"]:
        print(f"departure: {b} above {a} (expected the reverse); alpha intervals {a} "
              f"{by_source.loc[a, 'alpha_low']:.2f}-{by_source.loc[a, 'alpha_high']:.2f}, {b} "
              f"{by_source.loc[b, 'alpha_low']:.2f}-{by_source.loc[b, 'alpha_high']:.2f}: "
              + ("overlap, within the prompt-to-prompt noise" if overlap else "separated, beyond the noise"))
    print(f"fastest source: {fast} ({by_source.loc[fast, 'speedup']:.2f}x, 95% CI {by_source.loc[fast, 'speedup_low']:.2f}-"
          f"{by_source.loc[fast, 'speedup_high']:.2f}, alpha {by_source.loc[fast, 'alpha']:.3f}); slowest: {slow} "
          f"({by_source.loc[slow, 'speedup']:.2f}x, 95% CI {by_source.loc[slow, 'speedup_low']:.2f}-"
          f"{by_source.loc[slow, 'speedup_high']:.2f}, alpha {by_source.loc[slow, 'alpha']:.3f}); their speedup intervals "
          f"{'do not overlap' if checks['separated'] else 'overlap'}, their alpha intervals "
          f"{'do not overlap' if checks['alpha_separated'] else 'overlap'}")
    print(f"over the {len(by_source)} sources: alpha and speedup rank them {'alike' if checks['same_order'] else 'differently'}"
          f" (rank correlation {checks['rank_correlation']:.2f}, Pearson {checks['correlation']:.2f}); the speedup intervals "
          f"of {checks['overlapping_pairs']} of {checks['source_pairs']} pairs of sources overlap")
    print(f"over the {checks['prompts']} prompts: rank correlation of a prompt's speedup with its alpha "
          f"{checks['prompt_alpha_rho']:.2f} ({correlation_word(checks['prompt_alpha_rho'])}), with its length "
          f"{checks['prompt_length_rho']:.2f}, with its length at a given alpha (partial) "
          f"{checks['prompt_length_partial_rho']:.2f} ({correlation_word(checks['prompt_length_partial_rho'])})")
    print(f"the Wilson interval is narrower than the bootstrap over prompts for {checks['wilson_narrower']} of "
          f"{len(by_source)} sources")


def source_numbers(by_source, by_source_run: dict, checks: dict) -> dict:
    """The report's numbers of the per-source study."""
    fast, slow, measured_order = checks["fast"], checks["slow"], checks["measured_order"]
    inversions = alpha_speed_inversions(by_source)
    return {
        "sources_inversions": inversions["inversions"], "sources_inversions_longer": inversions["inversions_longer"],
        "sources_inversions_text": inversions["inversions_text"],
        "source_overall_speedup": float(by_source_run["speedup"]), "source_overall_alpha": float(by_source_run["alpha"]),
        "fast_source": fast, "fast_source_speedup": float(by_source.loc[fast, "speedup"]),
        "fast_source_alpha": float(by_source.loc[fast, "alpha"]),
        "slow_source": slow, "slow_source_speedup": float(by_source.loc[slow, "speedup"]),
        "slow_source_alpha": float(by_source.loc[slow, "alpha"]),
        "sources_alpha_order": " > ".join(measured_order),
        "sources_order_as_expected": "follows" if measured_order == checks["expected"] else "does not follow",
        "sources_order_swaps": len(checks["order_swaps"]),
        "sources_swaps_within_noise": int(checks["swaps_within_noise"]),
        "sources_order_departure": "; ".join(
            f"{b} above {a} (alpha intervals {by_source.loc[b, 'alpha_low']:.2f}-"
            f"{by_source.loc[b, 'alpha_high']:.2f} and {by_source.loc[a, 'alpha_low']:.2f}-"
            f"{by_source.loc[a, 'alpha_high']:.2f}, {'overlapping' if overlap else 'separated'})"
            for a, b, overlap in checks["order_swaps"]) or "none",
        "sources_separated": "do not overlap" if checks["separated"] else "overlap",
        "sources_correlation": round(float(checks["correlation"]), 2),
        "sources_rank_correlation": round(float(checks["rank_correlation"]), 2),
        "sources_rank": "rank the sources alike" if checks["same_order"] else "rank the sources differently",
        "sources_overlap": f"{checks['overlapping_pairs']} of {checks['source_pairs']}",
        "sources_all_overlap": int(checks["overlapping_pairs"] == checks["source_pairs"]),
        "source_prompt_points": checks["prompts"], "source_count": len(by_source),
        "prompt_alpha_rho": round(checks["prompt_alpha_rho"], 2),
        "prompt_alpha_word": correlation_word(checks["prompt_alpha_rho"]),
        "prompt_length_partial_rho": round(checks["prompt_length_partial_rho"], 2),
        "prompt_length_word": correlation_word(checks["prompt_length_partial_rho"]),
    }


def optimum_numbers(optimum: dict, handout_best) -> dict:
    """The report's sentences on each pair's optimum, and which of two drafts peaks later (printed check)."""
    numbers = {"pairs_summary": "; ".join(
        f"{pair}: the speedup {o['shape']} (best gamma {o['gamma']}, {o['speedup']:.2f}x), alpha "
        f"{o['alpha_range'][0]:.2f}-{o['alpha_range'][1]:.2f}, c = {o['c']:.3f}" for pair, o in optimum.items())}
    numbers["optimum_inside"] = ("inside the sweep for every pair" if all(o["shape"] == "peaks inside the sweep"
                                                                           for o in optimum.values())
                                 else "not inside the sweep for every pair")
    numbers["handout_best"] = f"{handout_best['pair']} at gamma {int(handout_best['gamma'])} ({handout_best['speedup']:.2f}x)"
    if len(optimum) != 2:
        return {**numbers, "drafts_tradeoff": 0}
    (pair_a, opt_a), (pair_b, opt_b) = optimum.items()  # the CPU profile's two drafts; which one peaks later
    # which peaks later, as far as the data can name the peaks: every gamma the prompts do not separate from the best
    order = order_of_sets(opt_a["tied"], opt_b["tied"])
    draft = lambda pair: pair.split(" / ")[-1]  # noqa: E731 - the pairs share the target
    ties = (f"the gammas the prompts do not separate from each best: {', '.join(map(str, opt_b['tied']))} with "
            f"{draft(pair_b)}, {', '.join(map(str, opt_a['tied']))} with {draft(pair_a)}")
    numbers["later_peak"] = (f"{pair_b} peaks at a {order} gamma than {pair_a} ({ties})" if order != "overlapping" else
                             f"which pair peaks later is not resolved ({ties})")
    print(f"peaks: {numbers['later_peak']}")
    # the report's "opposite directions": the second draft costs more per token AND agrees more often
    numbers["drafts_tradeoff"] = int(opt_b["c"] > opt_a["c"] and min(opt_b["alpha_range"]) > max(opt_a["alpha_range"]))
    print(f"{pair_b}: c {opt_b['c']:.3f} vs {opt_a['c']:.3f}, alpha {min(opt_b['alpha_range']):.3f}.. vs "
          f"..{max(opt_a['alpha_range']):.3f}: costs more and agrees more often: {bool(numbers['drafts_tradeoff'])}")
    return numbers


def tau_shortfall(frame: pd.DataFrame) -> dict:
    """Eq. 5's acceptance term against the rounds measured. Eq. 5 takes each draft as accepted independently with
    probability alpha, Omega(gamma, alpha) tokens per round; the measured tokens per round (tau) fall short of it
    where acceptances cluster (a hard stretch rejects in several rounds running) or a round has no draft to offer (a
    prompt's last token). Returns the range of tau / Omega, the measured speedup over Eq. 5 with tau in place of
    Omega (the cost terms alone), a printed line and the report's numbers."""
    from helpers.specdec.analysis import expected_tokens_per_round

    omega = expected_tokens_per_round(frame["gamma"].to_numpy(), frame["alpha"].to_numpy(dtype=float))
    tau_share = frame["tokens_per_round"].to_numpy() / omega
    with_tau = frame["speedup"].to_numpy() / (frame["eq5"].to_numpy() * tau_share)  # Eq. 5 = Omega / round cost
    text = (f"tau / Omega(gamma, alpha): {tau_share.min():.3f}..{tau_share.max():.3f} (below 1 in {(tau_share < 1).sum()}"
            f" of {len(tau_share)} rows); measured speedup over Eq. 5 with the measured tau: {with_tau.min():.2f}.."
            f"{with_tau.max():.2f}")
    return {"text": text, "numbers": {
        "tau_share_low": float(tau_share.min()), "tau_share_high": float(tau_share.max()),
        "tau_short_all": int((tau_share < 1).all()), "tau_short_rows": int((tau_share < 1).sum()),
        "eq5tau_ratio_low": float(with_tau.min()), "eq5tau_ratio_high": float(with_tau.max())}}


GPU_PARTS = (notebook_part("07", (RESULT, BY_SOURCE, SAMPLED,), measure),)  # the GPU window measures these rows (helpers.gpu_parts)
