"""The workbook's prompt set, ``data/prompts.jsonl``: one JSON object per line.

Also every other prompt source of the workbook: :func:`select_prompts` (a round-robin subset over sources),
:func:`encode_prompts` (token ids for a model), :func:`source_counts` (a one-line description of a subset),
:func:`heldout_source_prompts` (fixed-length token windows of held-out library code, notebook 09), and notebook 10's
prompt-lookup workloads: :func:`grounded_prompts` (a copy task) and :func:`in_context_prompts` (prompts whose
continuation is in the context verbatim).

Fields: ``id`` (unique), ``profile`` ("gpu": the handout's heterogeneous requests — chat, code, math,
summarisation, translation, QA; "cpu": text the CPU pair never trained on, built by :func:`build_cpu_prompts` —
library code, docstrings, prose documentation and generated repetitive data), ``source`` (the kind of request, for
per-source breakdowns) and ``prompt``; CPU rows also name their ``document``.
"""
from __future__ import annotations

import ast
import json
import random
import re
from collections import Counter

from pydoc_data.topics import topics

from helpers.models.corpus import is_heldout, load_corpus, stdlib_dir, stdlib_sources
from helpers.paths import DATA_DIR


def help_topics_text() -> str:
    """Python's own help topics (what ``help('for')`` prints), concatenated in a fixed order: ~700 kB. The text of
    notebooks 03/04's prompts and of ``submission/long_prompt.txt``."""
    return "\n\n".join(topics[name] for name in sorted(topics))


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


# --------------------------------------------------------------------------------------- the CPU prompt set

# The CPU profile's prompts are built from text the CPU pair never trained on, so that an acceptance rate measured
# on them is not measured on training text. Four sources that differ in kind, PER_SOURCE prompts each, with prompt
# lengths cycling through CPU_PROMPT_CHARS (heterogeneous request lengths, up to about 200 tokens: the pair was
# trained on 256-token windows). ``python -m helpers.prompts`` rewrites the "cpu" lines of data/prompts.jsonl.
CPU_SOURCES = ("code", "docstring", "prose", "data")
PER_SOURCE = 12
CPU_PROMPT_CHARS = (32, 128, 320, 640)
# prose documentation outside the training corpus (which holds *.py files and pydoc_data.topics only)
_PROSE_FILES = ("email/architecture.rst",)
_SKIP_PARTS = ("test", "tests", "idle_test", "idlelib", "turtledemo", "tkinter", "encodings")  # not code of a module


def heldout_documents() -> dict[str, str]:
    """Name -> text of the CPU pair's held-out documents: its training script's own split
    (:func:`helpers.models.corpus.load_corpus`, one document in 20 by a hash of its name)."""
    corpus = load_corpus()
    return dict(zip(corpus.heldout_names, corpus.heldout))


def _cut(text: str, budget: int, at: str = "\n") -> str:
    """The longest prefix of ``text`` no longer than ``budget`` that ends at ``at`` (a line end or a space);
    at least the first piece, so a prompt is never empty."""
    if len(text) <= budget:
        return text
    end = text.rfind(at, 0, budget + 1)
    if end <= 0:
        end = text.find(at)
        end = len(text) if end < 0 else end
    return text[: end + (1 if at == "\n" else 0)]


def _module_docs(documents: dict[str, str]) -> list[tuple[str, str]]:
    """Held-out library modules (no tests, demos, GUI or codec tables), in name order."""
    return [(name, text) for name, text in sorted(documents.items())
            if name.endswith(".py") and not any(part in _SKIP_PARTS or part.startswith("test_")
                                                for part in name.split("/"))]


def _functions(text: str):
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    return [node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                 ast.ClassDef))]


def _code_prompts(documents, count: int) -> list[tuple[str, str]]:
    """One function per module in turn (round-robin over modules, longest body first): its source without
    the docstring, from the ``def`` line."""
    return _round_robin(_per_module_functions(documents), count)


def _per_module_functions(documents) -> list[tuple[str, list[str]]]:
    """(module, [its functions of 7+ lines, longest first: source without the docstring, dedented]) for every
    held-out module."""
    per_module = []
    for name, text in _module_docs(documents):
        lines = text.splitlines(keepends=True)
        candidates = []
        for node in _functions(text):
            if isinstance(node, ast.ClassDef) or node.end_lineno - node.lineno < 6:
                continue
            doc = node.body[0] if (node.body and isinstance(node.body[0], ast.Expr)
                                   and isinstance(getattr(node.body[0], "value", None), ast.Constant)
                                   and isinstance(node.body[0].value.value, str)) else None
            skip = set(range(doc.lineno, doc.end_lineno + 1)) if doc else set()
            body = [lines[i - 1] for i in range(node.lineno, node.end_lineno + 1) if i not in skip]
            indent = len(body[0]) - len(body[0].lstrip())
            candidates.append((-len(body), node.lineno, "".join(line[indent:] if line.strip() else line for line in body)))
        per_module.append((name, [source for *_, source in sorted(candidates)]))
    return per_module


def _docstring_prompts(documents, count: int) -> list[tuple[str, str]]:
    """Functions and classes with a docstring of several lines, modules in reverse name order (so that they
    are mostly other modules than the code prompts'): (signature down to the opening quotes, docstring text)."""
    per_module = []
    for name, text in reversed(_module_docs(documents)):
        lines = text.splitlines(keepends=True)
        candidates = []
        for node in _functions(text):
            docstring = ast.get_docstring(node, clean=False)
            if not docstring or docstring.count("\n") < 3:
                continue
            doc = node.body[0]
            source = "".join(lines[node.lineno - 1: doc.end_lineno])
            indent = len(source) - len(source.lstrip())
            source = "".join(line[indent:] if line.strip() else line for line in source.splitlines(keepends=True))
            quote = re.search(r'[rbuRBU]?("""|\'\'\')', source)
            if quote is None:
                continue
            candidates.append((node.lineno, (source[: quote.end()], source[quote.end():])))
        per_module.append((name, [parts for _, parts in sorted(candidates)]))
    return _round_robin(per_module, count)


def _prose_prompts(documents, count: int) -> list[tuple[str, str]]:
    """Held-out pydoc topics, then paragraphs of the standard library's prose documentation files."""
    stdlib = stdlib_dir()
    per_doc = [(name, [text.strip() + "\n"]) for name, text in sorted(documents.items())
               if name.startswith("pydoc_data.topics/")]
    for relative in _PROSE_FILES:
        text = (stdlib / relative).read_text(encoding="utf-8")
        paragraphs = [p.strip() + "\n" for p in text.split("\n\n") if len(p.strip()) >= 200 and p.strip()[0].isalpha()]
        per_doc.append((relative, paragraphs))
    return _round_robin(per_doc, count, each=None)


def _data_prompts(count: int) -> list[tuple[str, str]]:
    """Repetitive data: CSV tables and server logs, generated with fixed seeds (random.Random is stable)."""
    cities = ["Berlin", "Lisbon", "Oslo", "Madrid", "Vienna", "Dublin", "Prague", "Warsaw"]
    paths = ["/", "/index.html", "/api/v1/items", "/api/v1/users", "/static/app.js", "/login", "/health"]
    out = []
    for index in range(count):
        rng = random.Random(index)
        if index % 2 == 0:
            lines = ["date,city,temperature_c,humidity_pct,wind_kmh\n"]
            for day in range(1, 60):
                lines.append(f"2023-{1 + index % 12:02d}-{day % 28 + 1:02d},{rng.choice(cities)},"
                             f"{rng.uniform(-5, 30):.1f},{rng.randint(30, 95)},{rng.randint(0, 40)}\n")
            out.append((f"generated/weather-{index}.csv", "".join(lines)))
        else:
            lines, second = [], 0
            for _ in range(60):
                second += rng.randint(0, 4)
                status = rng.choice([200, 200, 200, 200, 304, 404, 500])
                level = "ERROR" if status == 500 else "WARNING" if status == 404 else "INFO"
                lines.append(f"2023-05-{1 + index:02d} 12:{second // 60:02d}:{second % 60:02d},{rng.randint(0, 999):03d} "
                             f"{level} http.server: 10.0.{rng.randint(0, 9)}.{rng.randint(1, 254)} "
                             f"\"GET {rng.choice(paths)} HTTP/1.1\" {status} {rng.randint(200, 9000)}\n")
            out.append((f"generated/server-{index}.log", "".join(lines)))
    return out


def _round_robin(groups: list[tuple[str, list[str]]], count: int, each: int | None = 1) -> list[tuple[str, str]]:
    """``count`` (document, text) pairs taken one document at a time, in turn (at most ``each`` per document
    while other documents still have some; None: no limit)."""
    picked, depth = [], 0
    while len(picked) < count:
        took = False
        for name, texts in groups:
            if depth < len(texts) and len(picked) < count and (each is None or depth < each or not took):
                picked.append((name, texts[depth]))
                took = True
        if not any(depth < len(texts) for _, texts in groups):
            raise ValueError(f"only {len(picked)} candidate prompts, {count} wanted")
        depth += 1
    return picked


def build_cpu_prompts(per_source: int = PER_SOURCE) -> list[dict]:
    """The CPU profile's prompt rows (``id``, ``profile``, ``source``, ``document``, ``prompt``): ``per_source``
    prompts of each of :data:`CPU_SOURCES`, the i-th of a source cut to ``CPU_PROMPT_CHARS[i % 4]`` characters
    (at a line end; at a word for prose)."""
    documents = heldout_documents()
    candidates = {"code": _code_prompts(documents, per_source), "docstring": _docstring_prompts(documents, per_source),
                  "prose": _prose_prompts(documents, per_source), "data": _data_prompts(per_source)}
    rows = []
    for source in CPU_SOURCES:
        for index, (document, text) in enumerate(candidates[source]):
            budget = CPU_PROMPT_CHARS[index % len(CPU_PROMPT_CHARS)]
            if source == "docstring":  # the signature, then the docstring's opening (at most 2/3 of it)
                head, docstring = text
                prompt = head + _cut(docstring, min(budget, 2 * len(docstring) // 3), at=" ")
            else:
                prompt = _cut(text, budget, at=" " if source == "prose" else "\n")
            rows.append({"id": f"cpu-{source}-{index + 1}", "profile": "cpu", "source": source, "document": document,
                         "prompt": prompt})
    return rows


# --------------------------------------------------------------------------------------- input-grounded prompts

GROUNDED_HEAD_LINES = 3  # lines of the second copy given in the prompt


def _heldout_functions(tokenizer, count: int, *, min_lines: int, min_tokens: int, max_tokens: int,
                       what: str) -> list[tuple[str, str]]:
    """``count`` (module, function source) pairs of held-out library functions of ``min_lines``+ lines and
    ``min_tokens``..``max_tokens`` tokens of ``tokenizer``, one per module in turn (the "code" prompts' pool)."""
    if not 0 < min_tokens <= max_tokens:
        raise ValueError(f"need 0 < min_tokens <= max_tokens, got {min_tokens} and {max_tokens}")
    per_module = []
    for name, sources in _per_module_functions(heldout_documents()):
        fitting = [source for source in sources
                   if source.count("\n") >= min_lines
                   and min_tokens <= len(tokenizer(source)["input_ids"]) <= max_tokens]
        per_module.append((name, fitting))
    per_module = [(name, fitting) for name, fitting in per_module if fitting]
    try:
        return _round_robin(per_module, count)
    except ValueError as error:
        raise ValueError(f"{error}: not enough held-out functions of {min_tokens}-{max_tokens} tokens for {count} "
                         f"{what}; widen the token range or ask for fewer") from None


def grounded_prompts(tokenizer, count: int = 12, *, head_lines: int = GROUNDED_HEAD_LINES, min_tokens: int = 40,
                     max_tokens: int = 110) -> list[dict]:
    """The copy task: a held-out function, a blank line, and the first ``head_lines`` lines of it again.

    Each prompt is a held-out library function (the CPU pair never trained on its module; the same functions as
    the "code" prompts draw from, one per module in turn, between ``min_tokens`` and ``max_tokens`` tokens of
    ``tokenizer``), a blank line, and the first ``head_lines`` lines of the same function again: a model that
    has learnt in-context copying re-emits the rest of it. Rows are shaped like :func:`load_prompts`'s (``id``,
    ``profile`` "cpu", ``source`` "grounded", ``document``, ``prompt``) plus ``reference``, the text a
    verbatim copy would continue with (:func:`helpers.experiments.nb10.study.copied_prefix` counts how far a
    model follows it); :func:`encode_prompts` encodes them.

    The CPU pair's 7.7 M-parameter target fails this task: greedy, it diverges from the copy within the first
    tokens (notebook 10 measures how far it follows), so the continuation it actually writes is mostly NOT in the
    prompt. For a workload whose output the context really contains, see :func:`in_context_prompts`.
    """
    if isinstance(head_lines, bool) or not isinstance(head_lines, int) or head_lines < 1:
        raise ValueError(f"head_lines (lines of the copy given in the prompt) must be an int >= 1, got {head_lines!r}")
    picked = _heldout_functions(tokenizer, count, min_lines=head_lines + 3, min_tokens=min_tokens,
                                max_tokens=max_tokens, what="grounded prompts")
    rows = []
    for index, (document, source) in enumerate(picked):
        lines = source.rstrip("\n").split("\n")
        head = "\n".join(lines[:head_lines])
        rows.append({"id": f"cpu-grounded-{index + 1}", "profile": "cpu", "source": "grounded", "document": document,
                     "prompt": source.rstrip("\n") + "\n\n" + head,
                     "reference": "\n" + "\n".join(lines[head_lines:]) + "\n"})
    return rows


IN_CONTEXT_SEPARATOR = "\n\n"  # between the first (function + continuation) and the second (function) part


def in_context_prompts(tokenizer, count: int, continuation, *, min_lines: int = 6, min_tokens: int = 40,
                       max_tokens: int = 110) -> list[dict]:
    """Prompts whose continuation is in the context verbatim: function, its continuation, a blank line, function.

    Each prompt is a held-out library function ``f`` (picked as :func:`grounded_prompts` picks them),
    ``continuation(f)`` (a callable returning text: the continuation a model writes after ``f``, e.g.
    :func:`helpers.experiments.nb10.study.greedy_continuation` of the target itself), a blank line, and ``f`` again.
    A model whose greedy continuation of ``f`` is ``continuation(f)`` will usually write it again after the
    second ``f``, and then every token it writes is already in the prompt: the workload of prompt lookup (a
    document rewritten with few changes, a quoted passage) without depending on the model's in-context copying,
    which the CPU target barely has (:func:`grounded_prompts`). "Usually" is measured, not assumed: notebook 10
    counts how much of ``reference`` the target re-emits (:func:`helpers.experiments.nb10.study.copied_prefix`)
    and what share of its output continues an n-gram of the prompt
    (:func:`helpers.experiments.nb10.study.context_coverage`).

    Rows: ``id`` ("cpu-incontext-N"), ``profile`` "cpu", ``source`` "in-context", ``document``, ``prompt`` and
    ``reference`` (the continuation, the text a verbatim copy continues with).
    """
    if not callable(continuation):
        raise ValueError("continuation must be a callable text -> the text a model writes after it")
    picked = _heldout_functions(tokenizer, count, min_lines=min_lines, min_tokens=min_tokens, max_tokens=max_tokens,
                                what="in-context prompts")
    rows = []
    for index, (document, source) in enumerate(picked):
        written = continuation(source)
        if not isinstance(written, str) or not written:
            raise ValueError(f"continuation returned {written!r} for the function of {document}: expected text")
        rows.append({"id": f"cpu-incontext-{index + 1}", "profile": "cpu", "source": "in-context",
                     "document": document, "prompt": source + written + IN_CONTEXT_SEPARATOR + source,
                     "reference": written})
    return rows


def write_cpu_prompts(path=PROMPTS_PATH) -> list[dict]:
    """Replace the "cpu" rows of ``path`` with :func:`build_cpu_prompts` (other profiles' rows are kept)."""
    kept = [row for row in load_prompts(path=path) if row["profile"] != "cpu"]
    rows = build_cpu_prompts() + kept
    with open(path, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    return rows


# --------------------------------------------------------------------------------------- subsets and encodings


def select_prompts(rows: list[dict], count: int) -> list[dict]:
    """``count`` prompts taken round-robin over their sources (every source early), in file order within one."""
    if count <= 0 or count >= len(rows):
        return list(rows)
    by_source: dict[str, list[dict]] = {}
    for row in rows:
        by_source.setdefault(row["source"], []).append(row)
    picked, depth = [], 0
    while len(picked) < count:
        for group in by_source.values():
            if depth < len(group) and len(picked) < count:
                picked.append(group[depth])
        depth += 1
    return picked


def source_counts(rows: list[dict]) -> str:
    """How many prompts of each source, in order of first appearance: "5 code, 5 docstring, ..."."""
    return ", ".join(f"{count} {source}" for source, count in Counter(row["source"] for row in rows).items())


def encode_prompts(tokenizer, rows: list[dict], device, max_prompt_tokens: int | None = None) -> list[dict]:
    """Prompt rows with ``input_ids`` (1, n) on ``device``; raw text, no chat template."""
    cases = []
    for row in rows:
        ids = tokenizer(row["prompt"], return_tensors="pt")["input_ids"]
        if max_prompt_tokens is not None:
            ids = ids[:, -max_prompt_tokens:]
        cases.append({**row, "input_ids": ids.to(device)})
    return cases


def heldout_source_prompts(tokenizer, count: int, length: int) -> list[list[int]]:
    """``count`` prompts of ``length`` tokens from standard-library files the CPU pair never trained on.

    Uses the corpus's held-out rule (:func:`helpers.models.corpus.is_heldout`, a hash of the file name), reading
    only the files it needs; each prompt starts in the middle of its file (past the licence header and imports).
    """
    prompts = []
    code = lambda name: not ("/test" in name or name.startswith("test")) and is_heldout(name)  # noqa: E731
    for _, text in stdlib_sources(code):
        ids = tokenizer(text)["input_ids"]
        if len(ids) >= 2 * length:
            middle = len(ids) // 2
            prompts.append(ids[middle: middle + length])
        if len(prompts) == count:
            return prompts
    raise ValueError(f"only {len(prompts)} held-out files are long enough for {count} prompts of {length} tokens")


def long_heldout_prompts(tokenizer, count: int, length: int, *, continuation: int = 64) -> list[list[int]]:
    """``count`` prompts of ``length`` tokens from held-out standard-library files (long-context work).

    The first ``length`` tokens of the first ``count`` held-out files (name order) that have at least
    ``length + continuation`` tokens, so that the text after each prompt is the file's own. When too few files
    are that long (large batches, long contexts, a tokenizer with a larger vocabulary), every prompt is instead a
    window of the held-out files joined end to end (EOS between files), evenly spaced over that stream.
    """
    stream: list[int] = []
    prompts = []
    eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    for _, text in stdlib_sources(is_heldout):
        ids = tokenizer(text)["input_ids"]
        stream += ids + eos
        if len(ids) >= length + continuation:
            prompts.append(ids[:length])
            if len(prompts) == count:
                return prompts
    span = len(stream) - length - continuation
    if span < 0:
        raise ValueError(f"the held-out files hold {len(stream)} tokens in all, too few for a {length}-token prompt")
    starts = [round(i * span / max(count - 1, 1)) for i in range(count)]
    return [stream[s:s + length] for s in starts]


if __name__ == "__main__":
    written = write_cpu_prompts()
    print(f"wrote {sum(r['profile'] == 'cpu' for r in written)} cpu prompts to {PROMPTS_PATH}")
