"""``python -m helpers.training``: the command line of the recipe (flags -> :class:`Settings` -> one stage)."""
from __future__ import annotations

import argparse
from pathlib import Path

import torch

from helpers.models import CPU_PAIR_DIR, DRAFT_FAMILY
from helpers.models.corpus import load_corpus
from helpers.training.family import FAMILY_STEPS, train_draft_family
from helpers.training.heads import run_heads_stage
from helpers.training.long_context import run_long_stage
from helpers.training.pair import train_pair
from helpers.training.settings import Settings
from helpers.training.tokenizer import encode_documents, tokenizer_for_run

SMOKE_DIR = Path("/tmp/cpu_pair_smoke")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m helpers.training",
                                     description="Train the CPU pair: a small Qwen3 target and two Qwen3 drafts that "
                                                 "share one BPE tokenizer.")
    parser.add_argument("--out", type=Path, default=CPU_PAIR_DIR, help="where to write tokenizer/, target/, drafts")
    parser.add_argument("--device", default="auto", help="'auto' (cuda if available), 'cpu' or 'cuda'")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads for training (timing always uses 1)")
    parser.add_argument("--target-steps", type=int, default=None, help="target optimiser steps (default 2400)")
    parser.add_argument("--draft-steps", type=int, default=None,
                        help=f"distillation steps (default 2500; {FAMILY_STEPS} for --stage drafts)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=None, help="sequences per step (CPU 8, GPU 64)")
    parser.add_argument("--skip-target", action="store_true", help="reuse the target already in --out, redistil")
    parser.add_argument("--smoke", action="store_true", help=f"tiny step counts, writes to {SMOKE_DIR}")
    parser.add_argument("--stage", choices=("pair", "long", "drafts", "heads"), default="pair",
                        help="'pair': tokenizer, target, drafts (default); 'long': fine-tune target-long from the "
                             "target in --out (stage 5); 'drafts': distil notebook 12's draft family (stage 6); "
                             "'heads': Medusa heads and the feature draft on the frozen target (stage 7)")
    parser.add_argument("--draft-shape", action="append", default=None, metavar="LxW",
                        help="with --stage drafts: a draft of L layers and width W ('LxW-shared': with the target's "
                             "embedding, frozen); repeat for several (default: the family, "
                             + ", ".join(name.removeprefix("draft-") for name in DRAFT_FAMILY) + ")")
    parser.add_argument("--long-steps", type=int, default=None, help="stage 5 optimiser steps (default 240)")
    parser.add_argument("--heads-steps", type=int, default=None, help="stage 7 optimiser steps (default 4000)")
    parser.add_argument("--draft-vocab", type=int, default=1024,
                        help="stage 7: the feature draft guesses among this many most frequent training tokens "
                             "(a cheaper draft step; 0: the whole vocabulary)")
    return parser


def settings_from_args(args: argparse.Namespace) -> Settings:
    """The run the flags ask for: the device ('auto': cuda if there is one), and every unset step count and batch
    size at its default for the stage, the device and ``--smoke``."""
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if args.device == "auto" else args.device))
    smoke = args.smoke
    return Settings(
        out=SMOKE_DIR if smoke else args.out, device=device, seed=args.seed, seq_len=args.seq_len,
        batch_size=args.batch_size or (64 if device.type == "cuda" else 8), threads=args.threads,
        target_steps=args.target_steps or (20 if smoke else 2400),
        draft_steps=args.draft_steps or (10 if smoke else FAMILY_STEPS if args.stage == "drafts" else 2500),
        long_steps=args.long_steps or (4 if smoke else 240), smoke=smoke,
        heads_steps=args.heads_steps or (4 if smoke else 4000), draft_vocab=args.draft_vocab,
        skip_target=args.skip_target,
        draft_shapes=tuple(args.draft_shape) if args.draft_shape else None,
    )


def require_trained_pair(stage: str, out: Path) -> None:
    """Stages 5 and 6 start from the target in ``out``: say so before loading anything."""
    if stage in ("long", "drafts", "heads") and not (out / "card.json").exists():
        raise FileNotFoundError(f"--stage {stage} starts from the target in {out}; train the pair first "
                                "(no --stage)")


def main(argv: list[str] | None = None) -> dict:
    """Run the stage the flags ask for; returns the card it wrote."""
    args = build_parser().parse_args(argv)
    settings = settings_from_args(args)
    require_trained_pair(args.stage, settings.out)
    torch.set_num_threads(settings.threads)
    settings.out.mkdir(parents=True, exist_ok=True)
    corpus = load_corpus()
    settings.log(f"corpus: {len(corpus.train)} training and {len(corpus.heldout)} held-out documents")
    tokenizer = tokenizer_for_run(settings.out, corpus.train, train=args.stage == "pair" and not settings.skip_target)
    train_ids = encode_documents(tokenizer, corpus.train)
    heldout_ids = encode_documents(tokenizer, corpus.heldout)
    settings.log(f"tokenizer: {len(tokenizer)} entries; {len(train_ids):,} training and {len(heldout_ids):,} "
                 "held-out tokens")
    if args.stage == "long":
        return run_long_stage(settings, train_ids, heldout_ids)
    if args.stage == "drafts":
        return train_draft_family(settings, tokenizer, train_ids, heldout_ids)
    if args.stage == "heads":
        return run_heads_stage(settings, train_ids, heldout_ids)
    return train_pair(settings, corpus, tokenizer, train_ids, heldout_ids)
