"""The model card: ``card.json`` (every measured figure) and ``MODEL_CARD.md`` rendered from it.

The committed ``data/cpu_pair/MODEL_CARD.md`` is :func:`render_card` of the committed ``card.json``
(``tests/test_training.py`` checks it), so a change to the text here is a change to that file too.
"""
from __future__ import annotations

import json
from pathlib import Path

from helpers.models.corpus import HELDOUT_EVERY

COMMAND = "python -m helpers.training"  # the command that trains the pair, named in the card


def save_card(card: dict, out: Path, log) -> dict:
    """Record what ``out`` stores (weights and JSON, MB) in ``card``, write it (:func:`write_card`) and say so."""
    stored = sum(f.stat().st_size for f in out.rglob("*") if f.is_file() and f.suffix in {".safetensors", ".json"})
    card["stored_megabytes"] = round(stored / 1e6, 2)
    write_card(card, out)
    log(f"wrote {out / 'MODEL_CARD.md'} ({card['stored_megabytes']} MB stored)")
    return card


def write_card(card: dict, out_dir: Path) -> None:
    """``card.json`` and ``MODEL_CARD.md`` (:func:`render_card`) in ``out_dir``."""
    (out_dir / "card.json").write_text(json.dumps(card, indent=2) + "\n")
    (out_dir / "MODEL_CARD.md").write_text(render_card(card))


def render_card(card: dict) -> str:
    """The Markdown model card of ``card``: the pair's table, how it was measured and trained, then the
    target-long and draft-family sections where the card has them."""
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
({card['vocab_size']} entries), trained by `{COMMAND}` on the Python standard
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
{long_card_section(card)}{family_card_section(card)}{drafters_card_section(card)}- **Limits**: tiny models on a narrow corpus; they continue Python code, docstrings and documentation
  prose, and nothing else well. Not for any use beyond timing and acceptance-rate experiments.
"""


def long_card_section(card: dict) -> str:
    """The card's target-long section (stage 5: loss by position, target vs target-long); '' before that stage."""
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
  (`{COMMAND} --stage long`). Held-out loss (nats/token) by position in
  {long['eval_windows']} held-out windows of {st['seq_len']} tokens; falling loss at late positions is context used:

| model | """ + " | ".join(f"positions {b}" for b in buckets) + """ |
|---|""" + "---|" * len(buckets) + f"""
{rows}

"""


def family_card_section(card: dict) -> str:
    """The card's draft-family section (stage 6: one row per draft); '' before that stage."""
    family = card.get("draft_family")
    if not family:
        return ""
    st = family["stage"]
    rows = "\n".join(
        f"| {name} | {m['layers']} | {m['hidden_size']} | {m['parameters']:,} | {m['trainable_parameters']:,} | "
        f"{m['heldout_loss']:.3f} | {m['decode_ms_per_token']:.2f} | {m['cost_ratio']:.3f} | "
        f"{m['greedy_agreement']:.3f} |"
        for name, m in family["models"].items())
    return f"""- **Draft family** (notebook 12, `{COMMAND} --stage drafts`): drafts within
  {family['tolerance']:.0%} of {family['reference']}'s parameter count, from deep-narrow to shallow-wide, all from the
  same random initialisation seed ({st['seed']}) and distilled from the frozen target for {st['steps']} steps
  (batch {st['batch_size']} x {st['seq_len']} tokens, {st['tokens']:,} tokens, peak learning rate {st['lr']},
  {st['seconds']/60:.1f} min for all of them); `-shared` drafts use the target's embedding and tied LM head, frozen.
  Decode ms/token at 1 thread, against the target's {family['target_ms_per_token']:.2f}:

| draft | layers | hidden | parameters | trained | held-out loss | decode ms/token | cost ratio | greedy agreement |
|---|---|---|---|---|---|---|---|---|
{rows}

"""


def drafters_card_section(card: dict) -> str:
    """The card's section on the drafters that read the target's features (stage 7); '' before that stage."""
    d = card.get("drafters")
    if not d:
        return ""
    by_head = ", ".join(f"{a:.3f}" for a in d["heldout"]["medusa_top1_by_head"])
    distilled = "".join(f"; {name}, measured the same way: {value:.3f}"
                        for name, value in d["heldout"].get("distilled_top1", {}).items())
    vocab = ""
    if d.get("draft_vocab") and d["draft_vocab"] < card["vocab_size"]:
        full = d["heldout"].get("feature_draft_top1_step1_full_vocab")
        vocab = (f"\n  The feature draft guesses among the {d['draft_vocab']} tokens most frequent in the training corpus "
                 f"(a reduced draft vocabulary, as in FR-Spec: a draft step reads {d['draft_vocab']} of the LM head's "
                 f"{card['vocab_size']} rows)" + (f"; over the whole vocabulary its first step agrees {full:.3f}"
                                                  if full is not None else "") + ".")
    return f"""- **Drafting from the target itself** (notebook 13, `{COMMAND} --stage heads`): {d['num_heads']} Medusa
  heads (`medusa/`, {d['megabytes']['medusa']:.2f} MB) and a one-layer feature draft (`eagle/`,
  {d['megabytes']['eagle']:.2f} MB), trained together for {d['steps']} steps on the frozen target (batch
  {d['batch_size']} x {d['seq_len']} tokens, {d['tokens']:,} tokens, seed {d['seed']}, {d['threads']} threads,
  {d['seconds'] / 60:.1f} min): the heads by forward KL to the target's distribution k positions ahead (learning rate
  {d['heads_lr']}), the feature draft by SmoothL1 on the next feature + {d['token_weight']} x forward KL to the
  target's distribution there (learning rate {d['feature_lr']}, input-feature noise {d['feature_noise']}, its second
  step trained on its own predicted feature). Held-out top-1 agreement with the target's argmax (teacher forced on
  {d.get('heldout_windows', 64)} windows of the held-out text, harder than the greedy continuations the table above
  scores): Medusa head 1..{d['num_heads']}: {by_head}; the feature draft's first step:
  {d['heldout']['feature_draft_top1_step1']:.3f}{distilled}.{vocab}

"""
