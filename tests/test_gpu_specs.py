"""The datasheet table and the roofline model built on it."""
import pytest

from helpers.gpu_specs import arithmetic_intensity, forward_flops_bytes, gpu_spec, load_gpu_specs, roofline_seconds
from helpers.memory import load_config, param_count


def test_table_is_complete_and_sourced():
    specs = load_gpu_specs()
    assert {"A100 40GB SXM", "A100 80GB SXM", "H100 SXM", "H100 PCIe", "H200 SXM", "L40S", "RTX A6000",
            "RTX 4090"} <= set(specs["gpu"])
    assert specs["source"].str.len().min() > 10
    assert specs.loc[specs["gpu"] == "H100 SXM", "ridge_flop_per_byte"].item() == pytest.approx(989e12 / 3350e9)


@pytest.mark.parametrize("device_name, row", [("NVIDIA H100 80GB HBM3", "H100 SXM"), ("NVIDIA H100 PCIe", "H100 PCIe"),
                                              ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM"),
                                              ("NVIDIA A100-SXM4-40GB", "A100 40GB SXM"), ("NVIDIA L40S", "L40S"),
                                              ("NVIDIA GeForce RTX 4090", "RTX 4090"), ("NVIDIA H200", "H200 SXM")])
def test_device_names_match_their_datasheet_row(device_name, row):
    assert gpu_spec(device_name)["gpu"] == row


def test_unknown_gpu_raises_with_the_fix():
    with pytest.raises(KeyError, match="gpu_specs.csv"):
        gpu_spec("Imaginary GPU 9000")


def test_decode_intensity_is_about_tokens_per_forward():
    config = load_config("Qwen/Qwen3-8B")
    assert arithmetic_intensity(config, 1, 1, 256) == pytest.approx(1.0, abs=0.05)  # 2P FLOPs over 2P bytes
    assert arithmetic_intensity(config, 1, 8, 256) == pytest.approx(8.0, rel=0.05)
    flops, moved = forward_flops_bytes(config, 1, 1, 0)
    assert moved >= 2 * param_count(config) and flops >= 2 * param_count(config)


def test_roofline_time_is_the_larger_bound_plus_overhead():
    config, gpu = load_config("Qwen/Qwen3-8B"), gpu_spec("H100 SXM")
    memory_bound = 2 * param_count(config) / 3350e9
    assert roofline_seconds(config, gpu, 1, 1, 0) == pytest.approx(memory_bound, rel=0.01)
    assert roofline_seconds(config, gpu, 1, 1, 0, overhead_s=0.001) == pytest.approx(memory_bound + 0.001, rel=0.01)
    compute_bound = 2 * param_count(config) * 4096 / 989e12  # 4096 tokens: far past the ridge point
    # matmuls alone give compute_bound; attention over the 4096 new tokens adds less than a fifth
    assert compute_bound < roofline_seconds(config, gpu, 1, 4096, 0) < 1.2 * compute_bound
