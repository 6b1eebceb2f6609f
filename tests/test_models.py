"""helpers.models: names, analogs, random-weight materialisation, the CPU pair and the error paths."""
from __future__ import annotations

import pytest
import torch
import transformers

from helpers import memory, models
from helpers.models import registry


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(ValueError) as err:
        models.load_model("Qwen/Qwen3-9B")
    message = str(err.value)
    assert "Qwen/Qwen3-9B" in message and "cpu/Qwen3-8B" in message and "cpu-pair/target" in message


def test_known_models_cover_handout_analogs_and_pair():
    for model_id in memory.KNOWN_MODELS:
        assert model_id in models.KNOWN_MODELS
        assert "cpu/" + model_id.split("/")[1] in models.KNOWN_MODELS
    for name in models.CPU_PAIR_MODELS:
        assert "cpu-pair/" + name in models.KNOWN_MODELS


def test_analogs_keep_the_relative_shapes():
    big, small, olmo = (models.analog_config(m) for m in
                        ("Qwen/Qwen3-8B", "Qwen/Qwen3-1.7B", "allenai/OLMo-7B-0724-hf"))
    real = {m: memory.load_config(m) for m in ("Qwen/Qwen3-8B", "Qwen/Qwen3-1.7B", "allenai/OLMo-7B-0724-hf")}
    assert (big.num_hidden_layers, small.num_hidden_layers, olmo.num_hidden_layers) == (9, 7, 8)
    assert big.hidden_size == 2 * small.hidden_size == olmo.hidden_size  # 4096 : 2048 : 4096
    # head counts kept exactly: GQA 32/8 and 16/8 for Qwen3, MHA 32/32 for OLMo
    assert (big.num_attention_heads, big.num_key_value_heads) == (32, 8)
    assert (small.num_attention_heads, small.num_key_value_heads) == (16, 8)
    assert (olmo.num_attention_heads, olmo.num_key_value_heads) == (32, 32)
    # vocabulary ratio (Qwen3 ~3x OLMo) survives
    assert big.vocab_size / olmo.vocab_size == pytest.approx(
        real["Qwen/Qwen3-8B"].vocab_size / real["allenai/OLMo-7B-0724-hf"].vocab_size, rel=0.01)
    # the LM head keeps roughly its share of the parameters
    for name, analog in (("Qwen/Qwen3-8B", big), ("allenai/OLMo-7B-0724-hf", olmo)):
        share = lambda c: c.vocab_size * c.hidden_size / memory.param_count(c)  # noqa: E731
        assert share(analog) == pytest.approx(share(real[name]), rel=0.35)
    assert big.tie_word_embeddings is False and small.tie_word_embeddings is True


def test_analog_by_prefixed_name_matches():
    assert models.analog_config("cpu/Qwen3-4B").to_dict() == models.analog_config("Qwen/Qwen3-4B").to_dict()


def test_random_model_materialises_finite_deterministic_and_labelled():
    config = memory.miniature_config("Qwen/Qwen3-8B", num_layers=2, head_dim=8, vocab_size=128)
    a = models.random_model(config, seed=3)
    b = models.random_model(config, seed=3)
    assert a.weights_label == "random"
    assert not any(p.is_meta for p in a.parameters())
    x = torch.randint(0, 128, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        la, lb = a(x).logits, b(x).logits
    assert torch.isfinite(la).all()
    assert torch.equal(la, lb)
    # RoPE frequencies are buffers: to_empty leaves garbage unless they are recomputed
    head_dim = config.head_dim
    theta = config.rope_parameters["rope_theta"]
    expected = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim))
    assert torch.allclose(a.model.rotary_emb.inv_freq, expected)
    norms = [p for n, p in a.named_parameters() if "norm" in n]
    assert norms and all(torch.all(p == 1) for p in norms)


def test_random_model_in_bf16_and_tied_embeddings():
    config = memory.miniature_config("Qwen/Qwen3-1.7B", num_layers=1, vocab_size=64)
    model = models.random_model(config, dtype=torch.bfloat16)
    assert model.lm_head.weight.dtype == torch.bfloat16
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()


def test_load_model_analog_has_no_tokenizer_and_runs():
    model, tokenizer = models.load_model("cpu/Qwen3-1.7B")
    assert tokenizer is None and model.weights_label == "random"
    info = models.describe(model)
    assert info["layers"] == 7 and info["kv_heads"] == 8 and info["weights"] == "random"
    with torch.no_grad():
        out = model(torch.randint(0, info["vocab_size"], (1, 5))).logits
    assert out.shape == (1, 5, info["vocab_size"]) and torch.isfinite(out).all()


def test_olmo_analog_builds():
    model, _ = models.load_model("cpu/OLMo-7B-0724-hf")
    assert model.config.model_type == "olmo"
    with torch.no_grad():
        assert torch.isfinite(model(torch.tensor([[1, 2, 3]])).logits).all()


def test_wrong_weights_for_a_name_is_a_clear_error():
    with pytest.raises(ValueError, match="random weights"):
        models.load_model("cpu/Qwen3-8B", weights="pretrained")
    with pytest.raises(ValueError, match="trained weights only"):
        models.load_model("cpu-pair/target", weights="random")
    with pytest.raises(ValueError, match="'pretrained' or 'random'"):
        models.load_model("Qwen/Qwen3-8B", weights="cpu-pair")


def test_pretrained_offline_says_which_profile_works(monkeypatch):
    def offline(*args, **kwargs):
        raise OSError("We couldn't connect to 'https://huggingface.co'")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", offline)
    with pytest.raises(RuntimeError) as err:
        models.load_model("Qwen/Qwen3-8B")
    message = str(err.value)
    assert "CPU profile" in message and "cpu/Qwen3-8B" in message and "weights='random'" in message


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU error")
def test_gpu_requested_without_gpu():
    with pytest.raises(RuntimeError, match="no CUDA GPU"):
        models.load_model("cpu/Qwen3-1.7B", device="cuda")


def test_missing_pair_weights_name_the_fix(tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "CPU_PAIR_DIR", tmp_path)
    with pytest.raises(FileNotFoundError, match="python -m helpers.training"):
        models.load_cpu_pair()
    with pytest.raises(FileNotFoundError, match="python -m helpers.training"):
        models.cpu_pair_info()


pair_present = pytest.mark.skipif(
    not (models.CPU_PAIR_DIR / "target" / "model.safetensors").exists(),
    reason="CPU pair weights not trained yet (python -m helpers.training)")


@pair_present
def test_load_cpu_pair_offline():
    target, draft, tokenizer = models.load_cpu_pair()
    assert target.weights_label == draft.weights_label == "cpu-pair"
    assert target.config.vocab_size == draft.config.vocab_size == len(tokenizer)
    assert target.lm_head.weight.dtype == torch.float32
    n_target, n_draft = (sum(p.numel() for p in m.parameters()) for m in (target, draft))
    assert n_draft * 4 < n_target
    assert draft.config.num_hidden_layers == 2  # the default is the fastest draft end to end, draft-2l
    text = 'def add(a, b):\n    """Return a + b."""\n    return a + b\n'
    ids = tokenizer(text, return_tensors="pt").input_ids
    assert tokenizer.decode(ids[0]) == text  # byte-level BPE round-trips
    with torch.no_grad():
        assert torch.isfinite(target(ids).logits).all() and torch.isfinite(draft(ids).logits).all()
    one_layer, _ = models.load_model("cpu-pair/draft")
    assert one_layer.config.num_hidden_layers == 1


@pair_present
def test_cpu_pair_card_has_the_measured_figures():
    card = models.cpu_pair_info()
    for name in ("target", "draft", "draft-2l"):
        info = card["models"][name]
        assert info["parameters"] > 0 and info["training_tokens"] > 0 and info["heldout_loss"] > 0
    for name in ("draft", "draft-2l"):
        assert 0 < card["models"][name]["cost_ratio"] and 0 <= card["models"][name]["greedy_agreement"] <= 1
    by_position = card["target_long"]["loss_by_position"]
    late = list(by_position["target-long"])[-1]
    assert by_position["target-long"][late] < by_position["target"][late]  # it uses context past 256 tokens
    data = models.CPU_PAIR_DIR.parent
    stored = sum(p.stat().st_size for p in data.rglob("*") if p.is_file())
    assert stored <= 60 * 10**6  # the whole data/ ships in the repository
