"""Batched speculative decoding (B > 1), greedy or sampled, and the batched autoregressive baseline it is
compared with.

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
The first round alone starts from N_b - 1 in both caches and feeds the draft the last prompt token, so that a
one-token prompt needs no token before it.

What is guaranteed: in exact arithmetic each row's output is that row's own greedy (argmax) continuation
under the target model, token for token, whatever the other rows do. In floating point, a padded batched
forward may differ from the single-sequence forward by rounding (different reduction shapes), which can flip
an argmax at a near-tie; the tests therefore check equality in float64 (and fp32 on well-separated logits).
Sampled (temperature > 0), each row's tokens follow the target's distribution, as a single sequence's do (the
same acceptance test per row, its own residual draw at its first rejection; tested statistically).
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from helpers.models.runtime import cached_decoder, resolve_runtime
from helpers.specdec.core import PhaseClock, accept, finish_row, sample, vocab_size
from helpers.timing import sync


@dataclass(frozen=True)
class BatchedStats:
    """What one batched run did. ``target_forwards``: decode steps of AR, rounds of speculative decoding (each one
    target forward); ``accepted[b]``: row b's accepted drafts per round (for ``specdec.analysis.estimate_alpha``);
    ``phase_seconds``: the decode time by phase where the run was asked to time them."""

    target_forwards: int
    prefill_seconds: float
    runtime: str
    gamma: int = 0
    draft_forwards: int = 0
    accepted: list[list[int]] = field(default_factory=list)
    phase_seconds: dict | None = None

    @property
    def rounds(self) -> int:
        """Speculative rounds (for AR: decode steps)."""
        return self.target_forwards

    steps = rounds

    @property
    def mean_accepted_per_round(self) -> float:
        """Accepted drafts per row-round (0 for AR, which drafts nothing)."""
        per_round = [n for row in self.accepted for n in row]
        return sum(per_round) / len(per_round) if per_round else 0.0


@dataclass
class BatchedGeneration:
    """Generated tokens per row (prompt excluded, cut after EOS or at max_new_tokens) and run statistics."""

    tokens: list[list[int]]
    stats: BatchedStats


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


def _check_prompts(model, prompts, max_new_tokens: int) -> list[list[int]]:
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
    rows = [torch.as_tensor(p).reshape(-1) for p in prompts]
    if not rows:
        raise ValueError("no prompts given: pass a list of token-id sequences, one per batch row")
    if any(row.numel() == 0 for row in rows):
        raise ValueError("an empty prompt: every prompt needs at least one token (a BOS token, if nothing else)")
    if any(row.is_floating_point() or row.dtype == torch.bool for row in rows):
        raise ValueError("prompts must hold integer token ids; cast them with .long() or pass lists of ints")
    rows = [row.tolist() for row in rows]
    vocab = vocab_size(model)
    bad = [t for r in rows for t in r if not 0 <= t < vocab]
    if bad:
        raise ValueError(f"a prompt holds token id {bad[0]}, outside the model's vocabulary of {vocab} ids "
                         f"(0..{vocab - 1}): encode the prompts with this model's tokenizer")
    return rows


def decode_batch(step, retain, pending: torch.Tensor, max_new_tokens: int, eos: set[int], temperature: float = 0.0,
                 generator=None, on_step=None) -> tuple[list[list[int]], int]:
    """Batched autoregressive decoding: the one loop behind every batched baseline.

    ``step(tokens)`` feeds each active row's last token (rows, 1) and returns the next-token logits (rows, V);
    ``retain(still)`` drops the finished rows from the cache and returns the kept rows' new order (``order[i]`` =
    the old index of the row now at ``i``); ``on_step(rows, seconds)`` hears about every step. Returns the new
    tokens per row (cut after EOS or at ``max_new_tokens``) and the number of steps.
    """
    generated: list[list[int]] = [[] for _ in range(pending.shape[0])]
    active, token, steps = list(range(pending.shape[0])), pending, 0
    while active and max_new_tokens > 0:
        tick = time.perf_counter()
        token, _ = sample(step(token), temperature, generator)
        steps += 1
        rows = len(active)
        still = [i for i, (b, t) in enumerate(zip(active, token[:, 0].tolist()))
                 if not finish_row(generated[b], [t], max_new_tokens, eos)]
        if not still:
            active = []
        elif len(still) < rows:
            order = retain(still)
            active, token = [active[i] for i in order], token[torch.tensor(order, device=token.device)]
        if on_step is not None:
            on_step(rows, time.perf_counter() - tick)
    return generated, steps


@torch.inference_mode()
def batched_autoregressive_generate(model, prompts, max_new_tokens: int, eos_token_id: int | None = None, *,
                                    runtime: str = "auto") -> BatchedGeneration:
    """Greedy decoding of a batch of prompts (different lengths allowed), one target forward per token."""
    rows = _check_prompts(model, prompts, max_new_tokens)
    device = next(model.parameters()).device
    start = time.perf_counter()
    runtime = resolve_runtime(runtime, model)
    cache = RaggedBatch(model, runtime, len(rows), max(map(len, rows)) + max_new_tokens)
    cache.prefill([r[:-1] for r in rows])
    sync(device)
    prefill_seconds = time.perf_counter() - start

    def retain(still: list[int]) -> list[int]:
        keep_rows = torch.tensor(still, dtype=torch.long, device=device)
        cache.keep(cache.lengths[keep_rows], rows=keep_rows)
        return still

    generated, steps = decode_batch(lambda tokens: cache.extend(tokens, logits_to_keep=1)[:, -1], retain,
                                    torch.tensor([[r[-1]] for r in rows], device=device), max_new_tokens,
                                    set() if eos_token_id is None else {eos_token_id})
    return BatchedGeneration(generated, BatchedStats(steps, prefill_seconds, runtime))


def _draft_rows(draft_cache: RaggedBatch, tails: torch.Tensor, gamma: int, temperature: float = 0.0,
                generator=None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """γ draft tokens per row (B, γ), greedy or drawn at ``temperature``, and the distributions they were drawn from
    (B, γ, V; None when greedy); the first forward feeds ``tails``, each row's committed tokens the draft lacks."""
    drafts, distributions = [], []
    logits = draft_cache.extend(tails, logits_to_keep=1)
    for i in range(gamma):
        token, distribution = sample(logits[:, -1], temperature, generator)
        drafts.append(token[:, 0])
        distributions.append(distribution)
        if i + 1 < gamma:
            logits = draft_cache.extend(token, logits_to_keep=1)
    return torch.stack(drafts, dim=1), None if temperature == 0 else torch.stack(distributions, dim=1)


@torch.inference_mode()
def batched_speculative_generate(target, draft, prompts, max_new_tokens: int, gamma: int,
                                 eos_token_id: int | None = None, *, temperature: float = 0.0,
                                 seed: int | None = None, time_phases: bool = False,
                                 runtime: str = "auto") -> BatchedGeneration:
    """Speculative decoding of a batch of prompts with per-row acceptance and per-row rollback.

    Each round: gamma draft forwards (the first feeds two tokens per row, one in round one), ONE target forward
    verifying gamma + 1 positions per row, one host sync for the accepted counts. Each row runs Algorithm 2's test on its
    own drafts (:func:`helpers.specdec.core.accept`): greedy (``temperature`` 0), it accepts the longest prefix
    that matches the target's argmax and takes the target's own next token; sampling, it keeps draft i with
    probability min(1, q/p) and draws its next token from norm(max(0, q - p)) at its first rejection, so that
    every row's tokens follow the target's distribution at ``temperature`` (``seed`` fixes the draws).
    ``stats.accepted[b]`` lists row b's accepted drafts per round (for ``specdec.analysis.estimate_alpha``).

    With ``time_phases``, ``stats.phase_seconds`` splits the decode time into ``draft`` (the gamma draft
    forwards), ``verify`` (the target forward, the acceptance test and its host sync), ``bookkeeping`` (committing
    tokens, stopping rules) and ``rollback`` (the per-row cache ``keep`` of both models, dropping finished rows).
    On a GPU each boundary adds a synchronize, so time phases in a run that is not itself the timed one.
    """
    if isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 1:
        raise ValueError(f"gamma (draft tokens per round) must be an int >= 1, got {gamma!r}")
    if not temperature >= 0:
        raise ValueError(f"temperature must be >= 0 (0: greedy), got {temperature!r}")
    rows = _check_prompts(target, prompts, max_new_tokens)
    device = next(target.parameters()).device
    generator = None if seed is None else torch.Generator(device=device).manual_seed(seed)
    eos = set() if eos_token_id is None else {eos_token_id}
    sequences, generated = [list(r) for r in rows], [[] for _ in rows]
    accepted: list[list[int]] = [[] for _ in rows]
    active = [b for b in range(len(rows)) if max_new_tokens > 0]
    start = time.perf_counter()
    runtime = resolve_runtime(runtime, target, draft)
    capacity = max(map(len, rows)) + max_new_tokens + gamma + 1
    target_cache = RaggedBatch(target, runtime, len(rows), capacity)
    draft_cache = RaggedBatch(draft, runtime, len(rows), capacity)
    target_cache.prefill([r[:-1] for r in rows])
    draft_cache.prefill([r[:-1] for r in rows])  # round one feeds the last prompt token; later rounds two
    sync(device)
    prefill_seconds, rounds = time.perf_counter() - start, 0
    phases = dict.fromkeys(("draft", "verify", "bookkeeping", "rollback"), 0.0)
    clock = PhaseClock(device, sync_phases=time_phases and device.type == "cuda")
    while active:
        clock.mark()
        tails = torch.tensor([sequences[b][-(2 if rounds else 1):] for b in active], device=device)
        drafts, draft_probs = _draft_rows(draft_cache, tails, gamma, temperature, generator)
        phases["draft"] += clock.lap()
        n_accepted, next_tokens = accept(target_cache.extend(torch.cat([tails[:, -1:], drafts], dim=1)), drafts,
                                         draft_probs, temperature, generator)
        rounds += 1
        host = torch.cat([n_accepted[:, None], drafts, next_tokens[:, None]], dim=1).tolist()  # the one host sync
        phases["verify"] += clock.lap()
        still = []
        for i, (b, (n, *row)) in enumerate(zip(active, host)):
            new_tokens = row[:n] + [row[-1]]  # the accepted drafts, then the target's next token
            accepted[b].append(n)
            sequences[b].extend(new_tokens)
            if not finish_row(generated[b], new_tokens, max_new_tokens, eos):
                still.append(i)
        phases["bookkeeping"] += clock.lap()
        if not still:
            break
        keep_rows = torch.tensor(still, dtype=torch.long, device=device)
        committed = torch.tensor([len(sequences[active[i]]) for i in still], device=device)
        target_cache.keep(committed - 1, rows=keep_rows)
        draft_cache.keep(committed - 2, rows=keep_rows)
        active = [active[i] for i in still]
        phases["rollback"] += clock.lap()
    return BatchedGeneration(generated, BatchedStats(rounds, prefill_seconds, runtime, gamma, rounds * gamma, accepted,
                                                     phases if time_phases else None))
