"""The measurement helpers behind notebook 09 run, return sane figures, and keep outputs lossless."""
import pytest
import torch

from helpers.specdec_costs import compare_batched, measure_costs, speedup_sweep
from tests.test_specdec_batched import PROMPTS, perturbed_copy, tiny_qwen3


@pytest.fixture(scope="module")
def pair():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    target = tiny_qwen3(0)
    yield target, perturbed_copy(target, 0.003)
    torch.set_num_threads(threads)


def test_measure_costs_shapes(pair):
    target, draft = pair
    costs = measure_costs(target, draft, torch.tensor([PROMPTS[0]]), [1, 3], warmup=1, repeats=2)
    assert costs["T_T"] > 0 and costs["T_D"] > 0 and set(costs["T_V"]) == {1, 3}
    assert set(costs["T_D_round"]) == {1, 3} and min(costs["T_D_round"].values()) > 0
    assert costs["runtime"] == "minimal"  # tiny Qwen3 models: the runtime speculative decoding picks
    batched = measure_costs(target, draft, torch.tensor([PROMPTS[0], PROMPTS[0]]), [2], warmup=0, repeats=1,
                            runtime="transformers")
    assert batched["runtime"] == "transformers" and batched["T_D_round"][2] > 0


def test_speedup_sweep_is_lossless_and_counts_rounds(pair):
    target, draft = pair
    sweep = speedup_sweep(target, draft, PROMPTS[:2], [2, 4], 12, repeats=1)
    assert sweep["ar"]["new_tokens"] == 24
    for row in sweep["gammas"].values():
        assert row["lossless"] and 0 < row["alpha"] < 1 and row["speedup"] > 0 and row["decode_speedup"] > 0
        assert 1 <= row["tokens_per_round"] <= 5


def test_compare_batched_rows_agree(pair):
    target, draft = pair
    result = compare_batched(target, draft, PROMPTS, 12, 3, repeats=1)
    assert result["rows_identical"] == 1.0 and result["generated_tokens"] == 4 * 12
