"""helpers.gpu_measure: the GPU measurement entry point, rehearsed on the CPU (--dry-run), and results-only rendering."""
import json
import subprocess
import sys
import time

import pytest
import torch
import yaml

from helpers import gpu_measure, paths
from helpers.experiments import packages
from helpers.experiments import gpu_costs, nb09, specdec_costs
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
    assert sorted(summary["parts_done"]) == sorted(gpu_measure.PARTS) and summary["stopped"] is None
    # about a minute of small models, plus inductor's first compiles of the compiled mode (about 30 s in a fresh
    # process): 130-190 s on two busy cores. The bound that matters is one window command's 600 s (a wall-clock
    # test on a shared machine can only catch a rehearsal grown out of all proportion)
    assert seconds < 600, f"the dry run should fit one window command (600 s), took {seconds:.0f} s"
    for part, declared in packages.declared_parts().items():
        for name in declared.files:
            found = rows(out, name)
            assert found, f"part {part} wrote no row to {name}.jsonl"
            assert all(row["status"] == "ok" and row["device"] == "cpu" for row in found), name
            assert all(row["weights"] in ("random", "cpu-pair") for row in found), name
    eq5 = rows(out, "09_handout_costs")[0]
    assert eq5["weights"] == "random" and set(eq5["T_V"]) == {"2", "3"}
    assert eq5["run_id"]  # a window's rows record their run (the H200's first rows could not say which run)
    assert "prediction" in eq5["eq5_note"] and set(eq5["eq5_prediction"]) == {"0.5", "0.6", "0.7", "0.8", "0.9"}


def test_rerun_resumes_without_measuring(dry):
    out, _, _ = dry
    before = {f.name: f.read_bytes() for f in (out / "results" / DRY).glob("*.jsonl")}
    summary = gpu_measure.run(PROFILE, out, dry_run=True, budget_s=600)
    assert summary["measured"] == 0 and summary["stopped"] is None
    assert {f.name: f.read_bytes() for f in (out / "results" / DRY).glob("*.jsonl")} == before


def test_a_part_out_of_budget_leaves_the_later_parts_their_turn(tmp_path, monkeypatch):
    """Regression: the H200's first window stopped every part when part 02's next input length (97 s, twice its
    longest) did not fit in the 86 s left, though parts 03-11 start with shorter steps."""
    from helpers.budget import Budget, BudgetExhausted

    seen = []

    def run_part(part, params, store, eq5):
        seen.append((part, store.budget.longest))
        if part == "06":
            store.budget.took(100.0)
            raise BudgetExhausted(f"budget: stopped before {part}'s next length; run the same command again")

    monkeypatch.setattr(gpu_measure, "run_part", run_part)
    summary = gpu_measure.run(PROFILE, tmp_path, only=["06", "01"], dry_run=True, budget_s=600)
    assert seen == [("06", 0.0), ("01", 0.0)]  # 01 does not inherit 06's 100-s step
    assert summary["parts_done"] == ["01"] and "06's next length" in summary["stopped"]
    budget = Budget(60, margin=30, part_start=20)
    budget.took(50)
    budget.start_part()
    assert budget.longest == 20  # a new part: its first step assumed to take part_start


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
    assert "8 files" in text and "16 MiB" in text and "--dry-run" in text and "--window" in text
    assert "python3 -m helpers.gpu_measure" in text and "--unpack" in text


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
        store.add_row({"x": 3}, {"y": 1}, {})
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
        if "device" in config:  # notebook 01's check is keyed by what it checks only (its file is the profile's)
            config["device"] = "cuda"
        row["device"] = "cuda"
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
@pytest.mark.parametrize("name", ["01_gpu_memory_math", "06_forward_pass_scaling", "07_speculative_decoding",
                                  "09_speedup_analysis", "10_tree_and_lookup_decoding",
                                  "11_long_context_self_speculation", "12_draft_design",
                                  "13_drafting_from_the_target", "14_speculative_serving"])
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
    if name == "09_speedup_analysis":  # the window's eager/graphs rows: the report's tables, written by run_all
        goals = nb09.report_window(profile)
        assert (tmp_path / "report" / "generated" / profile / "00_gpu_graphs.tex").exists()
        assert (tmp_path / "report" / "generated" / profile / "00_gpu_e2e.tex").exists()
        assert (tmp_path / "report" / "generated" / profile / "00_gpu_kernels.tex").exists()
        assert "gpu_launch_bound" in (tmp_path / "report" / "generated" / profile / "00_gpu.numbers.tex").read_text()
        assert any("identical to AR" in line for line in goals)
        assert (tmp_path / "report" / "generated" / profile / "00_gpu_decode.tex").exists()  # the decode part
        assert "\\wbset{mf_measured}{1}" in numbers


def _cost_row(target, draft, decode, t_t, t_d, target_mb, draft_mb, layers=(36, 28), weights="random"):
    return {"target": target, "draft": draft, "decode": decode, "target_step_s": t_t, "T_D": t_d, "c": t_d / t_t,
            "weights": weights, "target_layers": layers[0], "draft_layers": layers[1],
            "target_decode_bytes": target_mb * 1e6 * layers[0], "target_weight_bytes": target_mb * 1e6 * layers[0],
            "draft_decode_bytes": draft_mb * 1e6 * layers[1], "draft_weight_bytes": draft_mb * 1e6 * layers[1],
            "device_name": "NVIDIA H100 80GB HBM3", "verify_ratio": {"2": 1.1}}


def test_repeat_spread_compares_the_same_target_timed_for_two_pairs():
    """Regression: the H200 timed Qwen3-8B's eager step at 23.8 ms for one pair and 35.0 ms for the next (graphs:
    7.20 and 7.28 ms); the report now says eager terms compare within a pair only."""
    rows = [_cost_row("Qwen/Qwen3-8B", d, "eager", t, 0.02, 15e3, 1e3) for d, t in (("a", 0.0238), ("b", 0.0350))]
    rows += [_cost_row("Qwen/Qwen3-8B", d, "graphs", t, 0.003, 15e3, 1e3) for d, t in (("a", 0.0072), ("b", 0.00728))]
    numbers = gpu_costs.repeat_spread(rows)
    assert numbers["gpu_repeat_target"] == "Qwen3-8B" and numbers["gpu_repeat_eager_spread"] == pytest.approx(35 / 23.8)
    assert numbers["gpu_repeat_graphs_pct"] == pytest.approx(100 * (7.28 / 7.2 - 1))
    assert gpu_costs.repeat_spread(rows[:1] + rows[2:3]) == {}  # each timed once: nothing to compare


def test_report_numbers_say_launch_bound_only_where_the_rows_show_it():
    """The report's paragraph on eager against graphs is computed from the rows (it was fixed prose): a step whose
    time per layer barely moves while the bytes per layer differ 10x is launch-bound, one that follows the bytes
    is not; graph rows give the speedup over eager and the cost per layer above the HBM floor."""
    flat = [_cost_row("big", "small", "eager", 0.036, 0.028, 400, 40)]  # 1 ms per layer both, 10x the bytes
    numbers = gpu_costs.report_numbers(flat)
    assert numbers["gpu_launch_bound"] == 1 and numbers["gpu_eager_time_spread"] == pytest.approx(1.0)
    assert numbers["gpu_eager_bytes_spread"] == pytest.approx(10.0) and numbers["gpu_eager_c_max"] == pytest.approx(
        0.028 / 0.036)
    following = [_cost_row("big", "small", "eager", 0.036, 0.0028, 400, 40)]  # time per layer follows the bytes
    assert gpu_costs.report_numbers(following)["gpu_launch_bound"] == 0
    graphs = _cost_row("big", "small", "graphs", 0.009, 0.002, 400, 40)
    numbers = gpu_costs.report_numbers(flat + [graphs])
    floor_ms = 400e6 * 36 / 3.35e12 * 1e3
    assert numbers["gpu_graphs_speedup_min"] == pytest.approx(4.0)
    assert numbers["gpu_graphs_share_pct_min"] == pytest.approx(100 * floor_ms / 9.0, rel=1e-3)
    assert numbers["gpu_graphs_above_us_min"] == pytest.approx((9.0 - floor_ms) * 1e3 / 36, rel=1e-3)
    assert "gpu_graphs_kernel_bound" not in numbers  # one target: no spread to compare
    assert gpu_costs.report_numbers([]) == {}


def test_a_failing_graph_measurement_is_skipped_not_fatal(capsys):
    def boom():
        raise RuntimeError("capture failed")

    gpu_costs.tolerate_graph_failure("graphs", {"kind": "x"}, boom)
    assert "GRAPHS MEASUREMENT FAILED" in capsys.readouterr().out
    with pytest.raises(RuntimeError):
        gpu_costs.tolerate_graph_failure("eager", {"kind": "x"}, boom)  # eager failures stay errors


def test_dry_run_measures_eager_and_graph_rows_with_their_proof(dry):
    out, _, _ = dry
    costs = {row["decode"]: row for row in rows(out, "09_handout_costs")}
    assert set(costs) == {"eager", "graphs", "compiled"}
    assert costs["graphs"]["graph_replays"] == 0  # a CPU captures nothing; on a GPU the row counts the replays
    assert costs["compiled"]["layer_kernels"] == costs["graphs"]["layer_kernels"]  # the eager count, for reference
    assert costs["compiled"]["compile_s"] > 0  # the first calls of each width: the compile of the layer
    cpu_pair_modes = {row["decode"] for row in rows(out, "09_compiled_decode")}
    assert cpu_pair_modes == {"eager", "graphs"}  # the CPU pair's part keeps its modes
    e2e = [row for row in rows(out, "09_compiled_decode") if row["kind"] == "e2e"]
    assert e2e and all(row["decode"] == "graphs" and row["identical_to_ar"] for row in e2e)


def test_dry_run_decode_part_times_every_mode_and_both_peers(dry):
    """The model file's first window part, rehearsed: a model in every decode mode (the Llama analog; the eq5 part
    rehearses the compiled Qwen3 analogs), with its compile seconds, and transformers' eager and compiled static-cache
    decoding beside it (part peers)."""
    from helpers.experiments.nb09 import decode_modes

    out, _, _ = dry
    found = rows(out, decode_modes.DECODE_STEPS)
    steps = {(r["model"], r["decode"]): r for r in found if r["kind"] == "decode_step"}
    assert set(steps) == {("cpu/Llama-3.1-8B", mode) for mode in decode_modes.MODES}
    assert all(r["wall_ms"] > 0 and r["compile_s"] >= 0 and r["kernels"] > 0 for r in steps.values())
    assert steps["cpu/Llama-3.1-8B", "eager"]["layer_kernels"] == 19
    peers = {r["peer"]: r for r in found if r["kind"] == "decode_peer"}
    assert set(peers) == set(decode_modes.PEERS) and all(r["wall_ms"] > 0 for r in peers.values())
    table = decode_modes.decode_table(found)
    assert set(table["mode"]) == set(decode_modes.MODES) | set(decode_modes.PEERS)
    assert len(decode_modes.speed_against_peer(table)) == 1  # the Llama analog has both


def test_gpu_profiles_have_every_notebook_parameter():
    """Regression: part 12 raised KeyError 'design_drafts' under gpu-h100 (the dry run's overrides hid it). The
    profile's file overrides the notebooks' defaults (the CPU profile), as papermill does."""
    cpu = yaml.safe_load((paths.PARAMS_DIR / "cpu.yaml").read_text())
    for profile in ("gpu-h100", "gpu-h200"):
        params, eq5 = gpu_measure.profile_params(profile, dry_run=False)
        assert set(cpu) <= set(params) and params["device"] == "cuda" and params["profile"] == profile
        assert eq5.modes == ["eager", "graphs", "compiled"]


def test_window_rehearsal_resumes_archives_and_reports_goals(dry, tmp_path):
    """--window --dry-run over the dry run's rows: the self-check passes (the static step equals eager), nothing
    is measured again, and $OUT holds one archive and one summary (at most 8 files come back)."""
    from helpers import gpu_window

    work, _, _ = dry
    out = tmp_path / "out"
    summary = gpu_measure.window(out, dry_run=True, work=work)
    assert summary["self_check"]["ok"] and summary["self_check"]["graphs"]
    assert summary["self_check"]["step_kernels"] is None  # a diagnostic for the GPU: counted only with CUDA
    assert "kernel count: no CUDA here" in summary["self_check"]["notes"]
    assert summary["measured"] == 0 and summary["stopped"] is None
    assert summary["parts_done"] == list(gpu_measure.PARTS)
    assert sorted(f.name for f in out.iterdir()) == [f"window-{DRY}.tar.gz", gpu_window.SUMMARY]
    assert any("CPU pair end to end (graphs)" in line for line in summary["goals"])
    profile, folder = gpu_window.unpack(out / f"window-{DRY}.tar.gz", tmp_path / "results")
    assert profile == DRY
    assert {f.name for f in folder.glob("*.jsonl")} == {f.name for f in (work / "results" / DRY).glob("*.jsonl")}


def test_window_deadline_stops_between_configurations(tmp_path, capsys):
    from helpers import gpu_window

    summary = gpu_measure.window(tmp_path / "out", dry_run=True, work=tmp_path / "work", deadline_s=3)
    assert summary["self_check"]["ok"] and summary["stopped"] and "run the same command again" in summary["stopped"]
    assert "INCOMPLETE" in capsys.readouterr().out
    assert (tmp_path / "out" / gpu_window.SUMMARY).exists()


def test_window_profile_follows_the_gpu():
    from helpers import gpu_window

    assert gpu_window.detect_profile("NVIDIA H100 80GB HBM3") == "gpu-h100"
    assert gpu_window.detect_profile("NVIDIA H200") == "gpu-h200"
    with pytest.raises(SystemExit, match="--profile"):
        gpu_window.detect_profile("NVIDIA A10G")


def test_goals_read_from_rows(tmp_path):
    from helpers import gpu_window

    base = {"status": "ok", "target": "Qwen/Qwen3-8B", "draft": "Qwen/Qwen3-0.6B", "device_name": "NVIDIA H100 80GB HBM3",
            "target_weight_bytes": 16.4e9}
    lines = [dict(base, config_key="a", decode="eager", c=0.6, target_step_s=0.020, T_D=0.012, verify_ratio={"2": 1.1}),
             dict(base, config_key="b", decode="graphs", c=0.12, target_step_s=0.0060, T_D=0.00072, verify_ratio={"2": 1.05},
                  graph_replays=300)]
    (tmp_path / "09_handout_costs.jsonl").write_text("\n".join(json.dumps(r) for r in lines) + "\n")
    text = "\n".join(gpu_window.goals(tmp_path))
    assert "Qwen/Qwen3-0.6B graphs: c (eager 0.600; 300 replays): 0.12 (goal <= 0.15: met)" in text
    assert "step with graphs: roofline share: 0.816 (goal >= 0.7: met)" in text  # 16.4e9 B / 3.35e12 B/s / 6.0 ms
    lines[1]["graph_replays"] = 0  # a row whose graphs never replayed proves nothing
    (tmp_path / "09_handout_costs.jsonl").write_text("\n".join(json.dumps(r) for r in lines) + "\n")
    assert "met" not in "\n".join(gpu_window.goals(tmp_path))


def test_decode_bytes_leave_out_an_untied_input_embedding():
    from tiny_models import tiny_qwen3

    untied, tied = tiny_qwen3(0), tiny_qwen3(0, tie=True)
    embedding = untied.get_input_embeddings().weight
    total = sum(t.numel() * t.element_size() for t in untied.parameters())
    assert gpu_costs.decode_weight_bytes(untied) == total - embedding.numel() * embedding.element_size()
    assert gpu_costs.decode_weight_bytes(tied) == sum(t.numel() * t.element_size() for t in tied.parameters())


def test_eager_rows_need_no_minimal_view_so_other_architectures_measure():
    """graph_proof inspects the model file's view only for graphs rows: an eager row of an architecture the model file
    does not implement (here GPT-2) is measured (regression: the H100 window stopped at Llama-3.1-8B's eager Eq. 5
    row with 'implements the Qwen3 architecture', when the model file ran Qwen3 only); a Llama row records its
    kernels per layer now that the model file runs it."""
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_embd=32, n_layer=1, n_head=2)).eval()
    assert specdec_costs.graph_proof("eager", (gpt2, gpt2), lambda: {"target_step_s": 1.0}) == {"target_step_s": 1.0}
    with pytest.raises(ValueError, match="model_type='gpt2'"):
        specdec_costs.graph_proof("graphs", (gpt2,), lambda: {"target_step_s": 1.0})
    llama = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                         num_attention_heads=2)).eval()
    assert specdec_costs.graph_proof("eager", (llama,), lambda: {"target_step_s": 1.0}) == {"target_step_s": 1.0, "layer_kernels": 19}


def test_decode_goal_lines_judge_the_8b_steps_the_peer_and_the_pairs():
    """The model-file issue's GPU goals, from rows as the decode and eq5 parts write them (an H200: 4.8 TB/s)."""
    from helpers.experiments.nb09 import decode_modes, goals as nb09_goals

    def step(model, mode, ms, bytes_read=15e9, compile_s=40.0):
        return {"kind": "decode_step", "model": model, "decode": mode, "wall_ms": ms, "decode_bytes": bytes_read,
                "device_name": "NVIDIA H200", "kernels": 400, "num_layers": 36, "compile_s": compile_s,
                "graph_replays": 30}

    steps = [step("Qwen/Qwen3-8B", "compiled", 4.2), step("meta-llama/Llama-3.1-8B", "compiled", 6.0, compile_s=120),
             {"kind": "decode_peer", "model": "Qwen/Qwen3-8B", "peer": "hf-static-compiled", "wall_ms": 5.5,
              "device_name": "NVIDIA H200"}]
    costs = [{"target": "Qwen/Qwen3-8B", "draft": "Qwen/Qwen3-0.6B", "decode": "compiled", "c": 0.15, "target_step_s": 0.0042,
              "T_D": 0.00063, "verify_ratio": {"2": 1.02, "3": 1.03, "5": 1.05, "7": 1.1}}]
    decode = decode_modes.decode_table(steps)
    goals = {g["goal"]: g for g in nb09_goals.decode_goals(decode, decode_modes.speed_against_peer(decode),
                                                            decode_modes.pair_terms(costs))}
    qwen, llama = goals["Qwen/Qwen3-8B compiled step, roofline share"], goals["meta-llama/Llama-3.1-8B compiled step, roofline share"]
    assert round(qwen["value"], 2) == 0.74 and qwen["bound"] == ">= 0.7" and qwen["met"] and not llama["met"]
    assert goals["Qwen/Qwen3-8B compiled step, first call s"]["met"]
    assert not goals["meta-llama/Llama-3.1-8B compiled step, first call s"]["met"]  # 120 s > 90 s
    peer = goals["Qwen/Qwen3-8B: hf-static-compiled / compiled"]
    assert round(peer["value"], 2) == 1.31 and peer["met"]
    pair = "Qwen/Qwen3-8B / Qwen/Qwen3-0.6B compiled"
    assert goals[f"{pair}: c"]["value"] == 0.15 and goals[f"{pair}: c"]["met"]
    (alpha,) = [g for name, g in goals.items() if name.startswith(f"{pair}: break-even alpha")]
    assert alpha["met"] and alpha["bound"] == "<= 0.35"
    assert nb09_goals.goal_line(goals[f"{pair}: c"]) == f"{pair}: c: 0.15 (goal <= 0.2: met)"


def _e2e_row(draft, gamma, **extra):
    return {"status": "ok", "kind": "e2e", "target": "cpu-pair/target", "draft": draft, "gamma": gamma,
            "decode": "graphs", "speedup": 1.3, "alpha": 0.7, "identical_to_ar": True, **extra}


def test_e2e_table_prints_no_pair_totals_or_zero_phases_as_row_measurements():
    """Regression: 00_gpu_e2e printed the pair's replay total on every gamma row, and the H200's rows record draft,
    verify and prefill as 0.0 s (a CUDA run timed whole): neither is a per-row measurement."""
    old = [_e2e_row(d, g, graph_replays=total, time_draft_s=0.0, time_verify_s=0.0, time_prefill_s=0.0)
           for d, total in (("cpu-pair/draft", 23318), ("cpu-pair/draft-2l", 15444)) for g in (2, 7)]
    table, note = gpu_costs.e2e_report_table(gpu_costs.e2e_table(old))
    assert "replays" not in table and not {"draft s", "verify s", "prefill s"} & set(table.columns)
    assert "draft 23,318 over its whole run" in note and "draft-2l 15,444" in note and "0.0 s is no measurement" in note
    new = [_e2e_row("cpu-pair/draft", g, graph_replays=100 * g, graph_replays_scope="row", pair_graph_replays=999,
                    time_draft_s=0.1 * g, time_verify_s=0.05, time_prefill_s=0.4) for g in (2, 7)]
    table, note = gpu_costs.e2e_report_table(gpu_costs.e2e_table(new))
    assert table["replays"].tolist() == [200, 700] and table["draft s"].tolist() == [0.2, pytest.approx(0.7)]
    assert note == ""


def test_floor_captions_name_the_decode_bytes(tmp_path, monkeypatch):
    """The roofline's numerator is the decode bytes (untied input embedding excluded), and the captions say so."""
    report = " ".join((paths.REPO_ROOT / "report" / "report.tex").read_text().split())
    assert "every weight but an untied input embedding" in report  # \\wbdecodebytes, in every floor caption
    row = {"device_name": "NVIDIA H200", "target_weight_bytes": 16.4e9, "target_decode_bytes": 15.2e9, "target_step_s": 0.007,
           "T_D": 0.003, "c": 0.43, "target": "t", "draft": "d", "verify_ratio": {"2": 1.1}}
    share = gpu_costs.cost_table([row])["roofline share"].iloc[0]
    assert share == pytest.approx(15.2e9 / gpu_costs.memory_bandwidth("NVIDIA H200") / 0.007)


def test_every_part_is_one_declaration_in_the_package_of_the_notebook_it_feeds():
    """Issue 42: a GPU measurement is one ``Part`` in its notebook's package; the window orders every declared part
    and nothing else, and each part's files are named after the notebook whose package declares it."""
    declared = packages.declared_parts()
    assert sorted(declared) == sorted(gpu_measure.PARTS)
    for module in packages.notebook_packages():
        number = module.__name__.rsplit(".nb", 1)[1]
        for part in getattr(module, "GPU_PARTS", ()):
            assert part.files and all(name.startswith(number + "_") for name in part.files), (module.__name__, part)
    assert gpu_measure.part_files(["decode", "peers"]) == ["09_decode_modes"]  # a shared file counted once


def test_a_declared_part_is_measured_by_the_window_without_editing_gpu_measure(tmp_path, monkeypatch):
    seen = []
    part = packages.Part("new", ("06_forward_pass_scaling",), lambda params, store, settings: seen.append(params))
    monkeypatch.setattr(gpu_measure, "declared_parts", lambda: {**{p: None for p in gpu_measure.PARTS}, "new": part})
    monkeypatch.setattr(gpu_measure, "PARTS", gpu_measure.PARTS + ("new",))
    summary = gpu_measure.run(PROFILE, tmp_path, only=["new"], dry_run=True, budget_s=600)
    assert summary["parts_done"] == ["new"] and len(seen) == 1
