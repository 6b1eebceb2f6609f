"""A feature-level draft (EAGLE, Li et al. 2024; survey §5.2): one decoder layer that drafts in the target's own
feature space.

The target's feature f_t is the hidden state its LM head reads at position t. The draft takes the pair
(f_t, embedding of token t+1), mixes it to the target's width (``fc``), runs one decoder layer over its own KV
cache of such pairs, and outputs a prediction of f_{t+1}; the target's own LM head turns that into p(token t+2).
Drafting γ tokens is γ steps of that layer, each feeding back its own predicted feature. The target's embedding
and LM head are shared and frozen, so the draft stores only ``fc`` and its layer.

Nothing is recomputed for it: the verify forward returns the target's features at [pending, d1..dγ]
(``return_hidden``), and after a round the draft's cache keeps only the pairs built from true features; the pairs
of the accepted tokens (true features, now known) are fed in the next round's first draft step, together.

``FeatureDrafter`` drafts a chain, ``FeatureTreeDrafter`` a tree (one draft forward per level, a tree mask over the
draft's own cache, EAGLE-2's dynamic expansion); with ``stop_below`` the chain a round stops as soon as the draft's probability of its
own token falls below the threshold, and drops a first draft that is already below it (a plain decode step then),
and with ``backoff`` it pauses drafting for 1, 3, 7, ... rounds after a round that accepted nothing (its drafts all
rejected, or its first guess already below the stop), so that where its drafts fail it backs off to autoregressive
decoding without paying even a first draft step per token. Verified by the one chain verifier: lossless.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from helpers.models.decoder import DecoderConfig, MiniDecoder
from helpers.models.runtime import resolve_runtime
from helpers.specdec.chain import Drafter, generate_chain
from helpers.specdec.methods import Method, register
from helpers.specdec.core import GenerationResult, GenerationStats, check_positive_int, sample
from helpers.specdec.tree import (AcceptanceTable, TreeDrafter, TreeStats, _children, _Tree, draft_tree, generate_tree,
                                  max_nodes, stored_nodes, tree_runtime, tree_shape)

__all__ = ["FeatureDraft", "eagle_generate"]


def _layer_config(target) -> DecoderConfig:
    """One Qwen3-style layer of the target's width and attention shape (a Qwen3, Llama or OLMo config, or any config
    that names the same sizes, as Mistral's or Qwen2's do)."""
    config = target.config
    missing = [name for name in ("vocab_size", "hidden_size", "intermediate_size", "num_attention_heads",
                                 "max_position_embeddings") if getattr(config, name, None) is None]
    if missing:
        raise ValueError(f"a feature draft copies the target's layer sizes, and this {type(config).__name__} has no "
                         f"{', '.join(missing)}: use a Qwen3, Llama or OLMo target (or another config that names "
                         "them), or draft with a draft model or Medusa heads")
    heads = config.num_attention_heads
    return DecoderConfig(
        vocab_size=config.vocab_size, hidden_size=config.hidden_size, intermediate_size=config.intermediate_size,
        num_layers=1, num_heads=heads, num_kv_heads=getattr(config, "num_key_value_heads", None) or heads,
        head_dim=getattr(config, "head_dim", None) or config.hidden_size // heads,
        max_seq_len=config.max_position_embeddings,
        rope_theta=(getattr(config, "rope_parameters", None) or {}).get("rope_theta", getattr(config, "rope_theta",
                                                                                             1_000_000.0)),
        rms_norm_eps=getattr(config, "rms_norm_eps", 1e-6))  # OLMo's config has none (its LayerNorm takes 1e-5)


def _feature_scale(target) -> float:
    """The typical size (RMS) of the target's features: its final norm's weights (the norm's output has unit RMS
    before them), or 1 for a model without a readable final norm."""
    norm = getattr(getattr(target, "model", None), "norm", None)
    weight = getattr(norm, "weight", None)
    return float(weight.float().pow(2).mean().sqrt()) if weight is not None and not weight.is_meta else 1.0


class VocabSubsetHead(nn.Module):
    """The target's LM head over a subset of its tokens (a reduced draft vocabulary, as in FR-Spec and EAGLE-3):
    logits (..., V) with -inf outside ``tokens``, so greedy picks, top-k and sampling work unchanged, and the draft
    never proposes an excluded token (the verifier stays lossless: those tokens simply have draft probability 0).

    The subset's rows are copied once (a contiguous (n, H) block): a draft step then reads n rows of the head
    instead of V, which matters on a CPU where the head is most of the draft's weights and leaves the cache during
    every target forward. The target's head is frozen, so the copy stays equal to it."""

    def __init__(self, head: nn.Module, tokens: torch.Tensor):
        super().__init__()
        object.__setattr__(self, "shared", head)  # the target's head: not a submodule (never saved nor trained)
        self.register_buffer("tokens", tokens, persistent=False)
        self.register_buffer("rows", head.weight.detach()[tokens].clone(), persistent=False)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = hidden.new_full((*hidden.shape[:-1], self.shared.weight.shape[0]), float("-inf"))
        return logits.index_copy_(-1, self.tokens, F.linear(hidden, self.rows))


class FeatureDraft(nn.Module):
    """A feature-level draft for ``target``, randomly initialised (its ``fc`` starts as "feature + scaled token
    embedding"). ``forward(features, tokens, cache)`` returns the draft's logits (through the target's LM head) and
    its predicted next features. :meth:`restrict_vocab` limits its guesses to a subset of the vocabulary."""

    def __init__(self, target):
        super().__init__()
        config = _layer_config(target)
        hidden = config.hidden_size
        self.fc = nn.Linear(2 * hidden, hidden, bias=False)
        self.body = MiniDecoder(config)
        self.body.norm = nn.Identity()  # the layer predicts the feature itself; the target's LM head reads it
        embedding = target.get_input_embeddings().weight
        with torch.no_grad():  # start as "feature + token embedding", the embedding scaled to the feature's size
            # (a target on the meta device, rendering rows without its GPU, has no sizes to read: scale 1)
            scale = 1.0 if embedding.is_meta else _feature_scale(target) / embedding.float().pow(2).mean().sqrt()
            self.fc.weight.copy_(torch.cat([torch.eye(hidden), float(scale) * torch.eye(hidden)], dim=1))
        weight = target.get_output_embeddings().weight
        self.to(device=weight.device, dtype=weight.dtype)
        self.body.embed_tokens = target.get_input_embeddings()  # shared and frozen
        self.body.lm_head = target.get_output_embeddings()
        object.__setattr__(self, "target_head", self.body.lm_head)  # which target this draft belongs to
        self.register_buffer("draft_vocab", None)  # all tokens; restrict_vocab() sets a subset (then saved)

    def restrict_vocab(self, tokens) -> "FeatureDraft":
        """Draft only among ``tokens`` (distinct ids, e.g. :func:`helpers.training.heads.frequent_tokens` of the
        training corpus; None: the whole vocabulary again). Saved with the draft's weights. Returns the draft."""
        if tokens is None:
            self.draft_vocab, self.body.lm_head = None, self.target_head
            return self
        vocab = self.target_head.weight.shape[0]
        tokens = torch.as_tensor(tokens, dtype=torch.long).flatten()
        if not tokens.is_meta and (tokens.numel() == 0 or int(tokens.min()) < 0 or int(tokens.max()) >= vocab
                                   or tokens.unique().numel() != tokens.numel()):
            raise ValueError(f"the draft vocabulary must be distinct token ids in 0..{vocab - 1} (at least one), got "
                             f"{tokens.numel()} ids; pass e.g. frequent_tokens(train_ids, 1024)")
        tokens = tokens.to(self.target_head.weight.device)
        self.draft_vocab = tokens
        self.body.lm_head = VocabSubsetHead(self.target_head, tokens)
        return self

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """What the draft owns (``fc``, its layer and its draft vocabulary, if restricted): the shared embedding and
        LM head are the target's."""
        shared = ("body.embed_tokens.", "body.lm_head.")
        return {k: v for k, v in self.state_dict().items() if not k.startswith(shared)}

    def new_cache(self, capacity: int):
        return self.body.new_cache(1, capacity)

    def forward(self, features: torch.Tensor, tokens: torch.Tensor, cache=None, last_only: bool = False, *,
                position_ids=None, tree_mask=None):
        """``features`` (B, T, H) at positions t and ``tokens`` (B, T) at t+1 -> (logits for t+2, features of t+1);
        ``position_ids`` and ``tree_mask`` as for the model file's forward (a tree level's nodes)."""
        mixed = self.fc(torch.cat([features, self.body.embed_tokens(tokens)], dim=-1))
        return self.body(None, cache, last_only=last_only, inputs_embeds=mixed, return_hidden=True,
                         position_ids=position_ids, tree_mask=tree_mask)


class TrueFeaturePairs:
    """The feature draft's cache and the pairs (true feature f_{t-1}, token t) it has not been fed yet, the last one
    always (the feature before the pending token, the pending token). A round's first draft forward feeds them
    (:meth:`fed` right after it); after the round the cache drops every entry built from predicted features, and the
    accepted tokens' pairs, from the verify forward's true features, wait for the next round."""

    def __init__(self, draft: "FeatureDraft", input_ids: torch.Tensor, capacity: int, hidden: torch.Tensor | None):
        self.cache = draft.new_cache(capacity)
        # a one-token prompt has no feature yet: nothing to draft from until round 1's verify
        self.features, self.tokens = (None, None) if hidden is None else (hidden, input_ids[:, 1:])
        self.kept = None  # the cache's length once this round fed the pairs (None: not fed this round)

    @property
    def ready(self) -> bool:
        return self.features is not None

    def fed(self) -> None:
        self.kept = self.cache.length

    def commit(self, features: torch.Tensor, tokens: torch.Tensor) -> None:
        """The round's true pairs (``features`` (1, n, H), ``tokens`` (1, n)) become the pending ones."""
        if self.kept is not None:  # drop what the draft built on its own predictions
            self.cache.rollback(self.cache.length - self.kept)
        elif self.features is not None:  # nothing was fed this round: the old pairs still wait
            features, tokens = torch.cat([self.features, features], 1), torch.cat([self.tokens, tokens], 1)
        self.features, self.tokens, self.kept = features, tokens, None


class FeatureDrafter(Drafter):
    """Drafts a chain at the feature level (module docstring) from its :class:`TrueFeaturePairs`."""

    needs_hidden = True

    def __init__(self, draft: FeatureDraft, gamma: int, stop_below: float | None = None, backoff: int = 0):
        self.draft, self.gamma, self.stop_below, self.backoff = draft, gamma, stop_below, backoff
        self.pairs, self.forwards = None, 0
        self.skip, self.pause = 0, 0  # rounds left without drafting; the next pause after a failed round
        self.tried = False  # whether this round ran the draft (a paused round did not)

    def start(self, input_ids, capacity: int, hidden=None) -> None:
        self.pairs = TrueFeaturePairs(self.draft, input_ids, capacity, hidden)

    def propose(self, pending, limit: int, temperature: float, generator=None):
        count = min(self.gamma, limit)
        self.tried = self.pairs.ready and count >= 1 and self.skip == 0
        if not self.tried:  # backing off (or nothing to draft from): a plain decode step
            self.skip = max(0, self.skip - 1)
            return pending.new_empty(1, 0), None
        drafts, distributions = [], []
        features, tokens = self.pairs.features, self.pairs.tokens
        for step in range(count):
            logits, predicted = self.draft(features, tokens, self.pairs.cache, last_only=True)
            self.forwards += 1
            if step == 0:
                self.pairs.fed()
            token, distribution = sample(logits[:, -1], temperature, generator)
            if self.stop_below is not None and self._unsure(logits[:, -1], token, distribution, temperature):
                if step == 0:  # not even one confident guess: a plain decode step this round
                    return pending.new_empty(1, 0), None
                break
            drafts.append(token)
            distributions.append(distribution)
            features, tokens = predicted, token
        return torch.cat(drafts, dim=1), None if temperature == 0 else torch.stack(distributions, dim=1)

    def _unsure(self, logits, token, distribution, temperature) -> bool:
        confidence = (torch.softmax(logits.float(), dim=-1).amax() if temperature == 0
                      else distribution[0, token[0, 0]])
        return confidence.item() < self.stop_below

    def commit(self, drafts, accepted: int, next_token, emitted, hidden=None) -> None:
        if self.backoff and self.tried:  # no draft accepted (or none confident enough to propose): pause 1, 3,
            # 7, ... rounds, at most backoff; a round that accepts one resets the pause
            self.pause = min(self.backoff, 2 * self.pause + 1) if accepted == 0 else 0
            self.skip = self.pause
        self.pairs.commit(hidden[:, :accepted + 1], torch.cat([drafts[:, :accepted], next_token], dim=1))


class FeatureLevels:
    """How the feature draft expands a tree (:func:`helpers.specdec.tree.draft_tree`): the root's children from its
    pending pairs, then one forward per level over the pairs (the parent's predicted feature, the node's token),
    each node attending to its own ancestors in the draft's cache (tree mask) at its depth's position."""

    def __init__(self, draft: "FeatureDraft", pairs: TrueFeaturePairs):
        self.draft, self.pairs = draft, pairs
        self.root_position = pairs.cache.length + pairs.features.shape[1] - 1  # the last pending pair's slot
        self.predicted = None  # the previous forward's predicted features, one row per node it expanded

    def root(self) -> torch.Tensor:
        logits, self.predicted = self.draft(self.pairs.features, self.pairs.tokens, self.pairs.cache, last_only=True)
        self.pairs.fed()
        return logits[0]

    def level(self, tokens: list[int], parent_rows: list[int], depths: list[int], mask: torch.Tensor) -> torch.Tensor:
        device = self.pairs.features.device
        features = self.predicted[0, torch.tensor(parent_rows, device=device)][None]
        positions = self.root_position + torch.tensor(depths, device=device)
        logits, self.predicted = self.draft(features, torch.tensor([tokens], device=device), self.pairs.cache,
                                            position_ids=positions[None], tree_mask=mask.to(device))
        return logits[0]


class FeatureTreeDrafter(TreeDrafter):
    """A dynamic (EAGLE-2 style) or static tree drafted at the feature level, one draft forward per level, from its
    :class:`TrueFeaturePairs`: the round's nodes leave the draft's cache, the accepted path's true pairs wait."""

    needs_hidden = True

    def __init__(self, draft: "FeatureDraft", tree: str, depth: int, widths: tuple[int, ...], budget: int | None):
        self.draft, self.tree, self.depth, self.widths, self.budget = draft, tree, depth, widths, budget
        self.nodes_room = max_nodes(depth, widths, budget, tree)
        self.stored_room = stored_nodes(depth, widths, tree)
        self.table, self.greedy = AcceptanceTable(max(widths)), True
        self.pairs, self.forwards = None, 0

    def start(self, input_ids, capacity: int, hidden=None) -> None:
        self.pairs = TrueFeaturePairs(self.draft, input_ids, capacity, hidden)

    def propose_tree(self, pending: int, root_position: int, depth: int, temperature: float, generator) -> _Tree:
        nodes, self.greedy = _Tree(tokens=[pending]), temperature == 0
        if not self.pairs.ready or depth < 1:
            return nodes
        draft_tree(nodes, FeatureLevels(self.draft, self.pairs), depth, self.widths, self.tree,
                   self.budget if self.greedy else None, temperature, generator, self.table)
        self.forwards += depth
        return nodes

    def commit_tree(self, nodes: _Tree, path: list[int], next_token: int, hidden=None) -> None:
        self.table.record(nodes, _children(nodes), path, self.greedy)
        tokens = torch.tensor([[nodes.tokens[n] for n in path[1:]] + [next_token]], device=hidden.device)
        self.pairs.commit(hidden[:, path], tokens)  # true features at the root and the accepted nodes


def eagle_generate(target, draft: FeatureDraft, input_ids: torch.Tensor, max_new_tokens: int,
                   temperature: float = 0.0, seed: int | None = None, *, gamma: int = 5, tree: str | None = None,
                   depth: int | None = None, topk=None, budget: int | None = None, stop_below: float | None = None,
                   backoff: int = 0, eos_token_id=None, time_phases: bool = True, runtime: str = "auto",
                   record_rounds: bool = False) -> GenerationResult:
    """Speculative decoding with a feature-level draft: a chain of γ drafts per round (``tree=None``; ``stop_below``
    the confidence stop), or a tree drafted at the feature level (``tree="dynamic"``, EAGLE-2 style: ``depth``,
    ``topk``, ``budget`` as for :func:`~helpers.specdec.tree.tree_generate`, defaults 5, 4, 16; ``tree="static"``:
    ``topk`` one width per depth). ``backoff`` (chains): after a round that accepted no draft (all rejected, or none
    confident enough to propose), draft nothing for 1, then 3, 7, ... rounds, at most ``backoff``, until a round
    accepts one (0: never pause). Exact greedy output
    at temperature 0, the target's distribution above (the drafter decides from its own past only). Trees need the
    minimal runtime (Qwen3, Llama and OLMo targets)."""
    if not isinstance(draft, FeatureDraft):  # the prompt and budget are checked by the verifier
        raise ValueError(f"draft must be a helpers.specdec.FeatureDraft, got {type(draft).__name__}")
    if draft.target_head is not target.get_output_embeddings():
        raise ValueError("this feature draft was built for another model: it shares its embedding and LM head; "
                         "build or load it with this target (FeatureDraft(target) or load_feature_draft)")
    check_positive_int("gamma", gamma, "draft tokens per round")
    if stop_below is not None and not (isinstance(stop_below, (int, float)) and 0 <= stop_below <= 1):
        raise ValueError(f"stop_below must be None or a probability in [0, 1], got {stop_below!r}")
    if tree is None:
        stats = GenerationStats(runtime=resolve_runtime(runtime, target))
        if isinstance(backoff, bool) or not isinstance(backoff, int) or backoff < 0:
            raise ValueError(f"backoff (the most rounds to pause after failed drafts) must be an int >= 0, "
                             f"got {backoff!r}")
        return generate_chain(target, FeatureDrafter(draft, gamma, stop_below, backoff), input_ids, max_new_tokens,
                              temperature, seed, stats=stats, eos_token_id=eos_token_id, time_phases=time_phases)
    depth, widths, budget = tree_shape(tree, depth, topk, budget)
    drafter = FeatureTreeDrafter(draft, tree, depth, widths, budget if temperature == 0 else None)
    return generate_tree(target, drafter, input_ids, max_new_tokens, temperature, seed,
                         stats=TreeStats(runtime=tree_runtime(target), tree=f"eagle-{tree}"),
                         eos_token_id=eos_token_id, time_phases=time_phases, record_rounds=record_rounds)


def _eagle_label(spec: dict) -> str:
    if spec.get("tree"):
        return f"eagle tree d{spec['depth']} k{spec['topk']} n{spec['budget']}"
    return (f"eagle g{spec['gamma']}" + (f" p<{spec['stop_below']:g}" if spec.get("stop_below") else "")
            + (f" b{spec['backoff']}" if spec.get("backoff") else ""))


def _run_eagle(spec, target, draft, input_ids, max_new_tokens, **options):
    if spec.get("tree"):
        return eagle_generate(target, draft, input_ids, max_new_tokens, tree=spec["tree"], depth=spec["depth"],
                              topk=spec["topk"], budget=spec["budget"], **options)
    return eagle_generate(target, draft, input_ids, max_new_tokens, gamma=spec["gamma"],
                          stop_below=spec.get("stop_below"), backoff=spec.get("backoff", 0), **options)


register(Method("eagle", _eagle_label, _run_eagle, "eagle", "feature draft", order=7))
