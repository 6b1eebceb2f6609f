"""Batched greedy speculative decoding (B > 1) and the batched autoregressive baseline it is compared with.

The difficulty with a batch is that every row accepts a different number of drafts per round, so the rows'
sequences (and KV caches) grow by different amounts, while a cache is one rectangular tensor per layer.

Design: both models decode through :mod:`helpers.models.runtime`, whose caches hold *ragged rows*: prompts
are left-padded (the padding is masked out), every row keeps its own fill level and positions, so RoPE sees
each row exactly as if it were alone. After verification, row b keeps only the tokens it committed: a per-row
rollback by length (the model file's static cache lowers each row's fill level; the transformers adapter
crops what all rows rejected and masks the rest out). Rows that finish (EOS or max_new_tokens) are removed
from the batch, so they cost nothing afterwards.

Invariants between rounds, with N_b the number of tokens row b has committed (prompt + generated):
the target cache holds the first N_b - 1 tokens and the draft cache the first N_b - 2. A round then feeds
the draft the last two committed tokens (one of them is the "catch-up" token: the last accepted draft, or
the token before a correction, whose draft KV is missing or stale) and the target the last committed token
plus the gamma drafts, so every row feeds the same number of tokens and no inner padding is ever needed.
This is why prompts need at least two tokens.

What is guaranteed: in exact arithmetic each row's output is that row's own greedy (argmax) continuation
under the target model, token for token, whatever the other rows do. In floating point, a padded batched
forward may differ from the single-sequence forward by rounding (different reduction shapes), which can flip
an argmax at a near-tie; the tests therefore check equality in float64 (and fp32 on well-separated logits).
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from helpers.models.runtime import cached_decoder, resolve_runtime
from helpers.timing import sync


@dataclass
class BatchedGeneration:
    """Generated tokens per row (prompt excluded, cut after EOS or at max_new_tokens) and run statistics."""

    tokens: list[list[int]]
    stats: dict = field(default_factory=dict)


class RaggedBatch:
    """A cached decoder (:func:`helpers.models.runtime.cached_decoder`) over ragged rows, plus ``lengths``."""

    def __init__(self, model, runtime: str, batch_size: int, capacity: int):
        self.decoder = cached_decoder(model, runtime, capacity, batch_size)
        self.device = next(model.parameters()).device

    @property
    def lengths(self) -> torch.Tensor:
        return torch.tensor(self.decoder.lengths, device=self.device)

    def prefill(self, rows: Sequence[Sequence[int]]) -> None:
        """Fill the cache with one token list per row (left-padded; a row may be empty)."""
        width = max(len(row) for row in rows)
        if width == 0:
            return
        ids = torch.zeros(len(rows), width, dtype=torch.long, device=self.device)
        mask = torch.zeros(len(rows), width, dtype=torch.long, device=self.device)
        for b, row in enumerate(rows):
            if row:
                ids[b, width - len(row):] = torch.as_tensor(row, device=self.device)
                mask[b, width - len(row):] = 1
        self.decoder.extend(ids, last_only=True, attention_mask=mask)

    def extend(self, ids: torch.Tensor, logits_to_keep: int = 0) -> torch.Tensor:
        """Append ``ids`` (B, q) to every row, each at its own positions; return the logits (B, q or 1, V)."""
        return self.decoder.extend(ids, last_only=logits_to_keep == 1)

    def keep(self, keep_lengths: torch.Tensor, rows: torch.Tensor | None = None) -> None:
        """Per-row rollback: row b keeps its first ``keep_lengths[b]`` cached tokens; with ``rows``, only
        those rows stay in the batch (``keep_lengths`` is then given for the kept rows)."""
        if rows is not None:
            self.decoder.select_rows(rows.tolist())
        self.decoder.rollback([n - k for n, k in zip(self.decoder.lengths, keep_lengths.tolist())])


def _check_prompts(prompts, max_new_tokens: int, min_length: int) -> list[list[int]]:
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    rows = [torch.as_tensor(p).reshape(-1).tolist() for p in prompts]
    if not rows:
        raise ValueError("no prompts given: pass a list of token-id sequences, one per batch row")
    if min(len(r) for r in rows) < min_length:
        raise ValueError(f"every prompt needs at least {min_length} tokens (prepend a BOS token to shorter ones)")
    return rows


def _prefill_seconds(device: torch.device, start: float) -> float:
    """Seconds since ``start``, after the device finished its queued work (so decode time can be told apart)."""
    sync(device)
    return time.perf_counter() - start


def _phase_clock(device: torch.device, enabled: bool):
    """A clock for phase timing: perf_counter after the device's queued work (0.0 when timing is off)."""
    if not enabled:
        return lambda: 0.0
    if device.type == "cuda":
        return lambda: (sync(device), time.perf_counter())[1]
    return time.perf_counter


def _add_phase(phases: dict, name: str, mark: float, clock) -> float:
    """Add the seconds since ``mark`` to ``phases[name]``; return the new mark."""
    now = clock()
    phases[name] += now - mark
    return now


def _finish(generated: list[int], new_tokens: list[int], max_new_tokens: int, eos_token_id) -> bool:
    """Append ``new_tokens``, cut at EOS or at max_new_tokens; True when the row is done."""
    for token in new_tokens:
        generated.append(token)
        if token == eos_token_id or len(generated) >= max_new_tokens:
            return True
    return False


@torch.inference_mode()
def batched_autoregressive_generate(model, prompts, max_new_tokens: int, eos_token_id: int | None = None, *,
                                    runtime: str = "auto") -> BatchedGeneration:
    """Greedy decoding of a batch of prompts (different lengths allowed), one target forward per token."""
    rows = _check_prompts(prompts, max_new_tokens, min_length=1)
    device = next(model.parameters()).device
    generated: list[list[int]] = [[] for _ in rows]
    active = [b for b in range(len(rows)) if max_new_tokens > 0]
    start = time.perf_counter()
    runtime = resolve_runtime(runtime, model)
    cache = RaggedBatch(model, runtime, len(rows), max(map(len, rows)) + max_new_tokens)
    cache.prefill([r[:-1] for r in rows])
    prefill_seconds = _prefill_seconds(device, start)
    last = torch.tensor([[r[-1]] for r in rows], device=device)
    steps = 0
    while active:
        next_tokens = cache.extend(last, logits_to_keep=1)[:, -1].argmax(dim=-1)
        steps += 1
        still = [i for i, (b, t) in enumerate(zip(active, next_tokens.tolist()))
                 if not _finish(generated[b], [t], max_new_tokens, eos_token_id)]
        if not still:
            break
        if len(still) < len(active):
            keep_rows = torch.tensor(still, dtype=torch.long, device=device)
            cache.keep(cache.lengths[keep_rows], rows=keep_rows)
            active, next_tokens = [active[i] for i in still], next_tokens[keep_rows]
        last = next_tokens[:, None]
    return BatchedGeneration(generated, {"steps": steps, "target_forwards": steps, "prefill_seconds": prefill_seconds,
                                        "runtime": runtime})


@torch.inference_mode()
def batched_speculative_generate(target, draft, prompts, max_new_tokens: int, gamma: int,
                                 eos_token_id: int | None = None, *, time_phases: bool = False,
                                 runtime: str = "auto") -> BatchedGeneration:
    """Greedy speculative decoding of a batch of prompts with per-row acceptance and per-row rollback.

    Each round: gamma draft forwards (the first feeds two tokens per row), ONE target forward verifying
    gamma + 1 positions per row, one host sync for the accepted counts. Row b accepts the longest prefix of
    its drafts that matches the target's argmax and then takes the target's own next token.
    ``stats["accepted"][b]`` lists row b's accepted drafts per round (for ``specdec_model.estimate_alpha``).

    With ``time_phases``, ``stats["phase_seconds"]`` splits the decode time into ``draft`` (the gamma draft
    forwards), ``verify`` (the target forward, the acceptance test and its host sync), ``bookkeeping`` (committing
    tokens, stopping rules) and ``rollback`` (the per-row cache ``keep`` of both models, dropping finished rows).
    On a GPU each boundary adds a synchronize, so time phases in a run that is not itself the timed one.
    """
    if gamma < 1:
        raise ValueError(f"gamma (draft tokens per round) must be >= 1, got {gamma}")
    rows = _check_prompts(prompts, max_new_tokens, min_length=2)
    device = next(target.parameters()).device
    sequences = [list(r) for r in rows]
    generated: list[list[int]] = [[] for _ in rows]
    accepted: list[list[int]] = [[] for _ in rows]
    active = [b for b in range(len(rows)) if max_new_tokens > 0]
    start = time.perf_counter()
    runtime = resolve_runtime(runtime, target, draft)
    capacity = max(map(len, rows)) + max_new_tokens + gamma + 1
    target_cache = RaggedBatch(target, runtime, len(rows), capacity)
    draft_cache = RaggedBatch(draft, runtime, len(rows), capacity)
    target_cache.prefill([r[:-1] for r in rows])
    draft_cache.prefill([r[:-2] for r in rows])
    prefill_seconds = _prefill_seconds(device, start)
    rounds = 0
    phases = dict.fromkeys(("draft", "verify", "bookkeeping", "rollback"), 0.0)
    clock = _phase_clock(device, time_phases)
    while active:
        mark = clock()
        tails = torch.tensor([sequences[b][-2:] for b in active], device=device)
        drafts = []
        logits = draft_cache.extend(tails, logits_to_keep=1)
        for i in range(gamma):
            drafts.append(logits[:, -1].argmax(dim=-1))
            if i + 1 < gamma:
                logits = draft_cache.extend(drafts[-1][:, None], logits_to_keep=1)
        drafts = torch.stack(drafts, dim=1)  # (B, gamma)
        mark = _add_phase(phases, "draft", mark, clock)
        verify_logits = target_cache.extend(torch.cat([tails[:, 1:], drafts], dim=1))
        choices = verify_logits.argmax(dim=-1)  # (B, gamma + 1): the target's token after each prefix
        n_accepted = (drafts == choices[:, :-1]).long().cumprod(dim=1).sum(dim=1)
        rounds += 1
        host = torch.cat([n_accepted[:, None], choices], dim=1).tolist()  # the round's one host sync
        mark = _add_phase(phases, "verify", mark, clock)
        still = []
        for i, (b, (n, *choice)) in enumerate(zip(active, host)):
            new_tokens = choice[: n + 1]  # accepted drafts equal the target's choices, then one more
            accepted[b].append(n)
            sequences[b].extend(new_tokens)
            if not _finish(generated[b], new_tokens, max_new_tokens, eos_token_id):
                still.append(i)
        mark = _add_phase(phases, "bookkeeping", mark, clock)
        if not still:
            break
        keep_rows = torch.tensor(still, dtype=torch.long, device=device)
        committed = torch.tensor([len(sequences[active[i]]) for i in still], device=device)
        target_cache.keep(committed - 1, rows=keep_rows)
        draft_cache.keep(committed - 2, rows=keep_rows)
        active = [active[i] for i in still]
        _add_phase(phases, "rollback", mark, clock)
    per_round = [n for row in accepted for n in row]
    stats = {
        "rounds": rounds,
        "target_forwards": rounds,
        "draft_forwards": rounds * gamma,
        "accepted": accepted,
        "mean_accepted_per_round": sum(per_round) / len(per_round) if per_round else 0.0,
        "gamma": gamma,
        "prefill_seconds": prefill_seconds,
        "runtime": runtime,
    }
    if time_phases:
        stats["phase_seconds"] = phases
    return BatchedGeneration(generated, stats)
