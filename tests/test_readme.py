"""README.md says what the code and the parameter files say: the GPU section's per-notebook download sizes are
recomputed from params/gpu.yaml and data/configs/, and the first-run instructions hold what a new student needs."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from helpers.models.configs import load_config
from helpers.models.registry import parameter_count

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
GPU = yaml.safe_load((ROOT / "params" / "gpu.yaml").read_text(encoding="utf-8"))

# the params/gpu.yaml keys naming the Hub models each notebook loads (pretrained weights; the rest load none:
# 01 uses miniatures with random weights, 08 reads 07's rows, 12-14 the shipped CPU pair and random weights)
NOTEBOOK_MODEL_KEYS = {
    "01": [], "02": ["gen_models"], "03": ["kvb_baseline_model", "kvb_small_model", "kvb_old_model"],
    "04": ["impl_model"], "05": ["batching_model"], "06": ["fp_model", "fp_verify_model"], "07": ["sd_pairs"],
    "08": [], "09": ["analysis_target", "analysis_draft"], "10": ["tree_target", "tree_draft"],
    "11": ["selfspec_model"], "12": [], "13": [], "14": [],
}


def _flatten(value) -> list[str]:
    return [x for item in (value if isinstance(value, list) else [value]) for x in _flatten_one(item)]


def _flatten_one(item) -> list[str]:
    return _flatten(item) if isinstance(item, list) else [item]


def gpu_models(notebook: str) -> list[str]:
    """The Hub models notebook ``notebook`` loads under params/gpu.yaml, in order, each once."""
    return list(dict.fromkeys(m for key in NOTEBOOK_MODEL_KEYS[notebook] for m in _flatten(GPU[key])))


def download_gb(model_id: str) -> float:
    """bf16 bytes (2 per parameter) of the configuration in data/configs/, in GB, as the README rounds them."""
    return round(2 * parameter_count(load_config(model_id)) / 1e9, 1)


def _gpu_table() -> dict[str, str]:
    section = README[README.index("## Running on a GPU"):]
    table = section[section.index("| notebook | models it loads"):]
    rows = {}
    for line in table.splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = cells[1]
    return rows


def test_gpu_table_has_every_notebook():
    notebooks = sorted(p.name[:2] for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert sorted(_gpu_table()) == notebooks == sorted(NOTEBOOK_MODEL_KEYS)


@pytest.mark.parametrize("notebook", sorted(NOTEBOOK_MODEL_KEYS))
def test_gpu_table_download_sizes(notebook):
    """Each row lists exactly the models params/gpu.yaml has the notebook load, each with 2 x its parameters."""
    cell = _gpu_table()[notebook]
    listed = re.findall(r"`([\w.-]+/[\w.-]+)` (\d+\.\d) GB", cell)
    assert [model for model, _ in listed] == gpu_models(notebook), cell
    for model, size in listed:
        assert float(size) == download_gb(model), (model, size, download_gb(model))
    if not listed:
        assert cell.startswith("none"), cell


def test_gpu_table_total_download():
    models = {m for notebook in NOTEBOOK_MODEL_KEYS for m in gpu_models(notebook)}
    total = sum(2 * parameter_count(load_config(m)) for m in models) / 1e9
    assert f"download {len(models)} models, {total:.1f} GB" in README


def test_gpu_section_names_the_separate_llama_2_licence_and_the_environment():
    section = README[README.index("## Running on a GPU"):README.index("## Models")]
    assert "meta-llama/Llama-2-7b-hf" in section and "HF_TOKEN" in section and "licence" in section
    assert "pip install -e ." in section and "3.11" in section
    assert "estimate" in section


def test_first_steps_say_how_to_run_python_in_the_venv():
    assert ". .venv/bin/activate" in README and "ModuleNotFoundError" in README
    commands = [line for block in re.findall(r"```bash\n(.*?)```", README, flags=re.S) for line in block.splitlines()]
    for line in commands:  # every CPU command names the venv's Python (GPU ones run in the GPU machine's env)
        if re.match(r"\s*python ", line) and "--device cuda" not in line:
            pytest.fail(f"a command runs plain python (fails outside the venv): {line!r}")


def test_cpu_wheel_hint_comes_before_the_first_make_run():
    assert README.index("download.pytorch.org/whl/cpu") < README.index("make run")


def test_explorers_are_introduced_with_the_disconnected_mark_and_measured_run_all_times():
    first = README[README.index("## Your first ten minutes"):README.index("## The notebooks")]
    explore = README[README.index("## Explore in JupyterLab"):README.index("## Where things appear")]
    for text in (first, explore):
        text = " ".join(text.split())
        assert "disconnected" in text and "9 to 31 seconds" in text
    assert "a few seconds" not in README


def test_notebook_counts():
    notebooks = len(list((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")))
    assert notebooks == 14
    assert not re.search(r"\ball (twelve|thirteen)\b|\b(twelve|thirteen) notebooks\b", README, flags=re.I)
