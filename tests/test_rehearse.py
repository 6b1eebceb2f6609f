"""helpers.rehearse: the GPU student's run (params/gpu.yaml, every notebook, the GPU report) rehearsed on the CPU."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from helpers import paths, rehearse
from helpers.models.configs import load_config
from helpers.run_all import load_params

HANDOUT_IDS = {"Qwen/Qwen3-0.6B", "Qwen/Qwen3-1.7B", "Qwen/Qwen3-8B", "meta-llama/Llama-3.1-8B",
               "meta-llama/Llama-3.2-1B", "meta-llama/Llama-2-7b-hf", "allenai/OLMo-7B-0724-hf"}


def test_every_hub_id_of_the_gpu_profile_is_rehearsed():
    assert HANDOUT_IDS <= set(rehearse.handout_ids(load_params("gpu")))
    assert rehearse.handout_ids({"pairs": [["a/b", "Qwen/Qwen3-8B"]], "x": "Qwen/Qwen3-8B", "n": 3}) == ["Qwen/Qwen3-8B"]


@pytest.mark.parametrize("model_id", sorted(HANDOUT_IDS))
def test_a_shrunk_config_keeps_the_ids_architecture(model_id):
    real, small = load_config(model_id), rehearse.shrunk_config(model_id, 4096, 0)
    assert type(small) is type(real) and small.model_type == real.model_type
    assert (small.num_attention_heads, small.num_key_value_heads) == (real.num_attention_heads,
                                                                      real.num_key_value_heads)
    assert small.hidden_size < real.hidden_size and small.num_hidden_layers < real.num_hidden_layers
    assert getattr(small, "rope_scaling", None) == getattr(real, "rope_scaling", None)  # Llama 3's frequency scaling
    assert getattr(small, "tie_word_embeddings", None) == getattr(real, "tie_word_embeddings", None)
    assert small.vocab_size == 4096 and small.eos_token_id == 0


def test_the_overlay_changes_sizes_only(monkeypatch, tmp_path):
    params, gpu = rehearse.rehearsal_params(), load_params("gpu")
    assert {k for k in params if params[k] != gpu.get(k)} <= set(yaml.safe_load(rehearse.OVERLAY.read_text()))
    assert params["sd_pairs"] == gpu["sd_pairs"] and params["sd_gammas"] == [2, 3, 5, 7]  # Table 1's runs
    for bad, message in (({"sd_pairs": [["Qwen/Qwen3-8B", "Qwen/Qwen3-0.6B"]]}, "changes the models"),
                         ({"sd_gama": [2]}, "no notebook declares")):
        overlay = tmp_path / "overlay.yaml"
        overlay.write_text(yaml.safe_dump(bad))
        monkeypatch.setattr(rehearse, "OVERLAY", overlay)
        with pytest.raises(ValueError, match=message):
            rehearse.rehearsal_params()


def test_a_checkpoint_loads_through_the_ordinary_hub_path(tmp_path):
    """The id resolves offline through from_pretrained in a fresh process pointed at the rehearsal's Hub cache."""
    rehearse.write_checkpoint("meta-llama/Llama-3.2-1B", tmp_path / "hub")
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}
    code = ("from helpers.models import load_model; m, t = load_model('meta-llama/Llama-3.2-1B'); "
            "print(type(m).__name__, m.weights_label, m.dtype, len(t))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["LlamaForCausalLM", "pretrained", "torch.bfloat16", "4096"]


def test_a_notebook_assert_becomes_a_recorded_claim(tmp_path, monkeypatch):
    import ast

    monkeypatch.setenv("WORKBOOK_REHEARSAL_CLAIMS", str(tmp_path / "claims.jsonl"))
    monkeypatch.setenv("WORKBOOK_REHEARSAL_NOTEBOOK", "02_x")
    tree = rehearse._AssertToClaim().visit(ast.parse("assert 1 > 2, 'one exceeds two'\nassert True\nafter = 1"))
    scope = {"_wb_rehearse": rehearse}
    exec(compile(tree, "<cell>", "exec"), scope)
    assert scope["after"] == 1  # the cell went on past the claim
    assert rehearse.recorded_claims(tmp_path) == [{"notebook": "02_x", "claim": "one exceeds two", "check": "1 > 2"}]


@pytest.mark.notebooks
def test_a_hung_notebook_runs_once_more_and_a_second_hang_stops_the_rehearsal():
    from helpers import run_all

    class FakeRunAll:
        CellTimedOut = run_all.CellTimedOut

        def __init__(self, hangs):
            self.hangs, self.calls = hangs, 0

        def main(self, argv):
            self.calls += 1
            if self.calls <= self.hangs:
                raise run_all.CellTimedOut("TIMED OUT: 10_tree.ipynb")

    once = FakeRunAll(hangs=1)
    rehearse.run_notebook_once_more_on_a_hang(once, ["--only", "10"])
    assert once.calls == 2
    twice = FakeRunAll(hangs=2)
    with pytest.raises(run_all.CellTimedOut):
        rehearse.run_notebook_once_more_on_a_hang(twice, ["--only", "10"])
    assert twice.calls == 2
    assert int(rehearse.environment(Path("/tmp"))["WORKBOOK_CELL_TIMEOUT"]) == rehearse.CELL_TIMEOUT_S


def test_the_rehearsal_runs_every_notebook_and_builds_the_gpu_report(tmp_path):
    """The goal: all 13 notebooks under the GPU profile's code path, Table 1 for the three handout pairs x gamma in
    {2, 3, 5, 7}, Tables 2 and 3, every §1.3/§2.1 table and figure, and the GPU report."""
    env = {k: v for k, v in os.environ.items() if k != "WORKBOOK_OUTPUT_ROOT"}
    result = subprocess.run([sys.executable, "-m", "helpers.rehearse", "--root", str(tmp_path)], env=env,
                            capture_output=True, text=True, cwd=paths.REPO_ROOT)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    out = tmp_path / "out"
    executed = sorted(p.name for p in (out / "build" / "gpu").glob("*.ipynb"))
    assert executed == [p.name for p in sorted(paths.NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb"))]
    generated, figures = out / "report" / "generated" / "gpu", out / "figures" / "gpu"
    rows = [line for line in (generated / "07_specdec_table.tex").read_text().splitlines() if line.count("&") > 5]
    runs = {tuple(cell.strip() for cell in line.split("&")[:3]) for line in rows[1:]}
    pairs = load_params("gpu")["sd_pairs"]
    assert runs == {(t, d, str(g)) for t, d in pairs for g in (2, 3, 5, 7)}, runs
    for name in ("02_input_sweep", "02_output_sweep", "02_models", "03_kv_times", "03_kv_costs", "08_gpu_specs",
                 "08_best_worst_measured", "08_best_worst_predicted"):
        assert (generated / f"{name}.tex").exists(), name
    for name in ("02_input_sweep", "02_output_sweep", "03_kv_baseline", "03_kv_long_prompt", "03_kv_small_model",
                 "03_kv_old_model", "03_kv_compare"):
        assert (figures / f"{name}.pdf").exists(), name
    models = {json.loads(line)["model"] for line in (out / "results" / "gpu" / "02_generation_benchmarks.jsonl")
              .read_text().splitlines()}
    assert set(load_params("gpu")["gen_models"]) <= models  # §1.3.3's three models, OLMo among them
    pdf = out / "report" / "report-gpu.pdf"
    assert pdf.stat().st_size > 50_000
    if shutil.which("pdftotext"):  # every number the prose names was computed: no "[name?]" marker, no "??"
        text = subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True).stdout
        assert not re.findall(r"\[\w+\?\]|\?\?", text), re.findall(r".{60}(?:\[\w+\?\]|\?\?).{20}", text)
    assert re.search(r"rehearsal done in \d+ s", result.stdout)
