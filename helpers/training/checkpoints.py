"""Saving a trained model the way it ships (bf16 safetensors) and loading it back as float32."""
from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM


def save_model(model, out_dir: Path) -> None:
    """bf16 safetensors (half the bytes of float32); loaders cast back to float32."""
    out_dir.mkdir(parents=True, exist_ok=True)
    model.to("cpu").to(torch.bfloat16).save_pretrained(out_dir, safe_serialization=True)
    model.to(torch.float32)


def load_saved(out_dir: Path):
    """A saved model in float32, in eval mode: what the later stages and the measurements use."""
    return AutoModelForCausalLM.from_pretrained(out_dir, dtype=torch.float32).eval()
