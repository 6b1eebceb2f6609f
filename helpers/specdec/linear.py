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
* Acceptance is computed on the device with tensor ops; the round ends with ONE host sync (a single
  ``tolist()``) that returns the number accepted, the drafts and the next token together.
* Cache invariant: the target cache holds every committed token but the last ("pending") one; the draft
  cache lags by the tokens in ``draft_pending``. When every draft is accepted the draft never saw the last
  draft token, so it is fed together with the pending token in the next round's first draft forward (the
  catch-up token) — one forward of two tokens instead of an extra forward.

The autoregressive baseline uses the same runtime and cache discipline (one token per forward, last logits
only) so that the comparison measures speculation, not implementation quality.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

import torch

from helpers.models.runtime import cached_decoder, resolve_runtime
from helpers.timing import sync
from helpers.specdec.analysis import estimate_alpha

__all__ = ["GenerationResult", "GenerationStats", "autoregressive_generate", "speculative_generate"]


@dataclass
class GenerationStats:
    """Counters and timings of one generation (seconds; the speculative fields stay 0 for the baseline).

    ``alpha`` is the maximum-likelihood per-token acceptance probability: each round is a run of Bernoulli(α)
    acceptance tests that stops at the first rejection or after the round's drafts, so the likelihood is
    α^accepted (1-α)^rejections and α̂ = accepted / (accepted + rejections). ``acceptance_rate`` =
    accepted / proposed is smaller, because drafts after a rejection are counted as proposed but never tested.
    """

    runtime: str = ""  # "minimal" or "transformers" (helpers.models.runtime)
    compiled: bool = False  # decode steps through torch.compile (helpers.models.qwen3.MiniQwen3.compile_decode)
    new_tokens: int = 0
    rounds: int = 0
    proposed: int = 0
    accepted: int = 0
    rejections: int = 0
    acceptance_rate: float = float("nan")
    alpha: float = float("nan")
    mean_accepted_per_round: float = float("nan")
    tokens_per_round: float = float("nan")
    draft_forwards: int = 0
    target_forwards: int = 0
    time_prefill_s: float = 0.0
    time_draft_s: float = 0.0
    time_verify_s: float = 0.0
    time_other_s: float = 0.0
    time_total_s: float = 0.0
    accepted_per_round: list[int] = field(default_factory=list, repr=False)
    gamma_per_round: list[int] = field(default_factory=list, repr=False)  # γ_r: the last round may draft fewer

    def record_round(self, accepted: int, drafted: int, proposed: int | None = None) -> None:
        """Count one verified round: ``accepted`` of the ``drafted`` levels it could accept (γ_r, a tree's depth);
        ``proposed``: the draft tokens the target verified (a tree's nodes; default ``drafted``)."""
        self.rounds += 1
        self.proposed += drafted if proposed is None else proposed
        self.accepted += accepted
        self.rejections += accepted < drafted
        self.accepted_per_round.append(accepted)
        self.gamma_per_round.append(drafted)

    def finish(self) -> "GenerationStats":
        """Fill the derived ratios from the counters."""
        if self.proposed:
            self.acceptance_rate = self.accepted / self.proposed
        if self.proposed:
            self.alpha = estimate_alpha(self.accepted_per_round, self.gamma_per_round)
        if self.rounds:
            self.mean_accepted_per_round = self.accepted / self.rounds
            self.tokens_per_round = self.new_tokens / self.rounds
        self.time_other_s = max(
            0.0, self.time_total_s - self.time_prefill_s - self.time_draft_s - self.time_verify_s
        )
        return self

    @property
    def rounds_without_drafts(self) -> int:
        """Rounds that proposed no draft token (prompt lookup without a match; a last round with one token due)."""
        return sum(1 for gamma in self.gamma_per_round if gamma == 0)

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.time_total_s if self.time_total_s > 0 else float("nan")

    def as_dict(self) -> dict:
        """Flat dict for result rows (without the per-round list)."""
        row = asdict(self)
        row.pop("accepted_per_round")
        row.pop("gamma_per_round")
        row["tokens_per_second"] = self.tokens_per_second
        return row


@dataclass
class GenerationResult:
    tokens: torch.Tensor  # 1-D int64 on the CPU: the new tokens only (EOS included when it ended the run)
    stats: GenerationStats


# ----------------------------------------------------------------------------------------------------------
# validation and small utilities


def _check_common(model, input_ids, max_new_tokens: int, temperature: float) -> None:
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 or input_ids.shape[0] != 1:
        shape = tuple(input_ids.shape) if isinstance(input_ids, torch.Tensor) else type(input_ids).__name__
        raise ValueError(f"input_ids must be a tensor of shape (1, prompt_len), got {shape}; use ids[None] for one prompt")
    if input_ids.shape[1] < 1:
        raise ValueError("input_ids is empty: the prompt needs at least one token (e.g. the BOS token)")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be a positive int, got {max_new_tokens!r}")
    if not isinstance(temperature, (int, float)) or not math.isfinite(temperature) or temperature < 0:
        raise ValueError(f"temperature must be a finite number >= 0 (0 means greedy), got {temperature!r}")
    model_device = next(model.parameters()).device
    if input_ids.device != model_device:
        raise ValueError(f"input_ids is on {input_ids.device} but the model is on {model_device}; move one of them")
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit and input_ids.shape[1] + max_new_tokens > limit:
        raise ValueError(
            f"the prompt ({input_ids.shape[1]} tokens) plus max_new_tokens ({max_new_tokens}) exceeds the model's "
            f"context of {limit} tokens; shorten the prompt or lower max_new_tokens")


def _vocab_size(model) -> int:
    return model.get_output_embeddings().weight.shape[0]


def _eos_ids(model, eos_token_id) -> set[int]:
    """EOS ids to stop at: the argument if given, else the model's generation config (int or list)."""
    if eos_token_id is None:
        generation_config = getattr(model, "generation_config", None)
        eos_token_id = getattr(generation_config, "eos_token_id", None)
        if eos_token_id is None:
            eos_token_id = getattr(model.config, "eos_token_id", None)
    if eos_token_id is None:
        return set()
    if isinstance(eos_token_id, int):
        return {eos_token_id}
    return {int(i) for i in eos_token_id}


def _generator(seed: int | None, device: torch.device) -> torch.Generator | None:
    """A private generator when a seed is given (reproducible); otherwise the global RNG (torch.manual_seed)."""
    if seed is None:
        return None
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return generator


def _phase_clock(device, enabled: bool):
    """A clock for phase boundaries: ``time.perf_counter`` after a device sync when ``enabled`` (on CUDA a phase's
    kernels finish only at a sync; on the CPU the sync costs nothing)."""
    def mark() -> float:
        if enabled:
            sync(device)
        return time.perf_counter()
    return mark


def _probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    return torch.softmax(logits.float() / temperature, dim=-1)


def _truncate_at_eos(tokens: list[int], eos: set[int]) -> tuple[list[int], bool]:
    for i, token in enumerate(tokens):
        if token in eos:
            return tokens[: i + 1], True
    return tokens, False


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
    compile: bool = False,
) -> GenerationResult:
    """Plain decoding with a KV cache: one target forward per new token (greedy when temperature == 0)."""
    _check_common(model, input_ids, max_new_tokens, temperature)
    device = input_ids.device
    eos = _eos_ids(model, eos_token_id)
    generator = _generator(seed, device)
    stats = GenerationStats(runtime=resolve_runtime(runtime, model), compiled=compile)
    start = time.perf_counter()

    decoder = cached_decoder(model, stats.runtime, input_ids.shape[1] + max_new_tokens, compile=compile)
    logits = decoder.extend(input_ids)[:, -1]
    stats.target_forwards += 1
    sync(device)
    stats.time_prefill_s = time.perf_counter() - start

    tokens: list[int] = []
    while True:
        if temperature == 0:
            next_token = logits.argmax(dim=-1, keepdim=True)
        else:
            next_token = torch.multinomial(_probs(logits, temperature), 1, generator=generator)
        token = next_token.item()  # the one host sync per token: EOS decides whether to go on
        tokens.append(token)
        if token in eos or len(tokens) == max_new_tokens:
            break
        tick = time.perf_counter()
        logits = decoder.extend(next_token)[:, -1]
        stats.target_forwards += 1
        stats.time_verify_s += time.perf_counter() - tick  # "verify" = target forwards, for a like-for-like split

    sync(device)
    stats.time_total_s = time.perf_counter() - start
    stats.new_tokens = stats.rounds = len(tokens)
    return GenerationResult(torch.tensor(tokens, dtype=torch.long), stats.finish())


# ----------------------------------------------------------------------------------------------------------
# speculative decoding


def _check_pair(target, draft, gamma) -> None:
    if isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 1:
        raise ValueError(f"gamma (draft tokens per round) must be an int >= 1, got {gamma!r}")
    target_vocab, draft_vocab = _vocab_size(target), _vocab_size(draft)
    if target_vocab != draft_vocab:
        raise ValueError(
            f"draft and target vocabularies differ ({draft_vocab} vs {target_vocab} logits): speculative decoding "
            "compares their distributions token by token, so the draft must share the target's tokenizer"
        )
    target_device, draft_device = next(target.parameters()).device, next(draft.parameters()).device
    if target_device != draft_device:
        raise ValueError(f"target is on {target_device} but draft on {draft_device}; put both on one device")


def accept_greedy(target_logits: torch.Tensor, drafts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy limit of Algorithm 2: accept the longest prefix of drafts equal to the target's argmax.

    target_logits: (γ+1, V) for positions [pending, d1..dγ]; drafts: (γ,). Returns (k, next_token) as
    0-d device tensors: k accepted drafts, and the target's argmax after them (correction or bonus).
    """
    choice = target_logits.argmax(dim=-1)
    k = torch.cumprod((choice[:-1] == drafts).long(), dim=0).sum()
    return k, choice[k]


def accept_sampling(
    target_logits: torch.Tensor,
    draft_probs: torch.Tensor,
    drafts: torch.Tensor,
    temperature: float,
    generator: torch.Generator | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Modified rejection sampling (Algorithm 2), vectorised over the γ drafts without host syncs.

    Draft i is kept when r_i < q(d_i) / p(d_i); k = length of the accepted prefix. The next token is drawn from
    norm(max(0, q - p)) at the first rejection, or from q at the bonus position when all γ are accepted
    (there p is taken as 0, so the same formula gives q).
    """
    q = _probs(target_logits, temperature)  # (γ+1, V) target
    gamma = drafts.shape[0]
    rows = torch.arange(gamma, device=drafts.device)
    q_d, p_d = q[rows, drafts], draft_probs[rows, drafts]
    r = torch.rand(gamma, device=drafts.device, generator=generator)
    accepted = r * p_d < q_d  # r < q/p without dividing (p_d > 0 because d was sampled from p)
    k = torch.cumprod(accepted.long(), dim=0).sum()
    p_padded = torch.cat([draft_probs, draft_probs.new_zeros(1, draft_probs.shape[1])])
    q_k, p_k = q.index_select(0, k.view(1)), p_padded.index_select(0, k.view(1))
    residual = (q_k - p_k).clamp_min(0)
    mass = residual.sum(dim=-1, keepdim=True)
    # q == p to rounding leaves no residual mass; a rejection is then (almost) impossible, fall back to q
    residual = torch.where(mass > 0, residual, q_k)
    return k, torch.multinomial(residual, 1, generator=generator).view(())


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
    compile: bool = False,
    stop_below: float | None = None,
) -> GenerationResult:
    """Speculative decoding with γ drafts per round; exact greedy output at temperature 0, target samples above.

    ``time_phases`` splits wall time into draft / verify / rest; on CUDA that needs a synchronize at each
    phase boundary, so pass False for headline GPU throughput (on the CPU it costs nothing). ``runtime``:
    see :mod:`helpers.models.runtime` (both models use the same one). ``compile``: single-token forwards (the
    draft's decode steps) through ``torch.compile`` over static-shape caches (minimal runtime).

    ``stop_below`` (adaptive lookahead, dynamic γ): a round stops drafting as soon as the draft's probability of
    the token it has just drafted is below this threshold — greedy: its softmax maximum at temperature 1;
    sampling: p(d) at the sampling temperature. That token is still proposed (its forward is already paid, and
    it may be accepted); ``gamma`` stays the most drafts per round and ``stats.gamma_per_round`` records the
    actual counts. The rule looks only at the draft's own values, so the output stays exact (greedy) and
    distributed as the target's (sampling). It costs one host read per draft step; None (the default) keeps
    the fixed-γ path, which has none.
    """
    _check_common(target, input_ids, max_new_tokens, temperature)
    _check_pair(target, draft, gamma)
    if stop_below is not None and (isinstance(stop_below, bool) or not isinstance(stop_below, (int, float))
                                   or not 0 <= stop_below <= 1):
        raise ValueError(f"stop_below (the draft probability below which a round stops drafting) must be None or a "
                         f"number in [0, 1], got {stop_below!r}")
    device = input_ids.device
    eos = _eos_ids(target, eos_token_id)
    generator = _generator(seed, device)
    greedy = temperature == 0
    stats = GenerationStats(runtime=resolve_runtime(runtime, target, draft), compiled=compile)
    clock = time.perf_counter
    phase_mark = _phase_clock(device, time_phases)

    start = clock()
    # never more than prompt + max_new_tokens tokens in a cache: a round drafts at most the tokens still due
    capacity = input_ids.shape[1] + max_new_tokens
    target_cache = cached_decoder(target, stats.runtime, capacity, compile=compile)
    draft_cache = cached_decoder(draft, stats.runtime, capacity, compile=compile)
    # Prefill everything but the last prompt token, which becomes the pending token of round 1 (Algorithm 2
    # verifies the pending token's position together with the drafts).
    if input_ids.shape[1] > 1:
        context = input_ids[:, :-1]
        target_cache.extend(context)
        draft_cache.extend(context)
        stats.target_forwards += 1
        stats.draft_forwards += 1
    pending = input_ids[:, -1:]  # (1, 1): committed, not yet in the target cache
    draft_pending = pending  # (1, n): committed, not yet in the draft cache
    stats.time_prefill_s = phase_mark() - start

    tokens: list[int] = []
    while len(tokens) < max_new_tokens:
        # never draft past the budget: the round also emits one token from the target
        round_gamma = min(gamma, max_new_tokens - len(tokens) - 1)

        tick = clock()
        drafts, draft_probs = [], []
        draft_input = draft_pending
        for step in range(round_gamma):
            logits = draft_cache.extend(draft_input)[:, -1]
            if greedy:
                draft_input = logits.argmax(dim=-1, keepdim=True)
            else:
                probs = _probs(logits, temperature)
                draft_probs.append(probs)
                draft_input = torch.multinomial(probs, 1, generator=generator)
            drafts.append(draft_input)
            if stop_below is not None and step + 1 < round_gamma:  # adaptive lookahead: a host read per step
                confidence = (torch.softmax(logits.float(), dim=-1).amax() if greedy
                              else probs[0, draft_input[0, 0]])
                if confidence.item() < stop_below:
                    round_gamma = step + 1
                    break
        stats.draft_forwards += round_gamma
        draft_tokens = torch.cat(drafts, dim=1) if drafts else pending.new_empty(1, 0)  # (1, γ_r)
        tock = phase_mark()
        stats.time_draft_s += tock - tick

        target_logits = target_cache.extend(torch.cat([pending, draft_tokens], dim=1), last_only=False)[0]  # (γ_r+1, V)
        stats.target_forwards += 1
        tick = phase_mark()
        stats.time_verify_s += tick - tock

        flat_drafts = draft_tokens[0]
        if greedy:
            k, next_token = accept_greedy(target_logits, flat_drafts)
        else:
            probs = torch.cat(draft_probs) if draft_probs else target_logits.new_empty(0, target_logits.shape[-1])
            k, next_token = accept_sampling(target_logits, probs, flat_drafts, temperature, generator)
        # the one host sync of the round: accepted count, drafts and the next token together
        host = torch.cat([k.view(1), flat_drafts, next_token.view(1)]).tolist()
        accepted = host[0]
        emitted = host[1 : 1 + accepted] + [host[-1]]

        # roll back: the target saw pending + γ_r drafts and keeps pending + accepted ones
        target_cache.rollback(round_gamma - accepted)
        # the draft saw draft_pending + d1..d(γ_r - 1)
        if round_gamma == 0:
            draft_pending = torch.cat([draft_pending, next_token.view(1, 1)], dim=1)
        elif accepted < round_gamma:
            draft_cache.rollback(round_gamma - 1 - accepted)
            draft_pending = next_token.view(1, 1)
        else:  # all accepted: the last draft is the catch-up token of the next draft forward
            draft_pending = torch.cat([draft_tokens[:, -1:], next_token.view(1, 1)], dim=1)
        pending = next_token.view(1, 1)

        stats.record_round(accepted, round_gamma)
        emitted, hit_eos = _truncate_at_eos(emitted, eos)
        tokens.extend(emitted)
        if hit_eos:
            break

    stats.time_total_s = phase_mark() - start
    stats.new_tokens = len(tokens)
    return GenerationResult(torch.tensor(tokens, dtype=torch.long), stats.finish())
