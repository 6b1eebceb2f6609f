"""The pip pins (pyproject.toml) and the conda environment (environment.yml) must list the same packages."""
import tomllib

import yaml

from helpers import paths


def pip_pins() -> dict:
    project = tomllib.loads((paths.REPO_ROOT / "pyproject.toml").read_text())["project"]
    pins = {}
    for requirement in project["dependencies"]:
        name, _, version = requirement.partition("==")
        assert version, f"{requirement}: pin an exact version"
        pins[name.strip().lower()] = version.strip()
    return pins


def conda_pins() -> dict:
    env = yaml.safe_load((paths.REPO_ROOT / "environment.yml").read_text())
    pins = {}
    for entry in env["dependencies"]:
        if isinstance(entry, dict):
            for requirement in entry["pip"]:
                if requirement.startswith("-e"):
                    continue
                name, _, version = requirement.partition("==")
                pins[name.strip().lower()] = version.strip()
        elif entry.startswith("python"):
            assert entry.replace(" ", "") in ("python=3.11", "python==3.11"), entry
    return pins


def test_pip_and_conda_pins_agree():
    assert pip_pins() == conda_pins()


def test_transformers_is_pinned():
    assert pip_pins()["transformers"].count(".") == 2
