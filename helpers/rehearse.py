"""The GPU student's run, rehearsed on the CPU: every notebook under ``params/gpu.yaml``, the GPU report built.

    python -m helpers.rehearse            # make rehearse: a few minutes on two cores, into build/rehearse/

A student with one GPU runs ``python -m helpers.run_all --profile gpu``: the handout's models come from the Hugging
Face Hub through ``from_pretrained``, and nothing of that path runs in CI or in a GPU window (which measure random
weights). The rehearsal runs that same command on this CPU with two differences only:

- **where the models come from**: each Hub id the profile names resolves, through the ordinary ``from_pretrained``
  path, to a small random checkpoint of that id's own architecture (its config class and family from
  ``data/configs/``, shrunk; the CPU pair's tokenizer saved beside it), written first into a local Hub cache
  (``HF_HUB_CACHE``, offline), exactly where a download would have put it;
- **the sizes**: ``params/rehearse.yaml`` shrinks token counts, sweeps and repeats (and runs on the CPU), applied over
  ``params/gpu.yaml``; the handout's pairs and γ ∈ {2, 3, 5, 7} stay.

Everything lands under ``build/rehearse/`` (results, figures, tables, ``report/report-gpu.pdf``); the checkout's
results are never touched. Random weights and tiny sizes make every number meaningless: the rehearsal proves the path,
not a result. So the notebooks' checks of their own prose (an ``assert`` beside a sentence: "the longest input takes
longer", "the target re-emits the context") are recorded, not enforced: an IPython startup file in the rehearsal's
``IPYTHONDIR`` turns each notebook ``assert`` into a call of :func:`check_claim`, which records a claim that does not
hold on these numbers (``claims.jsonl``, printed at the end) and lets the notebook go on. Every other error (a
``KeyError``, a shape mismatch, an exception the library raises) still stops the run, as it would stop the student.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import torch
import yaml

from helpers import paths
from helpers.models.configs import KNOWN_MODELS, load_config

ROOT = paths.REPO_ROOT / "build" / "rehearse"
OVERLAY = paths.PARAMS_DIR / "rehearse.yaml"
# Shrinking: depth by DEPTH (at least one layer), every width by WIDTH, head counts kept (GQA stays GQA)
DEPTH, WIDTH = 12, 32


def handout_ids(params: dict) -> list[str]:
    """The Hugging Face ids a parameter set names anywhere (in lists and pairs too), in first-seen order."""
    found: list[str] = []

    def walk(value):
        if isinstance(value, str) and value in KNOWN_MODELS and value not in found:
            found.append(value)
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item)

    for value in params.values():
        walk(value)
    return found


def shrunk_config(model_id: str, vocab_size: int, special_id: int):
    """``model_id``'s own config (class, family, rope, norms, head counts) with depth and widths shrunk."""
    config = load_config(model_id)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    config.num_hidden_layers = max(1, round(config.num_hidden_layers / DEPTH))
    small_head = max(4, head_dim // WIDTH)
    config.hidden_size = max(32, round(config.hidden_size / WIDTH))
    if hasattr(config, "head_dim"):
        config.head_dim = small_head
    elif config.hidden_size % config.num_attention_heads:  # head size read as hidden / heads: keep it whole
        config.hidden_size = config.num_attention_heads * small_head
    config.intermediate_size = max(32, round(config.intermediate_size / WIDTH))
    config.vocab_size = vocab_size
    for attr in ("bos_token_id", "eos_token_id", "pad_token_id"):
        if getattr(config, attr, None) is not None:
            setattr(config, attr, special_id)
    if getattr(config, "layer_types", None) is not None:
        config.layer_types = config.layer_types[: config.num_hidden_layers]
    if getattr(config, "max_window_layers", None) is not None:
        config.max_window_layers = config.num_hidden_layers
    return config


def snapshot_dir(hub_cache: Path, model_id: str) -> Path:
    """Where ``huggingface_hub`` keeps ``model_id``'s files (refs/main names the snapshot), as a download leaves it."""
    repo = hub_cache / ("models--" + model_id.replace("/", "--"))
    commit = hashlib.sha1(f"rehearsal {model_id}".encode()).hexdigest()
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    return repo / "snapshots" / commit


def write_checkpoint(model_id: str, hub_cache: Path, seed: int = 0) -> Path:
    """A small random bf16 checkpoint of ``model_id``'s architecture and the CPU pair's tokenizer, in ``hub_cache``."""
    from transformers import AutoModelForCausalLM

    from helpers.models.registry import quiet_loading, init_random_weights_, load_cpu_tokenizer

    folder = snapshot_dir(hub_cache, model_id)
    if (folder / "model.safetensors").exists():
        return folder
    tokenizer = load_cpu_tokenizer()
    config = shrunk_config(model_id, len(tokenizer), tokenizer.eos_token_id)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    init_random_weights_(model, seed)
    with quiet_loading():
        model.to(torch.bfloat16).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def rehearsal_params() -> dict:
    """``params/gpu.yaml`` with ``params/rehearse.yaml``'s sizes over it (the profile stays ``gpu``)."""
    from helpers.run_all import load_params

    overlay = yaml.safe_load(OVERLAY.read_text(encoding="utf-8")) or {}
    gpu = load_params("gpu")
    unknown = sorted(set(overlay) - set(gpu) - set(load_params("cpu")))
    if unknown:
        raise ValueError(f"{OVERLAY} sets {unknown}, which no notebook declares (a typo?)")
    changed_models = [k for k, v in overlay.items() if handout_ids({k: v}) and overlay[k] != gpu.get(k)]
    if changed_models:
        raise ValueError(f"{OVERLAY} changes the models of {changed_models}: a rehearsal changes only sizes")
    return {**gpu, **overlay}


CLAIMS_FILE = "claims.jsonl"
CELL_TIMEOUT_S = 300
_STARTUP = """# written by helpers.rehearse: notebook asserts become recorded claims (see its docstring)
from helpers.rehearse import install_claim_recorder
install_claim_recorder()
"""


class _AssertToClaim:
    """An IPython AST transformer: ``assert test, message`` becomes ``check_claim(test, message)``."""

    def visit(self, tree):
        import ast

        class Rewrite(ast.NodeTransformer):
            def visit_Assert(self, node):
                call = ast.Call(func=ast.Attribute(value=ast.Name(id="_wb_rehearse", ctx=ast.Load()),
                                                   attr="check_claim", ctx=ast.Load()),
                                args=[node.test, node.msg or ast.Constant(None), ast.Constant(ast.unparse(node.test))],
                                keywords=[])
                return ast.copy_location(ast.Expr(value=call), node)

        return ast.fix_missing_locations(Rewrite().visit(tree))


def install_claim_recorder() -> None:
    """In a notebook kernel of the rehearsal: every cell's asserts become :func:`check_claim` calls."""
    import helpers.rehearse as module

    shell = get_ipython()  # noqa: F821 (an IPython startup file runs inside the kernel)
    shell.user_ns["_wb_rehearse"] = module
    shell.ast_transformers.append(_AssertToClaim())


def check_claim(holds, message, source: str) -> None:
    """A notebook's check of its prose, in the rehearsal: a claim that does not hold is printed and recorded."""
    if holds:
        return
    notebook = os.environ.get("WORKBOOK_REHEARSAL_NOTEBOOK", "?")
    record = {"notebook": notebook, "claim": str(message) if message is not None else source, "check": source}
    print(f"[rehearsal] a claim does not hold on these numbers (recorded, not enforced): {record['claim']}")
    path = os.environ.get("WORKBOOK_REHEARSAL_CLAIMS")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")


def environment(root: Path) -> dict[str, str]:
    """The variables that point the run at the rehearsal's Hub cache (offline), output folder and IPython startup."""
    return {
        "IPYTHONDIR": str(root / "ipython"),
        "WORKBOOK_REHEARSAL_CLAIMS": str(root / CLAIMS_FILE),
        "HF_HUB_CACHE": str(root / "hub"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "WORKBOOK_OUTPUT_ROOT": str(root / "out"),
        "WORKBOOK_RUN_ID": f"rehearse-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}",
        # the longest rehearsal cell took 114 s inside the full test suite on 2 cores (notebook 13's measuring cell):
        # one past 300 s lost a kernel message (run_all.CellTimedOut), and its notebook runs once more
        "WORKBOOK_CELL_TIMEOUT": str(CELL_TIMEOUT_S),
    }


def prepare(root: Path = ROOT) -> tuple[Path, list[str]]:
    """Write the checkpoints and the parameter file; returns the parameter file and the Hub ids rehearsed."""
    params = rehearsal_params()
    ids = handout_ids(params)
    for model_id in ids:
        write_checkpoint(model_id, root / "hub")
    startup = root / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True, exist_ok=True)
    (startup / "00-workbook-claims.py").write_text(_STARTUP, encoding="utf-8")
    (root / CLAIMS_FILE).unlink(missing_ok=True)
    params_file = root / "params.yaml"
    params_file.write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
    return params_file, ids


def run_notebook_once_more_on_a_hang(run_all, argv: list[str]) -> None:
    """``run_all.main(argv)``, run a second time if a cell timed out; a second time-out stops the rehearsal."""
    try:
        run_all.main(argv)
    except run_all.CellTimedOut as hang:
        print(f"rehearsal: {str(hang).strip()}; running it once more", flush=True)
        run_all.main(argv)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m helpers.rehearse", description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT, help=f"where it all goes (default {ROOT})")
    parser.add_argument("--only", nargs="*", help="notebook number prefixes, as run_all's --only")
    parser.add_argument("--no-report", action="store_true", help="skip the PDF")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    start = time.perf_counter()
    params_file, ids = prepare(root)
    print(f"rehearsal: {len(ids)} Hub ids as small random checkpoints in {root / 'hub'} "
          f"({time.perf_counter() - start:.0f} s); parameters {params_file}", flush=True)
    os.environ.update(environment(root))
    from helpers import run_all

    common = ["--params", str(params_file)]
    for notebook in run_all.notebooks(args.only):  # one at a time, so that each recorded claim names its notebook
        os.environ["WORKBOOK_REHEARSAL_NOTEBOOK"] = notebook.stem
        run_notebook_once_more_on_a_hang(run_all, [*common, "--only", notebook.name[:2], "--no-report"])
    if not args.no_report:
        run_all.main([*common, "--report-only"])
    claims = recorded_claims(root)
    for claim in claims:
        print(f"  claim not holding on the rehearsal's numbers: {claim['notebook']}: {claim['claim']}")
    print(f"rehearsal done in {time.perf_counter() - start:.0f} s: {len(claims)} claim(s) recorded, not enforced; "
          f"results in {root / 'out'}")


def recorded_claims(root: Path = ROOT) -> list[dict]:
    """The claims the last rehearsal recorded (see :func:`check_claim`)."""
    path = root / CLAIMS_FILE
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] if path.exists() else []


if __name__ == "__main__":
    main(sys.argv[1:])
