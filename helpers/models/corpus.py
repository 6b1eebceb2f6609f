"""The CPU pair's corpus: text every Python installation carries, split into training and held-out documents.

The standard library's ``*.py`` source and ``pydoc_data.topics``. A document is held out when the SHA-256 of its
name is divisible by :data:`HELDOUT_EVERY` (:func:`is_heldout`), so the split is the same on every machine with
the same Python version. The trainer (:mod:`helpers.training`) trains on the training split; the
prompts that measure acceptance (:mod:`helpers.prompts`) come from the held-out split.
"""
from __future__ import annotations

import hashlib
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import pydoc_data.topics

HELDOUT_EVERY = 20  # one document in 20 (by name hash) is held out


@dataclass
class Corpus:
    train: list[str]
    heldout: list[str]
    train_names: list[str]
    heldout_names: list[str]


def is_heldout(name: str) -> bool:
    """Whether the document called ``name`` belongs to the held-out split (a hash of the name)."""
    return int(hashlib.sha256(name.encode()).hexdigest(), 16) % HELDOUT_EVERY == 0


def stdlib_dir() -> Path:
    """The standard library's source directory of this Python."""
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_sources(keep=lambda name: True):
    """``(name, text)`` of the standard library's ``.py`` files in name order (installed packages excluded), for
    the names ``keep`` accepts (checked before reading), skipping files that are not UTF-8."""
    stdlib = stdlib_dir()
    for path in sorted(stdlib.rglob("*.py")):
        rel = path.relative_to(stdlib)
        if "site-packages" in rel.parts or "dist-packages" in rel.parts or not keep(rel.as_posix()):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # a few test fixtures are deliberately not UTF-8
        yield rel.as_posix(), text


def load_corpus() -> Corpus:
    """Standard-library source plus pydoc topics, split deterministically by document name."""
    stdlib = stdlib_dir()
    docs: list[tuple[str, str]] = list(stdlib_sources())
    for key in sorted(pydoc_data.topics.topics):
        docs.append((f"pydoc_data.topics/{key}", pydoc_data.topics.topics[key]))
    if not docs:
        raise RuntimeError(f"no standard-library source found under {stdlib}")
    corpus = Corpus([], [], [], [])
    for name, text in docs:
        if is_heldout(name):
            corpus.heldout.append(text), corpus.heldout_names.append(name)
        else:
            corpus.train.append(text), corpus.train_names.append(name)
    return corpus
