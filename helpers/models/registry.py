"""One way to get a model (and tokenizer) by name, for every profile.

Names (``KNOWN_MODELS`` lists them all, with what each one is):

- a handout id, e.g. ``"Qwen/Qwen3-8B"``: with ``weights="pretrained"`` (the default) the real model through
  the normal ``from_pretrained`` path (GPU profile, bf16, needs the Hugging Face Hub or its cache); with
  ``weights="random"`` the real architecture from ``data/configs/`` with random weights, offline;
- ``"cpu/<model>"``, e.g. ``"cpu/Qwen3-8B"``: a small scaled analog of a handout model for the CPU profile
  (:func:`analog_config`), always random weights;
- ``"cpu-pair/target"``, ``"cpu-pair/draft"``, ``"cpu-pair/draft-2l"``: the trained CPU pair in
  ``data/cpu_pair/`` (``python -m helpers.training``), offline; :func:`load_cpu_pair` returns the
  target, the fastest draft and their shared tokenizer; ``"cpu-pair/target-long"`` (notebook 11) and the draft
  family ``"cpu-pair/draft-<layers>x<width>"`` (notebook 12) are there too.

Random weights are built on the meta device and materialised directly on the target device and dtype (no
float32 CPU copy first), so an 8B model appears in seconds. Every model returned carries
``model.weights_label`` ("pretrained", "random" or "cpu-pair") for the result rows; label results from
random weights "random weights" wherever they appear.
"""
from __future__ import annotations

import contextlib
import importlib.util

import json
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from helpers.models.configs import KNOWN_MODELS as HANDOUT_MODELS, load_config
from helpers.hardware import resolve_device
from helpers.paths import DATA_DIR

CPU_PAIR_DIR = DATA_DIR / "cpu_pair"
# Notebook 12's drafts at equal parameter count (within 10% of draft-2l's), from deep-narrow to shallow-wide, each
# named draft-<layers>x<width>; "-shared" uses the target's embedding and LM head, frozen
# (python -m helpers.training --stage drafts).
DRAFT_FAMILY = ("draft-8x112", "draft-4x144", "draft-2x192", "draft-1x240", "draft-2x192-shared")
CPU_PAIR_MODELS = ("target", "draft", "draft-2l", "target-long", *DRAFT_FAMILY)
ANALOG_PREFIX = "cpu/"
PAIR_PREFIX = "cpu-pair/"

# Analogs divide depth by DEPTH_SCALE and every width (hidden, head size, MLP) by WIDTH_SCALE, and keep the
# head counts. Vocabulary is divided by DEPTH_SCALE * WIDTH_SCALE so that the LM head keeps its share of
# the parameters (body ~ layers * hidden^2, head ~ vocab * hidden): the relative depth, width, vocabulary
# and KV-head differences between the handout models survive the scaling. (The KV cache per token shrinks only
# with width, by WIDTH_SCALE, while the weights shrink by DEPTH_SCALE * WIDTH_SCALE**2, so at equal sequence
# lengths the cache is a larger share of the bytes an analog reads than of the real model's.)
DEPTH_SCALE = 4
WIDTH_SCALE = 16


def _analog_name(model_id: str) -> str:
    return ANALOG_PREFIX + model_id.split("/", 1)[1]


ANALOGS = {_analog_name(model_id): model_id for model_id in HANDOUT_MODELS}

KNOWN_MODELS: dict[str, str] = {
    **{model_id: "handout model: pretrained (Hub, GPU profile) or random weights (offline)"
       for model_id in HANDOUT_MODELS},
    **{name: f"CPU analog of {model_id}, random weights" for name, model_id in ANALOGS.items()},
    **{PAIR_PREFIX + name: f"trained CPU pair {name} (data/cpu_pair/{name})" for name in CPU_PAIR_MODELS},
}


def _unknown(name: str) -> ValueError:
    known = "\n  ".join(KNOWN_MODELS)
    return ValueError(f"unknown model name {name!r}. Known names (case-sensitive):\n  {known}")


# --------------------------------------------------------------------------- configs

def analog_config(model_id: str):
    """A small config of the same family as ``model_id`` with the same shape ratios.

    >>> analog_config("Qwen/Qwen3-8B").num_hidden_layers   # 36 / 4
    9
    """
    if model_id.startswith(ANALOG_PREFIX):
        model_id = ANALOGS.get(model_id, model_id)
    try:
        config = load_config(model_id)
    except KeyError:
        raise _unknown(model_id) from None
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    config.num_hidden_layers = max(1, round(config.num_hidden_layers / DEPTH_SCALE))
    config.head_dim = max(2, head_dim // WIDTH_SCALE)
    config.hidden_size = max(8, round(config.hidden_size / WIDTH_SCALE))
    config.intermediate_size = max(8, round(config.intermediate_size / WIDTH_SCALE))
    config.vocab_size = max(64, round(config.vocab_size / (DEPTH_SCALE * WIDTH_SCALE)))
    config.max_position_embeddings = max(config.max_position_embeddings, 1 << 16)
    for attr in ("bos_token_id", "eos_token_id", "pad_token_id"):
        if getattr(config, attr, None) is not None and getattr(config, attr) >= config.vocab_size:
            setattr(config, attr, config.vocab_size - 1)
    if getattr(config, "layer_types", None) is not None:
        config.layer_types = config.layer_types[: config.num_hidden_layers]
    if getattr(config, "max_window_layers", None) is not None:
        config.max_window_layers = config.num_hidden_layers
    config._name_or_path = _analog_name(model_id)
    return config


def model_config(name: str):
    """The config ``load_model(name)`` builds (handout id, analog or CPU-pair name), read offline."""
    if name in HANDOUT_MODELS:
        return load_config(name)
    if name in ANALOGS:
        return analog_config(name)
    if name.startswith(PAIR_PREFIX) and name[len(PAIR_PREFIX):] in CPU_PAIR_MODELS:
        return AutoConfig.from_pretrained(_pair_dir(name[len(PAIR_PREFIX):]))
    raise _unknown(name)


# --------------------------------------------------------------------------- random weights

def _refresh_rotary_buffers(model, device: torch.device) -> None:
    """Recompute RoPE frequencies: they are buffers, not parameters, so ``to_empty`` left them garbage."""
    for module in model.modules():
        if isinstance(getattr(module, "inv_freq", None), torch.Tensor) and hasattr(module, "config"):
            fresh = type(module)(module.config)  # small: one vector of head_dim / 2 floats
            for buffer_name, value in fresh.named_buffers(recurse=False):
                setattr(module, buffer_name, value.to(device))


@torch.no_grad()
def init_random_weights_(model, seed: int = 0, std: float = 0.02) -> None:
    """Fast deterministic init on the model's own device: N(0, std) matrices, norms 1, biases 0."""
    generator = None
    for name, param in model.named_parameters():
        if generator is None:
            generator = torch.Generator(device=param.device).manual_seed(seed)
        if param.dim() >= 2:
            param.normal_(0.0, std, generator=generator)
        elif "norm" in name:
            param.fill_(1.0)
        else:
            param.zero_()


def random_model(config, *, device="cpu", dtype=torch.float32, seed: int = 0):
    """A causal LM with random weights: built on meta, materialised on ``device`` in ``dtype``."""
    device = resolve_device(device)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.to_empty(device=device)
    _refresh_rotary_buffers(model, device)
    if getattr(model.config, "tie_word_embeddings", False):
        model.tie_weights()
    if device.type != "meta":  # meta: results-only rendering (shapes only, see helpers.hardware.resolve_device)
        init_random_weights_(model, seed)
    model.eval()
    model.weights_label = "random"
    return model


# --------------------------------------------------------------------------- the CPU pair

def _pair_dir(name: str) -> Path:
    return CPU_PAIR_DIR / name


def _require_pair_files(*names: str) -> None:
    for name in names:
        path = _pair_dir(name)
        needed = [path / "tokenizer.json"] if name == "tokenizer" else [path / "config.json",
                                                                        path / "model.safetensors"]
        missing = [p for p in needed if not p.exists()]
        if missing:
            raise FileNotFoundError(
                f"CPU pair weights missing: {', '.join(str(p) for p in missing)}. They are committed in the "
                "repository (git checkout data/cpu_pair) or can be retrained with "
                "`python -m helpers.training` (about 70 minutes on 2 idle CPU cores)."
            )


def load_cpu_tokenizer():
    """The CPU pair's shared byte-level BPE tokenizer."""
    _require_pair_files("tokenizer")
    return AutoTokenizer.from_pretrained(_pair_dir("tokenizer"))


@contextlib.contextmanager
def quiet_loading():
    """transformers' progress bars off for the duration (restored after, so Hub downloads still show theirs)."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def load_cpu_model(name: str = "target", *, device="cpu", dtype=torch.float32):
    """One model of the CPU pair ('target', 'draft', 'draft-2l' or 'target-long', the target fine-tuned on
    4096-token windows); stored bf16, loaded as ``dtype``."""
    if name not in CPU_PAIR_MODELS:
        raise ValueError(f"unknown CPU pair model {name!r}; known: {', '.join(CPU_PAIR_MODELS)}")
    _require_pair_files(name)
    with quiet_loading():  # a few MB from data/: a "Loading weights" bar would only clutter notebook outputs
        model = AutoModelForCausalLM.from_pretrained(_pair_dir(name), dtype=dtype).to(resolve_device(device))
    model.eval()
    model.weights_label = "cpu-pair"
    return model


BEST_DRAFT = "draft-2l"  # the fastest draft end to end (notebook 12 measures every draft against it)


def load_cpu_pair(draft: str = BEST_DRAFT, *, device="cpu", dtype=torch.float32):
    """``(target, draft, tokenizer)``: the trained CPU pair, offline, as transformers models.

    ``draft`` picks the draft: by default the fastest end to end (:data:`BEST_DRAFT`); 'draft' is the 1-layer draft,
    and notebook 12's family (:data:`DRAFT_FAMILY`) are the others.
    """
    return (load_cpu_model("target", device=device, dtype=dtype),
            load_cpu_model(draft, device=device, dtype=dtype), load_cpu_tokenizer())


def cpu_pair_info() -> dict:
    """The measured figures of the CPU pair (``data/cpu_pair/card.json``, written by the training script)."""
    path = CPU_PAIR_DIR / "card.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run `python -m helpers.training` to train and measure")
    return json.loads(path.read_text(encoding="utf-8"))


# --------------------------------------------------------------------------- one entry point

def _pretrained(model_id: str, device: torch.device, dtype):
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_id)
        # device_map loads straight onto the GPU but needs accelerate, which the workbook does not require
        placed = {"device_map": str(device)} if device.type != "cpu" and importlib.util.find_spec("accelerate") else {}
        model = AutoModelForCausalLM.from_pretrained(model_id, dtype=dtype, **placed).to(device)
    except OSError as error:
        raise RuntimeError(
            f"could not load pretrained {model_id!r} from the Hugging Face Hub or its local cache ({error}). "
            "Pretrained weights need network access (and, for Llama, an accepted licence and HF_TOKEN): that "
            "is the GPU profile. Offline, use weights='random' for this architecture, its CPU analog "
            f"{_analog_name(model_id)!r}, or the trained CPU pair (load_cpu_pair()); the CPU profile "
            "(params/cpu.yaml) works offline."
        ) from error
    model.eval()
    model.weights_label = "pretrained"
    return model, tokenizer


def load_model(name: str, *, weights: str | None = None, device="cpu", dtype=None, seed: int = 0):
    """``(model, tokenizer_or_None)`` for any known name (see the module docstring).

    weights: 'pretrained' (handout ids; the default for them), 'random' (handout ids and analogs; the only
    choice for analogs) or 'cpu-pair' (the CPU pair's trained weights; the only choice for them).
    dtype: default bfloat16 for pretrained models, float32 otherwise. Random models have no tokenizer.
    """
    if name not in KNOWN_MODELS:
        raise _unknown(name)
    device = resolve_device(device)
    if name.startswith(PAIR_PREFIX):
        if weights not in (None, "cpu-pair"):
            raise ValueError(f"{name!r} has trained weights only; pass weights='cpu-pair' or leave it out")
        model = load_cpu_model(name[len(PAIR_PREFIX):], device=device, dtype=dtype or torch.float32)
        return model, load_cpu_tokenizer()
    if name in ANALOGS:
        if weights not in (None, "random"):
            raise ValueError(f"analog {name!r} exists only with random weights; pass weights='random'")
        return random_model(analog_config(name), device=device, dtype=dtype or torch.float32, seed=seed), None
    weights = weights or "pretrained"
    if weights == "pretrained":
        return _pretrained(name, device, dtype or torch.bfloat16)
    if weights == "random":
        return random_model(load_config(name), device=device, dtype=dtype or torch.float32, seed=seed), None
    raise ValueError(f"weights must be 'pretrained' or 'random' for {name!r}, got {weights!r}")


def parameter_count(config) -> int:
    """Parameters of the causal LM ``config`` describes (tied weights once), built on the meta device: no memory."""
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


def describe(model) -> dict:
    """Shape facts for result rows and tables: layers, hidden, heads, KV heads, vocab, parameters, weights."""
    config = model.config
    return {
        "layers": config.num_hidden_layers,
        "hidden_size": config.hidden_size,
        "heads": config.num_attention_heads,
        "kv_heads": getattr(config, "num_key_value_heads", None) or config.num_attention_heads,
        "vocab_size": config.vocab_size,
        "parameters": sum(p.numel() for p in model.parameters()),
        "weights": getattr(model, "weights_label", "unknown"),
    }
