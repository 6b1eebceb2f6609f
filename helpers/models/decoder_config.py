"""The few numbers that define one of the handout's decoders (:class:`DecoderConfig`), read from a transformers config.

Qwen3, Llama (2 and 3.x) and OLMo are one architecture — pre-norm blocks of grouped-query attention with RoPE and a
SwiGLU MLP — that differ in four places, each a field here: the norm (RMSNorm with a weight, or OLMo's LayerNorm
without parameters), the RoPE table (plain, or Llama 3's frequency scaling), a per-head RMSNorm on queries and keys
(Qwen3) and a clip of the q/k/v projections (OLMo's ``clip_qkv``). Its own module: the model file
(:mod:`helpers.models.decoder`) and its cache (:mod:`helpers.models.kv_cache`) both read it."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

# model_type -> (norm, q/k norm): what each family the model file implements differs in
FAMILIES = {"qwen3": ("rms", True), "llama": ("rms", False), "olmo": ("layer", False)}
ROPE_TYPES = ("default", "llama3")


@dataclass(frozen=True)
class DecoderConfig:
    """The few numbers that define a decoder of one of :data:`FAMILIES` (defaults: Qwen3's)."""

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
    family: str = "qwen3"  # transformers' model_type
    norm: str = "rms"  # "rms": RMSNorm with a weight; "layer": LayerNorm without weight or bias (OLMo, eps 1e-5)
    qk_norm: bool = True  # per-head RMSNorm of queries and keys before RoPE (Qwen3)
    clip_qkv: float | None = None  # clamp q, k and v to [-clip, clip] after their projection (OLMo)
    mlp_bias: bool = False
    # Llama 3's RoPE scaling: (factor, low_freq_factor, high_freq_factor, original_max_position_embeddings)
    rope_llama3: tuple[float, float, float, int] | None = None

    def __post_init__(self):
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads}) "
                "for grouped-query attention"
            )
        if self.norm not in ("rms", "layer"):
            raise ValueError(f"norm must be 'rms' or 'layer', got {self.norm!r}")

    def inv_freq(self, device=None) -> torch.Tensor:
        """RoPE's inverse frequencies (head_dim / 2 of them, float32), Llama 3's scaling applied if configured:
        wavelengths longer than ``original / low_freq_factor`` are slowed by ``factor``, shorter than
        ``original / high_freq_factor`` kept, and the band between interpolated smoothly."""
        steps = torch.arange(0, self.head_dim, 2, dtype=torch.int64, device=device).float() / self.head_dim
        inv_freq = 1.0 / (self.rope_theta ** steps)
        if self.rope_llama3 is None:
            return inv_freq
        factor, low, high, original = self.rope_llama3
        wavelength = 2 * math.pi / inv_freq
        smooth = (original / wavelength - low) / (high - low)
        blended = (1 - smooth) * inv_freq / factor + smooth * inv_freq
        scaled = torch.where(wavelength > original / low, inv_freq / factor, inv_freq)
        medium = (wavelength >= original / high) & (wavelength <= original / low)
        return torch.where(medium, blended, scaled)

    @classmethod
    def from_hf(cls, hf_config) -> "DecoderConfig":
        """Read a transformers Qwen3, Llama or OLMo config; refuse features this model file does not implement."""
        family = getattr(hf_config, "model_type", None)
        if family not in FAMILIES:
            raise ValueError(
                f"the model file implements {', '.join(FAMILIES)} (model_type), got model_type={family!r}; "
                "use runtime='transformers' for other architectures"
            )
        rope = getattr(hf_config, "rope_parameters", None) or {"rope_type": "default",
                                                               "rope_theta": hf_config.rope_theta}
        rope_type = rope.get("rope_type", "default")
        if rope_type not in ROPE_TYPES:
            raise ValueError(f"RoPE types {ROPE_TYPES} are implemented, the config asks for rope_type={rope_type!r}; "
                             "use runtime='transformers' for this model")
        if rope.get("partial_rotary_factor", 1.0) != 1.0:
            raise ValueError("partial rotary embeddings are not implemented; use runtime='transformers'")
        if "sliding_attention" in (getattr(hf_config, "layer_types", None) or []):
            raise ValueError("sliding-window layers are not implemented; use a config with use_sliding_window=False")
        if hf_config.hidden_act != "silu":
            raise ValueError(f"SwiGLU needs hidden_act='silu', the config has {hf_config.hidden_act!r}")
        norm, qk_norm = FAMILIES[family]
        llama3 = None
        if rope_type == "llama3":
            llama3 = (float(rope["factor"]), float(rope["low_freq_factor"]), float(rope["high_freq_factor"]),
                      int(rope["original_max_position_embeddings"]))
        return cls(
            vocab_size=hf_config.vocab_size,
            hidden_size=hf_config.hidden_size,
            intermediate_size=hf_config.intermediate_size,
            num_layers=hf_config.num_hidden_layers,
            num_heads=hf_config.num_attention_heads,
            num_kv_heads=getattr(hf_config, "num_key_value_heads", None) or hf_config.num_attention_heads,
            head_dim=getattr(hf_config, "head_dim", None) or hf_config.hidden_size // hf_config.num_attention_heads,
            max_seq_len=hf_config.max_position_embeddings,
            rope_theta=float(rope["rope_theta"]),
            rms_norm_eps=float(getattr(hf_config, "rms_norm_eps", 1e-5)),
            attention_bias=bool(getattr(hf_config, "attention_bias", False)),
            tie_word_embeddings=bool(getattr(hf_config, "tie_word_embeddings", False)),
            family=family, norm=norm, qk_norm=qk_norm,
            clip_qkv=None if getattr(hf_config, "clip_qkv", None) is None else float(hf_config.clip_qkv),
            mlp_bias=bool(getattr(hf_config, "mlp_bias", False)),
            rope_llama3=llama3,
        )
