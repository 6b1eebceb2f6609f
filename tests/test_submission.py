"""submission/: the handout's hand-in files (specdec.py, benchmark.py, prompts.jsonl, long_prompt.txt,
kv-cache-implementation.py) run offline on the CPU pair and agree with the workbook's code."""
from __future__ import annotations

import ast
import importlib.util
import json
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import helpers.kv_cache
import helpers.specdec
from helpers import run_all
from helpers.prompts import help_topics_text
from helpers.models.corpus import load_corpus
from helpers.prompts import CPU_SOURCES, load_prompts, select_prompts
from helpers.specdec import autoregressive_generate
from helpers.stats import REPETITIVE_SHARE, repeated_ngram_share
from submission import benchmark, make_prompts, specdec
from submission import kv_cache_implementation as twin
from distribution_checks import check_follows_target, chi_square_pvalue, exact_joint, first_two_counts, sampling_pair

ROOT = Path(__file__).resolve().parent.parent
SUBMISSION = ROOT / "submission"
LONG_PROMPT_TOKENS = (30_000, 34_000)  # "about 32k tokens" (CPU pair tokenizer)


@pytest.fixture(scope="module")
def pair():
    return specdec.load_models(device="cpu")  # (target, draft, tokenizer): the CPU pair


@pytest.fixture(scope="module")
def rows():
    return make_prompts.read_prompts()


# --------------------------------------------------------------------------- every file carries the header

HAND_IN_FILES = ["specdec.py", "benchmark.py", "kv-cache-implementation.py", "kv_cache_implementation.py",
                 "make_prompts.py"]


@pytest.mark.parametrize("name", HAND_IN_FILES)
def test_name_header(name):
    """The handout asks for name and Andrew ID at the top, in a comment: the first line holds them, filled in with
    any name (regression: the files handed in held <...> placeholders; an earlier test accepted only the handout's
    own "Test Student"), and the second line is a comment too."""
    lines = (SUBMISSION / name).read_text(encoding="utf-8").splitlines()
    assert run_all.student_header(SUBMISSION / name) is not None, lines[0]
    assert lines[1].startswith("# "), lines[:2]


def test_every_hand_in_file_names_the_same_student():
    headers = {name: run_all.student_header(SUBMISSION / name) for name in HAND_IN_FILES}
    assert len(set(headers.values())) == 1, headers


@pytest.mark.parametrize("line, expected", [
    ("# Name / Andrew ID: Test Student / tests", ("Test Student", "tests")),
    ("# Name / Andrew ID: Zoë O'Brien-Nakamura / zobrien", ("Zoë O'Brien-Nakamura", "zobrien")),
    ("# Name / Andrew ID: Li Wei / lwei2  ", ("Li Wei", "lwei2")),
    ("# Name / Andrew ID: <your name> / <your Andrew ID>", None),
    ("# Name / Andrew ID: Jane Doe / <andrew id>", None),
    ("# Name / Andrew ID:  / jdoe", None),
    ("# Name / Andrew ID: Jane Doe / ", None),
    ("# Name: Jane Doe", None),
    ("", None),
])
def test_name_header_accepts_any_filled_in_name(tmp_path, line, expected):
    path = tmp_path / "specdec.py"
    path.write_text(line + "\n# (the line under it)\n", encoding="utf-8")
    assert run_all.student_header(path) == expected


def test_report_title_names_the_student(tmp_path):
    """The report's title block shows the name and Andrew ID of submission/specdec.py's header: run_all writes
    report/build/student.tex (LaTeX specials escaped) before latexmk, and report.tex's \\author inputs it, falling
    back to a "not filled in" note when the file is absent."""
    source = tmp_path / "specdec.py"
    source.write_text("# Name / Andrew ID: Ana_María & Co 100% / amc\n# ...\n", encoding="utf-8")
    macro = run_all.write_student_macro(tmp_path / "report", source)
    assert macro == tmp_path / "report" / "build" / "student.tex"
    assert macro.read_text(encoding="utf-8").startswith(r"Ana\_María \& Co 100\% (amc)")
    source.write_text("# Name / Andrew ID: <your name> / <andrew id>\n", encoding="utf-8")
    assert "not filled in" in run_all.write_student_macro(tmp_path / "report", source).read_text(encoding="utf-8")

    report_tex = (ROOT / "report" / "report.tex").read_text(encoding="utf-8")
    author = re.search(r"^\\author\{.*?\n(?=\\date)", report_tex, flags=re.M | re.S).group(0)
    assert r"\IfFileExists{build/student.tex}{\input{build/student.tex}}" in author
    if shutil.which("pdflatex") is None or shutil.which("pdftotext") is None:
        pytest.skip("pdflatex/pdftotext not installed: the LaTeX half of this test needs TeX Live")
    # the title block alone, built with and without the file, as build_report runs LaTeX (cwd = the report dir)
    document = ("\\documentclass{article}\\usepackage[T1]{fontenc}\\usepackage{lmodern}\\title{T}\n" + author
                + "\\date{}\\begin{document}\\maketitle\\end{document}\n")
    for name, expected in (("Zoë Q. Student & co", "Zoë Q. Student & co (zqs)"), (None, "name not filled in")):
        report = tmp_path / f"build-{bool(name)}"
        report.mkdir()
        (report / "title.tex").write_text(document, encoding="utf-8")
        if name:
            source.write_text(f"# Name / Andrew ID: {name} / zqs\n", encoding="utf-8")
            run_all.write_student_macro(report, source)
        out = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "title.tex"], cwd=report,
                             capture_output=True, text=True, errors="replace", timeout=120)
        assert out.returncode == 0, out.stdout[-2000:]
        text = subprocess.run(["pdftotext", str(report / "title.pdf"), "-"], capture_output=True, text=True).stdout
        assert expected in " ".join(text.split()), text


# --------------------------------------------------------------------------- specdec.py: decode()

GREEDY_PROMPTS = 4  # prompts of the stand-in prompts.jsonl, one of each source
GREEDY_NEW_TOKENS = 12


def test_decode_greedy_equals_autoregressive(pair, rows):
    """Lossless at temperature 0: decode() returns plain greedy decoding's tokens, and the workbook's own
    speculative_generate's, token for token, for every gamma from 1 to 7 and prompts of every kind."""
    target, draft, tokenizer = pair
    picked = [next(row for row in rows if row["source"] == source) for source in CPU_SOURCES][:GREEDY_PROMPTS]
    for row in picked:
        ids = specdec.encode(tokenizer, row["prompt"], "cpu")
        reference = autoregressive_generate(target, ids, GREEDY_NEW_TOKENS).tokens
        for gamma in range(1, 8):
            result = specdec.decode(target, draft, ids, GREEDY_NEW_TOKENS, gamma)
            workbook = helpers.specdec.speculative_generate(target, draft, ids, GREEDY_NEW_TOKENS, gamma).tokens
            assert torch.equal(result.tokens, reference), (row["id"], gamma)
            assert torch.equal(result.tokens, workbook), (row["id"], gamma)
            stats = result.stats
            assert stats.new_tokens == GREEDY_NEW_TOKENS and 0.0 <= stats.alpha <= 1.0
            assert stats.proposed == sum(stats.gamma_per_round) and max(stats.gamma_per_round) <= gamma
            assert stats.accepted == sum(stats.accepted_per_round)
            assert stats.target_forwards == stats.rounds + 1  # the prefill, then ONE verify forward per round
            # every round emits its accepted drafts and one target token (the last round may be cut short)
            assert stats.accepted + stats.rounds >= GREEDY_NEW_TOKENS


def test_decode_stops_at_eos(pair, rows):
    """An EOS token ends the output (it is included, nothing after it), wherever in a round it falls: as the
    target's own token, or among accepted drafts that the round emits together."""
    target, draft, tokenizer = pair
    ids = specdec.encode(tokenizer, rows[0]["prompt"], "cpu")
    reference = autoregressive_generate(target, ids, GREEDY_NEW_TOKENS, eos_token_id=[]).tokens.tolist()
    for position in (0, 3, 7):
        eos = reference[position]
        expected = reference[:reference.index(eos) + 1]
        for gamma in (1, 3, 5):
            result = specdec.decode(target, draft, ids, GREEDY_NEW_TOKENS, gamma, eos_token_id=eos)
            assert result.tokens.tolist() == expected, (position, gamma)
            assert result.stats.new_tokens == len(expected)
            listed = specdec.decode(target, draft, ids, GREEDY_NEW_TOKENS, gamma, eos_token_id=[10**6, eos])
            assert listed.tokens.tolist() == expected


def test_decode_sampling_is_seeded(pair, rows):
    target, draft, tokenizer = pair
    ids = specdec.encode(tokenizer, rows[0]["prompt"], "cpu")
    runs = []
    for _ in range(2):
        torch.manual_seed(specdec.SEED)
        runs.append(specdec.decode(target, draft, ids, 10, 3, temperature=1.0).tokens)
    assert torch.equal(*runs)
    assert torch.equal(specdec.decode(target, draft, ids, 10, 3, temperature=1.0, seed=5).tokens,
                       specdec.decode(target, draft, ids, 10, 3, temperature=1.0, seed=5).tokens)


SAMPLES = 1200  # seeds; a tiny model pair keeps each decode() call to a few milliseconds


def test_decode_sampling_follows_the_target_distribution():
    """Chen et al., Theorem 1, on decode() itself: its first two tokens at temperature 1 are distributed as the
    target's, P(x1, x2 | prompt), although the draft's distribution is far from it.

    As tests/test_specdec.py does for the workbook's implementation: a 16-token vocabulary, an independent random
    draft (most drafts are rejected, so the residual norm(max(0, q - p)) is sampled often; some are accepted and
    the bonus token is drawn too), gamma = 2, one fixed seed per run (deterministic). Checks: the total variation
    to the exact joint stays below the 99.9th percentile exact multinomial sampling of this size shows, and
    chi-square tests on the joint and on the first token alone give p > 1e-3."""
    vocab, temperature = 16, 1.0
    target, draft, prompt, expected = sampling_pair(vocab, temperature)
    counts, results = first_two_counts(lambda seed: specdec.decode(target, draft, prompt, 3, 2, temperature,
                                                                   seed=seed, eos_token_id=[]), vocab, SAMPLES)
    accepted = sum(r.stats.accepted for r in results) / sum(r.stats.proposed for r in results)
    assert 0.1 < accepted < 0.9  # both the accept and the residual path are exercised
    *_, pvalue = check_follows_target(counts, expected, exact_joint(draft, prompt, temperature), SAMPLES)
    assert pvalue > 1e-3
    first, first_expected = counts.reshape(vocab, vocab).sum(1), expected.reshape(vocab, vocab).sum(1)
    assert chi_square_pvalue(first, first_expected, SAMPLES) > 1e-3


def test_decode_rejects_bad_input(pair):
    target, draft, _ = pair
    with pytest.raises(ValueError, match="gamma"):
        specdec.decode(target, draft, torch.tensor([[1, 2]]), 4, 0)
    with pytest.raises(ValueError, match="shape"):
        specdec.decode(target, draft, torch.tensor([1, 2]), 4, 2)
    with pytest.raises(ValueError, match="temperature"):
        specdec.decode(target, draft, torch.tensor([[1, 2]]), 4, 2, temperature=-1.0)


def _function_source(source: str, name: str) -> str:
    node = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == name)
    return ast.get_source_segment(source, node)


def test_decode_holds_the_algorithm_with_its_todo_lines():
    """The grader reads the whole algorithm in decode(): the scaffold's six TODO lines in order, each directly
    above the code that answers it (a comment continuation, then code), and none of the workbook's speculative
    decoding: it uses transformers' DynamicCache and crop, and only input checks and result types from helpers."""
    source = (SUBMISSION / "specdec.py").read_text(encoding="utf-8")
    body = _function_source(source, "decode")
    todos = ["prefill the prompt", "draft gamma tokens", "verify all gamma drafts with ONE target forward",
             "accept/reject", "roll both KV caches back", "count accepted and proposed drafts"]
    lines = body.splitlines()
    found = [i for i, line in enumerate(lines) if line.strip().startswith("# TODO: ")]
    assert [next(t for t in todos if t in lines[i]) for i in found] == todos
    for i in found:
        after = next(line for line in lines[i + 1:] if not line.strip().startswith("#"))
        assert after.strip() and lines.index(after) - i <= 2, lines[i]  # code at once (a wrapped TODO: one more)
    for fragment in ("DynamicCache(", "_rollback(target_cache", "_rollback(draft_cache", "for _ in range(gamma_r)",
                     "r * p[rows, drafts] < q[rows, drafts]", "(q[k] - p_k).clamp_min(0)", ".cumprod(dim=0).sum()",
                     "record_round", "ONE host sync"):
        assert fragment in source, fragment
    assert "cache.crop(" in _function_source(source, "_rollback")
    assert "speculative_generate" not in body and "helpers.specdec.linear" not in source
    imported = {alias.name for node in ast.walk(ast.parse(source)) if isinstance(node, ast.ImportFrom)
                and node.module and node.module.startswith("helpers.specdec") for alias in node.names}
    assert imported <= {"GenerationResult", "GenerationStats", "check_draft", "check_generation",
                        "autoregressive_generate"}, imported


def test_specdec_main_runs_offline(capsys):
    figures = specdec.main(["--max-new-tokens", "6", "--device", "cpu"])
    out = capsys.readouterr().out
    assert out.startswith(specdec.default_prompt()) and "alpha=" in out and "speedup" in out
    assert 1 <= len(figures["tokens"]) <= 6 and figures["speedup"] > 0


def test_default_prompt_is_not_a_loop(pair):
    """The default prompt of ``python submission/specdec.py`` (regression: the first prompt of prompts.jsonl, which
    the small target continued with ``self.assertEqual(self.(self.(...``): its 64-token greedy continuation is
    code, not a loop, so the speedup printed beside it is not flattered."""
    target, _, tokenizer = pair
    ids = specdec.encode(tokenizer, specdec.default_prompt(), "cpu")
    tokens = autoregressive_generate(target, ids, 64).tokens.tolist()
    assert repeated_ngram_share(tokens) < REPETITIVE_SHARE / 2
    assert specdec.repetition_note(tokens) is None


def test_repetition_flag():
    loop = [5, 6, 7, 8] * 10
    note = specdec.repetition_note(loop)
    assert note is not None and f"{repeated_ngram_share(loop):.0%} repeated 4-grams" in note
    assert "speculation is easy on loops" in note
    assert specdec.repetition_note(list(range(40))) is None
    assert specdec.repetition_note(torch.tensor(loop)) == note


def test_specdec_main_flags_a_loop(capsys):
    figures = specdec.main(["--prompt", "class Stack:\n", "--max-new-tokens", "16", "--device", "cpu"])
    out = capsys.readouterr().out
    assert figures["repetitive"] and "output repeats itself" in out.splitlines()[-1]


def test_unknown_model_tokenizer_refused():
    with pytest.raises(ValueError, match="no tokenizer"):
        specdec.load_models("cpu/Qwen3-0.6B", "cpu/Qwen3-0.6B", device="cpu")


# --------------------------------------------------------------------------- benchmark.py

def test_benchmark_small_run(pair, rows):
    target, draft, tokenizer = pair
    picked = [rows[0], rows[-1]]
    report = benchmark.run_benchmark(target, draft, tokenizer, picked, gammas=(2, 3), max_new_tokens=8, verbose=False)
    assert len(report["per_prompt"]) == 4
    assert all(row["identical"] for row in report["per_prompt"])
    for gamma in (2, 3):
        total = report["total"][gamma]
        assert total["prompts"] == 2 and total["identical"]
        assert total["speedup"] == pytest.approx(total["ar_s"] / total["sd_s"])
        assert 0.0 <= total["alpha"] <= 1.0
        assert set(report["per_source"][gamma]) == {rows[0]["source"], rows[-1]["source"]}


def test_benchmark_main_prints_json(tmp_path, capsys, rows):
    small = tmp_path / "prompts.jsonl"
    small.write_text(make_prompts.render_prompts(rows[:1]), encoding="utf-8")
    benchmark.main(["--prompts", str(small), "--max-new-tokens", "4", "--device", "cpu"])
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert figures["total"]["3"]["identical"] is True


def test_benchmark_reads_a_course_style_prompts_file(tmp_path, capsys):
    """``--prompts PATH``: another prompts.jsonl (here one with only the prompt text and its data source, ids
    missing, a blank line), read as the benchmark's prompts; its rows, sources and path show in the figures."""
    course = tmp_path / "course" / "prompts.jsonl"
    course.parent.mkdir()
    course.write_text('{"prompt": "def add(a, b):\\n", "source": "code"}\n\n'
                      '{"prompt": "The quick brown fox", "data_source": "prose", "extra": 1}\n', encoding="utf-8")
    rows = make_prompts.read_prompts(course)
    assert [(r["id"], r["source"]) for r in rows] == [("prompt-1", "code"), ("prompt-3", "prose")]
    assert rows[1]["extra"] == 1
    report = benchmark.main(["--prompts", str(course), "--max-new-tokens", "3", "--device", "cpu", "--repeats", "1"])
    out = capsys.readouterr().out
    assert f"prompts: {course} (2 prompts)" in out
    figures = json.loads(out.strip().splitlines()[-1])
    assert figures["prompts"] == str(course) and figures["total"]["3"]["prompts"] == 2
    assert set(figures["per_source"]["3"]) == {"code", "prose"}
    assert [row["id"] for row in report["per_prompt"]] == ["prompt-1", "prompt-3"]
    assert all("repetitive" in row for row in report["per_prompt"])


def test_benchmark_default_prompts_are_named_a_stand_in(capsys, monkeypatch):
    monkeypatch.setattr(benchmark, "load_models", lambda *a, **k: (_ for _ in ()).throw(SystemExit("stop")))
    with pytest.raises(SystemExit, match="stop"):
        benchmark.main([])
    assert "the workbook's stand-in" in capsys.readouterr().out


@pytest.mark.parametrize("content, problem", [
    (None, "no such file"),
    ("", "no prompts"),
    ('{"id": "a", "prompt": "x"}\n{"id": "b", prompt: "y"}\n', ":2: not valid JSON"),
    ('[{"id": "a", "prompt": "x"}]\n', "not an object"),
    ('{"id": "a", "question": "x"}\n', "no prompt text"),
    ('{"id": "a", "prompt": "x"}\n{"id": "a", "prompt": "y"}\n', "more than once"),
])
def test_benchmark_names_the_problem_in_a_bad_prompts_file(tmp_path, capsys, content, problem):
    """A missing or malformed --prompts file stops the benchmark before any model loads, with a message that names
    the file, the problem and the fix (usage error, exit status 2)."""
    path = tmp_path / "prompts.jsonl"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(make_prompts.PromptsFileError, match=re.escape(problem)):
        make_prompts.read_prompts(path)
    with pytest.raises(SystemExit) as exit_info:
        benchmark.main(["--prompts", str(path), "--device", "cpu"])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert str(path) in error and problem in error
    fix = {"no such file": "--prompts course/prompts.jsonl", "no prompts": "one JSON object per line",
           ":2: not valid JSON": "fix that line", "not an object": "one object such as",
           "no prompt text": "needs a non-empty string", "more than once": "its own id"}[problem]
    assert fix in error


def test_stand_in_files_are_named_stand_ins():
    """The workbook's prompts.jsonl and long_prompt.txt are stand-ins for the course's files, and say so wherever
    they are described (the scripts' docstrings and the README), never passing for the course's."""
    for name in ("make_prompts.py", "benchmark.py", "specdec.py"):
        assert "stand-in" in (SUBMISSION / name).read_text(encoding="utf-8"), name
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Handing in the homework"):readme.index("## Running on a GPU")]
    assert "stand-in" in section and "--prompts" in section


# --------------------------------------------------------------------------- prompts.jsonl and long_prompt.txt

def test_prompts_file(rows):
    """The handout's 20 prompts are notebook 07's main-table prompts: every kind of text equally represented."""
    assert len(rows) == 20 and len({row["id"] for row in rows}) == 20
    sources = [row["source"] for row in rows]
    assert {s: sources.count(s) for s in CPU_SOURCES} == dict.fromkeys(CPU_SOURCES, 5)
    assert [row["id"] for row in rows] == [row["id"] for row in select_prompts(load_prompts("cpu"), 20)]
    for row in rows:
        assert row["prompt"].strip() and row["origin"]


def test_prompts_come_from_held_out_documents(rows):
    """The README says so: the CPU pair never trained on the documents the prompts come from (held-out corpus
    documents, prose files outside the corpus, generated tables and logs)."""
    corpus = load_corpus()
    trained = set(corpus.train_names)
    assert any(row["origin"] in set(corpus.heldout_names) for row in rows)
    for row in rows:
        assert row["origin"] not in trained, row["origin"]


def test_manifest_matches_committed_files():
    manifest = json.loads(make_prompts.MANIFEST_PATH.read_text(encoding="utf-8"))
    prompts = make_prompts.PROMPTS_PATH.read_text(encoding="utf-8")
    long_prompt = make_prompts.LONG_PROMPT_PATH.read_text(encoding="utf-8")
    assert manifest["prompts_sha256"] == make_prompts._sha256(prompts)
    assert manifest["long_prompt_sha256"] == make_prompts._sha256(long_prompt)
    assert manifest["long_prompt_bytes"] == len(long_prompt.encode("utf-8")) < 200_000


def test_long_prompt_token_count():
    text = make_prompts.LONG_PROMPT_PATH.read_text(encoding="utf-8")
    tokens = make_prompts.count_tokens(text)
    assert LONG_PROMPT_TOKENS[0] <= tokens <= LONG_PROMPT_TOKENS[1]
    manifest = json.loads(make_prompts.MANIFEST_PATH.read_text(encoding="utf-8"))
    assert tokens == manifest["long_prompt_tokens_cpu_pair"]


def _skip_unless_built_with_this_python():
    manifest = json.loads(make_prompts.MANIFEST_PATH.read_text(encoding="utf-8"))
    if manifest["python"] != platform.python_version():
        pytest.skip(f"files built with Python {manifest['python']}; this is {platform.python_version()}, whose "
                    "standard library text may differ")


def test_long_prompt_is_the_start_of_notebook_03s_text():
    _skip_unless_built_with_this_python()

    text = make_prompts.LONG_PROMPT_PATH.read_text(encoding="utf-8")
    assert help_topics_text().startswith(text.rstrip("\n"))


def test_long_prompt_exceeds_the_cpu_pair_context():
    """The README says the long prompt is longer than the CPU pair's context window."""
    manifest = json.loads(make_prompts.MANIFEST_PATH.read_text(encoding="utf-8"))
    config = json.loads((ROOT / "data" / "cpu_pair" / "target" / "config.json").read_text(encoding="utf-8"))
    assert manifest["long_prompt_tokens_cpu_pair"] > config["max_position_embeddings"]


def test_readme_states_the_measured_token_count():
    manifest = json.loads(make_prompts.MANIFEST_PATH.read_text(encoding="utf-8"))
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Handing in the homework"):]
    assert f"{manifest['long_prompt_tokens_cpu_pair']:,}" in section


def test_prompts_match_a_fresh_build():
    """make_prompts.py rebuilds the committed files byte for byte (with the Python that built them)."""
    _skip_unless_built_with_this_python()
    assert make_prompts.check() == []


# --------------------------------------------------------------------------- kv-cache-implementation.py

KV_PROMPTS = 4  # prompts of prompts.jsonl checked token for token (each with and without the cache)
KV_NEW_TOKENS = 12


def _load_kv_file():
    spec = importlib.util.spec_from_file_location("kv_cache_file_under_test", SUBMISSION / "kv-cache-implementation.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def kv_models():
    """(the hand-in file as a module, its decoder, the workbook's decoder, tokenizer): both over the same weights."""
    kv = _load_kv_file()
    hf_model, tokenizer = kv.load_hf(device="cpu")
    return kv, kv.MiniQwen3.from_hf(hf_model), helpers.kv_cache.from_hf(hf_model), tokenizer


def test_kv_file_is_self_contained_with_todo_lines():
    """The hand-in file holds the cache, the attention that uses it and generation itself: it defines them and
    imports nothing from the workbook but the model loader (inside load_hf)."""
    source = (SUBMISSION / "kv-cache-implementation.py").read_text(encoding="utf-8")
    assert len(re.findall(r"# TODO: ", source)) >= 5
    for definition in ("class KVCache", "class Attention", "class MiniQwen3", "def generate"):
        assert definition in source, definition
    workbook_imports = re.findall(r"^\s*(?:from|import) (helpers\S*)", source, flags=re.M)
    assert workbook_imports == ["helpers.models"], workbook_imports
    kv = _load_kv_file()
    for name in ("KVCache", "Attention", "MiniQwen3", "generate"):
        assert getattr(kv, name).__module__ == "kv_cache_file_under_test", name
    assert twin.generate.__doc__ == kv.generate.__doc__ and twin.KVCache.__doc__ == kv.KVCache.__doc__


def test_kv_file_matches_the_workbook_token_for_token(kv_models, rows):
    """Same tokens as the workbook's decoder (helpers.kv_cache.generate), with and without the cache; prompts
    of several kinds and lengths, and a batch of two."""
    kv, mine, workbook, tokenizer = kv_models
    for row in rows[:KV_PROMPTS]:
        ids = tokenizer(row["prompt"], return_tensors="pt")["input_ids"]
        reference = helpers.kv_cache.generate(workbook, ids, KV_NEW_TOKENS)
        assert torch.equal(kv.generate(mine, ids, KV_NEW_TOKENS), reference), row["id"]
        assert torch.equal(kv.generate(mine, ids, KV_NEW_TOKENS, use_cache=False), reference), row["id"]
    ids = tokenizer([rows[0]["prompt"]] * 2, return_tensors="pt")["input_ids"]
    out = kv.compare(mine, ids, KV_NEW_TOKENS)
    assert out["identical"] and out["cached"].shape == (2, KV_NEW_TOKENS)
    assert torch.equal(out["cached"], helpers.kv_cache.generate(workbook, ids, KV_NEW_TOKENS))


def test_kv_file_matches_transformers_generate(kv_models, rows):
    """And the same tokens as transformers' own greedy generate on the model the weights come from."""
    from helpers.generation.sweeps import generate_exact

    kv, mine, _, tokenizer = kv_models
    hf_model, _ = kv.load_hf(device="cpu")
    ids = tokenizer(rows[1]["prompt"], return_tensors="pt")["input_ids"]
    expected = generate_exact(hf_model, ids, KV_NEW_TOKENS)[:, ids.shape[1]:]
    assert torch.equal(kv.generate(kv.MiniQwen3.from_hf(hf_model), ids, KV_NEW_TOKENS), expected)


@torch.inference_mode()
def test_kv_file_cache_holds_what_the_workbook_cache_holds(kv_models, rows):
    """After prefill and two decode steps: the same logits, the same stored keys and values in every layer, and
    the same length; nothing past the stored tokens is written."""
    kv, mine, workbook, tokenizer = kv_models
    ids = tokenizer(rows[2]["prompt"], return_tensors="pt")["input_ids"]
    length = ids.shape[1]
    ours, theirs = mine.new_cache(1, length + 4), workbook.new_cache(1, length + 4)
    ours_logits, theirs_logits = mine(ids, ours), workbook(ids, theirs, last_only=True)[:, -1]
    for _ in range(2):
        token = ours_logits.argmax(-1, keepdim=True)
        assert torch.equal(token, theirs_logits.argmax(-1, keepdim=True))
        ours_logits, theirs_logits = mine(token, ours), workbook(token, theirs, last_only=True)[:, -1]
    torch.testing.assert_close(ours_logits, theirs_logits, rtol=1e-4, atol=1e-4)
    assert ours.length == theirs.length == length + 2
    for layer in range(len(ours.keys)):
        torch.testing.assert_close(ours.keys[layer], theirs.keys[layer], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(ours.values[layer], theirs.values[layer], rtol=1e-4, atol=1e-5)
        assert not ours.keys[layer][:, :, length + 2:].any()


def test_kv_file_cache_refuses_overflow_and_bad_input(kv_models):
    kv, mine, _, _ = kv_models
    cache = mine.new_cache(1, 3)
    with torch.inference_mode():
        mine(torch.tensor([[1, 2, 3]]), cache)
        with pytest.raises(ValueError, match="capacity"):
            mine(torch.tensor([[4]]), cache)
    with pytest.raises(ValueError, match="shape"):
        kv.generate(mine, torch.tensor([1, 2]), 4)
    with pytest.raises(ValueError, match="max_new_tokens"):
        kv.generate(mine, torch.tensor([[1, 2]]), 0)


def test_kv_file_script_runs_offline():
    """Run as a file (python submission/kv-cache-implementation.py), as the README says: finds the repository."""
    out = subprocess.run([sys.executable, str(SUBMISSION / "kv-cache-implementation.py"), "--max-new-tokens", "6",
                          "--device", "cpu"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "identical tokens: True" in out.stdout
