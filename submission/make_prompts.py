# Name / Andrew ID: <your name> / <your Andrew ID>
"""Build the handout's two data files from text every Python installation carries.

    python submission/make_prompts.py            # (re)write prompts.jsonl, long_prompt.txt and manifest.json
    python submission/make_prompts.py --check    # exit 1 if the committed files differ from a fresh build

``prompts.jsonl`` (handout §4.3): 20 prompts, 4 from each of 5 data sources, one JSON object per line with
``id``, ``source``, ``prompt`` and ``origin`` (the standard-library file or ``pydoc_data.topics`` entry and the
line where the prompt starts). Sources:

- ``code``: the opening of a function in a library module (the model continues its body);
- ``docstring``: a function's signature and the first lines of its docstring, cut mid-docstring;
- ``tests``: the opening of a unit-test method;
- ``docs``: prose documentation (a ``pydoc_data.topics`` entry, or a module's prose docstring);
- ``data``: repetitive tables (codec mapping tables and the like).

Every prompt comes from the CPU pair's held-out documents (``helpers.train_cpu_pair.load_corpus``), so the
acceptance rates measured on them are not inflated by memorised training text.

``long_prompt.txt`` (handout §2.1): the ``pydoc_data.topics`` entries in sorted order (notebook 03's prompt
text, ``helpers.kv_sweep.prompt_text``) up to the last paragraph end within ``LONG_PROMPT_CHARS`` characters,
about 32k tokens of the CPU pair's tokenizer (the script prints the count;
other tokenizers split the same text into a different number of tokens).

Deterministic: the same Python version gives byte-identical files (``manifest.json`` records the version,
the token count and the files' hashes). A different patch release of Python ships slightly different
standard-library text, so a rebuild there may differ; ``--check`` says so instead of failing silently.
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import json
import platform
import re
import sys
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROMPTS_PATH = HERE / "prompts.jsonl"
LONG_PROMPT_PATH = HERE / "long_prompt.txt"
MANIFEST_PATH = HERE / "manifest.json"

SOURCES = ("code", "docstring", "tests", "docs", "data")
PER_SOURCE = 4
MIN_PROMPT_CHARS = 250  # prompts are cut at a line end once they are at least this long ...
MAX_PROMPT_CHARS = 900  # ... and never longer than this
LONG_PROMPT_CHARS = 111_000  # about 32k tokens of the CPU pair's tokenizer (printed by main())

# a line of a data table: starts with a literal (string, number, tuple/list) and ends with a comma or a comment
_DATA_LINE = re.compile(r"""^\s*(['"(\[]|0x|\d).*(,\s*|#.*)$""")


# --------------------------------------------------------------------------- reading the corpus

def heldout_documents() -> list[tuple[str, str]]:
    """(name, text) of the CPU pair's held-out documents, in the training script's (sorted) order."""
    if str(HERE.parent) not in sys.path:
        sys.path.insert(0, str(HERE.parent))
    from helpers.train_cpu_pair import load_corpus

    corpus = load_corpus()
    return list(zip(corpus.heldout_names, corpus.heldout))


def _is_test_file(name: str) -> bool:
    parts = name.split("/")
    return any(p in ("test", "tests", "idle_test") or p.startswith("test_") for p in parts)


def _is_data_file(text: str) -> bool:
    lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return len(lines) >= 100 and sum(bool(_DATA_LINE.match(line)) for line in lines) >= 0.5 * len(lines)


def _functions(text: str) -> list[ast.FunctionDef]:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    nodes = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return sorted(nodes, key=lambda n: n.lineno)


def _cut(lines: list[str], start: int, min_lines: int = 1) -> str | None:
    """``lines[start:]`` joined up to the first line end at which the text has MIN_PROMPT_CHARS (None if the
    text would exceed MAX_PROMPT_CHARS first or runs out)."""
    text = ""
    for i, line in enumerate(lines[start:], 1):
        text += line + "\n"
        if len(text) > MAX_PROMPT_CHARS:
            return None
        if len(text) >= MIN_PROMPT_CHARS and i >= min_lines and line.strip():
            return text
    return None


# --------------------------------------------------------------------------- one picker per source

def _pick_code(name: str, text: str):
    """The first function of >= 12 lines, from its ``def`` up to about half of it (its body continues)."""
    for node in _functions(text):
        if node.end_lineno - node.lineno + 1 < 12:
            continue
        lines = textwrap.dedent(ast.get_source_segment(text, node, padded=True)).splitlines()
        prompt = _cut(lines[: len(lines) // 2 + 1], 0, min_lines=4)
        if prompt:
            return node.lineno, prompt
    return None


def _pick_docstring(name: str, text: str):
    """The first function with a docstring of >= 4 lines: its signature and the docstring's first lines."""
    for node in _functions(text):
        doc = ast.get_docstring(node, clean=False)
        body0 = node.body[0] if node.body else None
        if not doc or len(doc.splitlines()) < 4 or body0 is None:
            continue
        segment = textwrap.dedent(ast.get_source_segment(text, node, padded=True)).splitlines()
        doc_start = body0.lineno - node.lineno  # index of the docstring's first line in the segment
        doc_end = body0.end_lineno - node.lineno
        # cut inside the docstring: at least its first line, never its closing quotes
        prompt = _cut(segment[:doc_end], 0, min_lines=doc_start + 1)
        if prompt:
            return node.lineno, prompt
    return None


def _pick_test(name: str, text: str):
    """The first ``test_*`` method of >= 8 lines, from its ``def`` up to about half of it."""
    for node in _functions(text):
        if not node.name.startswith("test") or node.end_lineno - node.lineno + 1 < 8:
            continue
        lines = textwrap.dedent(ast.get_source_segment(text, node, padded=True)).splitlines()
        prompt = _cut(lines[: len(lines) // 2 + 1], 0, min_lines=3)
        if prompt:
            return node.lineno, prompt
    return None


def _pick_docs(name: str, text: str):
    """A pydoc topic from its start, or a module docstring of >= 10 prose lines, cut at a line end."""
    if name.startswith("pydoc_data.topics/"):
        return 1, _cut(text.splitlines(), 0, min_lines=3)
    try:
        doc = ast.get_docstring(ast.parse(text), clean=False)
    except (SyntaxError, ValueError):
        return None
    if not doc or len(doc.splitlines()) < 10:
        return None
    return 1, _cut(doc.strip("\n").splitlines(), 0, min_lines=3)


def _pick_data(name: str, text: str):
    """A window from the middle of the file's longest run of data-table lines (>= 20 lines long)."""
    lines = text.splitlines()
    best, start = (0, 0), None
    for i, line in enumerate(lines + [""]):
        if _DATA_LINE.match(line):
            start = i if start is None else start
        elif start is not None:
            best = max(best, (i - start, -start))
            start = None
    run, first = best[0], -best[1]
    if run < 20:
        return None
    begin = first + run // 2
    prompt = _cut(lines[: first + run], begin, min_lines=8)
    return (begin + 1, prompt) if prompt else None


def build_prompts(documents: list[tuple[str, str]]) -> list[dict]:
    """PER_SOURCE prompts per source, each from a different document, documents taken in sorted order."""
    eligible = {
        "code": lambda n, t: n.endswith(".py") and not _is_test_file(n) and not _is_data_file(t),
        "docstring": lambda n, t: n.endswith(".py") and not _is_data_file(t),
        "tests": lambda n, t: n.endswith(".py") and _is_test_file(n),
        "docs": lambda n, t: n.startswith("pydoc_data.topics/") or (n.endswith(".py") and not _is_test_file(n)),
        "data": lambda n, t: n.endswith(".py") and _is_data_file(t),
    }
    pickers = {"code": _pick_code, "docstring": _pick_docstring, "tests": _pick_test, "docs": _pick_docs,
               "data": _pick_data}
    # documentation first: the pydoc topics are the purest prose
    order = {"docs": sorted(documents, key=lambda d: not d[0].startswith("pydoc_data.topics/"))}
    used: set[str] = set()
    rows = []
    for source in SOURCES:
        found = 0
        for name, text in order.get(source, documents):
            if found == PER_SOURCE:
                break
            if name in used or not eligible[source](name, text):
                continue
            picked = pickers[source](name, text)
            if not picked or not picked[1]:
                continue
            line, prompt = picked
            used.add(name)
            found += 1
            origin = name if name.startswith("pydoc_data.topics/") else f"Lib/{name}:{line}"
            rows.append({"id": f"{source}-{found}", "source": source, "prompt": prompt, "origin": origin})
        if found < PER_SOURCE:
            raise RuntimeError(f"only {found} {source!r} prompts found in the held-out documents (need {PER_SOURCE})")
    return rows


# --------------------------------------------------------------------------- the long prompt

def build_long_prompt(max_chars: int = LONG_PROMPT_CHARS) -> str:
    """The start of :func:`helpers.kv_sweep.prompt_text` (the ``pydoc_data.topics`` entries in sorted order, the
    text notebook 03 cuts its prompts from), cut at the last paragraph end within ``max_chars`` characters."""
    if str(HERE.parent) not in sys.path:
        sys.path.insert(0, str(HERE.parent))
    from helpers.kv_sweep import prompt_text

    text = prompt_text()
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


def read_prompts(path: Path = PROMPTS_PATH) -> list[dict]:
    """The rows of a prompts.jsonl file, checking each has id, source and prompt."""
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            row = json.loads(line)
            missing = [f for f in ("id", "source", "prompt") if f not in row]
            if missing:
                raise ValueError(f"{path}:{number}: prompt is missing field(s) {missing}")
            rows.append(row)
    return rows


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def build() -> dict:
    """Everything the files hold, built afresh: {'prompts': str, 'long_prompt': str, 'manifest': dict}."""
    prompts = render_prompts(build_prompts(heldout_documents()))
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
    by_source = {s: sum(r["source"] == s for r in rows) for s in SOURCES}
    m = built["manifest"]
    print(f"{PROMPTS_PATH.name}: {len(rows)} prompts, per source {by_source}")
    print(f"{LONG_PROMPT_PATH.name}: {m['long_prompt_bytes']} bytes, {m['long_prompt_tokens_cpu_pair']} tokens "
          f"(CPU pair tokenizer), Python {m['python']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
