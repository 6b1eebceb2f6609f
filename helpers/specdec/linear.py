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

The draft model is a :class:`ModelDrafter` of the one chain verifier (:func:`helpers.specdec.chain.generate_chain`):
a round reads as the paper's algorithm, :func:`draft_chain` (γ draft forwards), one target forward, the acceptance
test, and both caches rolled back to what was accepted.
The autoregressive baseline uses the same runtime and cache discipline (one token per forward, last logits
only) so that the comparison measures speculation, not implementation quality.
"""
from __future__ import annotations

import torch

from helpers.models.runtime import cached_decoder, resolve_runtime
from helpers.specdec.chain import Drafter, generate_chain
from helpers.specdec.methods import Method, register
from helpers.specdec.core import (GenerationResult, GenerationStats, PhaseClock, accept, check_draft,
                                  check_generation, eos_ids, finish_row, make_generator, sample)

__all__ = ["GenerationResult", "GenerationStats", "ModelDrafter", "accept_greedy", "accept_sampling",
           "autoregressive_generate", "draft_chain", "speculative_generate"]


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
    if not clock.exact:  # CUDA laps without a sync timed launches; after the prefill a step is all target forward
        stats.time_verify_s = stats.time_total_s - stats.time_prefill_s
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


class ModelDrafter(Drafter):
    """A separate draft model with its own KV cache, rolled back by length after every round.

    Its cache lags the committed tokens by ``self.pending``: after a rejection only the next token; when every
    draft was accepted the draft never saw the last draft token, so it is fed together with the next token in the
    next round's first draft forward (the catch-up token) — one forward of two tokens instead of an extra one."""

    def __init__(self, draft, gamma: int, runtime: str, *, compile: bool | str = False,
                 stop_below: float | None = None):
        self.draft, self.gamma, self.runtime, self.compile, self.stop_below = draft, gamma, runtime, compile, stop_below
        self.cache, self.pending, self.forwards = None, None, 0

    def start(self, input_ids: torch.Tensor, capacity: int, hidden=None) -> None:
        self.cache = cached_decoder(self.draft, self.runtime, capacity, compile=self.compile)
        if input_ids.shape[1] > 1:
            self.cache.extend(input_ids[:, :-1])
            self.forwards += 1
        self.pending = input_ids[:, -1:]

    def propose(self, pending, limit: int, temperature: float, generator=None):
        drafts, draft_probs = draft_chain(self.cache, self.pending, min(self.gamma, limit), temperature, generator,
                                          self.stop_below)
        self.forwards += drafts.shape[1]
        return drafts, draft_probs

    def commit(self, drafts, accepted: int, next_token, emitted, hidden=None) -> None:
        drafted = drafts.shape[1]
        if drafted == 0:  # the draft saw nothing this round
            self.pending = torch.cat([self.pending, next_token], dim=1)
        elif accepted < drafted:  # it saw self.pending + d1..d(γ_r - 1)
            self.cache.rollback(drafted - 1 - accepted)
            self.pending = next_token
        else:  # all accepted: the last draft is the catch-up token
            self.pending = torch.cat([drafts[:, -1:], next_token], dim=1)


def _check_options(gamma, stop_below) -> None:
    if isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 1:
        raise ValueError(f"gamma (draft tokens per round) must be an int >= 1, got {gamma!r}")
    if stop_below is not None and (isinstance(stop_below, bool) or not isinstance(stop_below, (int, float))
                                   or not 0 <= stop_below <= 1):
        raise ValueError(f"stop_below (the draft probability below which a round stops drafting) must be None or a "
                         f"number in [0, 1], got {stop_below!r}")


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
    check_draft(target, draft)  # the prompt and budget are checked by generate_chain
    _check_options(gamma, stop_below)
    stats = GenerationStats(runtime=resolve_runtime(runtime, target, draft), compiled=compile)
    drafter = ModelDrafter(draft, gamma, stats.runtime, compile=compile, stop_below=stop_below)
    return generate_chain(target, drafter, input_ids, max_new_tokens, temperature, seed, stats=stats,
                          eos_token_id=eos_token_id, time_phases=time_phases, compile=compile)


def _run_ar(spec, target, draft, input_ids, max_new_tokens, time_phases=True, **options):
    return autoregressive_generate(target, input_ids, max_new_tokens, **options)  # its one phase is untimed


def _run_linear(spec, target, draft, input_ids, max_new_tokens, **options):
    return speculative_generate(target, draft, input_ids, max_new_tokens, spec["gamma"],
                                stop_below=spec.get("stop_below"), **options)


register(Method("ar", lambda spec: "AR", _run_ar, family="AR", order=0))
register(Method("linear", lambda spec: f"linear g{spec['gamma']}", _run_linear, "draft", "draft model", order=1))
register(Method("adaptive", lambda spec: f"adaptive g{spec['gamma']} p<{spec['stop_below']:g}", _run_linear,
                "draft", "draft model", order=2))
