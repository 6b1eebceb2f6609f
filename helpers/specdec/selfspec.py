"""Long-context self-speculation (MagicDec, notebook 11): the model drafts for itself over a StreamingLLM view of
its own KV cache and verifies with full attention.

At long context and large batch a decode step reads far more KV-cache bytes than weight bytes (the KV grows
with batch x context, the weights do not), so a draft that reads the same weights but only a bounded window of
the KV costs a fraction of a full step, and that fraction FALLS as batch and context grow — the opposite of
textbook speculation, whose verify step stops being free once the batch makes the target compute-bound.

A round, for every row of the batch at once:

1. draft: gamma forwards of one token through :class:`~helpers.models.streaming.StreamingView` (attention over
   ``sinks`` first tokens + the last ``window`` stored ones; the keys/values they write are provisional);
2. roll every row back by gamma and verify: ONE forward of the pending token + gamma drafts with full attention,
   which overwrites the provisional keys/values with exact ones;
3. per row, accept the longest agreeing prefix (greedy) or run the rejection test of speculative sampling, roll
   the row back past its rejected drafts; one host sync per round. Finished rows leave the batch.

Cache invariant between rounds: every committed token of a row but the last ("pending") one is in the cache.
Both generators here (:func:`self_speculative_generate` and the baseline :func:`batched_decode`) prefill the
same way (:func:`prefill`, in chunks, ragged prompts left-padded) and report decode time apart from prefill, so
the comparison measures decoding; a prefilled batch can be copied (:meth:`Prefilled.copy`) so that interleaved
repeats at long context do not redo the prefill.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from helpers.models.decoder import KVCache
from helpers.models.runtime import minimal_view
from helpers.models.streaming import StreamingView
from helpers.specdec.analysis import estimate_alpha
from helpers.specdec.batched import decode_batch
from helpers.specdec.core import (RoundStats, accept, check_ids, check_positive_int, eos_ids, finish_row, make_generator,
                                  sample)
from helpers.timing import measure, sync

PREFILL_CHUNK = 512  # prompt tokens per prefill forward: bounds the attention scores a long prompt materialises


# ------------------------------------------------------------------------------------------------ prefill


def prompt_rows(input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, model=None) -> list[list[int]]:
    """Each row's prompt tokens (the positions where ``attention_mask`` is 1, any padding side); with ``model``, the
    ids are checked against its vocabulary and device."""
    if model is not None:
        check_ids(input_ids, model, batched=True)
    elif not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 or input_ids.shape[0] < 1:
        shape = tuple(input_ids.shape) if isinstance(input_ids, torch.Tensor) else type(input_ids).__name__
        raise ValueError(f"input_ids must be a tensor of shape (batch, prompt_len), got {shape}; use ids[None] for "
                         "one prompt")
    if attention_mask is None:
        rows = input_ids.tolist()
    else:
        if attention_mask.shape != input_ids.shape:
            raise ValueError(f"attention_mask {tuple(attention_mask.shape)} must have input_ids' shape "
                             f"{tuple(input_ids.shape)} (1 = prompt token, 0 = padding)")
        rows = [ids[mask.bool()].tolist() for ids, mask in zip(input_ids.cpu(), attention_mask.cpu())]
    if min(map(len, rows)) < 1:
        raise ValueError("a prompt is empty (its attention_mask row is all 0): every row needs at least one token")
    return rows


@dataclass
class Prefilled:
    """A batch after prefill: the cache holds every prompt token but each row's last one (``pending``)."""

    model: torch.nn.Module  # the minimal decoder (helpers.models.decoder.MiniDecoder)
    cache: KVCache
    pending: torch.Tensor  # (batch, 1)
    prompt_lengths: list[int]
    seconds: float

    def copy(self, rows: int | None = None) -> "Prefilled":
        """An independent copy (of the first ``rows`` rows): a generation consumes the cache it is given."""
        cache = self.cache.copy(self.cache.batch_size if rows is None else rows)  # checks rows (1 to batch size)
        rows = cache.batch_size
        return Prefilled(self.model, cache, self.pending[:rows].clone(), self.prompt_lengths[:rows], self.seconds)


@torch.inference_mode()
def prefill(model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, *, room: int,
            chunk: int = PREFILL_CHUNK) -> Prefilled:
    """Prefill a batch (ragged prompts: ``attention_mask``) in chunks of ``chunk`` tokens, with room for ``room``
    more tokens per row (max_new_tokens, plus gamma + 1 for speculation)."""
    rows = prompt_rows(input_ids, attention_mask, model)
    model = minimal_view(model)
    device = model.embed_tokens.weight.device
    width = max(map(len, rows)) - 1  # the cache gets every prompt token but the last
    if width + 1 + room > model.config.max_seq_len:
        raise ValueError(f"the longest prompt ({width + 1} tokens) plus {room} new tokens exceeds the model's context "
                         f"of {model.config.max_seq_len}; shorten the prompts or generate fewer tokens")
    start = time.perf_counter()
    cache = model.new_cache(len(rows), width + room)
    ids = torch.zeros(len(rows), width, dtype=torch.long, device=device)
    mask = torch.zeros(len(rows), width, dtype=torch.long, device=device)
    for b, row in enumerate(rows):
        if len(row) > 1:
            ids[b, width - len(row) + 1:] = torch.as_tensor(row[:-1], device=device)
            mask[b, width - len(row) + 1:] = 1
    # the first chunk holds all the left padding (a cache marks padding only while empty), then fixed chunks
    bounds = [0, min(width, width - min(map(len, rows)) + 1 + chunk)]
    while bounds[-1] < width:
        bounds.append(min(width, bounds[-1] + chunk))
    for a, b in zip(bounds, bounds[1:]):
        model(ids[:, a:b], cache, last_only=True, attention_mask=mask[:, :b] if a == 0 else None)
    sync(device)
    pending = torch.tensor([[row[-1]] for row in rows], device=device)
    return Prefilled(model, cache, pending, [len(r) for r in rows], time.perf_counter() - start)


# ------------------------------------------------------------------------------------------------ results


@dataclass
class SelfSpecStats(RoundStats):
    """Counters and timings of one batched generation (seconds; decode excludes prefill).

    Rows that finish leave the batch, so a run has two phases: the *full-batch* rounds, while every row is still
    decoding (a serving engine that refills finished rows stays here), and a tail in which the slowest rows finish
    on a shrinking batch. The terms of Eq. 5 describe the full batch and are measured on those rounds (T_T is
    timed on the full batch): ``alpha`` (maximum likelihood from the accepted counts), ``tau`` (tokens a row gains
    per verify forward), ``draft_ratio`` = T_D/T_T and ``verify_ratio`` = T_V(gamma)/T_T, with T_T the median
    full-attention decode step timed on the same batch right after prefill (``target_step_s``; outside the decode
    time). ``full_batch_tokens_per_second`` is the throughput of those rounds; ``decode_s`` and
    ``tokens_per_second`` cover the whole run, tail included.
    """

    method: str = "self-spec"
    batch_size: int = 0
    gamma: int = 0
    window: int = 0
    sinks: int = 0
    temperature: float = 0.0
    row_rounds: int = 0  # verify forwards summed over the rows that took part
    tau: float = float("nan")
    prefill_s: float = 0.0
    decode_s: float = 0.0
    draft_s: float = 0.0
    verify_s: float = 0.0
    verify_forwards: int = 0
    target_step_s: float = float("nan")
    draft_ratio: float = float("nan")
    verify_ratio: float = float("nan")
    full_batch_rounds: int = 0
    full_batch_tokens: int = 0
    full_batch_s: float = 0.0
    accepted_per_round: list[list[int]] = field(default_factory=list, repr=False)
    # per round: (rows decoding, draft seconds, verify seconds, round seconds, tokens emitted)
    round_log: list[tuple[int, float, float, float, int]] = field(default_factory=list, repr=False)

    @property
    def seconds(self) -> float:
        return self.decode_s

    @property
    def full_batch_tokens_per_second(self) -> float:
        return self.full_batch_tokens / self.full_batch_s if self.full_batch_s > 0 else float("nan")

    def record_round(self, rows: int, draft_s: float, verify_s: float, round_s: float, tokens: int) -> None:
        self.round_log.append((rows, draft_s, verify_s, round_s, tokens))
        self.rounds += 1
        self.row_rounds += rows
        self.draft_s += draft_s
        self.verify_s += verify_s
        self.draft_forwards += self.gamma
        self.verify_forwards += 1

    def finish(self) -> "SelfSpecStats":
        full = [entry for entry in self.round_log if entry[0] == self.batch_size]  # a prefix: rows only leave
        if not full:
            return self
        self.full_batch_rounds = len(full)
        self.full_batch_tokens = sum(entry[4] for entry in full)
        self.full_batch_s = sum(entry[3] for entry in full)
        if not self.gamma:  # autoregressive: one token per row per round
            return self
        counts = [n for row in self.accepted_per_round for n in row[:len(full)]]
        self.alpha = estimate_alpha(counts, [self.gamma] * len(counts))
        self.tau = self.full_batch_tokens / (len(full) * self.batch_size)
        if self.target_step_s == self.target_step_s and self.target_step_s > 0:  # not NaN
            self.draft_ratio = sum(entry[1] for entry in full) / (len(full) * self.gamma) / self.target_step_s
            self.verify_ratio = sum(entry[2] for entry in full) / len(full) / self.target_step_s
        return self

    def as_dict(self) -> dict:
        return super().as_dict() | {"full_batch_tokens_per_second": self.full_batch_tokens_per_second}


@dataclass
class BatchResult:
    """``tokens[i]``: row i's new tokens (cut after EOS or at max_new_tokens); ``stats``: the batch's figures."""

    tokens: list[list[int]]
    stats: SelfSpecStats


# ------------------------------------------------------------------------------------------------ decoding


def _check_args(max_new_tokens, gamma, temperature, window, sinks) -> None:
    check_positive_int("max_new_tokens", max_new_tokens, "new tokens per row")
    check_positive_int("gamma", gamma, "draft tokens per round")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature >= 0 \
            or temperature == float("inf"):
        raise ValueError(f"temperature must be a finite number >= 0 (0 means greedy), got {temperature!r}")
    check_positive_int("window", window, "recent tokens the draft attends to")
    if isinstance(sinks, bool) or not isinstance(sinks, int) or sinks < 0:
        raise ValueError(f"sinks (first tokens the draft always attends to) must be an int >= 0, got {sinks!r}")


def _start(model, input_ids, attention_mask, room: int, prefilled: Prefilled | None) -> Prefilled:
    if prefilled is None:
        return prefill(model, input_ids, attention_mask, room=room)
    if max(prefilled.cache.lengths) + room > prefilled.cache.capacity:
        raise ValueError(f"the prefilled cache has room for {prefilled.cache.capacity - max(prefilled.cache.lengths)} "
                         f"new tokens per row, this generation needs {room}: prefill with a larger room")
    return prefilled


def _time_target_step(state: Prefilled, repeats: int = 3) -> float:
    """Median seconds of one full-attention decode step of this batch (feeds the pending tokens, rolls back)."""
    def step():
        state.model(state.pending, state.cache, last_only=True)
        state.cache.rollback(1)

    return measure(step, warmup=1, repeats=repeats, device=state.pending.device).median


def _drop_finished(state: Prefilled, still: list[int], active: list[int], pending: torch.Tensor):
    """Finished rows leave the batch (:meth:`KVCache.retain_rows`, which may reorder the rest); returns the active
    rows' ids and their pending tokens in the cache's new row order."""
    if len(still) == len(active):
        return active, pending
    order = state.cache.retain_rows(still)
    return [active[i] for i in order], pending[order]


@torch.inference_mode()
def self_speculative_generate(model, input_ids: torch.Tensor, max_new_tokens: int, gamma: int = 3,
                              temperature: float = 0.0, seed: int | None = None, *, window: int = 256,
                              sinks: int = 4, attention_mask: torch.Tensor | None = None,
                              eos_token_id: int | list[int] | None = None, prefilled: Prefilled | None = None,
                              measure_target_step: bool = True) -> BatchResult:
    """Self-speculative decoding of a batch: the model drafts ``gamma`` tokens per round over a StreamingLLM view
    (``sinks`` first + ``window`` recent tokens) of its own cache and verifies them with full attention.

    ``input_ids`` (B, prompt_len), ragged prompts marked by ``attention_mask`` (1 = token). Lossless: greedy rows
    equal the model's own greedy decoding; sampled rows follow its distribution. ``prefilled``: a
    :func:`prefill` of these prompts to decode from (it is consumed; pass ``state.copy()`` to reuse one);
    ``measure_target_step`` times a few full-attention decode steps before decoding (T_T for the ratios).
    """
    _check_args(max_new_tokens, gamma, temperature, window, sinks)
    state = _start(model, input_ids, attention_mask, max_new_tokens + gamma + 1, prefilled)
    device = state.pending.device
    eos, generator = eos_ids(model, eos_token_id), make_generator(seed, device)
    batch = state.cache.batch_size
    stats = SelfSpecStats(batch_size=batch, gamma=gamma, window=window, sinks=sinks, temperature=float(temperature),
                          prefill_s=state.seconds, accepted_per_round=[[] for _ in range(batch)])
    if measure_target_step:
        stats.target_step_s = _time_target_step(state)
    generated: list[list[int]] = [[] for _ in range(batch)]
    active = list(range(batch))
    pending = state.pending
    start = time.perf_counter()
    while active:
        tick = time.perf_counter()
        view = StreamingView(state.cache, sinks=sinks, window=window)
        drafts, probs, token = [], [], pending
        for _ in range(gamma):
            token, p = sample(state.model(token, view, last_only=True)[:, -1], temperature, generator)
            drafts.append(token)
            probs.append(p)
        drafts = torch.cat(drafts, dim=1)  # (B, gamma)
        state.cache.rollback(gamma)  # the provisional keys/values are overwritten by the verify forward
        sync(device)
        tock = time.perf_counter()
        logits = state.model(torch.cat([pending, drafts], dim=1), state.cache)  # (B, gamma + 1, V)
        k, nxt = accept(logits, drafts, None if temperature == 0 else torch.stack(probs, dim=1), temperature,
                        generator)
        host = torch.cat([k[:, None], drafts, nxt[:, None]], dim=1).tolist()  # the round's one host sync
        verified = time.perf_counter()
        state.cache.rollback([gamma - n for n, *_ in host])  # keep pending + the accepted drafts
        still, emitted, rows = [], 0, len(active)
        for i, (b, (n, *rest)) in enumerate(zip(active, host)):
            stats.accepted_per_round[b].append(n)
            stats.accepted += n
            before = len(generated[b])
            if not finish_row(generated[b], rest[:n] + [rest[-1]], max_new_tokens, eos):
                still.append(i)
            emitted += len(generated[b]) - before
        active, pending = _drop_finished(state, still, active, nxt[:, None])
        stats.record_round(rows, tock - tick, verified - tock, time.perf_counter() - tick, emitted)
    sync(device)
    stats.decode_s = time.perf_counter() - start
    stats.new_tokens = sum(map(len, generated))
    return BatchResult(generated, stats.finish())


@torch.inference_mode()
def batched_decode(model, input_ids: torch.Tensor, max_new_tokens: int, temperature: float = 0.0,
                   seed: int | None = None, *, attention_mask: torch.Tensor | None = None,
                   eos_token_id: int | list[int] | None = None, prefilled: Prefilled | None = None) -> BatchResult:
    """The baseline: batched autoregressive decoding with full attention, one forward per token, on the same
    prefill and cache as :func:`self_speculative_generate`."""
    _check_args(max_new_tokens, 1, temperature, 1, 0)
    state = _start(model, input_ids, attention_mask, max_new_tokens, prefilled)
    device = state.pending.device
    stats = SelfSpecStats(method="autoregressive", batch_size=state.cache.batch_size, temperature=float(temperature),
                          prefill_s=state.seconds)
    start = time.perf_counter()
    generated, _ = decode_batch(lambda token: state.model(token, state.cache, last_only=True)[:, -1],
                                state.cache.retain_rows, state.pending, max_new_tokens, eos_ids(model, eos_token_id),
                                temperature, make_generator(seed, device),
                                on_step=lambda rows, seconds: stats.record_round(rows, 0.0, seconds, seconds, rows))
    sync(device)
    stats.decode_s = time.perf_counter() - start
    stats.new_tokens = sum(map(len, generated))
    stats.target_step_s = stats.decode_s / stats.rounds
    stats.tau = 1.0
    return BatchResult(generated, stats.finish())
