"""Tree-based speculative decoding: the draft proposes a TREE of continuations, the target verifies every node
in ONE forward, and the round keeps the longest path the target agrees with.

A linear round (:func:`~helpers.specdec.linear.speculative_generate`) loses everything after the first wrong
draft token. A tree hedges: where the draft is unsure, several siblings are verified at once (SpecInfer,
Medusa, EAGLE). Two shapes:

* **static** (``tree="static"``, ``topk=(4, 2, 2, 1)``): every node at depth d gets the draft's ``topk[d]``
  best children — a fixed shape, independent of the draft's confidence;
* **dynamic** (``tree="dynamic"``, EAGLE-2 style): each depth expands the ``topk`` nodes with the highest
  cumulative draft log-probability (their ``topk`` best children each), and of everything drafted the ``budget``
  highest-scoring nodes are verified. Confident branches grow deep, unsure ones wide.

Both cost ``depth`` draft forwards per round, as a linear round of γ = depth does: the draft expands a whole
level in one forward, attending to each node's own ancestors through a tree mask over the round's stored nodes
(:meth:`helpers.models.decoder.KVCache.attention_mask`). The target sees the pending token and all nodes with a tree
mask and per-node positions (position = the pending token's + depth). Afterwards both caches keep the accepted
path in place (:meth:`~helpers.models.decoder.KVCache.compact`): nothing is recomputed.

Losslessness:

* greedy: walk from the root, follow the child equal to the target's argmax; the output equals plain greedy
  decoding token for token;
* sampling (temperature > 0): recursive rejection sampling without replacement. A node's children are drawn
  from the draft distribution p WITHOUT replacement (Gumbel-top-k), and tried in that order: child c is accepted
  with probability min(1, q(c)/p(c)); on rejection q <- norm(max(0, q - p)), c is removed from p and p is
  renormalised (the next child is a draw from exactly that p), and when every child fails the token is drawn from
  the final q. Each step is an exact rejection sampler for the current q, so the emitted token follows the
  target's q. This needs the candidates to BE a sample from p: which of a node's candidates are verified must
  not depend on the candidates themselves. Hence, when sampling, the dynamic tree still chooses which nodes to
  expand by score (decided before their children are drawn) but keeps every drafted candidate — the final
  ``budget`` rerank, which would prune candidates by their own probability, is greedy-only. Top-k candidates
  with the acceptance rule above would NOT be lossless (the first child would be accepted with probability
  min(1, q/p) instead of q).

Trees need the minimal runtime (:mod:`helpers.models.runtime`): tree attention masks and in-place compaction
exist only in the workbook's model file, i.e. for Qwen3, Llama and OLMo models.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from helpers.models.runtime import cached_decoder, resolve_runtime
from helpers.specdec.chain import prefill_target
from helpers.specdec.methods import Method, register
from helpers.specdec.core import (GenerationResult, GenerationStats, PhaseClock, check_draft, check_generation,
                                  eos_ids, finish_row, make_generator, probs)

__all__ = ["ModelTreeDrafter", "TreeDrafter", "TreeRound", "TreeStats", "generate_tree", "tree_generate", "tree_shape"]

TREES = ("dynamic", "static")
DYNAMIC_DEFAULTS = {"depth": 5, "topk": 4, "budget": 16}  # a dynamic tree's shape where the caller names none


@dataclass
class TreeRound:
    """One verified tree (for drawing): node 0 is the pending token, nodes 1.. the drafts."""

    tokens: list[int]  # token per node
    parents: list[int]  # parent node per node (-1 for the root)
    scores: list[float]  # cumulative draft log-probability (0 for the root)
    path: list[int]  # accepted nodes, root first
    next_token: int  # the target's token after the path: a correction, or a bonus when the path ends at a leaf

    @property
    def depths(self) -> list[int]:
        depth = [0] * len(self.parents)
        for node, parent in enumerate(self.parents):
            if parent >= 0:
                depth[node] = depth[parent] + 1
        return depth

    @property
    def bonus(self) -> bool:
        """Whether the path ended at a leaf (the next token is a bonus, not a correction)."""
        return self.path[-1] not in self.parents


@dataclass
class TreeStats(GenerationStats):
    """:class:`GenerationStats` plus the tree's size. ``tau`` = new tokens per target forward of the rounds
    (= ``tokens_per_round``): the accepted drafts plus the target's own token, the quantity trees raise."""

    tree: str = ""
    nodes_per_round: list[int] = field(default_factory=list, repr=False)
    mean_nodes: float = float("nan")
    tau: float = float("nan")

    def finish(self) -> "TreeStats":
        super().finish()
        if self.rounds:
            self.mean_nodes = sum(self.nodes_per_round) / self.rounds
            self.tau = self.tokens_per_round
        return self

    def as_dict(self) -> dict:
        row = super().as_dict()
        row.pop("nodes_per_round")
        return row


@dataclass
class _Tree:
    """The round's tree on the host: node 0 is the root (the pending token)."""

    tokens: list[int] = field(default_factory=lambda: [0])
    parents: list[int] = field(default_factory=lambda: [-1])
    depths: list[int] = field(default_factory=lambda: [0])
    scores: list[float] = field(default_factory=lambda: [0.0])
    keys: list[int] = field(default_factory=lambda: [-1])  # acceptance-table cell per node (rank, confidence)
    draft_slot: dict = field(default_factory=dict)  # node -> offset in the draft's round block (expanded nodes)
    draft_probs: dict = field(default_factory=dict)  # node -> the draft's distribution over its children (sampling)

    def add(self, token: int, parent: int, score: float, key: int) -> int:
        self.tokens.append(token)
        self.parents.append(parent)
        self.depths.append(self.depths[parent] + 1)
        self.scores.append(score)
        self.keys.append(key)
        return len(self.tokens) - 1


    def ancestors(self, node: int) -> list[int]:
        """node, its parent, ..., the root."""
        chain = [node]
        while self.parents[chain[-1]] >= 0:
            chain.append(self.parents[chain[-1]])
        return chain


class AcceptanceTable:
    """How often the target accepts a draft candidate, by its rank among its siblings and the draft's probability
    for it, counted over this generation's verified trees.

    A dynamic tree ranks nodes by their chance of being accepted. EAGLE-2 takes the draft's own cumulative
    probability for that chance; a distilled draft's probabilities are not calibrated (its argmax matches the
    target far more often than its probability says), so here each node's chance is the estimated acceptance
    rate of its cell, ``(accepted + m * p) / (tried + m)``: the draft's probability p as a prior worth m
    observations, replaced by the measured rate as rounds accumulate.
    """

    EDGES = (0.1, 0.3, 0.6, 0.9)  # draft-probability buckets
    PRIOR = 4.0

    def __init__(self, ranks: int):
        self.ranks = ranks
        cells = ranks * (len(self.EDGES) + 1)
        self.tried, self.accepted = [0] * cells, [0] * cells

    def key(self, rank: int, prob: float) -> int:
        return min(rank, self.ranks - 1) * (len(self.EDGES) + 1) + sum(prob >= e for e in self.EDGES)

    def chance(self, key: int, prob: float) -> float:
        return (self.accepted[key] + self.PRIOR * prob) / (self.tried[key] + self.PRIOR)

    def record(self, nodes: "_Tree", children: list[list[int]], path: list[int], greedy: bool) -> None:
        """Count the candidates tested at every reached node: greedy verification tests all of a node's
        children at once; sampling tries them in order and stops at the accepted one."""
        for depth, node in enumerate(path):
            chosen = path[depth + 1] if depth + 1 < len(path) else None
            for child in children[node]:
                self.tried[nodes.keys[child]] += 1
                if child == chosen:
                    self.accepted[nodes.keys[child]] += 1
                    if not greedy:
                        break


def tree_shape(tree: str, depth: int | None, topk, budget: int | None) -> tuple[int, tuple[int, ...], int | None]:
    """Validated ``(depth, widths, budget)``; static widths come from ``topk`` (a tuple, one width per depth), a
    dynamic tree's missing values from :data:`DYNAMIC_DEFAULTS`."""
    if tree not in TREES:
        raise ValueError(f"tree must be one of {TREES}, got {tree!r}")
    if tree == "static":
        if topk is None:
            raise ValueError("a static tree needs topk = one int >= 1 per depth, e.g. (4, 2, 2, 1); got None")
        widths = (topk,) * (depth or 1) if isinstance(topk, int) else tuple(topk)
        if depth is not None and depth != len(widths):
            raise ValueError(f"a static tree's depth is len(topk) = {len(widths)}; got depth={depth}")
        if not widths or any(isinstance(w, bool) or not isinstance(w, int) or w < 1 for w in widths):
            raise ValueError(f"a static tree needs topk = one int >= 1 per depth, e.g. (4, 2, 2, 1); got {topk!r}")
        return len(widths), widths, None
    depth, topk, budget = (DYNAMIC_DEFAULTS[name] if value is None else value
                           for name, value in (("depth", depth), ("topk", topk), ("budget", budget)))
    for name, value in (("depth", depth), ("topk", topk), ("budget", budget)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"a dynamic tree needs {name} as an int >= 1, got {value!r} "
                             "(e.g. depth=5, topk=4, budget=16)")
    return depth, (topk,) * depth, budget


def max_nodes(depth: int, widths: tuple[int, ...], budget: int | None, tree: str) -> int:
    """The most draft nodes one round can verify (cache room to reserve)."""
    if tree == "static":
        total, level = 0, 1
        for width in widths:
            level *= width
            total += level
        return total
    drafted = widths[0] + (depth - 1) * widths[0] * widths[0]
    return drafted if budget is None else min(budget, drafted)


def stored_nodes(depth: int, widths: tuple[int, ...], tree: str) -> int:
    """The most nodes a drafter writes into its own cache in one round: every level's expanded frontier (the last
    level is drafted, never fed). A budget prunes only what the target verifies, so this can exceed
    :func:`max_nodes`."""
    if tree == "static":
        return max_nodes(depth - 1, widths[:-1], None, tree)
    return (depth - 1) * widths[0]


def _check_tree_pair(target, draft) -> str:
    check_draft(target, draft)
    return tree_runtime(target, draft)


def tree_runtime(*models) -> str:
    """Trees need the minimal runtime: tree masks and in-place compaction exist only in the workbook's model file."""
    try:
        return resolve_runtime("minimal", *models)
    except ValueError as err:
        raise ValueError(f"tree speculation needs tree attention masks and in-place cache compaction, which only the "
                         f"workbook's model file implements (Qwen3, Llama and OLMo models): {err}") from None


def _cache_capacity(target, input_ids: torch.Tensor, max_new_tokens: int, nodes_room: int) -> int:
    """Cache slots for the sequence plus one round's tree nodes (they occupy slots until the round's compaction)."""
    capacity = input_ids.shape[1] + max_new_tokens + nodes_room + 1
    limit = target.config.max_position_embeddings
    if capacity > limit:
        raise ValueError(f"the prompt ({input_ids.shape[1]}) + max_new_tokens ({max_new_tokens}) + one round's "
                         f"{nodes_room} tree nodes need {capacity} cache slots, past the model's context of {limit}; "
                         "lower max_new_tokens or the tree's size")
    return capacity


class TreeDrafter:
    """What the tree verifier needs from a drafting method (a base class, as :class:`~helpers.specdec.chain.Drafter`
    is for chains): ``depth`` (the most levels a round drafts), ``nodes_room`` (the most nodes the target verifies)
    and ``stored_room`` (the most its own cache writes in a round, :func:`stored_nodes`); ``start`` sees the prompt
    and the room its cache needs; ``propose_tree`` returns the round's :class:`_Tree` under the pending token, with,
    when sampling, the draft distribution each expanded node's children were drawn from (``draft_probs``);
    ``commit_tree`` hears the accepted path and the next token (and the target's hidden states at every node, with
    ``needs_hidden``)."""

    needs_hidden = False
    forwards = 0
    depth = 0
    nodes_room = 0
    stored_room = 0

    def start(self, input_ids: torch.Tensor, capacity: int, hidden: torch.Tensor | None = None) -> None:
        pass

    def propose_tree(self, pending: int, root_position: int, depth: int, temperature: float, generator) -> "_Tree":
        raise NotImplementedError

    def commit_tree(self, nodes: "_Tree", path: list[int], next_token: int, hidden: torch.Tensor | None) -> None:
        pass


class ModelTreeDrafter(TreeDrafter):
    """A separate draft model expanding a whole tree level per forward (tree mask over the round's stored nodes);
    its cache keeps the accepted path in place afterwards."""

    def __init__(self, draft, runtime: str, tree: str, depth: int, widths: tuple[int, ...], budget: int | None):
        self.draft, self.runtime, self.tree, self.depth, self.widths, self.budget = (draft, runtime, tree, depth,
                                                                                     widths, budget)
        self.nodes_room = max_nodes(depth, widths, budget, tree)
        self.stored_room = stored_nodes(depth, widths, tree)
        self.table = AcceptanceTable(max(widths))
        self.cache = self.pending = self.start_length = None
        self.forwards, self.greedy = 0, True

    def start(self, input_ids: torch.Tensor, capacity: int, hidden=None) -> None:
        self.cache = cached_decoder(self.draft, self.runtime, capacity)
        if input_ids.shape[1] > 1:
            self.cache.extend(input_ids[:, :-1])
            self.forwards += 1
        self.pending = [int(input_ids[0, -1])]  # committed tokens not yet in the draft cache (the last: pending)

    def propose_tree(self, pending: int, root_position: int, depth: int, temperature: float, generator) -> "_Tree":
        self.start_length, self.greedy = self.cache.length, temperature == 0
        nodes = _Tree(tokens=[pending])
        if depth:
            draft_tree(nodes, ModelLevels(self.cache, self.pending, root_position), depth, self.widths, self.tree,
                       self.budget if self.greedy else None, temperature, generator, self.table)
            self.forwards += depth
        return nodes

    def commit_tree(self, nodes: "_Tree", path: list[int], next_token: int, hidden=None) -> None:
        self.table.record(nodes, _children(nodes), path, self.greedy)
        if self.cache.length == self.start_length:  # a round without drafts: the draft saw nothing
            self.pending = self.pending + [next_token]
            return
        # the draft stored its pending tokens, then the expanded nodes; it keeps the path's expanded nodes
        written = [node for node in path[1:] if node in nodes.draft_slot]
        keep = list(range(len(self.pending))) + [len(self.pending) + nodes.draft_slot[n] for n in written]
        self.cache.cache.compact([self.start_length], [keep])
        self.pending = [nodes.tokens[n] for n in path[1 + len(written):]] + [next_token]


def _gumbel_topk(log_probs: torch.Tensor, k: int, generator) -> torch.Tensor:
    """Indices of k draws WITHOUT replacement from softmax(log_probs), in draw order (the Gumbel-top-k trick)."""
    uniform = torch.rand(log_probs.shape, device=log_probs.device, generator=generator).clamp_min(1e-20)
    return (log_probs - torch.log(-torch.log(uniform))).topk(k, dim=-1).indices


@torch.inference_mode()
def tree_generate(
    target,
    draft,
    input_ids: torch.Tensor,
    max_new_tokens: int,
    temperature: float = 0.0,
    seed: int | None = None,
    *,
    tree: str = "dynamic",
    depth: int | None = None,
    topk=None,
    budget: int | None = None,
    eos_token_id: int | list[int] | None = None,
    time_phases: bool = True,
    record_rounds: bool = False,
) -> GenerationResult:
    """Speculative decoding with a draft tree per round (see the module docstring); same result type as
    :func:`~helpers.specdec.linear.speculative_generate`, with :class:`TreeStats`.

    ``tree="dynamic"``: ``depth`` levels, ``topk`` children per expanded node and ``topk`` expanded nodes per
    level, the best ``budget`` nodes verified (greedy); unset, they are :data:`DYNAMIC_DEFAULTS` (5, 4, 16).
    ``tree="static"``: ``topk`` is the width per depth, e.g. ``(4, 2, 2, 1)``; ``depth`` may repeat its length and
    ``budget`` is unused. ``record_rounds`` keeps every verified tree
    in ``result.rounds`` (a list of :class:`TreeRound`) for drawing.
    """
    depth, widths, budget = tree_shape(tree, depth, topk, budget)  # prompt and budget: checked by generate_tree
    runtime = _check_tree_pair(target, draft)
    drafter = ModelTreeDrafter(draft, runtime, tree, depth, widths, budget if temperature == 0 else None)
    return generate_tree(target, drafter, input_ids, max_new_tokens, temperature, seed,
                         stats=TreeStats(runtime=runtime, tree=tree), eos_token_id=eos_token_id,
                         time_phases=time_phases, record_rounds=record_rounds)


@torch.inference_mode()
def generate_tree(target, drafter: TreeDrafter, input_ids: torch.Tensor, max_new_tokens: int,
                  temperature: float = 0.0, seed: int | None = None, *, stats: "TreeStats", eos_token_id=None,
                  time_phases: bool = True, record_rounds: bool = False) -> GenerationResult:
    """The one tree verifier: any tree drafter's rounds, each verified in ONE target forward with a tree mask
    (lossless: greedy follows the target's argmax down the tree; sampling is recursive rejection sampling)."""
    check_generation(target, input_ids, max_new_tokens, temperature)
    eos, generator = eos_ids(target, eos_token_id), make_generator(seed, input_ids.device)
    clock = PhaseClock(input_ids.device, time_phases)
    capacity = _cache_capacity(target, input_ids, max_new_tokens, drafter.nodes_room)
    target_cache = cached_decoder(target, tree_runtime(target), capacity)
    # the drafter's cache: the committed tokens and the nodes it writes in a round (a budget may verify fewer)
    drafter.start(input_ids, input_ids.shape[1] + max_new_tokens + drafter.stored_room,
                  prefill_target(target_cache, input_ids, stats, drafter.needs_hidden))
    pending = int(input_ids[0, -1])
    stats.time_prefill_s = clock.lap()

    rounds, tokens = [], []
    while True:
        round_depth = min(drafter.depth, max_new_tokens - len(tokens) - 1)
        root_position = target_cache.length  # the pending token's position (no padding in these caches)
        clock.mark()
        nodes = drafter.propose_tree(pending, root_position, round_depth, temperature, generator)
        stats.time_draft_s += clock.lap()
        logits, hidden = verify_tree(target_cache, nodes, root_position, drafter.needs_hidden)
        stats.target_forwards += 1
        stats.time_verify_s += clock.lap()
        path, next_token = accept_tree(nodes, logits, temperature, generator)
        target_cache.cache.compact([root_position], [path])  # keep the accepted path in place
        drafter.commit_tree(nodes, path, next_token, hidden)
        if record_rounds:
            rounds.append(TreeRound(list(nodes.tokens), list(nodes.parents), list(nodes.scores), path, next_token))
        stats.record_round(len(path) - 1, round_depth, proposed=len(nodes.tokens) - 1)
        stats.nodes_per_round.append(len(nodes.tokens) - 1)
        if finish_row(tokens, [nodes.tokens[n] for n in path[1:]] + [next_token], max_new_tokens, eos):
            break
        pending = next_token

    stats.time_total_s = clock.now() - clock.start
    stats.new_tokens, stats.draft_forwards = len(tokens), drafter.forwards
    result = GenerationResult(torch.tensor(tokens, dtype=torch.long), stats.finish())
    if record_rounds:
        result.rounds = rounds
    return result


def verify_tree(target_cache, nodes: "_Tree", root_position: int, hidden: bool = False):
    """ONE target forward over the root and every node, each seeing the context and its own ancestors: the logits
    (nodes, V), and the hidden states (1, nodes, H) when asked (else None)."""
    device = target_cache.cache.device
    count = len(nodes.tokens)
    mask = torch.zeros(count, count, dtype=torch.bool)
    for node in range(count):
        mask[node, nodes.ancestors(node)] = True
    positions = root_position + torch.tensor(nodes.depths, device=device)
    out = target_cache.extend(torch.tensor([nodes.tokens], device=device), last_only=False,
                              position_ids=positions[None], tree_mask=mask.to(device), return_hidden=hidden)
    return (out[0][0], out[1]) if hidden else (out[0], None)


def accept_tree(nodes: "_Tree", logits: torch.Tensor, temperature: float, generator) -> tuple[list[int], int]:
    """The accepted path from the root and the target's token after it."""
    children = _children(nodes)
    if temperature == 0:
        return _walk_greedy(nodes, children, logits)
    return _walk_sampling(nodes, children, logits, temperature, generator)


class ModelLevels:
    """How a draft model expands a tree: the root's children from its pending tokens, then one forward per level over
    the frontier's tokens, each attending to its own ancestors (tree mask) at its depth's position."""

    def __init__(self, draft_cache, draft_pending: list[int], root_position: int):
        self.cache, self.pending, self.root_position = draft_cache, draft_pending, root_position
        self.device = draft_cache.cache.device

    def root(self) -> torch.Tensor:
        return self.cache.extend(torch.tensor([self.pending], device=self.device))[0, -1:]

    def level(self, tokens: list[int], parent_rows: list[int], depths: list[int], mask: torch.Tensor) -> torch.Tensor:
        positions = self.root_position + torch.tensor(depths, device=self.device)
        return self.cache.extend(torch.tensor([tokens], device=self.device), last_only=False,
                                 position_ids=positions[None], tree_mask=mask.to(self.device))[0]


def draft_tree(nodes: _Tree, levels, depth: int, widths: tuple[int, ...], tree: str, budget: int | None,
               temperature: float, generator, table: AcceptanceTable) -> None:
    """Fill ``nodes`` with the round's draft tree: ``depth`` forwards of ``levels`` (:class:`ModelLevels` or a
    feature draft's), one per level: ``levels.root()`` gives the root's children, ``levels.level(tokens, parent_rows,
    depths, mask)`` the children of a frontier (``parent_rows``: each node's parent's row in the previous forward)."""
    logits = levels.root()  # the root's children
    frontier = [0]  # the nodes whose children `logits` holds, in row order
    written: list[int] = []  # expanded nodes in the order the draft stored them (its round block)
    candidates: list[int] = []
    for level in range(depth):
        width = widths[level]
        if temperature == 0:
            log_probs = torch.log_softmax(logits.float(), dim=-1)
            top = log_probs.topk(width, dim=-1)
            children, child_logp = top.indices, top.values
        else:
            distribution = probs(logits, temperature)
            log_probs = distribution.log()
            children = _gumbel_topk(log_probs, width, generator)
            child_logp = log_probs.gather(1, children)
            for row, node in enumerate(frontier):
                nodes.draft_probs[node] = distribution[row]
        host_children, host_logp = children.tolist(), child_logp.tolist()
        level_nodes = []
        for row, parent in enumerate(frontier):
            for rank, (token, logp) in enumerate(zip(host_children[row], host_logp[row])):
                if logp == float("-inf"):  # the draft's support is exhausted: no more candidates here
                    continue
                prob = math.exp(logp)
                key = table.key(rank, prob)
                score = nodes.scores[parent] + math.log(max(table.chance(key, prob), 1e-9))
                level_nodes.append(nodes.add(token, parent, score, key))
        candidates.extend(level_nodes)
        if level == depth - 1 or not level_nodes:
            break
        # the next frontier: static trees expand every node; dynamic ones the `width` best by cumulative score
        rows = {node: row for row, node in enumerate(frontier)}
        if tree == "static":
            frontier = level_nodes
        else:
            frontier = sorted(level_nodes, key=lambda n: -nodes.scores[n])[: widths[level + 1]]
        for node in frontier:
            nodes.draft_slot[node] = len(written)
            written.append(node)
        # the frontier attends to the context, the pending tokens (stored) and its own ancestors among `written`
        mask = torch.zeros(len(frontier), len(written), dtype=torch.bool)
        slot = nodes.draft_slot
        for row, node in enumerate(frontier):
            mask[row, [slot[n] for n in nodes.ancestors(node)[:-1]]] = True
        logits = levels.level([nodes.tokens[n] for n in frontier], [rows[nodes.parents[n]] for n in frontier],
                              [nodes.depths[n] for n in frontier], mask)
    if budget is not None and len(candidates) > budget:
        _prune(nodes, candidates, budget)


def _prune(nodes: _Tree, candidates: list[int], budget: int) -> None:
    """Keep the ``budget`` highest-scoring drafted nodes (a node's score never exceeds its parent's, and ties go
    to the shallower node, so the kept nodes form a tree), renumbered in their original order."""
    ranked = sorted(candidates, key=lambda n: (-nodes.scores[n], nodes.depths[n], n))
    kept = {0}
    for node in ranked:
        if len(kept) == budget + 1:
            break
        if nodes.parents[node] in kept:
            kept.add(node)
    order = sorted(kept)
    new_id = {old: new for new, old in enumerate(order)}
    nodes.tokens = [nodes.tokens[n] for n in order]
    nodes.parents = [new_id[nodes.parents[n]] if nodes.parents[n] >= 0 else -1 for n in order]
    nodes.depths = [nodes.depths[n] for n in order]
    nodes.scores = [nodes.scores[n] for n in order]
    nodes.keys = [nodes.keys[n] for n in order]
    nodes.draft_slot = {new_id[n]: s for n, s in nodes.draft_slot.items() if n in new_id}
    nodes.draft_probs = {new_id[n]: p for n, p in nodes.draft_probs.items() if n in new_id}


def _children(nodes: _Tree) -> list[list[int]]:
    children: list[list[int]] = [[] for _ in nodes.tokens]
    for node, parent in enumerate(nodes.parents):
        if parent >= 0:
            children[parent].append(node)
    return children


def _walk_greedy(nodes: _Tree, children: list[list[int]], logits: torch.Tensor) -> tuple[list[int], int]:
    """Follow the target's argmax down the tree: (accepted path from the root, the token after it)."""
    choice = logits.argmax(dim=-1).tolist()  # the round's one host sync
    path = [0]
    while True:
        want = choice[path[-1]]
        match = next((c for c in children[path[-1]] if nodes.tokens[c] == want), None)
        if match is None:
            return path, want
        path.append(match)


def _walk_sampling(nodes: _Tree, children: list[list[int]], logits: torch.Tensor, temperature: float,
                   generator) -> tuple[list[int], int]:
    """Recursive rejection sampling without replacement down the tree (module docstring)."""
    path = [0]
    while True:
        node = path[-1]
        q = probs(logits[node], temperature)
        accepted = None
        if children[node]:
            p = nodes.draft_probs[node].clone()
            for child in children[node]:  # in draw order
                token = nodes.tokens[child]
                r = torch.rand((), device=q.device, generator=generator)
                if bool(r * p[token] < q[token]):
                    accepted = child
                    break
                residual = (q - p).clamp_min(0)
                mass = residual.sum()
                q = residual / mass if bool(mass > 0) else q  # q == p to rounding: rejection was impossible
                p[token] = 0
                p = p / p.sum() if bool(p.sum() > 0) else p
        if accepted is None:
            return path, int(torch.multinomial(q, 1, generator=generator))
        path.append(accepted)


def _run_static(spec, target, draft, input_ids, max_new_tokens, **options):
    return tree_generate(target, draft, input_ids, max_new_tokens, tree="static", topk=tuple(spec["topk"]), **options)


def _run_dynamic(spec, target, draft, input_ids, max_new_tokens, **options):
    return tree_generate(target, draft, input_ids, max_new_tokens, tree="dynamic", depth=spec["depth"],
                         topk=spec["topk"], budget=spec["budget"], **options)


register(Method("static", lambda spec: "static " + "-".join(str(w) for w in spec["topk"]), _run_static, "draft",
                "draft model", order=3))
register(Method("dynamic", lambda spec: f"dynamic d{spec['depth']} k{spec['topk']} n{spec['budget']}", _run_dynamic,
                "draft", "draft model", order=4))
