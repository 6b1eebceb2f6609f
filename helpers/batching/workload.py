"""Seeded workloads: prompts cut from real text, lengths drawn from named distributions.

- Prompt lengths follow a log-normal mix clipped to ``[min_prompt, max_prompt]`` (chat prompts: many short, a few
  long), the same for every workload so that only the output lengths differ between them.
- ``high_variance`` output lengths are log-normal (sigma 1): most answers are short, a few are long, as in chat
  traces. ``uniform`` gives every request the same output length, equal to the high-variance mean.
"""
from __future__ import annotations

import importlib
import inspect

import numpy as np

from helpers.batching.request import Request

WORKLOADS = ("high_variance", "uniform")
HIGH_VARIANCE_SIGMA = 1.0  # sigma of the log-normal output lengths of the high-variance workload


def prompt_token_stream(tokenizer, modules: tuple[str, ...] = ("textwrap", "json.decoder", "argparse")) -> list[int]:
    """Token ids of a few standard-library sources: real text that every Python installation carries."""
    text = "\n".join(inspect.getsource(importlib.import_module(name)) for name in modules)
    return tokenizer(text)["input_ids"]


def output_lengths(kind: str, n: int, *, mean: int, max_output: int, rng: np.random.Generator) -> list[int]:
    if kind == "uniform":
        return [mean] * n
    if kind == "high_variance":
        sigma = HIGH_VARIANCE_SIGMA
        median = mean / np.exp(sigma**2 / 2)  # so that the (unclipped) mean is ``mean``
        return np.clip(np.round(rng.lognormal(np.log(median), sigma, n)), 1, max_output).astype(int).tolist()
    raise ValueError(f"unknown workload {kind!r}; choose one of {', '.join(WORKLOADS)}")


def make_workload(kind: str, n: int, tokens: list[int], *, seed: int = 0, mean_output: int = 32,
                  max_output: int = 256, median_prompt: int = 32, min_prompt: int = 4,
                  max_prompt: int = 192) -> list[Request]:
    """``n`` requests with prompts cut at random places of ``tokens`` and output lengths of the given kind."""
    if n < 1:
        raise ValueError(f"a workload needs at least one request, got n={n}")
    if len(tokens) <= max_prompt:
        raise ValueError(f"the token stream has {len(tokens)} tokens; it needs more than max_prompt={max_prompt}")
    rng = np.random.default_rng(seed)
    prompt_lens = np.clip(np.round(rng.lognormal(np.log(median_prompt), 0.8, n)), min_prompt, max_prompt).astype(int)
    starts = rng.integers(0, len(tokens) - max_prompt, n)
    outputs = output_lengths(kind, n, mean=mean_output, max_output=max_output, rng=rng)
    return [Request(i, list(tokens[s:s + p]), o) for i, (s, p, o) in enumerate(zip(starts, prompt_lens, outputs))]
