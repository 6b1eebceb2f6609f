"""The two kinds of forward pass a serving engine runs, on a transformers causal LM (greedy).

- ``prefill``: a batch of prompts, left-padded to the longest, in one forward; returns each request's first token
  and its KV cache without the padding, shaped ``[layers, 2, kv_heads, prompt_len, head_dim]`` (what moves to the
  decode worker).
- ``DecodeBatch``: a ragged batch of sequences at different lengths that advances one token per ``step()``.
  Rows join (their KV arrives from prefill) and leave (finished) between steps. The cache is one left-padded
  tensor per layer; an attention mask hides the padding and explicit position ids keep every row's positions
  its own, so each row computes what it would compute alone.
"""
from __future__ import annotations

import torch
from transformers import DynamicCache

from .request import Request


def model_max_len(model) -> int:
    return int(model.config.max_position_embeddings)


def _left_padded(rows: list[list[int]], device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(map(len, rows))
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, width - len(row):] = torch.tensor(row)
        mask[i, width - len(row):] = 1
    return ids.to(device), mask.to(device)


@torch.inference_mode()
def prefill(model, requests: list[Request]) -> tuple[list[int], list[torch.Tensor]]:
    """One forward over the prompts; returns first tokens and per-request KV (padding stripped)."""
    device = model.device
    ids, mask = _left_padded([r.input_tokens for r in requests], device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache()
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache,
                   logits_to_keep=1).logits[:, -1]
    first_tokens = logits.argmax(-1).tolist()
    width = ids.shape[1]
    kvs = []
    for i, request in enumerate(requests):
        start = width - request.prompt_len
        kvs.append(torch.stack([torch.stack([layer.keys[i, :, start:], layer.values[i, :, start:]])
                                for layer in cache.layers]))
    return first_tokens, kvs


class DecodeBatch:
    """A ragged batch of sequences decoding together, one token per step."""

    def __init__(self, model) -> None:
        self.model = model
        self.requests: list[Request] = []
        self.lengths = torch.zeros(0, dtype=torch.long)  # tokens in each row's cache
        self.cache: DynamicCache | None = None

    def __len__(self) -> int:
        return len(self.requests)

    @property
    def width(self) -> int:
        return self.cache.layers[0].keys.shape[-2] if self.cache is not None else 0

    def add(self, requests: list[Request], kvs: list[torch.Tensor]) -> None:
        """Join rows whose prompts are prefilled: ``kvs[i]`` is ``[layers, 2, kv_heads, len, head_dim]``."""
        if not requests:
            return
        new_lengths = torch.tensor([kv.shape[3] for kv in kvs])
        width = max(self.width, int(new_lengths.max()))
        n_layers = kvs[0].shape[0]
        if self.cache is None:
            self.cache = DynamicCache(ddp_cache_data=[(None, None)] * n_layers)
        for layer_idx in range(n_layers):
            layer = self.cache.layers[layer_idx]
            for kind, name in enumerate(("keys", "values")):
                parts = [_pad_left(kv[layer_idx, kind].unsqueeze(0), width) for kv in kvs]
                if self.requests:
                    parts.insert(0, _pad_left(getattr(layer, name), width))
                setattr(layer, name, torch.cat(parts))
            layer.is_initialized = True
            layer.dtype, layer.device = layer.keys.dtype, layer.keys.device
        self.requests.extend(requests)
        self.lengths = torch.cat([self.lengths, new_lengths])

    @torch.inference_mode()
    def step(self) -> list[int]:
        """Generate one token for every row (greedy) and return them."""
        device = self.model.device
        width = self.width
        pads = width - self.lengths
        mask = (torch.arange(width + 1)[None, :] >= pads[:, None]).long()
        last = torch.tensor([[r.generated[-1]] for r in self.requests])
        logits = self.model(input_ids=last.to(device), attention_mask=mask.to(device),
                            position_ids=self.lengths[:, None].to(device), past_key_values=self.cache).logits
        self.lengths += 1
        return logits[:, -1].argmax(-1).tolist()

    def remove(self, finished: list[Request]) -> None:
        """Drop finished rows and the left columns that only padded them."""
        if not finished:
            return
        gone = {r.id for r in finished}
        keep = [i for i, r in enumerate(self.requests) if r.id not in gone]
        self.requests = [self.requests[i] for i in keep]
        self.lengths = self.lengths[keep]
        if not keep:
            self.cache = None
            return
        trim = self.width - int(self.lengths.max())
        index = torch.tensor(keep, device=self.model.device)
        for layer in self.cache.layers:
            layer.keys = layer.keys[index, :, trim:]
            layer.values = layer.values[index, :, trim:]


def _pad_left(kv: torch.Tensor, width: int) -> torch.Tensor:
    missing = width - kv.shape[-2]
    if missing == 0:
        return kv
    return torch.cat([kv.new_zeros(*kv.shape[:-2], missing, kv.shape[-1]), kv], dim=-2)


@torch.inference_mode()
def generate_alone(model, prompt: list[int], max_new_tokens: int, eos_token_id: int | None = None) -> list[int]:
    """Reference: greedy generation for one request at batch size 1 (what every batched output must equal)."""
    device = model.device
    cache = DynamicCache()
    logits = model(input_ids=torch.tensor([prompt], device=device), past_key_values=cache).logits[0, -1]
    out: list[int] = []
    while True:
        token = int(logits.argmax())
        out.append(token)
        if token == eos_token_id or len(out) >= max_new_tokens:
            return out
        logits = model(input_ids=torch.tensor([[token]], device=device), past_key_values=cache).logits[0, -1]


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
        from transformers import AutoModelForCausalLM

        return AutoModelForCausalLM.from_pretrained(self.path, dtype=torch.float32).eval()


class NamedModel:
    """A picklable model source: any name ``helpers.models.load_model`` knows (e.g. ``"cpu-pair/target"``)."""

    def __init__(self, name: str, dtype: torch.dtype | None = None) -> None:
        self.name, self.dtype = name, dtype

    def __call__(self):
        from helpers.models import load_model

        return load_model(self.name, dtype=self.dtype)[0].eval()


def model_source(name: str, dtype: torch.dtype | None = None):
    """A directory holding a saved model, or a name ``helpers.models.load_model`` knows."""
    from pathlib import Path

    return PretrainedDir(name) if Path(name).is_dir() else NamedModel(name, dtype)
