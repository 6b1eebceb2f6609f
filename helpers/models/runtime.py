"""One model and its KV cache behind the calls every decoder makes: extend, roll back, drop rows, lengths.

Two runtimes implement it, and :func:`cached_decoder` picks one per model:

* ``"minimal"`` — the workbook's model file (:mod:`helpers.models.decoder`: Qwen3, Llama, OLMo) sharing the transformers model's
  weights, with its preallocated cache: ragged rows, per-row rollback by length, tree masks and compaction.
  On a CPU a small model's decode step is mostly framework overhead, and this runtime has far less of it than
  transformers' generic forward (mask builders, cache objects, output dataclasses), so the cost ratio c of
  Eq. 5 drops.
* ``"transformers"`` — the ONE adapter over transformers, the peer every comparison can select and the fallback for
  what the model file does not implement (other architectures, sliding windows, other RoPE scalings): the model's own forward with a
  ``DynamicCache``, through public API only (``crop``, ``batch_select_indices``, ``attention_mask``,
  ``position_ids``). Rows roll back by different amounts without moving data: the tokens all rows rejected
  are cropped, and a row's further rejected tokens become masked-out *holes* in the attention mask (each row
  keeps its own positions, so RoPE sees every row as if it were alone).

``"auto"`` takes the minimal runtime wherever it applies, else transformers. The autoregressive baseline,
the speculative generators, the batching engine and the Eq. 5 cost measurements all go through here, so each
comparison runs both sides on the same runtime.
"""
from __future__ import annotations

import torch
from transformers import DynamicCache

from helpers.models.decoder import DecoderConfig, from_hf

RUNTIMES = ("auto", "minimal", "transformers")


def _per_row(tokens, batch_size: int) -> list[int]:
    return [int(tokens)] * batch_size if isinstance(tokens, int) else [int(t) for t in tokens]


class TransformersDecoder:
    """A transformers causal LM with a ``DynamicCache``; rows may hold different numbers of tokens."""

    runtime = "transformers"

    def __init__(self, model, batch_size: int = 1):
        self.model = model
        self.cache = DynamicCache(config=model.config)
        self.device = next(model.parameters()).device
        self.mask = torch.zeros(batch_size, 0, dtype=torch.long, device=self.device)  # 1 = a token, 0 = pad/hole
        self.lengths = [0] * batch_size  # tokens per row (holes and padding excluded)
        self.gaps = False  # whether any padding or hole exists (else no mask is needed)

    @property
    def length(self) -> int:
        if min(self.lengths) != max(self.lengths):
            raise ValueError(f"rows hold different numbers of tokens ({self.lengths}); read .lengths")
        return self.lengths[0]

    def extend(self, input_ids: torch.Tensor, last_only: bool = True, *, attention_mask=None, position_ids=None,
               tree_mask=None, return_hidden: bool = False):
        """Logits (batch, positions, vocab) for ``input_ids`` placed after each row's cached tokens; with
        ``return_hidden`` also the last layer's hidden states after the final norm (what the LM head reads)."""
        if tree_mask is not None:
            raise NotImplementedError("tree masks need the minimal runtime (runtime='minimal' or 'auto')")
        new = torch.ones_like(input_ids) if attention_mask is None else attention_mask.to(self.device).long()
        if position_ids is None:
            start = torch.tensor(self.lengths, device=self.device)[:, None]
            position_ids = (start + new.cumsum(dim=1) - 1).clamp(min=0)
        self.mask = torch.cat([self.mask, new], dim=1)
        self.gaps = self.gaps or attention_mask is not None
        out = self.model(input_ids=input_ids, attention_mask=self.mask if self.gaps else None,
                         position_ids=position_ids, past_key_values=self.cache, use_cache=True,
                         logits_to_keep=1 if last_only else 0, output_hidden_states=return_hidden)
        self.lengths = [n + int(k) for n, k in zip(self.lengths, new.sum(dim=1).tolist())]
        if return_hidden:  # transformers' last hidden state is the final norm's output
            return out.logits, out.hidden_states[-1][:, -1:] if last_only else out.hidden_states[-1]
        return out.logits

    def rollback(self, tokens) -> None:
        """Row ``b`` forgets its last ``tokens[b]`` tokens (an int: every row)."""
        counts = _per_row(tokens, len(self.lengths))
        if any(t < 0 or t > n for t, n in zip(counts, self.lengths)):
            raise ValueError(f"cannot roll back {counts} tokens from rows holding {self.lengths}")
        common = min(counts)
        if common:
            self.cache.crop(-common)  # transformers 5.x: a NEGATIVE count removes that many tokens
            self.mask = self.mask[:, :-common]
        for b, extra in enumerate(t - common for t in counts):
            if extra:  # the row's last `extra` real tokens become holes
                self.gaps = True
                real = self.mask[b].nonzero().flatten()
                self.mask[b, real[-extra:]] = 0
        self.lengths = [n - t for n, t in zip(self.lengths, counts)]

    def select_rows(self, rows) -> None:
        """Keep only ``rows`` (finished sequences leave the batch)."""
        index = torch.tensor([int(r) for r in rows], dtype=torch.long, device=self.device)
        self.cache.batch_select_indices(index)
        self.mask = self.mask.index_select(0, index)
        self.lengths = [self.lengths[int(r)] for r in rows]


class MinimalDecoder:
    """The model file's :class:`~helpers.models.decoder.MiniDecoder` (same weight tensors) with its static cache.

    ``compile``: ``False`` eager; ``"graphs"`` every call of up to 32 tokens per row (decode, draft and verify
    steps) through :class:`~helpers.models.graphs.GraphedSteps`, captured explicitly as CUDA graphs on a GPU and
    run as the same static step on a CPU; ``"compiled"`` the same with the decoder layer compiled by inductor once
    (:func:`~helpers.models.graphs.compiled_layer`). Prefill and masked or tree-shaped calls stay eager.
    """

    runtime = "minimal"

    def __init__(self, model, capacity: int, batch_size: int = 1, compile: bool | str = False):
        check_compile(compile)
        self.model = minimal_view(model)
        self.graphed = None
        if compile:
            from helpers.models.graphs import graphed_steps

            self.graphed = graphed_steps(self.model, batch_size, capacity, owner=self, compiled=compile == "compiled")
            self.cache = self.graphed.cache
        else:
            self.cache = self.model.new_cache(batch_size, min(capacity, self.model.config.max_seq_len))

    @property
    def length(self) -> int:
        return self.cache.length

    @property
    def lengths(self) -> list[int]:
        """Tokens per row (padding excluded), as the transformers adapter counts them."""
        return self.cache.token_counts

    def extend(self, input_ids: torch.Tensor, last_only: bool = True, *, attention_mask=None, position_ids=None,
               tree_mask=None, return_hidden: bool = False):
        if (self.graphed is not None and attention_mask is None and position_ids is None and tree_mask is None
                and not return_hidden and self.graphed.graphable(input_ids)):
            return self.graphed(input_ids, last_only=last_only)
        return self.model(input_ids, self.cache, last_only=last_only, attention_mask=attention_mask,
                          position_ids=position_ids, tree_mask=tree_mask, return_hidden=return_hidden)

    def rollback(self, tokens) -> None:
        self.cache.rollback(tokens)

    def select_rows(self, rows) -> None:
        self.cache.select_rows(rows)  # new buffers: the graphed steps no longer apply (graphable() says so)


def minimal_view(model):
    """The model file's decoder over ``model``'s weights, built once per model (rebuilt if its weights moved).

    ``model`` may already be a :class:`~helpers.models.decoder.MiniDecoder`.
    """
    if hasattr(model, "new_cache"):
        return model
    key = model.get_input_embeddings().weight.data_ptr()
    view = getattr(model, "_workbook_minimal_view", None)
    if view is None or view[0] != key:
        view = (key, from_hf(model))
        object.__setattr__(model, "_workbook_minimal_view", view)  # a plain attribute, not a submodule
    return view[1]


def minimal_supported(model) -> bool:
    """Whether the model file implements this model's architecture (Qwen3, Llama or OLMo with full attention)."""
    if hasattr(model, "new_cache"):
        return True
    try:
        DecoderConfig.from_hf(model.config)
    except (ValueError, AttributeError):
        return False
    return True


def resolve_runtime(runtime: str, *models) -> str:
    """The runtime every one of ``models`` will use: ``auto`` becomes minimal only if all support it."""
    if runtime not in RUNTIMES:
        raise ValueError(f"unknown runtime {runtime!r}; choose one of {RUNTIMES}")
    if runtime == "auto":
        return "minimal" if all(minimal_supported(m) for m in models) else "transformers"
    if runtime == "minimal":
        for model in models:
            if not hasattr(model, "new_cache"):
                DecoderConfig.from_hf(model.config)  # raises the error that says what the model file lacks
    return runtime


COMPILE_MODES = (False, "graphs", "compiled")  # the generators' ``compile=``: eager, graphs, compiled layer + graphs


def check_compile(compile) -> None:
    if compile not in COMPILE_MODES:
        raise ValueError(f"compile must be False (eager), 'graphs' (explicit CUDA graphs) or 'compiled' (the decoder "
                         f"layer compiled by inductor, inside the same graphs), got {compile!r}")


def cached_decoder(model, runtime: str, capacity: int, batch_size: int = 1, *, compile: bool | str = False):
    """A fresh cache for ``model`` on a resolved ``runtime`` ("minimal" or "transformers"), room for ``capacity``
    tokens per row (the minimal runtime preallocates them). ``compile`` (minimal runtime only): ``"graphs"`` decode,
    draft and verify steps as explicitly captured CUDA graphs, ``"compiled"`` the same over the inductor-compiled
    layer (see :class:`MinimalDecoder`)."""
    if runtime == "minimal":
        return MinimalDecoder(model, capacity, batch_size, compile)
    if compile:
        raise ValueError(f"compile={compile!r} needs the minimal runtime (a Qwen3, Llama or OLMo model); the "
                         "transformers adapter is eager")
    if runtime == "transformers":
        return TransformersDecoder(model, batch_size)
    raise ValueError(f"resolve the runtime first (resolve_runtime); got {runtime!r}")
