"""Tables, figures and findings of the generation benchmarks (notebook 02, handout §1.3): each function turns the
sweep rows of :mod:`helpers.generation.sweeps` into what the notebook prints and the report quotes.

- :func:`sweep_table` / :func:`sweep_figure`: one sweep (input or output lengths) as a table with the memory
  prediction column, and as a figure (time with its least-squares line, throughput; OOM, not-run and
  predicted-OOM lengths marked).
- :func:`input_findings` / :func:`output_findings`: the sentences and numbers computed from each sweep.
- :func:`compare_row` / :func:`ordering_verdict`: the model comparison (§1.3.3).
- :func:`lengths_text`: "powers of 2 from a to b (... not run)" for the protocol table.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.ticker import FuncFormatter

from helpers import memory, models
from helpers.generation.sweeps import STATUS_NOT_RUN, linear_fit, ordering_violation, status_table

SWEEP_COLUMNS = {"time_s_median": "Time, median (s)", "time_range": "Time, min-max (s)",
                 "throughput_tok_s_median": "Throughput (tokens/s)"}


def sweep_table(rows: list[dict], key: str, header: str, prediction: memory.GenerationPrediction,
                predict_header: str, exceed_header: str) -> pd.DataFrame:
    """Every configuration of a sweep (measured, OOM or not run) with the memory prediction for the real model."""
    rows = [{**r, "time_range": f"{r['time_s_min']:.3g}-{r['time_s_max']:.3g}"} if r["status"] == "ok" else r
            for r in rows]
    table = status_table(rows, key, SWEEP_COLUMNS, status_column="Status").rename(columns={key: header})
    table[predict_header] = [prediction.gb(r["input_len"], r["new_tokens"]) for r in rows]
    table[exceed_header] = table[predict_header] > prediction.gpu_gb
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
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if f"{v:g}"[0] in "25" else ""))
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
    ok = pd.DataFrame([r for r in rows if r["status"] == "ok"])
    oom = [r[x_key] for r in rows if r["status"] == "oom"]
    not_run = [r[x_key] for r in rows if r["status"] == STATUS_NOT_RUN]
    over = [r[x_key] for r in rows if prediction.over(r["input_len"], r["new_tokens"])]
    fit = linear_fit(ok[x_key], ok["time_s_median"], relative=True)
    fig, axes = plt.subplots(1, 2, figsize=figsize)
    yerr = [ok["time_s_median"] - ok["time_s_min"], ok["time_s_max"] - ok["time_s_median"]]
    axes[0].errorbar(ok[x_key], ok["time_s_median"], yerr=yerr, marker="o", capsize=2, label="median (min-max)")
    axes[0].plot(ok[x_key], fit["intercept"] + fit["slope"] * ok[x_key], color="0.4", ls=":",
                 label="least-squares line (relative errors)")
    axes[1].plot(ok[x_key], ok["throughput_tok_s_median"], marker="o", label="generated tokens/s")
    if total:
        axes[1].plot(ok[x_key], prediction.batch_size * (ok["input_len"] + ok["new_tokens"]) / ok["time_s_median"],
                     marker="s", ls="--", label="prompt + generated tokens/s")
    for ax, label in [(axes[0], "time per batch (s)"), (axes[1], "throughput (tokens/s)")]:
        _format_log_axis(ax, x_label, label, oom, not_run, over)
    handles = [h for ax in axes for h in ax.get_legend_handles_labels()[0]]
    labels = [lab for ax in axes for lab in ax.get_legend_handles_labels()[1]]
    extra_handles, extra_labels = _legend_extras(not_run, over, oom, over_label)
    handles, labels = handles + extra_handles, labels + extra_labels
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize="x-small", frameon=False)
    fig.suptitle(title, fontsize="medium")
    fig.tight_layout(rect=(0, 0.2 if len(labels) > 4 else 0.14, 1, 0.94))
    return fig


def ok_frame(rows: list[dict]) -> pd.DataFrame:
    """The measured rows of a sweep as a DataFrame; fewer than three is an error (raise the time cap)."""
    ok = pd.DataFrame([r for r in rows if r["status"] == "ok"])
    if len(ok) < 3:
        raise ValueError("fewer than three lengths measured: raise the time cap (max seconds per batch)")
    return ok


def input_findings(rows: list[dict], batch_size: int, cap: float | None,
                   prediction: memory.GenerationPrediction, prediction_name: str) -> dict:
    """What the input-length sweep (§1.3.1) shows: ``lines`` to print, ``numbers`` for the report, and the
    values the notebook's checks need (``growth``, ``fit``)."""
    ok = ok_frame(rows)
    ok["total_tok_s_median"] = batch_size * (ok["input_len"] + ok["new_tokens"]) / ok["time_s_median"]
    oom_inputs = [r["input_len"] for r in rows if r["status"] == "oom"]
    not_run_inputs = [r["input_len"] for r in rows if r["status"] == STATUS_NOT_RUN]
    short, long = ok.iloc[0], ok.iloc[-1]
    growth = long["time_s_median"] / short["time_s_median"]
    lines = [f"From {short['input_len']} to {long['input_len']} input tokens the median time grows {growth:.1f}x and "
             f"generated-token throughput falls from {short['throughput_tok_s_median']:.0f} to "
             f"{long['throughput_tok_s_median']:.0f} tokens/s."]
    # time ~ (decode steps, independent of the prompt) + (prefill, growing with it): where do the two cost the same?
    fit = linear_fit(ok["input_len"], ok["time_s_median"], relative=True)
    crossover = fit["intercept"] / fit["slope"]
    lines.append(f"Least-squares line (relative errors): {fit['intercept']:.2f} s + {fit['slope'] * 1000:.2f} ms per "
                 f"input token (largest miss {fit['max_rel_residual']:.0%}); the prefill costs as much as the decode "
                 f"steps at about {crossover:.0f} input tokens.")
    below = ok[ok["input_len"] < crossover]
    above = ok[ok["input_len"] >= crossover / 2]["time_s_median"].tolist()
    grows = len(above) >= 2 and all(b > a for a, b in zip(above, above[1:]))
    grows_from = int(ok[ok["input_len"] >= crossover / 2]["input_len"].min())
    spread = ((ok["time_s_max"] - ok["time_s_min"]) / ok["time_s_median"]).max()
    short_text = (f"below it the median time stays between {below['time_s_median'].min():.2f} and "
                  f"{below['time_s_median'].max():.2f} s")
    grows_text = (f"from {grows_from} tokens on it rises with every doubling" if grows
                  else f"from {grows_from} tokens on it does not rise with every doubling")
    lines.append(f"Short inputs: {short_text}; {grows_text}. Largest batch-to-batch spread of a row: {spread:.0%} of "
                 f"its median.")
    peak = ok.loc[ok["total_tok_s_median"].idxmax()]
    total_text = (f"rises from {short['total_tok_s_median']:.0f} to a peak of {peak['total_tok_s_median']:.0f} tokens/s "
                  f"at {peak['input_len']} input tokens")
    if peak["input_len"] < long["input_len"]:
        total_text += f", then falls to {long['total_tok_s_median']:.0f} tokens/s at {long['input_len']}"
    else:
        total_text += ", the longest input measured (no fall within the measured range)"
    lines.append(f"Counting prompt tokens too, throughput {total_text}.")
    if not_run_inputs:
        cutoff_text = (f"the median batch at {long['input_len']} input tokens took {long['time_s_median']:.1f} s, over "
                       f"the cap of {cap:g} s, so the {len(not_run_inputs)} longer inputs ({min(not_run_inputs):,} to "
                       f"{max(not_run_inputs):,} tokens) are not run on this profile")
    else:
        cutoff_text = "every input length was measured"
    lines.append("Cutoff: " + cutoff_text)
    oom_text = (f"{len(oom_inputs)} input lengths ran out of memory (from {min(oom_inputs)} tokens)" if oom_inputs
                else "no measured configuration ran out of memory")
    lines.append("OOM: " + oom_text)
    over = [r["input_len"] for r in rows if prediction.over(r["input_len"], r["new_tokens"])]
    new_tokens = int(ok["new_tokens"].iloc[0])
    predict_text = (f"from {min(over):,} input tokens on ({prediction.gb(min(over), new_tokens):.0f} GB predicted)"
                    if over else "at none of the swept input lengths")
    lines.append(f"Prediction: {prediction_name} at batch {batch_size} exceeds {prediction.gpu_gb:g} GB of GPU memory "
                 f"{predict_text}.")
    numbers = dict(genInShortLen=int(short["input_len"]), genInLongLen=int(long["input_len"]), genInGrowth=growth,
                   genInShortTput=short["throughput_tok_s_median"], genInLongTput=long["throughput_tok_s_median"],
                   genInFixedS=fit["intercept"], genInPerTokenMs=fit["slope"] * 1000,
                   genInFitMiss=f"{fit['max_rel_residual']:.0%}", genInCrossover=int(round(crossover)),
                   genInShortText=short_text, genInGrowsText=grows_text, genInSpread=f"{spread:.0%}",
                   genInTotalText=total_text, genInCutoffText=cutoff_text, genInOomText=oom_text,
                   genInPredictText=predict_text, genInNewTokens=new_tokens,
                   genInMeasuredCount=len(ok), genInSweptCount=len(rows))
    return {"lines": lines, "numbers": numbers, "growth": growth, "fit": fit, "oom_inputs": oom_inputs}


def output_findings(rows: list[dict]) -> dict:
    """What the output-length sweep (§1.3.2) shows: ``lines`` to print and ``numbers`` for the report (the
    linear fit, the marginal cost of a decode step, where throughput peaks and why)."""
    ok = ok_frame(rows)
    n, t = ok["new_tokens"].to_numpy(), ok["time_s_median"].to_numpy()
    fit = linear_fit(n, t, relative=True)
    linear = fit["max_rel_residual"] <= 0.25
    linear_text = (("approximately" if linear else "not") + " a fixed cost plus a cost per new token: the "
                   f"least-squares line (relative errors) {fit['intercept'] * 1000:.0f} ms + "
                   f"{fit['slope'] * 1000:.1f} ms per new token misses the measured times by at most "
                   f"{fit['max_rel_residual']:.0%}")
    lines = [f"Time is {linear_text}."]
    # the marginal cost of a decode step over each doubling of the output length
    marginal = (t[1:] - t[:-1]) / (n[1:] - n[:-1])
    early = next(i for i in range(len(marginal)) if n[i] >= 8 or i == len(marginal) - 1)
    dearer = marginal[-1] > marginal[early]
    step_text = (f"a decode step costs {marginal[early] * 1000:.1f} ms between {n[early]} and {n[early + 1]} new tokens "
                 f"and {marginal[-1] * 1000:.1f} ms between {n[-2]} and {n[-1]}")
    lines.append(f"Marginal cost: {step_text} ({'later steps are dearer' if dearer else 'later steps are not dearer'}).")
    tput = ok["throughput_tok_s_median"].to_numpy()
    top = int(tput.argmax())
    if top == len(tput) - 1:
        tput_text = f"rises from {tput[0]:.0f} to {tput[-1]:.0f} tokens/s, highest at the longest output measured"
    else:
        tput_text = (f"rises from {tput[0]:.0f} to a peak of {tput[top]:.0f} tokens/s at {n[top]} new tokens, then "
                     f"falls to {tput[-1]:.0f} tokens/s at {n[-1]}")
    lines.append(f"Throughput {tput_text}.")
    tput_why = "the fixed prefill is spread over more generated tokens"
    if top < len(tput) - 1 and dearer:
        tput_why += ", until the dearer later steps outweigh that"
    elif top < len(tput) - 1:
        tput_why += "; the fall after the peak is not explained by dearer later steps"
    lines.append("Why: " + tput_why)
    numbers = dict(genOutLinearText=linear_text, genOutPrefillMs=fit["intercept"] * 1000,
                   genOutStepMs=fit["slope"] * 1000, genOutStepText=step_text,
                   genOutDearer="are dearer" if dearer else "are not dearer", genOutTputText=tput_text,
                   genOutTputWhy=tput_why, genOutPeakLen=int(n[top]), genOutFirstLen=int(n[0]),
                   genOutLastLen=int(n[-1]), genOutInputLen=int(ok["input_len"].iloc[0]))
    return {"lines": lines, "numbers": numbers, "fit": fit}


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
            "Time, median (s)": row["time_s_median"] if ok else "OOM",
            "Time, min-max (s)": f"{row['time_s_min']:.3g}-{row['time_s_max']:.3g}" if ok else "OOM",
            "Throughput (tokens/s)": row["throughput_tok_s_median"] if ok else "OOM",
            "t_min": row.get("time_s_min"), "t_max": row.get("time_s_max")}


def ordering_verdict(measured: pd.DataFrame, feature: str) -> str:
    """A sentence, from the data, on whether ``feature`` alone explains the ordering of ``measured["time"]``
    (with a counterexample when it does not)."""
    pair = ordering_violation(measured[feature], measured["time"])
    if pair is None:
        return "explains it"
    a, b = measured.iloc[pair[0]], measured.iloc[pair[1]]
    return (f"does not explain it: {a['model']} has {a[feature]:,} and {b['model']} {b[feature]:,}, yet their median "
            f"times are {a['time']:.3g} s and {b['time']:.3g} s")


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
    by_time = list(measured["model"])
    overlaps = [f"{a} and {b}" for (a, b, amax, bmin) in zip(by_time, by_time[1:], measured["t_max"],
                                                            measured["t_min"][1:]) if bmin <= amax]
    return ("the min-max ranges of " + "; ".join(overlaps) + " overlap, so their order is within the noise"
            if overlaps else "every neighbour in the ordering is separated beyond its min-max range")
