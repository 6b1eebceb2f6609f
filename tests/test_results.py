import json

import pytest
import torch

from helpers import paths
from helpers.results import ResultStore, is_oom, run_metadata
from tiny_models import tiny_meta


def meta():
    return tiny_meta(seed=1)


def test_metadata_has_what_design_lists():
    m = meta()
    for key in ("device", "device_name", "dtype", "torch_version", "transformers_version", "model_id", "weights", "seed", "threads"):
        assert key in m
    assert m["dtype"] == "float32"
    with pytest.raises(ValueError):
        run_metadata(model_id="x", weights="guessed", dtype="bf16", device="cpu", seed=0)


def test_rows_are_appended_and_resumed(store, tmp_path):
    calls = []

    def measure(x):
        calls.append(x)
        return {"time_s": float(x)}

    for x in (1, 2):
        store.run({"x": x}, lambda x=x: measure(x), meta=meta())
    assert store.path == tmp_path / "results" / "unit" / "99_test.jsonl"
    assert len(store.path.read_text().splitlines()) == 2
    for x in (1, 2, 3):  # a rerun measures only what is missing
        store.run({"x": x}, lambda x=x: measure(x), meta=meta())
    assert calls == [1, 2, 3]
    frame = store.frame()
    assert sorted(frame["x"]) == [1, 2, 3] and set(frame["status"]) == {"ok"}
    assert {"timestamp", "device_name", "seed", "profile"} <= set(frame.columns)


def test_truncated_last_line_is_remeasured(store):
    store.run({"x": 1}, lambda: {"t": 1.0}, meta=meta())
    with store.path.open("a") as handle:
        handle.write('{"x": 2, "t": ')  # a crash mid-write
    assert not store.has({"x": 2}) and store.has({"x": 1})


def test_oom_is_a_row_and_the_sweep_goes_on(store):
    def too_big():
        raise MemoryError("the CPU allocator could not allocate 64 GiB")

    row = store.run({"b": 64}, too_big, meta=meta())
    assert row["status"] == "oom"
    assert store.run({"b": 1}, lambda: {"t": 0.1}, meta=meta())["status"] == "ok"
    assert store.has({"b": 64})  # an OOM is a result: not retried on resume


def test_cuda_oom_counts_and_other_errors_raise(store):
    def cuda_oom():
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB")

    assert store.run({"c": 1}, cuda_oom, meta=meta())["status"] == "oom"
    with pytest.raises(ZeroDivisionError):
        store.run({"c": 2}, lambda: 1 / 0, meta=meta())
    assert not store.has({"c": 2})


def test_only_real_out_of_memory_errors_are_oom():
    """Regression: a simulated memory budget once made predicted sizes look like OOMs."""
    assert is_oom(torch.OutOfMemoryError("CUDA out of memory")) and is_oom(MemoryError())
    assert is_oom(RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 68719476736 bytes"))
    assert not is_oom(ValueError("x")) and not is_oom(RuntimeError("shape mismatch"))


def test_nan_is_stored_as_null_and_clash_rejected(store):
    store.run({"x": 1}, lambda: {"t": float("nan")}, meta=meta())
    assert json.loads(store.path.read_text())["t"] is None
    with pytest.raises(ValueError, match="clash"):
        store.add_row({"x": 2}, {"x": 3}, meta())


def test_profiles_do_not_share_files(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBOOK_OUTPUT_ROOT", str(tmp_path))
    assert ResultStore("cpu", "01").path != ResultStore("gpu", "01").path
    with pytest.raises(ValueError, match="profile"):
        paths.results_dir("../escape")


def test_measured_on_names_the_rows_machine_not_this_one():
    import pandas as pd

    from helpers.results import measured_on

    gpu = {"device_name": "NVIDIA H100 80GB HBM3", "threads": 4, "device_memory_bytes": 85017493504}
    expected = {"device_name": "NVIDIA H100 80GB HBM3", "threads": 4, "memory_bytes": 85017493504}
    assert measured_on(gpu) == measured_on([gpu, {}]) == measured_on(pd.DataFrame([gpu])) == expected
    older = {"device_name": "AMD EPYC", "threads": 1}  # a row without the memory field
    assert measured_on(older)["memory_bytes"] is None
    assert measured_on(pd.DataFrame([{**older, "device_memory_bytes": float("nan")}]))["memory_bytes"] is None


def committed_rows() -> list[tuple[str, dict]]:
    """(file name, row) for every row committed under results/ (every profile)."""
    files = sorted((paths.REPO_ROOT / "results").glob("*/*.jsonl"))
    assert files
    return [(path.name, json.loads(line)) for path in files for line in path.read_text().splitlines()]


def test_every_committed_row_names_its_kind():
    """One row schema (issue 42): every row of every profile says what it measured under ``kind``, in its row and in
    its configuration, and no other key plays that part (rows once said ``experiment``, ``measure`` or ``check``)."""
    shared = {"status", "model_id", "weights", "dtype", "device", "threads", "seed", "run_id"}
    for name, row in committed_rows():
        config = json.loads(row["config_key"])
        assert row.get("kind") and config.get("kind") == row["kind"], f"{name}: {row['config_key']}"
        assert not {"experiment", "measure", "check"} & set(config), f"{name}: {row['config_key']}"
        assert shared <= set(row), f"{name}: lacks {sorted(shared - set(row))}"


def test_every_committed_row_names_the_target_step_one_way():
    """One row schema (issue 42): the target's step time is ``target_step_s`` at any depth of any committed row (rows
    once said ``T_T``, ``T_T_s`` or ``ar_step_s``), and every such value is a positive number of seconds."""
    def keys(value):
        if isinstance(value, dict):
            for key, inner in value.items():
                yield key, inner
                yield from keys(inner)
        elif isinstance(value, list):
            for inner in value:
                yield from keys(inner)

    steps = 0
    for name, row in committed_rows():
        for key, value in keys(row):
            assert key not in {"T_T", "T_T_s", "ar_step_s"}, f"{name}: {key}"
            if key == "target_step_s" and value is not None:
                assert 0 < value < 60, f"{name}: {value}"
                steps += 1
    assert steps > 100  # 07, 09-14 and both GPUs' 09 rows
