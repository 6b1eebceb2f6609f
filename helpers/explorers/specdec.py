"""Explorers of speculative decoding: notebook 07 (a live generation, token by token) and notebook 09 (Eq. 4/5).

Notebook 07's explorer runs :func:`helpers.specdec.speculative_generate` on the CPU pair and colours every new token
by where it came from. A round with γ_r drafts of which ``a`` were accepted emits the ``a`` drafts and then one
token of the target: a *correction* when a draft was rejected (a < γ_r), a *bonus* when every draft was accepted
(the target's prediction after the last draft). :func:`token_provenance` rebuilds that from the per-round counters
the generator records (``stats.accepted_per_round``, ``stats.gamma_per_round``).

Notebook 09's explorer draws Eq. 5's predicted speedup against γ (:func:`speedup_curve`) for α, c = T_D/T_T and a
verification cost T_V(γ)/T_T that grows linearly in γ, with the workbook's measured speedups on top.
"""
from __future__ import annotations

import functools
import html
import time
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from helpers.explorers.controls import on_press
from helpers.models.registry import DRAFT_FAMILY
from helpers.stats import REPETITIVE_SHARE, line_fit, repeated_ngram_share
from helpers.specdec.analysis import estimate_alpha, expected_tokens_per_round, predicted_speedup

ACCEPTED, CORRECTED, BONUS = "accepted", "corrected", "bonus"
# background, text colour, border: three hues that stay apart for the common colour-vision deficiencies, and each
# kind also differs in its border so that the legend reads without colour
STYLES = {
    ACCEPTED: ("#cdeccd", "#0b3d0b", "1px solid #cdeccd"),
    CORRECTED: ("#ffd9b3", "#5c2a00", "2px solid #d9730d"),
    BONUS: ("#cfe0ff", "#0a2a66", "2px dotted #2f5fb3"),
}
DESCRIPTIONS = {
    ACCEPTED: "draft token accepted by the target",
    CORRECTED: "target's token after a rejected draft (correction)",
    BONUS: "target's bonus token (every draft of the round accepted)",
}
LEGEND = {ACCEPTED: "draft, accepted", CORRECTED: "target, after a rejection", BONUS: "target, all drafts accepted"}
DRAFTS = {"draft": "cpu-pair/draft (1 layer)", "draft-2l": "cpu-pair/draft-2l (2 layers)",
          **{name: f"cpu-pair/{name} (notebook 12's family)" for name in DRAFT_FAMILY}}


# ---------------------------------------------------------------------------------------------------- pure parts


def token_provenance(accepted_per_round: Sequence[int], gamma_per_round: Sequence[int],
                     n_tokens: int | None = None) -> list[tuple[int, str]]:
    """``(round, kind)`` for every emitted token, rounds numbered from 1; kind is ACCEPTED, CORRECTED or BONUS.

    Round r emits ``accepted_per_round[r]`` accepted drafts, then one target token: CORRECTED if fewer than
    ``gamma_per_round[r]`` drafts were accepted, else BONUS. ``n_tokens`` cuts the list where the generation stopped
    (an EOS inside the last round); it may not exceed what the rounds emitted.
    """
    if len(accepted_per_round) != len(gamma_per_round):
        raise ValueError(f"one accepted count per round: got {len(accepted_per_round)} counts for "
                         f"{len(gamma_per_round)} rounds")
    out: list[tuple[int, str]] = []
    for number, (accepted, gamma) in enumerate(zip(accepted_per_round, gamma_per_round), 1):
        if not 0 <= accepted <= gamma:
            raise ValueError(f"round {number}: {accepted} accepted drafts is outside [0, gamma={gamma}]")
        out += [(number, ACCEPTED)] * accepted
        out.append((number, CORRECTED if accepted < gamma else BONUS))
    if n_tokens is not None:
        if n_tokens > len(out):
            raise ValueError(f"the rounds emitted {len(out)} tokens, fewer than the {n_tokens} asked for")
        out = out[:n_tokens]
    return out


def token_pieces(tokenizer, token_ids: Sequence[int], prefix_ids: Sequence[int] = ()) -> list[str]:
    """The text each token adds, decoded in context: ``decode(prefix + ids[:i+1]) - decode(prefix + ids[:i])``.

    Decoding a byte-level BPE token alone can split a multi-byte character; decoding in context cannot, and the
    pieces join to exactly the decoded continuation. ``prefix_ids`` (the prompt's last tokens) keeps a leading space
    or a merge with the prompt where it belongs. A token that ends inside a multi-byte character gets an empty
    piece; the token that completes the character carries it."""
    ids = [int(i) for i in prefix_ids]
    previous = tokenizer.decode(ids)
    pieces = []
    for index, token in enumerate(token_ids):
        ids.append(int(token))
        text = tokenizer.decode(ids)
        if text.endswith("\ufffd") and index < len(token_ids) - 1:
            pieces.append("")  # the token ends inside a multi-byte character: the next token completes it
            continue
        pieces.append(text[len(previous):] if text.startswith(previous) else tokenizer.decode([int(token)]))
        previous = text
    return pieces


def _visible(text: str) -> str:
    """HTML for a piece of code: escaped, with newlines and tabs drawn (↵, ⇥) and kept as line breaks."""
    return html.escape(text).replace("\t", "⇥   ").replace("\n", '<span class="ws">↵</span>\n')


def legend_html() -> str:
    return "&nbsp;&nbsp; ".join(f'<span class="tok {kind}" title="{DESCRIPTIONS[kind]}">&nbsp;{kind}&nbsp;</span> '
                                f'{LEGEND[kind]}' for kind in (ACCEPTED, CORRECTED, BONUS))


def tokens_html(pieces: Sequence[str], provenance: Sequence[tuple[int, str]], prompt: str = "",
                prompt_lines: int = 3) -> str:
    """The continuation as HTML: every token a coloured span (title: its round and kind) after the prompt's last
    ``prompt_lines`` lines in grey. Whitespace stays where it is (a monospaced, pre-wrapped block); newlines show as
    ↵, tabs as ⇥."""
    if len(pieces) != len(provenance):
        raise ValueError(f"{len(pieces)} token pieces but {len(provenance)} provenance entries")
    lines = prompt.split("\n")
    tail = "\n".join(lines[-prompt_lines - 1:]) if prompt.endswith("\n") else "\n".join(lines[-prompt_lines:])
    tail = tail.lstrip("\n")
    spans = [f'<span class="prompt" title="prompt">{"…" if len(prompt) > len(tail) else ""}{_visible(tail)}</span>']
    for piece, (number, kind) in zip(pieces, provenance):
        spans.append(f'<span class="tok {kind}" title="round {number}: {DESCRIPTIONS[kind]}">{_visible(piece)}</span>')
    return f'<div class="code">{"".join(spans)}</div>'


_STYLE = {  # selector (inside .wb-explorer) -> its declarations
    ".code": {"font-family": "var(--jp-code-font-family, monospace)", "font-size": "13px", "line-height": "1.55",
              "white-space": "pre-wrap", "background": "#fafafa", "border": "1px solid #ddd", "padding": "8px 10px",
              "max-height": "20em", "overflow-y": "auto", "color": "#222"},
    ".prompt": {"color": "#888"},
    ".ws": {"color": "#999", "font-size": "11px"},
    ".tok": {"box-shadow": "inset -1px 0 0 #ffffff"},  # token boundaries, without moving the code
    ".legend .tok": {"border-radius": "3px", "box-shadow": "none"},
    ".summary": {"margin": "4px 0 6px 0", "font-size": "13px"},
    **{f".tok.{kind}": {"background": bg, "color": fg, "border-bottom": border}
       for kind, (bg, fg, border) in STYLES.items()},
    "table": {"border-collapse": "collapse", "font-size": "12px", "margin-top": "4px"},
    "td, .wb-explorer th": {"padding": "1px 8px", "text-align": "right", "border-bottom": "1px solid #eee"},
    ".rounds": {"max-height": "12em", "overflow-y": "auto", "display": "inline-block", "vertical-align": "top",
                "margin-right": "2em"},
    ".numbers": {"display": "inline-block", "vertical-align": "top"},
    ".error": {"color": "#a00", "font-weight": "bold"},
}
CSS = "<style>\n" + "".join(f".wb-explorer {selector} {{{'; '.join(f'{k}: {v}' for k, v in rules.items())}}}\n"
                            for selector, rules in _STYLE.items()) + "</style>"


def _tag(name: str, content, **attributes) -> str:
    """``<name ...>content</name>``; the attribute ``cls`` is written ``class``, ``data_run`` ``data-run``."""
    written = "".join(f' {k.replace("cls", "class").replace("_", "-")}="{value}"' for k, value in attributes.items())
    return f"<{name}{written}>{content}</{name}>"


def _page(counter: int, body: str) -> str:
    """The explorer's output: its style and ``body`` in a div that names the run (the browser test waits for it)."""
    return _tag("div", CSS + body, cls="wb-explorer explorer-07", data_run=counter)


def rounds_table(accepted_per_round: Sequence[int], gamma_per_round: Sequence[int]) -> pd.DataFrame:
    """One row per round: drafts γ_r, accepted, the target's token (correction or bonus) and tokens emitted."""
    return pd.DataFrame({"round": range(1, len(gamma_per_round) + 1), "drafts": list(gamma_per_round),
                         "accepted": list(accepted_per_round),
                         "target token": [CORRECTED if a < g else BONUS for a, g in zip(accepted_per_round,
                                                                                         gamma_per_round)],
                         "tokens": [a + 1 for a in accepted_per_round]})


def _rounds_html(stats) -> str:
    """The rounds as an HTML table: γ_r, accepted, the target's token (coloured) and tokens emitted per round."""
    head = "".join(_tag("th", name) for name in ("round", "γ_r", "accepted", "target token", "tokens"))
    rows = [(r["round"], r["drafts"], r["accepted"], _tag("span", r["target token"], cls=f"tok {r['target token']}"),
             r["tokens"]) for r in rounds_table(stats.accepted_per_round, stats.gamma_per_round).to_dict("records")]
    body = "".join(_tag("tr", "".join(_tag("td", cell) for cell in row)) for row in rows)
    return _tag("div", _tag("table", _tag("tr", head) + body), cls="rounds")


def _numbers(run: Mapping, counts: dict, alpha: float, speedup: float, repeats: str, same: str) -> list[tuple]:
    """The explorer's (label, value) rows beside the rounds."""
    stats, ar = run["stats"], run["ar_stats"]
    return [
        ("new tokens", f"{stats.new_tokens} in {stats.rounds} rounds ({counts[ACCEPTED]} accepted, "
                       f"{counts[CORRECTED]} corrected, {counts[BONUS]} bonus)"),
        ("α̂ (MLE)", f"{alpha:.3f}"),
        ("accepted drafts per round", f"{stats.mean_accepted_per_round:.2f}"),
        ("tokens per round", f"{stats.tokens_per_round:.2f}"),
        ("speculative", f"{stats.tokens_per_second:.0f} tok/s ({stats.time_total_s * 1e3:.0f} ms: "
                        f"draft {stats.time_draft_s * 1e3:.0f}, verify {stats.time_verify_s * 1e3:.0f})"),
        ("plain decoding", f"{ar.tokens_per_second:.0f} tok/s ({ar.time_total_s * 1e3:.0f} ms, "
                           f"{ar.new_tokens} tokens)"),
        ("speedup", f"<b>{speedup:.2f}x</b>"),
        ("repetition", repeats),
        ("output", same),
    ]


def result_html(run: Mapping, counter: int = 0) -> str:
    """The explorer's output for one :func:`run_speculative` result."""
    stats, ar = run["stats"], run["ar_stats"]
    provenance = token_provenance(stats.accepted_per_round, stats.gamma_per_round, len(run["tokens"]))
    counts = {kind: sum(k == kind for _, k in provenance) for kind in (ACCEPTED, CORRECTED, BONUS)}
    speedup = stats.tokens_per_second / ar.tokens_per_second
    share = repeated_ngram_share(run["tokens"])
    repetitive = share > REPETITIVE_SHARE
    repeats = f"{share:.0%} of its 4-grams repeat " + (_tag(
        "span", f"(above {REPETITIVE_SHARE:.0%}): <b>repetitive output</b>, easy to draft", style="color:#b00")
        if repetitive else "(not repetitive)")
    alpha = estimate_alpha(stats.accepted_per_round, stats.gamma_per_round) if stats.proposed else float("nan")
    if run["temperature"] == 0:
        same = "the same tokens as plain decoding (greedy: lossless)" if run["identical"] else "NOT the same tokens"
    else:
        same = f"a sample at temperature {run['temperature']:g} (plain decoding drew its own)"
    summary = " &nbsp;·&nbsp; ".join(
        [f"<b>{speedup:.2f}x</b> over plain decoding: {stats.tokens_per_second:.0f} vs "
         f"{ar.tokens_per_second:.0f} tok/s",
         f"{stats.new_tokens} tokens in {stats.rounds} rounds, {stats.tokens_per_round:.2f} per round",
         f"α̂ = {alpha:.3f}", same] + ([repeats] if repetitive else []))
    legend = legend_html() + " &nbsp;&nbsp;" + _tag("span", "(grey: the prompt; hover a token for its round)",
                                                     style="color:#888")
    table = "".join(_tag("tr", _tag("th", k, style="text-align:left") + _tag("td", v, style="text-align:left"))
                    for k, v in _numbers(run, counts, alpha, speedup, repeats, same))
    setting = f"target cpu-pair/target (16 layers) with {DRAFTS.get(run['draft'], run['draft'])}, γ = {run['gamma']}"
    note = _tag("div", f"{setting}; one run of each: expect noise in the times", style="font-size: 11px; color: #666")
    legend = _tag("div", legend, cls="legend", style="margin: 2px 0 4px 0")
    tokens = tokens_html(run["pieces"], provenance, run["prompt"])
    numbers = _tag("div", _tag("table", table) + note, cls="numbers")
    return _page(counter, _tag("div", summary, cls="summary") + legend + tokens + _rounds_html(stats) + numbers)


# ---------------------------------------------------------------------------------------------------- live runs


@functools.lru_cache(maxsize=None)
def _cpu_model(name: str):
    """A CPU-pair model, loaded once."""
    from helpers.models import load_cpu_model
    return load_cpu_model(name)  # quiet: no "Loading weights" bar in the widget's cell


@functools.lru_cache(maxsize=1)
def _cpu_tokenizer():
    from helpers.models import load_cpu_tokenizer
    return load_cpu_tokenizer()


def run_speculative(prompt: str, draft: str = "draft", gamma: int = 4, temperature: float = 0.0,
                    max_new_tokens: int = 48, seed: int = 0, max_prompt_tokens: int = 512) -> dict:
    """One speculative generation and one plain (AR) generation of ``prompt`` on the CPU pair, timed alike.

    Returns the new tokens, their decoded pieces, both runs' statistics and whether the outputs are identical.
    The first call per draft warms both paths up (untimed)."""
    from helpers.specdec import autoregressive_generate, speculative_generate

    if draft not in DRAFTS:
        raise ValueError(f"unknown draft {draft!r}; choose one of {', '.join(DRAFTS)}")
    tokenizer = _cpu_tokenizer()
    ids = tokenizer(prompt, return_tensors="pt")["input_ids"][:, -max_prompt_tokens:]
    if ids.shape[1] == 0:
        raise ValueError("the prompt is empty: type some code or text to continue")
    target, draft_model = _cpu_model("target"), _cpu_model(draft)
    if not getattr(draft_model, "_explorer_warm", False):
        speculative_generate(target, draft_model, ids, 4, 2)
        autoregressive_generate(target, ids, 4)
        draft_model._explorer_warm = True
    result = speculative_generate(target, draft_model, ids, max_new_tokens, gamma, temperature, seed=seed)
    plain = autoregressive_generate(target, ids, max_new_tokens, temperature, seed=seed)
    tokens = result.tokens.tolist()
    return {"prompt": prompt, "draft": draft, "gamma": gamma, "temperature": temperature, "tokens": tokens,
            "pieces": token_pieces(tokenizer, tokens, ids[0, -8:].tolist()), "stats": result.stats,
            "ar_stats": plain.stats, "identical": tokens == plain.tokens.tolist()}


# a held-out prompt whose greedy continuation reads as code (a short function with a docstring; 4 % of its 4-grams
# repeat): on many others the small target loops (a column of "#" lines), which speculation drafts with ease
DEFAULT_PROMPT_ID = "cpu-code-6"


def default_prompt() -> str:
    """A held-out code prompt of the CPU profile (``data/prompts.jsonl``, ``DEFAULT_PROMPT_ID`` or else the first
    code prompt): text the pair never trained on."""
    from helpers.prompts import load_prompts
    code = load_prompts("cpu", "code")
    return next((row for row in code if row["id"] == DEFAULT_PROMPT_ID), code[0])["prompt"]


def speculative_explorer(prompt: str | None = None, *, draft: str = "draft", gamma: int = 4, temperature: float = 0.0,
                         max_new_tokens: int = 48, run: bool = True):
    """Notebook 07's explorer: prompt, draft, γ, temperature and length → a live speculative generation on the CPU
    pair, each token coloured (accepted draft / correction / bonus), per-round counts, and tokens/s beside plain
    decoding of the same prompt. Press *Generate* after a change (a run takes about a second on a laptop CPU);
    ``run`` generates once when the widget is built."""
    import ipywidgets as widgets

    style = {"description_width": "initial"}
    prompt_box = widgets.Textarea(value=default_prompt() if prompt is None else prompt, description="prompt",
                                  layout=widgets.Layout(width="98%", height="9em"), style=style)
    draft_box = widgets.Dropdown(options=[(label, name) for name, label in DRAFTS.items()], value=draft,
                                 description="draft", style=style)
    gamma_box = widgets.IntSlider(value=gamma, min=1, max=12, description="γ (drafts per round)", style=style,
                                  continuous_update=False)
    temperature_box = widgets.FloatSlider(value=temperature, min=0.0, max=1.5, step=0.1, description="temperature",
                                          style=style, continuous_update=False, readout_format=".1f")
    length_box = widgets.IntSlider(value=max_new_tokens, min=8, max=160, step=8, description="new tokens",
                                   style=style, continuous_update=False)
    button = widgets.Button(description="Generate", button_style="primary", icon="play",
                            tooltip="run speculative and plain decoding with these settings")
    status = widgets.Label("")
    output = widgets.HTML(_page(0, "press Generate"))
    state = {"runs": 0}

    def generate():
        start = time.perf_counter()
        state["runs"] += 1
        result = run_speculative(prompt_box.value, draft_box.value, gamma_box.value, temperature_box.value,
                                 length_box.value)
        return (result_html(result, state["runs"]),
                f"done in {time.perf_counter() - start:.1f} s (both generations and the page)")

    press = on_press(button, status, output, generate, busy="generating…",
                     error_html=lambda message: _page(state["runs"], _tag("span", message, cls="error")))
    if run:
        press()
    controls = widgets.HBox([draft_box, gamma_box, temperature_box, length_box],
                            layout=widgets.Layout(flex_flow="row wrap"))
    return widgets.VBox([prompt_box, controls, widgets.HBox([button, status]), output],
                        layout=widgets.Layout(width="100%"))


# ---------------------------------------------------------------------------------------------------- Eq. 4/5


def verify_line(gammas: Iterable[int], ratios: Iterable[float]) -> tuple[float, float]:
    """The analysis' line through measured T_V(γ)/T_T (:func:`helpers.specdec.analysis.linear_verify_cost`: the
    same fit, :func:`helpers.stats.line_fit` with ``clamp="flat_if_falling"``): ``(value at γ = 1, slope per extra
    draft)``; a single point, or a falling fit, gives slope 0 at the mean."""
    gammas, ratios = np.asarray(list(gammas), dtype=float), np.asarray(list(ratios), dtype=float)
    if len(gammas) == 0 or len(gammas) != len(ratios):
        raise ValueError("need one T_V/T_T per gamma, at least one")
    line = line_fit(gammas, ratios, clamp="flat_if_falling")
    return float(line(1)), float(line.slope)


def speedup_curve(alpha: float, c: float, verify_ratio: float, verify_slope: float = 0.0,
                  gammas: Iterable[int] = range(1, 17), verify_floor: float = 0.0) -> pd.DataFrame:
    """Eq. 4/5 over γ: columns ``gamma``, ``omega`` (expected tokens per round), ``verify_ratio`` (T_V(γ)/T_T =
    ``verify_ratio + verify_slope * (γ - 1)``, never below ``verify_floor``: the analysis' floor, the cheapest
    measured verify, :func:`helpers.specdec.analysis.linear_verify_cost`), ``round_cost`` (γ c + T_V/T_T, in target
    steps) and ``speedup``."""
    gammas = np.asarray(list(gammas), dtype=int)
    if gammas.size == 0 or np.any(gammas < 1):
        raise ValueError("gammas must be lookaheads >= 1, at least one")
    verify = np.maximum(verify_floor, verify_ratio + verify_slope * (gammas - 1))
    if np.any(verify <= 0):
        raise ValueError(f"T_V/T_T must stay positive over the gammas (got {verify.min():.3f})")
    return pd.DataFrame({"gamma": gammas, "omega": expected_tokens_per_round(gammas, alpha), "verify_ratio": verify,
                         "round_cost": gammas * c + verify,
                         "speedup": predicted_speedup(gammas, alpha, c, verify)})


def speedup_figure(alpha: float, c: float, verify_ratio: float, verify_slope: float, gamma: int,
                   measured: Mapping[str, pd.DataFrame] | None = None, reference: Mapping | None = None,
                   max_gamma: int = 16):
    """The explorer's figure: Eq. 5 against γ, its optimum, the chosen γ, and measured speedups (each a frame with
    columns ``gamma`` and ``speedup``, and ``alpha`` if known, which the legend then names); ``reference`` (alpha,
    c, verify_ratio, verify_slope) draws a second, grey curve at the measured values. A note under the plot says why
    measured points sit below the curve, so the figure reads on its own."""
    import matplotlib.pyplot as plt

    curve = speedup_curve(alpha, c, verify_ratio, verify_slope, range(1, max_gamma + 1))
    best = curve.loc[curve["speedup"].idxmax()]
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    if reference:
        ref = speedup_curve(gammas=range(1, max_gamma + 1), **reference)
        ax.plot(ref["gamma"], ref["speedup"], color="0.6", ls=":", lw=1.2,
                label=f"Eq. 5 at the measured values (α={reference['alpha']:.2f}, c={reference['c']:.3f})")
    ax.plot(curve["gamma"], curve["speedup"], "-", color="C0", lw=2, label="Eq. 5 with the sliders' values")
    ax.plot(best["gamma"], best["speedup"], "*", color="C0", ms=15,
            label=f"optimum γ* = {int(best['gamma'])}: {best['speedup']:.2f}x")
    chosen = curve[curve["gamma"] == gamma].iloc[0]
    ax.axvline(gamma, color="C3", lw=0.8, ls="--")
    ax.plot(gamma, chosen["speedup"], "o", color="C3", ms=5)
    ax.text(0.98, 0.04, f"γ = {gamma}: Ω = {chosen['omega']:.2f} tokens per round for {chosen['round_cost']:.2f} target "
            f"steps → {chosen['speedup']:.2f}x", transform=ax.transAxes, ha="right", va="bottom", fontsize=8, color="C3",
            bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.85})
    markers = iter("osD^vP")
    for index, (label, frame) in enumerate((measured or {}).items()):
        # each measured series names its own alpha: a draft other than the sliders' accepts differently
        own = f" (α≈{frame['alpha'].median():.2f})" if "alpha" in frame and frame["alpha"].notna().any() else ""
        ax.plot(frame["gamma"], frame["speedup"], next(markers, "o"), ls="none", ms=6, color=f"C{index + 1}",
                label=f"measured: {label}{own}")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set(xlabel="lookahead γ (draft tokens per round)", ylabel="speedup over plain decoding",
           xlim=(0.5, max_gamma + 0.5), ylim=(0, max(2.0, float(curve["speedup"].max()) * 1.15,
                                                  *[float(np.nanmax(f["speedup"])) * 1.15 for f in (measured or {}).values()])),
           title=f"Eq. 5: α={alpha:.2f}, c={c:.3f}, T_V/T_T={verify_ratio:.2f}+{verify_slope:.3f}(γ−1)")
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    note = ("Eq. 5 times isolated forwards; measured runs also pay per-round work",
            "(and the prefill, where marked), so they can sit below a curve at their own α.")
    fig.text(0.02, 0.01, "\n".join(note), ha="left", va="bottom", fontsize=7, color="0.35")
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig


def speedup_explorer(measured: Mapping[str, pd.DataFrame] | None = None, *, alpha: float = 0.7, c: float = 0.1,
                     verify_ratio: float = 1.1, verify_slope: float = 0.02, gamma: int = 4, max_gamma: int = 16,
                     verify_floor: float = 0.0):
    """Notebook 09's explorer: sliders for α, c = T_D/T_T, T_V/T_T (at γ = 1, and its slope per extra draft) and γ →
    Eq. 5's speedup curve with its optimum marked, the chosen γ annotated and ``measured`` speedups overlaid. The
    sliders start at the given (measured) values, which also draw a grey reference curve; ``verify_floor`` (the
    cheapest measured T_V/T_T) keeps that curve on the analysis' verify cost, floor included."""
    import ipywidgets as widgets
    import matplotlib.pyplot as plt

    style = {"description_width": "initial"}
    sliders = {
        "alpha": widgets.FloatSlider(value=round(alpha, 2), min=0.0, max=0.99, step=0.01, description="α (acceptance)",
                                     style=style, continuous_update=False),
        "c": widgets.FloatSlider(value=round(c, 3), min=0.0, max=1.0, step=0.005, description="c = T_D/T_T",
                                 style=style, continuous_update=False, readout_format=".3f"),
        "verify_ratio": widgets.FloatSlider(value=round(verify_ratio, 2), min=0.5, max=4.0, step=0.01,
                                            description="T_V/T_T at γ=1", style=style, continuous_update=False),
        "verify_slope": widgets.FloatSlider(value=round(max(verify_slope, 0.0), 3), min=0.0, max=0.5, step=0.005,
                                            description="T_V/T_T slope per draft", style=style,
                                            continuous_update=False, readout_format=".3f"),
        "gamma": widgets.IntSlider(value=gamma, min=1, max=max_gamma, description="γ", style=style,
                                   continuous_update=False),
    }
    reference = {"alpha": alpha, "c": c, "verify_ratio": verify_ratio, "verify_slope": verify_slope,
                 "verify_floor": verify_floor}

    def draw(alpha, c, verify_ratio, verify_slope, gamma):
        speedup_figure(alpha, c, verify_ratio, verify_slope, gamma, measured, reference, max_gamma)
        plt.show()

    for slider in sliders.values():  # long labels: a fixed width leaves every track draggable
        slider.layout = widgets.Layout(width="400px", min_width="400px")
    output = widgets.interactive_output(draw, sliders)
    names = list(sliders)
    wrap = widgets.Layout(flex_flow="row wrap")
    return widgets.VBox([widgets.HBox([sliders[n] for n in names[:3]], layout=wrap),
                         widgets.HBox([sliders[n] for n in names[3:]], layout=wrap), output])
