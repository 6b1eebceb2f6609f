"""helpers.models.train_cpu_pair: the pieces of the recipe on tiny models and texts (the full run takes an hour)."""
import pytest
import torch

from helpers.models import train_cpu_pair as tcp
from helpers.models.corpus import is_heldout
from tiny_models import tiny_qwen3

TEXTS = [
    'def add(a, b):\n    """Return the sum of a and b."""\n    return a + b\n',
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n",
    "The for statement is used to iterate over the elements of a sequence.\n",
] * 20


@pytest.fixture(scope="module")
def tokenizer():
    return tcp.train_tokenizer(TEXTS, vocab_size=300)


@pytest.fixture(scope="module")
def stream(tokenizer):
    return tcp.encode_documents(tokenizer, TEXTS)


def tiny(tokenizer, layers=1, seed=0):
    """Sized to the trained tokenizer; 2 query heads share 1 KV head; tied embeddings like the CPU pair."""
    return tiny_qwen3(seed, tie=True, vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                      num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=1,
                      max_position_embeddings=32768)


def test_heldout_split_is_deterministic_and_about_one_in_twenty():
    names = [f"lib/module_{i}.py" for i in range(2000)]
    held = [n for n in names if is_heldout(n)]
    assert held == [n for n in names if is_heldout(n)]
    assert 60 < len(held) < 140


def test_tokenizer_is_byte_level_and_round_trips(tokenizer):
    for text in ["x = {'é': 1}  # ünïcode\n\tindent", TEXTS[0], "\x00\x7f"]:
        ids = tokenizer(text).input_ids
        assert tokenizer.decode(ids) == text
    assert tokenizer.eos_token == tcp.EOS_TOKEN


def test_encode_documents_separates_with_eos(tokenizer, stream):
    eos = tokenizer.convert_tokens_to_ids(tcp.EOS_TOKEN)
    assert stream.dtype == torch.int32 and (stream == eos).sum() == len(TEXTS) and stream[-1] == eos


def test_lr_schedule_warms_up_and_decays():
    peak = 1e-3
    assert tcp.lr_at(0.0, peak) == 0
    assert tcp.lr_at(0.03, peak) == pytest.approx(peak)
    assert tcp.lr_at(1.0, peak) == pytest.approx(0.1 * peak)
    assert tcp.lr_at(0.5, peak) > tcp.lr_at(0.9, peak)


def test_batches_are_seeded(stream):
    a, b = tcp.batches(stream, 8, 2, seed=3), tcp.batches(stream, 8, 2, seed=3)
    first = next(a)
    assert first.shape == (2, 9) and torch.equal(first, next(b))


def test_training_and_distillation_lower_their_losses(tokenizer, stream):
    target = tiny(tokenizer, layers=2)
    windows = tcp.heldout_windows(stream, 16, 4)
    before = tcp.heldout_loss(target, windows)
    stage = tcp.train_target(target, stream, steps=20, seq_len=16, batch_size=8, lr=1e-2, seed=0,
                             device=torch.device("cpu"), log=lambda m: None)
    assert stage["steps"] == 20 and stage["tokens"] == 20 * 8 * 16
    after = tcp.heldout_loss(target, windows)
    assert after < before

    draft = tiny(tokenizer, layers=1, seed=1)
    kl_before = kl_to_target(target, draft, windows)
    tcp.distill_drafts(target, {"draft": draft}, stream, steps=25, seq_len=16, batch_size=8, lr=1e-2, seed=0,
                       device=torch.device("cpu"), log=lambda m: None)
    assert kl_to_target(target, draft, windows) < kl_before
    prompts = tcp.heldout_windows(stream, 7, 3)
    assert 0 <= tcp.greedy_agreement(target, draft, prompts, new_tokens=8) <= 1
    assert tcp.greedy_agreement(target, target, prompts, new_tokens=8) == 1.0


def test_draft_initialised_from_target_is_its_early_exit(tokenizer, stream):
    target = tiny(tokenizer, layers=3)
    draft = tiny(tokenizer, layers=1, seed=5)
    tcp.init_from_target(draft, target)
    assert torch.equal(draft.model.embed_tokens.weight, target.model.embed_tokens.weight)
    assert torch.equal(draft.model.layers[0].mlp.up_proj.weight, target.model.layers[0].mlp.up_proj.weight)
    # the draft computes the target's first layer, then its final norm and LM head (an early exit)
    ids = stream[None, :12].long()
    with torch.no_grad():
        hidden = target(ids, output_hidden_states=True).hidden_states[1]
        early_exit = target.lm_head(target.model.norm(hidden))
        torch.testing.assert_close(draft(ids).logits, early_exit)
    narrow = tiny_qwen3(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                        num_attention_heads=1, num_key_value_heads=1)
    with pytest.raises(ValueError, match="width"):
        tcp.init_from_target(narrow, target)


@torch.no_grad()
def kl_to_target(target, draft, windows):
    t = torch.log_softmax(target(windows[:, :-1]).logits, -1)
    d = torch.log_softmax(draft(windows[:, :-1]).logits, -1)
    return (t.exp() * (t - d)).sum(-1).mean().item()


def test_save_in_bf16_and_load_back_as_float32(tokenizer, tmp_path):
    model = tiny(tokenizer)
    tcp.save_model(model, tmp_path / "m")
    assert next(model.parameters()).dtype == torch.float32  # the in-memory model is left in float32
    loaded = tcp.load_saved(tmp_path / "m")
    assert next(loaded.parameters()).dtype == torch.float32
    assert torch.equal(loaded.lm_head.weight, model.lm_head.weight.to(torch.bfloat16).float())
    assert tcp.decode_step_seconds(loaded, torch.tensor([[1, 2, 3]]), steps=2, repeats=1) > 0


def test_card_renders_every_measured_figure(tmp_path):
    model = {"layers": 1, "hidden_size": 32, "parameters": 1000, "training_tokens": 500, "heldout_loss": 3.2,
             "decode_ms_per_token": 1.0}
    card = {
        "seed": 0, "vocab_size": 300,
        "corpus": {"train_documents": 3, "heldout_documents": 1, "train_tokens": 100, "heldout_tokens": 10},
        "stages": {"target": {"steps": 1, "tokens": 500, "seconds": 60}, "draft": {"steps": 1, "tokens": 500, "seconds": 30},
                   "batch_size": 8, "seq_len": 16},
        "eval": {"loss_windows": 4, "seq_len": 16, "agreement_prompts": 2, "agreement_prompt_len": 8,
                 "agreement_new_tokens": 8},
        "models": {"target": model, "draft": {**model, "cost_ratio": 0.07, "greedy_agreement": 0.71}},
        "environment": {"python": "3.11", "torch": "2", "transformers": "5", "device": "cpu", "cpu": "x", "threads": 1},
        "stored_megabytes": 20.0,
    }
    tcp.write_card(card, tmp_path)
    text = (tmp_path / "MODEL_CARD.md").read_text()
    assert "0.070" in text and "0.710" in text and "3.200" in text and "1,000" in text
    assert (tmp_path / "card.json").exists()


def test_loss_by_position_buckets(tokenizer, stream):
    model = tiny(tokenizer)
    windows = tcp.heldout_windows(stream, 64, 3)
    losses = tcp.loss_by_position(model, windows, buckets=((0, 16), (16, 64), (64, 128)))
    assert list(losses) == ["0-16", "16-64"]  # a bucket past the window is left out
    assert all(value > 0 for value in losses.values())


def test_long_stage_fine_tunes_a_copy_and_reports_it(tokenizer, stream, tmp_path, monkeypatch):
    monkeypatch.setattr(tcp, "LONG_SEQ_LEN", 48)
    monkeypatch.setattr(tcp, "LONG_BUCKETS", ((0, 16), (16, 48)))
    target = tiny(tokenizer)
    tcp.save_model(target, tmp_path / "target")
    entry = tcp.train_long_target(tmp_path, stream, stream, steps=2, batch_size=1, seed=0, device=torch.device("cpu"),
                                  log=lambda message: None, eval_windows=2)
    long = tcp.load_saved(tmp_path / "target-long")
    assert long.config.max_position_embeddings == tcp.LONG_CONTEXT_LIMIT
    assert not torch.equal(long.lm_head.weight, tcp.load_saved(tmp_path / "target").lm_head.weight)
    assert entry["stage"]["steps"] == 2 and entry["stage"]["seq_len"] == 48
    assert set(entry["loss_by_position"]) == {"target", "target-long"}
    card = {"target_long": entry}
    text = tcp._long_card(card)
    assert "target-long" in text and "positions 16-48" in text and f"{entry['loss_by_position']['target']['0-16']:.3f}" in text


class _VocabOf4096:
    """Stands in for the CPU pair's tokenizer where only its size and end-of-text id matter."""
    def __len__(self):
        return tcp.VOCAB_SIZE

    def convert_tokens_to_ids(self, token):
        return 0


def test_draft_shape_specs_parse_and_bad_ones_name_the_format():
    shape = tcp.draft_shape("4x144")
    assert (shape["num_hidden_layers"], shape["hidden_size"], shape["intermediate_size"]) == (4, 144, 432)
    assert (shape["num_attention_heads"], shape["num_key_value_heads"], shape["head_dim"]) == (2, 1, 64)
    assert tcp.draft_shape("draft-2x192-shared") == tcp.draft_shape("2x192") == {
        **tcp.MODEL_SHAPES["draft-2l"], "num_hidden_layers": 2}
    assert tcp.draft_shape("1x32")["num_attention_heads"] == 1  # at least one head
    assert tcp.family_name("8x112") == "draft-8x112" == tcp.family_name("draft-8x112")
    for bad in ("4by144", "0x128", "x128", "4x", "2x192-tied", "4x8"):
        with pytest.raises(ValueError, match="LxW"):
            tcp.draft_shape(bad)


def test_the_shipped_family_is_within_the_size_budget_and_other_sizes_are_refused():
    from helpers.models import DRAFT_FAMILY
    vocab = _VocabOf4096()
    counts = tcp.check_family_shapes([name.removeprefix("draft-") for name in DRAFT_FAMILY], vocab)
    reference = tcp.shape_parameters("draft-2l", vocab)
    assert reference == 1_647_808
    assert all(abs(n / reference - 1) <= tcp.PARAMETER_TOLERANCE for n in counts.values())
    assert len({tcp.draft_shape(s)["num_hidden_layers"] for s in counts}) >= 4  # deep-narrow .. shallow-wide
    with pytest.raises(ValueError, match="parameters, more than 10%"):
        tcp.check_family_shapes(["2x256"], vocab)
    with pytest.raises(ValueError, match="width must be the target's"):
        tcp.check_family_shapes(["1x240-shared"], vocab)


def test_shared_embedding_is_the_targets_and_stays_frozen_in_distillation(tokenizer, stream):
    target = tiny(tokenizer, layers=2)
    draft = tiny(tokenizer, layers=1, seed=3)
    tcp.share_target_embedding(draft, target)
    assert torch.equal(draft.lm_head.weight, target.model.embed_tokens.weight)  # the tied head is shared too
    before = {n: p.detach().clone() for n, p in draft.named_parameters()}
    tcp.distill_drafts(target, {"draft": draft}, stream, steps=3, seq_len=16, batch_size=4, lr=1e-2, seed=0,
                       device=torch.device("cpu"), log=lambda m: None)
    after = dict(draft.named_parameters())
    assert torch.equal(after["model.embed_tokens.weight"], before["model.embed_tokens.weight"])
    assert not torch.equal(after["model.layers.0.mlp.up_proj.weight"], before["model.layers.0.mlp.up_proj.weight"])


def test_family_card_lists_every_draft():
    entry = {"layers": 4, "hidden_size": 144, "parameters": 1_559_312, "trainable_parameters": 1_559_312,
             "heldout_loss": 2.5, "decode_ms_per_token": 0.8, "cost_ratio": 0.123, "greedy_agreement": 0.654,
             "shared_embedding": False}
    card = {"draft_family": {"models": {"draft-4x144": entry}, "tolerance": 0.1, "reference": "draft-2l",
                             "target_ms_per_token": 6.5,
                             "stage": {"seed": 1, "steps": 10, "batch_size": 8, "seq_len": 256, "tokens": 20480,
                                       "lr": 3e-3, "seconds": 90}}}
    text = tcp._family_card(card)
    assert "draft-4x144" in text and "1,559,312" in text and "0.123" in text and "0.654" in text
    assert tcp._family_card({}) == ""
