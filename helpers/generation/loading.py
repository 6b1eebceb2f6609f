"""One way to load a model for a sweep notebook (02, 03, 04, 06): the weights rule, the fallback for an untrained
CPU pair, and the metadata every result row records.

- CPU analogs (``cpu/...``) exist only with random weights; the CPU pair (``cpu-pair/...``) only with its trained
  weights; any other name takes the ``weights`` asked for ('pretrained' or 'random').
- The CPU pair's target before ``python -m helpers.training`` has run: the same architecture with random
  weights stands in (``weights_label`` 'random'), so that notebooks and benchmarks still run, labelled.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from helpers import models
from helpers.models.cpu_pair_shapes import make_config
from helpers.results import run_metadata

CPU_PAIR_TARGET = "cpu-pair/target"


@dataclass
class Loaded:
    """A model ready for a sweep: ``model``, its ``tokenizer`` (None for random weights), ``meta`` (the result
    rows' metadata: :func:`helpers.results.run_metadata` plus the model's shape) and ``label`` (its weights)."""

    model: torch.nn.Module
    tokenizer: object
    meta: dict
    label: str


def sweep_weights(name: str, weights: str | None) -> str | None:
    """The weights argument for :func:`helpers.models.load_model`: 'random' for analogs, None (the trained
    weights) for the CPU pair, None (the model's default) for ``weights`` 'cpu-pair', else ``weights``."""
    if name.startswith(models.ANALOG_PREFIX):
        return "random"
    if name.startswith(models.PAIR_PREFIX) or weights == "cpu-pair":
        return None
    return weights


def load_model_or_stand_in(name: str, weights: str | None, device, dtype):
    """``(model, tokenizer or None)``; the CPU pair's target falls back to random weights when it is not trained."""
    try:
        return models.load_model(name, weights=weights, device=device, dtype=dtype)
    except FileNotFoundError:
        if name != CPU_PAIR_TARGET:
            raise
    # Not trained yet: same architecture, random weights, so that the benchmark still runs (labelled).
    return models.random_model(make_config("target", models.load_cpu_tokenizer()), device=device, dtype=dtype), None


def load_for_sweep(name: str, weights: str | None, device, dtype: torch.dtype) -> Loaded:
    """Load ``name`` for a sweep (weights rule: :func:`sweep_weights`; fallback: :func:`load_model_or_stand_in`)."""
    model, tokenizer = load_model_or_stand_in(name, sweep_weights(name, weights), device, dtype)
    label = model.weights_label
    meta = run_metadata(model_id=name, weights=label, dtype=dtype, device=device, seed=0,
                        **{k: v for k, v in models.describe(model).items() if k != "weights"})
    return Loaded(model, tokenizer, meta, label)


def weights_note(label: str) -> str:
    """' (random weights)' after a model name whose weights are random, else ''."""
    return " (random weights)" if label == "random" else ""
