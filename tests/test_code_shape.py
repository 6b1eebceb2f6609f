"""The shape the design asks of the code (issue 25): packages import downwards only, no function in ``helpers/``
over 80 lines, no notebook code cell over 25 lines, the GPU entry point a thin command line."""
from __future__ import annotations

import ast
import json
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HELPERS = ROOT / "helpers"
MAX_FUNCTION_LINES = 80
MAX_CELL_LINES = 25


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported_modules(path: Path) -> set[str]:
    """The ``helpers`` modules a file imports (absolute and relative imports, at any depth in the file)."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            found.add(source)
            # ``from helpers import gpu_measure``: the names that are modules count as imported modules
            found |= {f"{source}.{alias.name}" for alias in node.names if _is_module(f"{source}.{alias.name}")}
    return {name for name in found if name == "helpers" or name.startswith("helpers.")}


def _is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def _package(module: str) -> str:
    """The unit of the layering rule: ``helpers.<package>`` (a top-level module counts as its own package)."""
    return ".".join(module.split(".")[:2])


def package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for path in HELPERS.rglob("*.py"):
        source = _package(_module_name(path))
        for target in map(_package, _imported_modules(path)):
            if target not in (source, "helpers"):
                graph[source].add(target)
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one package (Tarjan)."""
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in list(graph):
        if node not in index:
            visit(node)
    return cycles


def test_cycle_finder_sees_a_cycle():
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def test_packages_import_downwards_only():
    graph = package_graph()
    cycles = import_cycles(graph)
    detail = {tuple(c): {p: sorted(graph[p] & set(c)) for p in c} for c in cycles}
    assert not cycles, f"import cycles between packages (package -> the members it imports): {detail}"


def module_graph() -> dict[str, set[str]]:
    """Module -> the ``helpers`` modules it imports (a package's ``__init__`` left out: it re-exports its members)."""
    graph: dict[str, set[str]] = defaultdict(set)
    packages = {_module_name(path) for path in HELPERS.rglob("__init__.py")}
    for path in HELPERS.rglob("*.py"):
        if path.name != "__init__.py":
            graph[_module_name(path)] |= _imported_modules(path) - packages - {_module_name(path)}
    return graph


def test_modules_import_without_cycles():
    """Regression: helpers.gpu_measure and helpers.gpu_window imported each other (``from helpers import ...``, which
    the package rule did not see), and so did the model file and its cache."""
    graph = module_graph()
    cycles = import_cycles(graph)
    assert not cycles, f"modules that import each other, directly or around a circle: {cycles}"


def _long_functions(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    return [f"{path.relative_to(ROOT)}:{node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]


@pytest.mark.parametrize("path", sorted(HELPERS.rglob("*.py")), ids=lambda p: str(p.relative_to(HELPERS)))
def test_no_long_functions(path):
    assert not _long_functions(path), f"split into named steps (at most {MAX_FUNCTION_LINES} lines each)"


@pytest.mark.parametrize("notebook", sorted((ROOT / "notebooks").glob("*.ipynb")), ids=lambda p: p.name[:2])
def test_notebook_cells_are_short(notebook):
    cells = json.loads(notebook.read_text())["cells"]
    long = {i: len("".join(c["source"]).splitlines()) for i, c in enumerate(cells) if c["cell_type"] == "code"}
    long = {i: n for i, n in long.items() if n > MAX_CELL_LINES}
    assert not long, f"code cells over {MAX_CELL_LINES} lines (cell index: lines); move the logic into helpers/: {long}"


def test_gpu_entry_point_is_thin():
    lines = len((HELPERS / "gpu_measure.py").read_text().splitlines())
    assert lines < 300, f"helpers/gpu_measure.py has {lines} lines: measuring belongs in helpers.experiments"


# ------------------------------------------------------------------------------------------------ sentences

MAX_LONG_LITERALS = 20  # string literals over 80 characters in helpers/ outside docstrings, errors, warnings and help
_PROSE_EXEMPT_CALLS = {"warn", "add_argument", "ArgumentParser", "error", "exit", "warning", "SystemExit"}


def _exempt_nodes(tree: ast.AST) -> set[int]:
    """ids of the nodes whose strings are not prose the library writes: docstrings, what a raise, an assert's
    message, a warning or argparse help says."""
    exempt = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and body \
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, (ast.Constant, ast.JoinedStr)):
            exempt |= {id(n) for n in ast.walk(body[0].value)}
        covered = node.exc if isinstance(node, ast.Raise) else node.msg if isinstance(node, ast.Assert) else None
        if isinstance(node, ast.Call):
            name = getattr(node.func, "attr", None) or getattr(node.func, "id", None) or ""
            if name in _PROSE_EXEMPT_CALLS or name.endswith("Error"):
                covered = node
        if covered is not None:
            exempt |= {id(n) for n in ast.walk(covered)}
    return exempt


def long_literals(path: Path, limit: int = 80) -> list[str]:
    """String literals longer than ``limit`` characters (an f-string or an implicit concatenation is one literal,
    its placeholders one character each) outside docstrings, errors, warnings and command-line help."""
    tree = ast.parse(path.read_text())
    exempt, found = _exempt_nodes(tree), []
    for node in ast.walk(tree):
        if id(node) in exempt:
            continue
        if isinstance(node, ast.JoinedStr):
            exempt |= {id(n) for n in ast.walk(node)}
            text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        else:
            continue
        if len(text) > limit:
            found.append(f"{path.relative_to(ROOT)}:{node.lineno} {text[:50]!r}")
    return found


def test_long_literal_counter_sees_prose_and_skips_errors():
    sample = ROOT / "build" / "long_literal_sample.py"
    sample.parent.mkdir(exist_ok=True)
    sample.write_text('"""' + "d" * 90 + '"""\nx = f"' + "p" * 85 + '{x}"\nraise ValueError("' + "e" * 90 + '")\n')
    try:
        assert [line.split()[0] for line in long_literals(sample)] == ["build/long_literal_sample.py:2"]
    finally:
        sample.unlink()


def test_sentences_live_in_the_notebooks_and_the_report():
    """Issue 42: helpers return numbers, flags and labels; the prose is the notebooks' and the report's."""
    found = [line for path in sorted(HELPERS.rglob("*.py")) for line in long_literals(path)]
    assert len(found) <= MAX_LONG_LITERALS, "\n".join(found)
