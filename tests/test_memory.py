import matplotlib
import matplotlib.pyplot as plt
import pytest
import torch
from transformers import AutoModelForCausalLM

from helpers import memory, plotting
from helpers.memory import GB, GiB


@pytest.mark.parametrize("model_id", memory.KNOWN_MODELS)
def test_param_count_equals_transformers(model_id):
    config = memory.load_config(model_id)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    assert memory.param_count(config) == sum(p.numel() for p in model.parameters())


def test_published_sizes():
    # rounded sizes the model cards publish
    assert round(memory.param_count(memory.load_config("Qwen/Qwen3-8B")) / 1e9, 2) == 8.19
    assert round(memory.param_count(memory.load_config("meta-llama/Llama-3.1-8B")) / 1e9, 2) == 8.03
    assert round(memory.param_count(memory.load_config("meta-llama/Llama-2-7b-hf")) / 1e9, 2) == 6.74


def test_config_facts():
    cfg = memory.load_config("meta-llama/Llama-3.2-1B")
    assert (cfg.head_dim, cfg.num_key_value_heads, cfg.tie_word_embeddings) == (64, 8, True)
    assert cfg.rope_parameters["rope_type"] == "llama3" and cfg.rope_parameters["factor"] == 32.0
    assert memory.load_config("Qwen/Qwen3-8B").tie_word_embeddings is False
    assert memory.load_config("allenai/OLMo-7B-0724-hf").vocab_size == 50304


def test_unknown_model_lists_known_ids():
    with pytest.raises(KeyError) as info:
        memory.load_config("Qwen/Qwen3-9B")
    assert "Qwen/Qwen3-8B" in str(info.value) and "Known model ids" in str(info.value)


def test_kv_cache_formula():
    cfg = memory.load_config("Qwen/Qwen3-8B")
    assert memory.kv_cache_bytes(cfg, 32768, 1) == 2 * 32768 * 36 * 8 * 128 * 2
    assert memory.kv_cache_bytes(cfg, 100, 4) == 4 * memory.kv_cache_bytes(cfg, 100, 1)
    assert memory.kv_cache_bytes(cfg, 10, 1, bytes_per_elem=4) == 2 * memory.kv_cache_bytes(cfg, 10, 1)
    # Llama-2 (MHA, 32 KV heads) holds 4x Llama-3.1-8B's (GQA, 8 KV heads) per token
    llama2, llama31 = memory.load_config("meta-llama/Llama-2-7b-hf"), memory.load_config("meta-llama/Llama-3.1-8B")
    assert memory.kv_cache_bytes_per_token(llama2) == 4 * memory.kv_cache_bytes_per_token(llama31)
    with pytest.raises(ValueError):
        memory.kv_cache_bytes(cfg, -1)


def test_max_seq_len_l40s_both_units():
    cfg = memory.load_config("Qwen/Qwen3-14B")
    for gpu in (48 * GB, 48 * GiB):
        s = memory.max_seq_len(cfg, gpu, 8)
        total = memory.weight_bytes(cfg) + memory.kv_cache_bytes(cfg, s, 8)
        assert total <= gpu < total + memory.kv_cache_bytes(cfg, 1, 8)
    assert memory.round_down(memory.max_seq_len(cfg, 48 * GB, 8)) == 14080
    assert memory.round_down(memory.max_seq_len(cfg, 48 * GiB, 8)) == 16780
    assert memory.max_seq_len(cfg, 10 * GB, 1) == 0  # weights alone do not fit
    assert memory.max_seq_len(cfg, 48 * GB, 8, reserved_bytes=2 * GB) < memory.max_seq_len(cfg, 48 * GB, 8)


def test_max_params_for_forward():
    assert memory.max_params_for_forward(80 * GB) == 40 * 10**9
    assert memory.max_params_for_forward(80 * GB, overhead_bytes=2 * GB) == 39 * 10**9
    assert memory.max_params_for_forward(80 * GB, activation_fraction=0.25) == 32 * 10**9
    assert memory.max_params_for_forward(GB, overhead_bytes=2 * GB) == 0


def test_miniature_keeps_attention_layout_and_cache_bytes():
    for model_id in ("meta-llama/Llama-3.1-8B", "meta-llama/Llama-2-7b-hf", "Qwen/Qwen3-8B"):
        full, mini = memory.load_config(model_id), memory.miniature_config(model_id)
        assert (mini.num_attention_heads, mini.num_key_value_heads) == (full.num_attention_heads, full.num_key_value_heads)
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(mini, dtype=torch.float32).eval()
        out = model.generate(torch.randint(0, mini.vocab_size, (3, 4)), max_new_tokens=3, min_new_tokens=3,
                             do_sample=False, return_dict_in_generate=True, pad_token_id=0)
        cache = out.past_key_values
        assert memory.cache_tensor_bytes(cache) == memory.kv_cache_bytes(mini, cache.get_seq_length(), 3, 4)


def test_memory_breakdown_adds_up():
    cfg = memory.load_config("Qwen/Qwen3-14B")
    parts = memory.memory_breakdown(cfg, 48 * GB, 8, 1000)
    assert parts["weights"] + parts["kv_cache"] + parts["headroom"] == 48 * GB


def test_rounding_to_ten_tokens():
    assert memory.round_nearest(14086) == 14090 and memory.round_down(14086) == 14080
    assert memory.round_nearest(14085) == 14090 and memory.round_nearest(14084) == 14080
    assert memory.round_nearest(14080) == memory.round_down(14080) == 14080


def test_seq_len_answer_rounds_down_because_nearest_does_not_fit():
    """Regression (§1.2.2): one answer, from the datasheet's 48 GB; rounding to the nearest 10 would not fit."""
    cfg = memory.load_config("Qwen/Qwen3-14B")
    answer = memory.seq_len_answer(cfg, 48 * GB, 8)
    assert (answer["exact"], answer["rounded_down"], answer["rounded_nearest"]) == (14086, 14080, 14090)
    assert answer["nearest_fits"] is False
    assert memory.memory_breakdown(cfg, 48 * GB, 8, answer["rounded_down"])["headroom"] >= 0
    exact_fit = memory.seq_len_answer(cfg, memory.weight_bytes(cfg) + memory.kv_cache_bytes(cfg, 100, 8), 8)
    assert exact_fit["exact"] == 100 and exact_fit["nearest_fits"] is True


def test_l40s_readings_are_in_bytes_and_sourced():
    readings = {label: (b, source) for label, b, source in memory.L40S_MEMORY_READINGS}
    assert memory.L40S_MEMORY_READINGS[0][1] == 48 * GB  # the answer's reading comes first
    smi = next(b for label, (b, _) in readings.items() if "nvidia-smi total" in label)
    assert smi == 46068 * 2**20 and 45 * GiB - GiB // 50 < smi < 45 * GiB  # 46,068 MiB: just under 45 GiB, ~48.3 GB
    assert all(len(source) > 10 for b, source in readings.values())
    cfg = memory.load_config("Qwen/Qwen3-14B")
    answers = [memory.seq_len_answer(cfg, b, 8)["rounded_down"] for _, b, _ in memory.L40S_MEMORY_READINGS]
    assert answers[0] == min(answers)  # the datasheet reading is the most conservative one


def test_forward_fit_row_rounds_the_billions_down():
    row = memory.forward_fit_row("answer", "80 GB", 80 * memory.GB, 0.0, bytes_per_param=2, overhead_bytes=0)
    assert row["max parameters"] == 40 * 10**9 and row["billions (rounded down)"] == 40
    row = memory.forward_fit_row("x", "80 GB", 80 * memory.GB, 0.1, bytes_per_param=2, overhead_bytes=2 * memory.GB)
    assert row["max parameters"] == int(78 * memory.GB // 2.2) and row["billions (rounded down)"] == 35
    assert (row["role"], row["GPU memory"], row["f"]) == ("x", "80 GB", 0.1)


def test_memory_breakdown_figure_marks_a_model_that_does_not_fit():
    matplotlib.use("Agg")
    fig = plotting.memory_breakdown_figure("Qwen/Qwen3-14B", "L40S (48 GB)", 8, 14000)
    labels = fig.axes[0].get_legend_handles_labels()[1]
    parts = memory.memory_breakdown(memory.load_config("Qwen/Qwen3-14B"), 48 * memory.GB, 8, 14000)
    assert labels[0] == f"weights: {parts['weights'] / memory.GB:.1f} GB"
    assert labels[-1].startswith("headroom" if parts["headroom"] >= 0 else "OVER by")
    plt.close(fig)


def test_training_state_bytes_per_parameter():
    # mixed-precision Adam: bf16 weights and gradients, fp32 master copy and two fp32 moments (ZeRO's 16 bytes)
    state = memory.training_state_bytes()
    assert sum(state.values()) == 16 and state["weights (bf16)"] == 2
    assert sum(b for k, b in state.items() if k.startswith(("Adam", "fp32 master"))) == 12  # 6x the bf16 weights
    fp32 = memory.training_state_bytes(fp32_gradients=True)
    assert sum(fp32.values()) == 18 and "gradients (bf16)" not in fp32 and fp32["gradients (fp32)"] == 4


def test_cards_expose_more_than_their_datasheet_gigabytes():
    assert all(c.total_bytes > c.datasheet_gb * GB and len(c.source) > 10 for c in memory.NVIDIA_SMI_TOTALS)
    assert [c.card for c in memory.cards_sold_as(80)] == ["H100 80GB", "A100 80GB"]  # smallest total first
    assert memory.exposed_memory(80).total_bytes == 81559 * 2**20  # the conservative "80 GB card"
    assert memory.exposed_memory(80).total_bytes < 80 * GiB == memory.cards_sold_as(80)[1].total_bytes
    assert memory.exposed_memory(141).card == "H200"  # the GPU profile's card (its notebook 02 asserts >= 141e9 B)
    for size in (24, 141.5):  # no total listed: the datasheet's bytes stand in, labelled so, never fewer bytes
        unlisted = memory.exposed_memory(size)
        assert "no nvidia-smi total listed" in unlisted.card
        assert 0 <= unlisted.total_bytes - size * GB < memory.MiB
    smi = dict((label, b) for label, b, _ in memory.L40S_MEMORY_READINGS)["nvidia-smi total: 46,068 MiB"]
    assert smi == memory.exposed_memory(48).total_bytes  # one figure for the L40S, not two


def test_decode_bytes_leave_out_an_untied_input_embedding():
    # Qwen3-8B unties its input embedding (0.62B parameters): a decode step reads one row of it, not the matrix
    target = memory.load_config("Qwen/Qwen3-8B")
    embedding = target.vocab_size * target.hidden_size
    assert memory.decode_param_count(target) == memory.param_count(target) - embedding
    assert round(memory.decode_param_count(target) / 1e9, 2) == 7.57
    assert memory.decode_weight_bytes(target) == 2 * memory.decode_param_count(target)
    # tied drafts read the shared matrix once, as the LM head: every parameter counts once
    for draft_id, ratio in (("Qwen/Qwen3-0.6B", 0.079), ("Qwen/Qwen3-1.7B", 0.227)):
        draft = memory.load_config(draft_id)
        assert draft.tie_word_embeddings
        assert memory.decode_weight_bytes(draft, 4) == memory.weight_bytes(draft, 4)
        assert round(memory.decode_weight_bytes(draft) / memory.decode_weight_bytes(target), 3) == ratio


@pytest.mark.parametrize("tie", [False, True])
def test_decode_bytes_match_the_bytes_of_a_built_model(tie):
    from tests.tiny_models import tiny_qwen3
    from helpers.experiments.gpu_costs import decode_weight_bytes as model_decode_bytes

    model = tiny_qwen3(0, tie=tie)
    element = next(model.parameters()).element_size()
    assert memory.decode_weight_bytes(model.config, element) == model_decode_bytes(model)
