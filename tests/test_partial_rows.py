"""A pending notebook's rows measured so far reach the report (helpers.partial_rows): the table, its caption, the
configuration the render stopped at, and the file's removal once the notebook renders in full."""
from __future__ import annotations

import pytest

from helpers import partial_rows, paths
from helpers.results import MissingResultError, ResultStore


def _store(profile: str, name: str) -> ResultStore:
    return ResultStore(profile, name)


@pytest.fixture
def output_root(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBOOK_OUTPUT_ROOT", str(tmp_path))
    return tmp_path


def test_partial_table_splits_varying_from_shared_settings():
    rows = [{"config_key": '{"batch_size": 1, "dtype": "bf16", "kind": "forward", "seq_len": 256, "device": "cuda"}',
             "status": "ok", "time_s_median": 0.06, "time_ms_mean": 78.0, "extra": [1, 2]},
            {"config_key": '{"dtype": "bf16", "kind": "verify", "new_tokens": 2, "device": "cuda"}',
             "status": "oom"}]
    table, shared = partial_rows.partial_table(rows)
    assert shared == {"dtype": "bf16"}  # device is on the report's first page; the rest differ or are absent somewhere
    assert list(table.columns) == ["batch_size", "kind", "new_tokens", "seq_len", "status", "time_s_median"]
    assert table.iloc[1].tolist() == ["", "verify", 2, "", "oom", ""]  # a key a row lacks is blank, not a guess
    only_means = [{"config_key": '{"b": 1}', "status": "ok", "time_ms_mean": 5.0}]
    assert "time_ms_mean" in partial_rows.partial_table(only_means)[0].columns  # the mean where there is no median


def test_missing_config_is_read_from_the_results_only_error(output_root, monkeypatch):
    monkeypatch.setenv("WORKBOOK_RESULTS_ONLY", "1")
    store = _store("gpu-h100", "06_forward_pass_scaling")
    with pytest.raises(MissingResultError) as error:
        store.refuse_in_results_only({"trials": 20, "model": "m"})
    assert partial_rows.missing_config(str(error.value)) == {"model": "m", "trials": 20}
    assert partial_rows.missing_config("some other failure") is None


def test_write_partial_tables_a_pending_notebooks_rows_and_clear_removes_them(output_root):
    store = _store("gpu-h100", "06_forward_pass_scaling")
    for batch in (1, 2):
        store.add_row({"batch_size": batch, "trials": 5, "model": "m"}, {"time_s_median": 0.01 * batch}, {})
    _store("gpu-h100", "09_handout_costs").add_row({"target": "t"}, {"c": 0.4}, {})  # shown by gpu_costs, not here
    table = partial_rows.write_partial("06_forward_pass_scaling", "gpu-h100", {"trials": 20, "device": "cuda"})
    caption = table.with_name("06_forward_pass_scaling_partial.caption.tex").read_text()
    assert "2 rows (time: of the median batch); shared settings: model m; trials 5" in caption
    assert "the first row still to measure: trials 20" in caption and "cuda" not in caption
    assert "batch\\_size" in table.read_text()
    assert partial_rows.write_partial("09_speedup_analysis", "gpu-h100") is None  # only the cost file: no table
    partial_rows.clear_partial("06_forward_pass_scaling", "gpu-h100")
    assert not list(paths.generated_dir("gpu-h100").glob("06_*partial*"))


def test_generation_rows_show_one_statistic_and_the_columns_recompute_from_each_other():
    # a generation row as the sweep stores it: ms_per_step from the MEAN time (4.75 s median against 5.11 s mean)
    row = {"config_key": '{"batch_size": 8, "input_len": 1, "new_tokens": 64}', "status": "ok", "batch_size": 8,
           "new_tokens": 64, "time_s_median": 4.75, "time_s_mean": 5.11, "ms_per_step": 1000 * 5.11 / 64,
           "throughput_tok_s_median": 8 * 64 / 4.75}
    other = dict(row, config_key='{"batch_size": 8, "input_len": 2, "new_tokens": 64}')
    table, _ = partial_rows.partial_table([row, other])
    assert "ms_per_step" not in table and "ms_per_step_median" in table  # the mean's column is not beside medians
    for _, line in table.iterrows():
        assert line["ms_per_step_median"] * 64 / 1000 == pytest.approx(line["time_s_median"])
        assert 8 * 64 / line["time_s_median"] == pytest.approx(line["throughput_tok_s_median"])
    assert "median batch" in partial_rows.statistic_note(table)
    bad = dict(row, throughput_tok_s_median=8 * 64 / 5.11)  # throughput from the mean beside the median time
    with pytest.raises(ValueError, match="throughput_tok_s_median"):
        partial_rows.partial_table([bad])
    verify = {"config_key": '{"kind": "verify", "new_tokens": 4}', "status": "ok", "new_tokens": 4,
              "time_s_median": 0.07}  # one forward over 4 tokens: no per-step time to derive
    assert "ms_per_step_median" not in partial_rows.partial_table([verify])[0]
