"""The tables notebooks 05, 07, 10, 12 and 13 display leave out pandas' row numbers: every ``tables.show`` call
passes ``index=False`` (a named index, a pivot's rows, stays as a column: ``helpers.tables.show``)."""
from __future__ import annotations

import re

import nbformat
import pytest

from helpers import paths

NOTEBOOKS = ("05", "07", "10", "12", "13")


def _calls(source: str) -> list[str]:
    calls, start = [], 0
    while (at := source.find("tables.show(", start)) >= 0:
        end, depth = at + len("tables.show("), 1
        while depth:
            depth += {"(": 1, ")": -1}.get(source[end], 0)
            end += 1
        calls.append(source[at:end])
        start = end
    return calls


@pytest.mark.parametrize("number", NOTEBOOKS)
def test_displayed_tables_hide_the_row_numbers(number):
    """Regression: the tables showed pandas' index (0, 1, 2, ...) beside every row."""
    (path,) = (paths.REPO_ROOT / "notebooks").glob(f"{number}_*.ipynb")
    notebook = nbformat.read(path, as_version=4)
    calls = [call for cell in notebook.cells if cell.cell_type == "code" for call in _calls(cell.source)]
    assert calls, f"notebook {number} shows no table through tables.show"
    assert all(re.search(r"index=False\)$", call) for call in calls), [c for c in calls if "index=False" not in c]
