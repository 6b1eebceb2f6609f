"""The model file's decode step stays lean: on a GPU an eager (or graph-replayed) step of a small model is bound by
how many kernels it launches, not by its arithmetic, so the layers use fused q/k/v and gate/up products, fused RMSNorm,
queries and keys normalised and rotated together, a one-roll RoPE and a mask prepared once per forward. These tests
hold the op count per layer of every family, eager and with the inductor-compiled layer, and check that each shortcut
computes exactly what the written-out formula (transformers' rounding order) computes."""
from __future__ import annotations

import pytest
import torch
from torch.profiler import profile

from helpers.experiments.nb09.step_profile import cpu_kernel_ops
from helpers.models.decoder import DecoderConfig, MiniDecoder, RMSNorm, Rotary, apply_rope, layer_kernels
from helpers.models.graphs import GraphedSteps

FAMILIES = {"qwen3": {}, "llama": dict(qk_norm=False, family="llama"),
            "olmo": dict(qk_norm=False, norm="layer", clip_qkv=0.5, family="olmo")}


def _model(layers: int, family: str = "qwen3") -> MiniDecoder:
    torch.manual_seed(0)
    config = DecoderConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=layers, num_heads=4,
                           num_kv_heads=2, head_dim=8, max_seq_len=128, **FAMILIES[family])
    return MiniDecoder(config).eval()


def _kernels(model: MiniDecoder, new_tokens: int) -> int:
    """Kernel-launching ops (top-level aten ops that are not views) of one forward of ``new_tokens`` tokens after
    a 10-token prefix in the cache."""
    cache = model.new_cache(1, 32)
    with torch.inference_mode():
        model(torch.arange(10)[None], cache)
        with profile() as prof:
            model(torch.arange(new_tokens)[None], cache)
    return len(cpu_kernel_ops(prof.events()))


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("new_tokens", [1, 6])
def test_a_decode_or_verify_step_launches_layer_kernels_per_layer(family, new_tokens):
    # Qwen3: 4 projections (q/k/v and gate/up fused), 3 fused norms (input, q and k together, post-attention) and
    # their 3 weight products, joining q_norm's weight with k_norm's, RoPE 4, 2 cache writes, attention, SiLU, the
    # gate product, 2 residual adds. Llama: no q/k norm; OLMo: no norm weights, one clamp.
    per_layer = _kernels(_model(3, family), new_tokens) - _kernels(_model(2, family), new_tokens)
    expected = layer_kernels(_model(1, family).config)
    assert per_layer == expected, (
        f"a {family} layer now runs {per_layer} kernel ops per forward, not layer_kernels() = {expected}: every op is "
        "a kernel launch on a GPU, where a small model's decode step is launch-bound (GPU rows record the count)")


def _compiled_kernels(model: MiniDecoder) -> int:
    """Kernels of one static decode step with the inductor-compiled layer on the CPU: inductor's fused C++ kernels
    (profiled with ``cpp.enable_kernel_profile``) and the library calls it leaves (matrix products, attention)."""
    steps = GraphedSteps(model, 1, 32, compiled=True)
    with torch.inference_mode():
        model(torch.arange(10)[None], steps.cache)
        steps(torch.tensor([[3]]))  # compiles (once for every layer)
        with profile() as prof:
            steps(torch.tensor([[4]]))
    return sum(e.name.startswith("graph_") or e.name in ("aten::mm", "aten::_scaled_dot_product_flash_attention_for_cpu")
               for e in prof.events())


@pytest.mark.slow
@pytest.mark.parametrize("family", ["qwen3", "olmo"])
def test_the_compiled_layer_fuses_the_small_kernels(family):
    """4 matrix products and attention stay library calls; inductor fuses everything else (norms, RoPE, the cache
    writes, SiLU times up, residual adds) into 5 C++ kernels: 10 a layer, against layer_kernels() eager."""
    import torch._inductor.config as inductor_config

    torch.compiler.reset()
    with inductor_config.patch({"cpp.enable_kernel_profile": True}):
        per_layer = _compiled_kernels(_model(3, family)) - _compiled_kernels(_model(2, family))
    torch.compiler.reset()
    assert per_layer <= 10 < layer_kernels(_model(1, family).config), per_layer


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_rounds_like_the_written_out_formula(dtype):
    torch.manual_seed(1)
    norm = RMSNorm(48, 1e-6).to(dtype)
    with torch.no_grad():
        norm.weight.copy_(torch.rand(48) + 0.5)
    x = (torch.randn(5, 7, 48) * 4).to(dtype)
    x32 = x.float()
    written_out = norm.weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)).to(dtype)
    assert torch.equal(norm(x), written_out)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_one_roll_rope_equals_rotate_half(dtype):
    head_dim = 16
    rotary = Rotary(DecoderConfig(vocab_size=8, hidden_size=32, intermediate_size=8, num_layers=1, num_heads=2,
                                  num_kv_heads=1, head_dim=head_dim, max_seq_len=128, rope_theta=10_000.0))
    positions = torch.tensor([0, 3, 17, 90])
    cos, signed_sin = rotary(positions, 91, dtype)
    sin = torch.cat((-signed_sin[:, :head_dim // 2], signed_sin[:, head_dim // 2:]), dim=-1)
    x = torch.randn(2, 3, 4, head_dim).to(dtype)
    first, second = x.chunk(2, dim=-1)
    rotate_half = x * cos + torch.cat((-second, first), dim=-1) * sin
    assert torch.equal(apply_rope(x, cos, signed_sin), rotate_half)
