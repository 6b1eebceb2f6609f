"""Append-only JSONL results, one file per profile and notebook, that survive interruptions.

Each finished configuration is appended (and flushed) as one row the moment it finishes, so a crash or a
kernel restart loses at most the configuration in flight, and a rerun skips what is already measured.
Rows carry the metadata every result needs (device, dtype, versions, model, weights, seed, threads, time).
An out-of-memory configuration is a result: it is recorded with ``status="oom"`` and the sweep goes on.
"""
from __future__ import annotations

import datetime as _dt
import gc
import json
import math
import os
import platform
from pathlib import Path
from typing import Callable

import pandas as pd
import torch
import transformers

from helpers import paths
from helpers.hardware import device_info, resolve_device
from helpers.profile_env import RESULTS_ONLY_ENV, results_only  # noqa: F401 (public here too: callers import them)

STATUS_OK = "ok"
STATUS_OOM = "oom"


class MissingResultError(RuntimeError):
    """A configuration is not in the results file and ``WORKBOOK_RESULTS_ONLY`` forbids measuring it."""


def require_live(device, what: str) -> None:
    """Raise :class:`MissingResultError` when ``device`` is not on this machine and ``WORKBOOK_RESULTS_ONLY`` renders
    stored rows only (a GPU profile rendered on a CPU): ``what`` runs live on that device (correctness checks on the
    real model, a model from the Hub) and has no rows to render. ``python -m helpers.run_all`` then lists the notebook
    as pending instead of failing on meta tensors halfway through."""
    if results_only() and resolve_device(device).type == "meta":
        raise MissingResultError(
            f"{what} runs live on {device}, which this machine does not have, and {RESULTS_ONLY_ENV}=1 renders "
            f"stored rows only: it renders on a machine with that device (python -m helpers.run_all --profile ...).")


def is_oom(error: BaseException) -> bool:
    """True only for a real out-of-memory error: CUDA's (``torch.OutOfMemoryError``), or the CPU allocator's
    (``MemoryError``, or a ``RuntimeError`` saying it could not allocate). A predicted size is never one."""
    if isinstance(error, (torch.OutOfMemoryError, MemoryError)):
        return True
    text = str(error).lower()
    return isinstance(error, RuntimeError) and any(
        phrase in text for phrase in ("out of memory", "can't allocate memory", "cannot allocate memory",
                                      "failed to allocate"))


def _versions() -> dict:
    return {
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "python_version": platform.python_version(),
    }


def measured_on(rows) -> dict:
    """``{"device_name", "threads", "memory_bytes"}`` of the machine that measured ``rows`` (one stored row, a list of
    them or a DataFrame of them; the first one answers; ``memory_bytes`` None where not recorded): what a notebook
    names as its machine, also when it renders rows measured elsewhere (a GPU's, with ``WORKBOOK_RESULTS_ONLY=1``)."""
    first = rows.iloc[0] if hasattr(rows, "iloc") else rows[0] if isinstance(rows, list) else rows
    memory = first.get("device_memory_bytes")
    return {"device_name": first["device_name"], "threads": int(first["threads"]),
            "memory_bytes": None if memory is None or memory != memory else int(memory)}


def run_metadata(
    *,
    model_id: str,
    weights: str,
    dtype: str | torch.dtype,
    device: str | torch.device,
    seed: int | None,
    **extra,
) -> dict:
    """The metadata every result row records; ``weights`` is 'pretrained', 'random' or 'cpu-pair'."""
    if weights not in ("pretrained", "random", "cpu-pair", "none"):
        raise ValueError(f"weights must be 'pretrained', 'random', 'cpu-pair' or 'none', got {weights!r}")
    info = device_info(device)
    meta = {
        "model_id": model_id,
        "weights": weights,
        "dtype": str(dtype).replace("torch.", ""),
        "device": info["device"],
        "device_name": info["device_name"],
        "device_memory_bytes": info["total_memory_bytes"],
        "threads": info["cpu_threads"],
        "seed": seed,
        "run_id": os.environ.get("WORKBOOK_RUN_ID"),  # set by helpers.run_all: rows of one run share it
        **_versions(),
    }
    meta.update(extra)
    return meta


def config_key(config: dict) -> str:
    """A canonical string for a configuration (what 'already measured' compares)."""
    return json.dumps(config, sort_keys=True, default=str)


def _clean(value):
    """JSON has no NaN/inf; store them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, torch.Tensor):
        return _clean(value.tolist())
    return value


def read_rows(path: Path) -> list[dict]:
    """Every row of a result file in order (none if it does not exist); a line cut short by a crash mid-write is
    skipped, so that configuration is simply measured again."""
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            line = line.strip()
            if line:
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
    return rows


def latest_ok_rows(path: Path) -> list[dict]:
    """The last row of each configuration in a result file, kept where it finished ``ok`` (not OOM)."""
    latest = {row.get("config_key"): row for row in read_rows(path)}
    return [row for row in latest.values() if row.get("status") == STATUS_OK]


def gpu_result_folders(name: str) -> list[Path]:
    """The profiles' folders (``results/<profile>/``) whose ``name.jsonl`` holds ok rows measured on a GPU: this
    run's output root where it has any, else the committed ones, so that a CPU profile's notebook can set its models
    beside what a GPU window measured."""
    for root in (paths.output_root(), paths.REPO_ROOT):
        found = [folder for folder in sorted((root / "results").glob("*/"))
                 if any(row.get("device") == "cuda" for row in latest_ok_rows(folder / f"{name}.jsonl"))]
        if found:
            return found
    return []


class ResultStore:
    """``results/<profile>/<notebook>.jsonl``: append rows, resume, and read back as a DataFrame."""

    def __init__(self, profile: str, notebook: str):
        paths.check_profile(profile)
        self.profile = profile
        self.notebook = notebook
        self.path: Path = paths.results_dir(profile) / f"{notebook}.jsonl"

    def rows(self) -> list[dict]:
        return read_rows(self.path)

    def done(self) -> dict[str, dict]:
        """Finished configurations (ok or OOM) by ``config_key``; the last row for a config wins."""
        return {row["config_key"]: row for row in self.rows() if "config_key" in row}

    def has(self, config: dict) -> bool:
        return config_key(config) in self.done()

    def add_row(self, config: dict, metrics: dict, meta: dict, status: str = STATUS_OK) -> dict:
        """Write one finished row now (flushed), and return it."""
        self.refuse_in_results_only(config)
        overlap = set(config) & set(metrics)
        if overlap:
            raise ValueError(f"metric names clash with config names: {sorted(overlap)}")
        row = {
            **config,
            **metrics,
            **{k: v for k, v in meta.items() if k not in config and k not in metrics},
            "status": status,
            "profile": self.profile,
            "config_key": config_key(config),
            "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        }
        row = _clean(row)
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(row, sort_keys=True) + "\n")
            handle.flush()
        return row

    def run(self, config: dict, fn: Callable[[], dict], *, meta: dict, rerun: bool = False) -> dict:
        """Measure ``config`` unless already done: ``fn()`` returns metrics; OOM becomes an 'oom' row."""
        if not rerun:
            previous = self.done().get(config_key(config))
            if previous is not None:
                return previous
        self.refuse_in_results_only(config)
        try:
            metrics = fn()
        except Exception as error:  # noqa: BLE001 - only OOM is swallowed, the rest re-raises
            if not is_oom(error):
                raise
            del error
            free_memory()
            return self.add_row(config, {"error": "out of memory"}, meta, status=STATUS_OOM)
        return self.add_row(config, metrics, meta)

    def refuse_in_results_only(self, config: dict) -> None:
        """Raise :class:`MissingResultError` for ``config`` under ``WORKBOOK_RESULTS_ONLY`` (a caller about to
        prepare a measurement, a warm-up say, asks first)."""
        if results_only():
            raise MissingResultError(
                f"{self.path} has no row for {config_key(config)}, and {RESULTS_ONLY_ENV}=1 renders committed rows "
                f"only. Measure it first (GPU profiles: python -m helpers.gpu_measure --profile {self.profile} "
                f"--out DIR, then copy DIR/results/{self.profile}/ here), or unset {RESULTS_ONLY_ENV} to measure now.")

    def frame(self, latest_only: bool = True):
        """All rows as a pandas DataFrame (one per configuration unless ``latest_only=False``)."""
        rows = list(self.done().values()) if latest_only else self.rows()
        return pd.DataFrame(rows)

    def clear(self) -> None:
        """Forget every row of this notebook and profile (for a deliberate fresh run)."""
        if self.path.exists():
            self.path.unlink()


def free_memory() -> None:
    """Release what an OOM left behind so the next configuration starts clean."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
