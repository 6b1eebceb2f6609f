"""Trained drafters on disk: Medusa heads and a feature draft store only their own weights (bf16 safetensors, the
target's embedding and LM head are the target's) and a small config; loading attaches them to a target."""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from helpers.models import CPU_PAIR_DIR
from helpers.specdec.feature_draft import FeatureDraft
from helpers.specdec.medusa import MedusaHeads

__all__ = ["MEDUSA_DIR", "FEATURE_DRAFT_DIR", "drafter_dir", "drafter_fingerprint", "load_feature_draft", "load_medusa_heads",
           "save_drafter"]

MEDUSA_DIR = CPU_PAIR_DIR / "medusa"  # the CPU pair's heads (python -m helpers.training --stage heads)
FEATURE_DRAFT_DIR = CPU_PAIR_DIR / "eagle"
WEIGHTS, CONFIG = "weights.safetensors", "config.json"


def save_drafter(drafter, out_dir: Path) -> None:
    """Write ``drafter``'s own weights in bf16 (a feature draft's vocabulary as int64 ids) and its config to
    ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if isinstance(drafter, MedusaHeads):
        state, config = drafter.state_dict(), {"kind": "medusa", "num_heads": drafter.num_heads}
    elif isinstance(drafter, FeatureDraft):
        state, config = drafter.trainable_state(), {"kind": "feature_draft", "draft_vocab": (
            None if drafter.draft_vocab is None else drafter.draft_vocab.numel())}
    else:
        raise ValueError(f"save_drafter saves MedusaHeads or a FeatureDraft, got {type(drafter).__name__}")
    save_file({k: v.detach().to("cpu", torch.bfloat16 if v.is_floating_point() else v.dtype).contiguous()
               for k, v in state.items()}, out_dir / WEIGHTS)  # token ids (a draft vocabulary) stay integers
    (out_dir / CONFIG).write_text(json.dumps(config, indent=2) + "\n")


def drafter_fingerprint(path: Path) -> str:
    """The first 12 hex digits of the SHA-256 of the drafter's weights in ``path``: result rows record it, so that
    rows measured with other weights (a retrained drafter) are never read as this one's."""
    import hashlib

    return hashlib.sha256(_weights(path).read_bytes()).hexdigest()[:12]


def _weights(path: Path) -> Path:
    """The weights file in ``path``, or a named error that says how to make it."""
    weights = Path(path) / WEIGHTS
    if not weights.exists():
        raise FileNotFoundError(f"{weights} is missing: train it with `python -m helpers.training --stage heads`")
    return weights


def _read(path: Path, kind: str, target) -> tuple[dict, dict]:
    weights = _weights(path)
    config = json.loads((path / CONFIG).read_text())
    if config.get("kind") != kind:
        raise ValueError(f"{path} holds a {config.get('kind')!r} drafter, not a {kind!r} one")
    weight = target.get_output_embeddings().weight
    return config, {k: v.to(weight.device, weight.dtype if v.is_floating_point() else v.dtype)
                    for k, v in load_file(weights).items()}


def load_medusa_heads(target, path: Path | None = None) -> MedusaHeads:
    """The Medusa heads in ``path`` (default: the CPU pair's) on ``target``, in eval mode."""
    config, state = _read(Path(path or MEDUSA_DIR), "medusa", target)
    heads = MedusaHeads(target, config["num_heads"])
    heads.load_state_dict(state)
    return heads.eval()


def drafter_dir(name: str | Path | None, default: Path) -> Path:
    """Where a drafter's files are: ``"cpu-pair/<folder>"`` names a folder of the shipped CPU pair (``"cpu-pair/eagle"``),
    anything else is a directory; None is ``default``."""
    if name is None:
        return default
    if str(name).startswith("cpu-pair/"):
        return CPU_PAIR_DIR / str(name).removeprefix("cpu-pair/")
    return Path(name)


def load_feature_draft(target, path: str | Path | None = None) -> FeatureDraft:
    """The feature draft in ``path`` (a directory or ``"cpu-pair/<folder>"``; default: the CPU pair's) on
    ``target``, in eval mode."""
    path = drafter_dir(path, FEATURE_DRAFT_DIR)
    _, state = _read(path, "feature_draft", target)
    draft = FeatureDraft(target)
    if "draft_vocab" in state:
        draft.restrict_vocab(state["draft_vocab"])  # first: the buffer then exists to load into
    missing, unexpected = draft.load_state_dict(state, strict=False)
    if unexpected or any(not k.startswith(("body.embed_tokens.", "body.lm_head.")) for k in missing):
        raise ValueError(f"{path} does not fit this target's feature draft: missing {missing}, unexpected {unexpected}")
    return draft.eval()
