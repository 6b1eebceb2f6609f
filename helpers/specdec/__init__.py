"""Speculative decoding (handout §4).

- ``linear``: :func:`speculative_generate` (Chen et al. 2023, Algorithm 2) and the autoregressive baseline
  :func:`autoregressive_generate`, one prompt at a time;
- ``tree``: :func:`tree_generate`, static and dynamic draft trees verified in one target forward;
- ``lookup``: :func:`prompt_lookup_generate`, model-free drafting from n-grams of the context;
- ``batched``: greedy speculative decoding of a ragged batch with per-row acceptance, and its AR baseline;
- ``selfspec``: :func:`self_speculative_generate`, the model drafting for itself over a StreamingLLM view of its
  own cache (long-context self-speculation, MagicDec);
- ``analysis``: the Eq. 4/5 model (expected tokens per round, speedup, optimal gamma, alpha estimates,
  batch accounting, MagicDec roofline grid);
- ``costs``: measured T_T, T_D, T_V(gamma) and batched comparisons;
- ``sweeps``: notebook 07's measured sweeps, prompt selection, summaries and per-source confidence intervals;
- ``bench``: ``python -m helpers.bench specdec``.
"""
from helpers.specdec.batched import batched_autoregressive_generate, batched_speculative_generate
from helpers.specdec.linear import (
    GenerationResult,
    GenerationStats,
    accept_greedy,
    accept_sampling,
    autoregressive_generate,
    speculative_generate,
)
from helpers.specdec.lookup import prompt_lookup_generate
from helpers.specdec.selfspec import self_speculative_generate
from helpers.specdec.tree import tree_generate

__all__ = ["GenerationResult", "GenerationStats", "accept_greedy", "accept_sampling", "autoregressive_generate", "batched_autoregressive_generate",
           "batched_speculative_generate", "prompt_lookup_generate", "self_speculative_generate", "speculative_generate",
           "tree_generate"]
