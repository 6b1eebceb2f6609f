"""The one chain verifier: every method that proposes a chain of draft tokens (a draft model, prompt lookup, Medusa
heads, a feature-level draft) is a :class:`Drafter`, and :func:`generate_chain` runs its rounds.

A round, Algorithm 2 of Chen et al. (2023):

1. ``drafter.propose``: up to γ draft tokens after the pending token, and (sampling) the distributions they were
   drawn from;
2. :func:`verify_chain`: ONE target forward over [pending, d1..dγ];
3. :func:`accept_chain`: the acceptance test (:func:`helpers.specdec.core.accept`) and the round's one host sync;
4. commit: the target cache rolls back to what was accepted, and ``drafter.commit`` keeps the drafter in step.

Cache invariant: the target cache holds every committed token but the last ("pending") one, so the pending token's
position is verified together with the drafts. A drafter that reads the target's hidden states (``needs_hidden``)
gets those of the verify forward: nothing is recomputed for it.
"""
from __future__ import annotations

import torch

from helpers.models.runtime import cached_decoder
from helpers.specdec.core import (GenerationResult, GenerationStats, PhaseClock, accept, check_generation, eos_ids,
                                  finish_row, make_generator)

__all__ = ["Drafter", "accept_chain", "generate_chain", "prefill_target", "verify_chain"]


class Drafter:
    """What the chain verifier needs from a drafting method (a base class: override what applies).

    ``start`` sees the prompt before round 1 (the target has then cached all but its last token);
    ``propose`` returns at most ``limit`` draft tokens after ``pending`` as a (1, γ) tensor, with their draft
    distributions (1, γ, V) when sampling (None when greedy); ``commit`` hears what the target kept: the round's
    drafts, how many were accepted, the next token (1, 1), the tokens the round emitted (host ints: the accepted
    drafts and the next token) and, for a drafter with ``needs_hidden``, the target's hidden states at
    [pending, d1..dγ] (1, γ+1, H). ``forwards`` counts the drafter's model forwards.
    """

    needs_hidden = False
    forwards = 0

    def start(self, input_ids: torch.Tensor, capacity: int, hidden: torch.Tensor | None = None) -> None:
        pass

    def propose(self, pending: torch.Tensor, limit: int, temperature: float,
                generator=None) -> tuple[torch.Tensor, torch.Tensor | None]:
        raise NotImplementedError

    def commit(self, drafts: torch.Tensor, accepted: int, next_token: torch.Tensor, emitted: list[int],
               hidden: torch.Tensor | None = None) -> None:
        pass


def verify_chain(target_cache, pending: torch.Tensor, drafts: torch.Tensor, hidden: bool = False):
    """ONE target forward over the pending token and the drafts: the logits (1, γ+1, V) the acceptance test reads,
    and the target's hidden states there (1, γ+1, H) when ``hidden`` (else None). Without drafts and hidden states
    this is a plain decode step (``last_only``, as the autoregressive baseline calls it)."""
    ids = torch.cat([pending, drafts], dim=1)
    if hidden:
        return target_cache.extend(ids, last_only=False, return_hidden=True)
    return target_cache.extend(ids, last_only=drafts.shape[1] == 0), None


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


def prefill_target(target_cache, input_ids: torch.Tensor, stats: GenerationStats, hidden: bool):
    """The target caches all but the last prompt token (round 1's pending token); with ``hidden``, returns their
    hidden states (1, prompt_len - 1, H) for the drafter."""
    if input_ids.shape[1] == 1:
        return None
    stats.target_forwards += 1
    if hidden:
        return target_cache.extend(input_ids[:, :-1], last_only=False, return_hidden=True)[1]
    target_cache.extend(input_ids[:, :-1])
    return None


@torch.inference_mode()
def generate_chain(target, drafter: Drafter, input_ids: torch.Tensor, max_new_tokens: int, temperature: float = 0.0,
                   seed: int | None = None, *, stats: GenerationStats, eos_token_id=None, time_phases: bool = True,
                   compile: bool | str = False) -> GenerationResult:
    """Speculative decoding with any chain drafter: exact greedy output at temperature 0, the target's distribution
    above. ``stats`` arrives with its runtime set (the target's decoder is built on it)."""
    check_generation(target, input_ids, max_new_tokens, temperature)
    eos, generator = eos_ids(target, eos_token_id), make_generator(seed, input_ids.device)
    clock = PhaseClock(input_ids.device, time_phases)
    capacity = input_ids.shape[1] + max_new_tokens  # a round never drafts past the tokens still due
    target_cache = cached_decoder(target, stats.runtime, capacity, compile=compile)
    drafter.start(input_ids, capacity, prefill_target(target_cache, input_ids, stats, drafter.needs_hidden))
    pending = input_ids[:, -1:]
    stats.time_prefill_s = clock.lap()

    tokens: list[int] = []
    while True:
        clock.mark()
        drafts, draft_probs = drafter.propose(pending, max_new_tokens - len(tokens) - 1, temperature, generator)
        stats.time_draft_s += clock.lap()
        logits, hidden = verify_chain(target_cache, pending, drafts, drafter.needs_hidden)
        stats.target_forwards += 1
        stats.time_verify_s += clock.lap()
        accepted, emitted, pending = accept_chain(logits, drafts, draft_probs, temperature, generator)
        target_cache.rollback(drafts.shape[1] - accepted)  # it saw pending + the drafts, keeps pending + accepted
        drafter.commit(drafts, accepted, pending, emitted, hidden)
        stats.record_round(accepted, drafts.shape[1])
        if finish_row(tokens, emitted, max_new_tokens, eos):
            break

    stats.time_total_s = clock.now() - clock.start
    stats.new_tokens = len(tokens)
    stats.draft_forwards = drafter.forwards
    return GenerationResult(torch.tensor(tokens, dtype=torch.long), stats.finish())
