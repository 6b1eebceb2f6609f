"""Speculative decoding inside the decode worker: a ragged batch whose step is a speculative round (notebook 14).

:class:`SpecDecodeBatch` is the engine's :class:`~helpers.batching.model_ops.DecodeBatch` with a drafter and a
policy. Rows join and leave between steps as before; each step the policy gives every row its γ (0: the row only
decodes), the drafter proposes up to γ tokens per row, ONE target forward verifies every row's pending token and
drafts, each row keeps what :func:`helpers.specdec.core.accept` (the rule every method of the workbook uses)
accepts, and each row's cache rolls back to its own committed tokens. No verify loop of its own.

Rows verify different numbers of drafts in one rectangular forward: shorter rows are padded at the END. Causal
attention keeps a row's real tokens blind to its padding, and the padding is rolled back with the rejected
drafts, so padding costs compute, never correctness. That is also why a row's γ below the step's largest saves
only its drafting: the verify forward is as wide for every row.

Invariant between steps (as in :mod:`helpers.specdec.batched`): with N_b the tokens row b has committed (prompt +
generated), the target cache holds the first N_b - 1; the last is the pending token the next forward feeds.

Drafters (``DRAFTERS``): ``draft`` (a small draft model with its own ragged cache, prefilled when a row joins),
``self`` (the target drafting over a StreamingLLM view of its own cache, MagicDec's self-speculation for long
prompts: no second cache), ``lookup`` (prompt lookup over each row's tokens: no model) and ``feature`` (notebook
13's EAGLE-style feature draft: one layer over the target's own features, which the prefill worker sends with a
prompt's KV and every verify forward returns).
"""
from __future__ import annotations

import time

import torch

from helpers.batching.model_ops import DecodeBatch, _engine_model
from helpers.batching.request import Request
from helpers.models.streaming import StreamingView
from helpers.specdec.core import accept, sample
from helpers.specdec.lookup import NgramIndex
from helpers.timing import sync

PAD = 0  # the token id written in padding slots (any id works: they are masked by causality and rolled back)


def extend_ragged(model, cache, rows: list[list[int]], return_hidden: bool = False):
    """Append ``rows[b]`` (at least one token each, lengths may differ) to row b of ``cache``; returns the
    logits ``(B, longest, V)`` (and the hidden states the LM head read, ``(B, longest, H)``, with
    ``return_hidden``). Shorter rows are padded at the end and the padding is rolled back at once."""
    ids = _padded(rows, cache.device)
    width = ids.shape[1]
    _ensure_room(cache, width, model.config.max_seq_len)
    out = model(ids, cache, return_hidden=return_hidden)
    cache.rollback([width - len(row) for row in rows])
    return out


def _padded(rows: list[list[int]], device) -> torch.Tensor:
    """Token rows of different lengths as one (B, longest) id tensor, padded at the end with ``PAD``."""
    ids = torch.full((len(rows), max(map(len, rows))), PAD, dtype=torch.long, device=device)
    for b, row in enumerate(rows):
        ids[b, :len(row)] = torch.tensor(row, device=device)
    return ids


def _ensure_room(cache, new: int, limit: int) -> None:
    need = max(cache.lengths, default=0) + new
    if need > cache.capacity:
        cache.reserve(min(max(2 * cache.capacity, need), limit))


def _pick(logits: torch.Tensor, lengths: list[int]) -> torch.Tensor:
    """Row b's logits at its last real position ``lengths[b] - 1``: (B, V)."""
    index = torch.tensor([n - 1 for n in lengths], device=logits.device)
    return logits[torch.arange(len(lengths), device=logits.device), index]


def _draft_chain(logits, gamma: int, step, temperature: float, generator):
    """Sample ``gamma`` tokens per row, each from the logits (B, V) that ``step(token)`` returns after the one before
    (the first from ``logits``): the drafts (B, γ) as lists and their distributions (B, γ, V; None when greedy)."""
    drafts, dists = [], []
    for i in range(gamma):
        token, dist = sample(logits, temperature, generator)
        drafts.append(token)
        dists.append(dist)
        if i + 1 < gamma:
            logits = step(token)
    return torch.cat(drafts, dim=1).tolist(), None if temperature == 0 else torch.stack(dists, dim=1)


class DraftModelDrafter:
    """A draft model with its own ragged cache over the same rows; the cache holds a prefix of each row's tokens
    (``lengths``) and catches up with what the row committed since, in the first draft forward of a round."""

    name = "draft"
    needs_features = False

    def __init__(self, draft_model, limit: int) -> None:
        self.model = _engine_model(draft_model)
        self.cache = self.model.new_cache(0, 1)
        self.limit = limit
        self._fed: int | None = None  # drafts the last proposal fed the draft (None: it proposed nothing since)

    def join(self, requests: list[Request], features=None) -> None:
        kvs = []
        for request in requests:  # the draft is small: prefill it here, one prompt at a time
            cache = self.model.new_cache(1, request.prompt_len)
            self.model(torch.tensor([request.input_tokens], device=cache.device), cache, last_only=True)
            kvs.append(cache.row_kv(0))
        self.cache.append_rows(kvs)

    def leave(self, keep: list[int]) -> None:
        self.cache.select_rows(keep)

    def propose(self, batch: "SpecDecodeBatch", gammas: list[int], temperature: float, generator):
        """``max(gammas)`` draft tokens per row (B, γ) and their distributions (B, γ, V; None when greedy)."""
        gamma = max(gammas)
        catch_up = [r.input_tokens[n:] + r.generated[max(0, n - r.prompt_len):]  # what the row committed since
                    for r, n in zip(batch.requests, self.cache.lengths)]
        logits = _pick(extend_ragged(self.model, self.cache, catch_up), [len(c) for c in catch_up])

        def step(token):
            _ensure_room(self.cache, 1, self.limit)
            return self.model(token, self.cache, last_only=True)[:, -1]

        self._fed = gamma - 1
        return _draft_chain(logits, gamma, step, temperature, generator)

    def commit(self, committed_before: list[int], accepted: list[int], new: list[list[int]], hidden=None) -> None:
        """Keep the drafted tokens that were accepted (the draft saw the first ``gamma - 1`` of them); after a step
        without drafting the cache stays behind and catches up at the next round."""
        if self._fed is not None:
            keep = [n + min(k, self._fed) for n, k in zip(committed_before, accepted)]
            self.cache.rollback([have - want for have, want in zip(self.cache.lengths, keep)])
            self._fed = None


class SelfDrafter:
    """The target drafts for itself over a StreamingLLM view (``sinks`` first + ``window`` recent tokens) of its
    own cache, writing provisional keys that the verify forward overwrites."""

    name = "self"
    needs_features = False

    def __init__(self, *, window: int, sinks: int) -> None:
        self.window, self.sinks = window, sinks

    def join(self, requests: list[Request], features=None) -> None: ...

    def leave(self, keep: list[int]) -> None: ...

    def commit(self, committed_before: list[int], accepted: list[int], new: list[list[int]], hidden=None) -> None: ...

    def propose(self, batch: "SpecDecodeBatch", gammas: list[int], temperature: float, generator):
        gamma = max(gammas)
        view = StreamingView(batch.cache, sinks=self.sinks, window=self.window)
        _ensure_room(batch.cache, gamma, batch.limit)

        def step(token):
            return batch.model(token, view, last_only=True)[:, -1]

        proposal = _draft_chain(step(batch.pending()), gamma, step, temperature, generator)
        batch.cache.rollback(gamma)
        return proposal


class LookupDrafter:
    """Prompt lookup: each row proposes the tokens that followed the last earlier occurrence of its suffix (up to
    ``ngram`` tokens) in its own prompt and output; a row without a match proposes nothing."""

    name = "lookup"
    needs_features = False

    def __init__(self, *, ngram: int = 3) -> None:
        self.ngram = ngram
        self.indexes: list[NgramIndex] = []

    def join(self, requests: list[Request], features=None) -> None:
        self.indexes += [NgramIndex(self.ngram, r.input_tokens + r.generated) for r in requests]

    def leave(self, keep: list[int]) -> None:
        self.indexes = [self.indexes[i] for i in keep]

    def commit(self, committed_before: list[int], accepted: list[int], new: list[list[int]], hidden=None) -> None:
        for index, tokens in zip(self.indexes, new):
            index.add(tokens)

    def propose(self, batch: "SpecDecodeBatch", gammas: list[int], temperature: float, generator):
        """Up to ``gammas[b]`` tokens per row; a proposal is a point mass (the distributions are built at verify)."""
        return [index.propose(g) if g else [] for index, g in zip(self.indexes, gammas)], None


class FeatureDrafter:
    """EAGLE's feature-level draft (notebook 13's :class:`~helpers.specdec.feature_draft.FeatureDraft`) over the
    ragged batch: one layer of its own, drafting from the pairs (target feature f_t, token t+1). The draft's cache
    holds every row's pairs built from TRUE features; the pairs a row committed since (from the verify forward's
    features, or the prompt's from the prefill worker) wait in ``pending`` and are fed in the next round's first
    draft forward, all rows together, ragged."""

    name = "feature"
    needs_features = True

    def __init__(self, draft, limit: int) -> None:
        self.draft = draft
        self.cache = draft.body.new_cache(0, 1)
        self.limit = limit
        self.pending: list[tuple[torch.Tensor, list[int]]] = []  # per row: features (n, H) and their next tokens
        self._kept: list[int] | None = None  # the cache's lengths once a round fed ``pending`` (None: not fed)

    def join(self, requests: list[Request], features: list[torch.Tensor] | None = None) -> None:
        """Feed each joining row's prompt pairs but the last (one row at a time: the draft is one layer); the last,
        (f of the prompt's last token, the first generated token), waits for the first round."""
        if features is None:
            raise ValueError("the feature drafter needs the prompt's features: prefill with features=True")
        kvs = []
        for request, feature in zip(requests, features):
            tokens = request.input_tokens[1:] + request.generated[:1]
            cache = self.draft.new_cache(max(1, len(tokens) - 1))
            if len(tokens) > 1:
                self.draft(feature[None, :-1], torch.tensor([tokens[:-1]], device=feature.device), cache,
                           last_only=True)
            kvs.append(cache.row_kv(0))
            self.pending.append((feature[-1:], tokens[-1:]))
        self.cache.append_rows(kvs)

    def leave(self, keep: list[int]) -> None:
        self.cache.select_rows(keep)
        self.pending = [self.pending[i] for i in keep]

    def propose(self, batch: "SpecDecodeBatch", gammas: list[int], temperature: float, generator):
        gamma = max(gammas)
        lengths = [len(tokens) for _, tokens in self.pending]
        width, hidden = max(lengths), self.pending[0][0].shape[-1]
        features = self.pending[0][0].new_zeros(len(lengths), width, hidden)
        for b, (feature, _) in enumerate(self.pending):
            features[b, :len(feature)] = feature
        ids = _padded([tokens for _, tokens in self.pending], features.device)
        _ensure_room(self.cache, width, self.limit)
        logits, predicted = self.draft(features, ids, self.cache)
        self.cache.rollback([width - n for n in lengths])
        self._kept = list(self.cache.lengths)  # the cache holds true pairs only up to here
        feature = _pick(predicted, lengths)[:, None]

        def step(token):
            nonlocal feature  # each draft forward reads the feature the one before predicted
            _ensure_room(self.cache, 1, self.limit)
            logits, feature = self.draft(feature, token, self.cache, last_only=True)
            return logits[:, -1]

        return _draft_chain(_pick(logits, lengths), gamma, step, temperature, generator)

    def commit(self, committed_before: list[int], accepted: list[int], new: list[list[int]], hidden=None) -> None:
        """Row b's true pairs this step: the target's features at [pending, its accepted drafts] with the tokens that
        followed them (``new[b]``). Once fed, the draft's cache drops what it built on its own predictions."""
        pairs = [(hidden[b, :len(tokens)], tokens) for b, tokens in enumerate(new)]
        if self._kept is not None:  # fed this round: drop the entries built from predicted features
            self.cache.rollback([n - kept for n, kept in zip(self.cache.lengths, self._kept)])
            self.pending, self._kept = pairs, None
        else:  # a step without drafting: the new pairs join the ones still waiting
            self.pending = [(torch.cat([f, g]), t + u) for (f, t), (g, u) in zip(self.pending, pairs)]


DRAFTERS = ("draft", "self", "lookup", "feature")


class SpecDecodeBatch(DecodeBatch):
    """A ragged decode batch whose ``advance(gammas)`` is one speculative round (greedy or sampled)."""

    def __init__(self, model, drafter, *, temperature: float = 0.0, generator=None, headroom: int = 0) -> None:
        super().__init__(model, headroom=headroom)
        self.drafter, self.temperature, self.generator = drafter, temperature, generator
        self.limit = self.model.config.max_seq_len

    def add(self, requests: list[Request], kvs: list[torch.Tensor], features: list[torch.Tensor] | None = None) -> None:
        """Join prefilled rows; ``features[i]``: the target's features over request i's prompt (``prompt_len``, H),
        which a drafter with ``needs_features`` drafts from (:func:`~helpers.batching.model_ops.prefill`)."""
        if requests:
            super().add(requests, kvs)
            self.drafter.join(requests, features)

    def remove(self, finished: list[Request]) -> list[int]:
        keep = super().remove(finished)
        if finished:
            self.drafter.leave(keep)
        return keep

    def pending(self) -> torch.Tensor:
        return torch.tensor([[r.generated[-1]] for r in self.requests], device=self.cache.device)

    @torch.inference_mode()
    def advance(self, gammas: list[int]) -> tuple[list[list[int]], dict]:
        """One round: row b drafts up to ``gammas[b]`` tokens; returns each row's new tokens (its accepted drafts,
        then the target's token) and what the round did (``draft_s``, ``verify_s``, ``gamma``, ``drafted``,
        ``accepted`` per row)."""
        start = time.perf_counter()
        drafts, dists = self._drafts(gammas)
        drafted = [len(d) for d in drafts]
        sync(self.cache.device)
        drafted_at = time.perf_counter()
        committed_before = [len(r.input_tokens) + len(r.generated) for r in self.requests]
        features = self.drafter.needs_features
        if max(drafted, default=0) == 0:
            out = self.model(self.pending(), self._room(1), last_only=True, return_hidden=features)
            logits, hidden = out if features else (out, None)
            tokens, _ = sample(logits[:, -1], self.temperature, self.generator)
            new = [[t] for t in tokens[:, 0].tolist()]
            accepted = [0] * len(new)
        else:
            new, accepted, hidden = self._verify(drafts, dists, drafted)
        self.drafter.commit(committed_before, accepted, new, hidden)
        return new, {"draft_s": drafted_at - start, "verify_s": time.perf_counter() - drafted_at,
                     "gamma": max(drafted, default=0), "drafted": drafted, "accepted": accepted}

    def _room(self, new: int):
        _ensure_room(self.cache, new, self.limit)
        return self.cache

    def _drafts(self, gammas: list[int]) -> tuple[list[list[int]], torch.Tensor | None]:
        if max(gammas, default=0) == 0:
            return [[] for _ in gammas], None
        proposals, dists = self.drafter.propose(self, gammas, self.temperature, self.generator)
        return [row[:g] for row, g in zip(proposals, gammas)], dists

    def _verify(self, drafts: list[list[int]], dists, drafted: list[int]):
        """Each row's new tokens and accepted count, and the target's features at [pending, drafts] (None unless
        the drafter reads them)."""
        rows = [[r.generated[-1]] + d for r, d in zip(self.requests, drafts)]
        out = extend_ragged(self.model, self.cache, rows, return_hidden=self.drafter.needs_features)
        logits, hidden = out if self.drafter.needs_features else (out, None)  # the one verify forward, (B, 1 + γ, V)
        if dists is None and self.temperature > 0:  # lookup: a proposal is a point mass
            dists = torch.zeros(*logits.shape[:1], max(drafted), logits.shape[-1], device=logits.device)
            for b, d in enumerate(drafts):
                dists[b, torch.arange(len(d)), torch.tensor(d, dtype=torch.long)] = 1.0
        k = torch.zeros(len(rows), dtype=torch.long, device=logits.device)
        nxt = torch.zeros(len(rows), dtype=torch.long, device=logits.device)
        for g in sorted(set(drafted)):  # rows with the same γ share one acceptance test
            idx = torch.tensor([b for b, n in enumerate(drafted) if n == g], device=logits.device)
            if g == 0:
                nxt[idx] = sample(logits[idx, 0], self.temperature, self.generator)[0][:, 0]
                continue
            ids = torch.tensor([drafts[b] for b in idx.tolist()], device=logits.device)
            k[idx], nxt[idx] = accept(logits[idx, :g + 1], ids, None if dists is None else dists[idx, :g],
                                      self.temperature, self.generator)
        host_k, host_next = k.tolist(), nxt.tolist()  # the round's one host sync
        self.cache.rollback([g - n for g, n in zip(drafted, host_k)])
        return [d[:n] + [t] for d, n, t in zip(drafts, host_k, host_next)], host_k, hidden


def make_drafter(name: str, *, draft_model=None, limit: int, window: int = 64, sinks: int = 4, ngram: int = 3):
    """The drafter called ``name`` (one of ``DRAFTERS``), with a clear error for a bad name or a missing model."""
    if name == "draft":
        if draft_model is None:
            raise ValueError("the 'draft' drafter needs a draft model: set SpecConfig.draft to a model name")
        return DraftModelDrafter(draft_model, limit)
    if name == "self":
        return SelfDrafter(window=window, sinks=sinks)
    if name == "lookup":
        return LookupDrafter(ngram=ngram)
    if name == "feature":
        if draft_model is None:
            raise ValueError("the 'feature' drafter needs a feature draft: helpers.specdec.load_feature_draft(target)")
        return FeatureDrafter(draft_model, limit)
    raise ValueError(f"unknown drafter {name!r}; choose one of {', '.join(DRAFTERS)}")
