"""The exact pins (constraints.txt, what make and CI install), the conda environment (environment.yml) and the
ranges of pyproject.toml (what `pip install -e .` accepts next to a GPU user's own torch) agree."""
import re
import tomllib

import pytest
import yaml

from helpers import paths


def _split(requirement: str, operator: str = "==") -> tuple[str, str]:
    name, _, version = requirement.partition(operator)
    return name.strip().lower(), version.strip()


def constraint_pins() -> dict:
    lines = (paths.REPO_ROOT / "constraints.txt").read_text().splitlines()
    pins = dict(_split(line) for line in lines if line.strip() and not line.startswith("#"))
    assert all(pins.values()), f"constraints.txt: pin every package exactly: {pins}"
    return pins


def project_ranges() -> dict:
    project = tomllib.loads((paths.REPO_ROOT / "pyproject.toml").read_text())["project"]
    return {re.split(r"[<>=!~ ]", r, maxsplit=1)[0].lower(): r for r in project["dependencies"]}


def conda_pins() -> dict:
    env = yaml.safe_load((paths.REPO_ROOT / "environment.yml").read_text())
    pins = {}
    for entry in env["dependencies"]:
        if isinstance(entry, dict):
            pins.update(_split(r) for r in entry["pip"] if not r.startswith("-e"))
        elif entry.startswith("python"):
            assert entry.replace(" ", "") in ("python=3.11", "python==3.11"), entry
    return pins


def _version(text: str) -> tuple:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def test_constraints_and_conda_pins_agree():
    assert constraint_pins() == conda_pins()


def test_every_pin_lies_inside_the_project_range():
    ranges, pins = project_ranges(), constraint_pins()
    assert set(ranges) == set(pins)
    for name, requirement in ranges.items():
        for operator, bound in re.findall(r"(>=|<)\s*([\d.]+)", requirement):
            inside = _version(pins[name]) >= _version(bound) if operator == ">=" else \
                _version(pins[name]) < _version(bound)
            assert inside, f"{name}=={pins[name]} is outside {requirement}"


def test_ranges_admit_the_gpu_machine_and_python_310_to_313():
    """The lent GPU machine has Python 3.12, torch 2.11, transformers 5.17 (none of them our pins)."""
    project = tomllib.loads((paths.REPO_ROOT / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == ">=3.10,<3.14"
    ranges = project_ranges()
    assert _version(re.search(r">=\s*([\d.]+)", ranges["torch"]).group(1)) <= (2, 11)
    assert _version(re.search(r">=\s*([\d.]+)", ranges["transformers"]).group(1)) <= (5, 17)


def test_make_installs_with_the_constraints():
    makefile = (paths.REPO_ROOT / "Makefile").read_text()
    assert "-c constraints.txt -e ." in makefile and "constraints.txt" in makefile.split("$(STAMP):")[1].split("\n")[0]


def test_the_tracked_tree_fits_the_gpu_machine():
    """Everything git tracks travels to a lent GPU machine, which takes at most 64 MiB: stay under 60."""
    import shutil
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    if shutil.which("git") is None or not (root / ".git").exists():
        pytest.skip("not a git checkout")
    files = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout.split(b"\0")
    total = sum((root / name.decode()).stat().st_size for name in files if name and (root / name.decode()).is_file())
    assert total < 60 * 2**20, f"tracked files take {total / 2**20:.1f} MiB (limit 60): untrack generated files"
