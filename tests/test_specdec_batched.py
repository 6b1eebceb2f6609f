"""Batched speculative decoding is lossless row by row: each row equals its own single-sequence greedy decoding.

Tiny random Qwen3 models (tests/tiny_models.py, no download). The reference is the plainest greedy loop there is
(full recompute, one sequence, no cache, no padding), so it shares no code with what it checks. The models run
in float64, where rounding differences between a padded batched forward and a single-sequence forward are
far below any argmax gap; one fp32 case checks the same on these (well-separated) random logits.
"""
import numpy as np
import pytest
import torch

from helpers.specdec import autoregressive_generate
from helpers.specdec.analysis import estimate_alpha
from helpers.specdec.batched import RaggedBatch, batched_autoregressive_generate, batched_speculative_generate
from tiny_models import RAGGED_PROMPTS as PROMPTS
from tiny_models import perturbed_copy, tiny_qwen3

VOCAB = 97


@torch.no_grad()
def greedy_reference(model, prompt, max_new_tokens, eos_token_id=None):
    ids, out = torch.tensor([prompt]), []
    for _ in range(max_new_tokens):
        token = int(model(ids).logits[0, -1].argmax())
        out.append(token)
        if token == eos_token_id:
            break
        ids = torch.cat([ids, torch.tensor([[token]])], dim=1)
    return out


@pytest.fixture(scope="module")
def target(float64_pair):
    return float64_pair[0]


@pytest.fixture(scope="module")
def references(target):
    return [greedy_reference(target, p, 24) for p in PROMPTS]


@pytest.fixture(scope="module")
def drafts(float64_pair):
    target, perturbed = float64_pair
    return {
        "perturbed": perturbed,  # partial acceptance
        "unrelated": tiny_qwen3(7, vocab_size=VOCAB, num_hidden_layers=1).double(),  # almost every draft rejected
        "identical": target,  # every draft accepted
    }


@pytest.mark.parametrize("batch_size", [1, 2, 4])
@pytest.mark.parametrize("gamma", [1, 3, 5])
def test_rows_equal_their_own_greedy_decoding(target, drafts, references, batch_size, gamma):
    prompts = PROMPTS[-batch_size:]  # B=2 mixes prompt lengths 4 and 11; B=4 also lengths 2 and 7
    result = batched_speculative_generate(target, drafts["perturbed"], prompts, 24, gamma=gamma)
    assert result.tokens == references[-batch_size:]
    accepted = [n for row in result.stats.accepted for n in row]
    assert 0 < sum(accepted) < gamma * len(accepted) or gamma == 1  # acceptance is partial, as intended


@pytest.mark.parametrize("kind", ["unrelated", "identical"])
def test_all_rejected_and_all_accepted_paths(target, drafts, references, kind):
    result = batched_speculative_generate(target, drafts[kind], PROMPTS, 24, gamma=4)
    assert result.tokens == references
    if kind == "identical":  # every draft accepted: 5 tokens per round, so ceil(24 / 5) rounds
        assert result.stats.rounds == 5
        assert estimate_alpha([n for row in result.stats.accepted for n in row], 4) == 1.0


def test_batched_autoregressive_baseline_matches_reference(target, references):
    result = batched_autoregressive_generate(target, PROMPTS, 24)
    assert result.tokens == references
    assert result.stats.steps == 24


def test_rows_finish_at_different_times_on_eos(target, drafts, references):
    eos = references[0][5]  # row 0 stops after 6 tokens (or at eos's first occurrence); others run on or stop too
    expected = [greedy_reference(target, p, 24, eos_token_id=eos) for p in PROMPTS]
    assert len({len(e) for e in expected}) > 1, "test setup: rows should finish at different times"
    for generate in (lambda: batched_speculative_generate(target, drafts["perturbed"], PROMPTS, 24, 3, eos),
                     lambda: batched_autoregressive_generate(target, PROMPTS, 24, eos)):
        assert generate().tokens == expected


@pytest.mark.parametrize("max_new_tokens", [0, 1, 2, 7])
def test_max_new_tokens_is_exact(target, drafts, references, max_new_tokens):
    result = batched_speculative_generate(target, drafts["identical"], PROMPTS, max_new_tokens, gamma=5)
    assert result.tokens == [r[:max_new_tokens] for r in references]


def test_fp32_matches_on_separated_logits(references):
    target32 = tiny_qwen3(0, vocab_size=VOCAB)
    draft32 = perturbed_copy(target32, 0.003)
    assert batched_speculative_generate(target32, draft32, PROMPTS, 24, gamma=3).tokens == references


@torch.no_grad()
@pytest.mark.parametrize("runtime", ["minimal", "transformers"])
def test_ragged_cache_rollback_equals_fresh_prefill(target, runtime):
    """keep() must leave each row's cache exactly as if only the kept tokens had ever been fed, on both
    runtimes (the model file's per-row lengths; the transformers adapter's crop + masked holes)."""
    rows = [[1, 2, 3, 4, 5, 6], [7, 8, 9]]
    cache = RaggedBatch(target, runtime, 2, 16)
    cache.prefill(rows)
    cache.extend(torch.tensor([[10, 11, 12], [13, 14, 15]]))
    cache.keep(torch.tensor([7, 4]))  # row 0 keeps 1 of its 3 new tokens, row 1 keeps 1
    rolled = cache.extend(torch.tensor([[20], [21]]))[:, -1]
    fresh = RaggedBatch(target, runtime, 2, 16)
    fresh.prefill([[1, 2, 3, 4, 5, 6, 10], [7, 8, 9, 13]])
    expected = fresh.extend(torch.tensor([[20], [21]]))[:, -1]
    torch.testing.assert_close(rolled, expected)
    assert cache.lengths.tolist() == [8, 5]
    cache.keep(torch.tensor([3]), rows=torch.tensor([1]))  # row 0 leaves the batch
    alone = RaggedBatch(target, runtime, 1, 16)
    alone.prefill([[7, 8, 9]])
    torch.testing.assert_close(cache.extend(torch.tensor([[30]]))[:, -1], alone.extend(torch.tensor([[30]]))[:, -1])


@pytest.mark.parametrize("runtime", ["minimal", "transformers"])
def test_both_runtimes_give_each_row_its_own_greedy_decoding(target, drafts, references, runtime):
    result = batched_speculative_generate(target, drafts["perturbed"], PROMPTS, 12, 3, runtime=runtime)
    assert result.stats.runtime == runtime
    assert result.tokens == [references[i][:12] for i in range(len(PROMPTS))]


@pytest.mark.parametrize("runtime", ["minimal", "transformers"])
def test_one_token_prompts_decode_beside_longer_ones(target, runtime):
    """Regression: one-token prompts were refused ("prepend a BOS token"); round one feeds the draft the last prompt
    token alone, later rounds the last two committed tokens, so a row needs no token before its first."""
    draft = perturbed_copy(target, 0.02)
    prompts = [[3], [1, 2], [5, 9, 4, 7], [8]]
    alone = [autoregressive_generate(target, torch.tensor([p]), 14, eos_token_id=-1).tokens.tolist() for p in prompts]
    for gamma in (1, 3):
        assert batched_speculative_generate(target, draft, prompts, 14, gamma, runtime=runtime).tokens == alone
    assert batched_speculative_generate(target, draft, [[3], [8]], 14, 2, runtime=runtime).tokens == [alone[0],
                                                                                                      alone[3]]


def test_invalid_arguments_raise(target):
    with pytest.raises(ValueError, match="empty prompt: every prompt needs at least one token"):
        batched_speculative_generate(target, target, [[1, 2], []], 4, gamma=2)
    with pytest.raises(ValueError, match="gamma"):
        batched_speculative_generate(target, target, PROMPTS, 4, gamma=0)
    with pytest.raises(ValueError, match="temperature"):
        batched_speculative_generate(target, target, PROMPTS, 4, gamma=2, temperature=-1.0)
    with pytest.raises(ValueError, match="no prompts"):
        batched_autoregressive_generate(target, [], 4)


def test_phase_timing_covers_the_decode_and_changes_nothing(target):
    """time_phases splits a run into draft/verify/bookkeeping/rollback without changing its output (regression:
    notebook 09 explains the gap to Eq. 5 with these phases)."""
    draft = perturbed_copy(target, 0.02)
    plain = batched_speculative_generate(target, draft, PROMPTS, 10, 3)
    timed = batched_speculative_generate(target, draft, PROMPTS, 10, 3, time_phases=True)
    assert timed.tokens == plain.tokens and plain.stats.phase_seconds is None
    phases = timed.stats.phase_seconds
    assert set(phases) == {"draft", "verify", "bookkeeping", "rollback"} and min(phases.values()) > 0


def test_sampled_rows_follow_the_target_distribution():
    """Sampling, each row of a ragged batch draws its first two tokens from the target's exact law for its own
    prompt (V^2 cells, chi-square and total variation), whatever the other row does; a draft far from the target
    so that both acceptance and the residual draw run."""
    from distribution_checks import chi_square_pvalue, exact_joint, tv_tolerance

    vocab, temperature, runs = 16, 1.0, 1500
    target = tiny_qwen3(10, vocab_size=vocab, num_hidden_layers=1)
    draft = tiny_qwen3(11, vocab_size=vocab, num_hidden_layers=1)
    prompts = [[3, 1, 4], [2, 7, 1, 8, 2, 8]]  # two lengths: one left-padded row
    laws = [exact_joint(target, torch.tensor([p]), temperature).ravel() for p in prompts]
    counts, accepted = np.zeros((len(prompts), vocab * vocab)), 0
    for seed in range(runs):
        result = batched_speculative_generate(target, draft, prompts, 2, gamma=2, temperature=temperature, seed=seed)
        for row, tokens in enumerate(result.tokens):
            counts[row, tokens[0] * vocab + tokens[1]] += 1
        accepted += sum(n for row in result.stats.accepted for n in row)
    assert 0.1 * runs < accepted < 2 * len(prompts) * runs  # some drafts kept, some rejected
    for row, law in enumerate(laws):
        law = law / law.sum()
        total_variation = 0.5 * np.abs(counts[row] / runs - law).sum()
        assert total_variation <= tv_tolerance(law, runs), (row, total_variation)
        assert chi_square_pvalue(counts[row], law, runs) > 1e-3, row
    again = batched_speculative_generate(target, draft, prompts, 6, gamma=2, temperature=temperature, seed=3)
    assert again.tokens == batched_speculative_generate(target, draft, prompts, 6, gamma=2, temperature=temperature,
                                                        seed=3).tokens  # a seed fixes the draws
