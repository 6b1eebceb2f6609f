"""The CPU pair's model shapes: the target, its drafts and notebook 12's draft family, as transformers configs.

A shape is the model's, not the trainer's: :func:`make_config` builds the untrained target that stands in for
the CPU pair before it is trained (:mod:`helpers.generation.loading`), and the trainer (:mod:`helpers.training`)
builds every model it trains from it.

On a CPU a small model's decode step costs mostly per-layer overhead, so the cost ratio is set by depth, not
width. The target is deep (16 layers) so that a 1-layer draft of the SAME width costs about a tenth of it, which
lets the drafts start from the target's own embedding and first layers; it is narrow (192) so that it trains in
about 40 minutes on 2 cores. The drafts differ in depth: one layer (cheap) or two (a second attention layer can
copy from the context, "induction", so it agrees more, at about twice the cost).
"""
from __future__ import annotations

from transformers import Qwen3Config

from helpers.models.registry import parameter_count

EOS_TOKEN = "<|endoftext|>"  # the tokenizer's one special token: end of text, padding and start of text

_WIDTH = dict(hidden_size=192, intermediate_size=576, num_attention_heads=3, num_key_value_heads=1, head_dim=64)
MODEL_SHAPES: dict[str, dict] = {
    "target": dict(_WIDTH, num_hidden_layers=16),
    "draft": dict(_WIDTH, num_hidden_layers=1),
    "draft-2l": dict(_WIDTH, num_hidden_layers=2),
}


def draft_shape(spec: str) -> dict:
    """The Qwen3 shape of a draft spec ``"LxW"`` (L layers of width W; ``"LxW-shared"`` the same, sharing the
    target's embedding): MLP 3W, heads of 64 with max(1, round(W/64)) query heads and one KV head, like the pair.

    >>> draft_shape("4x144")["num_attention_heads"]
    2
    """
    body, _, suffix = spec.removeprefix("draft-").partition("-")
    layers, _, width = body.partition("x")
    if suffix not in ("", "shared") or not (layers.isdigit() and width.isdigit()) or int(layers) < 1 or int(width) < 16:
        raise ValueError(f"draft shape must look like 'LxW' or 'LxW-shared' (L >= 1 layers of width W >= 16, e.g. "
                         f"'4x144'), got {spec!r}")
    width = int(width)
    return dict(num_hidden_layers=int(layers), hidden_size=width, intermediate_size=3 * width,
                num_attention_heads=max(1, round(width / 64)), num_key_value_heads=1, head_dim=64)


def family_name(spec: str) -> str:
    """The directory and model name of a draft spec: ``"4x144"`` -> ``"draft-4x144"``."""
    return spec if spec.startswith("draft-") else f"draft-{spec}"


def make_config(shape: str, tokenizer) -> Qwen3Config:
    """A named shape (``MODEL_SHAPES``) or a draft spec ``"LxW"`` (:func:`draft_shape`), sized to ``tokenizer``."""
    eos = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    return Qwen3Config(
        vocab_size=len(tokenizer), max_position_embeddings=4096, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        bos_token_id=eos, eos_token_id=eos, pad_token_id=eos,
        **(MODEL_SHAPES[shape] if shape in MODEL_SHAPES else draft_shape(shape)),
    )


def shape_parameters(shape: str, tokenizer) -> int:
    """Parameters of a shape (tied embedding counted once)."""
    return parameter_count(make_config(shape, tokenizer))
