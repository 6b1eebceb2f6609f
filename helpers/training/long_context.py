"""Stage 5, the long-context target (notebook 11): the target fine-tuned on long windows, and its loss by position.

RoPE needs no change (theta 10^4 has wavelengths far beyond these lengths); the model only has to learn to use
the distances it never saw in 256-token windows. Its context limit is raised so that a 4096-token prompt can be
continued.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F

from helpers.training.card import save_card
from helpers.training.checkpoints import load_saved, save_model
from helpers.training.evaluate import heldout_windows
from helpers.training.settings import Settings
from helpers.training.train import train_target

LONG_SEQ_LEN = 4096
LONG_CONTEXT_LIMIT = 8192
LONG_BUCKETS = ((0, 256), (256, 512), (512, 1024), (1024, 2048), (2048, 4096))


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
    """Fine-tune a copy of the shipped target on ``LONG_SEQ_LEN``-token windows, save it as ``target-long`` and
    return its card entry (with the target's loss by position for comparison)."""
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


def run_long_stage(settings: Settings, train_ids, heldout_ids) -> dict:
    """``--stage long``: train target-long at batch 1 and add it to the card in ``settings.out``."""
    entry = train_long_target(settings.out, train_ids, heldout_ids, steps=settings.long_steps, batch_size=1,
                              seed=settings.seed, device=settings.device, log=settings.log,
                              eval_windows=2 if settings.smoke else 16)
    card = json.loads((settings.out / "card.json").read_text())
    card["target_long"] = entry
    return save_card(card, settings.out, settings.log)
