"""helpers.gpu_measure: the GPU measurement entry point, rehearsed on the CPU (--dry-run), and results-only rendering."""
import json
import subprocess
import sys
import time

import pytest
import torch
import yaml

from helpers import gpu_measure, paths
from helpers.results import MissingResultError, ResultStore

PROFILE = "gpu-h100"
DRY = f"{PROFILE}-dryrun"


@pytest.fixture(scope="module")
def dry(tmp_path_factory):
    """One dry run of every part (the CPU profile's small models, a few tokens), timed."""
    out = tmp_path_factory.mktemp("gpu_measure")
    start = time.monotonic()
    summary = gpu_measure.run(PROFILE, out, dry_run=True, budget_s=600)
    return out, summary, time.monotonic() - start


def rows(out, name):
    path = out / "results" / DRY / f"{name}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_dry_run_measures_every_part_into_the_notebooks_files(dry):
    out, summary, seconds = dry
    assert summary["parts_done"] == list(gpu_measure.PARTS) and summary["stopped"] is None
    assert seconds < 60, f"the dry run should take under a minute, took {seconds:.0f} s"
    for part, names in gpu_measure.PART_FILES.items():
        for name in names:
            found = rows(out, name)
            assert found, f"part {part} wrote no row to {name}.jsonl"
            assert all(row["status"] == "ok" and row["device"] == "cpu" for row in found), name
            assert all(row["weights"] in ("random", "cpu-pair") for row in found), name
    eq5 = rows(out, "09_handout_costs")[0]
    assert eq5["weights"] == "random" and set(eq5["T_V"]) == {"2", "3"}
    assert "prediction" in eq5["eq5_note"] and set(eq5["eq5_prediction"]) == {"0.5", "0.6", "0.7", "0.8", "0.9"}


def test_rerun_resumes_without_measuring(dry):
    out, _, _ = dry
    before = {f.name: f.read_bytes() for f in (out / "results" / DRY).glob("*.jsonl")}
    summary = gpu_measure.run(PROFILE, out, dry_run=True, budget_s=600)
    assert summary["measured"] == 0 and summary["stopped"] is None
    assert {f.name: f.read_bytes() for f in (out / "results" / DRY).glob("*.jsonl")} == before


def test_budget_stops_cleanly_before_measuring(tmp_path, capsys):
    summary = gpu_measure.run(PROFILE, tmp_path, only=["06"], dry_run=True, budget_s=1)
    assert summary["measured"] == 0 and summary["parts_done"] == []
    assert "run the same command again" in summary["stopped"]
    assert "INCOMPLETE" in capsys.readouterr().out


def test_unknown_part_and_gpu_profile_without_cuda_are_clear_errors(tmp_path):
    with pytest.raises(SystemExit, match="unknown part"):
        gpu_measure.run(PROFILE, tmp_path, only=["99"], dry_run=True)
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    with pytest.raises(SystemExit, match="sees no CUDA device.*--dry-run"):
        gpu_measure.run(PROFILE, tmp_path, only=["06"])


def test_help_states_the_output_limits(capsys):
    with pytest.raises(SystemExit):
        gpu_measure.main(["--help"])
    text = capsys.readouterr().out
    assert "8 files" in text and "16 MiB" in text and "--dry-run" in text and "--budget-s" in text


def test_too_many_files_is_a_warning(tmp_path):
    folder = tmp_path / "results" / "p"
    folder.mkdir(parents=True)
    names = [f"f{i}" for i in range(9)]
    for name in names:
        (folder / f"{name}.jsonl").write_text("{}\n")
    assert any("9 result files" in w for w in gpu_measure.check_outputs(tmp_path, "p", names))
    assert gpu_measure.check_outputs(tmp_path, "p", names[:8]) == []


def test_no_jupyter_import():
    code = ("import sys, helpers.gpu_measure as g; g.profile_params('gpu-h100', True); "
            "bad = [m for m in sys.modules if m.split('.')[0] in "
            "{'papermill', 'nbval', 'nbformat', 'nbclient', 'jupyter_client', 'IPython', 'ipykernel'}]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=paths.REPO_ROOT)


def test_chunks_resume_from_committed_rows(tmp_path):
    source = paths.REPO_ROOT / "results" / "cpu" / "06_forward_pass_scaling.jsonl"
    if not source.exists():
        pytest.skip("no committed CPU rows of notebook 06")
    gpu_measure.seed_outputs("cpu", tmp_path, ["06_forward_pass_scaling", "02_missing"])
    assert (tmp_path / "results" / "cpu" / "06_forward_pass_scaling.jsonl").read_bytes() == source.read_bytes()
    assert not (tmp_path / "results" / "cpu" / "02_missing.jsonl").exists()


@pytest.mark.parametrize("profile", ["gpu-h100", "gpu-h200"])
def test_gpu_profiles_are_the_gpu_profile_offline(profile):
    gpu = yaml.safe_load((paths.PARAMS_DIR / "gpu.yaml").read_text())
    params = yaml.safe_load((paths.PARAMS_DIR / f"{profile}.yaml").read_text())
    assert params["profile"] == profile and params["device"] == "cuda"
    assert set(params) <= set(gpu), f"parameters params/gpu.yaml lacks: {sorted(set(params) - set(gpu))}"
    assert all(v != "pretrained" for k, v in params.items() if k.endswith("_weights")), "no network: no Hub weights"
    assert all(params[k] > 0 for k in ("gen_threads", "fp_threads")), "thread counts are part of 02's configurations"


def test_results_only_never_measures(store, monkeypatch):
    config = {"x": 1}
    store.run(config, lambda: {"y": 2}, meta={})
    monkeypatch.setenv("WORKBOOK_RESULTS_ONLY", "1")
    assert store.run(config, lambda: pytest.fail("measured"), meta={})["y"] == 2
    with pytest.raises(MissingResultError, match="gpu_measure"):
        store.run({"x": 2}, lambda: pytest.fail("measured"), meta={})
    with pytest.raises(MissingResultError):
        store.append({"x": 3}, {"y": 1}, {})
    monkeypatch.setenv("WORKBOOK_RESULTS_ONLY", "0")
    assert store.run({"x": 2}, lambda: {"y": 5}, meta={})["y"] == 5


@pytest.mark.notebooks
def test_notebook_06_renders_the_dry_run_rows_without_measuring(dry, monkeypatch, tmp_path):
    """The configurations gpu_measure writes are exactly the ones notebook 06 asks for: rendered with
    WORKBOOK_RESULTS_ONLY=1, it finds every row (a missing one would fail the run) and measures nothing."""
    pytest.importorskip("papermill")
    from helpers import run_all

    out, _, _ = dry
    before = (out / "results" / DRY / "06_forward_pass_scaling.jsonl").read_bytes()
    params, _ = gpu_measure.profile_params(PROFILE, dry_run=True)
    monkeypatch.setenv("WORKBOOK_OUTPUT_ROOT", str(out))
    monkeypatch.setenv("WORKBOOK_RESULTS_ONLY", "1")
    notebook = paths.NOTEBOOKS_DIR / "06_forward_pass_scaling.ipynb"
    run_all.execute(notebook, params, tmp_path / "build", progress=False)
    assert (out / "results" / DRY / "06_forward_pass_scaling.jsonl").read_bytes() == before
    assert (out / "report" / "generated" / DRY).is_dir()


def as_gpu_rows(source, target):
    """The dry run's rows of a notebook relabelled as if measured on 'cuda' (a test stand-in for committed GPU rows:
    only the configuration's device changes, so the rendering must find them by key)."""
    from helpers.results import config_key

    lines = []
    for line in source.read_text().splitlines():
        row = json.loads(line)
        config = json.loads(row["config_key"])
        config["device"] = row["device"] = "cuda"
        row["config_key"] = config_key(config)
        lines.append(json.dumps(row, sort_keys=True))
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("\n".join(lines) + "\n")


def test_results_only_builds_models_on_meta_for_a_gpu_profile(monkeypatch):
    from helpers.generation.loading import load_for_sweep
    from helpers.hardware import device_info, resolve_device

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    with pytest.raises(RuntimeError, match="no CUDA GPU"):
        resolve_device("cuda")
    monkeypatch.setenv("WORKBOOK_RESULTS_ONLY", "1")
    device = resolve_device("cuda")
    assert device.type == "meta" and "results only" in device_info(device)["device_name"]
    loaded = load_for_sweep("cpu/Qwen3-4B", "random", device, torch.float32)
    assert next(loaded.model.parameters()).is_meta and loaded.label == "random"


@pytest.mark.notebooks
@pytest.mark.parametrize("name", ["06_forward_pass_scaling", "07_speculative_decoding", "09_speedup_analysis",
                                  "12_draft_design"])
# (02's findings need more than the dry run's few points)
def test_notebook_renders_gpu_rows_on_a_machine_without_gpu(dry, monkeypatch, tmp_path, name):
    """A GPU profile (device 'cuda') rendered here, with no GPU: models on meta, every number from the rows."""
    pytest.importorskip("papermill")
    from helpers import run_all

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    out, _, _ = dry
    profile = "gpu-rendertest"
    for rows in (out / "results" / DRY).glob(f"{name[:2]}_*.jsonl"):  # the notebook's files (07 writes three)
        as_gpu_rows(rows, tmp_path / "results" / profile / rows.name)
    params, _ = gpu_measure.profile_params(PROFILE, dry_run=True)
    params.update(profile=profile, device="cuda")
    monkeypatch.setenv("WORKBOOK_OUTPUT_ROOT", str(tmp_path))
    monkeypatch.setenv("WORKBOOK_RESULTS_ONLY", "1")
    run_all.execute(paths.NOTEBOOKS_DIR / f"{name}.ipynb", params, tmp_path / "build", progress=False)
    numbers = (tmp_path / "report" / "generated" / profile / f"{name}.numbers.tex").read_text()
    assert "results only" not in numbers  # the device named is the rows' one


def test_verify_graph_times_runs_both_paths(monkeypatch):
    """The graphs part's compiled verify timing on the CPU pair, with torch.compile stubbed out (the compiled graph's
    numbers are tests/test_model_graphs.py's business; here: the path runs and leaves the cache where it was)."""
    from helpers.models import load_model

    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: fn)
    target, _ = load_model("cpu-pair/target")
    context = torch.randint(0, target.config.vocab_size, (1, 8), generator=torch.Generator().manual_seed(0))
    for compile in (False, True):
        row = gpu_measure.verify_graph_times(target, context, [1, 3], repeats=1, compile=compile)
        assert set(row["seconds"]) == {1, 3} and row["compiled"] is compile
        assert all(t > 0 for t in row["seconds"].values())


def test_a_failing_compiled_measurement_is_skipped_not_fatal(capsys):
    def boom():
        raise RuntimeError("no C compiler")

    gpu_measure._tolerate_compile_failure(True, {"kind": "x"}, boom)
    assert "COMPILED MEASUREMENT FAILED" in capsys.readouterr().out
    with pytest.raises(RuntimeError):
        gpu_measure._tolerate_compile_failure(False, {"kind": "x"}, boom)  # eager failures stay errors
