"""The workbook's prompt set, ``data/prompts.jsonl``: one JSON object per line.

Fields: ``id`` (unique), ``profile`` ("gpu": the handout's heterogeneous requests — chat, code, math,
summarisation, translation, QA; "cpu": text the CPU pair can continue — Python code, tests, docstrings,
comments and documentation prose), ``source`` (the kind of request, for per-source breakdowns) and ``prompt``.
"""
from __future__ import annotations

import json

from .paths import DATA_DIR

PROMPTS_PATH = DATA_DIR / "prompts.jsonl"
REQUIRED_FIELDS = ("id", "profile", "source", "prompt")


def load_prompts(profile: str | None = None, source: str | None = None, path=PROMPTS_PATH) -> list[dict]:
    """Prompts in file order, optionally only one ``profile`` ('cpu' or 'gpu') and/or one ``source``."""
    rows = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            missing = [f for f in REQUIRED_FIELDS if f not in row]
            if missing:
                raise ValueError(f"{path}:{number}: prompt is missing field(s) {missing}")
            rows.append(row)
    profiles = {row["profile"] for row in rows}
    if profile is not None and profile not in profiles:
        raise ValueError(f"no prompts for profile {profile!r}; profiles in {path.name}: {sorted(profiles)}")
    return [row for row in rows
            if (profile is None or row["profile"] == profile) and (source is None or row["source"] == source)]
