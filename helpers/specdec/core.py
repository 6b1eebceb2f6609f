"""The core every speculative method shares: input checks, the acceptance rule, how a row finishes, the phase clock
and the statistics every generator reports.

Notation follows Chen et al. (2023): the *target* distribution is q, the *draft* distribution is p. One acceptance
rule, :func:`accept`, serves linear speculation, prompt lookup, batched and self-speculative decoding (a single
prompt is a batch of one); a draft tree is verified by the same rule applied node by node
(:mod:`helpers.specdec.tree`, which draws several candidates per node without replacement).
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field, fields

import torch

from helpers.specdec.analysis import estimate_alpha
from helpers.timing import sync

__all__ = ["GenerationResult", "GenerationStats", "PhaseClock", "RoundStats", "accept", "check_draft",
           "check_generation", "check_ids", "check_positive_int", "eos_ids", "finish_row", "make_generator", "probs", "sample", "vocab_size"]


# ------------------------------------------------------------------------------------------------ input checks


def vocab_size(model) -> int:
    """Token ids the model accepts: the rows of its input embedding."""
    embeddings = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    if embeddings is not None:
        return embeddings.weight.shape[0]
    return model.config.vocab_size


def check_ids(input_ids, model, *, batched: bool) -> None:
    """A (batch, prompt_len) tensor of integer ids in the model's vocabulary, on the model's device."""
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2:
        shape = tuple(input_ids.shape) if isinstance(input_ids, torch.Tensor) else type(input_ids).__name__
        raise ValueError(f"input_ids must be a tensor of shape ({'batch' if batched else 1}, prompt_len), got {shape}; "
                         "use ids[None] for one prompt")
    if not batched and input_ids.shape[0] != 1:
        raise ValueError(f"input_ids holds {input_ids.shape[0]} prompts, but this method decodes one prompt at a time "
                         "(shape (1, prompt_len)): loop over the prompts, or decode them together with "
                         "batched_speculative_generate / self_speculative_generate")
    if input_ids.is_floating_point() or input_ids.dtype == torch.bool or input_ids.is_complex():
        raise ValueError(f"input_ids must hold integer token ids, got dtype {input_ids.dtype}; cast with .long() "
                         "(a tokenizer's return_tensors='pt' gives int64)")
    if input_ids.shape[1] < 1:
        raise ValueError("input_ids is empty: the prompt needs at least one token (e.g. the BOS token)")
    vocab = vocab_size(model)
    low, high = int(input_ids.min()), int(input_ids.max())
    if low < 0 or high >= vocab:
        bad = low if low < 0 else high
        raise ValueError(f"input_ids holds token id {bad}, outside the model's vocabulary of {vocab} ids "
                         f"(0..{vocab - 1}): encode the prompt with this model's tokenizer")
    model_device = next(model.parameters()).device
    if input_ids.device != model_device:
        raise ValueError(f"input_ids is on {input_ids.device} but the model is on {model_device}; move one of them")


def check_generation(model, input_ids, max_new_tokens: int, temperature: float, *, batched: bool = False) -> None:
    """Check what every generator is given, once, with errors that name the problem and the fix."""
    check_ids(input_ids, model, batched=batched)
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be a positive int, got {max_new_tokens!r}")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not math.isfinite(temperature) \
            or temperature < 0:
        raise ValueError(f"temperature must be a finite number >= 0 (0 means greedy), got {temperature!r}")
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit and input_ids.shape[1] + max_new_tokens > limit:
        raise ValueError(
            f"the prompt ({input_ids.shape[1]} tokens) plus max_new_tokens ({max_new_tokens}) exceeds the model's "
            f"context of {limit} tokens; shorten the prompt or lower max_new_tokens")


def check_draft(target, draft) -> None:
    """A draft must share the target's vocabulary and device."""
    target_vocab, draft_vocab = _logit_count(target), _logit_count(draft)
    if target_vocab != draft_vocab:
        raise ValueError(
            f"draft and target vocabularies differ ({draft_vocab} vs {target_vocab} logits): speculative decoding "
            "compares their distributions token by token, so the draft must share the target's tokenizer")
    target_device, draft_device = next(target.parameters()).device, next(draft.parameters()).device
    if target_device != draft_device:
        raise ValueError(f"target is on {target_device} but draft on {draft_device}; put both on one device")


def _logit_count(model) -> int:
    return model.get_output_embeddings().weight.shape[0]


def check_positive_int(name: str, value, meaning: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} ({meaning}) must be an int >= 1, got {value!r}")


def eos_ids(model, eos_token_id) -> set[int]:
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


def make_generator(seed: int | None, device) -> torch.Generator | None:
    """A private generator when a seed is given (reproducible); otherwise the global RNG (torch.manual_seed)."""
    if seed is None:
        return None
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return generator


# ------------------------------------------------------------------------------------------------ the rule


def probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    return torch.softmax(logits.float() / temperature, dim=-1)


def sample(logits: torch.Tensor, temperature: float, generator=None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(batch, 1) tokens from (batch, V) logits: the argmax at temperature 0, else a draw; and the distribution drawn
    from (None when greedy)."""
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True), None
    distribution = probs(logits, temperature)
    return torch.multinomial(distribution, 1, generator=generator), distribution


def accept(target_logits: torch.Tensor, drafts: torch.Tensor, draft_probs: torch.Tensor | None = None,
           temperature: float = 0.0, generator=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Algorithm 2's acceptance test for a batch of rows, vectorised, without a host sync.

    ``target_logits`` (B, γ+1, V) at [pending, d1..dγ]; ``drafts`` (B, γ); ``draft_probs`` (B, γ, V), the draft
    distributions the drafts were drawn from (sampling only). Returns per row the number k of accepted drafts and
    the next token.

    * temperature 0 (greedy limit): accept the longest prefix equal to the target's argmax, then take its argmax
      (a correction, or the bonus token after γ acceptances).
    * temperature > 0: draft i is kept when r_i < q(d_i)/p(d_i) (written r_i p(d_i) < q(d_i): no division), k is the
      accepted prefix; the next token is drawn from norm(max(0, q - p)) at the first rejection, and from q after γ
      acceptances (p is padded with a zero row there, so the same formula gives q).
    """
    rows = torch.arange(drafts.shape[0], device=drafts.device)
    if temperature == 0:
        choice = target_logits.argmax(dim=-1)
        k = (choice[:, :-1] == drafts).long().cumprod(dim=1).sum(dim=1)
        return k, choice[rows, k]
    q = probs(target_logits, temperature)
    q_d = q[:, :-1].gather(2, drafts[..., None])[..., 0]
    p_d = draft_probs.gather(2, drafts[..., None])[..., 0]
    r = torch.rand(drafts.shape, device=drafts.device, generator=generator)
    k = (r * p_d < q_d).long().cumprod(dim=1).sum(dim=1)
    p_padded = torch.cat([draft_probs, draft_probs.new_zeros(drafts.shape[0], 1, draft_probs.shape[-1])], dim=1)
    q_k, p_k = q[rows, k], p_padded[rows, k]
    residual = (q_k - p_k).clamp_min(0)
    # q == p to rounding leaves no residual mass; a rejection is then (almost) impossible: fall back to q
    residual = torch.where(residual.sum(dim=-1, keepdim=True) > 0, residual, q_k)
    return k, torch.multinomial(residual, 1, generator=generator)[:, 0]


def finish_row(generated: list[int], new_tokens, max_new_tokens: int, eos: set[int]) -> bool:
    """Append a round's tokens to a row, cut after EOS or at ``max_new_tokens``; True when the row is done."""
    for token in new_tokens:
        generated.append(token)
        if token in eos or len(generated) >= max_new_tokens:
            return True
    return False


# ------------------------------------------------------------------------------------------------ timing


class PhaseClock:
    """Wall time split into phases. ``lap()`` returns the seconds since the last mark and moves the mark; with
    ``sync_phases`` every mark first waits for the device's queued work (on CUDA a phase's kernels finish only at a
    sync; on the CPU the sync costs nothing). On CUDA without ``sync_phases`` a lap would time the launches, not the
    work, so it is nan: a run timed whole leaves its split unknown rather than wrong (``total()`` stays exact)."""

    def __init__(self, device, sync_phases: bool = True):
        self.device = torch.device(device)
        self.sync_phases = sync_phases
        self.exact = sync_phases or self.device.type != "cuda"  # a CPU computes synchronously
        self.start = self._last = self.now()

    def now(self) -> float:
        if self.sync_phases:
            sync(self.device)
        return time.perf_counter()

    def mark(self) -> None:
        """Start a phase here (what came since the last mark is not counted)."""
        self._last = time.perf_counter()

    def lap(self) -> float:
        now = self.now()
        seconds, self._last = now - self._last, now
        return seconds if self.exact else float("nan")

    def total(self) -> float:
        """Seconds since the clock started, after the device's queued work."""
        sync(self.device)
        return time.perf_counter() - self.start


# ------------------------------------------------------------------------------------------------ statistics


@dataclass
class RoundStats:
    """What every generator counts. Fields declared with ``repr=False`` are per-round logs, left out of
    :meth:`as_dict` (the flat row a result file stores)."""

    new_tokens: int = 0
    rounds: int = 0
    accepted: int = 0
    alpha: float = float("nan")
    draft_forwards: int = 0

    @property
    def tokens_per_second(self) -> float:
        seconds = self.seconds
        return self.new_tokens / seconds if seconds > 0 else float("nan")

    @property
    def seconds(self) -> float:  # the time tokens_per_second divides by
        raise NotImplementedError

    def as_dict(self) -> dict:
        row = asdict(self)
        for log in (f.name for f in fields(self) if not f.repr):
            row.pop(log)
        row["tokens_per_second"] = self.tokens_per_second
        return row


@dataclass
class GenerationStats(RoundStats):
    """Counters and timings of one single-prompt generation (seconds; the speculative fields stay 0 for AR).

    ``alpha`` is the maximum-likelihood per-token acceptance probability: each round is a run of Bernoulli(α)
    acceptance tests that stops at the first rejection or after the round's drafts, so the likelihood is
    α^accepted (1-α)^rejections and α̂ = accepted / (accepted + rejections). ``acceptance_rate`` =
    accepted / proposed is smaller, because drafts after a rejection are counted as proposed but never tested.
    """

    runtime: str = ""  # "minimal" or "transformers" (helpers.models.runtime)
    compiled: bool | str = False  # decode steps through torch.compile (True) or explicit CUDA graphs ("graphs")
    proposed: int = 0
    rejections: int = 0
    acceptance_rate: float = float("nan")
    mean_accepted_per_round: float = float("nan")
    tokens_per_round: float = float("nan")
    target_forwards: int = 0
    time_prefill_s: float = 0.0
    time_draft_s: float = 0.0
    time_verify_s: float = 0.0
    time_other_s: float = 0.0
    time_total_s: float = 0.0
    accepted_per_round: list[int] = field(default_factory=list, repr=False)
    gamma_per_round: list[int] = field(default_factory=list, repr=False)  # γ_r: the last round may draft fewer

    @property
    def seconds(self) -> float:
        return self.time_total_s

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
            self.alpha = estimate_alpha(self.accepted_per_round, self.gamma_per_round)
        if self.rounds:
            self.mean_accepted_per_round = self.accepted / self.rounds
            self.tokens_per_round = self.new_tokens / self.rounds
        other = self.time_total_s - self.time_prefill_s - self.time_draft_s - self.time_verify_s
        self.time_other_s = max(0.0, other) if other == other else float("nan")  # nan: phases not timed (PhaseClock)
        return self

    @property
    def rounds_without_drafts(self) -> int:
        """Rounds that proposed no draft token (prompt lookup without a match; a last round with one token due)."""
        return sum(1 for gamma in self.gamma_per_round if gamma == 0)


@dataclass
class GenerationResult:
    tokens: torch.Tensor  # 1-D int64 on the CPU: the new tokens only (EOS included when it ended the run)
    stats: GenerationStats
