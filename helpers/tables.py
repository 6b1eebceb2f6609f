"""Tables and numbers for the LaTeX report, written by code so that prose never types a number by hand.

``write_table`` writes a booktabs ``tabular`` to ``report/generated/<profile>/<name>.tex``; the report
wraps it in a table float with ``\\wbtable{name}``. ``write_numbers`` writes ``\\wbset{key}{value}`` lines
that the report quotes with ``\\wb{key}``.
"""
from __future__ import annotations

import re
from pathlib import Path

from helpers import paths

_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}


def latex_escape(text) -> str:
    """Escape the characters LaTeX treats specially (model ids have '_' and '/', units have '%')."""
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in str(text))


# The handout's symbols as they appear in code-made headers and captions, set as maths: T_T, T_D, T_V (with an
# argument or a ratio: T_V(gamma)/T_T), gamma, alpha, tau, Omega, a_d, n_max, >= and <=; a name that merely
# contains one (gamma_key, T_V_s, alphas) stays text.
_SYMBOLS = re.compile(r"(?<![\w\\])(T_[TDV](?:\([^)]*\))?(?:/T_[TDV](?:\([^)]*\))?)?|gamma|alpha|tau|Omega|a_d|n_max)"
                      r"(?![\w])|>=|<=|(?<=\d)x(?![\w])")
_GREEK = {"gamma": r"\gamma", "alpha": r"\alpha", "tau": r"\tau", "Omega": r"\Omega", "n_max": r"n_{\max}",
          ">=": r"\geq", "<=": r"\leq", "x": r"\times"}


def typeset(text) -> str:
    """Text written by code for the report (a header, a caption, a sentence of the numbers files): special
    characters escaped, the handout's symbols as maths ("T_V(gamma)/T_T" -> $T_V(\\gamma)/T_T$, "alpha" ->
    $\\alpha$) and a factor's x as a times sign ("1.30x" -> 1.30$\\times$; "draft-4x144" stays)."""
    text = str(text)
    pieces, last = [], 0
    for match in _SYMBOLS.finditer(text):
        symbol = match.group(0)
        maths = re.sub(r"gamma|alpha|tau|Omega|n_max|>=|<=|^x$", lambda m: _GREEK[m.group(0)], symbol)
        pieces += [latex_escape(text[last:match.start()]), f"${maths}$"]
        last = match.end()
    return "".join(pieces) + latex_escape(text[last:])


def _format_cell(value, float_format: str) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "--"
    if isinstance(value, float):
        if "g}" in float_format and value.is_integer() and abs(value) < 1e15:
            return format_number(int(value))  # a count a row of mixed dtypes made a float: 4096, not 4.1e+03
        text = float_format.format(value)
        if "e" in text and 1 <= abs(value) < 1e6:
            return format_number(int(round(value)))  # 1240 tokens/s, not 1.24e+03
        return text
    return format_number(value)  # bools, ints and text as in prose


def table_tex(df, float_format: str = "{:.3g}", column_format: str | None = None, formats: dict | None = None) -> str:
    """A booktabs tabular for ``df`` (the header row is the column names, escaped)."""
    formats = formats or {}
    columns = list(df.columns)
    if column_format is None:
        column_format = "l" + "r" * (len(columns) - 1)
    lines = [rf"\begin{{tabular}}{{{column_format}}}", r"\toprule"]
    lines.append(" & ".join("$c$" if c == "c" else typeset(c) for c in columns) + r" \\")  # c: the cost ratio
    lines.append(r"\midrule")
    for _, row in df.iterrows():
        cells = []
        for column in columns:
            fmt = formats.get(column, float_format)
            value = row[column]
            if hasattr(value, "item") and not isinstance(value, str):
                value = value.item()
            cells.append(fmt(value) if callable(fmt) else _format_cell(value, fmt))
        lines.append(" & ".join(cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines) + "\n"


def write_table(df, name: str, profile: str, caption: str | None = None, **kwargs) -> Path:
    """Write ``report/generated/<profile>/<name>.tex`` (and ``<name>.caption.tex`` if given)."""
    _check_name(name)
    out = paths.generated_dir(profile) / f"{name}.tex"
    out.write_text(table_tex(df, **kwargs), encoding="utf-8")
    if caption is not None:
        (out.parent / f"{name}.caption.tex").write_text(rf"\caption{{{typeset(caption)}}}" + "\n", encoding="utf-8")
    return out


def format_number(value, digits: int = 3) -> str:
    """Numbers as they appear in prose: ints with thousands separators, floats to ``digits`` significant."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}".replace(",", "{,}")
    if isinstance(value, float):
        text = f"{value:.{digits}g}"
        if "e" in text:
            mantissa, exponent = text.split("e")
            return rf"\ensuremath{{{mantissa}\times 10^{{{int(exponent)}}}}}"
        return text
    return typeset(value)


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and its noun in agreement: "1 thread", "2 threads", "1 KV head"; ``plural`` for irregular nouns."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def write_numbers(name: str, profile: str, numbers: dict, digits: int = 3) -> Path:
    """Write ``\\wbset{key}{value}`` lines to ``report/generated/<profile>/<name>.numbers.tex``.

    Values that are already strings are escaped; pass ``str`` to control formatting exactly.
    """
    _check_name(name)
    lines = []
    for key, value in numbers.items():
        if not _KEY_RE.match(key):
            raise ValueError(f"number key {key!r}: use letters, digits, '_', '-' or '.'")
        lines.append(rf"\wbset{{{key}}}{{{format_number(value, digits)}}}")
    out = paths.generated_dir(profile) / f"{name}.numbers.tex"
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


def _check_name(name: str) -> None:
    if not _KEY_RE.match(name):
        raise ValueError(f"output name {name!r}: use letters, digits, '_', '-' or '.' (no paths)")


# ------------------------------------------------------------------------------------------------ notebook display

_SNAKE = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+")  # acceptance_rate, best_gamma; T_V and T_D stay as they are
NOT_APPLICABLE = "–"  # a cell with no value (a gamma a drafter does not reach, a batch a setting did not run)


class Shown:
    """A table as a notebook shows it (:func:`show`): HTML in JupyterLab, aligned text under papermill and nbval."""

    def __init__(self, df, digits: int, index: bool = True):
        df = df.round(digits)
        if not index and df.index.name is not None:  # a named index (a pivot's rows) is data: keep it as a column
            df = df.reset_index()
        self.df = df.rename(columns=lambda c: c.replace("_", " ") if isinstance(c, str) and _SNAKE.fullmatch(c) else c)
        self.index = index

    def __repr__(self) -> str:
        return self.df.to_string(na_rep=NOT_APPLICABLE, index=self.index)

    def _repr_html_(self) -> str:
        return self.df.to_html(na_rep=NOT_APPLICABLE, index=self.index)


def show(df, digits: int = 3, index: bool = True) -> Shown:
    """``df`` for a notebook cell to display: rounded to ``digits`` decimals, a missing value as a dash rather than
    NaN, and code names in the header as words ("acceptance_rate" -> "acceptance rate"). ``index=False`` leaves out
    pandas' row numbers (a named index, such as a pivot's, stays, as the first column)."""
    return Shown(df, digits, index)
