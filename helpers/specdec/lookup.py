"""Prompt lookup decoding (PLD): speculative decoding whose drafts come from the context itself, not a model.

When the continuation repeats text that is already in the context — code being re-emitted with an edit, a
quoted passage, a field name seen before — the tokens that followed the last occurrence of the current suffix
are a good guess for what comes next. Each round looks up the last ``n`` committed tokens (prompt + generated,
longest ``n`` first, from ``ngram`` down to 1) in an index of the earlier context, proposes the tokens that
followed their most recent earlier occurrence, and verifies them exactly as linear speculative decoding does
(:func:`helpers.specdec.linear.speculative_generate`): the pending token and the drafts in ONE target forward,
rollback of the target cache by length, one host sync per round.

* **Index.** :class:`NgramIndex` maps every n-gram (n = 1..``ngram``) of the committed tokens to where its
  most recent occurrence *ended*, updated as tokens are committed, so a lookup costs O(``ngram``) dictionary
  probes instead of a scan over the context. An n-gram is registered only once a token follows it, so the
  current suffix never matches itself. A copy that runs into the end of the context continues from its own
  output (a repeating loop of period p proposes full-length drafts, not just p tokens).
* **Draft length.** Every match proposes ``num_draft`` tokens (never more than the tokens still due). With
  ``adaptive=True`` the length adapts per round instead: it starts at ``num_draft``, grows by one after a round
  whose drafts were all accepted, and after a rejection halves, but not below ``accepted + 1``. Fixed is the
  default because it measured faster on the CPU pair (greedy, interleaved: 2.2-2.3x vs 2.0x over AR on
  copy-task prompts, 1.76x vs 1.60x on open-ended code): verifying more drafts costs little there
  (T_V(8)/T_T = 1.6 against T_V(1)/T_T = 1.2), while a shortened draft forfeits the tokens a good match
  would have given after a rejection.
* **No match, no draft.** A round without a match is a plain decode step: one single-token forward over the
  last position, as :func:`~helpers.specdec.linear.autoregressive_generate` does, plus a dictionary probe.
* **Lossless.** Greedy: the longest draft prefix equal to the target's argmax is kept
  (:func:`~helpers.specdec.linear.accept_greedy`). Sampling: the draft distribution is a point mass on the
  proposed token (the proposal is a deterministic function of the context), so the modified rejection step
  (:func:`~helpers.specdec.linear.accept_sampling` with one-hot draft probabilities) keeps draft d with
  probability q(d) and on rejection samples from q with d removed, renormalised — exactly the target's law.
"""
from __future__ import annotations

import torch

from helpers.models.runtime import resolve_runtime
from helpers.specdec.chain import Drafter, generate_chain
from helpers.specdec.methods import Method, register
from helpers.specdec.core import GenerationResult, GenerationStats, check_positive_int

__all__ = ["LookupDrafter", "NgramIndex", "prompt_lookup_generate"]


class NgramIndex:
    """The committed tokens and, for every n-gram of them (n = 1..``ngram``), where its latest occurrence ends.

    ``add(tokens)`` commits tokens; ``propose(limit)`` returns up to ``limit`` tokens that followed the most
    recent earlier occurrence of the longest suffix (at most ``ngram`` tokens) that occurred before, or ``[]``.
    """

    def __init__(self, ngram: int = 3, tokens=()):
        check_positive_int("ngram", ngram, "the longest suffix looked up")
        self.ngram = ngram
        self.tokens: list[int] = []
        self._next: dict[tuple[int, ...], int] = {}  # n-gram -> index of the token that followed its latest occurrence
        self.last_match = 0  # n of the last successful lookup (0: none)
        self.add(tokens)

    def add(self, tokens) -> None:
        """Commit ``tokens`` (ints): each new token registers the n-grams that END right before it."""
        seq = self.tokens
        for token in tokens:
            end = len(seq)  # the n-grams seq[end - n: end] are now followed by seq[end]
            for n in range(1, min(self.ngram, end) + 1):
                self._next[tuple(seq[end - n: end])] = end
            seq.append(int(token))

    def lookup(self, n: int) -> int | None:
        """Index of the token that followed the latest earlier occurrence of the last ``n`` tokens, or None."""
        if n > len(self.tokens):
            return None
        return self._next.get(tuple(self.tokens[-n:]))

    def propose(self, limit: int, min_ngram: int = 1) -> list[int]:
        """Up to ``limit`` draft tokens: longest matching suffix first (``ngram`` down to ``min_ngram``), latest
        occurrence."""
        self.last_match = 0
        if limit < 1:
            return []
        for n in range(min(self.ngram, len(self.tokens)), min_ngram - 1, -1):
            start = self.lookup(n)
            if start is not None:
                self.last_match = n
                return self._copy(start, limit)
        return []

    def _copy(self, start: int, limit: int) -> list[int]:
        """``limit`` tokens from ``start`` on; past the end the copy goes on from its own output (LZ77 style), so
        a period-p loop proposes ``limit`` tokens, not only the p that follow the latest occurrence."""
        seq = self.tokens
        if start + limit <= len(seq):
            return seq[start: start + limit]
        out = seq[start:]
        while len(out) < limit:
            out.append(out[len(out) - (len(seq) - start)])
        return out


def next_draft_length(current: int, drafted: int, accepted: int, num_draft: int) -> int:
    """The adaptive rule: one more after a round whose ``drafted`` > 0 drafts were all accepted; after a rejection
    half the current length, but never fewer than ``accepted + 1``; unchanged after a round without drafts;
    always within [1, ``num_draft``]."""
    if drafted == 0:
        return current
    if accepted == drafted:
        return min(num_draft, current + 1)
    return max(1, min(num_draft, max(accepted + 1, current // 2)))


class LookupDrafter(Drafter):
    """Drafts copied from the context: the tokens that followed the latest earlier occurrence of the current suffix
    (:class:`NgramIndex`), ``num_draft`` of them, or an adapted length (:func:`next_draft_length`). As a drafting
    distribution a copied token is a point mass, so the acceptance test keeps draft d with probability q(d) and on
    a rejection samples from q with d removed, renormalised: exactly the target's law."""

    def __init__(self, vocab: int, ngram: int = 3, num_draft: int = 8, adaptive: bool = False, min_ngram: int = 1):
        self.vocab, self.ngram, self.num_draft, self.adaptive, self.min_ngram = vocab, ngram, num_draft, adaptive, min_ngram
        self.length = num_draft
        self.index = None

    def start(self, input_ids, capacity: int, hidden=None) -> None:
        self.index = NgramIndex(self.ngram, input_ids[0].tolist())

    def propose(self, pending, limit: int, temperature: float, generator=None):
        proposal = self.index.propose(min(self.length, limit), self.min_ngram)
        drafts = torch.tensor([proposal], dtype=torch.long, device=pending.device)
        return drafts, _point_masses(drafts, self.vocab, temperature)

    def commit(self, drafts, accepted: int, next_token, emitted, hidden=None) -> None:
        if self.adaptive:
            self.length = next_draft_length(self.length, drafts.shape[1], accepted, self.num_draft)
        self.index.add(emitted)


def prompt_lookup_generate(
    target,
    input_ids: torch.Tensor,
    max_new_tokens: int,
    temperature: float = 0.0,
    seed: int | None = None,
    *,
    ngram: int = 3,
    num_draft: int = 8,
    adaptive: bool = False,
    min_ngram: int = 1,
    eos_token_id: int | list[int] | None = None,
    time_phases: bool = True,
    runtime: str = "auto",
    compile: bool = False,
) -> GenerationResult:
    """Prompt lookup decoding: drafts copied from the context (no draft model), verified by the target.

    ``ngram``: the longest suffix looked up (then shorter ones, down to ``min_ngram``). ``num_draft``: the most drafts per
    round: every match proposes that many (fewer only at the end of the budget); ``adaptive``: the draft length
    adapts below it instead (module docstring). Exact greedy output at temperature 0, target samples above. Stats as :func:`~helpers.specdec.linear.speculative_generate`'s: ``gamma_per_round`` holds
    each round's draft count, 0 for a round without a match (``stats.rounds_without_drafts`` counts them);
    ``draft_forwards`` stays 0 and ``time_draft_s`` is the lookup time. ``time_phases``, ``runtime`` and
    ``compile`` as for ``speculative_generate``.
    """
    _check_lookup_options(ngram, num_draft, min_ngram)
    stats = GenerationStats(runtime=resolve_runtime(runtime, target), compiled=compile)
    drafter = LookupDrafter(target.get_output_embeddings().weight.shape[0], ngram, num_draft, adaptive, min_ngram)
    return generate_chain(target, drafter, input_ids, max_new_tokens, temperature, seed, stats=stats,
                          eos_token_id=eos_token_id, time_phases=time_phases, compile=compile)


def _point_masses(drafts: torch.Tensor, vocab: int, temperature: float) -> torch.Tensor | None:
    """The draft distribution of copied tokens: a point mass on each (sampling only; None when greedy)."""
    if temperature == 0:
        return None
    one_hot = torch.zeros(1, drafts.shape[1], vocab, device=drafts.device, dtype=torch.float32)
    one_hot[0, torch.arange(drafts.shape[1], device=drafts.device), drafts[0]] = 1.0
    return one_hot


def _check_lookup_options(ngram, num_draft, min_ngram) -> None:
    check_positive_int("ngram", ngram, "the longest suffix looked up")
    check_positive_int("num_draft", num_draft, "the most draft tokens per round")
    check_positive_int("min_ngram", min_ngram, "the shortest suffix looked up")
    if min_ngram > ngram:
        raise ValueError(f"min_ngram ({min_ngram}) must not exceed ngram ({ngram})")


def _run_lookup(spec, target, draft, input_ids, max_new_tokens, **options):
    return prompt_lookup_generate(target, input_ids, max_new_tokens, ngram=spec["ngram"], num_draft=spec["num_draft"],
                                  adaptive=spec.get("adaptive", False), **options)


register(Method("lookup", lambda spec: f"lookup n{spec['ngram']} {'adaptive' if spec.get('adaptive') else 'fixed'} "
                                       f"{spec['num_draft']}", _run_lookup, family="prompt lookup", order=5))
