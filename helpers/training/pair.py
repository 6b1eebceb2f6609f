"""Stages 2 to 4 for the pair (the default ``--stage pair``): train the target, distil the two drafts from it,
measure what ships and write the card."""
from __future__ import annotations

import json
import platform
import time

import torch
import transformers

from helpers.hardware import cpu_name
from helpers.models import describe
from helpers.models.corpus import Corpus
from helpers.training.card import save_card
from helpers.training.checkpoints import load_saved, save_model
from helpers.training.distill import DISTILL_LR, distill_drafts
from helpers.training.evaluate import measure_models
from helpers.training.initialise import init_from_target, make_model
from helpers.training.settings import Settings
from helpers.training.train import train_target

DRAFT_NAMES = ("draft", "draft-2l")


def target_for_pair(settings: Settings, tokenizer, train_ids):
    """The target and its stage entry: trained from ``settings.seed`` and reloaded as it ships (bf16-rounded),
    or, with ``skip_target``, the one already in ``settings.out`` with its recorded stage."""
    out = settings.out
    if settings.skip_target:
        return load_saved(out / "target"), json.loads((out / "card.json").read_text())["stages"]["target"]
    target = make_model("target", tokenizer, settings.seed)
    settings.log(f"target: {describe(target)['parameters']:,} parameters")
    stage = train_target(target, train_ids, steps=settings.target_steps, lr=1.5e-3 if settings.on_gpu else 2e-3,
                         seed=settings.seed, seq_len=settings.seq_len, batch_size=settings.batch_size,
                         device=settings.device, log=settings.log)
    save_model(target, out / "target")
    return load_saved(out / "target"), stage  # continue with the bf16-rounded weights that ship


def distil_pair_drafts(settings: Settings, tokenizer, target, train_ids) -> dict:
    """Both drafts initialised from the target (:func:`~helpers.training.initialise.init_from_target`), distilled
    together and saved; returns their stage entry."""
    drafts = {}
    for i, name in enumerate(DRAFT_NAMES):
        drafts[name] = make_model(name, tokenizer, settings.seed + 1 + i)
        init_from_target(drafts[name], target)
    stage = distill_drafts(target, drafts, train_ids, steps=settings.draft_steps, lr=DISTILL_LR, seed=settings.seed,
                           seq_len=settings.seq_len, batch_size=settings.batch_size, device=settings.device,
                           log=settings.log)
    for name in DRAFT_NAMES:
        save_model(drafts[name], settings.out / name)
    return stage


def pair_card(settings: Settings, corpus: Corpus, tokenizer, ids: dict, stages: dict, results: dict,
              evaluation: dict) -> dict:
    """The card of a pair run: corpus, stages, evaluation settings, the models' measurements, the environment.
    ``ids`` holds the ``train`` and ``heldout`` token streams, ``stages`` the ``target`` and ``draft`` entries."""
    return {
        "seed": settings.seed,
        "vocab_size": len(tokenizer),
        "corpus": {"train_documents": len(corpus.train), "heldout_documents": len(corpus.heldout),
                   "train_tokens": len(ids["train"]), "heldout_tokens": len(ids["heldout"])},
        "stages": {**stages, "batch_size": settings.batch_size, "seq_len": settings.seq_len},
        "eval": {"loss_windows": evaluation["windows"], "seq_len": settings.seq_len,
                 "agreement_prompts": evaluation["prompts"], "agreement_prompt_len": evaluation["prompt_len"],
                 "agreement_new_tokens": evaluation["new_tokens"]},
        "models": results,
        "environment": {"python": platform.python_version(), "torch": torch.__version__,
                        "transformers": transformers.__version__, "device": str(settings.device),
                        "cpu": cpu_name(), "threads": settings.threads, "timing_threads": 1},
        # a --skip-target run reuses the target: count its training time too, so this is the recipe's total
        "total_minutes": round((time.time() - settings.started
                                + (stages["target"]["seconds"] if settings.skip_target else 0)) / 60, 1),
    }


def train_pair(settings: Settings, corpus: Corpus, tokenizer, train_ids, heldout_ids) -> dict:
    """Target, drafts, then measure what ships (every model reloaded from disk, on CPU, float32, timed with one
    thread like the benchmarks) and write the card."""
    target, target_stage = target_for_pair(settings, tokenizer, train_ids)
    draft_stage = distil_pair_drafts(settings, tokenizer, target, train_ids)
    tokens = {"target": target_stage["tokens"], **{name: draft_stage["tokens"] for name in DRAFT_NAMES}}
    results, evaluation = measure_models(settings.out, ["target", *DRAFT_NAMES], heldout_ids, seq_len=settings.seq_len,
                                         smoke=settings.smoke, training_tokens=tokens, log=settings.log)
    card = pair_card(settings, corpus, tokenizer, {"train": train_ids, "heldout": heldout_ids},
                     {"target": target_stage, "draft": draft_stage}, results, evaluation)
    return save_card(card, settings.out, settings.log)
