"""helpers.generation_bench: exact lengths, the memory-budget OOM path, resume, forward and verify timing."""
import pytest
import torch

from helpers import generation_bench as gb
from helpers import memory, models
from helpers.results import MemoryBudgetExceeded, ResultStore, run_metadata


@pytest.fixture(scope="module")
def tiny():
    config = memory.miniature_config("Qwen/Qwen3-1.7B", num_layers=1, vocab_size=64)
    return models.random_model(config, seed=0)


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBOOK_OUTPUT_ROOT", str(tmp_path))
    return ResultStore("unit", "02_test")


def meta():
    return run_metadata(model_id="tiny", weights="random", dtype=torch.float32, device="cpu", seed=0)


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
    small = gb.predicted_generation_bytes(c, 1, 8, 4, 4)
    assert gb.predicted_generation_bytes(c, 1, 64, 4, 4) > small
    assert gb.predicted_generation_bytes(c, 4, 8, 4, 4) > small
    assert small > memory.param_count(c) * 4  # weights are a lower bound
    assert gb.predicted_forward_bytes(c, 2, 16, 4) > gb.predicted_forward_bytes(c, 1, 16, 4)


def test_measure_generation_reports_time_and_throughput(tiny):
    m = gb.measure_generation(tiny, batch_size=2, input_len=4, new_tokens=3, warmup=1, repeats=2)
    assert len(m["time_s_samples"]) == 2 and m["time_s_mean"] > 0
    assert m["throughput_tok_s"] == pytest.approx(2 * 3 / m["time_s_mean"])
    assert m["total_tok_s"] == pytest.approx(2 * 7 / m["time_s_mean"])


def test_budget_turns_large_configs_into_oom_rows(tiny, store):
    limit = gb.predicted_generation_bytes(tiny.config, 2, 8, 3, 4)
    rows = gb.run_generation_sweep(store, tiny, [config(4), config(8), config(512)], meta=meta(), warmup=0,
                                   repeats=1, budget_bytes=limit, progress=False)
    assert [r["status"] for r in rows] == ["ok", "ok", "oom"]
    table = gb.status_table(rows, "input_len", {"time_s_mean": "Time (s)"})
    assert list(table["Time (s)"])[-1] == "OOM"
    assert store.frame()["status"].tolist().count("oom") == 1


def test_no_budget_means_no_oom(tiny, store):
    rows = gb.run_generation_sweep(store, tiny, [config(64)], meta=meta(), warmup=0, repeats=1, budget_bytes=None,
                                   progress=False)
    assert rows[0]["status"] == "ok"


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


def test_forward_sweep_and_budget(tiny, store):
    configs = [{"batch_size": b, "seq_len": 8} for b in (1, 2)]
    rows = gb.run_forward_sweep(store, tiny, configs, meta=meta(), warmup=0, repeats=2, progress=False)
    assert all(r["status"] == "ok" and r["time_ms_mean"] > 0 for r in rows)
    assert rows[1]["ms_per_sequence"] == pytest.approx(rows[1]["time_ms_mean"] / 2)
    with pytest.raises(MemoryBudgetExceeded):
        gb.check_memory_budget(gb.predicted_forward_bytes(tiny.config, 2, 8, 4), 1)


def test_verify_timing_leaves_the_prefix_in_the_cache(tiny):
    m = gb.measure_verify(tiny, prefix_len=6, new_tokens=3, warmup=1, repeats=2)
    assert m["time_ms_mean"] > 0 and len(m["time_s_samples"]) == 2
