"""Stage 7: drafters that read the target's own features, trained with the target frozen (issue 27).

One target forward per batch (teacher forcing on the training corpus) gives the features f_t (the hidden states the
LM head reads) and the target's next-token distributions; both drafters learn from them in the same loop:

* **Medusa heads** (Medusa-1: heads only, the target and its LM head frozen): head k on f_t learns the target's
  distribution at position t + k (forward KL), which is the token k after the target's own next token; head k's
  loss is weighted 0.8^(k-1), as in Medusa, so the near heads, which matter most, are fit first;
* **the feature draft**: from the pairs (f_t, token t+1) it predicts f_{t+1}; loss = SmoothL1 to the true feature
  plus ``token_weight`` x the forward KL of the target's LM head on the prediction to the target's own distribution
  at t+1 (EAGLE's feature + token loss, with the whole distribution as the distilled drafts have it rather than the
  greedy token alone). Uniform noise on the input features (``feature_noise``) makes it robust to reading its own
  predictions in steps 2..γ, and ``unroll`` = 2 trains the second step on its own predicted features as well (as
  drafting runs it).

Trained over the whole vocabulary, the feature draft is saved drafting among the ``--draft-vocab`` tokens most frequent
in the training corpus (:func:`frequent_tokens`; FR-Spec's reduced draft vocabulary): its LM-head product, most of a
draft step's weights, shrinks by V / n, and greedy output stays exact (the target verifies).

The recipe was chosen by held-out step-1 agreement after 400 steps (one seed; docs/CONTRIBUTING.md "Feature draft
recipe" has the table): the KL token loss at weight 1 and a peak learning rate of 6e-3 took it from 0.39 to 0.56, and
a randomly initialised layer (rather than a copy of the target's last layer, which expects the residual stream
before the final norm, about 9x larger than the features it reads here) to 0.62.
"""
from __future__ import annotations

import json
import time

import torch
import torch.nn.functional as F

from helpers.specdec import FeatureDraft, MedusaHeads
from helpers.specdec.drafter_files import save_drafter
from helpers.training.card import save_card
from helpers.training.checkpoints import load_saved
from helpers.training.evaluate import heldout_windows
from helpers.training.train import batches, clipped_step, lr_at, make_optimizer, progress_note, set_lr

HEADS_LR = 3e-3
FEATURE_LR = 6e-3
MEDUSA_DECAY = 0.8


@torch.no_grad()
def teacher(target, batch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The frozen target on ``batch`` (B, T): its features (B, T, H) and next-token log-probabilities (B, T, V)."""
    out = target(input_ids=batch, output_hidden_states=True)
    return out.hidden_states[-1], F.log_softmax(out.logits.float(), dim=-1)


def medusa_loss(heads, features: torch.Tensor, log_q: torch.Tensor) -> tuple[torch.Tensor, list[float]]:
    """Weighted forward KL of head k on f_t to the target's distribution at t + k, over every position that has one;
    returns the loss and each head's top-1 agreement with the target's argmax there."""
    logits = heads(features)  # (B, T, K, V)
    total, agreement = 0.0, []
    for k in range(1, heads.num_heads + 1):
        student = F.log_softmax(logits[:, :-k, k - 1].float(), dim=-1)
        goal = log_q[:, k:]
        total = total + MEDUSA_DECAY ** (k - 1) * F.kl_div(student.flatten(0, 1), goal.flatten(0, 1),
                                                           log_target=True, reduction="batchmean")
        agreement.append((student.argmax(-1) == goal.argmax(-1)).float().mean().item())
    return total, agreement


def feature_loss(draft, features: torch.Tensor, log_q: torch.Tensor, batch: torch.Tensor, *,
                 token_weight: float, feature_noise: float, unroll: int = 2, generator=None) -> tuple[torch.Tensor, float]:
    """SmoothL1 of the predicted f_{t+1} plus ``token_weight`` x the forward KL to the target's distribution at t+1;
    returns the loss and the draft's top-1 agreement with the target's greedy token there (one step, teacher forced).

    ``unroll`` > 1 also trains the steps after the first as drafting runs them, on the draft's own predicted
    features (step s weighted 0.5^(s-1)): the pairs (f̂_{t+1}, token t+2) predict f_{t+2}, and so on."""
    inputs = features[:, :-1]
    if feature_noise:
        noise = torch.rand(inputs.shape, generator=generator, device=inputs.device) * 2 - 1
        inputs = inputs + feature_noise * noise
    total, agreement = 0.0, float("nan")
    for step in range(unroll):
        logits, predicted = draft(inputs, batch[:, 1 + step:])  # predictions of f_{1+step}..f_{T-1}
        goal = log_q[:, 1 + step:]
        student = F.log_softmax(logits.float(), dim=-1)
        loss = F.smooth_l1_loss(predicted.float(), features[:, 1 + step:].float()) + token_weight * F.kl_div(
            student.flatten(0, 1), goal.flatten(0, 1), log_target=True, reduction="batchmean")
        total = total + 0.5 ** step * loss
        if step == 0:
            agreement = (logits.argmax(-1) == goal.argmax(-1)).float().mean().item()
        inputs = predicted[:, :-1]
    return total, agreement


def train_drafters(target, heads, draft, data: torch.Tensor, *, steps: int, seq_len: int, batch_size: int, seed: int,
                   token_weight: float = 1.0, feature_noise: float = 0.1, unroll: int = 2, log=print) -> dict:
    """Train Medusa heads and a feature draft together for ``steps`` steps (warm-up + cosine), sharing one frozen
    target forward per batch; returns what the card reports of the run."""
    target.eval()
    for parameter in target.parameters():
        parameter.requires_grad_(False)
    opt_heads = make_optimizer(list(heads.parameters()), HEADS_LR)
    trainable = [p for name, p in draft.named_parameters() if not name.startswith(("body.embed_tokens",
                                                                                   "body.lm_head"))]
    opt_draft = make_optimizer(trainable, FEATURE_LR)
    stream, generator = batches(data, seq_len, batch_size, seed + 7), torch.Generator().manual_seed(seed)
    heads.train(), draft.train()
    start = time.time()
    for step in range(1, steps + 1):
        progress = (step - 1) / steps
        set_lr(opt_heads, lr_at(progress, HEADS_LR))
        set_lr(opt_draft, lr_at(progress, FEATURE_LR))
        batch = next(stream)
        features, log_q = teacher(target, batch)
        loss_heads, head_agreement = medusa_loss(heads, features, log_q)
        clipped_step(opt_heads, heads, loss_heads)
        loss_draft, draft_agreement = feature_loss(draft, features, log_q, batch, token_weight=token_weight,
                                                   feature_noise=feature_noise, unroll=unroll, generator=generator)
        clipped_step(opt_draft, draft, loss_draft)
        if step % 50 == 0 or step == 1:
            log(f"heads {loss_heads.item():.3f} (top-1 {' '.join(f'{a:.2f}' for a in head_agreement)}); feature "
                f"draft {loss_draft.item():.3f} (top-1 {draft_agreement:.2f}) ({progress_note(start, step, steps)})")
    heads.eval(), draft.eval()
    return {"steps": steps, "tokens": steps * batch_size * seq_len, "seconds": round(time.time() - start, 1),
            "seq_len": seq_len, "batch_size": batch_size, "seed": seed, "token_weight": token_weight,
            "feature_noise": feature_noise, "unroll": unroll, "heads_lr": HEADS_LR, "feature_lr": FEATURE_LR}


def frequent_tokens(ids: torch.Tensor, count: int, vocab_size: int) -> torch.Tensor:
    """The ``count`` token ids most frequent in ``ids`` (ties: the lower id first), in id order: the feature draft's
    reduced vocabulary (FR-Spec's frequency-ranked subset). ``count`` 0 or >= ``vocab_size``: every id."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"the draft vocabulary size must be an int >= 0 (0: the whole vocabulary), got {count!r}")
    if count == 0 or count >= vocab_size:
        return torch.arange(vocab_size)
    counts = torch.bincount(ids.flatten().long(), minlength=vocab_size)
    order = torch.sort(counts, descending=True, stable=True).indices
    return order[:count].sort().values


@torch.no_grad()
def heldout_agreement(target, heads, draft, windows: torch.Tensor, batch_size: int = 8, references: dict | None = None
                      ) -> dict:
    """Held-out top-1 agreement with the target's argmax (teacher forced): per Medusa head (draft position k), the
    feature draft's first step (over its draft vocabulary, and, when that is reduced, over every token too:
    ``feature_draft_top1_step1_full_vocab``), and each model in ``references`` ({name: draft model}, the distilled
    drafts) measured the same way, so that the three kinds of draft compare on one scale."""
    references = references or {}
    sums, count = None, 0
    for chunk in windows.split(batch_size):
        features, log_q = teacher(target, chunk)
        _, per_head = medusa_loss(heads, features, log_q)
        greedy = log_q[:, 1:].argmax(-1)
        logits, predicted = draft(features[:, :-1], chunk[:, 1:])  # the first step, teacher forced
        first_step = [(logits.argmax(-1) == greedy).float().mean().item(),  # its own (maybe reduced) vocabulary
                      (draft.target_head(predicted).argmax(-1) == greedy).float().mean().item()]  # every token
        row = per_head + first_step + [(model(input_ids=chunk).logits[:, 1:].argmax(-1) == greedy).float().mean()
                                       .item() for model in references.values()]
        sums = row if sums is None else [a + b for a, b in zip(sums, row)]
        count += 1
    means = [round(s / count, 4) for s in sums]
    k = heads.num_heads
    found = {"medusa_top1_by_head": means[:k], "feature_draft_top1_step1": means[k],
             "distilled_top1": dict(zip(references, means[k + 2:]))}
    if draft.draft_vocab is not None:
        found["feature_draft_top1_step1_full_vocab"] = means[k + 1]
    return found


def run_heads_stage(settings, train_ids: torch.Tensor, heldout_ids: torch.Tensor, *, num_heads: int = 4) -> dict:
    """Stage 7: Medusa heads and the feature draft for the target in ``settings.out``, trained together with the
    target frozen, saved next to it (``medusa/``, ``eagle/``), their entry added to the card."""
    target = load_saved(settings.out / "target")
    torch.manual_seed(settings.seed)
    heads, draft = MedusaHeads(target, num_heads), FeatureDraft(target)
    run = train_drafters(target, heads, draft, train_ids, steps=settings.heads_steps, seq_len=settings.seq_len,
                         batch_size=settings.batch_size, seed=settings.seed, log=settings.log)
    windows = heldout_windows(heldout_ids, settings.seq_len, 8 if settings.smoke else 64)
    references = {name: load_saved(settings.out / name) for name in ("draft", "draft-2l")
                  if (settings.out / name).exists()}
    vocab = target.get_output_embeddings().weight.shape[0]
    run["draft_vocab"] = min(settings.draft_vocab or vocab, vocab)
    if run["draft_vocab"] < vocab:  # trained on the whole vocabulary, it drafts among the frequent tokens
        draft.restrict_vocab(frequent_tokens(train_ids, run["draft_vocab"], vocab))
    run["heldout"] = heldout_agreement(target, heads, draft, windows, references=references)
    run["threads"], run["heldout_windows"] = settings.threads, len(windows)
    settings.log(f"held-out top-1: Medusa heads {run['heldout']['medusa_top1_by_head']}, feature draft step 1 "
                 f"{run['heldout']['feature_draft_top1_step1']}, distilled drafts {run['heldout']['distilled_top1']}")
    save_drafter(heads, settings.out / "medusa")
    save_drafter(draft, settings.out / "eagle")
    sizes = {name: round((settings.out / name / "weights.safetensors").stat().st_size / 1e6, 3)
             for name in ("medusa", "eagle")}
    card = json.loads((settings.out / "card.json").read_text())
    card["drafters"] = run | {"num_heads": num_heads, "megabytes": sizes}
    return save_card(card, settings.out, settings.log)
