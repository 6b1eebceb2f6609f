"""Request life cycle, the length-bucketing priority queue and paged KV accounting (no model, no processes)."""
import os
from types import SimpleNamespace

import pytest

from helpers.batching import bench, full_batch_share, latency_by_length
from helpers.batching.kv_memory import PagedKVMemory, blocks_for, does_fit, reserved_blocks
from helpers.batching.queue import BucketedQueue
from helpers.batching.request import Request, State


def req(i, prompt_len, output_length=None):
    return Request(i, list(range(1, prompt_len + 1)), output_length)


def test_request_states_follow_the_fixed_order():
    r = req(0, 3, 2)
    for state in (State.PREFILL, State.DECODE, State.DONE):
        r.advance(state)
    assert r.state is State.DONE
    with pytest.raises(RuntimeError, match="cannot go from queued to decode"):
        req(1, 3).advance(State.DECODE)


def test_request_stops_on_eos_or_length():
    r = req(0, 3, output_length=3)
    assert not r.add_token(5, eos_token_id=9, max_seq_len=100)
    assert r.add_token(9, eos_token_id=9, max_seq_len=100) and r.finish_reason == "eos"
    r = req(1, 3, output_length=2)
    assert not r.add_token(5, eos_token_id=None, max_seq_len=100)
    assert r.add_token(5, eos_token_id=None, max_seq_len=100) and r.finish_reason == "length"
    r = req(2, 8)  # no output length: stops at the model's maximum length
    assert r.max_new_tokens(max_seq_len=10) == 2


def test_request_rejects_bad_input():
    with pytest.raises(ValueError, match="prompt is empty"):
        Request(0, [])
    for bad in (0, -3, 2.5):
        with pytest.raises(ValueError, match="output_length"):
            Request(0, [1], bad)
    with pytest.raises(ValueError, match="exceeds the model's maximum length 10"):
        req(0, 8, 5).check_length(10)


def test_queue_is_fifo_and_constrained_get_skips_what_does_not_match():
    q = BucketedQueue(bucket_width=4)
    for i, n in enumerate([3, 9, 2, 10, 4]):
        q.put(req(i, n))
    assert len(q) == 5
    assert q.constrained_get().id == 0  # oldest first
    assert q.constrained_get(lambda r: r.prompt_len > 8).id == 1
    assert q.constrained_get(lambda r: r.prompt_len > 100) is None
    assert len(q) == 3


def test_queue_buckets_group_similar_lengths():
    q = BucketedQueue(bucket_width=4)
    for i, n in enumerate([3, 9, 2, 10, 4, 12]):
        q.put(req(i, n))
    first = q.constrained_get()
    same = [q.constrained_get(bucket=q.bucket_of(first)) for _ in range(3)]
    assert [r.prompt_len for r in same[:2]] == [2, 4] and same[2] is None  # 1..4 tokens: no 9, 10 or 12
    assert [q.constrained_get(bucket=2).prompt_len for _ in range(3)] == [9, 10, 12]
    assert not q


def test_queue_priority_overrides_arrival():
    q = BucketedQueue()
    q.put(req(0, 3), priority=5)
    q.put(req(1, 3), priority=1)
    assert q.constrained_get().id == 1


def test_does_fit_is_exact_for_known_and_conservative_for_unknown_lengths():
    assert blocks_for(16, 16) == 1 and blocks_for(17, 16) == 2
    known = req(0, 10, output_length=6)  # 16 tokens: exactly one block
    unknown = req(1, 10)  # may run to max_seq_len=64: four blocks
    assert reserved_blocks(known, 16, 64) == 1
    assert reserved_blocks(unknown, 16, 64) == 4
    assert does_fit(known, [unknown], 5, block_size=16, max_seq_len=64)
    assert not does_fit(unknown, [unknown], 7, block_size=16, max_seq_len=64)


def test_paged_memory_allocates_as_sequences_grow_and_frees_at_once():
    memory = PagedKVMemory(capacity_blocks=4, block_size=4, max_seq_len=64)
    a, b = req(0, 3, output_length=5), req(1, 4, output_length=4)  # 8 tokens each: 2 blocks reserved
    memory.admit(a, tokens=4)
    memory.admit(b, tokens=5)
    assert memory.used_blocks == 3 and memory.reserved_total == 4
    assert not memory.does_fit(req(2, 1, output_length=1))
    memory.grow(a, 8)
    assert memory.used_blocks == 4
    with pytest.raises(RuntimeError, match="past its reservation"):
        memory.grow(a, 9)
    memory.free(a)
    assert memory.used_blocks == 2 and memory.does_fit(req(2, 1, output_length=7))
    assert sorted(memory.block_tables[1]) == sorted(set(memory.block_tables[1]))  # no block handed out twice


def test_request_that_can_never_fit_is_named():
    memory = PagedKVMemory(capacity_blocks=2, block_size=16, max_seq_len=512)
    with pytest.raises(ValueError, match="request 7 can never fit.*model's maximum length"):
        memory.check_can_ever_fit(req(7, 4))
    memory.check_can_ever_fit(req(8, 4, output_length=28))  # 32 tokens: fits
    with pytest.raises(ValueError, match="positive sizes"):
        PagedKVMemory(0, 16, 512)


def test_compare_alternates_which_policy_goes_first_and_keeps_the_median_pair(monkeypatch):
    calls, throughput = [], {"continuous": iter([30.0, 20.0, 40.0]), "static": iter([10.0, 10.0, 10.0])}

    def fake(policy):
        def serve(*args, **kwargs):
            calls.append(policy)
            return SimpleNamespace(policy=policy, throughput=next(throughput[policy]))
        return serve

    monkeypatch.setattr(bench, "run_continuous", fake("continuous"))
    monkeypatch.setattr(bench, "run_static_baseline", fake("static"))
    monkeypatch.setattr(bench, "summarize", lambda run: {"throughput_tok_s": run.throughput})
    out = bench.compare("w", [], None, None, None, static_threads=1, check=False, repeats=3)
    assert calls == ["continuous", "static", "static", "continuous", "continuous", "static"]
    assert out["speedups"] == [2.0, 3.0, 4.0] and out["speedup"] == 3.0
    assert out["runs"]["continuous"].throughput == 30.0  # the runs of the median pair, kept together


def test_full_batch_share_reads_the_window_between_the_first_and_last_full_step():
    timeline = [[t, rows, rows] for t, rows in enumerate([1, 3, 4, 4, 3, 4, 2, 4, 1, 1])]
    out = full_batch_share(timeline, 4)
    assert (out["first"], out["last"]) == (2, 7)
    assert out["near_full"] == pytest.approx(5 / 6) and out["mean_rows"] == pytest.approx(21 / 6)
    assert full_batch_share([[0, 1, 1]], 4) == {"first": None, "last": None, "near_full": 0.0, "mean_rows": 1.0}


def test_latency_by_length_splits_at_the_median_output():
    latencies = [[0.1, 0.01, 1.0, 5], [0.4, 0.01, 2.0, 10], [0.2, 0.01, 3.0, 50], [0.3, 0.01, 4.0, 60]]
    out = latency_by_length(latencies)
    assert out["short_e2e_p50_s"] == pytest.approx(1.5) and out["long_e2e_p50_s"] == pytest.approx(3.5)
    assert out["ttft_p50_over_min"] == pytest.approx(0.25 / 0.1)
    with pytest.raises(ValueError, match="non-empty"):
        latency_by_length([])


def test_occupancy_timeline_keeps_both_policies_visible_and_counts_rows_in_integers():
    """Regression: in the uniform panel static batching's line hid under continuous batching's (both at the full
    batch), and the axis counting rows had ticks at 2.5 and 7.5."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from helpers.batching import plots

    full = [[0.1 * i, 8, 8] for i in range(10)]
    fig = plots.occupancy_timeline({"uniform": {"continuous": full, "static": full}}, 8)
    ax = fig.axes[0]
    lines = {line.get_label().split(":")[0]: line for line in ax.get_lines() if ":" in line.get_label()}
    assert set(lines) == {"continuous", "static"}
    assert lines["continuous"].get_linestyle() != lines["static"].get_linestyle()
    assert lines["static"].get_zorder() > lines["continuous"].get_zorder()  # the thinner dashed one on top
    assert lines["static"].get_linewidth() < lines["continuous"].get_linewidth()
    ticks = [t for t in ax.get_yticks() if 0 <= t <= 8.5]
    assert ticks and all(float(t).is_integer() for t in ticks)
    plt.close(fig)


@pytest.mark.parametrize("cores, threads, prefill", [(2, 1, 1), (2, 2, 1), (8, 2, 2), (8, 4, 4), (8, 6, 2), (1, 1, 1)])
def test_the_prefill_worker_takes_the_cores_the_decode_worker_leaves(monkeypatch, cores, threads, prefill):
    """Regression: each worker took threads_per_worker, so 2 threads on 2 cores ran two OpenMP pools on the same
    cores (bench serving at 2 threads: no speculation 110 tok/s at low load, TTFT p99 608 ms; with the prefill
    worker at 1 thread: 153 tok/s, 78 ms)."""
    from helpers.batching.workers import EngineConfig

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    assert EngineConfig(threads_per_worker=threads).prefill_threads == prefill
