"""helpers.experiments.nb09.step_profile: where a decode step's time goes (the window's part ``profile``), and the eq5
part measuring again the rows of an older model file."""
import json

import pandas as pd
import pytest
import torch

from helpers.experiments import gpu_costs
from helpers.experiments.nb09 import goals, step_profile
from helpers.models.decoder import DecoderConfig, layer_kernels

QWEN3_KERNELS = layer_kernels(DecoderConfig(vocab_size=8, hidden_size=8, intermediate_size=8, num_layers=1, num_heads=1,
                                            num_kv_heads=1, head_dim=8, max_seq_len=8))  # the Qwen3 family's count


@pytest.mark.parametrize("name, family", [
    ("void gemv2T_kernel_val<int, int, __nv_bfloat16, 128, 16, 4, 4>", "matmul"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64", "matmul"),
    ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80", "attention"),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128>>", "attention"),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16>", "norm"),
    ("Memcpy HtoD (Pinned -> Device)", "copy"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>", "other"),
    ("aten::linear", "matmul"), ("aten::scaled_dot_product_attention", "attention"), ("aten::cat", "copy"),
    ("nvjet_sm90_tst_128x8_64x12_4x1_v_bz_TNT", "matmul"),  # cuBLAS on Hopper: none of the older words
])
def test_kernel_families(name, family):
    assert step_profile.family(name) == family


def test_kernel_summary_separates_busy_from_idle():
    kernels = [("gemv_a", 0.0, 10.0), ("add", 12.0, 14.0), ("gemv_a", 20.0, 30.0), ("Memcpy HtoD", 30.0, 31.0)]
    summary = step_profile.kernel_summary(list(reversed(kernels)))  # any order
    assert summary["kernels"] == 4
    assert summary["busy_ms"] == pytest.approx(23e-3) and summary["span_ms"] == pytest.approx(31e-3)
    assert summary["idle_share"] == pytest.approx(1 - 23 / 31)
    assert summary["families"] == {"copy": {"count": 1, "ms": pytest.approx(1e-3)},
                                   "matmul": {"count": 2, "ms": pytest.approx(20e-3)},
                                   "other": {"count": 1, "ms": pytest.approx(2e-3)}}
    assert summary["top_kernels"][0] == {"name": "gemv_a", "count": 2, "ms": pytest.approx(20e-3)}
    with pytest.raises(ValueError, match="no kernels"):
        step_profile.kernel_summary([])


def test_measure_step_on_a_cpu_counts_the_ops_a_gpu_would_launch():
    from tiny_models import tiny_qwen3

    model = tiny_qwen3(0)
    context = torch.randint(0, model.config.vocab_size, (1, 12), generator=torch.Generator().manual_seed(0))
    row = step_profile.measure_step(model, context, 3, repeats=2)
    layers = model.config.num_hidden_layers
    assert row["kernels_from"] == "cpu ops" and row["num_layers"] == layers and row["layer_kernels"] == QWEN3_KERNELS
    assert row["kernels"] >= QWEN3_KERNELS * layers  # every layer's kernels, plus the embedding, the norm, the head
    assert row["families"]["matmul"]["count"] >= 4 * layers and row["busy_ms"] > 0 and row["wall_ms"] > 0
    assert row["graph_replays"] == 0  # a CPU captures nothing


def test_measure_step_profiles_an_eager_step_where_replays_are_not_traced(monkeypatch):
    """The fallback (a profiler that does not trace graph replays) builds its eager cache only then, and names it."""
    from tiny_models import tiny_qwen3

    real, calls = step_profile.profiled_kernels, []

    def first_call_sees_nothing(run, device):
        calls.append(run)
        return [] if len(calls) == 1 else real(run, device)

    monkeypatch.setattr(step_profile, "profiled_kernels", first_call_sees_nothing)
    model = tiny_qwen3(0)
    context = torch.randint(0, model.config.vocab_size, (1, 12), generator=torch.Generator().manual_seed(0))
    row = step_profile.measure_step(model, context, 3, repeats=2)
    assert row["kernels_from"] == "eager" and row["kernels"] >= QWEN3_KERNELS * model.config.num_hidden_layers
    assert len(calls) == 2


def _profile_row(**extra):
    return {"status": "ok", "config_key": "k", "model": "Qwen/Qwen3-8B", "width": 1, "kernels": 940,
            "num_layers": 36, "wall_ms": 8.0, "busy_ms": 6.0, "span_ms": 7.5, "idle_share": 0.2,
            "families": {"matmul": {"count": 252, "ms": 5.0}}, "kernels_from": "graphs",
            "decode_bytes": 15.1e9, "device_name": "NVIDIA H100 80GB HBM3", **extra}


def test_the_goal_lines_say_where_the_8b_step_goes(tmp_path):
    (tmp_path / f"{step_profile.STEP_PROFILE}.jsonl").write_text(json.dumps(_profile_row()) + "\n")
    lines = goals.goal_lines(tmp_path)
    assert lines[0].startswith("no goal rows yet")
    assert lines[1] == ("diagnostic Qwen/Qwen3-8B (kernels from graphs): wall ms 8; kernels 940; per layer 26.1; "
                        "busy ms 6; matmul ms 5; idle 0.2; HBM floor ms 4.51; matmul bandwidth 0.901; over floor: "
                        "matmul excess ms 0.493; over floor: other kernels ms 1; over floor: gaps ms 2")  # 15.1e9 / 3.35e12


def test_rows_of_the_first_rule_get_their_top_nvjet_kernels_back_as_matrix_products():
    """Regression: the H200's first rows put 2.3 ms of nvjet projections under "other", so the 8B step's matrix
    products (2.39 ms) read below its HBM floor (3.15 ms), which no kernel reading every weight can do."""
    nvjet = {"name": "nvjet_sm90_tst_128x8_64x12_4x1_v_bz_TNT", "count": 72, "ms": 2.0}
    split_k = {"name": "nvjet_sm90_tst_64x8_64x16_2x1_v_bz_splitK_TNT", "count": 72, "ms": 0.8}  # matmul already
    old = _profile_row(families={"matmul": {"count": 72, "ms": 0.8}, "other": {"count": 100, "ms": 2.5}},
                       top_kernels=[nvjet, split_k])
    assert step_profile.row_families(old) == {"matmul": {"count": 144, "ms": pytest.approx(2.8)},
                                              "other": {"count": 28, "ms": pytest.approx(0.5)}}
    current = {**old, "families_rule": step_profile.FAMILIES_RULE}
    assert step_profile.row_families(current) == old["families"]  # classified right when measured
    assert step_profile.step_table([old])["matmul ms"][0] == pytest.approx(2.8)


def test_the_report_splits_the_step_above_its_floor_and_finds_the_width_jump():
    rows = [_profile_row(), _profile_row(model="cpu-pair/target", decode_bytes=1e6, width=6, wall_ms=3.0,
                                         busy_ms=2.0, families={"matmul": {"count": 80, "ms": 0.7}},
                                         top_kernels=[{"name": "cutlass_simt_sgemm", "count": 80, "ms": 0.7}]),
            _profile_row(model="cpu-pair/target", decode_bytes=1e6, width=8, wall_ms=6.0, busy_ms=5.0,
                         families={"matmul": {"count": 48, "ms": 3.5}},
                         top_kernels=[{"name": "sm80_xmma_gemm_f32", "count": 48, "ms": 3.5}])]
    numbers = step_profile.report_numbers(rows)
    split = step_profile.gap_split(step_profile.step_table(rows[:1]).iloc[0])
    assert sum(split[k] for k in ("matmul_excess", "other_kernels", "gaps")) == pytest.approx(8.0 - 15.1e9 / 3.35e9)
    assert numbers["gpu_step_model"] == "Qwen3-8B" and numbers["gpu_step_largest"] == "the gaps"  # 2.0 ms of 3.49
    assert numbers["gpu_jump_model"] == "cpu-pair/target" and numbers["gpu_jump_ratio"] == pytest.approx(5.0)
    assert (numbers["gpu_jump_from_width"], numbers["gpu_jump_to_width"], numbers["gpu_jump_new_kernels"]) == (6, 8, 1)
    assert numbers["gpu_step_corrected"] == 1  # rows without a rule are of rule 1


class _Store:
    def __init__(self, rows):
        self._rows = rows

    def done(self):
        return self._rows


def test_rows_of_an_older_model_file_are_outdated():
    """Regression: the H100's eq5 rows came from a layer of 56 kernels; the window skipped them as measured, so the
    26-kernel layer's c and roofline share would never be measured there."""
    from helpers.results import config_key

    configs = {mode: {"kind": "eq5_terms", "target": "Qwen/Qwen3-8B", "decode": mode} for mode in ("eager", "graphs")}
    graphs = config_key(configs["graphs"])
    assert gpu_costs.outdated(_Store({graphs: {"target_step_s": 1.0}}), configs)  # recorded no count: before the count existed
    assert gpu_costs.outdated(_Store({graphs: {"layer_kernels": 56}}), configs)
    assert not gpu_costs.outdated(_Store({graphs: {"layer_kernels": QWEN3_KERNELS}}), configs)
    assert not gpu_costs.outdated(_Store({}), configs)  # nothing measured yet: measured anyway, nothing superseded
    assert not gpu_costs.outdated(_Store({}), {"eager": configs["eager"]})  # a Llama pair: eager only


def test_a_width_jump_shows_end_to_end_only_where_every_draft_drops():
    e2e = pd.DataFrame({"draft": ["a", "a", "b", "b"], "gamma": [5, 7, 5, 7], "speedup": [1.3, 0.8, 1.9, 1.4]})
    assert gpu_costs.jump_drops_all(e2e, 6, 8) is True
    assert gpu_costs.jump_drops_all(e2e.assign(speedup=[1.3, 0.8, 1.9, 2.0]), 6, 8) is False
    assert gpu_costs.jump_drops_all(e2e, 1, 6) is None  # gamma 0 was not run
    assert gpu_costs.jump_drops_all(e2e, None, None) is None and gpu_costs.jump_drops_all(e2e.iloc[:0], 6, 8) is None
