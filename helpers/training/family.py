"""Stage 6, notebook 12's draft family: drafts of one parameter count and different shapes, one recipe for all.

Every draft (``--draft-shape LxW``: L layers of width W, :func:`~helpers.models.cpu_pair_shapes.draft_shape`)
starts from the SAME random initialisation seed and is distilled with the same recipe and steps from the shipped
target (random rather than target initialisation, because only width-192 drafts could copy the target's
layers; the comparison must not favour one width). ``LxW-shared`` uses the target's embedding and tied LM head,
frozen, and needs W = 192.
"""
from __future__ import annotations

import json

from helpers.models import DRAFT_FAMILY
from helpers.models.cpu_pair_shapes import MODEL_SHAPES, draft_shape, family_name, shape_parameters
from helpers.training.card import save_card
from helpers.training.checkpoints import load_saved, save_model
from helpers.training.distill import DISTILL_LR, distill_drafts
from helpers.training.evaluate import measure_models
from helpers.training.initialise import make_model, share_target_embedding
from helpers.training.settings import Settings

FAMILY_REFERENCE = "draft-2l"
PARAMETER_TOLERANCE = 0.10  # every shape within this fraction of the reference draft's parameter count
FAMILY_STEPS = 1500  # five drafts share each step's target forward: about 45 minutes on 2 idle cores


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


def family_drafts(counts: dict[str, int], tokenizer, target, *, seed: int, log) -> dict:
    """One untrained draft per spec of ``counts`` (:func:`check_family_shapes`), by family name, all from
    ``seed``; ``-shared`` ones with the target's embedding."""
    drafts = {}
    for spec in counts:
        drafts[family_name(spec)] = make_model(spec.removesuffix("-shared"), tokenizer, seed)
        if spec.endswith("-shared"):
            share_target_embedding(drafts[family_name(spec)], target)
        log(f"{family_name(spec)}: {counts[spec]:,} parameters")
    return drafts


def family_card_entry(family: dict, drafts: dict, stage: dict, results: dict, evaluation: dict,
                      settings: Settings) -> dict:
    """``family`` (the card's ``draft_family``, entries of earlier runs with other specs kept) with these drafts'
    measurements and this run's recipe."""
    family["models"].update({name: dict(results[name], shared_embedding=name.endswith("-shared"),
                                        trainable_parameters=sum(p.numel() for p in draft.parameters()
                                                                 if p.requires_grad))
                             for name, draft in drafts.items()})
    family.update(stage=dict(stage, lr=DISTILL_LR, seed=settings.seed + 1, data_seed=settings.seed + 1,
                             init="random", batch_size=settings.batch_size, seq_len=settings.seq_len),
                  target_ms_per_token=results["target"]["decode_ms_per_token"], eval=evaluation,
                  reference=FAMILY_REFERENCE, tolerance=PARAMETER_TOLERANCE)
    return family


def train_draft_family(settings: Settings, tokenizer, train_ids, heldout_ids) -> dict:
    """``--stage drafts``: distil every draft spec from the same seed with the same recipe, save and measure them,
    and add them to the card in ``settings.out`` under ``draft_family``."""
    out = settings.out
    specs = [s.removeprefix("draft-") for s in (settings.draft_shapes or DRAFT_FAMILY)]
    counts = check_family_shapes(specs, tokenizer)  # before any training: a bad spec fails in a second
    target = load_saved(out / "target")
    drafts = family_drafts(counts, tokenizer, target, seed=settings.seed + 1, log=settings.log)
    stage = distill_drafts(target, drafts, train_ids, steps=settings.draft_steps, lr=DISTILL_LR, seed=settings.seed,
                           seq_len=settings.seq_len, batch_size=settings.batch_size, device=settings.device,
                           log=settings.log)
    for name, draft in drafts.items():
        save_model(draft, out / name)
    names = list(drafts)
    results, evaluation = measure_models(out, ["target", *names], heldout_ids, seq_len=settings.seq_len,
                                         smoke=settings.smoke, training_tokens={n: stage["tokens"] for n in names} | {
                                             "target": 0}, log=settings.log)
    card = json.loads((out / "card.json").read_text())
    card["draft_family"] = family_card_entry(card.get("draft_family", {"models": {}}), drafts, stage, results,
                                             evaluation, settings)
    return save_card(card, out, settings.log)
