"""helpers.training: the pieces of the recipe on tiny models and texts (the full run takes an hour), its command
line, and the committed model card against its generator."""
import json

import pytest
import torch

from helpers.models.corpus import Corpus
from helpers.models.cpu_pair_shapes import EOS_TOKEN, MODEL_SHAPES, draft_shape, family_name, shape_parameters
from helpers.training.card import COMMAND, family_card_section, long_card_section, render_card, write_card
from helpers.training.checkpoints import load_saved, save_model
from helpers.training.cli import main
from helpers.training.distill import DISTILL_LR, distill_drafts
from helpers.training.evaluate import decode_step_seconds, greedy_agreement, heldout_loss, heldout_windows
from helpers.training.family import (FAMILY_REFERENCE, FAMILY_STEPS, PARAMETER_TOLERANCE, check_family_shapes,
                                     train_draft_family)
from helpers.training.initialise import init_from_target, share_target_embedding
from helpers.training.long_context import LONG_CONTEXT_LIMIT, loss_by_position, run_long_stage, train_long_target
from helpers.training.pair import DRAFT_NAMES, train_pair
from helpers.training.settings import Settings
from helpers.training.tokenizer import VOCAB_SIZE, encode_documents, train_tokenizer
from helpers.training.train import batches, lr_at, train_target
from helpers.models import CPU_PAIR_DIR
from helpers.models.corpus import is_heldout
from helpers.specdec import autoregressive_generate, eagle_generate, medusa_generate
from helpers.specdec.drafter_files import load_feature_draft, load_medusa_heads
from helpers.training import cli, long_context
from helpers.training import family as training_family
from helpers.training import heads as training_heads
from helpers.training.family import family_card_entry
from tiny_models import tiny_qwen3

TEXTS = [
    'def add(a, b):\n    """Return the sum of a and b."""\n    return a + b\n',
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n",
    "The for statement is used to iterate over the elements of a sequence.\n",
] * 20


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(TEXTS, vocab_size=300)


@pytest.fixture(scope="module")
def stream(tokenizer):
    return encode_documents(tokenizer, TEXTS)


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
    assert tokenizer.eos_token == EOS_TOKEN


def test_encode_documents_separates_with_eos(tokenizer, stream):
    eos = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    assert stream.dtype == torch.int32 and (stream == eos).sum() == len(TEXTS) and stream[-1] == eos


def test_lr_schedule_warms_up_and_decays():
    peak = 1e-3
    assert lr_at(0.0, peak) == 0
    assert lr_at(0.03, peak) == pytest.approx(peak)
    assert lr_at(1.0, peak) == pytest.approx(0.1 * peak)
    assert lr_at(0.5, peak) > lr_at(0.9, peak)


def test_batches_are_seeded(stream):
    a, b = batches(stream, 8, 2, seed=3), batches(stream, 8, 2, seed=3)
    first = next(a)
    assert first.shape == (2, 9) and torch.equal(first, next(b))


def test_training_and_distillation_lower_their_losses(tokenizer, stream):
    target = tiny(tokenizer, layers=2)
    windows = heldout_windows(stream, 16, 4)
    before = heldout_loss(target, windows)
    stage = train_target(target, stream, steps=20, seq_len=16, batch_size=8, lr=1e-2, seed=0,
                             device=torch.device("cpu"), log=lambda m: None)
    assert stage["steps"] == 20 and stage["tokens"] == 20 * 8 * 16
    after = heldout_loss(target, windows)
    assert after < before

    draft = tiny(tokenizer, layers=1, seed=1)
    kl_before = kl_to_target(target, draft, windows)
    distill_drafts(target, {"draft": draft}, stream, steps=25, seq_len=16, batch_size=8, lr=1e-2, seed=0,
                       device=torch.device("cpu"), log=lambda m: None)
    assert kl_to_target(target, draft, windows) < kl_before
    prompts = heldout_windows(stream, 7, 3)
    assert 0 <= greedy_agreement(target, draft, prompts, new_tokens=8) <= 1
    assert greedy_agreement(target, target, prompts, new_tokens=8) == 1.0


def test_draft_initialised_from_target_is_its_early_exit(tokenizer, stream):
    target = tiny(tokenizer, layers=3)
    draft = tiny(tokenizer, layers=1, seed=5)
    init_from_target(draft, target)
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
        init_from_target(narrow, target)


@torch.no_grad()
def kl_to_target(target, draft, windows):
    t = torch.log_softmax(target(windows[:, :-1]).logits, -1)
    d = torch.log_softmax(draft(windows[:, :-1]).logits, -1)
    return (t.exp() * (t - d)).sum(-1).mean().item()


def test_save_in_bf16_and_load_back_as_float32(tokenizer, tmp_path):
    model = tiny(tokenizer)
    save_model(model, tmp_path / "m")
    assert next(model.parameters()).dtype == torch.float32  # the in-memory model is left in float32
    loaded = load_saved(tmp_path / "m")
    assert next(loaded.parameters()).dtype == torch.float32
    assert torch.equal(loaded.lm_head.weight, model.lm_head.weight.to(torch.bfloat16).float())
    assert decode_step_seconds(loaded, torch.tensor([[1, 2, 3]]), steps=2, repeats=1) > 0


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
    write_card(card, tmp_path)
    text = (tmp_path / "MODEL_CARD.md").read_text()
    assert "0.070" in text and "0.710" in text and "3.200" in text and "1,000" in text
    assert (tmp_path / "card.json").exists()


def test_loss_by_position_buckets(tokenizer, stream):
    model = tiny(tokenizer)
    windows = heldout_windows(stream, 64, 3)
    losses = loss_by_position(model, windows, buckets=((0, 16), (16, 64), (64, 128)))
    assert list(losses) == ["0-16", "16-64"]  # a bucket past the window is left out
    assert all(value > 0 for value in losses.values())


def test_long_stage_fine_tunes_a_copy_and_reports_it(tokenizer, stream, tmp_path, monkeypatch):
    monkeypatch.setattr(long_context, "LONG_SEQ_LEN", 48)
    monkeypatch.setattr(long_context, "LONG_BUCKETS", ((0, 16), (16, 48)))
    target = tiny(tokenizer)
    save_model(target, tmp_path / "target")
    entry = train_long_target(tmp_path, stream, stream, steps=2, batch_size=1, seed=0, device=torch.device("cpu"),
                                  log=lambda message: None, eval_windows=2)
    long = load_saved(tmp_path / "target-long")
    assert long.config.max_position_embeddings == LONG_CONTEXT_LIMIT
    assert not torch.equal(long.lm_head.weight, load_saved(tmp_path / "target").lm_head.weight)
    assert entry["stage"]["steps"] == 2 and entry["stage"]["seq_len"] == 48
    assert set(entry["loss_by_position"]) == {"target", "target-long"}
    card = {"target_long": entry}
    text = long_card_section(card)
    assert "target-long" in text and "positions 16-48" in text and f"{entry['loss_by_position']['target']['0-16']:.3f}" in text


class _VocabOf4096:
    """Stands in for the CPU pair's tokenizer where only its size and end-of-text id matter."""
    def __len__(self):
        return VOCAB_SIZE

    def convert_tokens_to_ids(self, token):
        return 0


def test_draft_shape_specs_parse_and_bad_ones_name_the_format():
    shape = draft_shape("4x144")
    assert (shape["num_hidden_layers"], shape["hidden_size"], shape["intermediate_size"]) == (4, 144, 432)
    assert (shape["num_attention_heads"], shape["num_key_value_heads"], shape["head_dim"]) == (2, 1, 64)
    assert draft_shape("draft-2x192-shared") == draft_shape("2x192") == {
        **MODEL_SHAPES["draft-2l"], "num_hidden_layers": 2}
    assert draft_shape("1x32")["num_attention_heads"] == 1  # at least one head
    assert family_name("8x112") == "draft-8x112" == family_name("draft-8x112")
    for bad in ("4by144", "0x128", "x128", "4x", "2x192-tied", "4x8"):
        with pytest.raises(ValueError, match="LxW"):
            draft_shape(bad)


def test_the_shipped_family_is_within_the_size_budget_and_other_sizes_are_refused():
    from helpers.models import DRAFT_FAMILY
    vocab = _VocabOf4096()
    counts = check_family_shapes([name.removeprefix("draft-") for name in DRAFT_FAMILY], vocab)
    reference = shape_parameters("draft-2l", vocab)
    assert reference == 1_647_808
    assert all(abs(n / reference - 1) <= PARAMETER_TOLERANCE for n in counts.values())
    assert len({draft_shape(s)["num_hidden_layers"] for s in counts}) >= 4  # deep-narrow .. shallow-wide
    with pytest.raises(ValueError, match="parameters, more than 10%"):
        check_family_shapes(["2x256"], vocab)
    with pytest.raises(ValueError, match="width must be the target's"):
        check_family_shapes(["1x240-shared"], vocab)


def test_shared_embedding_is_the_targets_and_stays_frozen_in_distillation(tokenizer, stream):
    target = tiny(tokenizer, layers=2)
    draft = tiny(tokenizer, layers=1, seed=3)
    share_target_embedding(draft, target)
    assert torch.equal(draft.lm_head.weight, target.model.embed_tokens.weight)  # the tied head is shared too
    before = {n: p.detach().clone() for n, p in draft.named_parameters()}
    distill_drafts(target, {"draft": draft}, stream, steps=3, seq_len=16, batch_size=4, lr=1e-2, seed=0,
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
    text = family_card_section(card)
    assert "draft-4x144" in text and "1,559,312" in text and "0.123" in text and "0.654" in text
    assert family_card_section({}) == ""


def test_family_card_entry_keeps_earlier_drafts_and_records_the_recipe():
    measured = {"target": {"decode_ms_per_token": 6.5}, "draft-4x144": {"layers": 4, "decode_ms_per_token": 0.8}}
    draft = torch.nn.Linear(3, 2)  # 8 parameters, 6 of them trainable
    draft.bias.requires_grad_(False)
    earlier = {"models": {"draft-8x112": {"layers": 8}}}
    settings = Settings(out=CPU_PAIR_DIR, device=torch.device("cpu"), seed=0, batch_size=8, seq_len=256)
    family = family_card_entry(earlier, {"draft-4x144": draft}, {"steps": 10, "tokens": 20480},
                                               measured, {"windows": 4}, settings)
    assert list(family["models"]) == ["draft-8x112", "draft-4x144"]
    assert family["models"]["draft-4x144"] == {"layers": 4, "decode_ms_per_token": 0.8, "shared_embedding": False,
                                               "trainable_parameters": 6}
    assert family["stage"] == {"steps": 10, "tokens": 20480, "lr": DISTILL_LR, "seed": 1, "data_seed": 1,
                               "init": "random", "batch_size": 8, "seq_len": 256}
    assert family["target_ms_per_token"] == 6.5 and family["reference"] == FAMILY_REFERENCE


def test_the_committed_card_is_what_the_generator_writes():
    """data/cpu_pair/MODEL_CARD.md is render_card(card.json): the card's text changes only with its generator."""
    card = json.loads((CPU_PAIR_DIR / "card.json").read_text())
    assert render_card(card) == (CPU_PAIR_DIR / "MODEL_CARD.md").read_text()
    assert f"`{COMMAND} --stage drafts`" in render_card(card)


def test_drafters_card_names_a_reduced_draft_vocabulary_only_where_there_is_one():
    """The drafters' section (its wording in helpers/training/model_card.md) adds the FR-Spec sentence only for a
    draft vocabulary smaller than the tokenizer's, and its full-vocabulary figure only where it was measured."""
    from helpers.training.card import drafters_card_section

    card = json.loads((CPU_PAIR_DIR / "card.json").read_text())
    d = card["drafters"]
    assert drafters_card_section({}) == ""
    full = d["heldout"]["feature_draft_top1_step1_full_vocab"]
    text = drafters_card_section(card)
    assert f"the {d['draft_vocab']} tokens most frequent" in text and f"agrees {full:.3f}." in text
    assert text.endswith(".\n\n") and "{" not in text
    unmeasured = {**card, "drafters": {**d, "heldout": {k: v for k, v in d["heldout"].items()
                                                       if k != "feature_draft_top1_step1_full_vocab"}}}
    assert "whole vocabulary" not in drafters_card_section(unmeasured)
    assert f"{card['vocab_size']} rows)." in drafters_card_section(unmeasured)
    whole = {**card, "drafters": {**d, "draft_vocab": card["vocab_size"]}}
    assert "most frequent" not in drafters_card_section(whole)


def test_command_line_keeps_every_flag_and_resolves_the_defaults(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    usage = capsys.readouterr().out
    assert usage.startswith("usage: python -m helpers.training")
    for flag in ("--out", "--device", "--threads", "--target-steps", "--draft-steps", "--seed", "--seq-len",
                 "--batch-size", "--skip-target", "--smoke", "--stage", "--draft-shape", "--long-steps",
                 "--heads-steps", "--draft-vocab"):
        assert flag in usage, flag
    parse = cli.build_parser().parse_args
    full = cli.settings_from_args(parse(["--device", "cpu"]))
    assert (full.out, full.device.type, full.batch_size, full.threads) == (CPU_PAIR_DIR, "cpu", 8, 2)
    assert (full.target_steps, full.draft_steps, full.long_steps, full.seed, full.seq_len) == (2400, 2500, 240, 0, 256)
    assert (full.heads_steps, full.draft_vocab) == (4000, 1024)
    assert cli.settings_from_args(parse(["--device", "cuda"])).batch_size == 64  # resolving touches no GPU
    drafts = cli.settings_from_args(parse(["--device", "cpu", "--stage", "drafts", "--draft-shape", "3x160",
                                           "--draft-shape", "2x192-shared"]))
    assert drafts.draft_steps == FAMILY_STEPS and drafts.draft_shapes == ("3x160", "2x192-shared")
    smoke = cli.settings_from_args(parse(["--device", "cpu", "--smoke", "--out", "elsewhere", "--skip-target"]))
    assert (smoke.out, smoke.target_steps, smoke.draft_steps, smoke.long_steps) == (cli.SMOKE_DIR, 20, 10, 4)
    assert smoke.skip_target and smoke.smoke
    mine = cli.settings_from_args(parse(["--device", "cpu", "--target-steps", "7", "--batch-size", "3"]))
    assert (mine.target_steps, mine.batch_size) == (7, 3)


def test_frequent_tokens_are_the_most_common_ids_in_id_order():
    ids = torch.tensor([5, 5, 5, 2, 2, 9, 9, 1, 7])
    assert training_heads.frequent_tokens(ids, 3, 10).tolist() == [2, 5, 9]  # 5 x3, 2 x2, 9 x2
    assert training_heads.frequent_tokens(ids, 4, 10).tolist() == [1, 2, 5, 9]  # a tie: the lower id first
    assert training_heads.frequent_tokens(ids, 0, 10).tolist() == list(range(10))
    assert training_heads.frequent_tokens(ids, 99, 10).tolist() == list(range(10))
    with pytest.raises(ValueError, match="draft vocabulary size"):
        training_heads.frequent_tokens(ids, -1, 10)


@pytest.mark.parametrize("stage", ["long", "drafts", "heads"])
def test_a_later_stage_without_a_trained_pair_fails_before_any_work(stage, tmp_path):
    with pytest.raises(FileNotFoundError, match=f"--stage {stage} starts from the target"):
        main(["--stage", stage, "--out", str(tmp_path / "empty"), "--device", "cpu"])
    assert not (tmp_path / "empty").exists()


TINY_WIDTH = dict(hidden_size=32, intermediate_size=64, num_attention_heads=2, num_key_value_heads=1, head_dim=16)


@pytest.fixture
def tiny_shapes(monkeypatch):
    """The pair's named shapes at a tiny width (make_config reads them when called)."""
    from helpers.models import cpu_pair_shapes
    shapes = {"target": dict(TINY_WIDTH, num_hidden_layers=2), "draft": dict(TINY_WIDTH, num_hidden_layers=1),
              "draft-2l": dict(TINY_WIDTH, num_hidden_layers=1)}
    for module in (cpu_pair_shapes, training_family):
        monkeypatch.setattr(module, "MODEL_SHAPES", shapes)
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)  # measuring sets one thread


def test_every_stage_runs_end_to_end_on_tiny_shapes(tokenizer, stream, tmp_path, tiny_shapes, monkeypatch):
    """The pair, then target-long, then a draft family, each writing the card the next stage extends: what
    ``python -m helpers.training --smoke`` does, at a size a unit test can afford."""
    from dataclasses import replace
    settings = Settings(out=tmp_path, device=torch.device("cpu"), seq_len=16, batch_size=4, threads=1,
                                 target_steps=3, draft_steps=2, long_steps=1, smoke=True)
    corpus = Corpus(TEXTS[:3], TEXTS[:1], ["a.py", "b.py", "c.py"], ["d.py"])
    card = train_pair(settings, corpus, tokenizer, stream, stream)
    assert list(card) == ["seed", "vocab_size", "corpus", "stages", "eval", "models", "environment", "total_minutes",
                          "stored_megabytes"]
    assert list(card["models"]) == ["target", *DRAFT_NAMES]
    assert card["stages"]["target"]["steps"] == 3 and card["stages"]["draft"]["steps"] == 2
    assert card["corpus"] == {"train_documents": 3, "heldout_documents": 1, "train_tokens": len(stream),
                              "heldout_tokens": len(stream)}
    assert json.loads((tmp_path / "card.json").read_text()) == card
    assert (tmp_path / "MODEL_CARD.md").read_text() == render_card(card)

    monkeypatch.setattr(long_context, "LONG_SEQ_LEN", 48)
    monkeypatch.setattr(long_context, "LONG_BUCKETS", ((0, 16), (16, 48)))
    card = run_long_stage(settings, stream, stream)
    assert card["target_long"]["stage"]["steps"] == 1 and "target" in card["models"]

    monkeypatch.setattr(training_family, "PARAMETER_TOLERANCE", 100.0)  # tiny shapes, any size
    card = train_draft_family(replace(settings, draft_shapes=("1x32", "2x32-shared")), tokenizer, stream,
                                       stream)
    family = card["draft_family"]
    assert list(family["models"]) == ["draft-1x32", "draft-2x32-shared"] and "target_long" in card
    assert family["models"]["draft-2x32-shared"]["shared_embedding"]
    assert family["models"]["draft-2x32-shared"]["trainable_parameters"] < family["models"]["draft-2x32-shared"][
        "parameters"]
    assert (tmp_path / "MODEL_CARD.md").read_text() == render_card(card)

    card = training_heads.run_heads_stage(replace(settings, heads_steps=2, draft_vocab=8), stream, stream,
                                          num_heads=2)
    drafters = card["drafters"]
    assert drafters["steps"] == 2 and len(drafters["heldout"]["medusa_top1_by_head"]) == 2
    assert drafters["draft_vocab"] == 8 and "feature_draft_top1_step1_full_vocab" in drafters["heldout"]
    assert set(drafters["megabytes"]) == {"medusa", "eagle"} and "draft_family" in card
    assert (tmp_path / "MODEL_CARD.md").read_text() == render_card(card)
    target = load_saved(tmp_path / "target")
    heads = load_medusa_heads(target, tmp_path / "medusa")
    draft = load_feature_draft(target, tmp_path / "eagle")
    assert draft.draft_vocab.tolist() == training_heads.frequent_tokens(stream, 8, len(tokenizer)).tolist()
    prompt = torch.tensor([stream[:5].tolist()])
    reference = autoregressive_generate(target, prompt, 6, eos_token_id=-1).tokens
    assert torch.equal(medusa_generate(target, heads, prompt, 6, eos_token_id=-1).tokens, reference)
    assert torch.equal(eagle_generate(target, draft, prompt, 6, eos_token_id=-1).tokens, reference)


def test_drafter_losses_fall_with_training(tokenizer, stream):
    """A few steps of stage 7 on a tiny target lower both drafters' losses (teacher forced)."""
    from helpers.specdec import FeatureDraft, MedusaHeads
    target = tiny(tokenizer, layers=2)
    heads, draft = MedusaHeads(target, 2), FeatureDraft(target)
    batch = batches(stream, 16, 4, seed=3)
    fixed = next(batch)

    def losses():
        features, log_q = training_heads.teacher(target, fixed)
        with torch.no_grad():
            return (training_heads.medusa_loss(heads, features, log_q)[0].item(),
                    training_heads.feature_loss(draft, features, log_q, fixed, token_weight=0.1,
                                                feature_noise=0.0)[0].item())
    before = losses()
    training_heads.train_drafters(target, heads, draft, stream, steps=30, seq_len=16, batch_size=4, seed=0,
                                  log=lambda message: None)
    after = losses()
    assert after[0] < before[0] and after[1] < before[1], (before, after)
    assert not any(p.requires_grad for p in target.parameters())  # the target stayed frozen
