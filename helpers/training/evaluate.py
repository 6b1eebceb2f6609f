"""Stage 4: what the card reports of each saved model: held-out loss, decode cost and greedy agreement."""
from __future__ import annotations

import time
from pathlib import Path

import torch
import torch.nn.functional as F

from helpers.kv_cache import generate
from helpers.models import describe
from helpers.models.decoder import from_hf
from helpers.models.runtime import cached_decoder
from helpers.training.checkpoints import load_saved


def heldout_windows(data: torch.Tensor, seq_len: int, count: int) -> torch.Tensor:
    """``count`` evenly spaced windows of ``seq_len + 1`` tokens (deterministic)."""
    starts = torch.linspace(0, len(data) - seq_len - 2, count).long()
    return torch.stack([data[s:s + seq_len + 1] for s in starts.tolist()]).long()


@torch.no_grad()
def heldout_loss(model, windows: torch.Tensor, batch_size: int = 8) -> float:
    """Mean next-token cross-entropy (nats per token) over ``windows``."""
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
