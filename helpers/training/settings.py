"""One run of the recipe: its settings, resolved from the flags (:func:`helpers.training.cli.settings_from_args`)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import torch


@dataclass(frozen=True)
class Settings:
    """Where a run writes, on what device, from which seed, and how many steps each stage takes."""

    out: Path
    device: torch.device
    seed: int = 0
    seq_len: int = 256
    batch_size: int = 8
    threads: int = 2  # training threads (timing always uses 1)
    target_steps: int = 2400
    draft_steps: int = 2500
    long_steps: int = 240
    heads_steps: int = 4000  # stage 7: Medusa heads and the feature draft, trained together
    draft_vocab: int = 1024  # stage 7: the feature draft guesses among this many most frequent tokens (0: all)
    smoke: bool = False  # tiny step counts and evaluation sets: an end-to-end check
    skip_target: bool = False  # reuse the target in ``out``, redistil the drafts
    draft_shapes: tuple[str, ...] | None = None  # stage 6's specs (None: the shipped family)
    started: float = field(default_factory=time.time)

    @property
    def on_gpu(self) -> bool:
        return self.device.type == "cuda"

    def log(self, message: str) -> None:
        """Print ``message`` with the seconds since the run started."""
        print(f"[{time.time() - self.started:7.1f}s] {message}", flush=True)
