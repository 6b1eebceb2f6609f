"""data/prompts.jsonl: enough prompts per profile, several sources, strongly varied lengths; the CPU prompts
come from text the CPU pair never trained on and are rebuilt by helpers.prompts.build_cpu_prompts."""
import platform

import pytest

from helpers.models.corpus import is_heldout
from helpers.prompts import (CPU_SOURCES, GROUNDED_HEAD_LINES, IN_CONTEXT_SEPARATOR, PER_SOURCE, build_cpu_prompts,
                             grounded_prompts, heldout_source_prompts, in_context_prompts, load_prompts,
                             select_prompts, source_counts)


@pytest.mark.parametrize("profile", ["cpu", "gpu"])
def test_each_profile_has_a_heterogeneous_prompt_set(profile):
    prompts = load_prompts(profile)
    assert len(prompts) >= 20
    assert len({p["source"] for p in prompts}) >= 4
    lengths = sorted(len(p["prompt"]) for p in prompts)
    assert lengths[-1] >= 20 * lengths[0], "lengths should vary strongly"


def test_ids_unique_and_sources_filter():
    prompts = load_prompts()
    assert len({p["id"] for p in prompts}) == len(prompts)
    code = load_prompts("gpu", source="code")
    assert code and all(p["source"] == "code" and p["profile"] == "gpu" for p in code)
    assert {"chat", "code", "math", "summarisation", "translation", "qa"} <= {p["source"] for p in load_prompts("gpu")}


def test_unknown_profile_is_a_clear_error():
    with pytest.raises(ValueError, match="profiles in"):
        load_prompts("tpu")


def test_cpu_prompts_cover_four_kinds_with_enough_prompts_each_from_heldout_text():
    prompts = load_prompts("cpu")
    assert tuple(dict.fromkeys(p["source"] for p in prompts)) == CPU_SOURCES
    for source in CPU_SOURCES:
        assert sum(p["source"] == source for p in prompts) == PER_SOURCE >= 10
    for p in prompts:
        document = p["document"]
        # the training corpus is *.py files and pydoc topics: those must be held out by the training split;
        # anything else (a .rst file, generated data) was never in it
        if document.endswith(".py") or document.startswith("pydoc_data.topics/"):
            assert is_heldout(document), document
        else:
            assert document.endswith(".rst") or document.startswith("generated/"), document
    assert len({p["document"] for p in prompts if p["source"] == "code"}) == PER_SOURCE  # one module each


@pytest.mark.skipif(platform.python_version() != "3.11.7", reason="the committed prompts come from Python 3.11.7's library")
def test_committed_cpu_prompts_are_rebuilt_exactly():
    assert build_cpu_prompts() == [{k: p[k] for k in ("id", "profile", "source", "document", "prompt")}
                                   for p in load_prompts("cpu")]


def test_source_counts_in_order_of_first_appearance():
    rows = [{"source": s} for s in "bab c".replace(" ", "")]
    assert source_counts(rows) == "2 b, 1 a, 1 c"
    assert source_counts(select_prompts(load_prompts("cpu"), 20)) == "5 code, 5 docstring, 5 prose, 5 data"


class _CharTokenizer:
    def __call__(self, text):
        return {"input_ids": [ord(ch) % 256 for ch in text]}


def test_heldout_source_prompts_are_fixed_length_windows_of_heldout_files():
    prompts = heldout_source_prompts(_CharTokenizer(), 3, 50)
    assert len(prompts) == 3 and all(len(p) == 50 for p in prompts)
    assert prompts == heldout_source_prompts(_CharTokenizer(), 3, 50)
    with pytest.raises(ValueError, match="held-out files"):
        heldout_source_prompts(_CharTokenizer(), 10_000, 50)


def test_grounded_prompts_repeat_the_head_of_a_heldout_function():
    rows = grounded_prompts(_CharTokenizer(), 6, min_tokens=100, max_tokens=2000)
    assert len(rows) == 6 and len({row["document"] for row in rows}) == 6  # one function per module
    assert [row["id"] for row in rows] == [f"cpu-grounded-{i}" for i in range(1, 7)]
    for row in rows:
        assert row["source"] == "grounded" and row["profile"] == "cpu" and is_heldout(row["document"])
        # the prompt holds the whole function, then its first lines again; the reference is the rest of it
        head = "\n".join(row["prompt"].split("\n")[-GROUNDED_HEAD_LINES:])
        function = (head + row["reference"]).rstrip("\n")
        assert row["prompt"] == function + "\n\n" + head and head.startswith("def ")
        assert 100 <= len(function) <= 2000
    assert rows == grounded_prompts(_CharTokenizer(), 6, min_tokens=100, max_tokens=2000)


def test_grounded_prompts_clear_errors():
    with pytest.raises(ValueError, match="head_lines"):
        grounded_prompts(_CharTokenizer(), 2, head_lines=0)
    with pytest.raises(ValueError, match="min_tokens"):
        grounded_prompts(_CharTokenizer(), 2, min_tokens=50, max_tokens=10)
    with pytest.raises(ValueError, match="widen the token range"):
        grounded_prompts(_CharTokenizer(), 2, min_tokens=10, max_tokens=11)


def test_in_context_prompts_hold_the_continuation_verbatim():
    written = []

    def continuation(text):  # stands in for a model's greedy continuation (tests/test_specdec_compare.py runs one)
        written.append(text)
        return f"\n# after {len(text)} characters\n"

    rows = in_context_prompts(_CharTokenizer(), 4, continuation, min_tokens=100, max_tokens=2000)
    assert [row["id"] for row in rows] == [f"cpu-incontext-{i}" for i in range(1, 5)]
    assert len({row["document"] for row in rows}) == 4  # one function per module
    for row, function in zip(rows, written):
        assert row["source"] == "in-context" and row["profile"] == "cpu" and is_heldout(row["document"])
        # function, its continuation, a blank line, the function again: the continuation is in the prompt
        assert row["prompt"] == function + row["reference"] + IN_CONTEXT_SEPARATOR + function
        assert row["reference"] == continuation(function) and function.startswith(("def ", "async def "))
        assert 100 <= len(function) <= 2000
    # the same functions the copy task draws from
    assert [row["document"] for row in rows] == [row["document"] for row in
                                                 grounded_prompts(_CharTokenizer(), 4, min_tokens=100, max_tokens=2000)]


def test_in_context_prompts_clear_errors():
    with pytest.raises(ValueError, match="callable"):
        in_context_prompts(_CharTokenizer(), 2, "text")
    with pytest.raises(ValueError, match="expected text"):
        in_context_prompts(_CharTokenizer(), 2, lambda text: "", min_tokens=100, max_tokens=2000)
    with pytest.raises(ValueError, match="widen the token range"):
        in_context_prompts(_CharTokenizer(), 2, lambda text: "x", min_tokens=10, max_tokens=11)
