"""The two kinds of forward pass a serving engine runs, on the workbook's model file (greedy).

- ``prefill``: a batch of prompts, left-padded to the longest, in one forward; returns each request's first token
  and its KV cache without the padding, shaped ``[layers, 2, kv_heads, prompt_len, head_dim]`` (what moves to the
  decode worker).
- ``DecodeBatch``: a ragged batch of sequences at different lengths that advances one token per ``step()``.
  Rows join (their KV arrives from prefill) and leave (finished) between steps. The cache is the model file's
  :class:`~helpers.models.decoder.KVCache`: every row fills its own slots and has its own positions, so each row
  computes what it would compute alone.

Both run on :func:`helpers.models.runtime.minimal_view` of a Qwen3 model (the engine's models are Qwen3).
"""
from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from helpers.batching.request import Request
from helpers.models.registry import load_model, model_config
from helpers.models.runtime import minimal_supported, minimal_view
from helpers.specdec.batched import batched_autoregressive_generate
from helpers.specdec.core import sample


def model_max_len(model) -> int:
    return int(model.config.max_position_embeddings)


def _engine_model(model):
    if not minimal_supported(model):
        raise ValueError(
            f"the batching engine runs on the workbook's Qwen3 model file; {type(model).__name__} "
            f"(model_type={getattr(model.config, 'model_type', None)!r}) is not supported: use a Qwen3 model")
    return minimal_view(model)


def _left_padded(rows: list[list[int]], device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(map(len, rows))
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, width - len(row):] = torch.tensor(row)
        mask[i, width - len(row):] = 1
    return ids.to(device), mask.to(device)


@torch.inference_mode()
def prefill(model, requests: list[Request], temperature: float = 0.0, generator=None, *, features: bool = False):
    """One forward over the prompts; returns first tokens (greedy, or drawn at ``temperature``) and per-request KV
    (padding stripped), and with ``features`` a third list: each prompt's features (``prompt_len``, H), the hidden
    states the LM head read, which a feature-level drafter drafts from."""
    mini = _engine_model(model)
    ids, mask = _left_padded([r.input_tokens for r in requests], model.device)
    cache = mini.new_cache(len(requests), ids.shape[1])
    out = mini(ids, cache, last_only=not features, attention_mask=mask, return_hidden=features)
    logits = (out[0] if features else out)[:, -1]
    first = sample(logits, temperature, generator)[0][:, 0].tolist()
    kvs = [cache.row_kv(i) for i in range(len(requests))]
    if not features:
        return first, kvs
    width = ids.shape[1]
    return first, kvs, [out[1][i, width - len(r.input_tokens):] for i, r in enumerate(requests)]


class DecodeBatch:
    """A ragged batch of sequences decoding together, one token per step. ``headroom``: KV slots a step may write
    past a row's last token (a speculative round's drafts)."""

    def __init__(self, model, *, headroom: int = 0) -> None:
        self.model = _engine_model(model)
        self.requests: list[Request] = []
        self.cache = self.model.new_cache(0, 1)
        self.headroom = headroom

    def __len__(self) -> int:
        return len(self.requests)

    def add(self, requests: list[Request], kvs: list[torch.Tensor], features=None) -> None:
        """Join rows whose prompts are prefilled: ``kvs[i]`` is ``[layers, 2, kv_heads, len, head_dim]`` (plain
        decoding reads no ``features``)."""
        if requests:
            # room for the joining rows' whole outputs now: growing later copies every row's KV mid-decode (a
            # 16 x 4096-token batch took 1.4 s to double); a row of unknown output length grows by doubling
            known = [r.prompt_len + r.output_length + self.headroom for r in requests if r.output_length]
            self.cache.append_rows(kvs, capacity=min(max(known, default=0), self.model.config.max_seq_len))
            self.requests.extend(requests)

    @torch.inference_mode()
    def step(self) -> list[int]:
        """Generate one token for every row (greedy) and return them."""
        limit = self.model.config.max_seq_len
        if max(self.cache.lengths) + 1 > self.cache.capacity:  # output lengths are unknown: grow by doubling
            self.cache.reserve(min(2 * self.cache.capacity, limit))
        if max(self.cache.lengths) >= limit:  # only a finished row that a static batch keeps stepping gets here:
            self.cache.rollback([int(n >= limit) for n in self.cache.lengths])  # its output is dropped anyway
        last = torch.tensor([[r.generated[-1]] for r in self.requests], device=self.cache.device)
        return self.model(last, self.cache, last_only=True)[:, -1].argmax(-1).tolist()

    def remove(self, finished: list[Request]) -> list[int]:
        """Drop finished rows; returns the kept rows' old indices, in order."""
        gone = {r.id for r in finished}
        keep = [i for i, r in enumerate(self.requests) if r.id not in gone]
        if finished:
            self.requests = [self.requests[i] for i in keep]
            self.cache.select_rows(keep)
        return keep


def generate_alone(model, prompt: list[int], max_new_tokens: int, eos_token_id: int | None = None) -> list[int]:
    """Reference: greedy generation for one request at batch size 1 (what every batched output must equal)."""
    return batched_autoregressive_generate(model, [prompt], max_new_tokens, eos_token_id).tokens[0]


@torch.inference_mode()
def divergence_margin(model, prompt: list[int], produced: list[int], reference: list[int]) -> tuple[int, float] | None:
    """Where a batched output first differs from the single-request one, and the gap between the reference's top
    two logits there (None if they are equal). A gap at float-noise level means a near-tie that the reduction order
    of a padded batch may decide either way; a large gap means a bug."""
    if produced == reference:
        return None
    index = next((i for i, (a, b) in enumerate(zip(produced, reference)) if a != b), min(len(produced), len(reference)))
    ids = torch.tensor([prompt + reference[:index]], device=model.device)
    top2 = model(input_ids=ids, logits_to_keep=1).logits[0, -1].float().topk(2).values
    return index, float(top2[0] - top2[1])


class PretrainedDir:
    """A picklable model source for worker processes: loads a saved transformers model from a directory."""

    def __init__(self, path) -> None:
        self.path = str(path)

    def __call__(self):
        return AutoModelForCausalLM.from_pretrained(self.path, dtype=torch.float32).eval()

    def config(self):
        return AutoConfig.from_pretrained(self.path)


class NamedModel:
    """A picklable model source: any name ``helpers.models.load_model`` knows (e.g. ``"cpu-pair/target"``)."""

    def __init__(self, name: str, dtype: torch.dtype | None = None) -> None:
        self.name, self.dtype = name, dtype

    def __call__(self):
        return load_model(self.name, dtype=self.dtype)[0].eval()

    def config(self):
        return model_config(self.name)


def model_source(name: str, dtype: torch.dtype | None = None):
    """A directory holding a saved model, or a name ``helpers.models.load_model`` knows."""
    return PretrainedDir(name) if Path(name).is_dir() else NamedModel(name, dtype)
