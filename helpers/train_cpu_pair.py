"""Train the CPU pair: a small Qwen3 target and two Qwen3 drafts that share one BPE tokenizer.

    python -m helpers.train_cpu_pair                 # CPU recipe, about an hour on 2 cores
    python -m helpers.train_cpu_pair --smoke         # 2-minute end-to-end check (writes to /tmp)
    python -m helpers.train_cpu_pair --device cuda   # GPU recipe (bf16 autocast, bigger batches)
    python -m helpers.train_cpu_pair --continue-target 20   # optional: 20 more target minutes, drafts refined

The committed weights are the default CPU run (53 min on a shared 2-core machine) followed by
``--continue-target 20`` (33 min), which lowered the target's held-out loss from 3.59 to 3.30.

The corpus is text that every Python installation carries: the standard library's ``*.py`` source and
``pydoc_data.topics``. Documents go to the held-out split by a hash of their name (about 5%), so the split
is the same on every machine with the same Python version. Stages:

1. a byte-level BPE tokenizer (4096 entries) trained on the training split;
2. the target, trained with next-token cross-entropy;
3. the drafts, distilled from the frozen target (KL to its logits, which is what raises greedy agreement);
4. measurement: parameters, training tokens, held-out loss, the per-token decode cost of each draft
   relative to the target on CPU, and greedy agreement; written to ``card.json`` and ``MODEL_CARD.md``.

Weights are stored as bf16 safetensors (the 30 MB budget) and loaded back as float32 by
:func:`helpers.models.load_cpu_pair`. Seeds fix the initialisation and the data order; each stage stops on
its time budget (``--target-minutes``, ``--draft-minutes``), so the step count depends on the machine and
the card records it.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import platform
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from helpers.hardware import cpu_name
from helpers.paths import DATA_DIR

CPU_PAIR_DIR = DATA_DIR / "cpu_pair"
EOS_TOKEN = "<|endoftext|>"
VOCAB_SIZE = 4096
HELDOUT_EVERY = 20  # one document in 20 (by name hash) is held out

# Shapes: the target is deep enough that its decode step costs several ms on CPU (so a 1-layer draft
# costs under a tenth of it) and small enough to train in an hour; the drafts differ in depth and width.
MODEL_SHAPES: dict[str, dict] = {
    "target": dict(hidden_size=256, intermediate_size=768, num_hidden_layers=8,
                   num_attention_heads=4, num_key_value_heads=1, head_dim=64),
    "draft": dict(hidden_size=128, intermediate_size=384, num_hidden_layers=1,
                  num_attention_heads=2, num_key_value_heads=1, head_dim=64),
    "draft-2l": dict(hidden_size=192, intermediate_size=512, num_hidden_layers=2,
                     num_attention_heads=3, num_key_value_heads=1, head_dim=64),
}
DRAFT_NAMES = ("draft", "draft-2l")


# --------------------------------------------------------------------------- corpus and tokenizer

@dataclass
class Corpus:
    train: list[str]
    heldout: list[str]
    train_names: list[str]
    heldout_names: list[str]


def _is_heldout(name: str) -> bool:
    return int(hashlib.sha256(name.encode()).hexdigest(), 16) % HELDOUT_EVERY == 0


def load_corpus() -> Corpus:
    """Standard-library source plus pydoc topics, split deterministically by document name."""
    import pydoc_data.topics

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    docs: list[tuple[str, str]] = []
    for path in sorted(stdlib.rglob("*.py")):
        rel = path.relative_to(stdlib)
        if "site-packages" in rel.parts or "dist-packages" in rel.parts:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # a few test fixtures are deliberately not UTF-8
        docs.append((rel.as_posix(), text))
    for key in sorted(pydoc_data.topics.topics):
        docs.append((f"pydoc_data.topics/{key}", pydoc_data.topics.topics[key]))
    if not docs:
        raise RuntimeError(f"no standard-library source found under {stdlib}")
    corpus = Corpus([], [], [], [])
    for name, text in docs:
        if _is_heldout(name):
            corpus.heldout.append(text), corpus.heldout_names.append(name)
        else:
            corpus.train.append(text), corpus.train_names.append(name)
    return corpus


def train_tokenizer(texts: list[str], vocab_size: int = VOCAB_SIZE):
    """Byte-level BPE, so that any text round-trips; returned as a transformers fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=2, special_tokens=[EOS_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS_TOKEN, pad_token=EOS_TOKEN,
                                   bos_token=EOS_TOKEN)


def encode_documents(tokenizer, texts: list[str]) -> torch.Tensor:
    """All documents as one stream of token ids, each followed by the end-of-text token."""
    eos = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    encodings = tokenizer.backend_tokenizer.encode_batch(texts)
    ids: list[int] = []
    for enc in encodings:
        ids.extend(enc.ids)
        ids.append(eos)
    return torch.tensor(ids, dtype=torch.int32)


# --------------------------------------------------------------------------- models

def make_config(shape: str, tokenizer):
    from transformers import Qwen3Config

    eos = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    return Qwen3Config(
        vocab_size=len(tokenizer), max_position_embeddings=4096, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        bos_token_id=eos, eos_token_id=eos, pad_token_id=eos, **MODEL_SHAPES[shape],
    )


def make_model(shape: str, tokenizer, seed: int):
    from transformers import Qwen3ForCausalLM

    torch.manual_seed(seed)
    config = make_config(shape, tokenizer)
    config._attn_implementation = "sdpa"
    return Qwen3ForCausalLM(config)


def param_count(model) -> int:
    """Unique parameters (the tied LM head counts once)."""
    return sum(p.numel() for p in model.parameters())


# --------------------------------------------------------------------------- training

def batches(data: torch.Tensor, seq_len: int, batch_size: int, seed: int):
    """Endless random windows of ``seq_len + 1`` tokens, in an order fixed by ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    offsets = torch.arange(seq_len + 1)
    while True:
        starts = torch.randint(0, len(data) - seq_len - 1, (batch_size,), generator=gen)
        yield data[starts[:, None] + offsets].long()


def lr_at(progress: float, peak: float, warmup: float = 0.03, floor: float = 0.1) -> float:
    """Linear warm-up then cosine decay to ``floor * peak``, as a function of the fraction of budget used."""
    if progress < warmup:
        return peak * progress / warmup
    frac = min(1.0, (progress - warmup) / (1 - warmup))
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * frac)))


def _optimizer(params, lr):
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95))


def _autocast(device: torch.device):
    return torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else torch.autocast(
        "cpu", enabled=False)


def _budget(minutes: float, max_steps: int | None):
    """Yield the fraction of the time budget spent before each step, until it (or ``max_steps``) runs out."""
    start, budget, step = time.time(), minutes * 60, 0
    while True:
        progress = (time.time() - start) / budget
        if progress >= 1 or (max_steps is not None and step >= max_steps):
            return
        yield progress
        step += 1


def train_target(model, data, *, minutes, seq_len, batch_size, lr, seed, device, log, max_steps=None):
    """Next-token cross-entropy until the time budget (or ``max_steps``) is spent."""
    model.to(device).train()
    opt = _optimizer(list(model.parameters()), lr)
    stream = batches(data, seq_len, batch_size, seed)
    start, step, tokens = time.time(), 0, 0
    for progress in _budget(minutes, max_steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(progress, lr)
        batch = next(stream).to(device)
        with _autocast(device):
            logits = model(input_ids=batch[:, :-1]).logits
        loss = F.cross_entropy(logits.float().flatten(0, 1), batch[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        tokens += batch[:, 1:].numel()
        if step % 50 == 0 or step == 1:
            log(f"target step {step} loss {loss.item():.3f} lr {opt.param_groups[0]['lr']:.2e} "
                f"{tokens / (time.time() - start):.0f} tok/s ({progress:.0%} of budget)")
    return {"steps": step, "tokens": tokens, "seconds": round(time.time() - start, 1)}


def distill_drafts(target, drafts: dict, data, *, minutes, seq_len, batch_size, lr, seed, device, log,
                   max_steps=None):
    """Train every draft on the frozen target's distribution (forward KL), sharing one target forward."""
    target.to(device).eval()
    opts = {}
    for name, draft in drafts.items():
        draft.to(device).train()
        opts[name] = _optimizer(list(draft.parameters()), lr)
    stream = batches(data, seq_len, batch_size, seed + 1)
    start, step, tokens = time.time(), 0, 0
    for progress in _budget(minutes, max_steps):
        batch = next(stream).to(device)
        with torch.no_grad(), _autocast(device):
            teacher = F.log_softmax(target(input_ids=batch[:, :-1]).logits.float(), -1).flatten(0, 1)
        losses = {}
        for name, draft in drafts.items():
            opt = opts[name]
            for group in opt.param_groups:
                group["lr"] = lr_at(progress, lr)
            with _autocast(device):
                student = F.log_softmax(draft(input_ids=batch[:, :-1]).logits.float(), -1).flatten(0, 1)
            loss = F.kl_div(student, teacher, log_target=True, reduction="batchmean")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
            opt.step()
            losses[name] = loss.item()
        step += 1
        tokens += batch[:, 1:].numel()
        if step % 50 == 0 or step == 1:
            shown = " ".join(f"{k} KL {v:.3f}" for k, v in losses.items())
            log(f"distill step {step} {shown} {tokens / (time.time() - start):.0f} tok/s ({progress:.0%})")
    return {"steps": step, "tokens": tokens, "seconds": round(time.time() - start, 1)}


# --------------------------------------------------------------------------- measurement

def heldout_windows(data: torch.Tensor, seq_len: int, count: int) -> torch.Tensor:
    """``count`` evenly spaced windows of ``seq_len + 1`` tokens (deterministic)."""
    starts = torch.linspace(0, len(data) - seq_len - 2, count).long()
    return torch.stack([data[s:s + seq_len + 1] for s in starts.tolist()]).long()


@torch.no_grad()
def heldout_loss(model, windows: torch.Tensor, batch_size: int = 8) -> float:
    model.eval()
    total, count = 0.0, 0
    for chunk in windows.split(batch_size):
        logits = model(input_ids=chunk[:, :-1]).logits.float()
        total += F.cross_entropy(logits.flatten(0, 1), chunk[:, 1:].flatten(), reduction="sum").item()
        count += chunk[:, 1:].numel()
    return total / count


@torch.no_grad()
def greedy_continuation(model, prompts: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """The model's own greedy continuation (KV-cached), returned with the prompt."""
    from transformers import DynamicCache

    model.eval()
    cache = DynamicCache()
    out = model(input_ids=prompts, past_key_values=cache, use_cache=True)
    seq = prompts
    for _ in range(new_tokens):
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        seq = torch.cat([seq, nxt], dim=1)
        out = model(input_ids=nxt, past_key_values=cache, use_cache=True)
    return seq


@torch.no_grad()
def greedy_agreement(target, draft, prompts: torch.Tensor, new_tokens: int = 64) -> float:
    """Fraction of positions on the target's greedy continuation where the draft's argmax equals it."""
    seq = greedy_continuation(target, prompts, new_tokens)
    draft.eval()
    draft_pred = draft(input_ids=seq[:, :-1]).logits.argmax(-1)
    start = prompts.shape[1] - 1
    return (draft_pred[:, start:] == seq[:, start + 1:]).float().mean().item()


@torch.no_grad()
def decode_step_seconds(model, prompt: torch.Tensor, steps: int = 48, repeats: int = 5) -> float:
    """Seconds per single-token decode step at batch 1 with a DynamicCache (CPU, float32).

    The minimum over repeats: on a shared machine, the least-disturbed run is closest to the true cost.
    """
    from transformers import DynamicCache

    model.eval()
    samples = []
    for _ in range(repeats + 1):  # the first pass is warm-up
        cache = DynamicCache()
        out = model(input_ids=prompt, past_key_values=cache, use_cache=True)
        nxt = out.logits[:, -1:].argmax(-1)
        t0 = time.perf_counter()
        for _ in range(steps):
            out = model(input_ids=nxt, past_key_values=cache, use_cache=True)
            nxt = out.logits[:, -1:].argmax(-1)
        samples.append((time.perf_counter() - t0) / steps)
    return min(samples[1:])


# --------------------------------------------------------------------------- saving

def save_model(model, out_dir: Path) -> None:
    """bf16 safetensors (half the bytes of float32); loaders cast back to float32."""
    out_dir.mkdir(parents=True, exist_ok=True)
    model.to("cpu").to(torch.bfloat16).save_pretrained(out_dir, safe_serialization=True)
    model.to(torch.float32)


def load_saved(out_dir: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(out_dir, dtype=torch.float32).eval()


def write_card(card: dict, out_dir: Path) -> None:
    (out_dir / "card.json").write_text(json.dumps(card, indent=2) + "\n")
    (out_dir / "MODEL_CARD.md").write_text(render_card(card))


def render_card(card: dict) -> str:
    m = card["models"]
    rows = "\n".join(
        f"| {name} | {info['layers']} | {info['hidden_size']} | {info['parameters']:,} | "
        f"{info['training_tokens']:,} | {info['heldout_loss']:.3f} | "
        + (f"{info['cost_ratio']:.3f} | {info['greedy_agreement']:.3f} |" if name != "target" else "1 | – |")
        for name, info in m.items()
    )
    timing = "\n".join(f"| {name} | {info['decode_ms_per_token']:.2f} |" for name, info in m.items())
    env = card["environment"]
    stages = card["stages"]
    cycles = stages["target"].get("cycles", 1)
    cycles_note = f" over {cycles} cosine cycles (`--continue-target`)" if cycles > 1 else ""
    return f"""# The CPU pair: model card

A small Qwen3-architecture target and two drafts that share one byte-level BPE tokenizer
({card['vocab_size']} entries), trained by `python -m helpers.train_cpu_pair` on the Python standard
library's source and `pydoc_data.topics` (Python {env['python']}). Load them with
`helpers.models.load_cpu_pair()`. Every figure below was measured by the training script.

| model | layers | hidden | parameters | training tokens | held-out loss (nats/token) | cost ratio draft/target | greedy agreement |
|---|---|---|---|---|---|---|---|
{rows}

- **Corpus**: {card['corpus']['train_documents']} training documents ({card['corpus']['train_tokens']:,} tokens),
  {card['corpus']['heldout_documents']} held-out documents ({card['corpus']['heldout_tokens']:,} tokens); a
  document is held out when the SHA-256 of its name is divisible by {HELDOUT_EVERY}.
- **Held-out loss**: mean next-token cross-entropy over {card['eval']['loss_windows']} evenly spaced held-out
  windows of {card['eval']['seq_len']} tokens.
- **Greedy agreement**: the target continues {card['eval']['agreement_prompts']} held-out prompts of
  {card['eval']['agreement_prompt_len']} tokens greedily for {card['eval']['agreement_new_tokens']} tokens;
  agreement is the fraction of those positions where the draft's argmax equals the target's token.
- **Cost ratio**: per-token decode time (batch 1, float32, `DynamicCache`, {env['threads']} threads on
  {env['cpu']}) of the draft divided by the target's:

| model | decode ms/token |
|---|---|
{timing}

- **Training**: target {stages['target']['steps']} steps in {stages['target']['seconds']/60:.1f} min{cycles_note}
  (cross-entropy, AdamW, cosine schedule over the time budget); drafts {stages['draft']['steps']} steps in
  {stages['draft']['seconds']/60:.1f} min, distilled from the frozen target (forward KL to its logits).
  Device: {env['device']}; seed {card['seed']}; torch {env['torch']}, transformers {env['transformers']}.
  The stages stop on a time budget, so a rerun on another machine takes a different number of steps.
- **Stored** as bf16 safetensors ({card['stored_megabytes']:.1f} MB in all); loaded back as float32.
- **Limits**: tiny models on a narrow corpus; they continue Python code, docstrings and documentation
  prose, and nothing else well. Not for any use beyond timing and acceptance-rate experiments.
"""


# --------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=CPU_PAIR_DIR, help="where to write tokenizer/, target/, drafts")
    parser.add_argument("--device", default="auto", help="'auto' (cuda if available), 'cpu' or 'cuda'")
    parser.add_argument("--threads", type=int, default=1,
                        help="CPU threads for training and timing (1: robust on a busy machine)")
    parser.add_argument("--target-minutes", type=float, default=None, help="target budget (CPU 40, GPU 20)")
    parser.add_argument("--draft-minutes", type=float, default=None, help="distillation budget (CPU 12, GPU 8)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=None, help="sequences per step (CPU 8, GPU 64)")
    parser.add_argument("--skip-target", action="store_true", help="reuse the target already in --out")
    parser.add_argument("--continue-target", type=float, default=0.0, metavar="MINUTES",
                        help="train the target already in --out for MINUTES more (a second, lower cosine cycle) "
                             "before distilling the drafts again")
    parser.add_argument("--reuse-tokenizer", action="store_true", help="reuse the tokenizer already in --out")
    parser.add_argument("--smoke", action="store_true", help="tiny budgets, writes to /tmp/cpu_pair_smoke")
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if args.device == "auto" else args.device))
    on_gpu = device.type == "cuda"
    if args.smoke:
        args.out = Path("/tmp/cpu_pair_smoke")
    target_minutes = args.target_minutes or (0.5 if args.smoke else 20 if on_gpu else 40)
    draft_minutes = args.draft_minutes or (0.3 if args.smoke else 8 if on_gpu else 12)
    batch_size = args.batch_size or (64 if on_gpu else 8)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.time()

    def log(msg: str) -> None:
        print(f"[{time.time() - t_start:7.1f}s] {msg}", flush=True)

    corpus = load_corpus()
    log(f"corpus: {len(corpus.train)} training and {len(corpus.heldout)} held-out documents")
    resume = args.skip_target or args.continue_target > 0
    if resume or (args.reuse_tokenizer and (out / "tokenizer" / "tokenizer.json").exists()):
        from transformers import AutoTokenizer
        tokenizer = AutoTokenizer.from_pretrained(out / "tokenizer")
    else:
        tokenizer = train_tokenizer(corpus.train)
        tokenizer.save_pretrained(out / "tokenizer")
    train_ids = encode_documents(tokenizer, corpus.train)
    heldout_ids = encode_documents(tokenizer, corpus.heldout)
    log(f"tokenizer: {len(tokenizer)} entries; {len(train_ids):,} training and {len(heldout_ids):,} held-out tokens")

    common = dict(seq_len=args.seq_len, batch_size=batch_size, device=device, log=log)
    if resume:
        target = load_saved(out / "target")
        target_stage = json.loads((out / "card.json").read_text())["stages"]["target"]
        if args.continue_target > 0:
            more = train_target(target, train_ids, minutes=args.continue_target, lr=6e-4 if not on_gpu else 5e-4,
                                seed=args.seed + 100, **common)
            target_stage = {"steps": target_stage["steps"] + more["steps"],
                            "tokens": target_stage["tokens"] + more["tokens"],
                            "seconds": round(target_stage["seconds"] + more["seconds"], 1),
                            "cycles": target_stage.get("cycles", 1) + 1}
            save_model(target, out / "target")
            target = load_saved(out / "target")
    else:
        target = make_model("target", tokenizer, args.seed)
        log(f"target: {param_count(target):,} parameters")
        target_stage = train_target(target, train_ids, minutes=target_minutes, lr=2e-3 if not on_gpu else 1.5e-3,
                                    seed=args.seed, **common)
        save_model(target, out / "target")
        target = load_saved(out / "target")  # continue with the bf16-rounded weights that ship
    # After --continue-target the drafts continue from their saved weights (they already match the earlier target).
    warm = args.continue_target > 0 and all((out / n / "model.safetensors").exists() for n in DRAFT_NAMES)
    drafts = {name: load_saved(out / name).train() if warm else make_model(name, tokenizer, args.seed + 1 + i)
              for i, name in enumerate(DRAFT_NAMES)}
    previous_draft = json.loads((out / "card.json").read_text())["stages"]["draft"] if warm else None
    draft_stage = distill_drafts(target, drafts, train_ids, minutes=draft_minutes, lr=1.5e-3 if warm else 3e-3,
                                 seed=args.seed + (100 if warm else 0), **common)
    if previous_draft:
        draft_stage = {k: round(previous_draft[k] + draft_stage[k], 1) if k == "seconds" else previous_draft[k] + draft_stage[k]
                       for k in ("steps", "tokens", "seconds")}
    for name in DRAFT_NAMES:
        save_model(drafts[name], out / name)

    # Measure what ships: reload every model from disk, on CPU, float32.
    torch.set_num_threads(args.threads)
    models = {"target": load_saved(out / "target"), **{n: load_saved(out / n) for n in DRAFT_NAMES}}
    windows = heldout_windows(heldout_ids, args.seq_len, 16 if args.smoke else 64)
    prompt_len, new_tokens, n_prompts = 64, 64, (4 if args.smoke else 32)
    prompts = heldout_windows(heldout_ids, prompt_len - 1, n_prompts)
    timing_prompt = prompts[:1, :32]
    results = {}
    for name, model in models.items():
        results[name] = {
            "layers": model.config.num_hidden_layers,
            "hidden_size": model.config.hidden_size,
            "parameters": param_count(model),
            "training_tokens": (target_stage if name == "target" else draft_stage)["tokens"],
            "heldout_loss": round(heldout_loss(model, windows), 4),
            "decode_ms_per_token": round(1000 * decode_step_seconds(model, timing_prompt), 3),
        }
        log(f"{name}: {results[name]}")
    for name in DRAFT_NAMES:
        results[name]["cost_ratio"] = round(
            results[name]["decode_ms_per_token"] / results["target"]["decode_ms_per_token"], 4)
        results[name]["greedy_agreement"] = round(
            greedy_agreement(models["target"], models[name], prompts, new_tokens), 4)
        log(f"{name}: cost ratio {results[name]['cost_ratio']}, agreement {results[name]['greedy_agreement']}")

    import transformers
    stored = sum(f.stat().st_size for f in out.rglob("*") if f.is_file() and f.suffix in {".safetensors", ".json"})
    card = {
        "seed": args.seed,
        "vocab_size": len(tokenizer),
        "corpus": {"train_documents": len(corpus.train), "heldout_documents": len(corpus.heldout),
                   "train_tokens": len(train_ids), "heldout_tokens": len(heldout_ids)},
        "stages": {"target": target_stage, "draft": draft_stage,
                   "target_minutes": target_minutes, "draft_minutes": draft_minutes,
                   "continue_target_minutes": args.continue_target,
                   "batch_size": batch_size, "seq_len": args.seq_len},
        "eval": {"loss_windows": len(windows), "seq_len": args.seq_len, "agreement_prompts": n_prompts,
                 "agreement_prompt_len": prompt_len, "agreement_new_tokens": new_tokens},
        "models": results,
        "environment": {"python": platform.python_version(), "torch": torch.__version__,
                        "transformers": transformers.__version__, "device": str(device),
                        "cpu": cpu_name(), "threads": args.threads},
        "stored_megabytes": round(stored / 1e6, 2),
        "total_minutes": round((time.time() - t_start) / 60, 1),
    }
    write_card(card, out)
    log(f"wrote {out / 'MODEL_CARD.md'} ({card['stored_megabytes']} MB stored)")
    return card


if __name__ == "__main__":
    main(sys.argv[1:])
