"""Generation and forward-pass benchmarks of handout §1.3 and §4.2, with resume, real OOMs and a time cap.

Inputs are random token ids of exactly the requested length (``torch.randint``), generation is forced to
exactly the requested number of new tokens (``min_new_tokens = max_new_tokens``, greedy), every figure comes
from ``repeats`` fresh batches after ``warmup`` untimed runs (mean, median, min and max are all recorded),
timed with the host clock ``time.time()`` after ``torch.cuda.synchronize()`` (the handout's instruction);
forward passes can use CUDA events instead. Each finished configuration is one row in a
:class:`~helpers.results.ResultStore`, so an interrupted sweep resumes where it stopped.

A configuration that does not fit is a result only when it really did not fit: a ``torch.OutOfMemoryError``
(CUDA), or on the CPU a ``MemoryError`` / allocator ``RuntimeError`` saying memory could not be allocated,
becomes a row with status "oom" and the sweep goes on. A *predicted* size
(:func:`helpers.memory.predicted_generation_bytes`) is only ever a labelled prediction, never an "oom" row. A sweep can also
stop early at a time cap (:func:`run_capped_generation_sweep`): the configurations after the first one whose
median batch takes longer than the cap are returned as "not run" rows, which are never stored.
"""
from __future__ import annotations

import time
from typing import Iterable

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from helpers.models.runtime import cached_decoder
from helpers.results import ResultStore
from helpers.stats import line_fit, r_squared
from helpers.timing import measure


def expected_weights_label(name: str, weights: str | None) -> str:
    """The weights label :func:`helpers.generation.loading.load_for_sweep` gives ``name`` (without loading it), so
    that a configuration can be looked up in the result store before any model is loaded: 'random' for the CPU
    analogs, 'cpu-pair' for the CPU pair (or ``weights`` 'cpu-pair'), else ``weights`` ('pretrained' if None)."""
    from helpers import models

    if name.startswith(models.ANALOG_PREFIX):
        return "random"
    if name.startswith(models.PAIR_PREFIX) or weights == "cpu-pair":
        return "cpu-pair"
    return weights or "pretrained"


def random_batch(vocab_size: int, batch_size: int, seq_len: int, *, device="cpu",
                 generator: torch.Generator | None = None) -> torch.Tensor:
    """``(batch_size, seq_len)`` random token ids, the handout's ``torch.randint(0, vocab_size, ...)``."""
    ids = torch.randint(0, vocab_size, (batch_size, seq_len), generator=generator)
    return ids.to(device)


@torch.no_grad()
def generate_exact(model, input_ids: torch.Tensor, new_tokens: int, *, use_cache: bool = True) -> torch.Tensor:
    """Greedy generation of exactly ``new_tokens`` tokens per sequence (EOS cannot stop it early) with transformers'
    ``generate``, with or without its KV cache; returns prompt + new tokens (``out[:, input_ids.shape[1]:]`` are the
    new ones). The one such wrapper for generation and KV-cache sweeps."""
    out = model.generate(
        input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=new_tokens,
        min_new_tokens=new_tokens, do_sample=False, use_cache=use_cache, pad_token_id=0, temperature=None,
        top_p=None, top_k=None,
    )
    expected = (input_ids.shape[0], input_ids.shape[1] + new_tokens)
    if tuple(out.shape) != expected:
        raise RuntimeError(f"generate returned shape {tuple(out.shape)}, expected {expected}")
    return out


STATUS_NOT_RUN = "not run"  # a configuration past a profile's time cap: never measured, never stored


def measure_generation(model, *, batch_size: int, input_len: int, new_tokens: int, warmup: int = 2,
                       repeats: int = 10, device="cpu", seed: int = 0) -> dict:
    """Wall-clock time of ``generate`` over ``repeats`` fresh random batches (mean, median, min, max, samples).

    ``throughput_tok_s`` counts generated tokens (batch x new tokens) per second of the mean time, the
    handout's token throughput; ``throughput_tok_s_median`` uses the median time instead; ``total_tok_s``
    also counts the prompt tokens processed.
    """
    generator = torch.Generator().manual_seed(seed)
    vocab = model.config.vocab_size

    def one_batch():
        generate_exact(model, random_batch(vocab, batch_size, input_len, device=device, generator=generator),
                       new_tokens)

    timing = measure(one_batch, warmup=warmup, repeats=repeats, device=device, clock=time.time)
    return {
        **timing.as_dict("time_s"),
        "time_s_min": min(timing.samples),
        "time_s_max": max(timing.samples),
        "throughput_tok_s": batch_size * new_tokens / timing.mean,
        "throughput_tok_s_median": batch_size * new_tokens / timing.median,
        "total_tok_s": batch_size * (input_len + new_tokens) / timing.mean,
        "ms_per_step": 1000 * timing.mean / new_tokens,
    }


def measure_forward(model, *, batch_size: int, seq_len: int, warmup: int = 2, repeats: int = 5, device="cpu",
                    cuda_events: bool = False, seed: int = 0) -> dict:
    """Mean and spread of one full forward pass over ``batch_size x seq_len`` random tokens (no cache)."""
    generator = torch.Generator().manual_seed(seed)
    ids = random_batch(model.config.vocab_size, batch_size, seq_len, device=device, generator=generator)

    @torch.no_grad()
    def forward():
        model(input_ids=ids, use_cache=False)

    timing = measure(forward, warmup=warmup, repeats=repeats, device=device, cuda_events=cuda_events)
    return {
        **timing.as_dict("time_s"),
        "time_ms_mean": 1000 * timing.mean,
        "time_ms_std": 1000 * timing.std,
        "ms_per_sequence": 1000 * timing.mean / batch_size,
    }


def _progress(items: list, progress: bool, desc: str):
    if not progress:
        return items
    return tqdm(items, desc=desc)


def _measure_config(store: ResultStore, model, config: dict, *, meta: dict, warmup: int, repeats: int, device,
                    rerun: bool) -> dict:
    def fn():
        return measure_generation(
            model, batch_size=config["batch_size"], input_len=config["input_len"], new_tokens=config["new_tokens"],
            warmup=warmup, repeats=repeats, device=device)
    return store.run(config, fn, meta=meta, rerun=rerun)


def run_generation_sweep(store: ResultStore, model, configs: Iterable[dict], *, meta: dict, warmup: int,
                         repeats: int, device="cpu", progress: bool = True, desc: str = "configs",
                         rerun: bool = False) -> list[dict]:
    """Measure each config (keys ``batch_size``, ``input_len``, ``new_tokens`` plus labels) unless stored.

    A real out-of-memory error (:func:`is_real_oom`) becomes an "oom" row; any other error stops the sweep.
    ``rerun=True`` measures again what is already stored. Returns the rows in ``configs`` order.
    """
    return [_measure_config(store, model, config, meta=meta, warmup=warmup, repeats=repeats, device=device,
                            rerun=rerun)
            for config in _progress(list(configs), progress, desc)]


def over_time_cap(row: dict, max_seconds_per_batch: float | None) -> bool:
    """True when a measured row's median batch took longer than the cap (``None`` or <= 0: no cap)."""
    if not max_seconds_per_batch or max_seconds_per_batch <= 0 or row.get("status") != "ok":
        return False
    return row["time_s_median"] > max_seconds_per_batch


def not_run_row(config: dict, reason: str) -> dict:
    """The row a table shows for a configuration this profile did not measure (never stored)."""
    return {**config, "status": STATUS_NOT_RUN, "reason": reason}


def run_capped_generation_sweep(store: ResultStore, model, configs: Iterable[dict], *, meta: dict, warmup: int,
                                repeats: int, max_seconds_per_batch: float | None, device="cpu",
                                progress: bool = True, desc: str = "configs", rerun: bool = False) -> list[dict]:
    """:func:`run_generation_sweep` over configs in increasing cost that stops at a time cap.

    The first configuration whose median batch takes longer than ``max_seconds_per_batch`` is measured and
    kept; every later one is returned as a "not run" row (:func:`not_run_row`, status ``STATUS_NOT_RUN``)
    without being measured or stored, so the cutoff adapts to the machine. ``None`` or 0 means no cap.
    """
    configs = list(configs)
    rows = []
    bar = _progress(configs, progress, desc)
    for i, config in enumerate(bar):
        row = _measure_config(store, model, config, meta=meta, warmup=warmup, repeats=repeats, device=device,
                              rerun=rerun)
        rows.append(row)
        if over_time_cap(row, max_seconds_per_batch):
            reason = f"over the time cap: median batch {row['time_s_median']:.3g} s > {max_seconds_per_batch:g} s"
            rows += [not_run_row(later, reason) for later in configs[i + 1:]]
            if progress and hasattr(bar, "close"):
                bar.close()
            break
    return rows


def run_forward_sweep(store: ResultStore, model, configs: Iterable[dict], *, meta: dict, warmup: int, repeats: int,
                      device="cpu", cuda_events: bool = False,
                      progress: bool = True, desc: str = "batch sizes", rerun: bool = False) -> list[dict]:
    """Like :func:`run_generation_sweep` for single forward passes (keys ``batch_size``, ``seq_len``)."""
    rows = []
    for config in _progress(list(configs), progress, desc):
        def fn(config=config):
            return measure_forward(
                model, batch_size=config["batch_size"], seq_len=config["seq_len"], warmup=warmup,
                repeats=repeats, device=device, cuda_events=cuda_events)
        rows.append(store.run(config, fn, meta=meta, rerun=rerun))
    return rows


STATUS_LABELS = {"ok": "measured", "oom": "OOM", STATUS_NOT_RUN: "not run (time cap)"}


def status_table(rows: list[dict], key: str, columns: dict[str, str], status_column: str | None = None):
    """A DataFrame with one row per config: ``key`` first, then ``columns`` (source -> header).

    A row that was not measured is never left out: its metrics read "OOM" or "not run (time cap)"
    (:data:`STATUS_LABELS`), or, with ``status_column``, are empty (``None``) and a column of that name states
    each row's status.
    """
    out = []
    for row in rows:
        status = row.get("status")
        entry = {key: row[key]}
        for source, header in columns.items():
            if status == "ok":
                entry[header] = row.get(source)
            else:
                entry[header] = None if status_column else STATUS_LABELS.get(status, status)
        if status_column:
            entry[status_column] = STATUS_LABELS.get(status, status)
        out.append(entry)
    return pd.DataFrame(out)


def measure_verify(model, *, prefix_len: int, new_tokens: int, warmup: int = 2, repeats: int = 5, device="cpu",
                   cuda_events: bool = False, seed: int = 0) -> dict:
    """Time one cached forward over ``new_tokens`` tokens after a ``prefix_len`` prefix, at batch 1.

    This is the shape of a speculative-decoding verify step (gamma drafts + 1 in one target forward); with
    ``new_tokens=1`` it is an ordinary decode step. The cache is cropped back after every call, so each
    sample sees the same prefix.
    """
    generator = torch.Generator().manual_seed(seed)
    vocab = model.config.vocab_size
    prefix = random_batch(vocab, 1, prefix_len, device=device, generator=generator)
    block = random_batch(vocab, 1, new_tokens, device=device, generator=generator)
    decoder = cached_decoder(model, "transformers", prefix_len + new_tokens)  # the model's own forward
    with torch.no_grad():
        decoder.extend(prefix)

    @torch.no_grad()
    def verify():
        decoder.extend(block, last_only=False)
        decoder.rollback(new_tokens)

    timing = measure(verify, warmup=warmup, repeats=repeats, device=device, cuda_events=cuda_events)
    if decoder.length != prefix_len:
        raise RuntimeError(f"cache holds {decoder.length} tokens after rolling back, expected {prefix_len}")
    return {**timing.as_dict("time_s"), "time_ms_mean": 1000 * timing.mean, "time_ms_std": 1000 * timing.std}


# The handout's §1.3 protocol, to state next to what a profile actually ran (see :func:`protocol_table`).
HANDOUT_PROTOCOL = {
    "model (§1.3.1-1.3.2)": "Qwen/Qwen3-8B, pretrained",
    "models (§1.3.3)": "Qwen/Qwen3-1.7B, Qwen/Qwen3-8B, allenai/OLMo-7B-0724-hf",
    "dtype": "bfloat16",
    "device": "1 GPU, 80 GB preferred (40 GB+ acceptable)",
    "batch size": "8",
    "input lengths (§1.3.1)": "powers of 2 from 1 to 32,768",
    "new tokens (§1.3.1, §1.3.3)": "64",
    "output lengths (§1.3.2)": "powers of 2 from 1 to 256 at input 64",
    "warm-up batches": "2-5",
    "timed batches per row": "10, averaged",
    "out of memory": "note the configurations that led to OOM errors",
}


def protocol_table(ours: dict):
    """A DataFrame comparing :data:`HANDOUT_PROTOCOL` with ``ours`` (same keys, values as text)."""
    missing = set(HANDOUT_PROTOCOL) - set(ours)
    extra = set(ours) - set(HANDOUT_PROTOCOL)
    if missing or extra:
        raise ValueError(f"protocol keys differ from HANDOUT_PROTOCOL: missing {sorted(missing)}, extra {sorted(extra)}")
    return pd.DataFrame([{"setting": key, "handout": HANDOUT_PROTOCOL[key], "this run": str(ours[key]),
                          "same": str(ours[key]) == HANDOUT_PROTOCOL[key]} for key in HANDOUT_PROTOCOL])


def linear_fit(x, y, relative: bool = False) -> dict:
    """Least-squares ``y = intercept + slope * x`` with R^2 and the largest residual relative to ``y``.

    ``relative=True`` minimises relative rather than absolute errors (weights ``1 / y``), so that points
    spread over orders of magnitude (lengths 1 to 256) all count, not just the largest.
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) < 2:
        raise ValueError("a linear fit needs at least two points")
    if relative and (y <= 0).any():
        raise ValueError("a relative fit needs positive y")
    line = line_fit(x, y, weights=1 / y if relative else None)
    fitted = line(x)
    r2 = r_squared(y, fitted)
    return {"intercept": line.intercept, "slope": line.slope, "r2": 1.0 if r2 != r2 else r2,  # flat y: a perfect fit
            "max_rel_residual": float((abs(y - fitted) / abs(y)).max())}


def ordering_violation(feature, times, comparable=None) -> tuple[int, int] | None:
    """The first pair ``(i, j)`` of models that ``feature`` does not order as ``times`` does, or ``None``.

    A larger feature must go with a longer time; a tie in the feature between two models whose times differ
    does not explain their difference, so it is a violation too. ``comparable(i, j)``, if given, limits the
    check to the pairs it accepts (e.g. those whose times are separated beyond the noise, :func:`separated`).
    """
    feature, times = list(feature), list(times)
    if len(feature) != len(times):
        raise ValueError("feature and times need one value per model")
    for i in range(len(times)):
        for j in range(i + 1, len(times)):
            if comparable is not None and not comparable(i, j):
                continue
            if times[i] != times[j] and (feature[i] - feature[j]) * (times[i] - times[j]) <= 0:
                return i, j
    return None


def separated(a: dict, b: dict, low: str = "time_s_min", high: str = "time_s_max") -> bool:
    """Whether two measured rows' ranges (``low``-``high``: by default the fastest and slowest timed batch) do
    not overlap, i.e. their difference is beyond the batch-to-batch noise of either."""
    return a[low] > b[high] or b[low] > a[high]


def non_monotone_noise(rows: list[dict], key: str) -> dict:
    """The measured rows of a sweep that are slower than a LONGER configuration of the same sweep beyond the
    measured spread: ``{length: longer length}`` for each row whose fastest batch (``time_s_min``) took longer
    than the slowest batch (``time_s_max``) of some row with a larger ``key`` (the first such longer row is named).

    More tokens cannot take less time, so such a point timed something besides the work (a machine still warming
    up, another process): noise, to flag in tables and figures and to leave out of growth figures and fits. A
    longer row timed faster only within the two rows' min-max ranges is not flagged (that is ordinary jitter).
    This is the sweep counterpart of notebook 03's check (:func:`helpers.kv_cache.sweep.monotonicity_violations`,
    which asserts on neighbouring medians with a fixed tolerance): here the tolerance is each pair's own measured
    range, and every longer row counts, so a slow first point is caught even when its neighbour is slow too.
    """
    ok = sorted((r for r in rows if r.get("status") == "ok"), key=lambda r: r[key])
    flagged = {}
    for i, row in enumerate(ok):
        faster = next((later for later in ok[i + 1:] if row["time_s_min"] > later["time_s_max"]), None)
        if faster is not None:
            flagged[row[key]] = faster[key]
    return flagged
