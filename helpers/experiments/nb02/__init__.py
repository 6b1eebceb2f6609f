"""Notebook 02 (handout §1.3): generation time against the input length, the output length and the model. Its
configurations from the ``gen_*`` parameters (for the notebook and :mod:`helpers.gpu_measure`), the measurement of
what the result file lacks, and the numbers the notebook's model comparison reports."""
from __future__ import annotations

import torch

from helpers.experiments.packages import notebook_part
from helpers.experiments.common import check_budget
from helpers.generation import sweeps as gb
from helpers.generation.loading import load_for_sweep
from helpers.hardware import resolve_device
from helpers.results import free_memory

RESULT = "02_generation_benchmarks"
SWEEPS = {"input": "input lengths", "output": "output lengths"}  # sweep -> progress label


def setup(params: dict) -> tuple[torch.device, int]:
    """Seed and torch threads as the notebook's derived-values cell sets them: ``(device, threads in use)``."""
    torch.manual_seed(0)
    if params["gen_threads"] > 0:
        torch.set_num_threads(params["gen_threads"])
    return resolve_device(params["device"]), torch.get_num_threads()


def time_cap(params: dict) -> float | None:
    """Seconds per batch after which a sweep stops (None: every length is measured)."""
    return params["gen_max_seconds_per_batch"] if params["gen_max_seconds_per_batch"] > 0 else None


def base_config(params: dict, threads: int, label: str | None = None) -> dict:
    """What every row records besides lengths (``label``: the loaded sweep model's weights)."""
    p = params
    label = label or gb.expected_weights_label(p["gen_sweep_model"], p["gen_weights"])
    return {"kind": "generation", "model": p["gen_sweep_model"], "weights": label, "dtype": p["gen_dtype"],
            "device": p["device"], "threads": threads, "batch_size": p["gen_batch_size"], "warmup": p["gen_warmup"],
            "repeats": p["gen_repeats"]}


def sweep_configs(params: dict, base: dict, sweep: str) -> list[dict]:
    """§1.3.1 (``sweep`` 'input': 2^n input tokens) or §1.3.2 ('output': 2^n new tokens), ascending."""
    p = params
    if sweep == "input":
        return [{**base, "input_len": 2**n, "new_tokens": p["gen_input_new_tokens"]}
                for n in sorted(p["gen_input_exponents"])]
    return [{**base, "input_len": p["gen_output_input_len"], "new_tokens": 2**n}
            for n in sorted(p["gen_output_exponents"])]


def compare_config(params: dict, base: dict, name: str, label: str | None = None) -> dict:
    """§1.3.3: model ``name`` at the comparison's input length and new tokens."""
    p = params
    return {**base, "model": name, "weights": label or gb.expected_weights_label(name, p["gen_weights"]),
            "input_len": p["gen_compare_input_len"], "new_tokens": p["gen_compare_new_tokens"]}


def _load(params: dict, store, name: str):
    check_budget(store, f"loading {name}")
    return load_for_sweep(name, params["gen_weights"], resolve_device(params["device"]),
                          getattr(torch, params["gen_dtype"]))


def _run_kwargs(p: dict, loaded) -> dict:
    """What both sweeps hand :mod:`helpers.generation.sweeps`'s runners."""
    return dict(meta=loaded.meta, warmup=p["gen_warmup"], repeats=p["gen_repeats"], device=resolve_device(p["device"]),
                rerun=p.get("gen_rerun", False))


def measure_sweep(params: dict, store, sweep: str, threads: int, loaded, progress: bool = True) -> list[dict]:
    """One capped sweep of the loaded sweep model: its rows, 'not run' rows past the time cap included."""
    configs = sweep_configs(params, base_config(params, threads, loaded.label), sweep)
    return gb.run_capped_generation_sweep(store(RESULT), loaded.model, configs, max_seconds_per_batch=time_cap(params),
                                          desc=SWEEPS[sweep], progress=progress, **_run_kwargs(params, loaded))


def measure_compare(params: dict, store, name: str, threads: int, loaded) -> dict:
    """The comparison's row of model ``name`` (loaded: ``loaded``)."""
    config = compare_config(params, base_config(params, threads), name, loaded.label)
    return gb.run_generation_sweep(store(RESULT), loaded.model, [config], progress=False,
                                   **_run_kwargs(params, loaded))[0]


def measure(params: dict, store, progress: bool = True) -> None:
    """Every configuration the result file lacks, loading a model only when one of its rows is missing (the GPU
    window; the notebook calls :func:`measure_sweep` and :func:`measure_compare`). A capped sweep's 'not run'
    lengths are never stored, so the sweep model is loaded for them."""
    p = params
    _, threads = setup(p)
    results = store(RESULT)
    base = base_config(p, threads)
    if not all(results.has(c) for sweep in SWEEPS for c in sweep_configs(p, base, sweep)):
        loaded = _load(p, results, p["gen_sweep_model"])
        for sweep in SWEEPS:
            measure_sweep(p, store, sweep, threads, loaded, progress)
        del loaded
        free_memory()
    for name in p["gen_models"]:
        if not results.has(compare_config(p, base, name)):
            loaded = _load(p, results, name)
            measure_compare(p, store, name, threads, loaded)
            del loaded
            free_memory()


# ------------------------------------------------------------------------------------------ what the notebook prints


def first_timed(rows: list[dict], noise: list[int]) -> bool:
    """Whether the input lengths flagged as noise were the first the sweep timed (a machine still settling)."""
    timed = [r["input_len"] for r in sorted((r for r in rows if r["status"] == "ok"), key=lambda r: r["timestamp"])]
    return sorted(noise) == sorted(timed[:len(noise)])


def compare_numbers(params: dict, measured, verdicts: dict, overlaps: list[str]) -> dict:
    """The report's numbers of §1.3.3: the slowest against the fastest model, the ordering and its overlapping
    neighbours (:func:`report.overlaps`), the features that explain it (:func:`report.feature_orderings`; for vocab,
    bytes per step and KV heads the verdict and its pair) and the KV cache's share of the bytes a step reads."""
    fastest, slowest = measured.iloc[0], measured.iloc[-1]
    numbers = {}
    for key, feature in (("Vocab", "vocab"), ("Bytes", "bytes per step (MB)"), ("Kv", "KV heads")):
        v = verdicts["verdicts"][feature]
        numbers.update({f"gen{key}Explains": v["explains"], **{f"gen{key}{k}": v.get(name, "--") for k, name in (
            ("A", "a"), ("B", "b"), ("AValue", "a_value"), ("BValue", "b_value"), ("ATime", "a_time"),
            ("BTime", "b_time"))}})
    return numbers | dict(
        genParamsExplain=int(bool(verdicts["verdicts"]["parameters"]["explains"])),
        genKvShares=", ".join(f"{v:.0%} for {k}" for k, v in zip(measured["model"], measured["KV share of bytes"])),
        genCmpTimeRatio=slowest["time"] / fastest["time"],
        genCmpParamRatio=slowest["parameters"] / fastest["parameters"],
        genCmpLayerRatio=slowest["layers"] / fastest["layers"],
        genCmpFastest=fastest["model"], genCmpSlowest=slowest["model"], genCmpOrder=", ".join(measured["model"]),
        genCmpExplainedBy=", ".join(verdicts["explaining"]) or "none",
        genCmpExplainingCount=len(verdicts["explaining"]), genCmpSeparated=verdicts["n_separated"],
        genCmpPairs=verdicts["n_pairs"], genCmpOverlaps="; ".join(overlaps) or "--",
        genCmpOverlapCount=len(overlaps), genCmpInputLen=params["gen_compare_input_len"],
        genCmpNewTokens=params["gen_compare_new_tokens"])


def prefill_check(input_rows: list[dict], output_rows: list[dict]) -> dict:
    """The input sweep's split of a generation into decode steps (the time at the shortest input) and prefill (the
    rest), checked against the output sweep's one-token generation (a prefill alone) at an input length both ran.
    ``genPrefillOverstated``: even the split's smallest value within the rows' min-max times exceeds that
    generation's slowest batch (the excess: what decode steps cost more at the longer context). ``genPrefillChecked``
    0 where the sweeps share no such point."""
    ok_in = {r["input_len"]: r for r in input_rows if r.get("status") == "ok"}
    single = [r for r in output_rows if r.get("status") == "ok" and r["new_tokens"] == 1 and r["input_len"] in ok_in]
    if not single or len(ok_in) < 2:
        return {"genPrefillChecked": 0}
    one, at, shortest = single[0], ok_in[single[0]["input_len"]], ok_in[min(ok_in)]
    split = at["time_s_median"] - shortest["time_s_median"]
    split_low, split_high = at["time_s_min"] - shortest["time_s_max"], at["time_s_max"] - shortest["time_s_min"]
    direct = one["time_s_median"]
    return {"genPrefillChecked": 1, "genPrefillLen": one["input_len"], "genPrefillSplitS": split,
            "genPrefillSplitLowS": split_low, "genPrefillSplitHighS": split_high, "genPrefillDirectS": direct,
            "genPrefillDirectLowS": one["time_s_min"], "genPrefillDirectHighS": one["time_s_max"],
            "genPrefillOverstated": int(split_low > one["time_s_max"]), "genPrefillSteps": at["new_tokens"],
            "genPrefillPerStepMs": 1e3 * (split - direct) / at["new_tokens"],
            "genPrefillMedianAbove": int(split > direct)}


def checked_crossover(found_in: dict) -> dict:
    """The measured crossover of :func:`report.input_numbers`, checked: its brackets are neighbouring clean lengths,
    the prefill is below the decode time at the lower and at least it at the upper one."""
    cross = found_in["crossover"]
    if cross["found"]:
        lengths = found_in["clean_lengths"]
        if lengths.index(cross["high"]) != lengths.index(cross["low"]) + 1:
            raise ValueError(f"the crossover's brackets {cross['low']}, {cross['high']} are not neighbours")
        if not (cross["prefill_low"] < cross["decode_s"] <= cross["prefill_high"]
                and cross["low"] <= cross["crossover"] <= cross["high"]):
            raise ValueError(f"the bracket {cross['low']}-{cross['high']} does not hold the crossover: {cross}")
    return cross


GPU_PARTS = (notebook_part("02", (RESULT,), measure),)  # the rows the GPU window measures (experiments.packages)
