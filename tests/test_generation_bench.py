"""helpers.generation.sweeps: exact lengths, real-OOM-only rows, the time cap, resume, forward and verify timing."""
import pytest
import torch

from helpers.generation import sweeps as gb
from helpers import memory, models
from helpers.results import is_oom
from tiny_models import tiny_meta


@pytest.fixture(scope="module")
def tiny():
    config = memory.miniature_config("Qwen/Qwen3-1.7B", num_layers=1, vocab_size=64)
    return models.random_model(config, seed=0)


def meta():
    return tiny_meta(seed=0)


def config(input_len, new_tokens=3, batch_size=2):
    return {"model": "tiny", "batch_size": batch_size, "input_len": input_len, "new_tokens": new_tokens}


def test_random_batch_has_exact_shape_and_range():
    ids = gb.random_batch(50, 3, 7, generator=torch.Generator().manual_seed(0))
    assert ids.shape == (3, 7) and ids.min() >= 0 and ids.max() < 50


def test_generate_exact_cannot_stop_early(tiny):
    ids = gb.random_batch(64, 2, 5, generator=torch.Generator().manual_seed(1))
    # make half the vocabulary end-of-sequence tokens: only min_new_tokens keeps generation going
    tiny.generation_config.eos_token_id = list(range(32))
    try:
        out = gb.generate_exact(tiny, ids, 6)
    finally:
        tiny.generation_config.eos_token_id = None
    assert out.shape == (2, 11) and torch.equal(out[:, :5], ids)


def test_predicted_bytes_grow_with_length_and_batch(tiny):
    c = tiny.config
    small = memory.predicted_generation_bytes(c, 1, 8, 4, 4)
    assert memory.predicted_generation_bytes(c, 1, 64, 4, 4) > small
    assert memory.predicted_generation_bytes(c, 4, 8, 4, 4) > small
    assert small > memory.param_count(c) * 4  # weights are a lower bound


def test_predicted_bytes_of_the_real_qwen3_8b_at_batch_8():
    # weights (16.4 GB in bf16) + KV cache + one layer's prefill working set: 16k inputs fit 80 GB, 32k do not
    c = memory.load_config("Qwen/Qwen3-8B")
    weights = memory.weight_bytes(c, 2)
    assert memory.predicted_generation_bytes(c, 8, 1, 64, 2) == pytest.approx(weights, rel=0.01)
    assert memory.predicted_generation_bytes(c, 8, 2**14, 64, 2) < 80 * memory.GB
    assert memory.predicted_generation_bytes(c, 8, 2**15, 64, 2) > 80 * memory.GB


def test_measure_generation_reports_time_and_throughput(tiny):
    m = gb.measure_generation(tiny, batch_size=2, input_len=4, new_tokens=3, warmup=1, repeats=2)
    assert len(m["time_s_samples"]) == 2 and m["time_s_mean"] > 0
    assert m["throughput_tok_s"] == pytest.approx(2 * 3 / m["time_s_mean"])
    assert m["throughput_tok_s_median"] == pytest.approx(2 * 3 / m["time_s_median"])
    assert m["time_s_min"] <= m["time_s_median"] <= m["time_s_max"]
    assert m["total_tok_s"] == pytest.approx(2 * 7 / m["time_s_mean"])


class _OomModel:
    """A stand-in model whose generate raises a given error for inputs longer than ``limit`` tokens."""

    def __init__(self, real, limit, error):
        self.real, self.limit, self.error = real, limit, error
        self.config, self.generation_config = real.config, real.generation_config

    def parameters(self):
        return self.real.parameters()

    def generate(self, input_ids, **kw):
        if input_ids.shape[1] > self.limit:
            raise self.error
        return self.real.generate(input_ids, **kw)


def test_real_cuda_oom_becomes_an_oom_row(tiny, store):
    model = _OomModel(tiny, 8, torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    rows = gb.run_generation_sweep(store, model, [config(4), config(8), config(16)], meta=meta(), warmup=0,
                                   repeats=1, progress=False)
    assert [r["status"] for r in rows] == ["ok", "ok", "oom"]
    assert list(gb.status_table(rows, "input_len", {"time_s_mean": "Time (s)"})["Time (s)"])[-1] == "OOM"
    table = gb.status_table(rows, "input_len", {"time_s_mean": "Time (s)"}, status_column="status")
    assert list(table["status"]) == ["measured", "measured", "OOM"] and table["Time (s)"].isna().iloc[-1]
    assert store.frame()["status"].tolist().count("oom") == 1


@pytest.mark.parametrize("error", [
    MemoryError(),
    RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory: you tried to "
                 "allocate 68719476736 bytes. Error code 12 (Cannot allocate memory)"),
])
def test_real_cpu_allocation_failure_becomes_an_oom_row(tiny, store, error):
    rows = gb.run_generation_sweep(store, _OomModel(tiny, 4, error), [config(8)], meta=meta(), warmup=0,
                                   repeats=1, progress=False)
    assert rows[0]["status"] == "oom"


def test_a_budget_or_prediction_never_makes_an_oom_row(tiny, store):
    # regression: a memory budget once turned *predicted* sizes into "oom" rows on a machine with ample memory
    rows = gb.run_generation_sweep(store, tiny, [config(4), config(512)], meta=meta(), warmup=0, repeats=1,
                                   progress=False)
    assert [r["status"] for r in rows] == ["ok", "ok"]
    predicted = [memory.predicted_generation_bytes(tiny.config, 2, r["input_len"], 3, 4) for r in rows]
    assert predicted[1] > predicted[0]  # a prediction is a number to report, nothing more
    assert "oom" not in store.frame()["status"].tolist()
    assert not is_oom(ValueError("x"))


def test_other_errors_stop_the_sweep(tiny, store):
    with pytest.raises(ValueError):
        gb.run_generation_sweep(store, _OomModel(tiny, 4, ValueError("bad shape")), [config(8)], meta=meta(),
                                warmup=0, repeats=1, progress=False)
    assert store.done() == {}


def test_over_time_cap():
    row = {"status": "ok", "time_s_median": 2.0}
    assert gb.over_time_cap(row, 1.5) and not gb.over_time_cap(row, 2.5)
    assert not gb.over_time_cap(row, None) and not gb.over_time_cap(row, 0)
    assert not gb.over_time_cap({"status": "oom"}, 1.0)


def test_capped_sweep_stops_after_the_first_slow_config(tiny, store, monkeypatch):
    seconds = {1: 0.5, 2: 1.0, 4: 3.0, 8: 0.1}  # 4 is over a 2 s cap; 8 must not be measured
    calls = []

    def fake(model, **kw):
        calls.append(kw["input_len"])
        t = seconds[kw["input_len"]]
        return {"time_s_mean": t, "time_s_median": t, "time_s_min": t, "time_s_max": t}

    monkeypatch.setattr(gb, "measure_generation", fake)
    configs = [config(n) for n in (1, 2, 4, 8)]
    rows = gb.run_capped_generation_sweep(store, tiny, configs, meta=meta(), warmup=0, repeats=1,
                                          max_seconds_per_batch=2.0, progress=False)
    assert calls == [1, 2, 4]
    assert [r["status"] for r in rows] == ["ok", "ok", "ok", gb.STATUS_NOT_RUN]
    assert rows[-1]["input_len"] == 8 and "time cap" in rows[-1]["reason"]
    assert len(store.done()) == 3  # "not run" rows are never stored
    table = gb.status_table(rows, "input_len", {"time_s_median": "Time (s)"}, status_column="status")
    assert list(table["status"])[-1] == "not run (time cap)"
    assert list(gb.status_table(rows, "input_len", {"time_s_median": "Time (s)"})["Time (s)"])[-1].startswith("not run")
    # a resumed run reaches the same cutoff from the stored rows without measuring again
    again = gb.run_capped_generation_sweep(store, tiny, configs, meta=meta(), warmup=0, repeats=1,
                                           max_seconds_per_batch=2.0, progress=False)
    assert calls == [1, 2, 4] and again == rows
    # no cap: everything is measured
    gb.run_capped_generation_sweep(store, tiny, configs, meta=meta(), warmup=0, repeats=1,
                                   max_seconds_per_batch=0, progress=False)
    assert calls == [1, 2, 4, 8]


def test_sweep_resumes_after_interruption(tiny, store, monkeypatch):
    configs = [config(2), config(4), config(6)]
    real = gb.measure_generation
    calls = []

    def interrupted(model, **kw):
        calls.append(kw["input_len"])
        if kw["input_len"] == 4:
            raise KeyboardInterrupt  # the kernel is stopped mid-sweep
        return real(model, **kw)

    monkeypatch.setattr(gb, "measure_generation", interrupted)
    with pytest.raises(KeyboardInterrupt):
        gb.run_generation_sweep(store, tiny, configs, meta=meta(), warmup=0, repeats=1, progress=False)
    assert len(store.done()) == 1  # the finished config survived

    monkeypatch.setattr(gb, "measure_generation", lambda model, **kw: (calls.append(kw["input_len"]), real(model, **kw))[1])
    rows = gb.run_generation_sweep(store, tiny, configs, meta=meta(), warmup=0, repeats=1, progress=False)
    assert calls == [2, 4, 4, 6]  # only the missing configs were measured again
    assert [r["input_len"] for r in rows] == [2, 4, 6] and all(r["status"] == "ok" for r in rows)

    rows_again = gb.run_generation_sweep(store, tiny, configs, meta=meta(), warmup=0, repeats=1, progress=False)
    assert calls == [2, 4, 4, 6] and rows_again == rows
    gb.run_generation_sweep(store, tiny, configs[:1], meta=meta(), warmup=0, repeats=1, progress=False, rerun=True)
    assert calls[-1] == 2


def test_forward_sweep(tiny, store):
    configs = [{"batch_size": b, "seq_len": 8} for b in (1, 2)]
    rows = gb.run_forward_sweep(store, tiny, configs, meta=meta(), warmup=0, repeats=2, progress=False)
    assert all(r["status"] == "ok" and r["time_ms_mean"] > 0 for r in rows)
    assert rows[1]["ms_per_sequence"] == pytest.approx(rows[1]["time_ms_mean"] / 2)


def test_verify_timing_leaves_the_prefix_in_the_cache(tiny):
    m = gb.measure_verify(tiny, prefix_len=6, new_tokens=3, warmup=1, repeats=2)
    assert m["time_ms_mean"] > 0 and len(m["time_s_samples"]) == 2


def test_protocol_table_compares_every_handout_setting():
    ours = dict(gb.HANDOUT_PROTOCOL, dtype="float32")
    table = gb.protocol_table(ours)
    assert list(table["setting"]) == list(gb.HANDOUT_PROTOCOL)
    assert table.set_index("setting").loc["dtype", "same"] == False  # noqa: E712 - a numpy bool
    assert table["same"].sum() == len(gb.HANDOUT_PROTOCOL) - 1
    with pytest.raises(ValueError, match="missing"):
        gb.protocol_table({"dtype": "float32"})


def test_linear_fit():
    fit = gb.linear_fit([1, 2, 4, 8], [1.5, 2.0, 3.0, 5.0])
    assert fit["slope"] == pytest.approx(0.5) and fit["intercept"] == pytest.approx(1.0)
    assert fit["r2"] == pytest.approx(1.0) and fit["max_rel_residual"] == pytest.approx(0.0, abs=1e-12)
    assert gb.linear_fit([1, 2, 3], [1, 4, 9])["r2"] < 1
    # a relative fit is not dominated by the largest point
    x, y = [1, 2, 4, 8, 100], [1.1, 1.2, 1.4, 1.8, 30.0]
    rel, absolute = gb.linear_fit(x, y, relative=True), gb.linear_fit(x, y)
    assert abs(rel["intercept"] - 1.0) < abs(absolute["intercept"] - 1.0)
    assert rel["max_rel_residual"] < absolute["max_rel_residual"]
    with pytest.raises(ValueError, match="positive"):
        gb.linear_fit([1, 2], [0.0, 1.0], relative=True)
    with pytest.raises(ValueError):
        gb.linear_fit([1], [1])


def test_a_feature_explains_an_ordering_when_no_pair_violates_it():
    assert gb.ordering_violation([1, 5, 3], [0.1, 0.5, 0.3]) is None
    assert gb.ordering_violation([1, 3, 5], [0.1, 0.5, 0.3]) is not None
    assert gb.ordering_violation([8, 8, 32], [0.2, 0.5, 0.48]) is not None  # a tie cannot explain different times
    assert gb.ordering_violation([1, 2], [0.3, 0.3]) is None
    assert gb.ordering_violation([8, 8, 32], [0.2, 0.5, 0.48]) == (0, 1)
    assert gb.ordering_violation([1, 5, 3], [0.1, 0.5, 0.3]) is None
    # only the pairs ``comparable`` accepts count
    assert gb.ordering_violation([8, 8, 32], [0.2, 0.5, 0.48], comparable=lambda i, j: (i, j) != (0, 1)) == (1, 2)
    assert gb.ordering_violation([8, 8, 32], [0.2, 0.5, 0.48], comparable=lambda i, j: (i, j) == (0, 2)) is None


def _timed(n, t_min, t_max):
    return {"status": "ok", "n": n, "time_s_min": t_min, "time_s_max": t_max}


def test_non_monotone_noise_flags_points_slower_than_a_longer_one_beyond_both_ranges():
    rows = [_timed(1, 1.60, 1.69), _timed(2, 1.46, 1.75), _timed(4, 1.08, 1.40), _timed(8, 1.02, 1.35),
            _timed(16, 1.11, 1.48), {"status": "not run", "n": 32}]
    # notebook 02's committed sweep: 1 and 2 tokens took longer than 4 beyond both ranges; 4 vs 8 is jitter
    assert gb.non_monotone_noise(rows, "n") == {1: 4, 2: 4}
    assert gb.non_monotone_noise(list(reversed(rows)), "n") == {1: 4, 2: 4}  # order of the rows does not matter
    assert gb.non_monotone_noise([_timed(1, 1.0, 1.1), _timed(2, 1.05, 1.2)], "n") == {}
    assert gb.separated(_timed(1, 1.0, 1.1), _timed(2, 1.2, 1.3)) and not gb.separated(_timed(1, 1.0, 1.2),
                                                                                         _timed(2, 1.2, 1.3))
