"""Notebook 04's explorer: what the KV cache costs in memory and saves in time, at a sequence length and batch.

Memory is the formula of notebook 01 (:func:`helpers.memory.kv_cache_bytes`), for the small model measured here and,
for a CPU analog, for the full-size model it scales down. Time is measured live on the minimal decoder
(:func:`helpers.kv_cache.sweep.step_costs`): one decode step at position S for a batch of B rows, with the cache (one
token against S cached ones) and without (a forward over all S + 1 tokens). Each setting is measured once per session
(a few repeats, median) and remembered, so going back to a setting is instant and the table grows as you explore.
"""
from __future__ import annotations

import functools
import html

import torch

from helpers import memory
from helpers.explorers.controls import on_press

MODELS = {
    "cpu-pair/target": "cpu-pair/target (trained, 16 layers, 1 KV head of 64)",
    "cpu/Qwen3-0.6B": "cpu/Qwen3-0.6B (analog, random weights)",
    "cpu/Qwen3-8B": "cpu/Qwen3-8B (analog, random weights)",
}
# the step without a cache grows as S^2 per row: these limits keep one measurement within about ten seconds on
# a 2-core CPU (at S=512, B=4 a forward without the cache takes 1-2 s; warm-up and 3 repeats each)
SEQ_LENS = (16, 32, 64, 128, 256, 512)
BATCHES = (1, 2, 4)


def full_size_name(name: str) -> str | None:
    """The handout model a CPU analog scales down (``cpu/Qwen3-8B`` -> ``Qwen/Qwen3-8B``), else None."""
    from helpers.models import ANALOGS
    return ANALOGS.get(name)


def kv_cache_sizes(name: str, seq_len: int, batch_size: int, bytes_per_elem: int = 4) -> dict:
    """KV-cache bytes of ``name`` for ``batch_size`` sequences of ``seq_len`` tokens (``bytes_per_elem``: 4 for the
    float32 measured here), per token, and for an analog the full-size model's in bf16 (``full_bytes``)."""
    from helpers.models import model_config

    config = model_config(name)
    out = {"model": name, "seq_len": seq_len, "batch": batch_size,
           "bytes": memory.kv_cache_bytes(config, seq_len, batch_size, bytes_per_elem),
           "bytes_per_token": memory.kv_cache_bytes_per_token(config, bytes_per_elem),
           "layers": config.num_hidden_layers, "kv_heads": config.num_key_value_heads,
           "head_dim": getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads}
    full = full_size_name(name)
    if full is not None:
        out["full_model"] = full
        out["full_bytes"] = memory.kv_cache_bytes(memory.load_config(full), seq_len, batch_size, 2)
    return out


@functools.lru_cache(maxsize=4)
def _minimal(name: str):
    from helpers.kv_cache import from_hf
    from helpers.models import load_model

    from helpers.models.registry import quiet_loading

    with quiet_loading():
        model, _ = load_model(name, device="cpu", dtype=torch.float32)
    return from_hf(model)


@functools.lru_cache(maxsize=None)
def measure_decode_step(name: str, seq_len: int, batch_size: int, repeats: int = 3) -> dict:
    """Median seconds of one decode step at position ``seq_len`` for ``batch_size`` rows on the minimal decoder of
    ``name``: ``cached_s`` (one token on a cache of ``seq_len``) and ``uncached_s`` (a forward over ``seq_len`` + 1
    tokens). Measured once per (model, length, batch, repeats) and remembered."""
    from helpers.kv_cache.sweep import step_costs

    model = _minimal(name)
    if seq_len < 1 or seq_len + 1 > model.config.max_seq_len:
        raise ValueError(f"seq_len must lie in [1, {model.config.max_seq_len - 1}], got {seq_len}")
    generator = torch.Generator().manual_seed(seq_len)
    sequence = torch.randint(0, model.config.vocab_size, (batch_size, seq_len + 1), generator=generator)
    steps = step_costs(model, sequence, [seq_len], [seq_len], repeats=repeats, device=torch.device("cpu"))
    return {"cached_s": steps["cached_s"][0], "uncached_s": steps["uncached_s"][0]}


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024


_CELL = "padding: 1px 10px; text-align: right; border-bottom: 1px solid #eee"
_CSS = f"<style>.explorer-04 td, .explorer-04 th {{{_CELL}}}</style>"
_HEADER = ("model", "S", "B", "KV cache", "step with cache (ms)", "step without (ms)", "without / with")
_NOTE = ("one decode step at position S (median of 3 runs after a warm-up, this CPU, fp32); highlighted: the current "
         "setting. Without the cache a step recomputes all S tokens, so its cost grows with S; with it, the step reads "
         "S cached keys and values.")


def _row(cells, tag: str = "td", highlight: bool = False) -> str:
    """One table row; the first cell (the model) left-aligned."""
    first, *rest = cells
    style = ' style="background:#fff3c4"' if highlight else ""
    return (f"<tr{style}><{tag} style='text-align:left'>{first}</{tag}>"
            + "".join(f"<{tag}>{cell}</{tag}>" for cell in rest) + "</tr>")


def explorer_html(name: str, seq_len: int, batch_size: int, measured: dict) -> str:
    """The explorer's page: this setting's memory and step times, and every setting measured so far."""
    sizes = kv_cache_sizes(name, seq_len, batch_size)
    formula = (f"2 × {sizes['layers']} layers × {sizes['kv_heads']} KV heads × {sizes['head_dim']} dims × 4 B = "
               f"{sizes['bytes_per_token']:,} B per token per sequence")
    lines = [f"<b>KV cache</b> of {html.escape(name)} for B={batch_size} × S={seq_len}: "
             f"<b>{_size(sizes['bytes'])}</b> (fp32; {formula})"]
    if "full_model" in sizes:
        lines.append(f"the full-size {sizes['full_model']} in bf16 at the same B and S: "
                     f"<b>{_size(sizes['full_bytes'])}</b> (notebook 01's formula)")
    rows = [_row((html.escape(model), s, b, _size(kv_cache_sizes(model, s, b)["bytes"]),
                  f"{times['cached_s'] * 1e3:.2f}", f"{times['uncached_s'] * 1e3:.2f}",
                  f"<b>{times['uncached_s'] / times['cached_s']:.1f}x</b>"), highlight=(model, s, b) == (name, seq_len,
                                                                                                 batch_size))
            for (model, s, b), times in sorted(measured.items())]
    table = "<table>" + _row(_HEADER, "th") + "".join(rows) + "</table>"
    return (f'<div class="wb-explorer explorer-04" style="font-size: 13px">{_CSS}' + "<br>".join(lines)
            + f"<div style='margin-top: 6px'>{table}</div>"
            + f"<div style='font-size: 11px; color: #666'>{_NOTE}</div></div>")


def kv_cache_explorer(model: str = "cpu-pair/target", seq_len: int = 256, batch_size: int = 1, *, run: bool = True):
    """Notebook 04's explorer: model, sequence length S and batch B → KV-cache bytes and a measured decode step with
    and without the cache (press *Measure*: a new setting takes up to a few seconds; measured ones are remembered)."""
    import ipywidgets as widgets

    style = {"description_width": "initial"}
    model_box = widgets.Dropdown(options=[(label, name) for name, label in MODELS.items()], value=model,
                                 description="model", style=style, layout=widgets.Layout(width="38em", min_width="38em"))
    seq_box = widgets.SelectionSlider(options=list(SEQ_LENS), value=seq_len, description="sequence length S",
                                      style=style, continuous_update=False,
                                      layout=widgets.Layout(width="420px", min_width="420px"))
    batch_box = widgets.SelectionSlider(options=list(BATCHES), value=batch_size, description="batch B", style=style,
                                        continuous_update=False, layout=widgets.Layout(width="360px", min_width="360px"))
    button = widgets.Button(description="Measure", button_style="primary", icon="play")
    status = widgets.Label("")
    output = widgets.HTML("")
    measured: dict = {}

    def measure():
        key = (model_box.value, seq_box.value, batch_box.value)
        measured[key] = measure_decode_step(*key)
        return explorer_html(*key, measured), ""

    press = on_press(button, status, output, measure, busy="measuring… (a long step without the cache takes seconds)")
    if run:
        press()
    return widgets.VBox([widgets.HBox([model_box, seq_box, batch_box], layout=widgets.Layout(flex_flow="row wrap")),
                         widgets.HBox([button, status]), output])
