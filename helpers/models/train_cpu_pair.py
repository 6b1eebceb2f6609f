"""Train the CPU pair: a small Qwen3 target and two Qwen3 drafts that share one BPE tokenizer.

    python -m helpers.models.train_cpu_pair                 # CPU recipe, about 70 minutes on an idle 2-core machine
    python -m helpers.models.train_cpu_pair --smoke         # 2-minute end-to-end check (writes to /tmp)
    python -m helpers.models.train_cpu_pair --device cuda   # GPU recipe (bf16 autocast, batch 64, same step counts)
    python -m helpers.models.train_cpu_pair --stage long    # target-long: the target fine-tuned on 4096-token
                                                            # windows (about 15 minutes; notebook 11)
    python -m helpers.models.train_cpu_pair --stage drafts  # notebook 12's drafts at equal parameter count
                                                            # (about 45 minutes)
    python -m helpers.models.train_cpu_pair --stage drafts --draft-shape 3x160 --draft-shape 2x192-shared

The committed weights are the default CPU run.

The corpus is text that every Python installation carries: the standard library's ``*.py`` source and
``pydoc_data.topics``. Documents go to the held-out split by a hash of their name (about 5%), so the split
is the same on every machine with the same Python version. Stages:

1. a byte-level BPE tokenizer (4096 entries) trained on the training split;
2. the target, trained with next-token cross-entropy;
3. the drafts, initialised from the target's embedding, first layer(s) and final norm (they share its width),
   then distilled from the frozen target (KL to its logits, which is what raises greedy agreement);
4. measurement: parameters, training tokens, held-out loss, the per-token decode cost of each draft
   relative to the target on CPU, and greedy agreement; written to ``card.json`` and ``MODEL_CARD.md``;
5. (``--stage long``, separately) ``target-long``: a copy of the target fine-tuned on long windows
   (:data:`LONG_SEQ_LEN` tokens, its context limit raised to :data:`LONG_CONTEXT_LIMIT`) so that it uses
   context far beyond the 256-token windows of stage 2; the card gains its held-out loss by position bucket,
   next to the target's;
6. (``--stage drafts``, separately) the draft family of notebook 12: drafts of one parameter count and different
   shapes (``--draft-shape LxW``: L layers of width W, :func:`draft_shape`), each from the SAME random
   initialisation seed and distilled with the same recipe and steps from the shipped target (random rather than
   target initialisation, because only width-192 drafts could copy the target's layers; the comparison must not
   favour one width). ``LxW-shared`` uses the target's embedding and tied LM head, frozen, and needs W = 192.
   The card gains each draft's parameters, held-out loss, decode cost ratio and greedy agreement.

Weights are stored as bf16 safetensors (the 30 MB budget) and loaded back as float32 by
:func:`helpers.models.load_cpu_pair`. Seeds fix the initialisation and the data order, and every stage runs a
fixed number of steps (``--target-steps``, ``--draft-steps``), so a rerun with the same thread count repeats
the same computation; only the wall time depends on the machine.
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from pathlib import Path

import tokenizers
import torch
import torch.nn.functional as F
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast, Qwen3Config

from helpers.hardware import cpu_name
from helpers.kv_cache import generate
from helpers.models import CPU_PAIR_DIR, DRAFT_FAMILY, describe, parameter_count
from helpers.models.corpus import HELDOUT_EVERY, Corpus, is_heldout, load_corpus  # noqa: F401 (re-exported)
from helpers.models.qwen3 import from_hf
from helpers.models.runtime import cached_decoder

EOS_TOKEN = "<|endoftext|>"
VOCAB_SIZE = 4096

# Shapes: on a CPU a small model's decode step costs mostly per-layer overhead, so the cost ratio is set by
# depth, not width. The target is deep (16 layers) so that a 1-layer draft of the SAME width costs about a
# tenth of it, which lets the drafts start from the target's own embedding and first layers; it is narrow
# (192) so that it trains in about 40 minutes on 2 cores. The drafts differ in depth: one layer (cheap) or two
# (a second attention layer can copy from the context, "induction", so it agrees more, at about twice the cost).
_WIDTH = dict(hidden_size=192, intermediate_size=576, num_attention_heads=3, num_key_value_heads=1, head_dim=64)
MODEL_SHAPES: dict[str, dict] = {
    "target": dict(_WIDTH, num_hidden_layers=16),
    "draft": dict(_WIDTH, num_hidden_layers=1),
    "draft-2l": dict(_WIDTH, num_hidden_layers=2),
}
DRAFT_NAMES = ("draft", "draft-2l")

# Stage 5, the long-context target: fine-tuned from the target on windows of LONG_SEQ_LEN tokens. RoPE needs
# no change (theta 10^4 has wavelengths far beyond these lengths); the model only has to learn to use the
# distances it never saw in 256-token windows. Its context limit is raised so that a 4096-token prompt can be
# continued.
LONG_SEQ_LEN = 4096
LONG_CONTEXT_LIMIT = 8192
LONG_BUCKETS = ((0, 256), (256, 512), (512, 1024), (1024, 2048), (2048, 4096))

# Stage 6, the draft family: every shape within PARAMETER_TOLERANCE of the reference draft's parameter count.
FAMILY_REFERENCE = "draft-2l"
PARAMETER_TOLERANCE = 0.10
FAMILY_STEPS = 1500  # five drafts share each step's target forward: about 45 minutes on 2 idle cores


# --------------------------------------------------------------------------- tokenizer

def train_tokenizer(texts: list[str], vocab_size: int = VOCAB_SIZE):
    """Byte-level BPE, so that any text round-trips; returned as a transformers fast tokenizer."""
    pre_tokenizers, trainers = tokenizers.pre_tokenizers, tokenizers.trainers
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
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

def draft_shape(spec: str) -> dict:
    """The Qwen3 shape of a draft spec ``"LxW"`` (L layers of width W; ``"LxW-shared"`` the same, sharing the
    target's embedding): MLP 3W, heads of 64 with max(1, round(W/64)) query heads and one KV head, like the pair.

    >>> draft_shape("4x144")["num_attention_heads"]
    2
    """
    body, _, suffix = spec.removeprefix("draft-").partition("-")
    layers, _, width = body.partition("x")
    if suffix not in ("", "shared") or not (layers.isdigit() and width.isdigit()) or int(layers) < 1 or int(width) < 16:
        raise ValueError(f"draft shape must look like 'LxW' or 'LxW-shared' (L >= 1 layers of width W >= 16, e.g. "
                         f"'4x144'), got {spec!r}")
    width = int(width)
    return dict(num_hidden_layers=int(layers), hidden_size=width, intermediate_size=3 * width,
                num_attention_heads=max(1, round(width / 64)), num_key_value_heads=1, head_dim=64)


def family_name(spec: str) -> str:
    """The directory and model name of a draft spec: ``"4x144"`` -> ``"draft-4x144"``."""
    return spec if spec.startswith("draft-") else f"draft-{spec}"


def make_config(shape: str, tokenizer):
    """A named shape (``MODEL_SHAPES``) or a draft spec ``"LxW"`` (:func:`draft_shape`)."""
    eos = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    return Qwen3Config(
        vocab_size=len(tokenizer), max_position_embeddings=4096, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        bos_token_id=eos, eos_token_id=eos, pad_token_id=eos,
        **(MODEL_SHAPES[shape] if shape in MODEL_SHAPES else draft_shape(shape)),
    )


def shape_parameters(shape: str, tokenizer) -> int:
    """Parameters of a shape (tied embedding counted once)."""
    return parameter_count(make_config(shape, tokenizer))


def check_family_shapes(specs, tokenizer) -> dict[str, int]:
    """Parameters per draft spec; a clear error for a spec outside the family's budget or a shared one whose
    width is not the target's."""
    reference = shape_parameters(FAMILY_REFERENCE, tokenizer)
    counts = {}
    for spec in specs:
        counts[spec] = shape_parameters(spec, tokenizer)
        if abs(counts[spec] / reference - 1) > PARAMETER_TOLERANCE:
            raise ValueError(f"draft shape {spec!r} has {counts[spec]:,} parameters, more than "
                             f"{PARAMETER_TOLERANCE:.0%} from {FAMILY_REFERENCE}'s {reference:,}: the family compares "
                             "shapes at equal size, so pick a width that brings it within range")
        if spec.endswith("-shared") and draft_shape(spec)["hidden_size"] != MODEL_SHAPES["target"]["hidden_size"]:
            raise ValueError(f"{spec!r} shares the target's embedding, so its width must be the target's "
                             f"({MODEL_SHAPES['target']['hidden_size']})")
    return counts


def share_target_embedding(draft, target) -> None:
    """Give ``draft`` the target's embedding (its tied LM head too), frozen: distillation trains the rest."""
    with torch.no_grad():
        draft.model.embed_tokens.weight.copy_(target.model.embed_tokens.weight)
    draft.model.embed_tokens.weight.requires_grad_(False)


def make_model(shape: str, tokenizer, seed: int):
    torch.manual_seed(seed)
    config = make_config(shape, tokenizer)
    config._attn_implementation = "sdpa"
    return transformers.Qwen3ForCausalLM(config)


def init_from_target(draft, target) -> None:
    """Copy the target's embedding (tied LM head), final norm and first ``n`` layers into an ``n``-layer draft.

    The draft then starts out computing a truncated target (early exit after ``n`` layers), which distillation
    turns into a good predictor much faster than training from random weights.
    """
    if draft.config.hidden_size != target.config.hidden_size:
        raise ValueError(f"a draft initialised from the target needs its width ({target.config.hidden_size}), "
                         f"got {draft.config.hidden_size}")
    source = target.state_dict()  # the draft's layer i has the same parameter names as the target's layer i
    with torch.no_grad():
        for name, tensor in draft.state_dict().items():
            tensor.copy_(source[name])


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


def _eta(start: float, step: int, steps: int) -> str:
    elapsed = time.time() - start
    return f"step {step}/{steps}, {elapsed / 60:.1f} min, ~{elapsed / step * (steps - step) / 60:.1f} min left"


def _set_lr(opt, lr: float) -> None:
    for group in opt.param_groups:
        group["lr"] = lr


def _step(opt, model, loss) -> None:
    """One optimiser step with gradients clipped to norm 1."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()


def train_target(model, data, *, steps, seq_len, batch_size, lr, seed, device, log):
    """Next-token cross-entropy for ``steps`` steps (warm-up + cosine schedule over them)."""
    model.to(device).train()
    opt = _optimizer(list(model.parameters()), lr)
    stream = batches(data, seq_len, batch_size, seed)
    start, tokens = time.time(), 0
    for step in range(1, steps + 1):
        progress = (step - 1) / steps  # the fraction of the schedule done before this step
        _set_lr(opt, lr_at(progress, lr))
        batch = next(stream).to(device)
        with _autocast(device):
            logits = model(input_ids=batch[:, :-1]).logits
        loss = F.cross_entropy(logits.float().flatten(0, 1), batch[:, 1:].flatten())
        _step(opt, model, loss)
        tokens += batch[:, 1:].numel()
        if step % 50 == 0 or step == 1:
            log(f"target loss {loss.item():.3f} lr {opt.param_groups[0]['lr']:.2e} "
                f"{tokens / (time.time() - start):.0f} tok/s ({_eta(start, step, steps)})")
    return {"steps": steps, "tokens": tokens, "seconds": round(time.time() - start, 1)}


def distill_drafts(target, drafts: dict, data, *, steps, seq_len, batch_size, lr, seed, device, log):
    """Train every draft on the frozen target's distribution (forward KL) for ``steps`` steps, sharing one
    target forward per batch."""
    target.to(device).eval()
    opts = {}
    for name, draft in drafts.items():
        draft.to(device).train()
        opts[name] = _optimizer([p for p in draft.parameters() if p.requires_grad], lr)  # frozen: shared
    stream = batches(data, seq_len, batch_size, seed + 1)
    start, tokens = time.time(), 0
    for step in range(1, steps + 1):
        progress = (step - 1) / steps  # the fraction of the schedule done before this step
        batch = next(stream).to(device)
        with torch.no_grad(), _autocast(device):
            teacher = F.log_softmax(target(input_ids=batch[:, :-1]).logits.float(), -1).flatten(0, 1)
        losses = {}
        for name, draft in drafts.items():
            opt = opts[name]
            _set_lr(opt, lr_at(progress, lr))
            with _autocast(device):
                student = F.log_softmax(draft(input_ids=batch[:, :-1]).logits.float(), -1).flatten(0, 1)
            loss = F.kl_div(student, teacher, log_target=True, reduction="batchmean")
            _step(opt, draft, loss)
            losses[name] = loss.item()
        tokens += batch[:, 1:].numel()
        if step % 50 == 0 or step == 1:
            shown = " ".join(f"{k} KL {v:.3f}" for k, v in losses.items())
            log(f"distill {shown} {tokens / (time.time() - start):.0f} tok/s ({_eta(start, step, steps)})")
    return {"steps": steps, "tokens": tokens, "seconds": round(time.time() - start, 1)}


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
    """The model's own greedy continuation (KV-cached: :func:`helpers.kv_cache.generate` on the minimal Qwen3
    decoder sharing the model's weights), returned with the prompt."""
    model.eval()
    return torch.cat([prompts, generate(from_hf(model), prompts, new_tokens)], dim=1)


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
    model.eval()
    samples = []
    for _ in range(repeats + 1):  # the first pass is warm-up
        decoder = cached_decoder(model, "transformers", prompt.shape[1] + steps)  # the model's own forward
        nxt = decoder.extend(prompt)[:, -1:].argmax(-1)
        t0 = time.perf_counter()
        for _ in range(steps):
            nxt = decoder.extend(nxt)[:, -1:].argmax(-1)
        samples.append((time.perf_counter() - t0) / steps)
    return min(samples[1:])


@torch.no_grad()
def loss_by_position(model, windows: torch.Tensor, buckets=None) -> dict[str, float]:
    """Mean next-token loss of the tokens at positions ``[start, end)`` of each window, per bucket: a model that
    uses long context predicts late positions better than early ones."""
    buckets = LONG_BUCKETS if buckets is None else buckets
    model.eval()
    nll = torch.cat([F.cross_entropy(model(input_ids=w[None, :-1]).logits[0].float(), w[1:], reduction="none")[None]
                     for w in windows])
    return {f"{a}-{b}": round(nll[:, a:b].mean().item(), 4) for a, b in buckets if b <= nll.shape[1]}


def train_long_target(out: Path, train_ids, heldout_ids, *, steps, batch_size, seed, device, log,
                      eval_windows: int = 16) -> dict:
    """Stage 5: fine-tune a copy of the shipped target on ``LONG_SEQ_LEN``-token windows, save it as
    ``target-long`` and return its card entry (with the target's loss by position for comparison)."""
    target = load_saved(out / "target")
    model = load_saved(out / "target")
    model.config.max_position_embeddings = LONG_CONTEXT_LIMIT
    stage = train_target(model, train_ids, steps=steps, seq_len=LONG_SEQ_LEN, batch_size=batch_size, lr=5e-4,
                         seed=seed + 100, device=device, log=log)
    save_model(model, out / "target-long")
    model = load_saved(out / "target-long")
    windows = heldout_windows(heldout_ids, LONG_SEQ_LEN, eval_windows)
    entry = {"stage": dict(stage, seq_len=LONG_SEQ_LEN, batch_size=batch_size, lr=5e-4, seed=seed + 100,
                           init="target"),
             "context_limit": LONG_CONTEXT_LIMIT, "eval_windows": eval_windows,
             "loss_by_position": {"target": loss_by_position(target.to("cpu"), windows),
                                  "target-long": loss_by_position(model, windows)}}
    log(f"loss by position: {entry['loss_by_position']}")
    return entry


def measure_models(out: Path, names, heldout_ids, *, seq_len: int, smoke: bool, training_tokens: dict, log):
    """Card entries of the saved models ``names`` (the first is the target): layers, width, parameters, training
    tokens, held-out loss, decode ms per token (1 thread) and, for drafts, the cost ratio to the target and the
    greedy agreement with it. Returns the entries and the evaluation settings."""
    torch.set_num_threads(1)
    models = {name: load_saved(out / name) for name in names}
    windows = heldout_windows(heldout_ids, seq_len, 16 if smoke else 64)
    prompt_len, new_tokens, n_prompts = 64, 64, (4 if smoke else 32)
    prompts = heldout_windows(heldout_ids, prompt_len - 1, n_prompts)
    results = {}
    for name, model in models.items():
        results[name] = {
            "layers": model.config.num_hidden_layers,
            "hidden_size": model.config.hidden_size,
            "parameters": describe(model)["parameters"],
            "training_tokens": training_tokens[name],
            "heldout_loss": round(heldout_loss(model, windows), 4),
            "decode_ms_per_token": round(1000 * decode_step_seconds(model, prompts[:1, :32]), 3),
        }
        log(f"{name}: {results[name]}")
    target_name, *draft_names = names
    for name in draft_names:
        results[name]["cost_ratio"] = round(
            results[name]["decode_ms_per_token"] / results[target_name]["decode_ms_per_token"], 4)
        results[name]["greedy_agreement"] = round(
            greedy_agreement(models[target_name], models[name], prompts, new_tokens), 4)
        log(f"{name}: cost ratio {results[name]['cost_ratio']}, agreement {results[name]['greedy_agreement']}")
    return results, {"windows": len(windows), "prompts": n_prompts, "prompt_len": prompt_len, "new_tokens": new_tokens}


# --------------------------------------------------------------------------- saving

def save_model(model, out_dir: Path) -> None:
    """bf16 safetensors (half the bytes of float32); loaders cast back to float32."""
    out_dir.mkdir(parents=True, exist_ok=True)
    model.to("cpu").to(torch.bfloat16).save_pretrained(out_dir, safe_serialization=True)
    model.to(torch.float32)


def load_saved(out_dir: Path):
    return AutoModelForCausalLM.from_pretrained(out_dir, dtype=torch.float32).eval()


def save_card(card: dict, out: Path, log) -> dict:
    """Record what ``out`` stores (weights and JSON, MB) in ``card``, write it (:func:`write_card`) and say so."""
    stored = sum(f.stat().st_size for f in out.rglob("*") if f.is_file() and f.suffix in {".safetensors", ".json"})
    card["stored_megabytes"] = round(stored / 1e6, 2)
    write_card(card, out)
    log(f"wrote {out / 'MODEL_CARD.md'} ({card['stored_megabytes']} MB stored)")
    return card


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
    return f"""# The CPU pair: model card

A small Qwen3-architecture target and two drafts that share one byte-level BPE tokenizer
({card['vocab_size']} entries), trained by `python -m helpers.models.train_cpu_pair` on the Python standard
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
- **Cost ratio**: per-token decode time (batch 1, float32, `DynamicCache`, 1 thread on
  {env['cpu']}) of the draft divided by the target's:

| model | decode ms/token |
|---|---|
{timing}

- **Training** (batch {stages.get('batch_size', '?')} x {stages.get('seq_len', '?')} tokens): target {stages['target']['steps']} steps
  in {stages['target']['seconds']/60:.1f} min (cross-entropy, AdamW, warm-up then cosine decay); drafts
  initialised from the target's embedding, final norm and first layer(s), then {stages['draft']['steps']} steps in
  {stages['draft']['seconds']/60:.1f} min distilled from the frozen target (forward KL to its logits).
  Device: {env['device']}, {env['threads']} threads; seed {card['seed']}; torch {env['torch']},
  transformers {env['transformers']}. The step counts are fixed, so only the wall time depends on the machine.
- **Stored** as bf16 safetensors ({card['stored_megabytes']:.1f} MB in all); loaded back as float32.
{_long_card(card)}{_family_card(card)}- **Limits**: tiny models on a narrow corpus; they continue Python code, docstrings and documentation
  prose, and nothing else well. Not for any use beyond timing and acceptance-rate experiments.
"""


def _long_card(card: dict) -> str:
    long = card.get("target_long")
    if not long:
        return ""
    buckets = list(long["loss_by_position"]["target"])
    rows = "\n".join(f"| {name} | " + " | ".join(f"{losses[b]:.3f}" for b in buckets) + " |"
                     for name, losses in long["loss_by_position"].items())
    st = long["stage"]
    return f"""- **target-long** (notebook 11): the target fine-tuned for {st['steps']} steps on windows of {st['seq_len']}
  tokens (batch {st['batch_size']}, {st['tokens']:,} tokens, peak learning rate {st['lr']}, seed {st['seed']},
  {st['seconds']/60:.1f} min), context limit raised to {long['context_limit']}
  (`python -m helpers.models.train_cpu_pair --stage long`). Held-out loss (nats/token) by position in
  {long['eval_windows']} held-out windows of {st['seq_len']} tokens; falling loss at late positions is context used:

| model | """ + " | ".join(f"positions {b}" for b in buckets) + """ |
|---|""" + "---|" * len(buckets) + f"""
{rows}

"""


def _family_card(card: dict) -> str:
    family = card.get("draft_family")
    if not family:
        return ""
    st = family["stage"]
    rows = "\n".join(
        f"| {name} | {m['layers']} | {m['hidden_size']} | {m['parameters']:,} | {m['trainable_parameters']:,} | "
        f"{m['heldout_loss']:.3f} | {m['decode_ms_per_token']:.2f} | {m['cost_ratio']:.3f} | "
        f"{m['greedy_agreement']:.3f} |"
        for name, m in family["models"].items())
    return f"""- **Draft family** (notebook 12, `python -m helpers.models.train_cpu_pair --stage drafts`): drafts within
  {family['tolerance']:.0%} of {family['reference']}'s parameter count, from deep-narrow to shallow-wide, all from the
  same random initialisation seed ({st['seed']}) and distilled from the frozen target for {st['steps']} steps
  (batch {st['batch_size']} x {st['seq_len']} tokens, {st['tokens']:,} tokens, peak learning rate {st['lr']},
  {st['seconds']/60:.1f} min for all of them); `-shared` drafts use the target's embedding and tied LM head, frozen.
  Decode ms/token at 1 thread, against the target's {family['target_ms_per_token']:.2f}:

| draft | layers | hidden | parameters | trained | held-out loss | decode ms/token | cost ratio | greedy agreement |
|---|---|---|---|---|---|---|---|---|
{rows}

"""


# --------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=CPU_PAIR_DIR, help="where to write tokenizer/, target/, drafts")
    parser.add_argument("--device", default="auto", help="'auto' (cuda if available), 'cpu' or 'cuda'")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads for training (timing always uses 1)")
    parser.add_argument("--target-steps", type=int, default=None, help="target optimiser steps (default 2400)")
    parser.add_argument("--draft-steps", type=int, default=None,
                        help=f"distillation steps (default 2500; {FAMILY_STEPS} for --stage drafts)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=None, help="sequences per step (CPU 8, GPU 64)")
    parser.add_argument("--skip-target", action="store_true", help="reuse the target already in --out, redistil")
    parser.add_argument("--smoke", action="store_true", help="tiny step counts, writes to /tmp/cpu_pair_smoke")
    parser.add_argument("--stage", choices=("pair", "long", "drafts"), default="pair",
                        help="'pair': tokenizer, target, drafts (default); 'long': fine-tune target-long from the "
                             "target in --out (stage 5); 'drafts': distil notebook 12's draft family (stage 6)")
    parser.add_argument("--draft-shape", action="append", default=None, metavar="LxW",
                        help="with --stage drafts: a draft of L layers and width W ('LxW-shared': with the target's "
                             "embedding, frozen); repeat for several (default: the family, "
                             + ", ".join(name.removeprefix("draft-") for name in DRAFT_FAMILY) + ")")
    parser.add_argument("--long-steps", type=int, default=None, help="stage 5 optimiser steps (default 240)")
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if args.device == "auto" else args.device))
    on_gpu = device.type == "cuda"
    if args.smoke:
        args.out = Path("/tmp/cpu_pair_smoke")
    target_steps = args.target_steps or (20 if args.smoke else 2400)
    draft_steps = args.draft_steps or (10 if args.smoke else FAMILY_STEPS if args.stage == "drafts" else 2500)
    batch_size = args.batch_size or (64 if on_gpu else 8)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.time()

    def log(msg: str) -> None:
        print(f"[{time.time() - t_start:7.1f}s] {msg}", flush=True)

    corpus = load_corpus()
    log(f"corpus: {len(corpus.train)} training and {len(corpus.heldout)} held-out documents")
    if args.stage in ("long", "drafts") and not (out / "card.json").exists():
        raise FileNotFoundError(f"--stage {args.stage} starts from the target in {out}; train the pair first "
                                "(no --stage)")
    if args.skip_target or args.stage != "pair":
        tokenizer = AutoTokenizer.from_pretrained(out / "tokenizer")
    else:
        tokenizer = train_tokenizer(corpus.train)
        tokenizer.save_pretrained(out / "tokenizer")
    train_ids = encode_documents(tokenizer, corpus.train)
    heldout_ids = encode_documents(tokenizer, corpus.heldout)
    log(f"tokenizer: {len(tokenizer)} entries; {len(train_ids):,} training and {len(heldout_ids):,} held-out tokens")

    if args.stage == "long":
        return _main_long(args, out, tokenizer, train_ids, heldout_ids, device=device, log=log)
    if args.stage == "drafts":
        return _main_drafts(args, out, tokenizer, train_ids, heldout_ids, draft_steps=draft_steps,
                            batch_size=batch_size, device=device, log=log)

    common = dict(seq_len=args.seq_len, batch_size=batch_size, device=device, log=log)
    if args.skip_target:
        target = load_saved(out / "target")
        target_stage = json.loads((out / "card.json").read_text())["stages"]["target"]
    else:
        target = make_model("target", tokenizer, args.seed)
        log(f"target: {describe(target)['parameters']:,} parameters")
        target_stage = train_target(target, train_ids, steps=target_steps, lr=2e-3 if not on_gpu else 1.5e-3,
                                    seed=args.seed, **common)
        save_model(target, out / "target")
        target = load_saved(out / "target")  # continue with the bf16-rounded weights that ship
    drafts = {}
    for i, name in enumerate(DRAFT_NAMES):
        drafts[name] = make_model(name, tokenizer, args.seed + 1 + i)
        init_from_target(drafts[name], target)
    draft_stage = distill_drafts(target, drafts, train_ids, steps=draft_steps, lr=3e-3, seed=args.seed, **common)
    for name in DRAFT_NAMES:
        save_model(drafts[name], out / name)

    # Measure what ships: reload every model from disk, on CPU, float32; time with one thread, like the benchmarks.
    tokens = {"target": target_stage["tokens"], **{name: draft_stage["tokens"] for name in DRAFT_NAMES}}
    results, evaluation = measure_models(out, ["target", *DRAFT_NAMES], heldout_ids, seq_len=args.seq_len,
                                         smoke=args.smoke, training_tokens=tokens, log=log)
    windows, n_prompts, prompt_len, new_tokens = (evaluation[k] for k in ("windows", "prompts", "prompt_len",
                                                                          "new_tokens"))

    card = {
        "seed": args.seed,
        "vocab_size": len(tokenizer),
        "corpus": {"train_documents": len(corpus.train), "heldout_documents": len(corpus.heldout),
                   "train_tokens": len(train_ids), "heldout_tokens": len(heldout_ids)},
        "stages": {"target": target_stage, "draft": draft_stage, "batch_size": batch_size, "seq_len": args.seq_len},
        "eval": {"loss_windows": windows, "seq_len": args.seq_len, "agreement_prompts": n_prompts,
                 "agreement_prompt_len": prompt_len, "agreement_new_tokens": new_tokens},
        "models": results,
        "environment": {"python": platform.python_version(), "torch": torch.__version__,
                        "transformers": transformers.__version__, "device": str(device),
                        "cpu": cpu_name(), "threads": args.threads, "timing_threads": 1},
        # a --skip-target run reuses the target: count its training time too, so this is the recipe's total
        "total_minutes": round((time.time() - t_start + (target_stage["seconds"] if args.skip_target else 0)) / 60, 1),
    }
    return save_card(card, out, log)


def _main_long(args, out: Path, tokenizer, train_ids, heldout_ids, *, device, log) -> dict:
    steps = args.long_steps or (4 if args.smoke else 240)
    entry = train_long_target(out, train_ids, heldout_ids, steps=steps, batch_size=1,
                              seed=args.seed, device=device, log=log, eval_windows=2 if args.smoke else 16)
    card = json.loads((out / "card.json").read_text())
    card["target_long"] = entry
    return save_card(card, out, log)


def _main_drafts(args, out: Path, tokenizer, train_ids, heldout_ids, *, draft_steps, batch_size, device,
                 log) -> dict:
    """Stage 6: distil every draft spec from the same seed with the same recipe, save and measure them, and add
    them to the card under ``draft_family`` (entries of earlier runs with other specs are kept)."""
    specs = [s.removeprefix("draft-") for s in (args.draft_shape or DRAFT_FAMILY)]
    counts = check_family_shapes(specs, tokenizer)  # before any training: a bad spec fails in a second
    target = load_saved(out / "target")
    drafts = {}
    for spec in specs:
        drafts[family_name(spec)] = make_model(spec.removesuffix("-shared"), tokenizer, args.seed + 1)
        if spec.endswith("-shared"):
            share_target_embedding(drafts[family_name(spec)], target)
        log(f"{family_name(spec)}: {counts[spec]:,} parameters")
    stage = distill_drafts(target, drafts, train_ids, steps=draft_steps, lr=3e-3, seed=args.seed,
                           seq_len=args.seq_len, batch_size=batch_size, device=device, log=log)
    for name, draft in drafts.items():
        save_model(draft, out / name)
    names = list(drafts)
    results, evaluation = measure_models(out, ["target", *names], heldout_ids, seq_len=args.seq_len,
                                         smoke=args.smoke, training_tokens={n: stage["tokens"] for n in names} | {
                                             "target": 0}, log=log)
    card = json.loads((out / "card.json").read_text())
    family = card.get("draft_family", {"models": {}})
    family["models"].update({name: dict(results[name], shared_embedding=name.endswith("-shared"),
                                        trainable_parameters=sum(p.numel() for p in drafts[name].parameters()
                                                                 if p.requires_grad))
                             for name in names})
    family.update(stage=dict(stage, lr=3e-3, seed=args.seed + 1, data_seed=args.seed + 1, init="random",
                             batch_size=batch_size, seq_len=args.seq_len),
                  target_ms_per_token=results["target"]["decode_ms_per_token"], eval=evaluation,
                  reference=FAMILY_REFERENCE, tolerance=PARAMETER_TOLERANCE)
    card["draft_family"] = family
    return save_card(card, out, log)


if __name__ == "__main__":
    main(sys.argv[1:])
