"""Generation time with vs without a KV cache against output length (handout §2.1), for transformers models
and the minimal decoder alike.

- :func:`text_prompt_ids`: a prompt of exactly N tokens cut from text every Python ships
  (``pydoc_data.topics``), tokenized with the model's own tokenizer (no prompt file in the repo).
- :class:`ForwardTokenCounter`: records how many tokens each forward pass processes, the proof that
  "without cache" recomputes the whole prefix and "with cache" feeds one token per step.
- :func:`paired_sweep`: times generation for 1, 2, 4, ... new tokens in several modes, interleaved, with a cap
  on the slow mode.
- :func:`fit_growth` / :func:`extrapolate`: least-squares polynomial in the output length (quadratic for
  no-cache, where step i reprocesses prompt + i tokens; linear for the cache), used to fill in capped points.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch

from .timing import Timing, measure


@lru_cache(maxsize=1)
def prompt_text() -> str:
    """Python's own help topics (what ``help('for')`` prints), concatenated in a fixed order: ~700 kB."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[name] for name in sorted(topics))


def text_prompt_ids(tokenizer, num_tokens: int, vocab_size: int | None = None) -> torch.Tensor:
    """Shape (1, num_tokens): the first ``num_tokens`` tokens of :func:`prompt_text` under ``tokenizer``.

    ``vocab_size`` folds ids into a smaller vocabulary (``id % vocab_size``) for random-weight analogs that
    have no tokenizer of their own: their timing depends on the token count, not on which tokens.
    """
    if num_tokens < 1:
        raise ValueError(f"num_tokens must be >= 1, got {num_tokens}")
    text = prompt_text()
    ids: list[int] = []
    chars = min(len(text), 8 * num_tokens + 64)  # ~4 characters per token: encode only what is needed
    while True:
        ids = tokenizer(text[:chars], add_special_tokens=False)["input_ids"]
        if len(ids) >= num_tokens or chars >= len(text):
            break
        chars = min(len(text), 2 * chars)
    if len(ids) < num_tokens:
        raise ValueError(
            f"the help-topics text has only {len(ids)} tokens under this tokenizer, fewer than {num_tokens}"
        )
    row = torch.tensor(ids[:num_tokens], dtype=torch.long)
    if vocab_size is not None:
        row = row % vocab_size
    return row[None, :]


class ForwardTokenCounter:
    """``with ForwardTokenCounter(model) as counter: generate...`` then ``counter.tokens`` lists, per forward
    pass, how many token positions it processed (input length of the ``input_ids`` argument)."""

    def __init__(self, model):
        self.model = model
        self.tokens: list[int] = []

    def _hook(self, module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        self.tokens.append(int(ids.shape[1]))

    def __enter__(self) -> "ForwardTokenCounter":
        self._handle = self.model.register_forward_pre_hook(self._hook, with_kwargs=True)
        return self

    def __exit__(self, *exc) -> None:
        self._handle.remove()


def hf_generate(model, input_ids: torch.Tensor, new_tokens: int, use_cache: bool) -> torch.Tensor:
    """Exactly ``new_tokens`` greedy tokens from a transformers model, with or without its KV cache."""
    with torch.inference_mode():
        out = model.generate(
            input_ids,
            attention_mask=torch.ones_like(input_ids),
            min_new_tokens=new_tokens,
            max_new_tokens=new_tokens,
            do_sample=False,
            use_cache=use_cache,
            pad_token_id=model.config.pad_token_id if model.config.pad_token_id is not None else 0,
        )
    return out[:, input_ids.shape[1]:]


def output_lengths(max_new_tokens: int) -> list[int]:
    """1, 2, 4, ... up to ``max_new_tokens`` (a power of two)."""
    if max_new_tokens < 1 or max_new_tokens & (max_new_tokens - 1):
        raise ValueError(f"max_new_tokens must be a power of two >= 1, got {max_new_tokens}")
    return [1 << k for k in range(max_new_tokens.bit_length())]


def paired_sweep(generate_fns: dict, lengths, *, repeats: int, device, caps: dict | None = None, progress=None):
    """Time every mode's ``generate_fns[mode](n)`` for each n in ``lengths``; returns one row per (mode, n).

    The modes' repeats are interleaved (cached, uncached, cached, ...), so that a change in machine load hits
    all modes alike instead of biasing whichever ran later. ``caps[mode]`` stops a slow mode at that n. Each
    mode first runs once untimed (2 tokens), so that first-call allocations never land in a measurement.
    Rows: mode, new_tokens, time_s_mean/std/median/samples.
    """
    caps = caps or {}
    for generate in generate_fns.values():
        generate(2)  # warm-up: first-call allocations, thread pools, (on GPU) kernels and handles
    rows = []
    for n in lengths:
        active = [mode for mode in generate_fns if caps.get(mode) is None or n <= caps[mode]]
        if not active:
            break
        samples = {mode: [] for mode in active}
        for _ in range(repeats):
            for mode in active:
                samples[mode] += measure(lambda: generate_fns[mode](n), warmup=0, repeats=1, device=device).samples
        rows += [{"mode": mode, "new_tokens": n, **Timing(samples[mode]).as_dict()} for mode in active]
        if progress is not None:
            progress.update(len(active))
    return rows


def fit_growth(lengths, seconds, degree: int) -> np.ndarray:
    """Coefficients c0..c_degree >= 0 of t(n) = sum c_k n^k, least squares on RELATIVE error (times span decades).

    Non-negative because each term is a cost (fixed, per step, growth of the step with the prefix); an
    unconstrained fit to noisy points can bend down and extrapolate to nonsense.
    """
    from scipy.optimize import nnls

    n = np.asarray(lengths, dtype=float)
    t = np.asarray(seconds, dtype=float)
    if len(n) < degree + 1:
        raise ValueError(f"a degree-{degree} fit needs at least {degree + 1} points, got {len(n)}")
    design = np.vander(n, degree + 1, increasing=True) / t[:, None]
    coefficients, _ = nnls(design, np.ones_like(t))
    return coefficients


def extrapolate(coefficients: np.ndarray, lengths) -> np.ndarray:
    n = np.asarray(lengths, dtype=float)
    return np.vander(n, len(coefficients), increasing=True) @ coefficients
