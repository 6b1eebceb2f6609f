"""The model file's decode step, fused against separate projections: ``python -m helpers.bench model``.

The CPU pair's models decode greedily on the minimal runtime in two builds over the SAME weights: as shipped (q/k/v
one matrix product, gate/up one) and split back into the products the layer ran before fusion. Interleaved rounds
(prefill left out) at every thread count asked for: per build the median ms per token, its min-max, and the median
of the paired ratios separate / fused (above 1: fusion is faster). ``--compiled`` adds the compiled fused build.
"""
from __future__ import annotations

import copy
import statistics

import torch
import torch.nn.functional as F
from torch import nn

from helpers.models.decoder import Attention, MLP, MiniDecoder


class SeparateProjections(nn.Module):
    """q/k/v (or any fused product) as separate matrix products over row blocks of the fused weight, joined after."""

    def __init__(self, fused: nn.Linear, sizes: list[int]):
        super().__init__()
        self.weights = fused.weight.detach().split(sizes)
        self.biases = fused.bias.detach().split(sizes) if fused.bias is not None else [None] * len(sizes)

    def forward(self, x):
        return torch.cat([F.linear(x, w, b) for w, b in zip(self.weights, self.biases)], dim=-1)


class SeparateMLP(nn.Module):
    """The SwiGLU MLP before fusion: gate and up as two matrix products (no join)."""

    def __init__(self, mlp: MLP):
        super().__init__()
        self.gate, self.up = mlp.gate_up_proj.weight.detach().chunk(2)
        self.down_proj = mlp.down_proj

    def forward(self, x):
        return self.down_proj(F.silu(F.linear(x, self.gate)) * F.linear(x, self.up))


def separate_projections(model: MiniDecoder) -> MiniDecoder:
    """A copy of ``model`` (sharing its weights) whose layers run the separate projections."""
    split = copy.copy(model)  # a shallow copy: the same parameters
    split.layers = nn.ModuleList(copy.copy(layer) for layer in model.layers)
    for layer in split.layers:
        attn = copy.copy(layer.self_attn)
        q, kv = attn.num_heads * attn.head_dim, attn.num_kv_heads * attn.head_dim
        # q and k as one block, v apart: what the unfused layer joined (queries and keys, normalised together)
        attn.qkv_proj = SeparateProjections(layer.self_attn.qkv_proj, [q, kv, kv])
        layer.self_attn, layer.mlp = attn, SeparateMLP(layer.mlp)
        assert isinstance(attn, Attention)
    return split


def add_arguments(parser) -> None:
    parser.add_argument("--models", nargs="+", default=["cpu-pair/target", "cpu-pair/draft-2l"],
                        help="models to time (any name helpers.models knows)")
    parser.add_argument("--prompt-tokens", type=int, default=200, help="tokens cached before the timed steps")
    parser.add_argument("--new-tokens", type=int, default=100, help="decode steps per timed round")
    parser.add_argument("--repeats", type=int, default=7, help="interleaved rounds per build")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 0],
                        help="torch CPU threads, one run each (0: torch's default)")
    parser.add_argument("--compiled", action="store_true", help="also the fused build with the compiled layer")


def _decode(model, prompt: torch.Tensor, new_tokens: int, compile) -> float:
    """Seconds of ``new_tokens`` greedy decode steps after ``prompt`` (the prefill not counted)."""
    from helpers.specdec import autoregressive_generate

    result = autoregressive_generate(model, prompt, new_tokens, eos_token_id=-1, runtime="minimal", compile=compile)
    return result.stats.time_total_s - result.stats.time_prefill_s


def run(args) -> dict:
    from helpers.models import load_model
    from helpers.models.runtime import minimal_view
    from helpers.timing import measure_interleaved

    default_threads = torch.get_num_threads()
    figures = {"prompt_tokens": args.prompt_tokens, "new_tokens": args.new_tokens, "repeats": args.repeats,
               "runs": []}
    for threads in args.threads:
        torch.set_num_threads(threads or default_threads)
        for name in args.models:
            model = minimal_view(load_model(name)[0])
            prompt = torch.randint(0, model.config.vocab_size, (1, args.prompt_tokens),
                                   generator=torch.Generator().manual_seed(0))
            builds = {"fused": (model, False), "separate": (separate_projections(model), False)}
            if args.compiled:
                builds["fused+compiled"] = (model, "compiled")
            with torch.inference_mode():
                timings = measure_interleaved(
                    {key: (lambda m=m, c=c: _decode(m, prompt, args.new_tokens, c)) for key, (m, c) in builds.items()},
                    repeats=args.repeats, warmup=1, own_clock=lambda seconds: seconds)
            ms = {key: [s / args.new_tokens * 1e3 for s in t.samples] for key, t in timings.items()}
            run = {"threads": torch.get_num_threads(), "model": name,
                   **{f"{key}_ms": statistics.median(v) for key, v in ms.items()},
                   **{f"{key}_range_ms": [min(v), max(v)] for key, v in ms.items()},
                   "separate_over_fused": statistics.median(s / f for s, f in zip(ms["separate"], ms["fused"]))}
            figures["runs"].append(run)
            print({key: round(v, 3) if isinstance(v, float) else v for key, v in run.items()}, flush=True)  # ms/token
    torch.set_num_threads(default_threads)
    return figures
