"""Medusa heads (Cai et al. 2024; survey §5.1): drafting from the target's own last hidden state.

K small heads sit on the hidden state h_t the target's LM head reads. Head k guesses the token k positions after
the target's own next token: p^(k) = softmax(W2 (SiLU(W1^(k) h_t) + h_t)), with W2 the target's LM head (shared and
frozen, so a head stores only W1^(k) and a bias). The heads need no forward of their own model: after every verify
forward the target's hidden state at the last accepted position is at hand, and all K guesses come from it at once.

Two ways to propose:

* **chain** (``topk=None``): head k's top token (greedy) or a draw from it (sampling), K drafts per round;
* **static tree** (``topk=(4, 2, 2, 1)``): each node at depth d gets ``topk[d]`` children from head d+1, the
  Cartesian product of the heads' candidates (greedy: their top tokens, the ``budget`` best-scoring nodes kept;
  sampling: draws without replacement, each node's own). One target forward verifies the tree.

Lossless as every method of the workbook: the drafts are verified by the one chain verifier
(:func:`helpers.specdec.chain.generate_chain`) or the one tree verifier (:func:`helpers.specdec.tree.generate_tree`)
with the same acceptance rules; head k's distribution does not depend on the drafts before it, which the rejection
rule allows (it needs only that each draft is drawn from the distribution it is tested against).
"""
from __future__ import annotations

import torch
from torch import nn

from helpers.models.runtime import resolve_runtime
from helpers.specdec.chain import Drafter, generate_chain
from helpers.specdec.methods import Method, register
from helpers.specdec.core import GenerationResult, GenerationStats, check_positive_int, probs
from helpers.specdec.tree import (TreeDrafter, TreeStats, _gumbel_topk, _prune, _Tree, generate_tree, max_nodes,
                                  tree_runtime)

__all__ = ["MedusaHeads", "medusa_generate"]


class MedusaHeads(nn.Module):
    """``num_heads`` Medusa heads for ``target`` (randomly initialised to the LM head's own guess: W1 = 0).

    ``forward(hidden)`` maps hidden states (..., H) to logits (..., K, V). The LM head is the target's, shared and
    not a parameter of the heads (``state_dict`` holds the heads alone)."""

    def __init__(self, target, num_heads: int = 4):
        super().__init__()
        check_positive_int("num_heads", num_heads, "Medusa heads, one per draft position")
        lm_head = target.get_output_embeddings()
        hidden = lm_head.weight.shape[1]
        self.num_heads = num_heads
        self.blocks = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(num_heads))
        for block in self.blocks:  # a residual block that starts as the identity: every head first guesses as W2
            nn.init.zeros_(block.weight)
            nn.init.zeros_(block.bias)
        self.to(device=lm_head.weight.device, dtype=lm_head.weight.dtype)
        object.__setattr__(self, "lm_head", lm_head)  # shared with the target, not a submodule

    @property
    def vocab_size(self) -> int:
        return self.lm_head.weight.shape[0]

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        mixed = torch.stack([nn.functional.silu(block(hidden)) + hidden for block in self.blocks], dim=-2)
        return self.lm_head(mixed)


class MedusaDrafter(Drafter):
    """A chain of the heads' guesses from the target's hidden state at the last accepted position."""

    needs_hidden = True

    def __init__(self, heads: MedusaHeads):
        self.heads, self.hidden, self.forwards = heads, None, 0

    def start(self, input_ids, capacity: int, hidden=None) -> None:
        self.hidden = None if hidden is None else hidden[:, -1]  # the position before the pending token

    def propose(self, pending, limit: int, temperature: float, generator=None):
        count = min(self.heads.num_heads, limit)
        if self.hidden is None or count < 1:  # a one-token prompt: no hidden state before round 1
            return pending.new_empty(1, 0), None
        logits = self.heads(self.hidden)[0, :count]  # (γ, V)
        self.forwards += 1
        if temperature == 0:
            return logits.argmax(dim=-1)[None], None
        distribution = probs(logits, temperature)
        return torch.multinomial(distribution, 1, generator=generator).T, distribution[None]

    def commit(self, drafts, accepted: int, next_token, emitted, hidden=None) -> None:
        self.hidden = hidden[:, accepted]  # the position whose LM head gave the next token


class MedusaTreeDrafter(TreeDrafter):
    """A static tree: depth d's nodes each get ``widths[d]`` candidates from head d+1."""

    needs_hidden = True

    def __init__(self, heads: MedusaHeads, widths: tuple[int, ...], budget: int | None):
        self.heads, self.widths, self.budget = heads, widths, budget
        self.depth = len(widths)
        full = max_nodes(len(widths), widths, None, "static")
        self.nodes_room = full if budget is None else min(full, budget)
        self.hidden, self.forwards = None, 0

    def start(self, input_ids, capacity: int, hidden=None) -> None:
        self.hidden = None if hidden is None else hidden[:, -1]

    def propose_tree(self, pending: int, root_position: int, depth: int, temperature: float, generator) -> _Tree:
        nodes = _Tree(tokens=[pending])
        if self.hidden is None or depth < 1:
            return nodes
        scale = temperature if temperature > 0 else 1.0  # greedy: scores are the heads' own log-probabilities
        log_probs = torch.log_softmax(self.heads(self.hidden)[0, :depth].float() / scale, dim=-1)
        self.forwards += 1
        frontier, candidates = [0], []
        for level in range(depth):
            width = self.widths[level]
            if temperature == 0:
                top = log_probs[level].topk(width)
                picks = [(top.indices.tolist(), top.values.tolist())] * len(frontier)
            else:  # every node draws its own candidates, without replacement, from head level+1
                draws = _gumbel_topk(log_probs[level].expand(len(frontier), -1), width, generator)
                picks = [(row.tolist(), log_probs[level][row].tolist()) for row in draws]
            level_nodes = []
            for parent, (tokens, logps) in zip(frontier, picks):
                if temperature > 0:
                    nodes.draft_probs[parent] = log_probs[level].exp()
                for token, logp in zip(tokens, logps):
                    if logp > float("-inf"):
                        level_nodes.append(nodes.add(token, parent, nodes.scores[parent] + logp, -1))
            candidates += level_nodes
            frontier = level_nodes
        if temperature == 0 and self.budget is not None and len(candidates) > self.budget:
            _prune(nodes, candidates, self.budget)
        return nodes

    def commit_tree(self, nodes, path: list[int], next_token: int, hidden=None) -> None:
        self.hidden = hidden[:, path[-1]]


def _check_heads(target, heads) -> None:
    if not isinstance(heads, MedusaHeads):
        raise ValueError(f"heads must be a helpers.specdec.MedusaHeads, got {type(heads).__name__}")
    if heads.lm_head is not target.get_output_embeddings():
        raise ValueError("these Medusa heads were built for another model: they share its LM head; build or load "
                         "them with this target (MedusaHeads(target, K) or load_medusa_heads(target, path))")


def medusa_generate(target, heads: MedusaHeads, input_ids: torch.Tensor, max_new_tokens: int,
                    temperature: float = 0.0, seed: int | None = None, *, topk=None, budget: int | None = None,
                    eos_token_id=None, time_phases: bool = True, runtime: str = "auto",
                    record_rounds: bool = False) -> GenerationResult:
    """Speculative decoding with Medusa heads: a chain of K drafts (``topk=None``) or a static tree (``topk`` an int,
    the same width at every depth, or one width per depth, at most K depths; ``budget`` caps a greedy tree's nodes).
    Exact greedy output at temperature 0, the target's distribution above. Trees need the minimal runtime."""
    _check_heads(target, heads)  # the prompt and budget are checked by the verifier
    if topk is None:
        stats = GenerationStats(runtime=resolve_runtime(runtime, target))
        return generate_chain(target, MedusaDrafter(heads), input_ids, max_new_tokens, temperature, seed,
                              stats=stats, eos_token_id=eos_token_id, time_phases=time_phases)
    widths = (topk,) * heads.num_heads if isinstance(topk, int) else tuple(topk)
    if not 1 <= len(widths) <= heads.num_heads or any(isinstance(w, bool) or not isinstance(w, int) or w < 1
                                                       for w in widths):
        raise ValueError(f"topk must be an int >= 1 or one int >= 1 per depth, at most {heads.num_heads} depths (one "
                         f"per head); got {topk!r}")
    if budget is not None:
        check_positive_int("budget", budget, "the most tree nodes a greedy round verifies")
    drafter = MedusaTreeDrafter(heads, widths, budget if temperature == 0 else None)
    return generate_tree(target, drafter, input_ids, max_new_tokens, temperature, seed,
                         stats=TreeStats(runtime=tree_runtime(target), tree="medusa"), eos_token_id=eos_token_id,
                         time_phases=time_phases, record_rounds=record_rounds)


def _run_medusa(spec, target, heads, input_ids, max_new_tokens, **options):
    topk = spec.get("topk")
    return medusa_generate(target, heads, input_ids, max_new_tokens, topk=None if topk is None else tuple(topk),
                           **options)


register(Method("medusa", lambda spec: "medusa chain" if spec.get("topk") is None else
                "medusa " + "-".join(str(w) for w in spec["topk"]), _run_medusa, "medusa", "Medusa heads", order=6))
