"""helpers.specdec.selfspec_study and the selfspec benchmark's rows: byte arithmetic, one interleaved comparison from
one prefill (tiny random model), and the figures."""
from __future__ import annotations

import matplotlib
import pandas as pd
import pytest
import torch

from helpers.models.qwen3 import from_hf
from helpers.specdec.selfspec_figures import context_use_figure, terms_figure, window_figure
from helpers.specdec.selfspec_study import byte_terms, compare_at, prefill_long
from tiny_models import PEAK, tiny_qwen3

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def model():
    return from_hf(tiny_qwen3(5, head_scale=PEAK, vocab_size=64, max_position_embeddings=512).double())


def test_byte_terms_follow_the_formula(model):
    terms = byte_terms(model, context=100, batch=4)
    config = model.config
    per_token = 2 * config.num_layers * config.num_kv_heads * config.head_dim * 8  # float64
    assert terms["kv_bytes_per_token"] == per_token
    assert terms["kv_bytes"] == per_token * 400
    assert terms["weight_bytes"] == sum(p.numel() for p in model.parameters()) * 8
    assert terms["kv_weight_ratio"] == pytest.approx(terms["kv_bytes"] / terms["weight_bytes"])


def test_compare_at_rows(model):
    generator = torch.Generator().manual_seed(1)
    prompts = torch.randint(0, 64, (3, 60), generator=generator).tolist()
    state = prefill_long(model, prompts, room=12 + 4)
    rows = compare_at(state, max_new_tokens=12, gamma=3, window=8, sinks=2, repeats=2, windows=(4, 16))
    assert [r["window"] for r in rows] == [4, 16]
    for row in rows:
        assert row["identical"] and row["repeats"] == 2
        assert row["speedup"] > 0 and row["eq5_speedup"] > 0 and row["ar_step_s"] > 0
        assert 0 <= row["alpha_low"] <= row["alpha"] <= row["alpha_high"] <= 1
        assert row["draft_ratio"] > 0 and row["verify_ratio"] > 0 and 1 <= row["tau"] <= 4
    assert state.cache.lengths == [59] * 3  # the shared prefill was copied, never consumed


def test_figures_draw_from_rows():
    grid = pd.DataFrame([{"context": c, "batch": b, "kv_weight_ratio": c * b / 1000, "draft_ratio": 0.5 / b,
                          "verify_ratio": 1.1, "speedup": 1 + b / 10, "eq5_speedup": 1 + b / 9}
                         for c in (512, 4096) for b in (1, 4)])
    short = pd.DataFrame({"batch": [1, 4], "speedup": [1.5, 0.8]})
    assert len(terms_figure(grid, short).axes) == 3
    windows = pd.DataFrame({"window": [16, 64], "alpha": [0.5, 0.8], "alpha_low": [0.4, 0.7], "alpha_high": [0.6, 0.9],
                            "draft_ratio": [0.2, 0.3], "speedup": [1.1, 1.3], "eq5_speedup": [1.2, 1.4]})
    assert len(window_figure(windows).axes) == 2
    assert len(context_use_figure({"a": {"0-256": 3.0, "256-512": 2.9}}).axes) == 1
