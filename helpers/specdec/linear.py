"""Speculative decoding (Chen et al. 2023, Algorithm 2) and the autoregressive baseline it is measured against.

Notation follows the paper: the *target* distribution is q, the *draft* distribution is p (the reverse of
Leviathan et al.). Both generators take transformers causal LMs and one prompt of shape (1, prompt_len).

What keeps the speculative path fast (DESIGN.md, "what fast means here"):

* Both models keep a KV cache for the whole generation. After a round the caches are rolled back by length
  — nothing is recomputed. The cache and the forward come from :mod:`helpers.models.runtime`: the minimal
  Qwen3 decoder with a preallocated cache where it applies (less per-call overhead, which matters most for
  the small draft), else transformers' forward with a ``DynamicCache`` (``runtime=`` chooses).
* The target sees the pending token and all gamma drafts in ONE forward: gamma + 1 positions, the last one
  giving the bonus token when every draft is accepted.
* Acceptance is computed on the device with tensor ops (:func:`helpers.specdec.core.accept`); the round ends with
  ONE host sync (a single ``tolist()``) that returns the number accepted, the drafts and the next token together.
* Cache invariant: the target cache holds every committed token but the last ("pending") one; the draft
  cache lags by the tokens in ``draft_pending``. When every draft is accepted the draft never saw the last
  draft token, so it is fed together with the pending token in the next round's first draft forward (the
  catch-up token) — one forward of two tokens instead of an extra forward.

A round reads as the paper's algorithm: :func:`draft_chain` (γ draft forwards), :func:`verify_chain` (one target
forward), :func:`accept_chain` (the acceptance test and the round's host sync), then :func:`commit_chain` (roll both
caches back to what was accepted).
The autoregressive baseline uses the same runtime and cache discipline (one token per forward, last logits
only) so that the comparison measures speculation, not implementation quality.
"""
from __future__ import annotations

import torch

from helpers.models.runtime import cached_decoder, resolve_runtime
from helpers.specdec.core import (GenerationResult, GenerationStats, PhaseClock, accept, check_draft,
                                  check_generation, eos_ids, finish_row, make_generator, sample)

__all__ = ["GenerationResult", "GenerationStats", "accept_greedy", "accept_sampling", "autoregressive_generate",
           "accept_chain", "commit_chain", "draft_chain", "prefill_pair", "speculative_generate", "verify_chain"]


# ----------------------------------------------------------------------------------------------------------
# the autoregressive baseline


@torch.inference_mode()
def autoregressive_generate(
    model,
    input_ids: torch.Tensor,
    max_new_tokens: int,
    temperature: float = 0.0,
    seed: int | None = None,
    *,
    eos_token_id: int | list[int] | None = None,
    runtime: str = "auto",
    compile: bool | str = False,
) -> GenerationResult:
    """Plain decoding with a KV cache: one target forward per new token (greedy when temperature == 0)."""
    check_generation(model, input_ids, max_new_tokens, temperature)
    eos, generator = eos_ids(model, eos_token_id), make_generator(seed, input_ids.device)
    stats = GenerationStats(runtime=resolve_runtime(runtime, model), compiled=compile)
    clock = PhaseClock(input_ids.device, sync_phases=False)

    decoder = cached_decoder(model, stats.runtime, input_ids.shape[1] + max_new_tokens, compile=compile)
    logits = decoder.extend(input_ids)[:, -1]
    stats.target_forwards += 1
    stats.time_prefill_s = clock.total()

    tokens: list[int] = []
    while True:
        next_token, _ = sample(logits, temperature, generator)
        # the one host sync per token: EOS decides whether to go on
        if finish_row(tokens, [next_token.item()], max_new_tokens, eos):
            break
        clock.mark()
        logits = decoder.extend(next_token)[:, -1]
        stats.target_forwards += 1
        stats.time_verify_s += clock.lap()  # "verify" = target forwards, for a like-for-like split

    stats.time_total_s = clock.total()
    stats.new_tokens = stats.rounds = len(tokens)
    return GenerationResult(torch.tensor(tokens, dtype=torch.long), stats.finish())


# ----------------------------------------------------------------------------------------------------------
# speculative decoding, one round at a time


def accept_greedy(target_logits: torch.Tensor, drafts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`~helpers.specdec.core.accept` for one prompt at temperature 0: target_logits (γ+1, V), drafts (γ,)
    -> (k, next_token) as 0-d tensors."""
    k, next_token = accept(target_logits[None], drafts[None])
    return k[0], next_token[0]


def accept_sampling(target_logits: torch.Tensor, draft_probs: torch.Tensor, drafts: torch.Tensor,
                    temperature: float, generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`~helpers.specdec.core.accept` for one prompt when sampling: target_logits (γ+1, V), draft_probs
    (γ, V), drafts (γ,) -> (k, next_token) as 0-d tensors."""
    k, next_token = accept(target_logits[None], drafts[None], draft_probs[None], temperature, generator)
    return k[0], next_token[0]


def draft_chain(draft_cache, draft_pending: torch.Tensor, gamma: int, temperature: float, generator=None,
                stop_below: float | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Algorithm 2's inner loop: up to ``gamma`` draft tokens, one draft forward each (the first forward also feeds
    the catch-up token). Returns the drafts (1, γ_r) and, when sampling, their distributions (1, γ_r, V).

    ``stop_below`` (adaptive lookahead) ends the chain after a token the draft gives less probability than this
    (greedy: its softmax maximum at temperature 1; sampling: p(d)); that token is still proposed."""
    drafts, distributions = [], []
    token = draft_pending
    for step in range(gamma):
        logits = draft_cache.extend(token)[:, -1]
        token, distribution = sample(logits, temperature, generator)
        drafts.append(token)
        distributions.append(distribution)
        if stop_below is not None and step + 1 < gamma:  # one host read per step, only when adaptive
            confidence = (torch.softmax(logits.float(), dim=-1).amax() if temperature == 0
                          else distribution[0, token[0, 0]])
            if confidence.item() < stop_below:
                break
    if not drafts:
        return draft_pending.new_empty(1, 0), None
    return torch.cat(drafts, dim=1), None if temperature == 0 else torch.stack(distributions, dim=1)


def verify_chain(target_cache, pending: torch.Tensor, drafts: torch.Tensor) -> torch.Tensor:
    """ONE target forward over the pending token and the drafts: the logits (1, γ+1, V) the acceptance test reads.
    Without drafts this is a plain decode step (``last_only``, as the autoregressive baseline calls it)."""
    return target_cache.extend(torch.cat([pending, drafts], dim=1), last_only=drafts.shape[1] == 0)


def accept_chain(target_logits: torch.Tensor, drafts: torch.Tensor, draft_probs: torch.Tensor | None,
                 temperature: float, generator=None) -> tuple[int, list[int], torch.Tensor]:
    """The acceptance test and the round's one host sync: (accepted drafts, the tokens the round emits, the next
    token as a (1, 1) device tensor)."""
    if temperature > 0 and draft_probs is None:  # no drafts this round
        draft_probs = target_logits.new_empty(1, 0, target_logits.shape[-1])
    k, next_token = accept(target_logits, drafts, draft_probs, temperature, generator)
    host = torch.cat([k, drafts[0], next_token]).tolist()
    accepted = host[0]
    return accepted, host[1:1 + accepted] + [host[-1]], next_token.view(1, 1)


def commit_chain(target_cache, draft_cache, drafts: torch.Tensor, accepted: int, next_token: torch.Tensor,
                 draft_pending: torch.Tensor) -> torch.Tensor:
    """Keep what was accepted in both caches; return the tokens the draft cache still has to see."""
    drafted = drafts.shape[1]
    target_cache.rollback(drafted - accepted)  # it saw pending + γ_r drafts, keeps pending + the accepted ones
    if drafted == 0:
        return torch.cat([draft_pending, next_token], dim=1)
    if accepted < drafted:  # the draft saw draft_pending + d1..d(γ_r - 1)
        draft_cache.rollback(drafted - 1 - accepted)
        return next_token
    return torch.cat([drafts[:, -1:], next_token], dim=1)  # all accepted: the last draft is the catch-up token


def _check_options(gamma, stop_below) -> None:
    if isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 1:
        raise ValueError(f"gamma (draft tokens per round) must be an int >= 1, got {gamma!r}")
    if stop_below is not None and (isinstance(stop_below, bool) or not isinstance(stop_below, (int, float))
                                   or not 0 <= stop_below <= 1):
        raise ValueError(f"stop_below (the draft probability below which a round stops drafting) must be None or a "
                         f"number in [0, 1], got {stop_below!r}")


def prefill_pair(target_cache, draft_cache, input_ids: torch.Tensor, stats: GenerationStats) -> torch.Tensor:
    """Prefill both caches with all but the last prompt token, which becomes round 1's pending token (Algorithm 2
    verifies the pending token's position together with the drafts). Returns the pending token (1, 1)."""
    if input_ids.shape[1] > 1:
        context = input_ids[:, :-1]
        target_cache.extend(context)
        stats.target_forwards += 1
        if draft_cache is not None:
            draft_cache.extend(context)
            stats.draft_forwards += 1
    return input_ids[:, -1:]


@torch.inference_mode()
def speculative_generate(
    target,
    draft,
    input_ids: torch.Tensor,
    max_new_tokens: int,
    gamma: int,
    temperature: float = 0.0,
    seed: int | None = None,
    *,
    eos_token_id: int | list[int] | None = None,
    time_phases: bool = True,
    runtime: str = "auto",
    compile: bool | str = False,
    stop_below: float | None = None,
) -> GenerationResult:
    """Speculative decoding with γ drafts per round; exact greedy output at temperature 0, target samples above.

    ``time_phases`` splits wall time into draft / verify / rest; on CUDA that needs a synchronize at each
    phase boundary, so pass False for headline GPU throughput (on the CPU it costs nothing). ``runtime``:
    see :mod:`helpers.models.runtime` (both models use the same one). ``compile``: decode steps through
    ``torch.compile`` (True) or explicit CUDA graphs ("graphs") over static-shape caches (minimal runtime).

    ``stop_below`` (adaptive lookahead, dynamic γ): a round stops drafting as soon as the draft's probability of
    the token it has just drafted is below this threshold (:func:`draft_chain`). ``gamma`` stays the most drafts
    per round and ``stats.gamma_per_round`` records the actual counts. The rule looks only at the draft's own
    values, so the output stays exact (greedy) and distributed as the target's (sampling). It costs one host read
    per draft step; None (the default) keeps the fixed-γ path, which has none.
    """
    check_generation(target, input_ids, max_new_tokens, temperature)
    check_draft(target, draft)
    _check_options(gamma, stop_below)
    eos, generator = eos_ids(target, eos_token_id), make_generator(seed, input_ids.device)
    stats = GenerationStats(runtime=resolve_runtime(runtime, target, draft), compiled=compile)
    clock = PhaseClock(input_ids.device, time_phases)
    # never more than prompt + max_new_tokens tokens in a cache: a round drafts at most the tokens still due
    capacity = input_ids.shape[1] + max_new_tokens
    target_cache = cached_decoder(target, stats.runtime, capacity, compile=compile)
    draft_cache = cached_decoder(draft, stats.runtime, capacity, compile=compile)
    pending = draft_pending = prefill_pair(target_cache, draft_cache, input_ids, stats)
    stats.time_prefill_s = clock.lap()

    tokens: list[int] = []
    while True:
        # never draft past the budget: the round also emits one token from the target
        clock.mark()
        drafts, draft_probs = draft_chain(draft_cache, draft_pending, min(gamma, max_new_tokens - len(tokens) - 1),
                                          temperature, generator, stop_below)
        stats.draft_forwards += drafts.shape[1]
        stats.time_draft_s += clock.lap()
        logits = verify_chain(target_cache, pending, drafts)
        stats.target_forwards += 1
        stats.time_verify_s += clock.lap()
        accepted, emitted, pending = accept_chain(logits, drafts, draft_probs, temperature, generator)
        draft_pending = commit_chain(target_cache, draft_cache, drafts, accepted, pending, draft_pending)
        stats.record_round(accepted, drafts.shape[1])
        if finish_row(tokens, emitted, max_new_tokens, eos):
            break

    stats.time_total_s = clock.now() - clock.start
    stats.new_tokens = len(tokens)
    return GenerationResult(torch.tensor(tokens, dtype=torch.long), stats.finish())
