"""GPU memory arithmetic for the handout's models (§1.2): parameters, KV cache, what fits.

Convention: every function takes and returns BYTES. Converting to GB (1e9 bytes, what GPU vendors print on
the box) or GiB (2**30 bytes, what ``nvidia-smi`` and PyTorch report) happens only at the edges, with
``GB``/``GiB`` below, and the notebook always names which one it shows.
"""
from __future__ import annotations

from dataclasses import dataclass

from helpers.models.configs import KNOWN_MODELS, QWEN3_FAMILY, load_config, miniature_config  # noqa: F401 (re-exported)

GB = 10**9
GiB = 2**30
MiB = 2**20

def _head_dim(config) -> int:
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def _kv_heads(config) -> int:
    return getattr(config, "num_key_value_heads", None) or config.num_attention_heads


def param_count(config) -> int:
    """Exact parameter count of a Qwen3, Llama or OLMo causal LM built from ``config``.

    Embeddings (+ an LM head unless tied), per layer: q/k/v/o projections (GQA: k and v have only
    ``num_key_value_heads`` heads; optional biases), Qwen3's per-head q/k RMSNorm weights, the SwiGLU MLP
    (gate, up, down), and the two pre-norms; plus the final norm. OLMo's LayerNorms have no parameters.
    """
    h, v, n_layers = config.hidden_size, config.vocab_size, config.num_hidden_layers
    d, n_q, n_kv = _head_dim(config), config.num_attention_heads, _kv_heads(config)
    model_type = config.model_type
    if model_type not in ("qwen3", "llama", "olmo"):
        raise ValueError(f"param_count knows qwen3, llama and olmo, not {model_type!r}")

    attention = h * n_q * d + 2 * h * n_kv * d + n_q * d * h
    if getattr(config, "attention_bias", False):
        attention += n_q * d + 2 * n_kv * d + h
    if model_type == "qwen3":
        attention += 2 * d  # q_norm and k_norm: one RMSNorm weight per head dimension, shared by heads
    mlp = 3 * h * config.intermediate_size
    if getattr(config, "mlp_bias", False):
        mlp += 2 * config.intermediate_size + h
    norm = 0 if model_type == "olmo" else h  # OLMo uses non-parametric LayerNorm
    per_layer = attention + mlp + 2 * norm

    embeddings = v * h
    lm_head = 0 if config.tie_word_embeddings else v * h
    return embeddings + lm_head + n_layers * per_layer + norm


# What mixed-precision training with Adam keeps per parameter (§1.1), activations aside: the bf16 weights the
# forward and backward passes use, their gradients, the fp32 master copy the optimizer updates, and Adam's two
# fp32 moments (Rajbhandari et al., ZeRO, 2020: 2 + 2 + 4 + 4 + 4 = 16 bytes with bf16/fp16 gradients).
TRAINING_STATE_BYTES = {"weights (bf16)": 2, "gradients (bf16)": 2, "fp32 master copy": 4,
                        "Adam first moment m (fp32)": 4, "Adam second moment v (fp32)": 4}
FP32_GRADIENT_BYTES = 4  # gradients kept in fp32 instead (some mixed-precision setups accumulate them so)


def training_state_bytes(fp32_gradients: bool = False) -> dict[str, int]:
    """Bytes per parameter of each part of the training state (:data:`TRAINING_STATE_BYTES`), with the
    gradients in fp32 if ``fp32_gradients``."""
    state = dict(TRAINING_STATE_BYTES)
    if fp32_gradients:
        del state["gradients (bf16)"]
        state = {"weights (bf16)": state.pop("weights (bf16)"), "gradients (fp32)": FP32_GRADIENT_BYTES, **state}
    return state


def weight_bytes(config, bytes_per_param: int = 2) -> int:
    return param_count(config) * bytes_per_param


def decode_param_count(config) -> int:
    """Parameters one decode step reads in full: all of :func:`param_count` except an input embedding that is
    *untied* from the LM head (a step reads one row of it per token, not the matrix). A tied matrix is read once,
    as the LM head, and counted once (as :func:`param_count` already does)."""
    embedding = 0 if config.tie_word_embeddings else config.vocab_size * config.hidden_size
    return param_count(config) - embedding


def decode_weight_bytes(config, bytes_per_param: int = 2) -> int:
    """Weight bytes one decode step reads (:func:`decode_param_count`): what a memory-bound (roofline) step costs
    in weight traffic, and the numerator/denominator of a memory-bound draft ratio c."""
    return decode_param_count(config) * bytes_per_param


def kv_cache_bytes_per_token(config, bytes_per_elem: int = 2) -> int:
    """K and V, for every layer and KV head: 2 * L * n_kv * d_head * bytes."""
    return 2 * config.num_hidden_layers * _kv_heads(config) * _head_dim(config) * bytes_per_elem


def kv_cache_bytes(config, seq_len: int, batch_size: int = 1, bytes_per_elem: int = 2) -> int:
    """KV cache bytes for ``batch_size`` sequences of ``seq_len`` tokens (a static, fully allocated cache)."""
    if seq_len < 0 or batch_size < 1:
        raise ValueError(f"need seq_len >= 0 and batch_size >= 1, got seq_len={seq_len}, batch_size={batch_size}")
    return batch_size * seq_len * kv_cache_bytes_per_token(config, bytes_per_elem)


def max_seq_len(config, gpu_bytes: int, batch_size: int, bytes_per_elem: int = 2, reserved_bytes: int = 0) -> int:
    """Longest sequence (tokens per sequence) whose weights + KV cache fit in ``gpu_bytes``.

    Only weights and KV cache count (§1.2.2 lets us ignore framework overhead); ``reserved_bytes`` sets
    aside anything else you want to account for. Not capped by the model's context window: compare with
    ``config.max_position_embeddings`` yourself. Returns 0 when even the weights do not fit.
    """
    free = gpu_bytes - reserved_bytes - weight_bytes(config, bytes_per_elem)
    if free <= 0:
        return 0
    return free // (batch_size * kv_cache_bytes_per_token(config, bytes_per_elem))


def max_params_for_forward(
    gpu_bytes: int,
    bytes_per_param: int = 2,
    overhead_bytes: int = 0,
    activation_fraction: float = 0.0,
) -> int:
    """Largest parameter count whose single forward pass fits (§1.2.1).

    The assumption is explicit: memory = params * bytes_per_param * (1 + activation_fraction) +
    overhead_bytes, where ``activation_fraction`` is activations/temporaries relative to the weights and
    ``overhead_bytes`` a fixed reserve (CUDA context, allocator slack). No KV cache is kept (one pass).
    """
    if not 0 <= activation_fraction:
        raise ValueError("activation_fraction must be >= 0")
    usable = gpu_bytes - overhead_bytes
    if usable <= 0:
        return 0
    return int(usable // (bytes_per_param * (1 + activation_fraction)))


def forward_fit_row(role: str, gpu_label: str, gpu_bytes: int, activation_fraction: float, *, bytes_per_param: int,
                    overhead_bytes: int) -> dict:
    """One row of the §1.2.1 table: :func:`max_params_for_forward` on ``gpu_bytes`` and that count in whole
    billions, rounded down (a model that fits must not be rounded up past the limit)."""
    params_fit = max_params_for_forward(gpu_bytes, bytes_per_param=bytes_per_param, overhead_bytes=overhead_bytes,
                                        activation_fraction=activation_fraction)
    return {"role": role, "GPU memory": gpu_label, "f": activation_fraction, "max parameters": params_fit,
            "billions (rounded down)": round_down(params_fit, 10**9) // 10**9}


def round_down(value: int, multiple: int = 10) -> int:
    """Round down to a multiple (a length that fits must not be rounded up past the limit)."""
    return (value // multiple) * multiple


def round_nearest(value: int, multiple: int = 10) -> int:
    """Round to the nearest multiple, halves up (integer arithmetic, no banker's rounding)."""
    return ((value + multiple // 2) // multiple) * multiple


def seq_len_answer(config, gpu_bytes: int, batch_size: int, multiple: int = 10, bytes_per_elem: int = 2) -> dict:
    """§1.2.2 for one reading of the GPU's memory: the exact longest sequence and its roundings, in tokens.

    ``rounded_down`` is the answer (a multiple of ``multiple`` that still fits); ``rounded_nearest`` is what
    plain nearest-``multiple`` rounding gives, with ``nearest_fits`` saying whether that length still fits
    (it does not whenever rounding went up)."""
    exact = max_seq_len(config, gpu_bytes, batch_size, bytes_per_elem)
    nearest = round_nearest(exact, multiple)
    fits = memory_breakdown(config, gpu_bytes, batch_size, nearest, bytes_per_elem)["headroom"] >= 0
    return {"gpu_bytes": int(gpu_bytes), "free_for_kv": int(gpu_bytes) - weight_bytes(config, bytes_per_elem),
            "exact": exact, "rounded_down": round_down(exact, multiple), "rounded_nearest": nearest,
            "nearest_fits": bool(fits)}


# Readings of the L40S's memory, in bytes, each with where it comes from. The datasheet's 48 GB (1e9 bytes) is
# what §1.2.2 is answered with; the others show how much the answer moves with the reading.
@dataclass(frozen=True)
class CardMemory:
    """What a card sold as ``datasheet_gb`` GB (10^9 bytes) exposes to software: ``nvidia-smi``'s memory.total
    (``total_mib`` MiB), with where that figure comes from."""

    card: str
    datasheet_gb: float
    total_mib: int
    source: str

    @property
    def total_bytes(self) -> int:
        return self.total_mib * MiB

    @property
    def label(self) -> str:
        return f"{self.card}: {self.total_mib:,} MiB"


_SMI_LIST = "nvidia-smi memory.total, as listed in github.com/modal-labs/modal-client/pull/2797"
# nvidia-smi's memory.total of cards sold by the GB. Every one is MORE than its datasheet figure read in 10^9 bytes
# (an "80 GB" A100 exposes 80 GiB), which is why a prediction of "does not fit" must compare with these bytes.
NVIDIA_SMI_TOTALS = (
    CardMemory("A100 40GB", 40, 40960, _SMI_LIST),
    CardMemory("L40S", 48, 46068, _SMI_LIST + "; also github.com/akash-network/provider-configs/pull/99"),
    CardMemory("A100 80GB", 80, 81920, _SMI_LIST),
    CardMemory("H100 80GB", 80, 81559, _SMI_LIST + "; also github.com/NVIDIA/nccl/issues/1264"),
    CardMemory("H200", 141, 143771, "nvidia-smi memory.total on this course's lent H200 (driver 580.159, 2026-10)"),
)


def cards_sold_as(datasheet_gb: float) -> list[CardMemory]:
    """The listed cards (:data:`NVIDIA_SMI_TOTALS`) whose datasheet gives ``datasheet_gb`` GB, smallest total first."""
    return sorted((c for c in NVIDIA_SMI_TOTALS if c.datasheet_gb == datasheet_gb), key=lambda c: c.total_mib)


def exposed_memory(datasheet_gb: float) -> CardMemory:
    """What "a ``datasheet_gb`` GB card" exposes: the smallest ``nvidia-smi`` total among the listed cards of that
    size (the conservative reading when the card is not named). A size with no listed card falls back to the
    datasheet's bytes, labelled so (``total_mib`` rounded up, so that it never reads less than the datasheet)."""
    cards = cards_sold_as(datasheet_gb)
    if cards:
        return cards[0]
    return CardMemory(f"{datasheet_gb:g} GB card (no nvidia-smi total listed: datasheet bytes)", datasheet_gb,
                      -(-int(datasheet_gb * GB) // MiB), "the datasheet figure, in 10^9-byte units")


_L40S = next(c for c in NVIDIA_SMI_TOTALS if c.card == "L40S")
L40S_MEMORY_READINGS = (
    ("datasheet: 48 GB", 48 * GB, "NVIDIA L40S datasheet: 48 GB GDDR6 with ECC"),
    (f"nvidia-smi total: {_L40S.total_mib:,} MiB", _L40S.total_bytes, _L40S.source),
    ("45 GiB (nvidia-smi total, nearest GiB)", 45 * GiB, "the nvidia-smi total rounded to the nearest whole GiB (slightly above it)"),
    ("48 GiB (GB misread as GiB)", 48 * GiB, "the datasheet's 48 read as 2^30-byte units: more than the card exposes"),
)


# Memory of common inference GPUs as sold, in GB (1e9 bytes) -- vendor datasheets. nvidia-smi reports its total in
# MiB: more bytes than these figures (see NVIDIA_SMI_TOTALS), though less than the same number of GiB for some
# cards (H100 80GB: 81,559 MiB < 80 GiB), which is one reason the units matter.
GPU_MEMORY_GB = {
    "L40S (48 GB)": 48,
    "A6000 (48 GB)": 48,
    "A100 40GB": 40,
    "A100 80GB": 80,
    "H100 80GB": 80,
    "H200 (141 GB)": 141,
    "RTX 4090 (24 GB)": 24,
}


def memory_breakdown(config, gpu_bytes: int, batch_size: int, seq_len: int, bytes_per_elem: int = 2) -> dict:
    """Weights, KV cache and what is left (negative = does not fit), all in bytes."""
    weights = weight_bytes(config, bytes_per_elem)
    kv = kv_cache_bytes(config, seq_len, batch_size, bytes_per_elem)
    return {"weights": weights, "kv_cache": kv, "headroom": gpu_bytes - weights - kv}


def cache_tensor_bytes(cache) -> int:
    """Bytes a transformers cache really holds in its key and value tensors."""
    total = 0
    for layer in cache.layers:
        for tensor in (layer.keys, layer.values):
            if tensor is not None:
                total += tensor.numel() * tensor.element_size()
    return total


def predicted_generation_bytes(config, batch_size: int, input_len: int, new_tokens: int,
                               bytes_per_elem: int) -> int:
    """A *prediction* of peak memory for one ``generate`` call: weights + full KV cache + prefill working set.

    The prefill working set counts the residual stream and attention projections (about 4 x hidden) and the
    MLP's gate, up and product (3 x intermediate) for every prompt token of one layer, plus float32 logits for
    the last position. It ignores framework overhead and attention scores (flash / memory-efficient attention
    does not materialise them). Use it to say which configurations a GPU is *expected* not to fit; an "oom"
    row only ever comes from a real out-of-memory error.
    """
    weights = param_count(config) * bytes_per_elem
    kv = kv_cache_bytes(config, input_len + new_tokens, batch_size, bytes_per_elem)
    prefill = batch_size * input_len * (4 * config.hidden_size + 3 * config.intermediate_size) * bytes_per_elem
    logits = batch_size * config.vocab_size * 4
    return weights + kv + prefill + logits


@dataclass(frozen=True)
class GenerationPrediction:
    """The prediction column of a generation sweep: :func:`predicted_generation_bytes` of ``config`` at
    ``batch_size`` and ``bytes_per_elem``, against the memory a card sold as ``gpu_gb`` GB exposes
    (:func:`exposed_memory`: ``nvidia-smi``'s total, more than ``gpu_gb`` x 10^9 bytes), not the datasheet figure."""

    config: object
    batch_size: int
    bytes_per_elem: int
    gpu_gb: float

    @property
    def card(self) -> CardMemory:
        """The card whose exposed memory the prediction is compared with."""
        return exposed_memory(self.gpu_gb)

    def bytes(self, input_len: int, new_tokens: int) -> int:
        """Predicted peak memory (bytes) of one ``generate`` call."""
        return predicted_generation_bytes(self.config, self.batch_size, input_len, new_tokens, self.bytes_per_elem)

    def gb(self, input_len: int, new_tokens: int) -> float:
        """Predicted peak memory (GB, 10^9 bytes) of one ``generate`` call."""
        return self.bytes(input_len, new_tokens) / GB

    def headroom(self, input_len: int, new_tokens: int) -> int:
        """Bytes the card exposes beyond the prediction (negative: predicted not to fit)."""
        return self.card.total_bytes - self.bytes(input_len, new_tokens)

    def over(self, input_len: int, new_tokens: int) -> bool:
        """Whether the prediction exceeds the memory the card exposes."""
        return self.headroom(input_len, new_tokens) < 0

    def over_datasheet(self, input_len: int, new_tokens: int) -> bool:
        """Whether it exceeds the datasheet's ``gpu_gb`` x 10^9 bytes (less than the card exposes)."""
        return self.bytes(input_len, new_tokens) > self.gpu_gb * GB
