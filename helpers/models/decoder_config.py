"""The few numbers that define a Qwen3 decoder (:class:`DecoderConfig`), read from a transformers config. Its own
module: the model file (:mod:`helpers.models.qwen3`) and its cache (:mod:`helpers.models.kv_cache`) both read it."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DecoderConfig:
    """The few numbers that define a Qwen3 decoder."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    max_seq_len: int  # context limit (transformers: max_position_embeddings)
    rope_theta: float = 1_000_000.0
    rms_norm_eps: float = 1e-6
    attention_bias: bool = False
    tie_word_embeddings: bool = False

    def __post_init__(self):
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads}) "
                "for grouped-query attention"
            )

    @classmethod
    def from_hf(cls, hf_config) -> "DecoderConfig":
        """Read a transformers ``Qwen3Config``; refuse features this minimal model does not implement."""
        if getattr(hf_config, "model_type", None) != "qwen3":
            raise ValueError(
                f"the minimal decoder implements the Qwen3 architecture, got model_type="
                f"{getattr(hf_config, 'model_type', None)!r}; load a Qwen3 model (e.g. the CPU pair's target)"
            )
        rope = getattr(hf_config, "rope_parameters", None) or {"rope_type": "default", "rope_theta": hf_config.rope_theta}
        if rope.get("rope_type", "default") != "default":
            raise ValueError(f"only plain RoPE is implemented, the config asks for rope_type={rope['rope_type']!r}")
        if "sliding_attention" in (getattr(hf_config, "layer_types", None) or []):
            raise ValueError("sliding-window layers are not implemented; use a config with use_sliding_window=False")
        if hf_config.hidden_act != "silu":
            raise ValueError(f"SwiGLU needs hidden_act='silu', the config has {hf_config.hidden_act!r}")
        return cls(
            vocab_size=hf_config.vocab_size,
            hidden_size=hf_config.hidden_size,
            intermediate_size=hf_config.intermediate_size,
            num_layers=hf_config.num_hidden_layers,
            num_heads=hf_config.num_attention_heads,
            num_kv_heads=hf_config.num_key_value_heads,
            head_dim=getattr(hf_config, "head_dim", None) or hf_config.hidden_size // hf_config.num_attention_heads,
            max_seq_len=hf_config.max_position_embeddings,
            rope_theta=float(rope["rope_theta"]),
            rms_norm_eps=hf_config.rms_norm_eps,
            attention_bias=bool(getattr(hf_config, "attention_bias", False)),
            tie_word_embeddings=bool(getattr(hf_config, "tie_word_embeddings", False)),
        )
