"""Notebook 06 (handout §4.2): one forward pass against the batch size, and the verify step (one forward over k
tokens after a cached prefix). Its configurations from the ``fp_*`` parameters, the measurement of what the result
file lacks (CUDA events on a GPU), and the numbers (roofline, GPU rows, verify order) its sentences choose from."""
from __future__ import annotations

import numpy as np
import torch

from helpers.experiments.packages import TARGET, notebook_part, step_record
from helpers.experiments.common import check_budget
from helpers.generation import sweeps as gb
from helpers.generation.loading import load_for_sweep
from helpers.gpu_specs import arithmetic_intensity, gpu_spec, roofline_seconds
from helpers.hardware import resolve_device
from helpers.results import config_key, free_memory, gpu_result_folders, latest_ok_rows

RESULT = "06_forward_pass_scaling"
ROOFLINE_MODEL = "Qwen/Qwen3-4B"  # the handout's model of §4.2 (the CPU profile times a scaled analog)


def setup(params: dict) -> torch.device:
    """Seed and torch threads as the notebook's derived-values cell sets them; the device the models run on."""
    torch.manual_seed(0)
    if params["fp_threads"] > 0:
        torch.set_num_threads(params["fp_threads"])
    return resolve_device(params["device"])


def forward_configs(params: dict, label: str | None = None) -> list[dict]:
    """One configuration per batch size of ``fp_batch_sizes`` (``label``: the loaded model's weights label)."""
    p = params
    label = label or gb.expected_weights_label(p["fp_model"], p["fp_weights"])
    return [{"kind": "forward", "model": p["fp_model"], "weights": label, "dtype": p["fp_dtype"],
             "device": p["device"], "batch_size": b, "seq_len": p["fp_seq_len"], "warmup": p["fp_warmup"],
             "trials": p["fp_trials"]} for b in p["fp_batch_sizes"]]


def verify_configs(params: dict, label: str | None = None) -> list[dict]:
    """One configuration per verify size k of ``fp_verify_tokens``."""
    p = params
    label = label or gb.expected_weights_label(p["fp_verify_model"], p["fp_weights"])
    return [{"kind": "verify", "model": p["fp_verify_model"], "weights": label, "dtype": p["fp_dtype"],
             "device": p["device"], "prefix_len": p["fp_verify_prefix"], "new_tokens": k, "warmup": p["fp_warmup"],
             "trials": p["fp_trials"]} for k in p["fp_verify_tokens"]]


def _with_model(params: dict, results, name: str, loaded, configs: list[dict], run) -> list[dict]:
    """The rows of ``configs``: the stored ones where all are (no ``loaded`` model given, no ``fp_rerun``), else
    ``run(model, device)`` with ``loaded`` or the model loaded for it after the budget (released afterwards)."""
    if loaded is None and all(results.has(c) for c in configs) and not params.get("fp_rerun", False):
        done = results.done()
        return [done[config_key(c)] for c in configs]
    device = resolve_device(params["device"])
    model = loaded
    if model is None:
        check_budget(results, f"loading {name}")
        model = load_for_sweep(name, params["fp_weights"], device, getattr(torch, params["fp_dtype"]))
    rows = run(model, device)
    if loaded is None:
        del model
        free_memory()
    return rows


def measure_forward(params: dict, store, progress: bool = True, loaded=None) -> list[dict]:
    """The forward sweep over ``fp_batch_sizes``, measuring the rows the result file lacks (``loaded``: the caller's
    model)."""
    p, results = params, store(RESULT)
    configs = forward_configs(p, loaded and loaded.label)
    return _with_model(p, results, p["fp_model"], loaded, configs,
                       lambda model, device: gb.run_forward_sweep(
                           results, model.model, configs, meta=model.meta,
                           warmup=p["fp_warmup"], repeats=p["fp_trials"], device=device,
                           cuda_events=device.type == "cuda", progress=progress, rerun=p.get("fp_rerun", False)))


def measure_verify(params: dict, store, progress: bool = True, loaded=None) -> list[dict]:
    """The verify step over ``fp_verify_tokens``: medians of at least 20 timed forwards each (a descheduling would skew
    a mean of milliseconds)."""
    from tqdm.auto import tqdm

    p, results = params, store(RESULT)
    configs = verify_configs(p, loaded and loaded.label)

    def run(model, device):
        return [results.run(c, lambda c=c: gb.measure_verify(
            model.model, prefix_len=c["prefix_len"], new_tokens=c["new_tokens"], warmup=p["fp_warmup"] + 2,
            repeats=max(4 * p["fp_trials"], 20), device=device, cuda_events=device.type == "cuda"), meta=model.meta,
            rerun=p.get("fp_rerun", False)) for c in (tqdm(configs, desc="verify sizes") if progress else configs)]

    return _with_model(p, results, p["fp_verify_model"], loaded, configs, run)


def measure(params: dict, store, progress: bool = True) -> dict:
    """Every configuration of the notebook the result file lacks: ``{"forward": rows, "verify": rows}``."""
    setup(params)
    return {"forward": measure_forward(params, store, progress),
            "verify": measure_verify(params, store, progress)}


BIMODAL_GAP = 0.25  # a gap in a row's sorted samples this share of its median splits them into two levels
BIMODAL_SIDE = 0.1  # ... when each level holds at least this share of the samples (and two of them)
DRIFT_SHIFT = 0.15  # a row's second-half median this far from its first half's, with a rank trend (p < 0.01)
SWEEP_DRIFT_RHO = -0.8  # a sweep's medians against run order: this Spearman correlation or lower is a drift


def sample_reliability(samples) -> dict:
    """Can a row's median stand for one forward? ``bimodal``: the sorted samples split at a gap of :data:`BIMODAL_GAP`
    of the median into two levels of :data:`BIMODAL_SIDE` each (two states of the machine); ``drift``: a trend with run
    order (Spearman p < 0.01) moving the halves' medians :data:`DRIFT_SHIFT` apart. ``reason`` names what was found."""
    from scipy.stats import spearmanr

    x = np.asarray(samples, dtype=float)
    n, median = len(x), float(np.median(x)) if len(x) else float("nan")
    out = {"bimodal": False, "drift": False, "reason": ""}
    if n < 5:
        return out
    side = max(2, int(np.ceil(BIMODAL_SIDE * n)))
    ordered = np.sort(x)
    gaps = np.diff(ordered)[side - 1:n - side]
    if len(gaps):
        i = int(np.argmax(gaps)) + side - 1
        if gaps.max() >= BIMODAL_GAP * median:
            low, high = ordered[:i + 1], ordered[i + 1:]
            out.update(bimodal=True, low_ms=1e3 * float(np.median(low)), high_ms=1e3 * float(np.median(high)),
                       low_n=len(low), high_n=len(high))
    rho, p_value = spearmanr(np.arange(n), x)
    halves = float(np.median(x[n // 2:]) / np.median(x[:n // 2]))
    out.update(rho=float(rho), halves=halves)
    if p_value < 0.01 and abs(halves - 1) >= DRIFT_SHIFT:
        out["drift"] = True
    reasons = []
    if out["bimodal"]:
        reasons.append(f"two levels ({out['low_n']} samples near {out['low_ms']:.0f} ms, {out['high_n']} near "
                       f"{out['high_ms']:.0f} ms)")
    if out["drift"]:
        reasons.append(f"a trend with run order (second half's median x{halves:.2f} the first's)")
    out["reason"] = " and ".join(reasons)
    return out


def sweep_drift(rows: list[dict], key: str) -> dict:
    """Does a sweep whose work grows with ``key``, run in that order, fall with run order (Spearman rho <=
    :data:`SWEEP_DRIFT_RHO` over four or more rows)? That is the machine drifting, not the forward."""
    from scipy.stats import spearmanr

    ok = sorted((r for r in rows if r.get("status") == "ok" and r.get("time_s_median") is not None),
                key=lambda r: str(r.get("timestamp", "")))
    if len(ok) < 4:
        return {"drift": False, "rho": float("nan"), "rows": 0, "first_ms": 0.0, "last_ms": 0.0}
    rho = float(spearmanr(np.arange(len(ok)), [r["time_s_median"] for r in ok])[0])
    in_key_order = [r[key] for r in ok] == sorted(r[key] for r in ok)
    return {"drift": bool(in_key_order and rho <= SWEEP_DRIFT_RHO), "rho": rho, "rows": len(ok),
            "first_ms": 1e3 * ok[0]["time_s_median"], "last_ms": 1e3 * ok[-1]["time_s_median"]}


def unreliable_rows(rows: list[dict], key: str) -> dict:
    """``{key value: reason}`` of the rows to re-measure (:func:`sample_reliability`)."""
    found = {}
    for r in rows:
        if r.get("status") == "ok" and r.get("time_s_samples"):
            check = sample_reliability(r["time_s_samples"])
            if check["reason"]:
                found[int(r[key])] = check["reason"]
    return found


def verify_order(rows: list[dict]) -> dict:
    """Does the verify forward's median grow with every added token k? Each dip is jitter within the two rows' min-max
    ranges, noise beyond them; a drifting sweep (:func:`sweep_drift`) is to re-measure instead. The report's numbers."""
    ok = sorted((dict(r, time_s_min=min(r["time_s_samples"]), time_s_max=max(r["time_s_samples"]))
                 for r in rows if r.get("status") == "ok" and r.get("time_s_samples")), key=lambda r: r["new_tokens"])
    if len(ok) < 2:  # rows without their samples (or a single k): nothing to set a dip against
        return {"drift": False, "numbers": {"vfDipsChecked": 0, "vfDips": 0, "vfDipsNoisy": 0, "vfDipsText": "none",
                                            "vfDrift": 0, "vfDriftRho": 0.0, "vfDriftRows": 0, "vfDriftFirstMs": 0.0,
                                            "vfDriftLastMs": 0.0}}
    dips = [(a, b) for a, b in zip(ok, ok[1:]) if b["time_s_median"] < a["time_s_median"]]
    noisy = gb.non_monotone_noise(ok, "new_tokens")
    drift = sweep_drift(rows, "new_tokens")
    return {"drift": drift["drift"],
            "numbers": {"vfDipsChecked": 1, "vfDips": len(dips), "vfDipsNoisy": len(noisy),
                        "vfDipsText": ", ".join(f"{a['new_tokens']} to {b['new_tokens']}" for a, b in dips) or "none",
                        "vfDrift": int(drift["drift"]), "vfDriftRho": drift["rho"] if drift["drift"] else 0.0,
                        "vfDriftRows": drift["rows"], "vfDriftFirstMs": drift["first_ms"],
                        "vfDriftLastMs": drift["last_ms"]}}


REFERENCE_GPU = "H100 SXM"  # the roofline a CPU profile's section states (notebook 08's first GPU)


def roofline_gpu(device_name: str, on_gpu: bool) -> str:
    """The GPU whose roofline §4.2 states: the rows' own where the datasheet table has it, else
    :data:`REFERENCE_GPU`."""
    if on_gpu:
        try:
            return gpu_spec(device_name)["gpu"]
        except KeyError:
            print(f"no datasheet row for {device_name!r}: the roofline below is the {REFERENCE_GPU}'s")
    return REFERENCE_GPU


def roofline_numbers(config, gpu_name: str, batch_sizes: list[int], seq_len: int) -> tuple[dict, dict]:
    """Where a forward over ``seq_len`` tokens turns compute-bound on ``gpu_name``: the arithmetic intensity per batch
    size against the ridge point, and the report's numbers (``fpRoof...``)."""
    ridge = gpu_spec(gpu_name)["ridge_flop_per_byte"]
    ai = {b: arithmetic_intensity(config, b, seq_len, 0) for b in batch_sizes}
    compute_bound = [b for b, v in ai.items() if v > ridge]
    first_b, last_b = min(batch_sizes), max(batch_sizes)
    roof = {b: roofline_seconds(config, gpu_spec(gpu_name), b, seq_len, 0) for b in batch_sizes}
    roof_share = roof[last_b] / roof[first_b] / (last_b / first_b)
    return ai, dict(fpRoofModel=ROOFLINE_MODEL, fpRoofGpu=gpu_name, fpRidge=ridge, fpAiFirst=ai[first_b],
                    fpRoofBFirst=first_b,
                    fpRoofFirstBound="compute-bound" if first_b in compute_bound else "memory-bound",
                    fpRoofComputeFrom=min(compute_bound) if compute_bound else 0,
                    fpAiRatio=ai[first_b] / ridge, fpRoofTimeRatio=roof[last_b] / roof[first_b],
                    fpRoofLinearShare=roof_share, fpRoofNearLinear=int(roof_share >= 0.8))


def batch_one_dearest(ok, skip=()) -> dict:
    """Is the smallest batch the dearest per sequence beyond twice the standard error of the difference from the dearest
    larger batch (``skip``: batch sizes to re-measure)? The report's numbers."""
    first = ok.iloc[0]
    larger = ok.iloc[1:][~ok.iloc[1:]["batch_size"].isin(list(skip))]
    larger = larger if len(larger) else ok.iloc[1:]
    dearest = larger.loc[larger["ms_per_sequence"].idxmax()]
    excess = first["ms_per_sequence"] / dearest["ms_per_sequence"] - 1
    standard_error = lambda r: r["time_ms_std"] / r["batch_size"] / np.sqrt(r["trials"])  # noqa: E731
    margin = 2 * np.hypot(standard_error(first), standard_error(dearest))
    beyond = bool(first["ms_per_sequence"] - dearest["ms_per_sequence"] > margin)
    return {"fpBOneDearest": int(beyond), "fpBOneExcessPct": 100 * excess,
            "fpBOneMarginPct": 100 * margin / dearest["ms_per_sequence"], "fpBOneAgainst": int(dearest["batch_size"])}


HOST_BOUND = 3  # a forward this many times its roofline time is bound by something other than the GPU's arithmetic
# and bandwidth (which: not measured by these rows; eager kernel launches from the host are one candidate)


def sweep_not_monotone(rows: list[dict]) -> list[int]:
    """The batch sizes timed faster than the smallest batch by more than twice the standard error of the difference of
    the means: more sequences cannot cost less, so such a row timed the machine."""
    ok = sorted((r for r in rows if r.get("time_ms_mean") is not None), key=lambda r: r["batch_size"])
    if len(ok) < 2:
        return []
    standard_error = lambda r: (r.get("time_ms_std") or 0.0) / np.sqrt(r.get("trials") or 1)  # noqa: E731
    first = ok[0]
    return [int(r["batch_size"]) for r in ok[1:] if first["time_ms_mean"] - r["time_ms_mean"]
            > 2 * np.hypot(standard_error(first), standard_error(r))]


def gpu_forward_rows(config, seq_len: int) -> list[dict]:
    """Per GPU window, the roofline model's MEAN forward time per batch size at ``seq_len`` against that GPU's roofline;
    a sweep with a row to re-measure or one faster than its first batch carries ``remeasure`` (no ratio is quoted from
    it), and so does one timed with other warm-ups or trials than its profile asks for now (``outdated``, its
    ``timed_with`` (warm-ups, trials), no ratio either)."""
    found = []
    for folder in gpu_result_folders(RESULT):
        rows = [r for r in latest_ok_rows(folder / f"{RESULT}.jsonl") if r.get("device") == "cuda"
                and r.get("kind") == "forward" and r.get("seq_len") == seq_len and r.get("model") == ROOFLINE_MODEL]
        if not rows:
            continue
        timed = rows
        rows = current_rows(folder.name, rows)  # rows the profile marks for re-measuring are quoted nowhere
        if not rows:  # said as a sweep to re-measure, not left out in silence
            first = min(timed, key=lambda r: r["batch_size"])
            found.append({"profile": folder.name, "gpu": timed[0]["device_name"], "outdated": True, "remeasure": True,
                          "first": int(first["batch_size"]), "first_ms": first["time_ms_mean"], "flagged": [],
                          "faster": [], "faster_ms": None, "timed_with": (first.get("warmup"), first.get("trials"))})
            continue
        device_name = rows[0]["device_name"]
        means = {int(r["batch_size"]): r["time_ms_mean"] / 1e3 for r in rows}
        first, last = min(means), max(means)
        flagged, faster = list(unreliable_rows(rows, "batch_size")), sweep_not_monotone(rows)
        roof = {b: roofline_seconds(config, gpu_spec(device_name), b, seq_len, 0) for b in (first, last)}
        found.append({"profile": folder.name, "gpu": device_name, "first": first, "last": last,
                      "first_ms": 1e3 * means[first], "last_ms": 1e3 * means[last],
                      "ratio": means[last] / means[first], "roof_ratio": roof[last] / roof[first],
                      "over_roof": means[first] / roof[first], "remeasure": bool(flagged or faster),
                      "flagged": flagged, "faster": faster, "faster_ms": 1e3 * means[faster[0]] if faster else None})
    return found


def forward_reliability(rows: list[dict]) -> tuple[dict, dict]:
    """The forward rows to re-measure (``{batch size: reason}``) and their numbers (``fpUnreliable...``)."""
    flagged = unreliable_rows(rows, "batch_size")
    text = "; ".join(f"B = {b}: {reason}" for b, reason in flagged.items())
    return flagged, {"fpUnreliable": len(flagged), "fpUnreliableText": text or "none"}


def current_rows(profile: str, rows: list[dict]) -> list[dict]:
    """The rows of ``profile`` measured with the trials and warm-ups its parameter file asks for now (older ones are to
    re-measure and quoted nowhere); all rows without a parameter file."""
    import yaml

    from helpers import paths

    path = paths.PARAMS_DIR / f"{profile}.yaml"  # read here: importing helpers.run_all would import upwards
    if not path.exists():
        return rows
    p = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return [r for r in rows if r.get("trials", p.get("fp_trials")) == p.get("fp_trials", r.get("trials"))
            and r.get("warmup", p.get("fp_warmup")) == p.get("fp_warmup", r.get("warmup"))]


def _batches(sizes) -> str:
    return ", ".join(map(str, sizes)) or "--"


def gpu_forward_numbers(found: list[dict], profile: str | None = None) -> dict:
    """The report's numbers of :func:`gpu_forward_rows` (``fpGpuMeasured`` 0 without), of ``profile``'s GPU where it is
    one, else of the first; a sweep to re-measure is quoted as no ratio, only as ``fpGpuRemeasure...``."""
    if not found:
        return {"fpGpuMeasured": 0}
    f = next((f for f in found if f["profile"] == profile), found[0])
    bad = [o for o in found if o["remeasure"]]
    remeasure = {"fpGpuRemeasure": int(bool(bad))}
    if bad:
        outdated = [o["gpu"] for o in bad if o.get("outdated")]
        b = next((o for o in bad if not o.get("outdated")), bad[0])  # the details come from a sweep that has them
        remeasure.update(fpGpuOutdatedCount=len(outdated), fpGpuOutdatedName=", ".join(outdated) or "--",
                         fpGpuRemeasureDetailName=b["gpu"])
        remeasure.update(fpGpuRemeasureName=", ".join(o["gpu"] for o in bad), fpGpuRemeasureFirst=b["first"],
                         fpGpuRemeasureFlagged=_batches(b["flagged"]), fpGpuRemeasureFaster=_batches(b["faster"]),
                         fpGpuRemeasureFlaggedCount=len(b["flagged"]), fpGpuRemeasureFasterCount=len(b["faster"]),
                         fpGpuRemeasureFasterMs=b["faster_ms"] or 0.0, fpGpuRemeasureFirstMs=b["first_ms"])
    good = [o for o in found if not o["remeasure"]]
    if f["remeasure"]:
        f = good[0] if good else None
    if f is None:
        return {**remeasure, "fpGpuMeasured": 0}
    others = [o for o in good if o is not f]
    numbers = {}
    if others:  # a second GPU: one sentence beside the first's
        o = others[0]
        numbers = {"fpOtherGpuName": o["gpu"], "fpOtherFirstMs": o["first_ms"], "fpOtherLastMs": o["last_ms"],
                   "fpOtherRatio": o["ratio"], "fpOtherOverRoof": o["over_roof"],
                   "fpOtherHostBound": int(o["over_roof"] > HOST_BOUND)}
    return {**remeasure, **numbers, "fpGpuMeasured": 1, "fpGpuName": f["gpu"], "fpGpuFirstMs": f["first_ms"],
            "fpGpuLastMs": f["last_ms"], "fpGpuRatio": f["ratio"], "fpGpuRoofRatio": f["roof_ratio"],
            "fpGpuOverRoof": f["over_roof"], "fpGpuHostBound": int(f["over_roof"] > HOST_BOUND)}


def mark_remeasure(table, rows: list[dict], faster: list[int]):
    """The forward table of a sweep to re-measure: the rows faster than the first batch marked in ``status``, and no
    ratio column."""
    if not faster and "status" not in table:
        return table
    status = list(table["status"]) if "status" in table else [r["status"] for r in rows]
    status = ["faster than the first B: to re-measure" if r["batch_size"] in faster else s
              for r, s in zip(rows, status)]
    return table.drop(columns=[c for c in table if c.startswith("time / time(")]).assign(status=status)


GPU_PARTS = (notebook_part("06", (RESULT,), measure),)  # the rows the GPU window measures (experiments.packages)


def target_steps(rows: dict) -> list[dict]:
    """The 1-token verify forward, T_V(0), by its median as notebook 06 quotes it (run-info page)."""
    return [step_record("06", "1-token forward (T_V(0))", row.get("time_s_median", row["time_s_mean"]), "transformers",
                        1, row["prefix_len"], row)
            for row in rows.get(RESULT, [])
            if row.get("kind") == "verify" and row.get("model") == TARGET and row.get("new_tokens") == 1]
