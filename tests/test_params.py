"""params/cpu.yaml must equal the notebooks' defaults; params/gpu.yaml may set only declared parameters."""
import ast

import nbformat
import pytest
import yaml

from helpers import paths

papermill = pytest.importorskip("papermill")

NOTEBOOKS = sorted(paths.NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb"))


def declared_defaults(notebook) -> dict:
    found = papermill.inspect_notebook(str(notebook))
    return {name: ast.literal_eval(spec["default"]) for name, spec in found.items()}


def profile(name: str) -> dict:
    return yaml.safe_load((paths.PARAMS_DIR / f"{name}.yaml").read_text())


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_parameters_cell_is_literal_documented_and_matches_cpu_yaml(notebook):
    nb = nbformat.read(notebook, as_version=4)
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, "exactly one cell tagged 'parameters'"
    for line in tagged[0].source.splitlines():
        if line.strip():
            assert ":" in line and "#" in line, f"annotated assignment with a '# help' comment: {line!r}"
    defaults = declared_defaults(notebook)
    assert defaults.get("profile") == "cpu" and "device" in defaults
    cpu = profile("cpu")
    for name, value in defaults.items():
        assert name in cpu, f"{notebook.name}: parameter {name!r} missing from params/cpu.yaml"
        assert cpu[name] == value, f"{notebook.name}: {name} default {value!r} != params/cpu.yaml {cpu[name]!r}"


def test_every_profile_key_is_used_somewhere():
    declared = set()
    for notebook in NOTEBOOKS:
        declared |= set(declared_defaults(notebook))
    for name in ("cpu", "gpu"):
        unused = set(profile(name)) - declared
        assert not unused, f"params/{name}.yaml sets parameters no notebook declares: {sorted(unused)}"


def test_gpu_profile_is_a_gpu_profile():
    gpu = profile("gpu")
    assert gpu["profile"] == "gpu" and gpu["device"] == "cuda"


def test_notebooks_name_the_kernel_as_jupyter_installs_it():
    """Regression: every notebook opened marked unsaved in JupyterLab because its kernelspec said "Python 3" and Lab
    rewrote it to the installed kernel's "Python 3 (ipykernel)"."""
    import json

    from helpers import paths

    for notebook in sorted(paths.NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb")):
        spec = json.loads(notebook.read_text())["metadata"]["kernelspec"]
        assert spec == {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}, notebook.name
