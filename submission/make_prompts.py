# Name / Andrew ID: Test Student / tests
# (the name and Andrew ID the handout is issued to; a student handing these files in puts their own here)
"""Build the workbook's stand-ins for the handout's two data files from text every Python installation carries.

The course hands out its own ``prompts.jsonl`` (§4.3) and ``long_prompt.txt`` (§2.1); the files this script
writes next to it are *stand-ins* with the same names and format, so that everything here runs offline before the
course's files are at hand. They are not the course's files: results for the handout are measured on the course's
(``benchmark.py --prompts PATH``; see the README's hand-in checklist).

    python submission/make_prompts.py            # (re)write prompts.jsonl, long_prompt.txt and manifest.json
    python submission/make_prompts.py --check    # exit 1 if the committed files differ from a fresh build

Stand-in ``prompts.jsonl`` (handout §4.3): the 20 prompts of notebook 07's main §4.4 table, one JSON object per line with
``id``, ``source``, ``prompt`` and ``origin`` (the held-out document it was cut from): 5 from each of the workbook's
four kinds of text (``helpers.prompts``: code, docstrings, prose documentation, generated tables and logs). The code,
docstring and prose prompts come from the CPU pair's held-out documents, so the acceptance rates measured on them
are not inflated by memorised training text.

Stand-in ``long_prompt.txt`` (handout §2.1): the ``pydoc_data.topics`` entries in sorted order (notebook 03's prompt
text, ``helpers.prompts.help_topics_text``) up to the last paragraph end within ``LONG_PROMPT_CHARS`` characters,
about 32k tokens of the CPU pair's tokenizer (the script prints the count;
other tokenizers split the same text into a different number of tokens).

Deterministic: the same Python version gives byte-identical files (``manifest.json`` records the version,
the token count and the files' hashes). A different patch release of Python ships slightly different
standard-library text, so a rebuild there may differ; ``--check`` says so instead of failing silently.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import platform
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROMPTS_PATH = HERE / "prompts.jsonl"
LONG_PROMPT_PATH = HERE / "long_prompt.txt"
MANIFEST_PATH = HERE / "manifest.json"

PROMPT_COUNT = 20  # the handout's "20 test prompts"
LONG_PROMPT_CHARS = 111_000  # about 32k tokens of the CPU pair's tokenizer (printed by main())


# --------------------------------------------------------------------------- the 20 prompts

def build_prompts() -> list[dict]:
    """Notebook 07's main-table prompts: the first PROMPT_COUNT of the workbook's CPU prompt set
    (:func:`helpers.prompts.build_cpu_prompts`, held-out text of four kinds), taken round-robin over the sources by
    :func:`helpers.prompts.select_prompts`, so every source contributes equally."""
    if str(HERE.parent) not in sys.path:
        sys.path.insert(0, str(HERE.parent))
    from helpers.prompts import build_cpu_prompts, select_prompts

    picked = select_prompts(build_cpu_prompts(), PROMPT_COUNT)
    return [{"id": row["id"], "source": row["source"], "prompt": row["prompt"], "origin": row["document"]}
            for row in picked]


# --------------------------------------------------------------------------- the long prompt

def build_long_prompt(max_chars: int = LONG_PROMPT_CHARS) -> str:
    """The start of :func:`helpers.prompts.help_topics_text` (the ``pydoc_data.topics`` entries in sorted order, the
    text notebook 03 cuts its prompts from), cut at the last paragraph end within ``max_chars`` characters."""
    if str(HERE.parent) not in sys.path:
        sys.path.insert(0, str(HERE.parent))
    from helpers.prompts import help_topics_text

    text = help_topics_text()
    end = text.rfind("\n\n", 0, max_chars)
    if end <= 0:
        raise ValueError(f"no paragraph end within the first {max_chars} characters of the help topics")
    return text[:end] + "\n"


def count_tokens(text: str) -> int:
    """Tokens of the CPU pair's tokenizer (``data/cpu_pair/tokenizer``), without special tokens."""
    if str(HERE.parent) not in sys.path:
        sys.path.insert(0, str(HERE.parent))
    from helpers.models import load_cpu_tokenizer

    return len(load_cpu_tokenizer()(text, add_special_tokens=False)["input_ids"])


# --------------------------------------------------------------------------- files

def render_prompts(rows: list[dict]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


TEXT_FIELDS = ("prompt", "text", "input")  # the prompt's text: the first of these a row has
SOURCE_FIELDS = ("source", "data_source", "dataset", "category", "task")  # its data source, if the row names one
EXAMPLE_ROW = '{"id": "p1", "source": "code", "prompt": "def add(a, b):"}'


class PromptsFileError(ValueError):
    """A prompts.jsonl that cannot be read: the message names the file, the line, the problem and the fix."""


def read_prompts(path: Path = PROMPTS_PATH) -> list[dict]:
    """The rows of a prompts.jsonl file (one JSON object per line; blank lines skipped), each with ``id``,
    ``source`` and ``prompt``.

    The handout gives the course's file without describing its fields, so this reads it leniently: the text is
    the row's ``prompt`` (or ``text`` / ``input``), the data source its ``source`` (or ``data_source``,
    ``dataset``, ``category``, ``task``; "unknown" when none), the id its ``id`` (else ``prompt-<line>``); every
    other field is kept. A missing, empty or malformed file raises :class:`PromptsFileError` saying what is wrong
    and what to do."""
    path = Path(path)
    if not path.is_file():
        raise PromptsFileError(
            f"{path}: no such file. Give the path of a prompts.jsonl, e.g. --prompts course/prompts.jsonl for the "
            f"course's file (put it there first), or leave --prompts out for the workbook's stand-in {PROMPTS_PATH}")
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise PromptsFileError(
                f"{path}:{number}: not valid JSON ({error.msg}): a .jsonl file holds one JSON object per line, "
                f"such as {EXAMPLE_ROW}; fix that line (a JSON array or a pretty-printed file is not JSON Lines)"
            ) from None
        if not isinstance(row, dict):
            raise PromptsFileError(f"{path}:{number}: a JSON {type(row).__name__}, not an object; each line must "
                                   f"be one object such as {EXAMPLE_ROW}")
        text = next((row[f] for f in TEXT_FIELDS if f in row), None)
        if not isinstance(text, str) or not text:
            raise PromptsFileError(
                f"{path}:{number}: no prompt text: the row has fields {sorted(row)}, but needs a non-empty string "
                f"in one of {list(TEXT_FIELDS)}, as in {EXAMPLE_ROW}")
        source = next((row[f] for f in SOURCE_FIELDS if f in row), "unknown")
        rows.append({**row, "id": str(row.get("id", f"prompt-{number}")), "source": str(source), "prompt": text})
    if not rows:
        raise PromptsFileError(f"{path}: no prompts (the file is empty); it needs one JSON object per line, "
                               f"such as {EXAMPLE_ROW}")
    ids = [row["id"] for row in rows]
    if len(set(ids)) != len(ids):
        repeated = sorted({i for i in ids if ids.count(i) > 1})
        raise PromptsFileError(f"{path}: the ids {repeated} occur more than once; the benchmark reports per id, "
                               "so give every row its own id")
    return rows


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def build() -> dict:
    """Everything the files hold, built afresh: {'prompts': str, 'long_prompt': str, 'manifest': dict}."""
    prompts = render_prompts(build_prompts())
    long_prompt = build_long_prompt()
    manifest = {
        "python": platform.python_version(),
        "prompts": len(prompts.splitlines()),
        "prompts_sha256": _sha256(prompts),
        "long_prompt_chars": len(long_prompt),
        "long_prompt_bytes": len(long_prompt.encode("utf-8")),
        "long_prompt_tokens_cpu_pair": count_tokens(long_prompt),
        "long_prompt_sha256": _sha256(long_prompt),
    }
    return {"prompts": prompts, "long_prompt": long_prompt, "manifest": manifest}


def check() -> list[str]:
    """Differences between the committed files and a fresh build (empty when they agree)."""
    fresh = build()
    problems = []
    recorded = json.loads(MANIFEST_PATH.read_text(encoding="utf-8"))
    if recorded.get("python") != fresh["manifest"]["python"]:
        problems.append(f"built with Python {recorded.get('python')}, this is Python {fresh['manifest']['python']}: "
                        "the standard library's text may differ")
    for key, path in (("prompts", PROMPTS_PATH), ("long_prompt", LONG_PROMPT_PATH)):
        if path.read_text(encoding="utf-8") != fresh[key]:
            problems.append(f"{path.name} differs from a fresh build")
    if recorded != fresh["manifest"]:
        problems.append(f"{MANIFEST_PATH.name} differs from a fresh build")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare the committed files with a fresh build")
    args = parser.parse_args(argv)
    if args.check:
        problems = check()
        for problem in problems:
            print("MISMATCH:", problem)
        print("up to date" if not problems else f"{len(problems)} problem(s)")
        return 1 if problems else 0
    built = build()
    PROMPTS_PATH.write_text(built["prompts"], encoding="utf-8")
    LONG_PROMPT_PATH.write_text(built["long_prompt"], encoding="utf-8")
    MANIFEST_PATH.write_text(json.dumps(built["manifest"], indent=2) + "\n", encoding="utf-8")
    rows = read_prompts()
    by_source = {s: sum(r["source"] == s for r in rows) for s in dict.fromkeys(r["source"] for r in rows)}
    m = built["manifest"]
    print(f"{PROMPTS_PATH.name}: {len(rows)} prompts, per source {by_source}")
    print(f"{LONG_PROMPT_PATH.name}: {m['long_prompt_bytes']} bytes, {m['long_prompt_tokens_cpu_pair']} tokens "
          f"(CPU pair tokenizer), Python {m['python']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
