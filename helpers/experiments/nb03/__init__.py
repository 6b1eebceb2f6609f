"""Notebook 03 (handout §2.1): generation with and without the KV cache in the handout's four settings. Its
configurations from the ``kvb_*`` parameters (for the notebook and :mod:`helpers.gpu_measure`), the measurement of what
the result file lacks (the cold first call, the four paired sweeps, the matmul share), and the numbers its sentences
and the report choose their words from."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import torch
from tqdm.auto import tqdm

from helpers.experiments.packages import notebook_part
from helpers import models
from helpers.experiments.common import check_budget, seed_and_threads
from helpers.generation.loading import load_for_sweep
from helpers.generation.sweeps import expected_weights_label, generate_exact
from helpers.hardware import resolve_device
from helpers.kv_cache import sweep as kv_sweep
from helpers.kv_cache.analysis import weight_costs
from helpers.results import config_key, free_memory, gpu_result_folders, run_metadata

RESULT = "03_kv_cache_benchmarks"
EXPERIMENTS = ("cold_start", "sweep", "matmul_share")  # what measure() can do, in the notebook's order
MATMUL_SETTINGS = ("baseline", "older model", "smaller model")  # the settings whose matmul share is profiled
MATMUL_NEW_TOKENS = 16
FIGURES = {"baseline": "03_kv_baseline", "long prompt": "03_kv_long_prompt", "smaller model": "03_kv_small_model",
           "older model": "03_kv_old_model"}
NUMBER_KEYS = {"baseline": "Base", "long prompt": "Long", "smaller model": "Small", "older model": "Old"}


def settings(params: dict) -> dict[str, tuple[str, bool, int]]:
    """The handout's four settings: name -> (model, long prompt?, no-cache cap)."""
    p = params
    return {"baseline": (p["kvb_baseline_model"], False, p["kvb_no_cache_cap"]),
            "long prompt": (p["kvb_baseline_model"], True, p["kvb_no_cache_cap_long"]),
            "smaller model": (p["kvb_small_model"], False, p["kvb_no_cache_cap"]),
            "older model": (p["kvb_old_model"], False, p["kvb_no_cache_cap"])}


def setup(params: dict) -> torch.device:
    """Seed and CPU threads as the notebook's derived-values cell sets them; the device the models run on."""
    device = resolve_device(params["device"])
    seed_and_threads(0, device.type, params["kvb_threads"])
    return device


def cold_config(params: dict) -> dict:
    p = params
    return {"kind": "cold_start", "model": p["kvb_baseline_model"], "prompt": p["kvb_short_prompt"],
            "dtype": p["kvb_dtype"], "repeats": p["kvb_cold_repeats"]}


def sweep_config(params: dict, setting: str, prompt_tokens: int) -> dict:
    p = params
    model_id, long, cap = settings(p)[setting]
    config = {"kind": "sweep", "setting": setting, "model": model_id, "prompt_tokens": prompt_tokens,
              "max_new_tokens": p["kvb_max_new_tokens"], "no_cache_cap": cap, "repeats": p["kvb_repeats"],
              "max_repeats": p["kvb_max_repeats"], "max_spread": p["kvb_max_spread"], "dtype": p["kvb_dtype"]}
    if long and p.get("kvb_long_prompt_path"):  # the course's prompt file: rows of another prompt than the stand-in's
        config["prompt_source"] = Path(p["kvb_long_prompt_path"]).name
    return config


def long_prompt_text(params: dict) -> str | None:
    """The text of ``kvb_long_prompt_path`` (the course's long_prompt.txt), or None for the workbook's stand-in; an
    error naming the parameter where it is not a readable, non-empty file."""
    path = params.get("kvb_long_prompt_path") or ""
    if not path:
        return None
    file = Path(path).expanduser()
    if not file.is_file():
        raise FileNotFoundError(f"kvb_long_prompt_path: no file {str(file)!r} (give the course's long_prompt.txt, or "
                                "leave the parameter empty for the workbook's stand-in long prompt)")
    text = file.read_text(encoding="utf-8")
    if not text.strip():
        raise ValueError(f"kvb_long_prompt_path: {str(file)!r} is empty")
    return text


def matmul_config(params: dict, model_id: str) -> dict:
    return {"kind": "matmul_share", "model": model_id, "dtype": params["kvb_dtype"],
            "new_tokens": MATMUL_NEW_TOKENS}


def stored(store, config: dict) -> dict:
    """The row ``store`` holds for ``config`` (the last one written)."""
    return store.done()[config_key(config)]


class SweepModels:
    """Per model id, on first need: the loaded model, its short and long prompt ids and the rows' metadata. A model with
    random weights has no tokenizer of its own, so a resumed run loads no model whose rows all exist."""

    def __init__(self, params: dict, device: torch.device, store=None):
        self.params, self.device, self.store = params, device, store
        self.dtype = getattr(torch, params["kvb_dtype"])
        self._loaded, self._prompts = {}, {}

    def loaded(self, model_id: str):
        if model_id not in self._loaded:
            check_budget(self.store, f"loading {model_id}")
            self._loaded[model_id] = load_for_sweep(model_id, self.params["kvb_weights"], self.device, self.dtype)
        return self._loaded[model_id]

    def prompts(self, model_id: str) -> tuple[dict, str]:
        """``({False: short prompt ids, True: long prompt ids}, tokenizer note)``."""
        if model_id not in self._prompts:
            p = self.params
            own = (None if expected_weights_label(model_id, p["kvb_weights"]) == "random"
                   else self.loaded(model_id).tokenizer)
            tokenizer, fold, note = kv_sweep.sweep_tokenizer(own, models.model_config(model_id).vocab_size)
            long_text = long_prompt_text(p)  # the course's file where the parameter names one, read and tokenized
            ids = {False: kv_sweep.prompt_ids(tokenizer, text=p["kvb_short_prompt"], vocab_size=fold),
                   True: (kv_sweep.prompt_ids(tokenizer, text=long_text, vocab_size=fold) if long_text is not None
                          else kv_sweep.prompt_ids(tokenizer, num_tokens=p["kvb_long_prompt_tokens"], vocab_size=fold))}
            self._prompts[model_id] = ({k: v.to(self.device) for k, v in ids.items()}, note)
        return self._prompts[model_id]

    def meta(self, model_id: str, tokenizer: bool = True) -> dict:
        meta = run_metadata(model_id=model_id, weights=self.loaded(model_id).label, dtype=self.params["kvb_dtype"],
                            device=self.device, seed=0)
        return {**meta, "tokenizer": self.prompts(model_id)[1]} if tokenizer else meta

    def release(self, model_id: str) -> None:
        self._loaded.pop(model_id, None)
        free_memory()


def _row(store, models: SweepModels, model_id: str, config: dict, metrics, *, long: bool = False,
         tokenizer: bool = True) -> dict:
    """The stored row of ``config``, else ``metrics(model, prompt ids)`` measured (the model loaded only then)."""
    if store.has(config):
        return stored(store, config)
    model, ids = models.loaded(model_id).model, models.prompts(model_id)[0][long]
    return store.run(config, lambda: metrics(model, ids), meta=models.meta(model_id, tokenizer))


def _measure_sweep(params, store, sweep_models: SweepModels, setting: str, bar) -> dict:
    p = params
    model_id, long, cap = settings(p)[setting]
    config = sweep_config(p, setting, sweep_models.prompts(model_id)[0][long].shape[1])
    return _row(store, sweep_models, model_id, config, lambda model, ids: {"rows": kv_sweep.paired_sweep(
        {"with cache": lambda n: generate_exact(model, ids, n, use_cache=True),
         "without cache": lambda n: generate_exact(model, ids, n, use_cache=False)},
        kv_sweep.output_lengths(p["kvb_max_new_tokens"]), repeats=p["kvb_repeats"], max_repeats=p["kvb_max_repeats"],
        max_spread=p["kvb_max_spread"], device=sweep_models.device, caps={"without cache": cap}, progress=bar)},
        long=long)


def _sweep_bar(params: dict, progress: bool):
    """One bar over every timed run of the four sweeps (as many as the minimum repeats of every point)."""
    if not progress:
        return None
    lengths = kv_sweep.output_lengths(params["kvb_max_new_tokens"])
    points = sum(len(lengths) + len([n for n in lengths if n <= cap]) for _, _, cap in settings(params).values())
    return tqdm(total=points * params["kvb_repeats"], desc="generation sweeps (timed runs)")


def measure(params: dict, store, progress: bool = True, *, experiments=EXPERIMENTS,
            sweep_models: SweepModels | None = None) -> dict:
    """Every configuration of ``experiments`` the result file lacks, model by model: ``{"cold_start": row, "sweep":
    {setting: row}, "matmul_share": {setting: row}}``. Without ``sweep_models`` (the GPU window) each model is released
    once its rows are done; a notebook passes its own and keeps them."""
    results = store(RESULT)
    keep = sweep_models is not None
    sweep_models = sweep_models or SweepModels(params, setup(params), results)
    found = {"sweep": {}, "matmul_share": {}}
    bar = _sweep_bar(params, progress) if "sweep" in experiments else None
    matmul_models = {settings(params)[s][0]: s for s in MATMUL_SETTINGS}
    for model_id in dict.fromkeys(m for m, _, _ in settings(params).values()):
        if "cold_start" in experiments and model_id == params["kvb_baseline_model"]:
            found["cold_start"] = _row(results, sweep_models, model_id, cold_config(params), lambda model, ids: (
                kv_sweep.cold_start(lambda c: generate_exact(model, ids, 1, use_cache=c),
                                    repeats=params["kvb_cold_repeats"], device=sweep_models.device)), tokenizer=False)
        for setting, (setting_model, _, _) in settings(params).items():
            if "sweep" in experiments and setting_model == model_id:
                found["sweep"][setting] = _measure_sweep(params, results, sweep_models, setting, bar)
        if "matmul_share" in experiments and model_id in matmul_models:
            found["matmul_share"][matmul_models[model_id]] = _row(
                results, sweep_models, model_id, matmul_config(params, model_id), lambda model, ids: {
                    "share": kv_sweep.matmul_time_share(
                        lambda: generate_exact(model, ids, MATMUL_NEW_TOKENS, use_cache=True))}, tokenizer=False)
        if not keep:
            sweep_models.release(model_id)
    if bar is not None:
        bar.close()
    return found


# ------------------------------------------------------------------------------------------ what the notebook prints


def handout_numbers(params: dict, prompt_tokens: int, long_measured: int, handout_n: int, handout_prompt: int) -> dict:
    """Flags that choose the words of §2.1.2's extrapolation: the no-cache run reached the handout's ``handout_n``, the
    long prompt had its length and came from the course's file (else the workbook's stand-in)."""
    path = params.get("kvb_long_prompt_path") or ""
    return {"kvbHandoutMeasured": int(long_measured >= handout_n),
            "kvbLongIsHandout": int(prompt_tokens >= handout_prompt), "kvbHandoutPrompt": handout_prompt,
            "kvbLongPromptFile": int(bool(path)), "kvbLongPromptName": Path(path).name if path else "--",
            "kvbGpuMeasured": int(bool(gpu_result_folders(RESULT)))}  # a GPU window has measured §2.1


def setting_numbers(explain, common, settings_: dict, n_max: int) -> dict:
    """The report's numbers of each setting (``kvbBase...``, ``kvbLong...``, ...) from the explanation table and
    ``common`` (the speedups at the largest n every setting measured)."""
    numbers = {}
    for setting, k in NUMBER_KEYS.items():
        row = explain.loc[setting]
        numbers.update({f"kvb{k}Prompt": int(row["prompt tokens"]), f"kvb{k}MsPerToken": row["cached ms/token"],
                        f"kvb{k}PrefillMs": row["prefill ms (n=1, cached)"],
                        f"kvb{k}StepMs": row["uncached ms/step (linear term)"],
                        f"kvb{k}QuadShare": row["uncached: quadratic share at n_max"],
                        f"kvb{k}SpeedupMax": row[f"speedup at n={n_max}"], f"kvb{k}SpeedupOne": row["speedup at n=1"],
                        f"kvb{k}SpeedupMaxFit": int(row[f"n={n_max} no-cache time"] == "fit"),  # else measured
                        f"kvb{k}SpeedupMeasured": row["speedup there (measured)"],
                        f"kvb{k}SpeedupCommon": float(common[setting]),
                        f"kvb{k}Model": settings_[setting][0],
                        f"kvb{k}Crossover": row["first measured n with speedup >= 1.5"],
                        f"kvb{k}Measured": int(row["no-cache measured up to"]),
                        f"kvb{k}AllMeasured": int(int(row["no-cache measured up to"]) >= n_max)})
    return numbers | {"kvbMonotonicPct": 100 * kv_sweep.MONOTONIC_TOLERANCE}  # the check's tolerance, as the text says


def cost_table(sweep_models: SweepModels, shares: dict, explain, settings_: dict):
    """Per setting of :data:`MATMUL_SETTINGS`: its model's weights per token, the measured matmul share of a cached
    generation and the cached ms per token."""
    rows = []
    for setting in MATMUL_SETTINGS:
        model_id = settings_[setting][0]
        rows.append({"setting": setting, "model": model_id, **weight_costs(sweep_models.loaded(model_id).model),
                     "matmul share of time": shares[setting]["share"],
                     "cached ms/token": explain.loc[setting, "cached ms/token"]})
    return pd.DataFrame(rows).set_index("setting")


def cost_numbers(costs, diff: dict) -> dict:
    """The baseline against the older model: time and weight ratios per token, the time ratio's bootstrap interval
    (``diff``), matmul shares, vocabularies and MLP widths."""
    b, o = costs.loc["baseline"], costs.loc["older model"]
    return dict(kvbTimeRatioLow=diff["low"], kvbTimeRatioHigh=diff["high"],
                kvbTimeRatioLevel=round(100 * diff["level"]), kvbSameModelRatio=diff["same_model_ratio"],
                kvbBaseOldResolved=int(diff["resolved"]),
                kvbBaseFaster=int(b["cached ms/token"] < o["cached ms/token"]),
                kvbTimeRatioBaseOld=b["cached ms/token"] / o["cached ms/token"],
                kvbWeightRatioBaseOld=b["weights per token (M)"] / o["weights per token (M)"],
                kvbBaseWeightsM=b["weights per token (M)"], kvbOldWeightsM=o["weights per token (M)"],
                kvbBaseMatmulShare=round(100 * b["matmul share of time"]),
                kvbOldMatmulShare=round(100 * o["matmul share of time"]),
                kvbBaseVocab=int(b["vocab"]), kvbOldVocab=int(o["vocab"]), kvbBaseMlp=int(b["MLP width"]),
                kvbOldMlp=int(o["MLP width"]))


def smaller_against_baseline(explain, table) -> dict:
    """§2.1.3: the smaller model against the baseline at the largest n both measured without the cache (speedups, cached
    costs, the quadratic share) and which of its points stayed noisy."""
    small, base = explain.loc["smaller model"], explain.loc["baseline"]
    noisy = [int(n) for (setting, n), flag in table["noisy"].items() if setting == "smaller model" and flag]
    gains_less = bool(small["speedup there (measured)"] < base["speedup there (measured)"])
    quad_lower = bool(small["uncached: quadratic share at n_max"] < base["uncached: quadratic share at n_max"])
    return {"kvbSmallGainsLess": int(gains_less), "kvbSmallQuadLower": int(quad_lower),
            "kvbSmallSameN": int(small["no-cache measured up to"] == base["no-cache measured up to"]),
            "kvbSmallCheaper": base["cached ms/token"] / small["cached ms/token"],
            "kvbSmallNoisyCount": len(noisy), "kvbSmallNoisyList": ", ".join(map(str, noisy)) or "none",
            # a noisy point can move the 1.5x threshold only if it is that length or the measured one before it
            "kvbSmallNoisyNear": int(any(n in _threshold_neighbours(table, "smaller model", small) for n in noisy))}


def _threshold_neighbours(table, setting: str, row) -> set[int]:
    """The first measured length with a speedup of at least 1.5 and the measured length before it."""
    first = row["first measured n with speedup >= 1.5"]
    lengths = sorted(int(n) for (s, n) in table.index if s == setting)
    if not str(first).isdigit() or int(first) not in lengths:  # "not reached" (explain_table's word): nothing to move
        return set()
    i = lengths.index(int(first))
    return {lengths[i]} | ({lengths[i - 1]} if i else set())


def times_report(table) -> tuple[pd.DataFrame, bool]:
    """The report's table of every setting and length (ms), and whether a no-cache time is extrapolated (its 'fit'
    column is kept only then)."""
    report = table.reset_index()
    for mode in ("without cache", "with cache"):
        report.insert(report.columns.get_loc(f"{mode} (s)"), f"{mode} (ms)", 1e3 * report.pop(f"{mode} (s)"))
    extrapolated = bool(report["no-cache extrapolated"].astype(bool).any())
    report["no-cache extrapolated"] = report["no-cache extrapolated"].map({True: "fit", False: ""})
    if not extrapolated:
        report = report.drop(columns=["no-cache extrapolated"])
    return report.rename(columns={"new_tokens": "new tokens"}), extrapolated


GPU_PARTS = (notebook_part("03", (RESULT,), measure),)  # the rows the GPU window measures (experiments.packages)
