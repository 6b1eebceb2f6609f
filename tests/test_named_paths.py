"""Every file path and every ``helpers`` name that the report, the notebooks' prose and the README mention exists
(regression: the report named helpers/kv_cache.py, helpers/cached_decoder.py and helpers/specdec_batched.py after
a redesign had moved them)."""
import importlib
import re

import nbformat
import pytest

from helpers import paths

ROOT = paths.REPO_ROOT
PATH_RE = re.compile(r"(?<![\w/.])((?:helpers|notebooks|tests|data|params|report|submission|tools)/[\w./*-]*[\w*])")
# what a run writes (not in a fresh clone) and examples the prose invents on purpose
NOT_IN_A_CLONE = ("report/report", "report/build", "report/generated", "params/gpu-a100.yaml")
NAME_RE = re.compile(r"(?<![\w/.])(helpers(?:\.[A-Za-z_]\w*)+)")


def texts():
    for path in sorted((ROOT / "report" / "sections").glob("*.tex")) + [ROOT / "report" / "report.tex",
                                                                        ROOT / "README.md"]:
        yield path.relative_to(ROOT), path.read_text()
    contributing = (ROOT / "docs" / "CONTRIBUTING.md").read_text()
    yield "docs/CONTRIBUTING.md", contributing.split("## Module history")[0]  # the history names old modules
    for path in sorted(paths.NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        yield path.relative_to(ROOT), "\n".join(c.source for c in notebook.cells if c.cell_type == "markdown")


def resolves(name: str) -> bool:
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(target, attribute):
                return False
            target = getattr(target, attribute)
        return True
    return False


@pytest.mark.parametrize("where,text", list(texts()), ids=lambda v: str(v) if not isinstance(v, str) else None)
def test_named_paths_and_modules_exist(where, text):
    text = text.replace("\\_", "_").replace("\\allowbreak", "")
    text = text.replace("\\*", "*").replace("\\textasteriskcentered{}", "*")
    missing = [p for p in PATH_RE.findall(text) if not p.startswith(NOT_IN_A_CLONE)
               and not (list(ROOT.glob(p)) if "*" in p else (ROOT / p).exists())]
    unknown = [n for n in NAME_RE.findall(text) if not resolves(n)]
    assert not missing and not unknown, f"{where}: paths {missing}, names {unknown}"
