"""The two-process engine (gloo on CPU): outputs equal per-request greedy generation, and failures are loud.

Each engine run spawns two processes (a few seconds each to import torch); the whole file stays well under a
minute on two idle cores.
"""
import random

import pytest
from helpers.batching.engine import WorkerFailed, run_continuous, run_static_baseline, step_time_by_batch, summarize
from helpers.batching.model_ops import PretrainedDir, divergence_margin, generate_alone
from helpers.batching.request import Request
from helpers.batching.workers import EngineConfig
from tiny_models import tiny_qwen3

MAX_LEN = 128


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A 2-layer random Qwen3 saved to disk (the worker processes load it from there).

    Its LM head is scaled up so the top two logits are far apart: float noise between a padded batch and a
    single sequence (different reduction orders, ~1e-6) then cannot flip a greedy choice, and exact equality
    with per-request generation is a fair test of the cache bookkeeping, not of luck.
    """
    model = tiny_qwen3(0, vocab_size=256, max_position_embeddings=MAX_LEN, head_scale=50)
    path = tmp_path_factory.mktemp("tiny_qwen3")
    model.save_pretrained(path)
    return model, PretrainedDir(path)


def workload(seed=0):
    """Prompts of 1-40 tokens; outputs from 1 to 90 tokens, so requests finish at very different times."""
    rng = random.Random(seed)
    return [Request(i, [rng.randrange(1, 256) for _ in range(rng.randint(1, 40))],
                    rng.choice([1, 2, 5, 30, 90]) if i % 6 else None)
            for i in range(18)]


def alone(model, request, cfg):
    return generate_alone(model, request.input_tokens, request.max_new_tokens(cfg.max_seq_len), cfg.eos_token_id)


def test_continuous_outputs_equal_each_request_alone(tiny):
    model, source = tiny
    requests = workload()
    # an EOS the model really emits mid-way through one request's output, so both stop rules are exercised
    eos = generate_alone(model, requests[3].input_tokens, 30)[10]
    cfg = EngineConfig(kv_capacity_blocks=40, block_size=8, max_seq_len=MAX_LEN, max_decode_batch=6,
                       max_prefill_batch=3, bucket_width=8, eos_token_id=eos)
    result = run_continuous(source, requests, cfg)
    for request in result.requests:
        assert request.generated == alone(model, request, cfg), f"request {request.id} differs"
    assert {r.finish_reason for r in result.requests} == {"eos", "length"}
    # the batch really was ragged: requests joined and left while others kept decoding
    assert max(s["joined"] for s in result.timeline[1:]) > 0 and max(s["rows"] for s in result.timeline) > 1
    assert all(s["reserved_blocks"] <= cfg.kv_capacity_blocks for s in result.timeline)
    assert all(s["used_blocks"] <= s["reserved_blocks"] for s in result.timeline)
    assert result.extra["exit_codes"] == {"prefill": 0, "decode": 0}
    assert summarize(result)["wasted_row_fraction"] == 0.0


def test_static_baseline_outputs_equal_each_request_alone(tiny):
    model, _ = tiny
    cfg = EngineConfig(max_seq_len=MAX_LEN, max_decode_batch=4, kv_capacity_blocks=64, block_size=8)
    result = run_static_baseline(model, workload(1), cfg)
    for request in result.requests:
        assert request.generated == alone(model, request, cfg), f"request {request.id} differs"
    stats = summarize(result)
    assert stats["wasted_row_fraction"] > 0  # finished rows wait for the slowest one
    assert all(r.t_done >= r.t_last_token for r in result.requests)


@pytest.mark.parametrize("victim,survivor", [("decode", "prefill"), ("prefill", "decode")])
def test_a_killed_worker_is_reported_not_waited_for(tiny, victim, survivor):
    _, source = tiny
    cfg = EngineConfig(kv_capacity_blocks=40, block_size=8, max_seq_len=MAX_LEN, max_decode_batch=4,
                       crash_worker=victim, crash_after=2, timeout_s=120)
    with pytest.raises(WorkerFailed) as failure:
        # the survivor must notice through the transport by itself, long before its 120 s timeout; a survivor
        # still running after grace_s would be reported as "hung" (and killed) instead
        run_continuous(source, workload(), cfg, grace_s=20)
    message = str(failure.value)
    assert f"{victim} worker died: exited with code -9" in message
    assert f"{survivor} worker error: PeerLost: lost the {victim} worker" in message
    assert "hung" not in message


def test_impossible_requests_are_refused_before_starting(tiny):
    _, source = tiny
    cfg = EngineConfig(kv_capacity_blocks=4, block_size=8, max_seq_len=MAX_LEN)
    with pytest.raises(ValueError, match="request 0 can never fit"):
        run_continuous(source, [Request(0, [1, 2, 3])], cfg)  # unknown length: reserves MAX_LEN tokens
    with pytest.raises(ValueError, match="exceeds the model's maximum length"):
        run_continuous(source, [Request(0, [1] * 100, output_length=40)], cfg)
    with pytest.raises(ValueError, match="unique"):
        run_continuous(source, [Request(0, [1], 1), Request(0, [2], 1)], cfg)


def test_divergence_margin_locates_the_first_difference(tiny):
    model, _ = tiny
    prompt = [5, 6, 7]
    reference = generate_alone(model, prompt, 6)
    assert divergence_margin(model, prompt, reference, reference) is None
    wrong = reference[:2] + [(reference[2] + 1) % 256] + reference[3:]
    index, gap = divergence_margin(model, prompt, wrong, reference)
    assert index == 2 and gap > 1e-3  # the scaled LM head leaves no near-ties: this difference would be a bug


def test_step_time_by_batch_times_each_batch_size(tiny):
    model, _ = tiny
    rows = step_time_by_batch(model, [1, 3], prompt_len=5, steps=2, warmup=1)
    assert [r["batch"] for r in rows] == [1, 3]
    for r in rows:
        assert r["step_s"] > 0 and r["tok_s"] == r["batch"] / r["step_s"]
