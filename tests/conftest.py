import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    """Unit tests use tiny models: extra threads only add synchronisation, and CI has two cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
