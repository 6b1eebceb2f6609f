# Name / Andrew ID: Test Student / tests
# (the name and Andrew ID the handout is issued to; a student handing these files in puts their own here)
"""Speculative decoding behind the handout's scaffold interface (§4.3): implement ``decode()``.

    python submission/specdec.py                                     # CPU pair, offline, first prompt of prompts.jsonl
    python submission/specdec.py --prompt "def fibonacci(n):" --gamma 5 --temperature 0.8
    python submission/specdec.py --target Qwen/Qwen3-8B --draft Qwen/Qwen3-0.6B --device cuda   # handout pair

As in the scaffold, model loading and tokenization are done for you (``load_models``, ``encode``, ``main``);
``decode()`` is the part to write. Here its body is the workbook's implementation,
:func:`helpers.specdec.speculative_generate` (Chen et al. 2023, Algorithm 2, with KV caches rolled back after
each round and ONE target forward per round). The scaffold's TODO lines are kept in ``decode()``, each next to
a note saying which part of that function answers it.

Models are named as in :mod:`helpers.models`: ``cpu-pair/target`` with ``cpu-pair/draft`` or
``cpu-pair/draft-2l`` (trained, shipped in ``data/cpu_pair``, offline; the defaults), or the handout's Hugging
Face ids (``Qwen/Qwen3-8B``, ``Qwen/Qwen3-1.7B``, ``Qwen/Qwen3-0.6B``, ``meta-llama/Llama-3.1-8B``,
``meta-llama/Llama-3.2-1B``; bf16, downloaded from the Hub on first use).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file (python submission/specdec.py): make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

from helpers.models import load_model
from helpers.specdec import GenerationResult, speculative_generate

SEED = 42  # the handout: torch.manual_seed(42)
DEFAULT_TARGET = "cpu-pair/target"
DEFAULT_DRAFT = "cpu-pair/draft"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


# ============================================================================ the part to implement

def decode(
    target,
    draft,
    input_ids: torch.Tensor,
    max_new_tokens: int,
    gamma: int,
    temperature: float = 0.0,
    *,
    eos_token_id: int | list[int] | None = None,
    seed: int | None = None,
) -> GenerationResult:
    """Speculative decoding of one prompt ``input_ids`` of shape (1, prompt_len) with ``gamma`` drafts per round.

    Returns a :class:`helpers.specdec.GenerationResult`: ``.tokens`` (1-D, the new tokens only, EOS included
    when it ended the run) and ``.stats`` (``alpha``, ``acceptance_rate``, ``rounds``, ``accepted``,
    ``rejections``, ``time_total_s``, ...). Lossless: at ``temperature`` 0 the tokens are the target's greedy
    decoding token for token; above 0 they are samples of the target's distribution at that temperature.
    ``seed`` None draws from the global generator (seeded by ``torch.manual_seed(42)`` in ``main``).
    """
    # The scaffold's TODO lines, each followed by where the workbook's implementation does it (all inside
    # helpers.specdec.speculative_generate, called below: the draft model as a drafter of the one chain verifier,
    # helpers/specdec/chain.py generate_chain, whose round loop notebook 07 prints beside Algorithm 2):
    #
    # TODO: prefill the prompt through the target and the draft, keeping a KV cache for each
    #   -> both caches come from helpers.models.runtime.cached_decoder; all but the last prompt token are
    #      prefilled (chain.prefill_target, linear.ModelDrafter.start), the last one is the "pending" token that
    #      round 1 verifies together with the drafts
    # TODO: draft gamma tokens with the draft model, one draft forward each (sampled at `temperature`)
    #   -> linear.draft_chain, `for step in range(gamma)`, which keeps each draft's distribution p for the test
    # TODO: verify all gamma drafts with ONE target forward over gamma + 1 positions
    #   -> chain.verify_chain: target_cache.extend(pending + drafts, last_only=False): the target's distribution q
    #      at every draft and one bonus position
    # TODO: accept/reject: keep draft i while r_i < q(d_i) / p(d_i); at the first rejection sample the next
    #       token from norm(max(0, q - p)); when all gamma are accepted, sample a bonus token from q
    #   -> helpers.specdec.accept (one rule for every method, batched); helpers.specdec.accept_sampling
    #      (temperature > 0) and helpers.specdec.accept_greedy (temperature 0: the longest prefix equal to the
    #      target's argmax) are its one-prompt views
    # TODO: roll both KV caches back to the accepted prefix; repeat until max_new_tokens or EOS
    #   -> target_cache.rollback in chain.generate_chain, self.cache.rollback in linear.ModelDrafter.commit (a
    #      length pointer moves; nothing is recomputed); core.finish_row stops at max_new_tokens or EOS
    # TODO: count accepted and proposed drafts (for the acceptance rate alpha)
    #   -> GenerationStats: accepted_per_round, rejections; alpha = accepted / (accepted + rejections)
    return speculative_generate(
        target, draft, input_ids, max_new_tokens, gamma, temperature, seed,
        eos_token_id=eos_token_id,
        time_phases=False,  # no per-phase synchronisation: the caller times the whole call
    )


# ============================================================================ provided: loading, tokenization

def load_models(target_name: str = DEFAULT_TARGET, draft_name: str = DEFAULT_DRAFT, *, device="auto",
                dtype: torch.dtype | None = None):
    """``(target, draft, tokenizer)``: the target's tokenizer, which the draft must share (same vocabulary).

    dtype None: float32 for the CPU pair, bfloat16 for the handout's pretrained models.
    """
    target, tokenizer = load_model(target_name, device=device, dtype=dtype)
    draft, _ = load_model(draft_name, device=device, dtype=dtype)
    if tokenizer is None:
        raise ValueError(
            f"{target_name!r} has random weights and no tokenizer; speculative decoding needs text: use the CPU "
            f"pair ({DEFAULT_TARGET!r} with {DEFAULT_DRAFT!r}) or a handout model id such as 'Qwen/Qwen3-8B'"
        )
    return target, draft, tokenizer


def encode(tokenizer, prompt: str, device) -> torch.Tensor:
    """Token ids of ``prompt`` as raw text (no chat template), shape (1, prompt_len), on ``device``."""
    ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
    if ids.shape[1] == 0:
        raise ValueError("the prompt is empty after tokenization; give at least one character of text")
    return ids.to(device)


def first_prompt() -> str:
    """The first prompt of submission/prompts.jsonl."""
    from submission.make_prompts import read_prompts

    return read_prompts()[0]["prompt"]


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """The options specdec.py and benchmark.py share."""
    parser.add_argument("--target", default=DEFAULT_TARGET, help="target model (helpers.models name)")
    parser.add_argument("--draft", default=DEFAULT_DRAFT, help="draft model (shares the target's tokenizer)")
    parser.add_argument("--device", default="auto", help="'cpu', 'cuda' or 'auto' (CUDA when available)")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default=None,
                        help="default: float32 for the CPU pair, bfloat16 for pretrained models")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="new tokens per prompt")
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy; > 0 samples")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description="Speculative decoding of one prompt (handout §4.3 scaffold).")
    add_model_arguments(parser)
    parser.add_argument("--gamma", type=int, default=3, help="draft tokens per round (the lookahead)")
    parser.add_argument("--prompt", default=None, help="prompt text (default: the first of prompts.jsonl)")
    args = parser.parse_args(argv)

    torch.manual_seed(SEED)
    target, draft, tokenizer = load_models(args.target, args.draft, device=args.device,
                                           dtype=DTYPES.get(args.dtype))
    prompt = args.prompt if args.prompt is not None else first_prompt()
    input_ids = encode(tokenizer, prompt, next(target.parameters()).device)
    result = decode(target, draft, input_ids, args.max_new_tokens, args.gamma, args.temperature)
    stats = result.stats
    print(prompt + tokenizer.decode(result.tokens), flush=True)
    print(f"\n[{args.target} / {args.draft}, gamma={args.gamma}, temperature={args.temperature}] "
          f"{stats.new_tokens} new tokens in {stats.rounds} rounds, alpha={stats.alpha:.3f}, "
          f"{stats.tokens_per_second:.1f} tokens/s")
    return {"tokens": result.tokens.tolist(), **stats.as_dict()}


if __name__ == "__main__":
    main()
