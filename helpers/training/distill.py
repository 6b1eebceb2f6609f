"""Stage 3: distilling drafts from the frozen target (forward KL to its logits), one target forward per batch."""
from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from helpers.training.train import autocast_for, batches, clipped_step, lr_at, make_optimizer, progress_note, set_lr

DISTILL_LR = 3e-3  # peak learning rate of every distillation (the pair's drafts and the family)


def distill_drafts(target, drafts: dict, data, *, steps, seq_len, batch_size, lr, seed, device, log):
    """Train every draft on the frozen target's distribution (forward KL) for ``steps`` steps, sharing one
    target forward per batch."""
    target.to(device).eval()
    opts = {}
    for name, draft in drafts.items():
        draft.to(device).train()
        opts[name] = make_optimizer([p for p in draft.parameters() if p.requires_grad], lr)  # frozen: shared
    stream = batches(data, seq_len, batch_size, seed + 1)
    start, tokens = time.time(), 0
    for step in range(1, steps + 1):
        progress = (step - 1) / steps  # the fraction of the schedule done before this step
        batch = next(stream).to(device)
        with torch.no_grad(), autocast_for(device):
            teacher = F.log_softmax(target(input_ids=batch[:, :-1]).logits.float(), -1).flatten(0, 1)
        losses = {}
        for name, draft in drafts.items():
            opt = opts[name]
            set_lr(opt, lr_at(progress, lr))
            with autocast_for(device):
                student = F.log_softmax(draft(input_ids=batch[:, :-1]).logits.float(), -1).flatten(0, 1)
            loss = F.kl_div(student, teacher, log_target=True, reduction="batchmean")
            clipped_step(opt, draft, loss)
            losses[name] = loss.item()
        tokens += batch[:, 1:].numel()
        if step % 50 == 0 or step == 1:
            shown = " ".join(f"{k} KL {v:.3f}" for k, v in losses.items())
            log(f"distill {shown} {tokens / (time.time() - start):.0f} tok/s ({progress_note(start, step, steps)})")
    return {"steps": steps, "tokens": tokens, "seconds": round(time.time() - start, 1)}
