"""Notebook 06 (handout §4.2): one forward pass against the batch size, and the verify step (one forward over k
tokens after a cached prefix). The configurations built from the notebook's ``fp_*`` parameters, written once for
the notebook and :mod:`helpers.gpu_measure`; the measurement of what the result file lacks (CUDA events on a GPU);
and the roofline summary the notebook prints."""
from __future__ import annotations

import numpy as np
import torch

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
    return [{"measure": "forward", "model": p["fp_model"], "weights": label, "dtype": p["fp_dtype"],
             "device": p["device"], "batch_size": b, "seq_len": p["fp_seq_len"], "warmup": p["fp_warmup"],
             "trials": p["fp_trials"]} for b in p["fp_batch_sizes"]]


def verify_configs(params: dict, label: str | None = None) -> list[dict]:
    """One configuration per verify size k of ``fp_verify_tokens``."""
    p = params
    label = label or gb.expected_weights_label(p["fp_verify_model"], p["fp_weights"])
    return [{"measure": "verify", "model": p["fp_verify_model"], "weights": label, "dtype": p["fp_dtype"],
             "device": p["device"], "prefix_len": p["fp_verify_prefix"], "new_tokens": k, "warmup": p["fp_warmup"],
             "trials": p["fp_trials"]} for k in p["fp_verify_tokens"]]


def _load(params: dict, store, name: str, loaded, configs: list[dict]):
    """``loaded`` if given; else the model when a configuration is missing (or ``fp_rerun``), after the budget."""
    if loaded is not None or (all(store.has(c) for c in configs) and not params.get("fp_rerun", False)):
        return loaded
    check_budget(store, f"loading {name}")
    return load_for_sweep(name, params["fp_weights"], resolve_device(params["device"]),
                          getattr(torch, params["fp_dtype"]))


def _stored(store, configs: list[dict]) -> list[dict]:
    """The stored rows of ``configs`` (every one is stored)."""
    done = store.done()
    return [done[config_key(c)] for c in configs]


def measure_forward(params: dict, store, progress: bool = True, loaded=None) -> list[dict]:
    """The forward sweep over batch sizes: the rows in ``fp_batch_sizes`` order, measuring those the result file
    lacks (``loaded``: the model if the caller has it; else it is loaded only when a row is missing)."""
    results = store(RESULT)
    configs = forward_configs(params, loaded.label if loaded is not None else None)
    model = _load(params, results, params["fp_model"], loaded, configs)
    if model is None:
        return _stored(results, configs)
    device = resolve_device(params["device"])
    rows = gb.run_forward_sweep(results, model.model, configs, meta=model.meta, warmup=params["fp_warmup"],
                                repeats=params["fp_trials"], device=device, cuda_events=device.type == "cuda",
                                progress=progress, rerun=params.get("fp_rerun", False))
    if loaded is None:
        del model
        free_memory()
    return rows


def measure_verify(params: dict, store, progress: bool = True, loaded=None) -> list[dict]:
    """The verify step over ``fp_verify_tokens``: medians of at least 20 timed forwards each (a verify step takes
    milliseconds, so a descheduling would skew a mean); as :func:`measure_forward` otherwise."""
    from tqdm.auto import tqdm

    p, results = params, store(RESULT)
    configs = verify_configs(p, loaded.label if loaded is not None else None)
    model = _load(p, results, p["fp_verify_model"], loaded, configs)
    if model is None:
        return _stored(results, configs)
    device = resolve_device(p["device"])
    rows = [results.run(c, lambda c=c: gb.measure_verify(
        model.model, prefix_len=c["prefix_len"], new_tokens=c["new_tokens"], warmup=p["fp_warmup"] + 2,
        repeats=max(4 * p["fp_trials"], 20), device=device, cuda_events=device.type == "cuda"), meta=model.meta,
        rerun=p.get("fp_rerun", False)) for c in (tqdm(configs, desc="verify sizes") if progress else configs)]
    if loaded is None:
        del model
        free_memory()
    return rows


def measure(params: dict, store, progress: bool = True) -> dict:
    """Every configuration of the notebook the result file lacks: ``{"forward": rows, "verify": rows}``."""
    setup(params)
    return {"forward": measure_forward(params, store, progress),
            "verify": measure_verify(params, store, progress)}


def verify_order(rows: list[dict]) -> dict:
    """Does the verify forward's median time grow with every added token k? Each dip (a larger k timed faster than
    the k before it) is set against the two rows' min-max ranges over their samples: within them it is jitter, beyond
    them noise (:func:`helpers.generation.sweeps.non_monotone_noise`'s rule). ``text`` and the report's numbers."""
    ok = sorted((dict(r, time_s_min=min(r["time_s_samples"]), time_s_max=max(r["time_s_samples"]))
                 for r in rows if r.get("status") == "ok" and r.get("time_s_samples")), key=lambda r: r["new_tokens"])
    if len(ok) < 2:  # rows without their samples (or a single k): nothing to set a dip against
        return {"text": "verify order not checked: fewer than two rows with their samples",
                "numbers": {"vfDipsChecked": 0, "vfDips": 0, "vfDipsNoisy": 0, "vfDipsText": "none"}}
    dips = [(a, b) for a, b in zip(ok, ok[1:]) if b["time_s_median"] < a["time_s_median"]]
    noisy = gb.non_monotone_noise(ok, "new_tokens")
    described = [f"k = {a['new_tokens']} -> {b['new_tokens']} ({1e3 * a['time_s_median']:.2f} -> "
                 f"{1e3 * b['time_s_median']:.2f} ms, {'beyond' if a['new_tokens'] in noisy else 'within'} both "
                 "rows' min-max ranges)" for a, b in dips]
    text = ("verify time grows with every added token" if not dips
            else "verify time dips at " + "; ".join(described) + (": noise" if noisy else ": jitter, not noise"))
    return {"text": text, "numbers": {"vfDipsChecked": 1, "vfDips": len(dips), "vfDipsNoisy": len(noisy),
                                      "vfDipsText": ", ".join(f"{a['new_tokens']} to {b['new_tokens']}" for a, b in dips)
                                      or "none"}}


REFERENCE_GPU = "H100 SXM"  # the roofline a CPU profile's section states (notebook 08's first GPU)


def roofline_gpu(device_name: str, on_gpu: bool) -> str:
    """The GPU whose roofline §4.2 states: the rows' own GPU (``device_name``) where the datasheet table has it,
    else :data:`REFERENCE_GPU` (said so when the rows came from a GPU the table lacks)."""
    if on_gpu:
        try:
            return gpu_spec(device_name)["gpu"]
        except KeyError:
            print(f"no datasheet row for {device_name!r}: the roofline below is the {REFERENCE_GPU}'s")
    return REFERENCE_GPU


def roofline_lines(config, gpu_name: str, batch_sizes: list[int], seq_len: int) -> tuple[list[str], dict]:
    """Where a forward over ``seq_len`` tokens turns compute-bound on ``gpu_name`` (:mod:`helpers.gpu_specs`:
    FLOPs and bytes of one forward without a cache, against the ridge point peak / bandwidth): the lines to print
    and the report's numbers (``fpRoof...``)."""
    ridge = gpu_spec(gpu_name)["ridge_flop_per_byte"]
    ai = {b: arithmetic_intensity(config, b, seq_len, 0) for b in batch_sizes}
    compute_bound = [b for b, v in ai.items() if v > ridge]
    first_b, last_b = min(batch_sizes), max(batch_sizes)
    roof = {b: roofline_seconds(config, gpu_spec(gpu_name), b, seq_len, 0) for b in batch_sizes}
    roof_share = roof[last_b] / roof[first_b] / (last_b / first_b)
    lines = [f"{ROOFLINE_MODEL}, S = {seq_len}, bf16 on {gpu_name} (ridge point {ridge:.0f} FLOP/byte): "
             + ", ".join(f"B={b} {v:.0f}" for b, v in ai.items()) + " FLOP/byte",
             f"  memory-bound at B = {[b for b in ai if b not in compute_bound]}, compute-bound at B = {compute_bound}",
             f"  B = {first_b} at {ai[first_b] / ridge:.2f} of the ridge point",
             f"  roofline time B = {first_b} -> {last_b}: x{roof[last_b] / roof[first_b]:.1f} ({roof_share:.0%} of "
             "linear): " + ("close to linear, small batches save little" if roof_share >= 0.8
                            else "small batches are nearly free")]
    numbers = dict(fpRoofModel=ROOFLINE_MODEL, fpRoofGpu=gpu_name, fpRidge=ridge, fpAiFirst=ai[first_b],
                   fpRoofBFirst=first_b,
                   fpRoofFirstBound="compute-bound" if first_b in compute_bound else "memory-bound",
                   fpRoofComputeFrom=min(compute_bound) if compute_bound else 0,
                   fpAiRatio=ai[first_b] / ridge, fpRoofTimeRatio=roof[last_b] / roof[first_b],
                   fpRoofLinearShare=roof_share, fpRoofNearLinear=int(roof_share >= 0.8))
    return lines, numbers


def batch_one_dearest(ok) -> dict:
    """Is the smallest batch the dearest per sequence beyond noise? ``ok``: the forward rows by batch size (with
    ``ms_per_sequence``, ``time_ms_std``, ``trials``). Its excess over the dearest larger batch, and whether that exceeds
    twice the standard error of the difference of the two per-sequence means (the report's numbers; printed)."""
    first = ok.iloc[0]
    dearest = ok.iloc[1:].loc[ok.iloc[1:]["ms_per_sequence"].idxmax()]
    excess = first["ms_per_sequence"] / dearest["ms_per_sequence"] - 1
    standard_error = lambda r: r["time_ms_std"] / r["batch_size"] / np.sqrt(r["trials"])  # noqa: E731
    margin = 2 * np.hypot(standard_error(first), standard_error(dearest))
    beyond = bool(first["ms_per_sequence"] - dearest["ms_per_sequence"] > margin)
    margin_pct = 100 * margin / dearest["ms_per_sequence"]
    print(f"B = {first['batch_size']} costs {excess:+.1%} per sequence against the dearest larger batch (B = "
          f"{dearest['batch_size']}), twice the standard error of the difference {margin_pct:.1f}%: "
          + ("the dearest per sequence beyond noise" if beyond else "NOT the dearest per sequence beyond noise"))
    return {"fpBOneDearest": int(beyond), "fpBOneExcessPct": 100 * excess, "fpBOneMarginPct": margin_pct}


HOST_BOUND = 3  # a forward this many times its roofline time is bound by something else: the host's launches


def gpu_forward_rows(config, seq_len: int) -> list[dict]:
    """What the GPU windows measured of the roofline's model (``results/gpu-*/06_forward_pass_scaling``, forward
    rows at ``seq_len``; this run's output root, else the committed rows): per GPU, the median forward time per
    batch size against the roofline of that GPU (:func:`helpers.gpu_specs.roofline_seconds`). Empty without rows."""
    found = []
    for folder in gpu_result_folders(RESULT):
        rows = [r for r in latest_ok_rows(folder / f"{RESULT}.jsonl") if r.get("device") == "cuda"
                and r.get("measure") == "forward" and r.get("seq_len") == seq_len and r.get("model") == ROOFLINE_MODEL]
        if not rows:
            continue
        device_name = rows[0]["device_name"]
        medians = {int(r["batch_size"]): r["time_s_median"] for r in rows}
        first, last = min(medians), max(medians)
        roof = {b: roofline_seconds(config, gpu_spec(device_name), b, seq_len, 0) for b in (first, last)}
        found.append({"profile": folder.name, "gpu": device_name, "first": first, "last": last,
                      "first_ms": 1e3 * medians[first], "last_ms": 1e3 * medians[last],
                      "ratio": medians[last] / medians[first], "roof_ratio": roof[last] / roof[first],
                      "over_roof": medians[first] / roof[first]})
    return found


def print_gpu_forward(found: list[dict], profile: str | None = None) -> dict:
    """:func:`gpu_forward_rows` against the roofline (printed); the report's numbers (``fpGpuMeasured`` 0 without),
    of ``profile``'s own GPU where it is one of them, else of the first."""
    if not found:
        print("no GPU window has measured this forward yet: the roofline above stays a model")
        return {"fpGpuMeasured": 0}
    for f in found:
        print(f"{f['gpu']} ({f['profile']}), measured medians: B = {f['first']} {f['first_ms']:.1f} ms -> B = "
              f"{f['last']} {f['last_ms']:.1f} ms, x{f['ratio']:.2f} (roofline x{f['roof_ratio']:.1f}); B = "
              f"{f['first']} runs {f['over_roof']:.0f}x its roofline time: "
              + ("host-bound, so the roofline's growth does not show" if f["over_roof"] > HOST_BOUND
                 else "near the roofline"))
    f = next((f for f in found if f["profile"] == profile), found[0])
    others = [o for o in found if o is not f]
    numbers = {}
    if others:  # a second GPU: one sentence beside the first's
        o = others[0]
        numbers = {"fpOtherGpuName": o["gpu"], "fpOtherFirstMs": o["first_ms"], "fpOtherLastMs": o["last_ms"],
                   "fpOtherRatio": o["ratio"], "fpOtherOverRoof": o["over_roof"],
                   "fpOtherHostBound": int(o["over_roof"] > HOST_BOUND)}
    return {**numbers, "fpGpuMeasured": 1, "fpGpuName": f["gpu"], "fpGpuFirstMs": f["first_ms"], "fpGpuLastMs": f["last_ms"],
            "fpGpuRatio": f["ratio"], "fpGpuRoofRatio": f["roof_ratio"], "fpGpuOverRoof": f["over_roof"],
            "fpGpuHostBound": int(f["over_roof"] > HOST_BOUND)}
