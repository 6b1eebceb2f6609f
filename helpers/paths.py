"""Repository paths that do not depend on the working directory.

Papermill and nbval start kernels in different directories, so every notebook builds its paths from
here. Generated outputs (results, figures, report tables) go under ``OUTPUT_ROOT``, which is the
repository root unless the environment variable ``WORKBOOK_OUTPUT_ROOT`` points elsewhere (the tests
do that so that executing a notebook never touches the committed results).
"""
from __future__ import annotations

import os
import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = REPO_ROOT / "data"
CONFIGS_DIR = DATA_DIR / "configs"
NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
PARAMS_DIR = REPO_ROOT / "params"
REPORT_DIR = REPO_ROOT / "report"

_PROFILE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def output_root() -> Path:
    """Where results/, figures/ and report/generated/ live (the repo unless redirected)."""
    override = os.environ.get("WORKBOOK_OUTPUT_ROOT")
    return Path(override).resolve() if override else REPO_ROOT


def check_profile(profile: str) -> str:
    """Profiles name directories, so keep them to safe characters."""
    if not isinstance(profile, str) or not _PROFILE_RE.match(profile):
        raise ValueError(
            f"profile name {profile!r} is not valid: use letters, digits, '-', '_' or '.', e.g. 'cpu' or 'gpu-h100'"
        )
    return profile


def _profile_dir(kind: Path, profile: str, create: bool) -> Path:
    path = kind / check_profile(profile)
    if create:
        path.mkdir(parents=True, exist_ok=True)
    return path


def results_dir(profile: str, create: bool = True) -> Path:
    """``results/<profile>/``: one JSONL file per notebook."""
    return _profile_dir(output_root() / "results", profile, create)


def figures_dir(profile: str, create: bool = True) -> Path:
    """``figures/<profile>/``: PDF (and PNG preview) figures."""
    return _profile_dir(output_root() / "figures", profile, create)


def generated_dir(profile: str, create: bool = True) -> Path:
    """``report/generated/<profile>/``: booktabs tables and number macros the report inputs."""
    return _profile_dir(output_root() / "report" / "generated", profile, create)
