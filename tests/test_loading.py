"""helpers.generation.loading: the weights rule of the sweep notebooks, the untrained-pair stand-in, the metadata."""
import pytest
import torch

from helpers import models
from helpers.generation import loading


def test_sweep_weights_rule():
    assert loading.sweep_weights("cpu/Qwen3-8B", "pretrained") == "random"  # analogs: random only
    assert loading.sweep_weights("cpu-pair/target", "random") is None  # the pair: its trained weights
    assert loading.sweep_weights("Qwen/Qwen3-8B", "pretrained") == "pretrained"
    assert loading.sweep_weights("Qwen/Qwen3-0.6B", "cpu-pair") is None  # notebook 04's default: the model's own


def test_load_for_sweep_analog_records_shape_and_weights():
    loaded = loading.load_for_sweep("cpu/Qwen3-0.6B", "pretrained", torch.device("cpu"), torch.float32)
    assert loaded.label == "random" and loaded.tokenizer is None
    assert loaded.meta["weights"] == "random" and loaded.meta["model_id"] == "cpu/Qwen3-0.6B"
    assert loaded.meta["dtype"] == "float32" and loaded.meta["seed"] == 0
    assert loaded.meta["parameters"] == models.describe(loaded.model)["parameters"]
    assert loading.weights_note(loaded.label) == " (random weights)"
    assert loading.weights_note("cpu-pair") == ""


def test_untrained_pair_target_falls_back_to_random_weights(monkeypatch):
    def missing(*args, **kwargs):
        raise FileNotFoundError("data/cpu_pair/target")

    monkeypatch.setattr(loading.models, "load_model", missing)
    monkeypatch.setattr(loading.models, "random_model", lambda config, **kw: ("random model", config))
    monkeypatch.setattr(loading, "make_config", lambda name, tokenizer: f"config of {name}")
    monkeypatch.setattr(loading.models, "load_cpu_tokenizer", lambda: None)
    model, tokenizer = loading.load_model_or_stand_in(loading.CPU_PAIR_TARGET, None, "cpu", torch.float32)
    assert model == ("random model", "config of target") and tokenizer is None
    with pytest.raises(FileNotFoundError):  # only the target has a stand-in
        loading.load_model_or_stand_in("cpu-pair/draft", None, "cpu", torch.float32)
