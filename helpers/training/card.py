"""The model card: ``card.json`` (every measured figure) and ``MODEL_CARD.md`` rendered from it.

The committed ``data/cpu_pair/MODEL_CARD.md`` is :func:`render_card` of the committed ``card.json``
(``tests/test_training.py`` checks it); its wording is the template ``model_card.md`` beside this module, one
section per ``<!-- name -->`` line, filled with :meth:`str.format`, so a change to that text is a change to the
committed card too.
"""
from __future__ import annotations

import json
import re
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


def _templates() -> dict[str, str]:
    """The sections of ``model_card.md`` by name (each opened by a ``<!-- name -->`` line)."""
    text = (Path(__file__).with_name("model_card.md")).read_text()
    parts = re.split(r"^<!-- (\w+) -->\n", text, flags=re.M)[1:]
    return dict(zip(parts[::2], parts[1::2]))


def render_card(card: dict) -> str:
    """The Markdown model card of ``card``: the pair's table, how it was measured and trained, then the
    target-long and draft-family sections where the card has them (the wording: ``model_card.md``)."""
    m = card["models"]
    rows = "\n".join(
        f"| {name} | {info['layers']} | {info['hidden_size']} | {info['parameters']:,} | "
        f"{info['training_tokens']:,} | {info['heldout_loss']:.3f} | "
        + (f"{info['cost_ratio']:.3f} | {info['greedy_agreement']:.3f} |" if name != "target" else "1 | – |")
        for name, info in m.items()
    )
    timing = "\n".join(f"| {name} | {info['decode_ms_per_token']:.2f} |" for name, info in m.items())
    stages = card["stages"]
    return _templates()["card"].format(
        card=card, command=COMMAND, env=card["environment"], corpus=card["corpus"], eval=card["eval"],
        stages=stages, rows=rows, timing=timing, heldout_every=HELDOUT_EVERY,
        batch_size=stages.get("batch_size", "?"), seq_len=stages.get("seq_len", "?"),
        target_minutes=stages["target"]["seconds"] / 60, draft_minutes=stages["draft"]["seconds"] / 60,
        sections=long_card_section(card) + family_card_section(card) + drafters_card_section(card))


def long_card_section(card: dict) -> str:
    """The card's target-long section (stage 5: loss by position, target vs target-long); '' before that stage."""
    long = card.get("target_long")
    if not long:
        return ""
    buckets = list(long["loss_by_position"]["target"])
    rows = "\n".join(f"| {name} | " + " | ".join(f"{losses[b]:.3f}" for b in buckets) + " |"
                     for name, losses in long["loss_by_position"].items())
    st = long["stage"]
    return _templates()["long"].format(
        long=long, st=st, command=COMMAND, minutes=st["seconds"] / 60, rows=rows, rule="---|" * len(buckets),
        header=" | ".join(f"positions {b}" for b in buckets))


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
    return _templates()["family"].format(family=family, st=st, command=COMMAND, minutes=st["seconds"] / 60,
                                         rows=rows)


def drafters_card_section(card: dict) -> str:
    """The card's section on the drafters that read the target's features (stage 7); '' before that stage."""
    d = card.get("drafters")
    if not d:
        return ""
    templates = _templates()
    distilled = "".join(f"; {name}, measured the same way: {value:.3f}"
                        for name, value in d["heldout"].get("distilled_top1", {}).items())
    vocab = ""
    if d.get("draft_vocab") and d["draft_vocab"] < card["vocab_size"]:  # a reduced draft vocabulary (FR-Spec)
        full = d["heldout"].get("feature_draft_top1_step1_full_vocab")
        vocab = templates["vocab"][:-1].format(
            d=d, vocab_size=card["vocab_size"], full="" if full is None else templates["vocab_full"][:-1].format(
                full=full))
    return templates["drafters"].format(
        d=d, command=COMMAND, minutes=d["seconds"] / 60, windows=d.get("heldout_windows", 64), distilled=distilled,
        by_head=", ".join(f"{a:.3f}" for a in d["heldout"]["medusa_top1_by_head"]), vocab=vocab)
