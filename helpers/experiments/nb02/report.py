"""Tables, figures and findings of the generation benchmarks (notebook 02, handout §1.3): each function turns the
sweep rows of :mod:`helpers.generation.sweeps` into what the notebook prints and the report quotes.

- :func:`sweep_table` / :func:`sweep_figure`: one sweep (input or output lengths) as a table with the memory
  prediction column, and as a figure (time with its least-squares line, throughput; OOM, not-run and
  predicted-OOM lengths marked).
- :func:`input_findings` / :func:`output_findings`: the sentences and numbers computed from each sweep. Points
  slower than a longer length beyond the measured spread (:func:`helpers.generation.sweeps.non_monotone_noise`)
  are flagged as noise in the table and figure and left out of the growth figures, fits and throughput claims.
- :func:`prediction_card_text`: which memory the prediction column is compared with (what the card exposes).
- :func:`compare_row` / :func:`ordering_verdict` / :func:`feature_verdicts`: the model comparison (§1.3.3), where
  only pairs of models whose times are separated beyond their min-max ranges count as evidence.
- :func:`lengths_text`: "powers of 2 from a to b (... not run)" for the protocol table.
"""
from __future__ import annotations

import math

import matplotlib.pyplot as plt
import pandas as pd

from helpers import memory, models, plotting
from helpers.generation.sweeps import (STATUS_NOT_RUN, linear_fit, non_monotone_noise, ordering_violation,
                                       separated, status_table)

SWEEP_COLUMNS = {"time_s_mean": "Time, mean (s)", "time_s_median": "Time, median (s)", "time_range": "Time, min-max (s)",
                 "throughput_tok_s": "Throughput, mean (tokens/s)"}  # the handout's: tokens over the mean batch time


def sweep_table(rows: list[dict], key: str, header: str, prediction: memory.GenerationPrediction,
                predict_header: str, exceed_header: str) -> pd.DataFrame:
    """Every configuration of a sweep (measured, OOM or not run) with the memory prediction for the real model."""
    rows = [{**r, "time_range": f"{r['time_s_min']:.3g}-{r['time_s_max']:.3g}"} if r["status"] == "ok" else r
            for r in rows]
    table = status_table(rows, key, SWEEP_COLUMNS, status_column="Status").rename(columns={key: header})
    noise = non_monotone_noise(rows, key)
    table["Status"] = [f"{status}; noise (slower than {noise[r[key]]:,})" if r["status"] == "ok" and r[key] in noise
                       else status for status, r in zip(table["Status"], rows)]
    table[predict_header] = [prediction.gb(r["input_len"], r["new_tokens"]) for r in rows]
    table[exceed_header] = [prediction.over(r["input_len"], r["new_tokens"]) for r in rows]
    return table


def _legend_extras(not_run, over, oom, over_label):
    handles, labels = [], []
    if not_run:
        handles.append(plt.Rectangle((0, 0), 1, 1, color="0.88"))
        labels.append("not run on this profile (time cap)")
    if over:
        handles.append(plt.Line2D([], [], color="tab:orange", ls="--", lw=1))
        labels.append(over_label)
    if oom:
        handles.append(plt.Line2D([], [], color="red", ls=":", lw=1))
        labels.append("OOM (measured)")
    return handles, labels


def _format_log_axis(ax, x_label, y_label, oom, not_run, over):
    ax.set(yscale="log", xlabel=x_label, ylabel=y_label)
    ax.set_xscale("log", base=2)
    plotting.plain_log_axis(ax.yaxis)
    for x in oom:
        ax.axvline(x, color="red", ls=":", lw=1)
    if not_run:
        ax.axvspan(min(not_run) / 1.2, max(not_run) * 1.2, color="0.88", lw=0)
    if over:
        ax.axvline(min(over), color="tab:orange", ls="--", lw=1)


def sweep_figure(rows: list[dict], x_key: str, x_label: str, title: str, prediction: memory.GenerationPrediction,
                 over_label: str, total: bool = False, figsize=(6.5, 2.99)):
    """Median time per batch (min-max bars) with its least-squares line, and throughput; OOM, not-run and
    predicted-OOM lengths marked (``over_label`` names the prediction in the legend). ``total``: also the
    throughput counting prompt tokens. Returns the figure."""
    ok = ok_frame(rows, x_key)
    clean = ok[~ok["noise"]]
    oom = [r[x_key] for r in rows if r["status"] == "oom"]
    not_run = [r[x_key] for r in rows if r["status"] == STATUS_NOT_RUN]
    over = [r[x_key] for r in rows if prediction.over(r["input_len"], r["new_tokens"])]
    fit = linear_fit(clean[x_key], clean["time_s_median"], relative=True)
    fig, axes = plt.subplots(1, 2, figsize=figsize)
    yerr = [ok["time_s_median"] - ok["time_s_min"], ok["time_s_max"] - ok["time_s_median"]]
    axes[0].errorbar(ok[x_key], ok["time_s_median"], yerr=yerr, marker="o", capsize=2, label="median (min-max)")
    axes[0].plot(ok[x_key], fit["intercept"] + fit["slope"] * ok[x_key], color="0.4", ls=":",
                 label="least-squares line (relative errors" + (", noise left out)" if len(clean) < len(ok) else ")"))
    tput = ok["throughput_tok_s"]  # over the mean batch time (the tables'); bars: over the slowest and fastest batch
    tput_err = [tput - tput * ok["time_s_mean"] / ok["time_s_max"],
                tput * ok["time_s_mean"] / ok["time_s_min"] - tput]
    axes[1].errorbar(ok[x_key], tput, yerr=tput_err, marker="o", capsize=2, label="generated tokens/s (min-max)")
    if total:
        axes[1].plot(ok[x_key], prediction.batch_size * (ok["input_len"] + ok["new_tokens"]) / ok["time_s_median"],
                     marker="s", ls="--", label="prompt + generated tokens/s")
    noisy = ok[ok["noise"]]
    if len(noisy):  # marked as notebook 03 marks its noisy points
        axes[0].plot(noisy[x_key], noisy["time_s_median"], marker="x", ms=9, ls="", color="red",
                     label="noise: slower than a longer length beyond both min-max ranges")
        axes[1].plot(noisy[x_key], noisy["throughput_tok_s"], marker="x", ms=9, ls="", color="red")
        if total:
            axes[1].plot(noisy[x_key], prediction.batch_size * (noisy["input_len"] + noisy["new_tokens"])
                         / noisy["time_s_median"], marker="x", ms=9, ls="", color="red")
    for ax, label in [(axes[0], "time per batch (s)"), (axes[1], "throughput (tokens/s)")]:
        _format_log_axis(ax, x_label, label, oom, not_run, over)
    handles = [h for ax in axes for h in ax.get_legend_handles_labels()[0]]
    labels = [lab for ax in axes for lab in ax.get_legend_handles_labels()[1]]
    extra_handles, extra_labels = _legend_extras(not_run, over, oom, over_label)
    handles, labels = handles + extra_handles, labels + extra_labels
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize="x-small", frameon=False)
    fig.suptitle(title, fontsize="medium")
    fig.tight_layout(rect=(0, 0.06 + 0.045 * math.ceil(len(labels) / 2), 1, 0.94))
    return fig


def ok_frame(rows: list[dict], key: str) -> pd.DataFrame:
    """The measured rows of a sweep as a DataFrame sorted by ``key``, with ``noise`` (bool) marking the points
    :func:`~helpers.generation.sweeps.non_monotone_noise` flags and ``slower_than`` the longer length that shows it;
    fewer than three unflagged rows is an error (raise the time cap or re-measure)."""
    ok = pd.DataFrame([r for r in rows if r["status"] == "ok"])
    if len(ok):
        ok = ok.sort_values(key).reset_index(drop=True)
        noise = non_monotone_noise(rows, key)
        ok["noise"] = ok[key].isin(list(noise))
        ok["slower_than"] = ok[key].map(noise)
    if len(ok) < 3 or (~ok["noise"]).sum() < 3:
        raise ValueError("fewer than three lengths measured (without noise): raise the time cap (max seconds per "
                         "batch) or re-measure")
    return ok


def noise_text(ok: pd.DataFrame, key: str, unit: str) -> str:
    """Which points :func:`ok_frame` flagged, and what shows each is noise (or that none was flagged)."""
    noisy = ok[ok["noise"]]
    if not len(noisy):
        return (f"no point is flagged as noise (none is slower than a longer {unit} beyond both rows' min-max "
                f"ranges)")
    shown = "; ".join(f"{int(r[key]):,} ({r['time_s_min']:.3g}-{r['time_s_max']:.3g} s, slower than "
                      f"{int(r['slower_than']):,}: "
                      f"{float(ok.loc[ok[key] == r['slower_than'], 'time_s_min'].iloc[0]):.3g}-"
                      f"{float(ok.loc[ok[key] == r['slower_than'], 'time_s_max'].iloc[0]):.3g} s)"
                      for _, r in noisy.iterrows())
    lengths = ", ".join(f"{int(n):,}" for n in noisy[key])
    return (f"{len(noisy)} point{'s' if len(noisy) > 1 else ''} flagged as noise, {'each' if len(noisy) > 1 else 'it'} "
            f"slower than a longer {unit} beyond both rows' min-max ranges: {shown}; the growth, fit and throughput "
            f"figures use the other points, not {lengths}")


def figure_note(rows: list[dict], key: str, prediction: memory.GenerationPrediction) -> str:
    """What the marks of :func:`sweep_figure` show, for the figure's caption: only the marks that are there."""
    ok = ok_frame(rows, key)
    notes = []
    if ok["noise"].any():
        notes.append("red crosses: points flagged as noise (left out of the line)")
    if any(r["status"] == STATUS_NOT_RUN for r in rows):
        notes.append("grey: lengths not run on this profile (time cap)")
    if any(r["status"] == "oom" for r in rows):
        notes.append("red dotted: measured out-of-memory errors")
    over = any(prediction.over(r["input_len"], r["new_tokens"]) for r in rows)
    notes.append("dashed orange: from where the handout's model is predicted to exceed the memory the card exposes "
                 "(a prediction, not a measured OOM)" if over else
                 "no swept length is predicted to exceed the memory the card exposes, so no dashed line is drawn")
    return "; ".join(notes).capitalize() + "."


def _range_text(low: float, high: float, scale: float = 1.0, digits: str = ".3g") -> str:
    return f"{low * scale:{digits}} to {high * scale:{digits}}"  # "to": the low end can be negative


def _crossover_findings(clean: pd.DataFrame) -> dict:
    """Where the prefill costs as much as the decode steps, from the measured points (``cross``, ``cross_text``),
    and the least-squares line that only describes them (``fit``, ``fit_crossover``, ``fit_text``, ``steepens``)."""
    short = clean.iloc[0]
    # time ~ (decode steps, independent of the prompt) + (prefill, growing with it): where do the two cost the same?
    # Taken from the measured points (the line below is only a description: it misses a convex curve).
    fit = linear_fit(clean["input_len"], clean["time_s_median"], relative=True)
    fit_crossover = fit["intercept"] / fit["slope"]
    cross = measured_crossover(clean["input_len"], clean["time_s_median"])
    decode_s = cross["decode_s"]
    if cross["found"]:
        cross_text = (f"the prefill (median time minus the {decode_s:.3f} s at {int(short['input_len']):,} input "
                      f"token{'s' if short['input_len'] > 1 else ''}: a prefill of that few tokens plus the decode steps) is "
                      f"{cross['prefill_low']:.3f} s at {cross['low']:,} input tokens, less than the decode steps, and "
                      f"{cross['prefill_high']:.3f} s at {cross['high']:,}, more: interpolating linearly between those two "
                      f"measured lengths, it costs as much as the decode steps at about {cross['crossover']:.0f} input "
                      f"tokens")
    else:
        cross_text = (f"the prefill (median time minus the {decode_s:.3f} s at {int(short['input_len']):,} input "
                      f"token{'s' if short['input_len'] > 1 else ''}) stays below the decode steps at every measured "
                      f"length (at most {cross['prefill_high']:.3f} s at {cross['high']:,} input tokens), so the "
                      f"crossover is not within the measured range")
    n_all, t_all = clean["input_len"].to_numpy(dtype=float), clean["time_s_median"].to_numpy()
    early_ms = 1000 * cross["prefill_low"] / (cross["low"] - n_all[0]) if cross["low"] > n_all[0] else float("nan")
    late_ms = 1000 * (t_all[-1] - t_all[-2]) / (n_all[-1] - n_all[-2])
    steepens = bool(late_ms > early_ms)
    fit_side = (("below" if fit_crossover < cross["crossover"] else "above") + " the measured one") if cross["found"] \
        else "outside the measured range" if fit_crossover > n_all[-1] else "inside the measured range"
    fit_text = (f"a least-squares line (relative errors, points not flagged) describes the points as "
                f"{fit['intercept']:.2f} s + {fit['slope'] * 1000:.2f} ms per input token, missing them by up to "
                f"{fit['max_rel_residual']:.0%}; an added input token costs {early_ms:.2f} ms on average up to "
                f"{cross['low']:,} tokens and {late_ms:.2f} ms between the two longest lengths (the curve "
                f"{'steepens' if steepens else 'does not steepen'}), so the line's own crossover, {fit_crossover:.0f} "
                f"tokens, lies {fit_side}: a description, not the answer")
    return {"fit": fit, "fit_crossover": fit_crossover, "cross": cross, "cross_text": cross_text,
            "fit_text": fit_text, "steepens": steepens}


def _doubling_findings(clean: pd.DataFrame, crossover: float) -> dict:
    """What one doubling of the input does to the time, below and above ``crossover`` (per doubling, between
    consecutive points not flagged; a pair belongs to the side of the crossover its geometric mean lies on)."""
    short = clean.iloc[0]
    n, t = clean["input_len"].to_numpy(dtype=float), clean["time_s_median"].to_numpy()
    per_doubling = [(n0, n1, (t1 / t0) ** (1 / math.log2(n1 / n0)))
                    for n0, n1, t0, t1 in zip(n, n[1:], t, t[1:])]
    below = [r for n0, n1, r in per_doubling if math.sqrt(n0 * n1) < crossover]
    above = [r for n0, n1, r in per_doubling if math.sqrt(n0 * n1) >= crossover]
    below_lengths = [n1 for n0, n1, r in per_doubling if math.sqrt(n0 * n1) < crossover]
    if below:
        short_text = (f"below it (inputs {int(short['input_len']):,} to {int(max(below_lengths)):,}) one doubling of "
                      f"the input changes the median time by {min(below) - 1:+.0%} to {max(below) - 1:+.0%}")
    else:
        short_text = "no measured doubling lies below it"
    if above:
        grows_from = int(min(n0 for n0, n1, r in per_doubling if math.sqrt(n0 * n1) >= crossover))
        grows_text = (f"from {grows_from:,} tokens on, one doubling changes it by {min(above) - 1:+.0%} to "
                      f"{max(above) - 1:+.0%}" + (", so it rises with every doubling" if min(above) > 1 else ""))
    else:
        grows_text = "no measured doubling lies above it"
    steeper = bool(below and above and max(below) < min(above))
    contrast = ("every doubling below it costs less than every doubling above it" if steeper else
                "the doublings below and above it do not separate (or one side has none)")
    return {"short_text": short_text, "grows_text": grows_text, "contrast": contrast, "steeper": steeper,
            "clean_lengths": [int(x) for x in n]}


def _total_throughput_text(clean: pd.DataFrame, batch_size: int) -> tuple[str, bool]:
    """Throughput counting prompt tokens too: where it peaks, and whether it then falls beyond the min-max ranges
    of the peak's and the longest input's rows (``(text, falls)``)."""
    short, long = clean.iloc[0], clean.iloc[-1]
    peak = clean.loc[clean["total_tok_s_median"].idxmax()]
    total_range = {i: (batch_size * (r["input_len"] + r["new_tokens"]) / r["time_s_max"],
                       batch_size * (r["input_len"] + r["new_tokens"]) / r["time_s_min"]) for i, r in clean.iterrows()}
    if peak["input_len"] == short["input_len"]:
        total_text = (f"is highest at the shortest input not flagged ({short['total_tok_s_median']:.0f} tokens/s at "
                      f"{short['input_len']}), so it does not rise")
    else:
        total_text = (f"rises from {short['total_tok_s_median']:.0f} to a peak of {peak['total_tok_s_median']:.0f} "
                      f"tokens/s at {peak['input_len']} input tokens")
    total_falls = False
    if peak["input_len"] < long["input_len"]:
        total_falls = total_range[peak.name][0] > total_range[clean.index[-1]][1]
        total_text += (f", then falls to {long['total_tok_s_median']:.0f} tokens/s at {long['input_len']} ("
                       + ("beyond" if total_falls else "within") + " the two rows' min-max ranges)")
    else:
        total_text += ", the longest input measured (no fall within the measured range)"
    return total_text, total_falls


def _cutoff_and_oom_texts(rows: list[dict], last, cap: float | None) -> tuple[str, str, list]:
    """``(cutoff text, OOM text, the input lengths that ran out of memory)``."""
    oom_inputs = [r["input_len"] for r in rows if r["status"] == "oom"]
    not_run_inputs = [r["input_len"] for r in rows if r["status"] == STATUS_NOT_RUN]
    if not_run_inputs:
        cutoff_text = (f"the median batch at {last['input_len']} input tokens took {last['time_s_median']:.1f} s, over "
                       f"the cap of {cap:g} s, so the {len(not_run_inputs)} longer inputs ({min(not_run_inputs):,} to "
                       f"{max(not_run_inputs):,} tokens) are not run on this profile")
    else:
        cutoff_text = "every input length was measured"
    oom_text = (f"{len(oom_inputs)} input lengths ran out of memory (from {min(oom_inputs)} tokens)" if oom_inputs
                else "no measured configuration ran out of memory")
    return cutoff_text, oom_text, oom_inputs


def input_findings(rows: list[dict], batch_size: int, cap: float | None,
                   prediction: memory.GenerationPrediction, prediction_name: str, torch_card=None) -> dict:
    """What the input-length sweep (§1.3.1) shows: ``lines`` to print, ``numbers`` for the report, and the
    values the notebook's checks need (``growth``, ``fit``, ``noise``: the flagged input lengths). Growth, fit and
    throughput claims use only the points not flagged as noise (:func:`ok_frame`)."""
    ok = ok_frame(rows, "input_len")
    ok["total_tok_s_median"] = batch_size * (ok["input_len"] + ok["new_tokens"]) / ok["time_s_median"]
    clean = ok[~ok["noise"]].reset_index(drop=True)
    short, long = clean.iloc[0], clean.iloc[-1]
    growth = long["time_s_median"] / short["time_s_median"]
    noise = noise_text(ok, "input_len", "input")
    lines = [f"Noise: {noise}.",
             f"From {short['input_len']} to {long['input_len']} input tokens (the shortest and longest points not "
             f"flagged) the median time grows {growth:.1f}x and generated-token throughput (over the mean batch time) "
             f"{'falls' if growth > 1 else 'rises'} from {short['throughput_tok_s']:.0f} to "
             f"{long['throughput_tok_s']:.0f} tokens/s."]
    c = _crossover_findings(clean)
    fit, cross = c["fit"], c["cross"]
    lines.append(f"Crossover, from the measured points: {c['cross_text']}. Fit: {c['fit_text']}.")
    # the doublings split where the measured crossover is, or the line's when no measured length reaches it
    d = _doubling_findings(clean, cross["crossover"] if cross["found"] else c["fit_crossover"])
    spread = ((ok["time_s_max"] - ok["time_s_min"]) / ok["time_s_median"]).max()
    lines.append(f"Per doubling of the input: {d['short_text']}; {d['grows_text']}: {d['contrast']}. Largest "
                 f"batch-to-batch spread of a measured row: {spread:.0%} of its median.")
    total_text, total_falls = _total_throughput_text(clean, batch_size)
    lines.append(f"Counting prompt tokens too, throughput {total_text}.")
    cutoff_text, oom_text, oom_inputs = _cutoff_and_oom_texts(rows, ok.iloc[-1], cap)
    lines += ["Cutoff: " + cutoff_text, "OOM: " + oom_text]
    new_tokens = int(ok["new_tokens"].iloc[0])
    predict_text = prediction_text(prediction, [r["input_len"] for r in rows], new_tokens, torch_card)
    lines.append(f"Prediction: {prediction_name} at batch {batch_size} exceeds the memory the card exposes "
                 f"{predict_text}.")
    numbers = dict(genInShortLen=int(short["input_len"]), genInLongLen=int(long["input_len"]), genInGrowth=growth,
                   genInShortTput=round(float(short["throughput_tok_s"])),  # as the table prints them
                   genInLongTput=round(float(long["throughput_tok_s"])),
                   genInNoiseText=noise, genInFixedS=fit["intercept"], genInPerTokenMs=fit["slope"] * 1000,
                   genInFitMiss=f"{fit['max_rel_residual']:.0%}", genInCrossText=c["cross_text"],
                   genInFitText=c["fit_text"], genInCrossFound=int(cross["found"]),
                   genInFitCrossover=int(round(c["fit_crossover"])),
                   genInCrossover=int(round(cross["crossover"])) if cross["found"] else "--",
                   genInShortText=d["short_text"], genInGrowsText=d["grows_text"], genInContrastText=d["contrast"],
                   genInSpread=f"{spread:.0%}",
                   genInTotalText=total_text, genInCutoffText=cutoff_text, genInOomText=oom_text,
                   genInPredictText=predict_text, genInNewTokens=new_tokens,
                   genInMeasuredCount=len(ok), genInSweptCount=len(rows),
                   genInFigNote=figure_note(rows, "input_len", prediction))
    return {"lines": lines, "numbers": numbers, "growth": growth, "fit": fit, "oom_inputs": oom_inputs,
            "noise": [int(x) for x in ok.loc[ok["noise"], "input_len"]], "clean_lengths": d["clean_lengths"],
            "steeper_above": d["steeper"], "total_falls": total_falls, "crossover": cross,
            "fit_crossover": c["fit_crossover"], "steepens": c["steepens"]}


def measured_crossover(lengths, times) -> dict:
    """Where the prefill of an input-length sweep costs as much as its decode steps, from the measured points.

    ``lengths`` ascending, ``times`` their median times (points not flagged as noise). The decode steps cost about
    the time at the shortest input (``decode_s``: a prefill of that few tokens is almost nothing); the prefill at
    length n is the time there minus ``decode_s``. The crossover is found between the two consecutive measured
    lengths that bracket it (``low``: prefill below ``decode_s``, ``high``: at or above) by linear interpolation
    of the times; ``found`` is False when no measured length reaches it (``high`` is then the longest length)."""
    n = [int(x) for x in lengths]
    t = [float(x) for x in times]
    if len(n) < 2 or any(b <= a for a, b in zip(n, n[1:])):
        raise ValueError("need at least two input lengths in ascending order")
    decode_s = t[0]
    for i in range(1, len(n)):
        if t[i] - decode_s >= decode_s:
            lo, hi = i - 1, i
            crossover = n[lo] + (n[hi] - n[lo]) * (2 * decode_s - t[lo]) / (t[hi] - t[lo])
            return {"found": True, "decode_s": decode_s, "low": n[lo], "high": n[hi], "crossover": crossover,
                    "prefill_low": t[lo] - decode_s, "prefill_high": t[hi] - decode_s}
    return {"found": False, "decode_s": decode_s, "low": n[-1], "high": n[-1], "crossover": float("nan"),
            "prefill_low": t[-1] - decode_s, "prefill_high": t[-1] - decode_s}


def prediction_card_text(prediction: memory.GenerationPrediction) -> str:
    """Which memory the prediction column is compared with, in bytes and both units, and why that one."""
    card, gpu_gb = prediction.card, prediction.gpu_gb
    listed = memory.cards_sold_as(gpu_gb)
    if not listed:
        return (f"the datasheet's {gpu_gb:g} GB = {card.total_bytes / memory.GB:.2f} GB: no nvidia-smi total of a "
                f"{gpu_gb:g} GB card is listed, so the datasheet figure stands in (a card exposes more)")
    others = "; ".join(f"{c.label}" for c in listed[1:])
    return (f"the {card.total_mib:,} MiB = {card.total_bytes / memory.GB:.2f} GB = {card.total_bytes / memory.GiB:.2f} "
            f"GiB that nvidia-smi reports as the total of an {card.card}"
            + (f", the smallest of the listed {gpu_gb:g} GB cards ({others})" if others else "")
            + f", not the datasheet's {gpu_gb:g} GB = {gpu_gb * memory.GB / memory.GiB:.2f} GiB")


RESERVE_GB = 2.0  # §1.2.1's fixed reserve for the CUDA context, allocator slack and temporaries


def card_torch_bytes(gpu_gb: float, rows: list[dict] | None = None, name: str = "02_generation_benchmarks"):
    """The bytes torch reports as the total memory (``device_memory_bytes``) of a card sold as ``gpu_gb`` GB that a
    row came from: ``rows`` (this profile's) where they were measured on such a card, else the GPU windows' rows of
    ``name`` (:func:`helpers.results.gpu_result_folders`). ``(bytes, device name, where)``, or None where no row came
    from such a card. torch's total is what an allocation can reach; nvidia-smi's MiB count a little more (the H100
    80GB: 85,017,493,504 B against 81,559 MiB = 85,521,661,952 B)."""
    from helpers.results import gpu_result_folders, latest_ok_rows

    def match(found, where):
        for row in found:
            device = str(row.get("device_name", ""))
            if (row.get("device") == "cuda" and row.get("device_memory_bytes")
                    and any(c.card.split()[0] in device for c in memory.cards_sold_as(gpu_gb))):
                return int(row["device_memory_bytes"]), device, where
        return None

    own = match(rows or [], "this profile's rows")
    if own:
        return own
    for folder in gpu_result_folders(name):
        found = match(latest_ok_rows(folder / f"{name}.jsonl"), f"results/{folder.name}")
        if found:
            return found
    return None


def prediction_text(prediction: memory.GenerationPrediction, input_lens: list[int], new_tokens: int,
                    torch_card=None) -> str:
    """At which of ``input_lens`` the prediction exceeds what the card exposes, or, if none, how close the
    longest comes (against the datasheet figure too, to show what reading GB for GiB would have claimed) and
    whether what is left covers §1.2.1's reserve (:data:`RESERVE_GB`): if not, the longest is borderline.

    ``torch_card`` (:func:`card_torch_bytes`): the total torch reported on a card of that size a row came from;
    where given, the verdicts (over, headroom, reserve) are taken against those bytes, the ones an allocation can
    reach, and nvidia-smi's figure is named beside them; else against nvidia-smi's total."""
    card = prediction.card
    limit = torch_card[0] if torch_card else card.total_bytes
    limit_text = (f"the {limit / memory.GB:.2f} GB ({limit:,} B) torch reported on an {torch_card[1]} "
                  f"({torch_card[2]}; nvidia-smi: {card.total_mib:,} MiB), a card of the size predicted for (its rows "
                  f"need not reach these lengths)" if torch_card
                  else f"the {limit / memory.GB:.1f} GB the card exposes ({card.label})")
    over = [n for n in input_lens if prediction.bytes(n, new_tokens) > limit]
    if over:
        first = min(over)
        return f"from {first:,} input tokens on ({prediction.gb(first, new_tokens):.1f} GB predicted, over {limit_text})"
    longest = max(input_lens)
    headroom = limit - prediction.bytes(longest, new_tokens)
    datasheet = ("over the datasheet's" if prediction.over_datasheet(longest, new_tokens)
                 else "under both the datasheet's")
    return (f"at none of the swept input lengths: the longest, {longest:,} tokens, is predicted at "
            f"{prediction.gb(longest, new_tokens):.1f} GB, {datasheet} {prediction.gpu_gb:g} GB"
            f"{' but under' if datasheet.startswith('over') else ' and'} {limit_text}, leaving "
            f"{headroom / memory.GB:.2f} GB ({headroom / limit:.1%} of it) for what the prediction leaves out (CUDA "
            "context, allocator slack), "
            + (f"more than the {RESERVE_GB:g} GB §1.2.1 reserves for them" if headroom >= RESERVE_GB * memory.GB else
               f"less than the {RESERVE_GB:g} GB §1.2.1 reserves for them: borderline"))


def output_findings(rows: list[dict], prediction: memory.GenerationPrediction | None = None) -> dict:
    """What the output-length sweep (§1.3.2) shows: ``lines`` to print and ``numbers`` for the report (the
    linear fit, the marginal cost of a decode step, where throughput peaks and why; with ``prediction``, the
    figure's caption note). Every comparison says whether it holds beyond the rows' min-max ranges; points flagged
    as noise (:func:`ok_frame`) are left out."""
    ok = ok_frame(rows, "new_tokens")
    clean = ok[~ok["noise"]].reset_index(drop=True)
    noise = noise_text(ok, "new_tokens", "output")
    lines = [f"Noise: {noise}."]
    n, t = clean["new_tokens"].to_numpy(), clean["time_s_median"].to_numpy()
    t_min, t_max = clean["time_s_min"].to_numpy(), clean["time_s_max"].to_numpy()
    fit = linear_fit(n, t, relative=True)
    linear = fit["max_rel_residual"] <= 0.25
    linear_text = (("approximately" if linear else "not") + " a fixed cost plus a cost per new token: the "
                   f"least-squares line (relative errors) {fit['intercept'] * 1000:.0f} ms + "
                   f"{fit['slope'] * 1000:.1f} ms per new token misses the measured times by at most "
                   f"{fit['max_rel_residual']:.0%}")
    lines.append(f"Time is {linear_text}.")
    # the marginal cost of a decode step over each doubling of the output length, with the range the rows'
    # fastest and slowest batches allow for it
    marginal = (t[1:] - t[:-1]) / (n[1:] - n[:-1])
    low = (t_min[1:] - t_max[:-1]) / (n[1:] - n[:-1])
    high = (t_max[1:] - t_min[:-1]) / (n[1:] - n[:-1])
    early = next(i for i in range(len(marginal)) if n[i] >= 8 or i == len(marginal) - 1)
    late = len(marginal) - 1
    dearer, cheaper = low[late] > high[early], high[late] < low[early]
    step_text = (f"a decode step costs {marginal[early] * 1000:.1f} ms between {n[early]} and {n[early + 1]} new "
                 f"tokens "
                 f"({_range_text(low[early], high[early], 1000, '.1f')} ms within the two rows' min-max times) and "
                 f"{marginal[late] * 1000:.1f} ms between {n[late]} and {n[late + 1]} "
                 f"({_range_text(low[late], high[late], 1000, '.1f')} ms)")
    if dearer:
        dearer_text = "are dearer, beyond the batch-to-batch ranges"
    elif cheaper:
        dearer_text = "are cheaper, beyond the batch-to-batch ranges"
    else:
        dearer_text = "are not measurably dearer: the two ranges overlap"
    lines.append(f"Marginal cost: {step_text}; later steps {dearer_text}.")
    tput, t_mean = clean["throughput_tok_s"].to_numpy(), clean["time_s_mean"].to_numpy()  # the tables' throughput
    tput_low, tput_high = tput * t_mean / t_max, tput * t_mean / t_min  # the same tokens over the slowest/fastest batch
    top = int(tput.argmax())
    falls, rises = False, bool(tput_low[top] > tput_high[0])
    if top == len(tput) - 1:
        tput_text = f"rises from {tput[0]:.0f} to {tput[-1]:.0f} tokens/s, highest at the longest output measured"
    elif top == 0:
        falls = bool(tput_low[0] > tput_high[-1])
        tput_text = (f"is highest at the shortest output ({tput[0]:.0f} tokens/s at {n[0]}) and ends at "
                     f"{tput[-1]:.0f} tokens/s at {n[-1]} (" + ("beyond" if falls else "within")
                     + " the two rows' min-max ranges)")
    else:
        falls = bool(tput_low[top] > tput_high[-1])
        tput_text = (f"rises from {tput[0]:.0f} to a peak of {tput[top]:.0f} tokens/s at {n[top]} new tokens, then "
                     f"falls to {tput[-1]:.0f} tokens/s at {n[-1]} ("
                     + ("beyond" if falls else "within") + " the two rows' min-max ranges)")
    lines.append(f"Throughput (over the mean batch time) {tput_text}.")
    tput_why = ("the fixed prefill is spread over more generated tokens" if top > 0 else
                "the fixed prefill does not dominate even the shortest output")
    if falls and dearer:
        tput_why += ", until the dearer later steps outweigh that"
    elif falls:
        tput_why += "; the fall after the peak is not explained by measurably dearer later steps"
    elif top < len(tput) - 1:
        tput_why += "; past the peak the fall is within the noise, so the measurement shows a plateau, not a fall"
    lines.append("Why: " + tput_why)
    numbers = dict(genOutNoiseText=noise, genOutLinearText=linear_text, genOutPrefillMs=fit["intercept"] * 1000,
                   genOutStepMs=fit["slope"] * 1000, genOutStepText=step_text, genOutDearer=dearer_text,
                   genOutTputText=tput_text, genOutTputWhy=tput_why, genOutPeakLen=int(n[top]),
                   genOutFirstLen=int(n[0]), genOutLastLen=int(n[-1]), genOutInputLen=int(ok["input_len"].iloc[0]))
    if prediction is not None:
        numbers["genOutFigNote"] = figure_note(rows, "new_tokens", prediction)
    return {"lines": lines, "numbers": numbers, "fit": fit, "dearer": bool(dearer), "falls": falls, "rises": rises,
            "noise": [int(x) for x in ok.loc[ok["noise"], "new_tokens"]]}


def compare_row(name: str, note: str, model, row: dict, kv_bytes: int) -> dict:
    """One model of the comparison (§1.3.3): its shape, the bytes a decode step reads (weights + ``kv_bytes`` of
    KV cache) and its measured time (or "OOM"); ``t_min``/``t_max`` for the overlap check."""
    shape = models.describe(model)
    bytes_per_elem = next(model.parameters()).element_size()
    weights = shape["parameters"] * bytes_per_elem
    ok = row["status"] == "ok"
    return {"model": name + note, "layers": shape["layers"], "hidden": shape["hidden_size"],
            "KV heads": shape["kv_heads"], "vocab": shape["vocab_size"], "parameters": shape["parameters"],
            "bytes per step (MB)": (weights + kv_bytes) / 1e6, "KV share of bytes": kv_bytes / (weights + kv_bytes),
            "Time, mean (s)": row["time_s_mean"] if ok else "OOM",  # the handout's average over the batches
            "Time, median (s)": row["time_s_median"] if ok else "OOM",
            "Time, min-max (s)": f"{row['time_s_min']:.3g}-{row['time_s_max']:.3g}" if ok else "OOM",
            "Throughput, mean (tokens/s)": row["throughput_tok_s"] if ok else "OOM",
            "t_min": row.get("time_s_min"), "t_max": row.get("time_s_max")}


def _separated_pairs(measured: pd.DataFrame):
    """``comparable(i, j)`` for :func:`~helpers.generation.sweeps.ordering_violation`: the two models' min-max
    ranges (``t_min``-``t_max``) do not overlap, so their order is beyond the noise."""
    rows = measured.to_dict("records")
    return lambda i, j: separated(rows[i], rows[j], "t_min", "t_max")


def _value(value) -> str:
    """A feature's value in prose: counts with thousands separators, measured quantities to three figures."""
    return f"{int(value):,}" if float(value).is_integer() else f"{value:.3g}"


def ordering_verdict(measured: pd.DataFrame, feature: str) -> str:
    """A sentence, from the data, on whether ``feature`` alone explains the ordering of ``measured["time"]``.

    Only pairs of models whose min-max ranges do not overlap count as evidence: a counterexample is always such a
    pair, and a feature contradicted only by a pair within the noise is said to be so."""
    beyond = ordering_violation(measured[feature], measured["time"], comparable=_separated_pairs(measured))
    if beyond is not None:
        a, b = measured.iloc[beyond[0]], measured.iloc[beyond[1]]
        return (f"does not explain it: {a['model']} has {_value(a[feature])} and {b['model']} {_value(b[feature])}, "
                f"yet their "
                f"median times are {a['time']:.3g} s and {b['time']:.3g} s (min-max ranges apart)")
    within = ordering_violation(measured[feature], measured["time"])
    if within is None:
        return "explains it: it orders every pair of models as their median times do"
    a, b = measured.iloc[within[0]], measured.iloc[within[1]]
    return (f"explains every pair whose times are separated beyond their min-max ranges; it misorders only "
            f"{a['model']} and {b['model']}, whose ranges overlap")


def feature_verdicts(measured: pd.DataFrame, features: list[str]) -> dict:
    """For each feature: ``explains`` (it orders every pair of models whose times are separated beyond their
    min-max ranges) and the ``text`` of :func:`ordering_verdict`; plus ``explained_by`` (the features that do, as
    text, with what the evidence can and cannot tell apart) and the pair counts."""
    comparable = _separated_pairs(measured)
    pairs = [(i, j) for i in range(len(measured)) for j in range(i + 1, len(measured))]
    n_separated = sum(comparable(i, j) for i, j in pairs)
    verdicts = {f: {"explains": ordering_violation(measured[f], measured["time"], comparable=comparable) is None,
                    "text": ordering_verdict(measured, f)} for f in features}
    explaining = [f for f in features if verdicts[f]["explains"]]
    if not explaining:
        explained_by = "none of the single features"
    elif len(explaining) == 1:
        explained_by = f"only {explaining[0]}"
    else:
        explained_by = (f"{', '.join(explaining)}; with {n_separated} of the {len(pairs)} pairs of models separated "
                        f"beyond the noise, this comparison cannot tell these features apart")
    return {"verdicts": verdicts, "explaining": explaining, "explained_by": explained_by,
            "n_separated": n_separated, "n_pairs": len(pairs)}


def lengths_text(rows: list[dict], key: str, cap: float | None) -> str:
    """'powers of 2 from a to b' over the lengths that were run, and which were not (over the time ``cap``)."""
    done = [r[key] for r in rows if r["status"] != STATUS_NOT_RUN]
    text = f"powers of 2 from {min(done):,} to {max(done):,}"
    skipped = [r[key] for r in rows if r["status"] == STATUS_NOT_RUN]
    return text + (f" ({min(skipped):,} to {max(skipped):,} not run: over the "
                   f"{cap:g} s time cap)" if skipped else "")


def measured_by_time(compare: pd.DataFrame) -> pd.DataFrame:
    """The measured (not OOM) models of the comparison, fastest first, with their median time as ``time``."""
    measured = compare[compare["Time, median (s)"] != "OOM"].copy()
    measured["time"] = measured["Time, median (s)"].astype(float)
    return measured.sort_values("time").reset_index(drop=True)


def overlap_text(measured: pd.DataFrame) -> str:
    """Whether neighbours in the time ordering are separated beyond their batch-to-batch (min-max) spread."""
    rows = measured.to_dict("records")
    overlaps = [f"{a['model']} and {b['model']}" for a, b in zip(rows, rows[1:])
                if not separated(a, b, "t_min", "t_max")]
    return ("the min-max ranges of " + "; ".join(overlaps) + " overlap, so their order is within the noise"
            if overlaps else "every neighbour in the ordering is separated beyond its min-max range")
