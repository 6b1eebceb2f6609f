"""Stage 2: next-token training, and the loop pieces distillation shares (data order, schedule, optimiser)."""
from __future__ import annotations

import math
import time

import torch
import torch.nn.functional as F


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


def make_optimizer(params, lr):
    """AdamW with weight decay 0.1 on matrices and none on norms and biases."""
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95))


def autocast_for(device: torch.device):
    """bf16 autocast on a GPU; on a CPU everything stays float32."""
    return torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else torch.autocast(
        "cpu", enabled=False)


def progress_note(start: float, step: int, steps: int) -> str:
    """``step i/n, elapsed, ~left`` for the log."""
    elapsed = time.time() - start
    return f"step {step}/{steps}, {elapsed / 60:.1f} min, ~{elapsed / step * (steps - step) / 60:.1f} min left"


def set_lr(opt, lr: float) -> None:
    for group in opt.param_groups:
        group["lr"] = lr


def clipped_step(opt, model, loss) -> None:
    """One optimiser step with gradients clipped to norm 1."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()


def train_target(model, data, *, steps, seq_len, batch_size, lr, seed, device, log):
    """Next-token cross-entropy for ``steps`` steps (warm-up + cosine schedule over them)."""
    model.to(device).train()
    opt = make_optimizer(list(model.parameters()), lr)
    stream = batches(data, seq_len, batch_size, seed)
    start, tokens = time.time(), 0
    for step in range(1, steps + 1):
        progress = (step - 1) / steps  # the fraction of the schedule done before this step
        set_lr(opt, lr_at(progress, lr))
        batch = next(stream).to(device)
        with autocast_for(device):
            logits = model(input_ids=batch[:, :-1]).logits
        loss = F.cross_entropy(logits.float().flatten(0, 1), batch[:, 1:].flatten())
        clipped_step(opt, model, loss)
        tokens += batch[:, 1:].numel()
        if step % 50 == 0 or step == 1:
            log(f"target loss {loss.item():.3f} lr {opt.param_groups[0]['lr']:.2e} "
                f"{tokens / (time.time() - start):.0f} tok/s ({progress_note(start, step, steps)})")
    return {"steps": steps, "tokens": tokens, "seconds": round(time.time() - start, 1)}
