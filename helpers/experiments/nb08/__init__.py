"""Notebook 08 (handout §4.5): §4.4's best and worst configurations read from notebook 07's rows, the host cost per
layer fitted from measured step times (notebook 07's models, notebook 12's equal-size drafts), and the roofline
model's predictions on two GPUs: the analysis and the summaries the notebook prints (it measures nothing)."""
from __future__ import annotations

import pandas as pd

from helpers.experiments import gpu_costs
from helpers.gpu_specs import (best_and_worst, collect_results, describe_ties, gpu_spec, layer_cost_fit,
                               roofline_seconds, run_to_run_spread)
from helpers.memory import load_config
from helpers.models import model_config
from helpers.paths import REPO_ROOT
from helpers.results import MissingResultError, gpu_result_folders

HANDOUT_GAMMAS = (2, 3, 5, 7)  # the lookaheads of the handout's Table 1: best and worst are picked among them
NO_SPREAD_TOLERANCE = 0.05  # the stated tie tolerance of a device whose rows time no quantity twice


def profile_rows(notebook: str, profile: str, *, say: str = "") -> pd.DataFrame:
    """A notebook's rows of every profile from this run's output root, else (printing ``say``) the committed ones."""
    runs = collect_results(notebook)
    if runs.empty or not (runs["profile"] == profile).any():
        runs = collect_results(notebook, root=REPO_ROOT)
        if say:
            print(say)
    return runs


def sweep_rows(profile: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Notebook 07's sweep rows of every profile, and this profile's (an error without them)."""
    runs = profile_rows("07_speculative_decoding", profile,
                        say=f"notebook 07: the committed rows (none for {profile!r} in this output root)")
    own = runs[runs["profile"] == profile] if not runs.empty else runs
    if own.empty:
        raise MissingResultError(f"no notebook 07 results for profile {profile!r}: run notebook 07 first "
                                 f"(python -m helpers.run_all --profile {profile} --only 07)")
    return runs, own


def _spread(spreads, default: float) -> float:
    """The largest run-to-run spread that is a number (NaN: nothing was timed twice), else ``default``."""
    return max((spread for spread in spreads if spread == spread), default=default)


def tie_tolerance(own: pd.DataFrame) -> float:
    """The run-to-run spread of the timings: the larger of T_T's and AR tokens/s's (the numerator of every speedup); 0
    where nothing was timed twice."""
    ok = own[own["status"] == "ok"]
    columns = [column for column in ("target_step_s", "ar_tokens_per_s") if column in ok]
    return _spread((run_to_run_spread(ok, column) for column in columns), 0.0)


def print_best_worst(own: pd.DataFrame, tolerance: float) -> pd.DataFrame:
    """The best and the worst configuration with a handout gamma and their ties within ``tolerance``, printed."""
    chosen = best_and_worst(own, tolerance=tolerance)  # among the rows flagged handout_gamma (gamma in {2, 3, 5, 7})
    shown = chosen.assign(tied_with=chosen["ties"].map(describe_ties))
    print(shown[["which", "draft", "gamma", "speedup", "n_tied", "tied_with"]].to_string(index=False))
    return chosen


def _e2e_rows() -> list[tuple[str, dict]]:
    """Every GPU window's end-to-end rows (``results/gpu-*/09_compiled_decode``, kind e2e) with its folder name."""
    return [(folder.name, row) for folder in gpu_result_folders(gpu_costs.GRAPHS)
            for row in gpu_costs.read_rows(folder, gpu_costs.GRAPHS)
            if row.get("kind") == "e2e" and row.get("status", "ok") == "ok"]


def gpu_e2e_rows(chosen: pd.DataFrame) -> pd.DataFrame:
    """The GPU windows' end-to-end runs of ``chosen``'s (target, draft, gamma), one line per GPU and configuration, with
    its prompts and new tokens per prompt (a window's run length need not be the CPU's)."""
    rows = _e2e_rows()
    return pd.DataFrame([
        {"which": pick["which"], "device_name": row["device_name"], "target": row["target"], "draft": row["draft"],
         "gamma": int(row["gamma"]), "alpha": row.get("alpha"), "c": None, "speedup": row["speedup"],
         "prompts": len(row.get("prompt_ids") or []), "new tokens": row.get("max_new_tokens"),
         "run": f"window {folder}, {row.get('decode', 'eager')}"}
        for window in dict.fromkeys(folder for folder, _ in rows)  # per window, in chosen's order: best, then worst
        for _, pick in chosen.iterrows() for folder, row in rows
        if folder == window and (row.get("target"), row.get("draft"), row.get("gamma")) == (
            pick["target"], pick["draft"], int(pick["gamma"]))])


def measured_best_worst(chosen: pd.DataFrame, runs: pd.DataFrame, own: pd.DataFrame) -> tuple[pd.DataFrame, list]:
    """The handout's Table 3 (printed): the best and worst on every device that ran them (notebook 07's rows and
    :func:`gpu_e2e_rows`), and those devices."""
    measured = chosen[["which", "target", "draft", "gamma"]].merge(runs[runs["status"] == "ok"],
                                                                   on=["target", "draft", "gamma"])
    measured = measured.assign(prompts=measured["prompt_ids"].map(len), **{"new tokens": measured["max_new_tokens"]})
    measured = measured[["which", "device_name", "target", "draft", "gamma", "alpha", "c", "speedup", "prompts",
                         "new tokens"]].assign(run="notebook 07")
    gpu = gpu_e2e_rows(chosen)
    if len(gpu):
        measured = pd.concat([measured, gpu], ignore_index=True)
    devices = list(dict.fromkeys(measured["device_name"]))  # this profile's device first, then the GPUs
    measured = measured.rename(columns={"device_name": "device"})
    print(measured.round(3).to_string(index=False))
    print("devices with the best/worst rows:", ", ".join(devices))
    return measured, devices


def run_lengths(measured: pd.DataFrame) -> dict:
    """Whether Table 3's devices ran different lengths (printed): a greedy run's alpha depends on the tokens it
    generates."""
    lengths = measured.groupby("device", sort=False)[["prompts", "new tokens"]].first()
    print(lengths.to_string())
    return {"t3_len_differs": int(len(lengths.drop_duplicates()) > 1)}


def gpu_own_best(chosen: pd.DataFrame) -> dict:
    """Each GPU window's own best (handout gammas; CUDA graphs where it ran them) against §4.4's best carried over: tied
    or not within its AR's run-to-run spread. Printed; ``t3_own_best`` 0 without rows."""
    best = chosen.iloc[0]
    frame = pd.DataFrame([{**row, "window": folder} for folder, row in _e2e_rows()])
    if frame.empty:
        return {"t3_own_best": 0}
    if (frame["decode"] == "graphs").any():
        frame = frame[frame["decode"] == "graphs"]
    found = []
    for window, rows in frame.groupby("window", sort=False):
        mine = rows[(rows["target"] == best["target"]) & (rows["draft"] == best["draft"])
                    & (rows["gamma"] == int(best["gamma"]))]
        if mine.empty:
            continue
        tolerance = _spread([run_to_run_spread(rows, "ar_tokens_per_s")], NO_SPREAD_TOLERANCE)
        top = best_and_worst(rows.assign(handout_gamma=rows["gamma"].isin(HANDOUT_GAMMAS)),
                             tolerance=tolerance).iloc[0]
        tied = bool(((top["ties"]["draft"] == best["draft"]) & (top["ties"]["gamma"] == int(best["gamma"]))).any())
        found.append({"gpu": rows["device_name"].iloc[0], "cfg": f"{top['draft']}, gamma={int(top['gamma'])}",
                      "speedup": float(top["speedup"]), "carried": float(mine["speedup"].iloc[0]), "tied": int(tied),
                      "tol_pct": 100 * tolerance})
    if not found:
        return {"t3_own_best": 0}
    print(pd.DataFrame(found).round(3).to_string(index=False))
    numbers = {f"t3_own{i}_{key}": value for i, f in enumerate(found, 1) for key, value in f.items()}
    return numbers | {"t3_own_best": 1, "t3_own_count": len(found),
                      "t3_own_best_differs": int(not all(f["tied"] for f in found))}


def gpu_pair_comparison(chosen: pd.DataFrame) -> dict:
    """The two GPU windows' best and worst (CUDA graphs) against their bandwidth ratio: a decode step bound by reading
    weights makes AR that much faster and the speedups equal. Verdicts within the larger AR spread; printed; ``t3_cmp``
    0 without two GPUs."""
    frame = pd.DataFrame([{**row, "window": folder} for folder, row in _e2e_rows() if row.get("decode") == "graphs"])
    if frame.empty or frame["device_name"].nunique() < 2:
        return {"t3_cmp": 0}
    specs = {d: gpu_spec(str(d)) for d in frame["device_name"].unique()}
    slow, fast = sorted(specs, key=lambda d: specs[d]["bandwidth_gbs"])[:2]
    bw = specs[fast]["bandwidth_gbs"] / specs[slow]["bandwidth_gbs"]
    tolerance = _spread([run_to_run_spread(frame[frame["device_name"] == d], "ar_tokens_per_s") for d in (slow, fast)],
                        NO_SPREAD_TOLERANCE)
    ar = frame.groupby(["device_name", "draft"])["ar_tokens_per_s"].first()
    ar_ratio = float((ar[fast] / ar[slow]).mean())

    def at(device, pick):  # None where that GPU's window did not run the configuration (another profile's pair)
        hit = frame[(frame["device_name"] == device) & (frame["draft"] == pick["draft"])
                    & (frame["gamma"] == int(pick["gamma"]))]["speedup"]
        return float(hit.iloc[0]) if len(hit) else None

    both = {pick["which"]: (at(fast, pick), at(slow, pick)) for _, pick in chosen.iterrows()}
    sd = {which: f / s for which, (f, s) in both.items() if f is not None and s is not None}
    if not sd:
        return {"t3_cmp": 0}
    numbers = {"t3_cmp": 1, "t3_cmp_fast": specs[fast]["gpu"], "t3_cmp_slow": specs[slow]["gpu"], "t3_cmp_bw": bw,
               "t3_cmp_ar_ratio": ar_ratio, "t3_cmp_ar_bound": int(abs(ar_ratio / bw - 1) <= tolerance),
               "t3_cmp_tol_pct": 100 * tolerance, "t3_cmp_sd_best": sd.get("best"), "t3_cmp_sd_worst": sd.get("worst"),
               "t3_cmp_sd_same": int(all(abs(v - 1) <= tolerance for v in sd.values()))}
    print(pd.Series(numbers).to_string())
    return numbers


def second_device_numbers(measured: pd.DataFrame) -> dict:
    """Table 3 per device (best, worst, best ahead?) and, for two GPUs, whether the datasheet says they share their
    cores and differ in bandwidth and memory: a bandwidth experiment. Printed."""
    devices = list(dict.fromkeys(measured["device"]))
    numbers, ahead = {"t3_devices": len(devices)}, {}
    for i, device in enumerate(devices, 1):
        mine = measured[measured["device"] == device].set_index("which")
        if {"best", "worst"} <= set(mine.index):
            best, worst = float(mine.loc["best", "speedup"]), float(mine.loc["worst", "speedup"])
            ahead[device] = best > worst
            numbers.update({f"t3_dev{i}_name": device, f"t3_dev{i}_best": best, f"t3_dev{i}_worst": worst})
    numbers["t3_best_ahead_all"] = int(bool(ahead) and all(ahead.values()))
    specs = []
    for device in devices:
        try:
            specs.append(gpu_spec(str(device)))
        except KeyError:
            continue
    numbers["t3_gpus"] = len(specs)
    if len(specs) >= 2:
        a, b = sorted(specs[:2], key=lambda g: g["bandwidth_gbs"])
        same = all(a[k] == b[k] for k in ("architecture", "compute_capability", "tensor_core_generation",
                                           "tensor_cores", "bf16_tensor_tflops"))
        numbers.update(t3_gpus=2, t3_slow=a["gpu"], t3_fast=b["gpu"], t3_arch=a["architecture"],
                       t3_cc=str(a["compute_capability"]), t3_tc_gen=int(a["tensor_core_generation"]),
                       t3_same_core=int(same), t3_bw_slow=int(a["bandwidth_gbs"]), t3_bw_fast=int(b["bandwidth_gbs"]),
                       t3_bw_ratio=b["bandwidth_gbs"] / a["bandwidth_gbs"], t3_mem_slow=int(a["vram_gb"]),
                       t3_mem_fast=int(b["vram_gb"]))
    print(pd.Series(numbers).to_string())
    return numbers


def table3_numbers(measured: pd.DataFrame, chosen: pd.DataFrame) -> dict:
    """Table 3's numbers: its devices, run lengths, each GPU's own best and the two GPUs against their bandwidth."""
    return {**second_device_numbers(measured), **run_lengths(measured), **gpu_own_best(chosen),
            **gpu_pair_comparison(chosen)}


def runner_up(own: pd.DataFrame, chosen: pd.DataFrame, tolerance: float) -> dict:
    """The second best configuration with a handout gamma, and whether the best is tied with it (``best_runner_tied``).
    Printed."""
    ok = own[own["status"] == "ok"]
    if "handout_gamma" in ok:
        ok = ok[ok["handout_gamma"].astype("boolean").fillna(False).astype(bool)]
    ranked = ok.sort_values("speedup", ascending=False)
    if len(ranked) < 2:
        return {"best_runner": 0}
    best, second = ranked.iloc[0], ranked.iloc[1]
    tied = bool(best["speedup"] / second["speedup"] - 1 <= tolerance)
    numbers = {"best_runner": 1, "best_runner_cfg": f"{second['draft']}, gamma={second['gamma']}",
               # three decimals as text: the two differ in the third (the numbers file rounds floats to three digits)
               "best_runner_speedup": f"{second['speedup']:.3f}", "best_exact_speedup": f"{best['speedup']:.3f}",
               "best_runner_tied": int(tied)}
    print(numbers)
    return numbers


def best_worst_numbers(own: pd.DataFrame, chosen: pd.DataFrame, devices: list, tolerance: float) -> dict:
    """The report's numbers of the best, the worst and the runner-up: configuration, speedup, alpha and ties."""
    numbers = {"n_configs": len(own), "source_device": own["device_name"].iloc[0],
               "devices_with_results": ", ".join(devices), "tie_tolerance_pct": 100 * tolerance}
    for which, row in (("best", chosen.iloc[0]), ("worst", chosen.iloc[1])):
        ties = row["ties"]["speedup"]
        numbers.update({f"{which}_cfg": f"{row['draft']}, gamma={row['gamma']}", f"{which}_speedup": row["speedup"],
                        f"{which}_alpha": row["alpha"], f"{which}_ties": describe_ties(row["ties"]),
                        f"{which}_ties_low": float(ties.min()), f"{which}_ties_high": float(ties.max()),
                        f"{which}_tied": int(row["n_tied"] > 1)})
    return {**runner_up(own, chosen, tolerance), **numbers}


def print_fit_a(ok_rows: pd.DataFrame, context_len: int) -> tuple[pd.DataFrame, dict]:
    """Fit A: host time per forward (a + b * layers) over notebook 07's models' median T_T and T_D (on a GPU, what the
    roofline leaves). Printed; the per-model frame and the fit."""
    timings = pd.concat([ok_rows[[model, seconds]].set_axis(["model", "seconds"], axis=1)
                         for model, seconds in (("target", "target_step_s"), ("draft", "T_D_s"))])
    timings = timings.groupby("model")["seconds"]
    costs = timings.median()  # a target timed once per pair: the median of its pairs' timings
    fit = pd.DataFrame({"layers": [model_config(m).num_hidden_layers for m in costs.index],
                        "hidden": [model_config(m).hidden_size for m in costs.index], "measured (ms)": costs * 1e3,
                        "timings": timings.nunique()})
    if ok_rows["device"].iloc[0] == "cuda":  # on a GPU the measured time also holds the roofline time
        live = gpu_spec(ok_rows["device_name"].iloc[0])
        fit["measured (ms)"] -= [roofline_seconds(model_config(m), live, 1, 1, context_len) * 1e3 for m in costs.index]
    fit07 = layer_cost_fit(fit["layers"], fit["measured (ms)"] / 1e3, names=fit.index)
    fit["fit (ms)"] = (fit07["fixed_s"] + fit07["per_layer_s"] * fit["layers"]) * 1e3
    fit["residual"] = fit07["residuals"]["residual"]
    print(fit.round(3).to_string())
    print(_fit_summary("A", fit07, ok_rows["device_name"].iloc[0]))
    return fit, fit07


def _fit_summary(name: str, fit: dict, device: str) -> dict:
    return {"fit": name, "device": device, "a ms": round(fit["fixed_s"] * 1e3, 3),
            "b ms/layer": round(fit["per_layer_s"] * 1e3, 3), "points": fit["points"], "r2": round(fit["r2"], 3),
            "max residual": round(fit["max_abs_residual"], 3), "clipped": bool(fit["clipped"])}


def print_fit_b(profile: str, fit: pd.DataFrame) -> dict | None:
    """Fit B over notebook 12's drafts of EQUAL size and different depth (printed; its line at the 07 models in
    ``fit``); None without two depths."""
    runs12 = profile_rows("12_draft_design", profile)
    rows12 = runs12 if runs12.empty else runs12[(runs12["profile"] == profile) & (runs12.get("status", "ok") == "ok")]
    family = rows12[rows12["draft"].astype(str).str.fullmatch(r".*-\d+x\d+")] if "draft" in rows12 else rows12
    if len(family) < 2 or family["draft"].map(lambda d: model_config(d).num_hidden_layers).nunique() < 2:
        print("fit B: no notebook 12 rows for this profile (fit A only)")
        return None
    fam = pd.DataFrame({"layers": [model_config(d).num_hidden_layers for d in family["draft"]],
                        "T_D (ms)": [r["T_D"] * 1e3 for r in family["costs"]]}, index=family["draft"].to_numpy())
    fit12 = layer_cost_fit(fam["layers"], fam["T_D (ms)"] / 1e3, names=fam.index)
    print(fit12["residuals"].round(3).to_string())
    print(_fit_summary("B", fit12, family["device_name"].iloc[0]))
    fit["fit B (ms)"] = (fit12["fixed_s"] + fit12["per_layer_s"] * fit["layers"]) * 1e3  # the 07 models it did not see
    print(fit[["layers", "measured (ms)", "fit B (ms)"]].round(3).to_string())
    return fit12


def host_numbers(fit: pd.DataFrame, fit07: dict, fit12: dict | None, device_name: str) -> dict:
    """The report's numbers of the two host-cost fits (fit B's ``host2_*`` 0 without it)."""
    d2 = fit07["residuals"]["residual"]
    worst_point = d2.abs().idxmax()
    target, b = fit.loc[fit["layers"].idxmax()], fit12 or {}  # notebook 07's target: its deepest model
    return {"host_fixed_ms": fit07["fixed_s"] * 1e3, "host_per_layer_ms": fit07["per_layer_s"] * 1e3,
            "host_device": device_name, "host_points": fit07["points"],
            "host_clipped": int(fit07["clipped"]), "host_worst_model": str(worst_point),
            "host_worst_measured_ms": float(fit.loc[worst_point, "measured (ms)"]),
            "host_worst_fit_ms": float(fit.loc[worst_point, "fit (ms)"]),
            "host_worst_residual_pct": 100 * abs(float(d2[worst_point])), "host_alt": int(fit12 is not None),
            "host2_fixed_ms": b.get("fixed_s", 0.0) * 1e3, "host2_per_layer_ms": b.get("per_layer_s", 0.0) * 1e3,
            "host2_points": b.get("points", 0), "host2_r2": b.get("r2", 0.0),
            "host2_max_residual_pct": 100 * b.get("max_abs_residual", 0.0),
            # fit B's line at the depth of notebook 07's target, against that target's measured step
            "host2_cpu_target_ms": float(fit["fit B (ms)"].max()) if fit12 else 0.0,
            "cpu_target_ms": float(target["measured (ms)"]), "cpu_target_layers": int(fit["layers"].max()),
            "cpu_target_timings": int(target["timings"]),
            # the report's "mostly its own arithmetic": fit B's per-layer line covers under half the target's step
            "target_mostly_arithmetic": int(bool(fit12) and float(fit["fit B (ms)"].max())
                                            < 0.5 * float(target["measured (ms)"]))}


def print_host_bound(host_fits: dict, model_ids: list, compare: dict, fast, slow, context_len: int,
                     host_device: str) -> dict:
    """Each fit's host time per forward applied unchanged to each GPU, against its roofline step (printed: host-bound
    where the host time is the longer); the report's numbers."""
    lines = []
    for name, (fixed_s, per_layer_s) in host_fits.items():
        for model_id in model_ids:
            config = load_config(model_id)
            host_ms = (fixed_s + per_layer_s * config.num_hidden_layers) * 1e3
            roof_ms = {gpu["gpu"]: roofline_seconds(config, gpu, 1, 1, context_len) * 1e3 for gpu in compare.values()}
            lines.append({"fit": name, "model": model_id, "layers": config.num_hidden_layers, "host ms": host_ms,
                          **{f"roofline {g} ms": t for g, t in roof_ms.items()},
                          **{f"host-bound {g}": host_ms > t for g, t in roof_ms.items()}})
    table = pd.DataFrame(lines)
    print(f"host time assumed from {host_device}:\n" + table.round(2).to_string(index=False))
    numbers = {"host2_target_ms": 0.0, "host2_target_bound_fast": 0, "host2_target_bound_slow": 0}
    for name, prefix in (("A", "host"), ("B", "host2")):
        row = table[(table["fit"] == name) & (table["model"] == model_ids[0])]
        if len(row):
            row = row.iloc[0]
            numbers.update({f"{prefix}_target_ms": row["host ms"],
                            f"{prefix}_target_bound_fast": int(row[f"host-bound {fast['gpu']}"]),
                            f"{prefix}_target_bound_slow": int(row[f"host-bound {slow['gpu']}"])})
    fit_a = table[table["fit"] == "A"]
    target = fit_a.iloc[0]
    return numbers | {"roof_target_fast_ms": target[f"roofline {fast['gpu']} ms"],
                      "roof_target_slow_ms": target[f"roofline {slow['gpu']} ms"],
                      "host_target_layers": int(target["layers"]),
                      "host_all_bound": int(fit_a[[c for c in table if c.startswith("host-bound")]].all().all())}


def column(gpu: str, regime: str) -> str:
    """The prediction table's column of one GPU and regime."""
    return f"{gpu}, {regime} (model)"


def prediction_numbers(predicted: pd.DataFrame, regimes: dict, compare: dict, fast, slow) -> dict:
    """Does the best stay ahead of the worst per regime, and is the host-cost prediction lower on the faster-memory GPU
    or the same on both (both host-bound)? Printed; the report's numbers."""
    on_fast = {regime: predicted[column(fast["gpu"], regime)] for regime in regimes}
    keeps = {regime: bool(values.loc[0] >= values.loc[1]) for regime, values in on_fast.items()}
    numbers = {}
    for i, which in enumerate(["best", "worst"]):
        for gpu_name in compare:
            key = gpu_spec(gpu_name)["gpu"].replace(" ", "")
            for regime, short in (("roofline only", "roof"), ("+ host cost", "host")):
                numbers[f"pred_{which}_{key}_{short}"] = predicted.loc[i, column(gpu_name, regime)]
                if regime == "+ host cost" and "+ host cost B" in regimes:
                    numbers[f"pred_{which}_{key}_host2"] = predicted.loc[i, column(gpu_name, "+ host cost B")]
        numbers[f"pred_{which}_pair"] = predicted.loc[i, "handout pair"]
        numbers[f"pred_{which}_alpha"] = predicted.loc[i, "alpha (borrowed)"]
    gap = list(predicted[column(slow["gpu"], "+ host cost")] - on_fast["+ host cost"])
    flags = {"host_gpu_lower": int(min(gap) > 1e-3), "host_gpu_same": int(max(gap) <= 1e-3),
             "rank_roof_ahead": int(keeps["roofline only"]), "rank_host_ahead": int(keeps["+ host cost"]),
             "rank_host2_ahead": int(keeps.get("+ host cost B", False)),
             "rank_host_fits_agree": int(keeps.get("+ host cost B", keeps["+ host cost"]) == keeps["+ host cost"])}
    print(flags)
    return numbers | flags


def prediction_grid(predict, compare: dict, drafts: list, gammas: list, regimes: dict, alpha_for: dict,
                    target: str) -> pd.DataFrame:
    """The model over every handout draft and gamma on each GPU: c and the speedup per regime."""
    grid = []
    for gpu_name, gpu in compare.items():
        for draft_id in drafts:
            for gamma in gammas:
                row = {"GPU": gpu_name, "draft": draft_id.split("/")[1], "gamma": gamma,
                       "alpha (borrowed)": alpha_for[draft_id]}
                for regime, host in regimes.items():
                    p = predict(target, draft_id, gamma, gpu, host)
                    row[f"c, {regime}"], row[f"speedup, {regime} (model)"] = p["c"], p["speedup"]
                grid.append(row)
    return pd.DataFrame(grid)


def grid_numbers(model: pd.DataFrame, gpus: list, regimes: dict) -> dict:
    """The smallest c per GPU and regime, the host-cost predictions' range per fit and GPU (printed), and whether they
    stay below 1."""
    numbers, spans = {}, []
    for gpu_name in gpus:
        part = model[model["GPU"] == gpu_name]
        key = gpu_spec(gpu_name)["gpu"].replace(" ", "")
        numbers[f"c_{key}_roof"] = part["c, roofline only"].min()
        numbers[f"c_{key}_host"] = part["c, + host cost"].min()
        for regime in [r for r in regimes if r != "roofline only"]:
            values = part[f"speedup, {regime} (model)"]
            spans.append({"regime": regime, "GPU": gpu_name, "low": float(values.min()), "high": float(values.max())})
            suffix = "_host2" if regime.endswith("B") else "_host"
            numbers.update({f"grid_low_{key}{suffix}": spans[-1]["low"], f"grid_high_{key}{suffix}": spans[-1]["high"]})
    spans = pd.DataFrame(spans)
    print(spans.round(2).to_string(index=False))
    slower = spans.groupby("regime", sort=False)["high"].max() < 1  # below 1 for every configuration on both GPUs
    return numbers | {"host_always_slower": int(slower.get("+ host cost", False)),
                      "host2_always_slower": int(slower.get("+ host cost B", False)),
                      "host_slower_fits_agree": int(slower.nunique() == 1)}


def gpu_steps(target: str, host_fits: dict) -> pd.DataFrame:
    """The GPU windows' decode step of ``target`` (eager, CUDA graphs) against its HBM floor and each fit's host time,
    and whether eager lies between the two regimes. Empty without rows."""
    lines = []
    for folder, costs in gpu_costs.measured_cost_tables():
        mine = costs[costs["target"] == target]
        eager, graphs = (mine[mine["decode"] == mode]["T_T ms"] for mode in ("eager", "graphs"))
        if eager.empty:
            continue
        layers = int(mine["target_layers"].iloc[0])
        floor = float(mine["HBM floor ms"].iloc[0])
        host = {name: (fixed + per_layer * layers) * 1e3 for name, (fixed, per_layer) in host_fits.items()}
        lines.append({"profile": folder.name, "gpu": mine["device_name"].iloc[0], "layers": layers,
                      "eager ms": float(eager.mean()), "graphs ms": float(graphs.mean()) if len(graphs) else None,
                      "HBM floor ms": floor, **{f"host fit {name} ms": t for name, t in host.items()},
                      "eager per layer ms": float(eager.mean()) / layers,
                      "eager within the regimes": floor <= float(eager.mean()) <= max(floor, host["A"])})
    return pd.DataFrame(lines)


def print_gpu_steps(steps: pd.DataFrame, target: str, host_per_layer_ms: float) -> dict:
    """:func:`gpu_steps` against the two regimes (printed); the report's numbers (``gpu_measured`` 0 without rows)."""
    if steps.empty:
        print("no GPU window has measured the target's step yet")
        return {"gpu_measured": 0}
    print(steps.round(3).to_string(index=False))
    first, numbers = steps.iloc[0], {}
    if len(steps) > 1 and pd.notna(steps.iloc[1]["graphs ms"]):  # a second GPU: one sentence beside the first's
        other = steps.iloc[1]
        numbers = {"gpu_other_name": other["gpu"], "gpu_other_eager_ms": other["eager ms"],
                   "gpu_other_eager_within": int(other["eager within the regimes"]),
                   "gpu_other_graphs_ms": other["graphs ms"],
                   "gpu_other_graphs_share": other["HBM floor ms"] / other["graphs ms"],
                   "gpu_other_agrees": int(other["eager within the regimes"] == first["eager within the regimes"])}
    graphs = pd.notna(first["graphs ms"])
    return {**numbers, "gpu_measured": 1, "gpu_measured_name": first["gpu"], "gpu_measured_profile": first["profile"],
            "gpu_eager_ms": first["eager ms"], "gpu_eager_per_layer_ms": first["eager per layer ms"],
            "gpu_graphs_ms": first["graphs ms"] if graphs else 0.0, "gpu_floor_ms": first["HBM floor ms"],
            "gpu_host_a_ms": first["host fit A ms"], "gpu_eager_within": int(first["eager within the regimes"]),
            "gpu_graphs_share": first["HBM floor ms"] / first["graphs ms"] if graphs else 0.0,
            "gpu_eager_over_fit_a": first["eager per layer ms"] / host_per_layer_ms}


REGIME_LABELS = {"roofline only": "roof", "+ host cost": "+host A", "+ host cost B": "+host B"}


def short_regime_headers(grid: pd.DataFrame) -> pd.DataFrame:
    """:func:`prediction_grid`'s columns with the report's short headers ("c, + host cost" -> "c (+host A)")."""
    names = {f"{quantity}, {regime}{suffix}": f"{quantity} ({label})" for regime, label in REGIME_LABELS.items()
             for quantity, suffix in (("c", ""), ("speedup", " (model)"))}
    return grid.rename(columns=names)


def _measured_pair_rows(target_id: str, draft_id: str):
    """(datasheet GPU name, row) of every GPU window's Eq. 5 cost row of one pair (random weights, bf16, batch 1)."""
    for folder in gpu_costs.gpu_cost_folders():
        for row in gpu_costs.read_rows(folder, gpu_costs.COSTS):
            if row.get("target") == target_id and row.get("draft") == draft_id:
                try:
                    yield gpu_spec(str(row.get("device_name")))["gpu"], row
                except KeyError:
                    yield str(row.get("device_name")), row


def measured_terms_speedups(target_id: str, draft_id: str, gamma: int, alpha: float) -> dict:
    """Eq. 5 for one handout pair over each GPU window's MEASURED c and T_V/T_T at the borrowed ``alpha``, per GPU and
    decode mode (NaN where T_V/T_T < 1, a timing artefact)."""
    from helpers.specdec.analysis import predicted_speedup

    found = {}
    for gpu, row in _measured_pair_rows(target_id, draft_id):
        ratios = gpu_costs.trusted_verify_ratios(row)
        if str(gamma) in row.get("verify_ratio", {}):
            found[f"{gpu}, measured terms, {row.get('decode', 'eager')} (Eq. 5)"] = float(
                predicted_speedup(gamma, alpha, row["c"], ratios[gamma])) if gamma in ratios else float("nan")
    return found


def measured_terms_numbers(predicted: pd.DataFrame) -> dict:
    """The measured-terms columns in numbers: range, best ahead, all below 1, blank cells (artefacts). Printed;
    ``pred_measured`` 0 without them."""
    columns = [c for c in predicted.columns if ", measured terms, " in c]
    if not columns:
        return {"pred_measured": 0}
    values = predicted.loc[[0, 1], columns]
    both = [c for c in columns if values[c].notna().all()]
    numbers = {"pred_measured": 1, "pred_measured_columns": len(columns),
               "pred_measured_min": float(values.min().min()), "pred_measured_max": float(values.max().max()),
               "pred_measured_best_ahead": int(all(values.loc[0, c] >= values.loc[1, c] for c in both)),
               "pred_measured_all_below": int((values.stack().dropna() < 1).all()),
               "pred_measured_excluded": int(predicted[columns].isna().sum().sum())}
    print(values.round(3).to_string(), "\n", numbers)
    return numbers


def measured_terms_optimum(target_id: str, draft_id: str, alpha: float) -> list[dict]:
    """Each GPU window's Eq. 5 optimum for one handout pair over its MEASURED terms at the borrowed ``alpha`` (a gamma
    not measured from the line through the trusted ones: ``extrapolated``), the speedup at the largest measured gamma
    and the break-even alpha."""
    from helpers.specdec.analysis import break_even_alpha, linear_verify_cost, optimal_gamma, predicted_speedup

    found = []
    for gpu, row in _measured_pair_rows(target_id, draft_id):
        ratios = gpu_costs.trusted_verify_ratios(row)  # without the artefacts (T_V/T_T < 1 at gamma >= 1)
        if not ratios:
            continue
        if len(ratios) >= 2:  # the line through the trusted ratios stands in for the gammas not measured
            line = linear_verify_cost(list(ratios), list(ratios.values()))
            verify = lambda g, ratios=ratios, line=line: ratios[g] if g in ratios else line(g)  # noqa: E731
            candidates = range(1, max(ratios) + 1)
        else:  # one trusted ratio draws no line: only the measured gamma
            verify, candidates = ratios.__getitem__, list(ratios)
        gamma, speedup = optimal_gamma(alpha, row["c"], verify, candidates)
        top = max(ratios)
        found.append({"gpu": gpu, "decode": row.get("decode", "eager"), "gamma": int(gamma),
                      "speedup": float(speedup), "extrapolated": gamma not in ratios,
                      "largest_gamma": top, "at_largest": float(predicted_speedup(top, alpha, row["c"], ratios[top])),
                      "break_even_alpha": break_even_alpha(row["c"], ratios)[0],
                      "artefacts": gpu_costs.verify_artefacts(row)})
    return found


def optimum_table(pairs: dict) -> pd.DataFrame:
    """Each handout pair's optimal gamma per GPU and decode mode (``pairs``: label ->
    :func:`measured_terms_optimum`)."""
    lines = [{"pair": label, "GPU": f["gpu"], "decode": f["decode"], "gamma*": f["gamma"], "speedup": f["speedup"],
              "extrapolated": f["extrapolated"], "largest gamma": f["largest_gamma"], "speedup there": f["at_largest"],
              "artefact g": ", ".join(map(str, f.get("artefacts") or [])) or "none"}
             for label, found in pairs.items() for f in found]
    return pd.DataFrame(lines)


def optimum_numbers(pairs: dict) -> dict:
    """The optimal gammas' numbers (printed): the largest optimum and whether any exceeds 1; ``pred_opt`` 0 without."""
    table = optimum_table(pairs)
    if table.empty:
        return {"pred_opt": 0}
    print(table.round(3).to_string(index=False))
    return {"pred_opt": 1, "pred_opt_max": float(table["speedup"].max()),
            "pred_opt_any_above_one": int(table["speedup"].max() > 1),
            "pred_opt_any_extrapolated": int(table["extrapolated"].any())}
