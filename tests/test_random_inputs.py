"""Losslessness on inputs nobody tuned to: seeded random models of every family the model file implements (random
depth, widths, head counts, vocabulary, context, tied or not, peaked or flat heads), random prompts (1 token up to
half the context) and random EOS ids. Every registered method, batched speculation, the serving engine's drafters and
self-speculation give the target's greedy tokens; sampling is reproducible and stops where it should. (The tree-cache
overflow of a budget under the draft's own nodes was found this way.)"""
from __future__ import annotations

import copy
import random

import pytest
import torch
import transformers

from helpers.batching.model_ops import generate_alone
from helpers.batching.request import Request
from helpers.batching.speculation import DRAFTERS, make_drafter
from helpers.experiments.nb10.study import method_specs
from helpers.specdec import (FeatureDraft, MedusaHeads, autoregressive_generate, batched_speculative_generate, methods,
                             self_speculative_generate, speculative_generate, tree_generate)
from test_batching_speculation import serve_in_process

SEEDS = range(16)


def random_model(rng: random.Random, seed: int):
    """A random Qwen3, Llama or OLMo causal LM with random shapes, float32, eval mode."""
    family = rng.choice(["Qwen3", "Llama", "Olmo"])
    heads = rng.choice([2, 4, 6, 8])
    head_dim = rng.choice([8, 16, 32])
    settings = dict(vocab_size=rng.choice([50, 97, 256, 500]), hidden_size=heads * head_dim,
                    intermediate_size=rng.choice([64, 128, 200]), num_hidden_layers=rng.choice([1, 2, 3]),
                    num_attention_heads=heads, num_key_value_heads=rng.choice([h for h in (1, 2, 3, 4, 6, 8)
                                                                               if heads % h == 0]),
                    max_position_embeddings=rng.choice([64, 128, 256]), tie_word_embeddings=rng.random() < 0.3,
                    bos_token_id=None, eos_token_id=None)
    if family == "Olmo":
        settings.update(pad_token_id=1, clip_qkv=rng.choice([None, 0.5]))
    else:
        settings.update(head_dim=head_dim)
    torch.manual_seed(seed)
    model = getattr(transformers, f"{family}ForCausalLM")(getattr(transformers, f"{family}Config")(**settings)).eval()
    scale = rng.choice([None, 3.0, 10.0])  # flat or peaked next-token distributions
    if scale and not settings["tie_word_embeddings"]:
        with torch.no_grad():
            model.get_output_embeddings().weight.mul_(scale)
    return model, settings


def perturbed(model, scale: float, seed: int):
    draft = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in draft.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * scale * param.std().clamp_min(1e-3))
    return draft


def drafters_for(target, rng: random.Random, seed: int) -> dict:
    """A perturbed draft model, lightly trained-looking Medusa heads and an untrained feature draft."""
    heads = MedusaHeads(target, rng.choice([1, 2, 4]))
    torch.manual_seed(seed)
    with torch.no_grad():
        for param in heads.parameters():
            param.add_(torch.randn(param.shape) * 0.05)
    return {"draft": perturbed(target, rng.choice([0.0, 0.1, 0.5]), seed), "medusa": heads,
            "eagle": FeatureDraft(target).eval()}


def every_spec(rng: random.Random, medusa_heads: int) -> list[dict]:
    """Notebook 10's methods with random shapes (budgets under the draft's own nodes among them), and the heads'."""
    depth = rng.choice([3, 6, 8])
    return method_specs([1, rng.choice([2, 3, 5, 8])], [[rng.choice([4, 8]), 0.05]], [[2, 1, 1], [3, 2, 1]],
                        [[4, 2, 6], [depth, rng.choice([2, 3]), rng.choice([2, depth - 1, 10])]],
                        ngram=rng.choice([1, 2, 3]), num_draft=rng.choice([1, 4, 8])) + [
        {"method": "medusa"}, {"method": "medusa", "topk": [rng.choice([1, 2, 3])] * rng.randint(1, medusa_heads)},
        {"method": "eagle", "gamma": rng.choice([1, 3, 6])},
        {"method": "eagle", "tree": "dynamic", "depth": rng.choice([1, 3, 7]), "topk": rng.choice([1, 2, 4]),
         "budget": rng.choice([1, 3, 12])}]


@pytest.mark.parametrize("seed", SEEDS)
def test_every_method_gives_the_targets_greedy_tokens(seed):
    rng = random.Random(seed)
    target, settings = random_model(rng, seed)
    vocab, context = settings["vocab_size"], settings["max_position_embeddings"]
    prompt = torch.tensor([[rng.randrange(vocab) for _ in range(rng.choice([1, 2, 7, context // 2]))]])
    new_tokens = rng.choice([1, 4, 30])
    eos = rng.choice([-1, -1, rng.randrange(vocab)])
    drafters = drafters_for(target, rng, seed)
    expected = autoregressive_generate(target, prompt, new_tokens, eos_token_id=eos).tokens.tolist()
    for spec in every_spec(rng, drafters["medusa"].num_heads):
        tokens = methods.run(spec, target, drafters, prompt, new_tokens, eos_token_id=eos).tokens.tolist()
        assert tokens == expected, (seed, settings, spec)


@pytest.mark.parametrize("seed", SEEDS)
def test_sampling_is_reproducible_and_stops_at_the_length_or_eos(seed):
    rng = random.Random(100 + seed)
    target, settings = random_model(rng, seed)
    drafters = drafters_for(target, rng, seed)
    prompt = torch.tensor([[rng.randrange(settings["vocab_size"]) for _ in range(rng.choice([1, 5, 20]))]])
    new_tokens, eos = rng.choice([1, 4, 20]), rng.randrange(settings["vocab_size"])
    runs = [lambda: speculative_generate(target, drafters["draft"], prompt, new_tokens, 3, temperature=0.8, seed=3,
                                         eos_token_id=eos),
            lambda: tree_generate(target, drafters["draft"], prompt, new_tokens, temperature=1.0, seed=3,
                                  tree="dynamic", depth=3, topk=2, budget=4, eos_token_id=eos),
            lambda: methods.run({"method": "eagle", "tree": "static", "depth": None, "topk": (2, 1), "budget": None},
                                target, drafters, prompt, new_tokens, temperature=0.7, seed=3, eos_token_id=eos),
            lambda: methods.run({"method": "medusa", "topk": [2]}, target, drafters, prompt, new_tokens,
                                temperature=1.3, seed=3, eos_token_id=eos)]
    for run in runs:
        tokens = run().tokens.tolist()
        assert run().tokens.tolist() == tokens
        assert len(tokens) == new_tokens or (tokens[-1] == eos and len(tokens) < new_tokens), tokens
        assert eos not in tokens[:-1]


@pytest.mark.parametrize("seed", SEEDS)
def test_batches_and_the_serving_engine_give_each_rows_greedy_tokens(seed):
    rng = random.Random(200 + seed)
    target, settings = random_model(rng, seed)
    vocab, context = settings["vocab_size"], settings["max_position_embeddings"]
    draft = perturbed(target, rng.choice([0.01, 0.3]), seed)
    new_tokens = rng.choice([1, 5, 20])
    rows = [[rng.randrange(vocab) for _ in range(rng.choice([1, 2, 9]))] for _ in range(rng.choice([1, 2, 3]))]
    alone = [autoregressive_generate(target, torch.tensor([row]), new_tokens, eos_token_id=-1).tokens.tolist()
             for row in rows]
    batched = batched_speculative_generate(target, draft, rows, new_tokens, rng.choice([1, 2, 4]))
    assert batched.tokens == alone
    width = max(map(len, rows))  # self-speculation of the same rows, left-padded
    ids = torch.tensor([[0] * (width - len(row)) + row for row in rows])
    mask = torch.tensor([[0] * (width - len(row)) + [1] * len(row) for row in rows])
    selfspec = self_speculative_generate(target, ids, new_tokens, rng.choice([1, 3, 5]), window=rng.choice([2, 8]),
                                         sinks=rng.choice([0, 2]), attention_mask=mask, eos_token_id=-1,
                                         measure_target_step=False)
    assert [list(map(int, row))[:new_tokens] for row in selfspec.tokens] == alone
    feature = FeatureDraft(target).eval()
    for name in DRAFTERS:  # rows of 1 to 20 tokens join every other step and leave when done
        requests = [Request(i, [rng.randrange(vocab) for _ in range(rng.choice([1, 2, 5, 20]))],
                            rng.choice([1, 2, 7, 25])) for i in range(rng.choice([1, 3, 6]))]
        drafter = make_drafter(name, draft_model=feature if name == "feature" else draft, limit=context,
                               window=rng.choice([4, 16]), sinks=rng.choice([0, 1, 2]))
        for request in serve_in_process(target, drafter, requests, random.Random(seed)):
            assert request.generated == generate_alone(target, request.input_tokens, request.output_length), name
