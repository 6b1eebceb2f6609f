# Name / Andrew ID: Test Student / tests
# (the name and Andrew ID the handout is issued to; a student handing these files in puts their own here)
"""Speculative decoding (§4.3): ``decode()`` holds the whole algorithm. The handout's starter file was not among the
materials, so this interface (and the TODO line above each step) is the workbook's own rendering of §4.3.

    python submission/specdec.py                                     # CPU pair, offline, a default prompt
    python submission/specdec.py --prompt "def fibonacci(n):" --gamma 5 --temperature 0.8
    python submission/specdec.py --target Qwen/Qwen3-8B --draft Qwen/Qwen3-0.6B --device cuda   # handout pair

As in the scaffold, model loading and tokenization are done for you (``load_models``, ``encode``, ``main``);
``decode()`` is the part to write, and the whole algorithm is written out in it (Chen et al. 2023, Algorithm 2):
prefill both models with a transformers ``DynamicCache`` each, gamma draft forwards per round keeping each draft
distribution p, ONE target forward over the pending token and the gamma drafts, the acceptance rule, and both
caches cropped back to the accepted prefix. The scaffold's TODO lines are kept, each directly above the code that
answers it. Only the input checks and the result type come from the workbook (``helpers.specdec.core``);
``tests/test_submission.py`` checks ``decode()`` against the workbook's own implementation,
:func:`helpers.specdec.speculative_generate`, and plain greedy decoding token for token, and its samples against
the target's distribution (chi-square).

Run as a script it decodes one prompt (by default row ``cpu-docstring-3`` of the workbook's *stand-in*
prompts.jsonl, not the course's file), times plain decoding of it on the same transformers forward, and prints
the speedup, with a warning when the output repeats itself (a loop makes drafts easy to guess).

Models are named as in :mod:`helpers.models`: ``cpu-pair/target`` with ``cpu-pair/draft`` or
``cpu-pair/draft-2l`` (trained, shipped in ``data/cpu_pair``, offline; the defaults), or the handout's Hugging
Face ids (``Qwen/Qwen3-8B``, ``Qwen/Qwen3-1.7B``, ``Qwen/Qwen3-0.6B``, ``meta-llama/Llama-3.1-8B``,
``meta-llama/Llama-3.2-1B``; bf16, downloaded from the Hub on first use).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a file (python submission/specdec.py): make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

from transformers import DynamicCache

from helpers.models import load_model
from helpers.stats import REPETITIVE_SHARE, repeated_ngram_share
from helpers.specdec.core import GenerationResult, GenerationStats, check_draft, check_generation

SEED = 42  # the handout: torch.manual_seed(42)
DEFAULT_TARGET = "cpu-pair/target"
DEFAULT_DRAFT = "cpu-pair/draft"
DEFAULT_PROMPT_ID = "cpu-docstring-3"  # the stand-in prompts.jsonl row decoded when no --prompt is given
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


# ============================================================================ the part to implement

def _eos_set(model, eos_token_id) -> set[int]:
    """EOS ids to stop at: the argument, else the model's generation config (an int or a list), else none."""
    if eos_token_id is None:
        eos_token_id = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos_token_id is None:
        return set()
    return {int(eos_token_id)} if isinstance(eos_token_id, int) else {int(i) for i in eos_token_id}


def _logits(model, tokens: torch.Tensor, cache, last_only: bool) -> torch.Tensor:
    """One forward of ``tokens`` (1, n) after what ``cache`` holds (the cache grows by n): float32 logits of the
    last position (1, V) when ``last_only``, else of every fed position (n, V)."""
    out = model(input_ids=tokens, past_key_values=cache, use_cache=True, logits_to_keep=1 if last_only else 0)
    return out.logits[:, -1].float() if last_only else out.logits[0].float()


def _rollback(cache, length: int) -> None:
    """Keep the first ``length`` tokens of a transformers cache (``crop`` with a negative count removes that many)."""
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)


def _draw(logits: torch.Tensor, temperature: float, generator) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A (1, 1) token from (1, V) logits, left on the device (no host sync): the argmax at temperature 0, else a
    draw from softmax(logits / temperature); and the (V,) distribution drawn from (None when greedy)."""
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True), None
    distribution = torch.softmax(logits / temperature, dim=-1)
    return torch.multinomial(distribution, 1, generator=generator), distribution[0]


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.inference_mode()
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

    Chen et al. (2023), Algorithm 2, with q the target's distribution and p the draft's. The sequence is
    ``seq`` (prompt + every token produced so far); each model keeps a transformers ``DynamicCache`` of a prefix
    of it. Invariant at the start of a round: the target's cache holds all of ``seq`` but its last token (the
    "pending" one, whose next-token distribution nobody has computed yet); the draft's cache holds the same, or
    one token less after a round whose drafts were all accepted (the draft never saw the last draft). Every
    forward feeds a model exactly the tokens of ``seq`` its cache lacks, so no position is computed twice.
    Drafts, distributions and the acceptance test stay on the device; a round ends with ONE host sync (the number
    accepted, the next token and the drafts, read together), which matters on a GPU.
    """
    check_draft(target, draft)  # same vocabulary, same device
    check_generation(target, input_ids, max_new_tokens, temperature)  # shape (1, n), ids, budget, context
    if isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 1:
        raise ValueError(f"gamma (draft tokens per round) must be an int >= 1, got {gamma!r}")
    device = input_ids.device
    eos = _eos_set(target, eos_token_id)
    generator = None if seed is None else torch.Generator(device=device).manual_seed(seed)
    stats = GenerationStats(runtime="transformers")
    timed_phases = device.type == "cpu"  # on CUDA a phase boundary would need a synchronize: total time only
    start = time.perf_counter()

    # TODO: prefill the prompt through the target and the draft, keeping a KV cache for each
    seq = input_ids[0].tolist()
    target_cache, draft_cache = DynamicCache(config=target.config), DynamicCache(config=draft.config)
    if len(seq) > 1:  # all but the last prompt token: that one is round 1's pending token
        _logits(target, input_ids[:, :-1], target_cache, last_only=True)
        _logits(draft, input_ids[:, :-1], draft_cache, last_only=True)
        stats.target_forwards += 1
        stats.draft_forwards += 1
    _sync(device)
    stats.time_prefill_s = time.perf_counter() - start
    new_tokens: list[int] = []

    while True:
        round_start = time.perf_counter()
        # TODO: draft gamma tokens with the draft model, one draft forward each (sampled at `temperature`)
        gamma_r = min(gamma, max_new_tokens - len(new_tokens) - 1)  # never draft past the tokens still due
        token = torch.tensor([seq[draft_cache.get_seq_length():]], device=device)  # what the draft lacks: 1-2 tokens
        drafts, draft_probs = [], []  # (1, 1) tokens on the device; p of each (sampling), for the acceptance test
        for _ in range(gamma_r):
            token, p = _draw(_logits(draft, token, draft_cache, last_only=True), temperature, generator)
            drafts.append(token)
            draft_probs.append(p)
            stats.draft_forwards += 1
        drafts = torch.cat(drafts, dim=1)[0] if drafts else torch.zeros(0, dtype=torch.long, device=device)
        draft_done = time.perf_counter()

        # TODO: verify all gamma drafts with ONE target forward over gamma + 1 positions
        pending = torch.tensor(seq[target_cache.get_seq_length():], device=device)  # the one token it lacks
        verify = torch.cat([pending, drafts])[None]  # (1, gamma_r + 1): pending + drafts
        q_logits = _logits(target, verify, target_cache, last_only=False)  # (gamma_r + 1, V): q after each prefix
        stats.target_forwards += 1
        verify_done = time.perf_counter()

        # TODO: accept/reject: keep draft i while r_i < q(d_i) / p(d_i); at the first rejection sample the next
        #       token from norm(max(0, q - p)); when all gamma are accepted, sample a bonus token from q
        if temperature == 0:  # the greedy limit: the longest prefix equal to the target's argmax, then its argmax
            choice = q_logits.argmax(dim=-1)  # (gamma_r + 1,)
            k = (choice[:-1] == drafts).long().cumprod(dim=0).sum()  # drafts accepted before the first mismatch
            next_token = choice[k]  # the target's correction, or its bonus token after gamma_r acceptances
        else:
            q = torch.softmax(q_logits / temperature, dim=-1)  # (gamma_r + 1, V)
            p = torch.stack(draft_probs) if draft_probs else q.new_zeros(0, q.shape[-1])  # (gamma_r, V)
            rows = torch.arange(gamma_r, device=device)
            r = torch.rand(gamma_r, device=device, generator=generator)
            # r_i < q(d_i) / p(d_i), written r_i p(d_i) < q(d_i) (no division); k = the prefix before the first "no"
            k = (r * p[rows, drafts] < q[rows, drafts]).long().cumprod(dim=0).sum()
            # at a rejection (k < gamma_r) norm(max(0, q - p)) at draft k; after gamma_r acceptances p is a zero row
            # there, so the same formula gives q at the bonus position
            p_k = torch.cat([p, p.new_zeros(1, p.shape[-1])])[k]
            residual = (q[k] - p_k).clamp_min(0)
            residual = torch.where(residual.sum() > 0, residual, q[k])  # q == p up to rounding: no residual mass
            next_token = torch.multinomial(residual, 1, generator=generator)[0]
        # the round's ONE host sync: how many drafts were accepted, the next token and the drafts themselves
        accepted, next_token, *drafts = torch.cat([k.view(1), next_token.view(1), drafts]).tolist()
        emitted = drafts[:accepted] + [next_token]

        # TODO: roll both KV caches back to the accepted prefix; repeat until max_new_tokens or EOS
        committed = len(seq) + accepted  # pending + accepted drafts; next_token becomes the new pending token
        _rollback(target_cache, committed)  # it saw pending + all gamma_r drafts
        _rollback(draft_cache, committed)  # it saw pending + drafts[:-1]: after all accepted it lacks the last one
        # TODO: count accepted and proposed drafts (for the acceptance rate alpha)
        stats.record_round(accepted, gamma_r)  # proposed += gamma_r, accepted += k, rejections += (k < gamma_r)
        done = False  # (the rollback TODO's "repeat until max_new_tokens or EOS": cut after EOS or at the budget)
        for token in emitted:
            seq.append(token)
            new_tokens.append(token)
            if token in eos or len(new_tokens) == max_new_tokens:
                done = True
                break
        if timed_phases:
            stats.time_draft_s += draft_done - round_start
            stats.time_verify_s += verify_done - draft_done
        if done:
            break

    _sync(device)
    stats.time_total_s = time.perf_counter() - start
    if not timed_phases:
        stats.time_draft_s = stats.time_verify_s = float("nan")
    stats.new_tokens = len(new_tokens)
    # finish(): acceptance_rate = accepted / proposed, alpha = accepted / (accepted + rejections)
    return GenerationResult(torch.tensor(new_tokens, dtype=torch.long), stats.finish())


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


def default_prompt() -> str:
    """The prompt ``python submission/specdec.py`` decodes when given none: row ``DEFAULT_PROMPT_ID`` of the
    workbook's stand-in prompts.jsonl (next to this file). Chosen because the small CPU target continues it with
    code rather than a loop (most 64-token greedy continuations of this 25M-parameter model end up repeating
    themselves); it exists in the stand-in file only, so with the course's prompts.jsonl pass ``--prompt``."""
    from submission.make_prompts import read_prompts

    rows = {row["id"]: row["prompt"] for row in read_prompts()}
    if DEFAULT_PROMPT_ID not in rows:
        raise ValueError(f"submission/prompts.jsonl has no prompt {DEFAULT_PROMPT_ID!r} (is it the course's file? "
                         "then give the prompt with --prompt)")
    return rows[DEFAULT_PROMPT_ID]


def repetition_note(tokens) -> str | None:
    """A warning to print beside a speedup measured on ``tokens`` when the output mostly repeats itself (a share
    of repeated 4-grams above :data:`helpers.stats.REPETITIVE_SHARE`), else None: drafts are easy to guess in a
    loop, so such a speedup overstates what speculation gives on real text."""
    share = repeated_ngram_share([int(t) for t in tokens], n=4)
    if share <= REPETITIVE_SHARE:
        return None
    return f"output repeats itself ({share:.0%} repeated 4-grams): speculation is easy on loops"


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
    parser.add_argument("--prompt", default=None,
                        help=f"prompt text (default: {DEFAULT_PROMPT_ID} of the workbook's stand-in prompts.jsonl)")
    args = parser.parse_args(argv)

    from helpers.specdec import autoregressive_generate  # the baseline the speedup is measured against

    torch.manual_seed(SEED)
    target, draft, tokenizer = load_models(args.target, args.draft, device=args.device,
                                           dtype=DTYPES.get(args.dtype))
    prompt = args.prompt if args.prompt is not None else default_prompt()
    input_ids = encode(tokenizer, prompt, next(target.parameters()).device)
    warm = min(4, args.max_new_tokens)  # a short untimed run of each first: one-time allocation, kernel selection
    decode(target, draft, input_ids, warm, args.gamma, args.temperature)
    autoregressive_generate(target, input_ids, warm, args.temperature, runtime="transformers")
    torch.manual_seed(SEED)  # the timed runs draw as if the warm-up had not happened
    result = decode(target, draft, input_ids, args.max_new_tokens, args.gamma, args.temperature)
    # plain decoding on the same transformers forward and cache (one target forward per token), timed the same way
    baseline = autoregressive_generate(target, input_ids, args.max_new_tokens, args.temperature,
                                       runtime="transformers")
    stats = result.stats
    speedup = baseline.stats.time_total_s / stats.time_total_s
    note = repetition_note(result.tokens)
    print(prompt + tokenizer.decode(result.tokens), flush=True)
    print(f"\n[{args.target} / {args.draft}, gamma={args.gamma}, temperature={args.temperature}] "
          f"{stats.new_tokens} new tokens in {stats.rounds} rounds, alpha={stats.alpha:.3f}, "
          f"{stats.tokens_per_second:.1f} tokens/s, speedup {speedup:.2f}x over plain decoding"
          + (f" -- {note}" if note else ""))
    if args.temperature == 0 and not torch.equal(result.tokens, baseline.tokens):
        print("WARNING: decode() differs from greedy autoregressive decoding: it is not lossless")
    return {"tokens": result.tokens.tolist(), **stats.as_dict(), "speedup": speedup,
            "repeated_4gram_share": repeated_ngram_share(result.tokens.tolist()), "repetitive": note is not None}


if __name__ == "__main__":
    main()
