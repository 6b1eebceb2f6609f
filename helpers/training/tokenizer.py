"""Stage 1: the CPU pair's byte-level BPE tokenizer, and the corpus as one stream of its token ids."""
from __future__ import annotations

from pathlib import Path

import tokenizers
import torch
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from helpers.models.cpu_pair_shapes import EOS_TOKEN

VOCAB_SIZE = 4096

__all__ = ["EOS_TOKEN", "VOCAB_SIZE", "encode_documents", "tokenizer_for_run", "train_tokenizer"]


def train_tokenizer(texts: list[str], vocab_size: int = VOCAB_SIZE):
    """Byte-level BPE, so that any text round-trips; returned as a transformers fast tokenizer."""
    pre_tokenizers, trainers = tokenizers.pre_tokenizers, tokenizers.trainers
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=2, special_tokens=[EOS_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS_TOKEN, pad_token=EOS_TOKEN,
                                   bos_token=EOS_TOKEN)


def tokenizer_for_run(out: Path, texts: list[str], *, train: bool):
    """The tokenizer in ``out/tokenizer``: trained on ``texts`` and saved there when ``train``, else loaded."""
    if not train:
        return AutoTokenizer.from_pretrained(out / "tokenizer")
    tokenizer = train_tokenizer(texts)
    tokenizer.save_pretrained(out / "tokenizer")
    return tokenizer


def encode_documents(tokenizer, texts: list[str]) -> torch.Tensor:
    """All documents as one stream of token ids, each followed by the end-of-text token."""
    eos = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    encodings = tokenizer.backend_tokenizer.encode_batch(texts)
    ids: list[int] = []
    for enc in encodings:
        ids.extend(enc.ids)
        ids.append(eos)
    return torch.tensor(ids, dtype=torch.int32)
