"""Which report conditionals a phrase of a section sits under: the report's prose chooses its words by
``\\ifnum\\wb{flag}=1 ... \\else ... \\fi`` on the numbers files; a test names the flags a sentence needs."""
from __future__ import annotations

import re

_TOKEN = re.compile(r"\\ifnum\\wb\{(?P<key>[^}]*)\}(?P<op>[=<>])(?P<value>-?\d+)|\\ifcsname|\\else|\\fi\b")


def conditions_of(tex: str, phrase: str) -> list[tuple[str, bool]]:
    """The ``\\ifnum\\wb{key}...`` conditions enclosing the first occurrence of ``phrase`` in ``tex``, outermost
    first, as ``(condition, branch)``: branch True for the ``\\if`` part, False for the ``\\else`` part
    (``\\ifcsname`` levels are skipped). Raises ``ValueError`` if ``phrase`` is absent."""
    at = tex.find(phrase)
    if at < 0:
        raise ValueError(f"{phrase!r} is not in the section")
    stack = []
    for match in _TOKEN.finditer(tex[:at]):
        token = match.group(0)
        if token.startswith("\\ifnum"):
            stack.append([f"{match['key']}{match['op']}{match['value']}", True])
        elif token == "\\ifcsname":
            stack.append([None, True])
        elif token == "\\else":
            stack[-1][1] = False
        else:
            stack.pop()
    return [(condition, branch) for condition, branch in stack if condition is not None]
