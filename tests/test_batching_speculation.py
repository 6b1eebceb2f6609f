"""Speculative decoding inside the continuous-batching engine (notebook 14): lossless whatever joins or leaves,
sampled tokens follow the target's law, memory follows the rows, the policy backs off, failures are loud."""
import random

import numpy as np
import pytest
import torch
from distribution_checks import check_follows_target, exact_joint, sampling_pair
from tiny_models import perturbed_copy, tiny_qwen3

from helpers.batching.engine import WorkerFailed, busy_seconds, run_continuous, summarize
from helpers.batching.model_ops import DecodeBatch, PretrainedDir, generate_alone, prefill
from helpers.batching.policy import CostTable, GammaPolicy, RunningAlpha, SpecConfig, calibration_batches
from helpers.batching.request import Request
from helpers.batching.speculation import DRAFTERS, SpecDecodeBatch, extend_ragged, make_drafter
from helpers.batching.workers import EngineConfig, prepare_decoder, warm_up
from helpers.specdec.drafter_files import save_drafter
from helpers.specdec.feature_draft import FeatureDraft

MAX_LEN = 160


@pytest.fixture(scope="module")
def pair():
    target = tiny_qwen3(0, vocab_size=256, max_position_embeddings=MAX_LEN, head_scale=50)
    return target, perturbed_copy(target, 0.02, relative=True)


@pytest.fixture(scope="module")
def saved_pair(pair, tmp_path_factory):
    target, draft = pair
    paths = tmp_path_factory.mktemp("target"), tmp_path_factory.mktemp("draft")
    target.save_pretrained(paths[0])
    draft.save_pretrained(paths[1])
    return target, PretrainedDir(paths[0]), str(paths[1])


def mixed_requests(seed: int, count: int = 12) -> list[Request]:
    """Short random prompts, some repeated (so prompt lookup finds matches), outputs of 1 to 24 tokens."""
    rng = random.Random(seed)
    requests = []
    for i in range(count):
        base = [rng.randrange(1, 256) for _ in range(rng.randint(2, 12))]
        requests.append(Request(i, base * rng.randint(1, 3), rng.choice([1, 3, 9, 24])))
    return requests


def serve_in_process(target, drafter, requests, rng, max_rows=4):
    """Rows join every other step and leave when done; each step draws every row's γ at random (0, 2 or 4)."""
    batch = SpecDecodeBatch(target, drafter)
    todo, done, step = list(requests), [], 0
    while todo or len(batch):
        joining = todo[:max(0, max_rows - len(batch))] if step % 2 == 0 else []
        todo = todo[len(joining):]
        if joining:
            first, *prefilled = prefill(target, joining, features=drafter.needs_features)
            for request, token in zip(joining, first):
                request.generated.append(token)
            batch.add(joining, *prefilled)
        if len(batch):
            due = [r.output_length - len(r.generated) for r in batch.requests]
            new, info = batch.advance([max(0, min(rng.choice([0, 2, 4]), d - 1)) for d in due])
            assert info["gamma"] <= 4 and len(info["accepted"]) == len(batch)
            for request, tokens in zip(batch.requests, new):
                request.generated.extend(tokens[:request.output_length - len(request.generated)])
            finished = [r for r in batch.requests if len(r.generated) >= r.output_length]
            batch.remove(finished)
            done += finished
        step += 1
    return done


@pytest.fixture(scope="module")
def feature_draft(pair):
    """An untrained feature draft for the pair's target (losslessness holds whatever it drafts; the CPU pair's
    trained one is measured in notebook 14)."""
    torch.manual_seed(0)
    return FeatureDraft(pair[0]).eval()


@pytest.mark.parametrize("name", DRAFTERS)
def test_every_drafter_is_lossless_as_rows_join_and_leave(pair, feature_draft, name):
    target, draft = pair
    drafter = make_drafter(name, draft_model=feature_draft if name == "feature" else draft, limit=MAX_LEN,
                           window=8, sinks=2)
    done = serve_in_process(target, drafter, mixed_requests(1), random.Random(2))
    assert len(done) == 12
    for request in done:
        assert request.generated == generate_alone(target, request.input_tokens, request.output_length), request.id


def test_ragged_extend_pads_at_the_end_and_rolls_the_padding_back(pair):
    target, _ = pair
    requests = [Request(0, [5, 6, 7], 4), Request(1, [9, 8], 4)]
    _, kvs = prefill(target, requests)
    batch = SpecDecodeBatch(target, make_drafter("lookup", limit=MAX_LEN))
    batch.add(requests, kvs)
    logits = extend_ragged(batch.model, batch.cache, [[1, 2, 3], [4]])
    assert batch.cache.lengths == [6, 3] and logits.shape[:2] == (2, 3)
    alone = target(input_ids=torch.tensor([[9, 8, 4]])).logits[0, -1]
    torch.testing.assert_close(logits[1, 0], alone, atol=1e-4, rtol=1e-4)


def test_sampled_rounds_follow_the_targets_law():
    """A batch of identical prompts: the first token comes from the prefill, the second from one speculative
    round (γ = 2) whose draft is an independent model, so the rejection rule is exercised on most rows."""
    target, draft, prompt, expected = sampling_pair()
    vocab, samples = target.config.vocab_size, 3000
    requests = [Request(i, prompt[0].tolist(), 8) for i in range(samples)]
    generator = torch.Generator().manual_seed(0)
    first, kvs = prefill(target, requests, temperature=1.0, generator=generator)
    for request, token in zip(requests, first):
        request.generated.append(token)
    batch = SpecDecodeBatch(target, make_drafter("draft", draft_model=draft, limit=64), temperature=1.0,
                            generator=generator)
    batch.add(requests, kvs)
    new, _ = batch.advance([2] * samples)
    counts = np.zeros(vocab * vocab)
    for request, tokens in zip(requests, new):
        counts[request.generated[0] * vocab + tokens[0]] += 1
    check_follows_target(counts, expected, exact_joint(draft, prompt, 1.0), samples)


def test_cost_table_interpolates_between_measured_batches():
    table = CostTable({(1, 0): 1.0, (4, 0): 4.0, (1, 2): 2.0})
    assert table.cost(2, 0) == pytest.approx(2.0) and table.cost(8, 0) == pytest.approx(8.0)
    table.observe(4, 0, 16.0)  # 4x slower than planned: half the surprise to batch 4, half to its γ = 0 entry
    assert table.cost(4, 0) == pytest.approx(4.0 * 4 ** 0.2)
    assert table.batch_factor == {4: pytest.approx(4 ** 0.1)} and table.cost(1, 0) == 1.0
    assert calibration_batches(6) == [1, 2, 4, 6]


def test_calibration_interleaves_the_gammas_so_drift_falls_on_all_of_them():
    """Regression: γ = 0..γ_max were timed one after the other, so a burst of load (and the context growing with every
    round) fell on one γ; the start-up tables came out non-monotone (at 2 threads, batch 4: γ = 0 dearer than 1)."""
    from helpers.batching.policy import measure_costs

    order, clock = [], iter(range(1000))

    class Batch:
        def add(self, requests, *prefilled):
            self.rows = len(requests)

        def advance(self, gammas):
            order.append(gammas[0])
            drift = next(clock)  # every round slower than the one before: a machine getting busier
            return [[1]] * self.rows, {"draft_s": 0.0, "verify_s": 1.0 + gammas[0] + 0.1 * drift}

    spec = SpecConfig(drafter="lookup", policy="adaptive", gamma=2, calibration_repeats=3)
    table = measure_costs(Batch, lambda rows: ([0] * len(rows), [None] * len(rows)), spec, 1, 64)
    assert order == [0, 1, 2, 2, 1, 0, 0, 1, 2, 2, 1, 0]  # a warm-up pass, then three, alternating direction
    costs = [table.seconds[1, g] for g in range(3)]
    assert costs == sorted(costs) and max(b - a for a, b in zip(costs, costs[1:])) < 1.2  # one after the other: 1.4


def test_the_policy_speculates_when_eq5_says_so_and_stops_a_failing_request():
    spec = SpecConfig(drafter="lookup", policy="adaptive", gamma=4, alpha_prior=0.8, min_rounds=2, stop_below=0.3)
    cheap = CostTable({(1, g): 1.0 + 0.1 * g for g in range(5)})
    dear = CostTable({(1, g): 1.0 + 2.0 * g for g in range(5)})
    request = Request(0, [1, 2], 50)
    request.generated.append(3)
    assert GammaPolicy(spec, cheap, 512).choose([request]) == [4]
    assert GammaPolicy(spec, dear, 512).choose([request]) == [0]
    policy = GammaPolicy(spec, cheap, 512)
    for _ in range(8):  # every draft rejected: α = 3.2 / 12 falls below 0.3 and the request stops speculating
        policy.observe([request], {"drafted": [4], "accepted": [0], "gamma": 4, "draft_s": 0.0, "verify_s": 1.4})
    assert policy.stopped(request) and policy.choose([request]) == [0]
    near_end = Request(1, [1, 2], 3)
    near_end.generated += [4, 5]
    assert GammaPolicy(SpecConfig(drafter="lookup", policy="fixed"), None, 512).choose([near_end]) == [0]


def test_early_rejections_do_not_lock_the_engine_out_of_speculating():
    """Regression: a row that Eq. 5 sets to γ = 0 learns nothing, so one request's early rejections once became
    every later request's prior and the engine decoded plainly for good (684 of 688 steps in one run)."""
    table = CostTable({(1, 0): 5.4, (1, 1): 6.7, (1, 2): 7.7, (1, 3): 9.0, (1, 4): 9.8})  # the CPU pair's, in ms

    def run(optimism: float) -> tuple[list[int], list[int]]:
        spec = SpecConfig(drafter="lookup", policy="adaptive", gamma=4, alpha_prior=0.6, optimism=optimism)
        policy, first = GammaPolicy(spec, table, 512), Request(0, [1, 2], 50)
        first.generated.append(3)
        for drafted in (1, 1, 2, 2, 2):  # five rounds, every first draft rejected
            policy.observe([first], {"drafted": [drafted], "accepted": [0], "gamma": drafted,
                                     "draft_s": 0.0, "verify_s": table.cost(1, drafted)})
        second = Request(1, [1, 2], 50)
        second.generated.append(3)
        return policy.choose([first]), policy.choose([second])

    assert run(optimism=0.0) == ([0], [0])  # the rate alone: α = 2.4 / 9 and no request drafts again
    first, second = run(optimism=1.0)
    assert first[0] > 0 and second[0] > 0  # five tests prove little: both keep drafting


def test_optimism_fades_as_a_rows_tests_pile_up():
    alpha = RunningAlpha(prior=0.6, weight=4)
    few = alpha.upper(1.0) - alpha.value
    for _ in range(40):
        alpha.add(drafted=4, accepted=4)
        alpha.add(drafted=4, accepted=0)
    assert alpha.value == pytest.approx(162.4 / 204) and 0 < alpha.upper(1.0) - alpha.value < few / 3
    assert alpha.upper(0.0) == alpha.value and RunningAlpha(0.98, 1000).upper(3.0) == 0.99
    with pytest.raises(ValueError, match="optimism"):
        SpecConfig(drafter="lookup", optimism=-1.0)


def test_busy_seconds_is_the_union_of_the_requests_lifetimes():
    assert busy_seconds([(0, 1), (0.5, 2), (5, 6)]) == pytest.approx(3.0)


def test_bad_speculation_settings_are_named(feature_draft):
    with pytest.raises(ValueError, match="unknown drafter"):
        SpecConfig(drafter="medusa")
    with pytest.raises(ValueError, match="needs a draft model"):
        SpecConfig(drafter="draft", policy="fixed")
    with pytest.raises(ValueError, match="unknown speculation policy"):
        SpecConfig(drafter="lookup", policy="sometimes")
    with pytest.raises(ValueError, match="arrival_s"):
        Request(0, [1], 2, arrival_s=-1.0)
    with pytest.raises(ValueError, match="needs a feature draft"):
        make_drafter("feature", limit=64)
    with pytest.raises(ValueError, match="needs the prompt's features"):
        make_drafter("feature", draft_model=feature_draft, limit=64).join([Request(0, [1, 2], 2)])


def test_a_drafters_folder_is_named_or_shipped():
    from helpers.models import CPU_PAIR_DIR
    from helpers.specdec.drafter_files import FEATURE_DRAFT_DIR, drafter_dir

    assert drafter_dir(None, FEATURE_DRAFT_DIR) == FEATURE_DRAFT_DIR
    assert drafter_dir("cpu-pair/eagle", FEATURE_DRAFT_DIR) == CPU_PAIR_DIR / "eagle" == FEATURE_DRAFT_DIR
    assert str(drafter_dir("/some/folder", FEATURE_DRAFT_DIR)) == "/some/folder"


@pytest.mark.parametrize("drafter", [None, "self"])
def test_a_joining_row_gets_room_for_its_whole_output_and_the_cache_never_grows_mid_decode(pair, drafter):
    """Regression: rows joined with exactly their prompt's slots, so the first step past them doubled the cache,
    a copy of every row's KV in the middle of decoding (1.4 s for 16 rows of 4096 tokens)."""
    target, _ = pair
    requests = [Request(0, list(range(3, 40)), 12), Request(1, list(range(5, 20)), 20)]
    first, kvs = prefill(target, requests)
    for request, token in zip(requests, first):
        request.generated.append(token)
    gamma = 3
    batch = (DecodeBatch(target) if drafter is None else
             SpecDecodeBatch(target, make_drafter(drafter, limit=MAX_LEN, window=8, sinks=2), headroom=gamma))
    batch.add(requests, kvs)
    headroom = 0 if drafter is None else gamma
    assert batch.cache.capacity == max(r.prompt_len + r.output_length for r in requests) + headroom
    capacity = batch.cache.capacity
    while any(len(r.generated) < r.output_length for r in batch.requests):
        if drafter is None:
            new = [[token] for token in batch.step()]
        else:
            caps = [max(0, min(gamma, r.output_length - len(r.generated) - 1)) for r in batch.requests]
            new, _ = batch.advance(caps)
        for request, tokens in zip(batch.requests, new):
            request.generated.extend(tokens)
        batch.remove([r for r in batch.requests if len(r.generated) >= r.output_length])
        assert batch.cache.capacity == capacity  # never reallocated to grow


@pytest.mark.parametrize("policy", ["none", "fixed", "adaptive"])
def test_workers_warm_up_before_the_clock_and_keep_nothing_of_it(saved_pair, policy, monkeypatch):
    """The first forwards are cold; every policy's decode worker (and the prefill worker) runs a synthetic request
    first, so that no policy pays for it, and starts with an empty batch and a policy that never saw that row.
    Regression: a speculating worker's warm-up ran plain steps (a SpecDecodeBatch is a DecodeBatch), never a round."""
    target, _, draft_dir = saved_pair
    rounds = []
    advance = SpecDecodeBatch.advance
    monkeypatch.setattr(SpecDecodeBatch, "advance", lambda self, gammas: rounds.append(gammas) or advance(self, gammas))
    spec = None if policy == "none" else SpecConfig(drafter="draft", draft=draft_dir, policy=policy, gamma=3,
                                                    calibration_context=16, calibration_repeats=1)
    cfg = EngineConfig(kv_capacity_blocks=40, block_size=8, max_seq_len=MAX_LEN - 3, speculation=spec,
                       temperature=0.7)
    warm_up(target, cfg)  # the prefill worker's: prefill only
    decoder = prepare_decoder(target, cfg)
    assert len(decoder.batch) == 0
    if policy != "none":
        assert not decoder.policy.alphas and decoder.batch.generator is not None  # warmed up greedy, sampled after
    assert bool(rounds) == (policy != "none")  # fixed γ: only the warm-up runs rounds before the clock


@pytest.mark.parametrize("drafter, policy", [("draft", "adaptive"), ("draft", "fixed"), ("feature", "fixed")])
def test_the_engine_speculates_losslessly_under_poisson_arrivals(saved_pair, feature_draft, tmp_path, drafter,
                                                                 policy):
    """The feature drafter also checks that the prompt's features travel with its KV from the prefill worker."""
    target, source, draft_dir = saved_pair
    if drafter == "feature":
        save_drafter(feature_draft, tmp_path / "feature")
        draft_dir = str(tmp_path / "feature")
    requests = mixed_requests(3, count=14)
    rng = np.random.default_rng(0)
    for request, arrival in zip(requests, np.cumsum(rng.exponential(0.05, len(requests)))):
        request.arrival_s = float(arrival)
    spec = SpecConfig(drafter=drafter, draft=draft_dir, policy=policy, gamma=3, calibration_context=16,
                      calibration_repeats=1)
    cfg = EngineConfig(kv_capacity_blocks=40, block_size=8, max_seq_len=MAX_LEN - 3, max_decode_batch=4,
                       max_prefill_batch=2, bucket_width=8, speculation=spec)
    result = run_continuous(source, requests, cfg)
    for request in result.requests:
        assert request.generated == generate_alone(target, request.input_tokens, request.output_length), request.id
        assert request.t_first_token >= request.arrival_s
    speculated = [s for s in result.timeline if s.get("gamma")]
    if policy == "fixed":  # whether the adaptive policy speculates depends on the measured costs
        assert speculated  # (the untrained feature draft's guesses are rarely accepted)
        assert drafter == "feature" or sum(s["accepted"] for s in speculated) > 0
    assert all(s["peak_blocks"] <= s["reserved_blocks"] + 1e-9 for s in speculated)
    assert all(s["used_blocks"] <= s["peak_blocks"] for s in speculated)  # rejected drafts gave their blocks back
    assert set(result.extra["speculation"]) <= {r.id for r in result.requests}
    summary = summarize(result)
    assert summary["busy_s"] <= summary["makespan_s"] and summary["goodput_tok_s"] >= summary["throughput_tok_s"]


def test_a_killed_speculating_worker_is_reported_and_a_rerun_completes(saved_pair):
    target, source, draft_dir = saved_pair
    spec = SpecConfig(drafter="draft", draft=draft_dir, policy="fixed", gamma=3)
    cfg = EngineConfig(kv_capacity_blocks=40, block_size=8, max_seq_len=MAX_LEN - 3, max_decode_batch=4,
                       speculation=spec, crash_worker="decode", crash_after=3, timeout_s=120)
    requests = mixed_requests(4, count=8)
    with pytest.raises(WorkerFailed, match="decode worker died"):
        run_continuous(source, requests, cfg, grace_s=20)
    result = run_continuous(source, requests, EngineConfig(**{**cfg.__dict__, "crash_worker": None}))
    assert sorted(r.id for r in result.requests) == list(range(8))
    for request in result.requests:
        assert request.generated == generate_alone(target, request.input_tokens, request.output_length)


def test_a_model_too_short_for_the_rounds_is_refused_before_any_worker_starts(saved_pair, monkeypatch):
    """Regression: the refusal came from inside the decode worker, after both processes had started, followed by
    the prefill worker's 'connection reset'; a source that can read its config is now checked first."""
    import helpers.batching.engine as engine

    target, source, draft_dir = saved_pair
    spec = SpecConfig(drafter="draft", draft=draft_dir, policy="fixed", gamma=3)
    cfg = EngineConfig(kv_capacity_blocks=40, block_size=8, max_seq_len=MAX_LEN, speculation=spec)
    monkeypatch.setattr(engine.mp, "get_context", lambda *a: pytest.fail("a worker process was started"))
    with pytest.raises(ValueError, match="lower max_seq_len to 157"):
        run_continuous(source, mixed_requests(5, count=2), cfg, grace_s=20)
    with pytest.raises(ValueError, match="lower max_seq_len to 157"):  # the worker's own check, for other sources
        prepare_decoder(target, cfg)
