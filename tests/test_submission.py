"""submission/: the handout's hand-in files (specdec.py, benchmark.py, prompts.jsonl, long_prompt.txt,
kv-cache-implementation.py) run offline on the CPU pair and agree with the workbook's code."""
from __future__ import annotations

import importlib.util
import json
import platform
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import helpers.kv_cache
import helpers.specdec
from helpers.prompts import help_topics_text
from helpers.models.corpus import load_corpus
from helpers.prompts import CPU_SOURCES, load_prompts, select_prompts
from helpers.specdec import autoregressive_generate
from submission import benchmark, make_prompts, specdec
from submission import kv_cache_implementation as twin

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

@pytest.mark.parametrize("name", ["specdec.py", "benchmark.py", "kv-cache-implementation.py",
                                  "kv_cache_implementation.py", "make_prompts.py"])
def test_name_header(name):
    """The handout asks for name and Andrew ID at the top, in a comment: the first line holds them, filled in (the
    handout's own, "Test Student (tests)"; regression: the files handed in held <...> placeholders)."""
    lines = (SUBMISSION / name).read_text(encoding="utf-8").splitlines()
    assert re.fullmatch(r"# Name / Andrew ID: [^<>]+ / [^<>]+", lines[0]), lines[0]
    assert "Test Student" in lines[0] and lines[1].startswith("# "), lines[:2]


# --------------------------------------------------------------------------- specdec.py: decode()

def test_decode_greedy_equals_autoregressive(pair, rows):
    target, draft, tokenizer = pair
    for row in rows[:3]:
        ids = specdec.encode(tokenizer, row["prompt"], "cpu")
        for gamma in (1, 3):
            result = specdec.decode(target, draft, ids, 12, gamma)
            reference = autoregressive_generate(target, ids, 12)
            assert torch.equal(result.tokens, reference.tokens), (row["id"], gamma)
            assert 0.0 <= result.stats.alpha <= 1.0


def test_decode_sampling_is_seeded(pair, rows):
    target, draft, tokenizer = pair
    ids = specdec.encode(tokenizer, rows[0]["prompt"], "cpu")
    runs = []
    for _ in range(2):
        torch.manual_seed(specdec.SEED)
        runs.append(specdec.decode(target, draft, ids, 10, 3, temperature=1.0).tokens)
    assert torch.equal(*runs)


def test_decode_rejects_bad_input(pair):
    target, draft, _ = pair
    with pytest.raises(ValueError, match="gamma"):
        specdec.decode(target, draft, torch.tensor([[1, 2]]), 4, 0)
    with pytest.raises(ValueError, match="shape"):
        specdec.decode(target, draft, torch.tensor([1, 2]), 4, 2)


def test_decode_todo_lines_point_at_existing_code():
    """Each TODO names the workbook code that answers it; every helpers.specdec name it cites must exist."""
    source = (SUBMISSION / "specdec.py").read_text(encoding="utf-8")
    assert len(re.findall(r"# TODO: ", source)) >= 5
    for name in re.findall(r"helpers\.specdec\.(\w+)", source):
        assert hasattr(helpers.specdec, name), name
    code = "".join(Path(module.__file__).read_text(encoding="utf-8") for module in (
        helpers.specdec.linear, helpers.specdec.chain, helpers.specdec.core))
    for fragment in ("in range(gamma)", "target_cache.rollback", "self.cache.rollback", "last_only=False",
                     "accepted_per_round", "prefill_target", "finish_row"):
        assert fragment in code and fragment in source, fragment


def test_specdec_main_runs_offline(capsys, rows):
    figures = specdec.main(["--max-new-tokens", "6", "--device", "cpu"])
    out = capsys.readouterr().out
    assert out.startswith(rows[0]["prompt"]) and "alpha=" in out
    assert 1 <= len(figures["tokens"]) <= 6


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
