"""Generation and forward-pass benchmarks of handout §1.3 and §4.2, with resume and OOM as results.

Inputs are random token ids of exactly the requested length (``torch.randint``), generation is forced to
exactly the requested number of new tokens (``min_new_tokens = max_new_tokens``, greedy), every figure is
a mean over ``repeats`` fresh batches after ``warmup`` untimed runs, timed with the host clock
``time.time()`` after ``torch.cuda.synchronize()`` (the handout's instruction); forward passes can use
CUDA events instead. Each finished configuration is one row in a :class:`~helpers.results.ResultStore`, so
an interrupted sweep resumes where it stopped, and a configuration that does not fit — a real
``torch.OutOfMemoryError`` on a GPU, or a predicted size over ``budget_bytes`` (how the CPU profile makes
the OOM path testable) — is recorded with status "oom" instead of stopping the sweep.
"""
from __future__ import annotations

import time
from typing import Iterable

import torch

from . import memory
from .results import ResultStore, check_memory_budget
from .timing import measure


def random_batch(vocab_size: int, batch_size: int, seq_len: int, *, device="cpu",
                 generator: torch.Generator | None = None) -> torch.Tensor:
    """``(batch_size, seq_len)`` random token ids, the handout's ``torch.randint(0, vocab_size, ...)``."""
    ids = torch.randint(0, vocab_size, (batch_size, seq_len), generator=generator)
    return ids.to(device)


@torch.no_grad()
def generate_exact(model, input_ids: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """Greedy generation of exactly ``new_tokens`` tokens per sequence (EOS cannot stop it early)."""
    out = model.generate(
        input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=new_tokens,
        min_new_tokens=new_tokens, do_sample=False, pad_token_id=0, temperature=None, top_p=None, top_k=None,
    )
    expected = (input_ids.shape[0], input_ids.shape[1] + new_tokens)
    if tuple(out.shape) != expected:
        raise RuntimeError(f"generate returned shape {tuple(out.shape)}, expected {expected}")
    return out


def predicted_generation_bytes(config, batch_size: int, input_len: int, new_tokens: int,
                               bytes_per_elem: int) -> int:
    """An estimate of peak memory for one ``generate`` call: weights + full KV cache + prefill working set.

    The prefill working set counts the residual stream and attention projections (about 4 x hidden) and the
    MLP's gate, up and product (3 x intermediate) for every prompt token, plus float32 logits for the last
    position. It is what the CPU profile's memory budget compares against; on a GPU, real OOMs are caught.
    """
    weights = memory.param_count(config) * bytes_per_elem
    kv = memory.kv_cache_bytes(config, input_len + new_tokens, batch_size, bytes_per_elem)
    prefill = batch_size * input_len * (4 * config.hidden_size + 3 * config.intermediate_size) * bytes_per_elem
    logits = batch_size * config.vocab_size * 4
    return weights + kv + prefill + logits


def predicted_forward_bytes(config, batch_size: int, seq_len: int, bytes_per_elem: int) -> int:
    """Peak-memory estimate for one forward pass without a cache (weights, working set, all logits)."""
    weights = memory.param_count(config) * bytes_per_elem
    work = batch_size * seq_len * (4 * config.hidden_size + 3 * config.intermediate_size) * bytes_per_elem
    logits = batch_size * seq_len * config.vocab_size * 4
    return weights + work + logits


def measure_generation(model, *, batch_size: int, input_len: int, new_tokens: int, warmup: int = 2,
                       repeats: int = 10, device="cpu", seed: int = 0) -> dict:
    """Mean wall-clock time of ``generate`` over ``repeats`` fresh random batches, and throughput.

    ``throughput_tok_s`` counts generated tokens (batch x new tokens) per second, the handout's token
    throughput; ``total_tok_s`` also counts the prompt tokens processed.
    """
    generator = torch.Generator().manual_seed(seed)
    vocab = model.config.vocab_size

    def one_batch():
        generate_exact(model, random_batch(vocab, batch_size, input_len, device=device, generator=generator),
                       new_tokens)

    timing = measure(one_batch, warmup=warmup, repeats=repeats, device=device, clock=time.time)
    return {
        **timing.as_dict("time_s"),
        "throughput_tok_s": batch_size * new_tokens / timing.mean,
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
    from tqdm.auto import tqdm

    return tqdm(items, desc=desc)


def run_generation_sweep(store: ResultStore, model, configs: Iterable[dict], *, meta: dict, warmup: int,
                         repeats: int, device="cpu", budget_bytes: int | None = None, progress: bool = True,
                         desc: str = "configs", rerun: bool = False) -> list[dict]:
    """Measure each config (keys ``batch_size``, ``input_len``, ``new_tokens`` plus labels) unless stored.

    A config predicted over ``budget_bytes`` raises ``MemoryBudgetExceeded`` and becomes an "oom" row,
    like a real CUDA OOM. ``rerun=True`` measures again what is already stored. Returns the rows in
    ``configs`` order (stored or new).
    """
    configs = list(configs)
    dtype_bytes = next(model.parameters()).element_size()
    rows = []
    for config in _progress(configs, progress, desc):
        def fn(config=config):
            need = predicted_generation_bytes(model.config, config["batch_size"], config["input_len"],
                                              config["new_tokens"], dtype_bytes)
            check_memory_budget(need, budget_bytes, f"batch {config['batch_size']}, input {config['input_len']}, "
                                                    f"{config['new_tokens']} new tokens")
            return measure_generation(model, batch_size=config["batch_size"], input_len=config["input_len"],
                                      new_tokens=config["new_tokens"], warmup=warmup, repeats=repeats, device=device)
        rows.append(store.run(config, fn, meta=meta, rerun=rerun))
    return rows


def run_forward_sweep(store: ResultStore, model, configs: Iterable[dict], *, meta: dict, warmup: int, repeats: int,
                      device="cpu", cuda_events: bool = False, budget_bytes: int | None = None,
                      progress: bool = True, desc: str = "batch sizes", rerun: bool = False) -> list[dict]:
    """Like :func:`run_generation_sweep` for single forward passes (keys ``batch_size``, ``seq_len``)."""
    configs = list(configs)
    dtype_bytes = next(model.parameters()).element_size()
    rows = []
    for config in _progress(configs, progress, desc):
        def fn(config=config):
            need = predicted_forward_bytes(model.config, config["batch_size"], config["seq_len"], dtype_bytes)
            check_memory_budget(need, budget_bytes, f"batch {config['batch_size']} x {config['seq_len']} tokens")
            return measure_forward(model, batch_size=config["batch_size"], seq_len=config["seq_len"], warmup=warmup,
                                   repeats=repeats, device=device, cuda_events=cuda_events)
        rows.append(store.run(config, fn, meta=meta, rerun=rerun))
    return rows


def status_table(rows: list[dict], key: str, columns: dict[str, str]):
    """A DataFrame with one row per config: ``key`` first, then ``columns`` (source -> header); OOM shown."""
    import pandas as pd

    out = []
    for row in rows:
        entry = {key: row[key]}
        for source, header in columns.items():
            entry[header] = row.get(source) if row.get("status") == "ok" else "OOM"
        out.append(entry)
    return pd.DataFrame(out)


def measure_verify(model, *, prefix_len: int, new_tokens: int, warmup: int = 2, repeats: int = 5, device="cpu",
                   cuda_events: bool = False, seed: int = 0) -> dict:
    """Time one cached forward over ``new_tokens`` tokens after a ``prefix_len`` prefix, at batch 1.

    This is the shape of a speculative-decoding verify step (gamma drafts + 1 in one target forward); with
    ``new_tokens=1`` it is an ordinary decode step. The cache is cropped back after every call, so each
    sample sees the same prefix.
    """
    from transformers import DynamicCache

    generator = torch.Generator().manual_seed(seed)
    vocab = model.config.vocab_size
    prefix = random_batch(vocab, 1, prefix_len, device=device, generator=generator)
    block = random_batch(vocab, 1, new_tokens, device=device, generator=generator)
    cache = DynamicCache()
    with torch.no_grad():
        model(input_ids=prefix, past_key_values=cache, use_cache=True)

    @torch.no_grad()
    def verify():
        model(input_ids=block, past_key_values=cache, use_cache=True)
        cache.crop(-new_tokens)  # transformers 5.x: a negative count removes that many tokens

    timing = measure(verify, warmup=warmup, repeats=repeats, device=device, cuda_events=cuda_events)
    if cache.get_seq_length() != prefix_len:
        raise RuntimeError(f"cache holds {cache.get_seq_length()} tokens after cropping, expected {prefix_len}")
    return {**timing.as_dict("time_s"), "time_ms_mean": 1000 * timing.mean, "time_ms_std": 1000 * timing.std}
