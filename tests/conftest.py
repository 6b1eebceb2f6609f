import pytest
import torch

from helpers.results import ResultStore

from tiny_models import PEAK, perturbed_copy, tiny_qwen3


@pytest.fixture(autouse=True)
def one_thread():
    """Unit tests use tiny models: extra threads only add synchronisation, and CI has two cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def peaked_pair():
    """A 64-token float32 target with a peaked LM head and a draft that agrees with it only partly (relative
    Gaussian noise 0.3 on every weight): speculative decoding, one sequence at a time."""
    target = tiny_qwen3(0, vocab_size=64, head_scale=PEAK)
    return target, perturbed_copy(target, 0.3, seed=1, relative=True)


@pytest.fixture(scope="module")
def float64_pair():
    """A 97-token float64 target and a draft that agrees with it often but not always (noise 0.003): batched
    speculative decoding, where float64 keeps padded-batch rounding far below any argmax gap."""
    target = tiny_qwen3(0, vocab_size=97).double()
    return target, perturbed_copy(target, 0.003)


@pytest.fixture
def store(tmp_path, monkeypatch):
    """An empty result store under a temporary output root (results/unit/99_test.jsonl)."""
    monkeypatch.setenv("WORKBOOK_OUTPUT_ROOT", str(tmp_path))
    return ResultStore("unit", "99_test")
