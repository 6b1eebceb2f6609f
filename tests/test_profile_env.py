"""The results-only switch is read in one place (helpers.profile_env) by the store and the device resolver."""
import torch

from helpers import hardware
from helpers.profile_env import RESULTS_ONLY_ENV, results_only


def test_results_only_reads_the_environment(monkeypatch):
    for value, expected in (("", False), ("0", False), (" 0 ", False), ("1", True), ("yes", True)):
        monkeypatch.setenv(RESULTS_ONLY_ENV, value)
        assert results_only() is expected
    monkeypatch.delenv(RESULTS_ONLY_ENV)
    assert results_only() is False


def test_hardware_follows_the_same_switch(monkeypatch):
    monkeypatch.setenv(RESULTS_ONLY_ENV, "1")
    assert hardware.resolve_device("meta") == torch.device("meta")
