"""helpers.specdec.lookup: prompt lookup decoding is exact (greedy), distribution-preserving (sampling), and its
n-gram index finds the longest, most recent earlier match.

Tiny random Qwen3 models (tests/tiny_models.py) loop into repetitions after a few tokens, so lookups match and
drafts are both accepted and rejected; one realistic check runs the CPU pair on an input-grounded prompt.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers.models import load_cpu_pair
from helpers.prompts import encode_prompts, grounded_prompts
from helpers.specdec.linear import autoregressive_generate
from helpers.specdec.lookup import NgramIndex, next_draft_length, prompt_lookup_generate
from distribution_checks import chi_square_pvalue, exact_joint
from tiny_models import PEAK, tiny_qwen3


@pytest.fixture(scope="module")
def target(peaked_pair):
    return peaked_pair[0]


def prompts(seed: int = 0, vocab: int = 64):
    """Random prompts and repetitive ones (a phrase repeated, a period-2 loop), so that lookups match at once."""
    generator = torch.Generator().manual_seed(seed)
    random = [torch.randint(0, vocab, (1, n), generator=generator) for n in (1, 2, 6, 13)]
    phrase = torch.randint(0, vocab, (1, 7), generator=generator)
    return random + [phrase.repeat(1, 3), torch.tensor([[4, 9] * 6]), torch.cat([phrase, phrase[:, :3]], dim=1)]


# --- the index ------------------------------------------------------------------------------------------------


def test_longest_match_first_and_most_recent_occurrence():
    #                   0  1  2  3  4  5  6  7  8  9 10 11
    index = NgramIndex(3, [1, 2, 3, 4, 7, 2, 3, 5, 9, 9, 2, 3])
    # the 3-gram (9, 2, 3) never occurred before; (2, 3) did, latest at 5-6, followed by 5 9 9 2 3
    assert index.lookup(3) is None
    assert index.lookup(2) == 7 and index.lookup(1) == 7
    assert index.propose(3) == [5, 9, 9] and index.last_match == 2
    index.add([5])  # now (2, 3, 5) occurred at 5-7, followed by 9
    assert index.propose(4) == [9, 9, 2, 3] and index.last_match == 3


def test_falls_back_to_shorter_ngrams_then_no_match():
    index = NgramIndex(3, [8, 6, 1, 2, 6])
    assert index.propose(2) == [1, 2] and index.last_match == 1  # only the 1-gram (6,) occurred before
    index.add([3])
    assert index.propose(5) == [] and index.last_match == 0  # 3 never occurred before: no draft
    assert NgramIndex(2, [5]).propose(4) == []  # one token has nothing before it
    assert NgramIndex(2, []).propose(4) == []
    assert NgramIndex(3, [8, 6, 1, 2, 6]).propose(2, min_ngram=2) == []  # 1-gram matches not wanted


def test_the_suffix_never_matches_itself_and_limits_are_kept():
    index = NgramIndex(2, [1, 2, 3])
    assert index.propose(4) == []  # (2, 3) and (3,) occur only as the suffix itself
    index = NgramIndex(2, [1, 2, 3, 1, 2])
    assert index.propose(1) == [3] and index.propose(0) == []
    assert index.propose(10) == [3, 1, 2, 3, 1, 2, 3, 1, 2, 3]  # past the end the copy continues from itself


def test_periodic_loop_proposes_full_length_drafts():
    index = NgramIndex(3, [4, 9, 4, 9, 4, 9])
    assert index.propose(5) == [4, 9, 4, 9, 4]
    index = NgramIndex(1, [7, 7])
    assert index.propose(3) == [7, 7, 7]


def test_index_is_incremental():
    tokens = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4]
    whole = NgramIndex(3, tokens)
    pieces = NgramIndex(3)
    for start in range(0, len(tokens), 3):
        pieces.add(tokens[start: start + 3])
    assert pieces.tokens == whole.tokens and pieces._next == whole._next
    # every entry points just past the LATEST occurrence of its n-gram (brute force)
    for gram, follower in whole._next.items():
        n = len(gram)
        ends = [i + n for i in range(len(tokens) - n) if tuple(tokens[i: i + n]) == gram]
        assert follower == max(ends)


def test_draft_length_rule():
    assert next_draft_length(4, 4, 4, 8) == 5  # all accepted: one more
    assert next_draft_length(8, 8, 8, 8) == 8  # never above num_draft
    assert next_draft_length(6, 6, 2, 8) == 3  # rejection: half, but at least what was right plus one
    assert next_draft_length(8, 8, 5, 8) == 6
    assert next_draft_length(6, 6, 0, 8) == 3
    assert next_draft_length(2, 2, 0, 8) == 1
    assert next_draft_length(5, 0, 0, 8) == 5  # no draft: unchanged


# --- greedy: token-for-token equality with the baseline ---------------------------------------------------


@pytest.mark.parametrize("runtime", ["minimal", "transformers"])
@pytest.mark.parametrize("ngram,num_draft,options", [(3, 8, {}), (1, 1, {}), (2, 4, {"adaptive": True}),
                                                     (4, 16, {"adaptive": True, "min_ngram": 2})])
def test_greedy_equals_autoregressive(target, ngram, num_draft, options, runtime):
    accepted = rejected = 0
    for prompt in prompts():
        for max_new_tokens in (1, 2, 13, 40):
            baseline = autoregressive_generate(target, prompt, max_new_tokens, runtime=runtime)
            result = prompt_lookup_generate(target, prompt, max_new_tokens, ngram=ngram, num_draft=num_draft,
                                            runtime=runtime, **options)
            assert result.stats.runtime == runtime
            assert torch.equal(result.tokens, baseline.tokens), (prompt.tolist(), max_new_tokens)
            assert max(result.stats.gamma_per_round) <= num_draft
            accepted += result.stats.accepted
            rejected += result.stats.rejections
    assert accepted > 0 and rejected > 0  # both the accept and the rollback paths ran


def test_stats_are_consistent(target):
    result = prompt_lookup_generate(target, prompts()[4], 40)
    s = result.stats
    assert s.draft_forwards == 0
    assert s.rounds == len(s.accepted_per_round) == len(s.gamma_per_round) == s.target_forwards - 1
    assert s.new_tokens == 40 == s.accepted + s.rounds
    assert s.proposed == sum(s.gamma_per_round) and s.accepted == sum(s.accepted_per_round)
    assert s.rejections == sum(k < g for k, g in zip(s.accepted_per_round, s.gamma_per_round))
    assert 0 < s.accepted < s.proposed and s.tokens_per_round > 1
    assert s.alpha == pytest.approx(s.accepted / (s.accepted + s.rejections))
    assert s.rounds_without_drafts == sum(g == 0 for g in s.gamma_per_round)
    assert s.time_total_s == pytest.approx(s.time_prefill_s + s.time_draft_s + s.time_verify_s + s.time_other_s)
    assert "accepted_per_round" not in s.as_dict()


def test_no_match_means_plain_decode_steps(target):
    prompt = torch.arange(20)[None]  # every token distinct: the first lookup cannot match
    result = prompt_lookup_generate(target, prompt, 1)
    assert result.stats.gamma_per_round == [0] and result.stats.rounds_without_drafts == 1
    assert result.stats.proposed == 0 and result.stats.alpha != result.stats.alpha  # nan: nothing was drafted
    assert result.stats.target_forwards == 2  # prefill + one single-token step


@pytest.mark.parametrize("adaptive", [False, True])
def test_drafts_never_pass_the_budget(target, adaptive):
    for max_new_tokens in range(1, 12):
        result = prompt_lookup_generate(target, prompts()[5], max_new_tokens, num_draft=8, adaptive=adaptive)
        assert result.tokens.shape == (max_new_tokens,)
        done = 0
        for drafted, accepted in zip(result.stats.gamma_per_round, result.stats.accepted_per_round):
            assert done + drafted + 1 <= max_new_tokens
            if not adaptive:  # a match always proposes the full length (the copy continues from itself)
                assert drafted in (0, min(8, max_new_tokens - done - 1))
            done += accepted + 1


def test_adaptive_draft_length_shrinks_after_rejections(target):
    fixed = prompt_lookup_generate(target, prompts()[4], 40, num_draft=8)
    adaptive = prompt_lookup_generate(target, prompts()[4], 40, num_draft=8, adaptive=True)
    assert torch.equal(fixed.tokens, adaptive.tokens)
    assert fixed.stats.rejections > 0
    drafted = [g for g in adaptive.stats.gamma_per_round if g]
    assert min(drafted) < 8 and adaptive.stats.proposed < fixed.stats.proposed


def first_occurrence(tokens: list[int], index: int) -> bool:
    return tokens[index] not in tokens[:index]


def test_eos_inside_accepted_drafts(target):
    checked_inside = 0
    for start in prompts(seed=1)[:4]:
        # the prompt ends inside the model's own greedy loop, so round 1 already drafts (and is accepted)
        prompt = torch.cat([start, autoregressive_generate(target, start, 40).tokens[None]], dim=1)
        baseline = autoregressive_generate(target, prompt, 40).tokens.tolist()
        plain = prompt_lookup_generate(target, prompt, 40)
        inside, position = set(), 0  # positions emitted as accepted drafts
        for accepted in plain.stats.accepted_per_round:
            inside.update(range(position, position + accepted))
            position += accepted + 1
        for index in range(40):
            if not first_occurrence(baseline, index):
                continue
            eos = baseline[index]
            result = prompt_lookup_generate(target, prompt, 40, eos_token_id=eos)
            assert result.tokens.tolist() == baseline[: index + 1], (prompt.tolist(), index)
            assert result.stats.new_tokens == index + 1
            checked_inside += index in inside
    assert checked_inside >= 2  # EOS was hit inside an accepted draft block, not only as the target's token


# --- sampling: the output follows the target's distribution ---------------------------------------------------


def test_sampling_preserves_target_distribution():
    """First two tokens jointly distributed as under the target alone, with the first round always drafting.

    The prompt ends with a 3-gram that occurred before, followed by a token X the target gives probability
    between 0.2 and 0.8: round 1 drafts X (and the token after it), so the accept path (probability q(X)) and
    the residual path (q without X) both run often. 16-token vocabulary, 3000 seeds, chi-square p > 1e-3.
    """
    vocab, temperature, samples = 16, 1.0, 3000
    model = tiny_qwen3(10, vocab_size=vocab, num_hidden_layers=1, head_scale=PEAK)
    prompt = None
    for x in range(vocab):
        candidate = torch.tensor([[5, 2, 7, x, 9, 5, 2, 7]])
        with torch.inference_mode():
            q = torch.softmax(model(input_ids=candidate).logits[0, -1].double() / temperature, -1)
        if 0.2 < q[x] < 0.8:
            prompt = candidate
            break
    assert prompt is not None
    expected = exact_joint(model, prompt, temperature).ravel()
    expected /= expected.sum()

    counts = np.zeros(vocab * vocab)
    first_drafted = accepted_first = 0
    for seed in range(samples):
        result = prompt_lookup_generate(model, prompt, 2, temperature=temperature, seed=seed)
        x1, x2 = result.tokens.tolist()
        counts[x1 * vocab + x2] += 1
        first_drafted += result.stats.gamma_per_round[0] == 1
        accepted_first += result.stats.accepted_per_round[0]
    assert first_drafted == samples  # budget 2: one draft, then the target's token
    assert 0.1 < accepted_first / samples < 0.9
    pvalue = chi_square_pvalue(counts, expected, samples)
    total_variation = 0.5 * np.abs(counts / samples - expected).sum()
    print(f"total variation {total_variation:.4f}, chi-square p = {pvalue:.3f}")
    assert pvalue > 1e-3


def test_sampling_is_reproducible(target):
    prompt = prompts()[4]
    first = prompt_lookup_generate(target, prompt, 20, temperature=0.8, seed=5)
    again = prompt_lookup_generate(target, prompt, 20, temperature=0.8, seed=5)
    assert torch.equal(first.tokens, again.tokens)
    assert first.stats.proposed > 0


# --- the CPU pair on an input-grounded prompt ------------------------------------------------------------------


def test_cpu_pair_grounded_prompt_equals_autoregressive():
    model, _, tokenizer = load_cpu_pair()
    row = encode_prompts(tokenizer, grounded_prompts(tokenizer, 1), "cpu")[0]
    baseline = autoregressive_generate(model, row["input_ids"], 48)
    result = prompt_lookup_generate(model, row["input_ids"], 48)
    assert torch.equal(result.tokens, baseline.tokens)
    assert result.stats.accepted > 0


# --- invalid arguments -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name,value", [("ngram", 0), ("ngram", 2.5), ("ngram", True), ("num_draft", 0),
                                        ("num_draft", -1), ("num_draft", "8"), ("min_ngram", 0),
                                        ("min_ngram", 4)])
def test_invalid_lookup_arguments(target, name, value):
    with pytest.raises(ValueError, match=name):
        prompt_lookup_generate(target, prompts()[0], 5, **{name: value})


def test_invalid_common_arguments(target):
    with pytest.raises(ValueError, match="temperature"):
        prompt_lookup_generate(target, prompts()[0], 5, temperature=-1.0)
    with pytest.raises(ValueError, match="input_ids"):
        prompt_lookup_generate(target, torch.zeros(5, dtype=torch.long), 5)
    with pytest.raises(ValueError, match="max_new_tokens"):
        prompt_lookup_generate(target, prompts()[0], 0)
    with pytest.raises(ValueError, match="ngram"):
        NgramIndex(0)
