"""Notebook 02's tables, figures and findings (handout §1.3) from :mod:`helpers.generation.sweeps`'s rows: the sweeps'
tables and figures, the numbers and flags the sentences are chosen from (a point slower than a longer length beyond
both rows' min-max ranges is noise, left out), the memory prediction's card, and the model comparison (only pairs
separated beyond their min-max ranges are evidence)."""
from __future__ import annotations

import math

import matplotlib.pyplot as plt
import pandas as pd

from helpers import memory, models, plotting
from helpers.generation.sweeps import (STATUS_NOT_RUN, linear_fit, non_monotone_noise, ordering_violation,
                                       separated, status_table)

SWEEP_COLUMNS = {"time_s_mean": "Time, mean (s)", "time_s_median": "Time, median (s)",
                 "time_range": "Time, min-max (s)",
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


def sweep_figure(rows: list[dict], x_key: str, x_label: str, title: str, prediction: memory.GenerationPrediction,
                 over_label: str, total: bool = False, figsize=(6.5, 2.99)):
    """Median time per batch (min-max bars) with its least-squares line, and throughput (``total``: also counting prompt
    tokens); OOM, not-run and predicted-OOM lengths marked."""
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
    total_tput = prediction.batch_size * (ok["input_len"] + ok["new_tokens"]) / ok["time_s_median"]
    if total:
        axes[1].plot(ok[x_key], total_tput, marker="s", ls="--", label="prompt + generated tokens/s")
    noisy = ok[ok["noise"]]
    if len(noisy):  # marked as notebook 03 marks its noisy points
        axes[0].plot(noisy[x_key], noisy["time_s_median"], marker="x", ms=9, ls="", color="red",
                     label="noise: slower than a longer length beyond both min-max ranges")
        axes[1].plot(noisy[x_key], noisy["throughput_tok_s"], marker="x", ms=9, ls="", color="red")
        if total:
            axes[1].plot(noisy[x_key], total_tput[ok["noise"]], marker="x", ms=9, ls="", color="red")
    for ax, label in [(axes[0], "time per batch (s)"), (axes[1], "throughput (tokens/s)")]:
        ax.set(yscale="log", xlabel=x_label, ylabel=label)
        ax.set_xscale("log", base=2)
        plotting.plain_log_axis(ax.yaxis)
        for x in oom:
            ax.axvline(x, color="red", ls=":", lw=1)
        if not_run:
            ax.axvspan(min(not_run) / 1.2, max(not_run) * 1.2, color="0.88", lw=0)
        if over:
            ax.axvline(min(over), color="tab:orange", ls="--", lw=1)
    extras = [(h, label) for show, h, label in (
        (not_run, plt.Rectangle((0, 0), 1, 1, color="0.88"), "not run on this profile (time cap)"),
        (over, plt.Line2D([], [], color="tab:orange", ls="--", lw=1), over_label),
        (oom, plt.Line2D([], [], color="red", ls=":", lw=1), "OOM (measured)")) if show]
    handles = [h for ax in axes for h in ax.get_legend_handles_labels()[0]] + [h for h, _ in extras]
    labels = [lab for ax in axes for lab in ax.get_legend_handles_labels()[1]] + [lab for _, lab in extras]
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize="x-small", frameon=False)
    fig.suptitle(title, fontsize="medium")
    fig.tight_layout(rect=(0, 0.06 + 0.045 * math.ceil(len(labels) / 2), 1, 0.94))
    return fig


def ok_frame(rows: list[dict], key: str) -> pd.DataFrame:
    """A sweep's measured rows sorted by ``key``, with ``noise`` and ``slower_than`` from
    :func:`~helpers.generation.sweeps.non_monotone_noise`; an error with fewer than three unflagged rows."""
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


def _noise(ok: pd.DataFrame, key: str) -> dict:
    """How many points :func:`ok_frame` flagged as noise and their lengths (a label, '--' for none)."""
    noisy = [int(n) for n in ok.loc[ok["noise"], key]]
    return {"NoiseCount": len(noisy), "NoiseLengths": ", ".join(f"{n:,}" for n in noisy) or "--"}


def figure_marks(rows: list[dict], key: str, prediction: memory.GenerationPrediction) -> dict:
    """Which marks :func:`sweep_figure` draws (1 or 0), so that its caption names only those."""
    ok = ok_frame(rows, key)
    return {"FigNoise": int(ok["noise"].any()), "FigNotRun": int(any(r["status"] == STATUS_NOT_RUN for r in rows)),
            "FigOom": int(any(r["status"] == "oom" for r in rows)),
            "FigOver": int(any(prediction.over(r["input_len"], r["new_tokens"]) for r in rows))}


def _prefixed(prefix: str, numbers: dict) -> dict:
    return {prefix + k: v for k, v in numbers.items()}


def _crossover(clean: pd.DataFrame) -> dict:
    """Where the prefill costs as much as the decode steps, measured (``cross``), and the least-squares line that only
    describes the points (``fit``), with their numbers."""
    # time ~ (decode steps, independent of the prompt) + (prefill, growing with it): where do the two cost the same?
    # Taken from the measured points (the line is only a description: it misses a convex curve).
    fit = linear_fit(clean["input_len"], clean["time_s_median"], relative=True)
    fit_crossover = fit["intercept"] / fit["slope"]
    cross = measured_crossover(clean["input_len"], clean["time_s_median"])
    n, t = clean["input_len"].to_numpy(dtype=float), clean["time_s_median"].to_numpy()
    early_ms = 1000 * cross["prefill_low"] / (cross["low"] - n[0]) if cross["low"] > n[0] else float("nan")
    late_ms = 1000 * (t[-1] - t[-2]) / (n[-1] - n[-2])
    numbers = {"DecodeS": f"{cross['decode_s']:.3f}", "CrossFound": int(cross["found"]), "CrossLow": cross["low"],
               "CrossHigh": cross["high"], "CrossPrefillLow": f"{cross['prefill_low']:.3f}",
               "CrossPrefillHigh": f"{cross['prefill_high']:.3f}",
               "Crossover": int(round(cross["crossover"])) if cross["found"] else "--",
               "FixedS": fit["intercept"], "PerTokenMs": fit["slope"] * 1000,
               "FitMiss": f"{fit['max_rel_residual']:.0%}", "FitCrossover": int(round(fit_crossover)),
               "EarlyMs": f"{early_ms:.2f}", "LateMs": f"{late_ms:.2f}", "Steepens": int(late_ms > early_ms),
               "FitBelow": int(cross["found"] and fit_crossover < cross["crossover"]),
               "FitOutside": int(fit_crossover > n[-1])}
    return {"fit": fit, "fit_crossover": fit_crossover, "cross": cross, "steepens": bool(late_ms > early_ms),
            "numbers": numbers}


def _doublings(clean: pd.DataFrame, crossover: float) -> dict:
    """What one doubling of the input does to the time below and above ``crossover`` (a pair of neighbours on the side
    of its geometric mean), with ``AboveRises`` and ``SteeperAbove``."""
    n, t = clean["input_len"].to_numpy(dtype=float), clean["time_s_median"].to_numpy()
    pairs = [(n0, n1, (t1 / t0) ** (1 / math.log2(n1 / n0))) for n0, n1, t0, t1 in zip(n, n[1:], t, t[1:])]
    below = [p for p in pairs if math.sqrt(p[0] * p[1]) < crossover]
    above = [p for p in pairs if math.sqrt(p[0] * p[1]) >= crossover]

    def side(name, part, end, at):
        ratios = [r for _, _, r in part]
        return {f"{name}Count": len(part), f"{name}{end}": int(at(part)) if part else "--",
                f"{name}Min": f"{min(ratios) - 1:+.0%}" if part else "--",
                f"{name}Max": f"{max(ratios) - 1:+.0%}" if part else "--"}

    steeper = bool(below and above and max(r for *_, r in below) < min(r for *_, r in above))
    return {**side("Below", below, "To", lambda p: max(n1 for _, n1, _ in p)),
            **side("Above", above, "From", lambda p: min(n0 for n0, _, _ in p)),
            "AboveRises": int(bool(above) and min(r for *_, r in above) > 1), "SteeperAbove": int(steeper)}


def _total_throughput(clean: pd.DataFrame, batch_size: int) -> dict:
    """Throughput counting prompt tokens: at the shortest input, its peak and the longest, and whether it falls after
    the peak beyond the rows' min-max ranges."""
    short, long = clean.iloc[0], clean.iloc[-1]
    peak = clean.loc[clean["total_tok_s_median"].idxmax()]
    tokens = batch_size * (clean["input_len"] + clean["new_tokens"])
    falls = (peak["input_len"] < long["input_len"]
             and tokens[peak.name] / clean["time_s_max"][peak.name] > tokens.iloc[-1] / long["time_s_min"])
    at = 0 if peak["input_len"] == short["input_len"] else 2 if peak["input_len"] == long["input_len"] else 1
    return {"TotalShort": round(float(short["total_tok_s_median"])),
            "TotalPeak": round(float(peak["total_tok_s_median"])),
            "TotalPeakLen": int(peak["input_len"]), "TotalLong": round(float(long["total_tok_s_median"])),
            "TotalPeakAt": at, "TotalFalls": int(falls)}


def _cutoff_and_oom(rows: list[dict], last) -> dict:
    """The lengths not run past the time cap (after ``last``, the longest measured row) and those out of memory."""
    oom = [r["input_len"] for r in rows if r["status"] == "oom"]
    not_run = [r["input_len"] for r in rows if r["status"] == STATUS_NOT_RUN]
    return {"NotRunCount": len(not_run), "NotRunFrom": min(not_run, default="--"),
            "NotRunTo": max(not_run, default="--"), "LastLen": int(last["input_len"]),
            "LastS": f"{last['time_s_median']:.1f}", "OomCount": len(oom), "OomFrom": min(oom, default="--")}


def input_numbers(rows: list[dict], batch_size: int, prediction: memory.GenerationPrediction,
                   torch_card=None) -> dict:
    """What the input-length sweep (§1.3.1) shows: ``numbers`` (``genIn...``) and the values the notebook's checks need,
    from the points not flagged as noise."""
    ok = ok_frame(rows, "input_len")
    ok["total_tok_s_median"] = batch_size * (ok["input_len"] + ok["new_tokens"]) / ok["time_s_median"]
    clean = ok[~ok["noise"]].reset_index(drop=True)
    short, long = clean.iloc[0], clean.iloc[-1]
    growth = long["time_s_median"] / short["time_s_median"]
    c = _crossover(clean)
    cross = c["cross"]
    # the doublings split where the measured crossover is, or the line's when no measured length reaches it
    doublings = _doublings(clean, cross["crossover"] if cross["found"] else c["fit_crossover"])
    spread = ((ok["time_s_max"] - ok["time_s_min"]) / ok["time_s_median"]).max()
    new_tokens = int(ok["new_tokens"].iloc[0])
    numbers = dict(genInShortLen=int(short["input_len"]), genInLongLen=int(long["input_len"]), genInGrowth=growth,
                   genInShortTput=round(float(short["throughput_tok_s"])),  # as the table prints them
                   genInLongTput=round(float(long["throughput_tok_s"])), genInSpread=f"{spread:.0%}",
                   genInNewTokens=new_tokens, genInMeasuredCount=len(ok), genInSweptCount=len(rows),
                   **_prefixed("genIn", {**_noise(ok, "input_len"), **c["numbers"], **doublings,
                                         **_total_throughput(clean, batch_size), **_cutoff_and_oom(rows, ok.iloc[-1]),
                                         **figure_marks(rows, "input_len", prediction)}),
                   **prediction_numbers(prediction, [r["input_len"] for r in rows], new_tokens, torch_card))
    return {"numbers": numbers, "growth": growth, "fit": c["fit"],
            "oom_inputs": [r["input_len"] for r in rows if r["status"] == "oom"],
            "noise": [int(x) for x in ok.loc[ok["noise"], "input_len"]],
            "clean_lengths": [int(x) for x in clean["input_len"]], "steeper_above": bool(doublings["SteeperAbove"]),
            "crossover": cross, "fit_crossover": c["fit_crossover"], "steepens": c["steepens"]}


def measured_crossover(lengths, times) -> dict:
    """Where an input sweep's prefill (its time minus ``decode_s``, the time at the shortest input) reaches
    ``decode_s``: interpolated between the two measured lengths that bracket it (``low``, ``high``); ``found`` False
    when no length reaches it."""
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


def card_numbers(prediction: memory.GenerationPrediction) -> dict:
    """The memory the prediction column is set against: nvidia-smi's total of the smallest listed card sold as that size
    (MiB, GB, GiB), the other listed cards, the datasheet's GiB."""
    card, gpu_gb = prediction.card, prediction.gpu_gb
    listed = memory.cards_sold_as(gpu_gb)
    return {"genPredictListed": int(bool(listed)), "genPredictCard": card.card, "genPredictCardLabel": card.label,
            "genPredictCardMiB": card.total_mib, "genPredictCardGB": f"{card.total_bytes / memory.GB:.2f}",
            "genPredictCardGiB": f"{card.total_bytes / memory.GiB:.2f}", "genPredictOtherCount": len(listed[1:]),
            "genPredictOthers": "; ".join(c.label for c in listed[1:]) or "--",
            "genPredictDatasheetGiB": f"{gpu_gb * memory.GB / memory.GiB:.2f}"}


RESERVE_GB = 2.0  # §1.2.1's fixed reserve for the CUDA context, allocator slack and temporaries


def card_torch_bytes(gpu_gb: float, rows: list[dict] | None = None, name: str = "02_generation_benchmarks"):
    """``(bytes, device name, where)`` of the total memory torch reported on a card sold as ``gpu_gb`` GB, from ``rows``
    else the GPU windows' rows of ``name``; None without. torch's total is what an allocation can reach (nvidia-smi's
    MiB count a little more)."""
    from helpers.results import gpu_result_folders, latest_ok_rows

    sources = [(rows or [], "this profile's rows")] + [
        (latest_ok_rows(folder / f"{name}.jsonl"), f"results/{folder.name}") for folder in gpu_result_folders(name)]
    for found, where in sources:
        for row in found:
            device = str(row.get("device_name", ""))
            if (row.get("device") == "cuda" and row.get("device_memory_bytes")
                    and any(c.card.split()[0] in device for c in memory.cards_sold_as(gpu_gb))):
                return int(row["device_memory_bytes"]), device, where
    return None


def prediction_numbers(prediction: memory.GenerationPrediction, input_lens: list[int], new_tokens: int,
                       torch_card=None) -> dict:
    """Where the prediction exceeds the card's memory (``torch_card``'s bytes, else nvidia-smi's total), or how close
    the longest input comes, against the datasheet figure too, and whether the headroom covers §1.2.1's
    :data:`RESERVE_GB`."""
    limit = torch_card[0] if torch_card else prediction.card.total_bytes
    over = [n for n in input_lens if prediction.bytes(n, new_tokens) > limit]
    longest = max(input_lens)
    headroom = limit - prediction.bytes(longest, new_tokens)
    return {"genInPredictOver": int(bool(over)), "genInPredictFrom": min(over, default="--"),
            "genInPredictFromGB": f"{prediction.gb(min(over), new_tokens):.1f}" if over else "--",
            "genInPredictLongest": longest, "genInPredictLongestGB": f"{prediction.gb(longest, new_tokens):.1f}",
            "genInPredictOverDatasheet": int(prediction.over_datasheet(longest, new_tokens)),
            "genInPredictTorch": int(bool(torch_card)), "genInLimitBytes": limit,
            "genInLimitGB": f"{limit / memory.GB:.2f}" if torch_card else f"{limit / memory.GB:.1f}",
            "genInTorchDevice": torch_card[1] if torch_card else "--",
            "genInTorchWhere": torch_card[2] if torch_card else "--",
            "genInHeadroomGB": f"{headroom / memory.GB:.2f}", "genInHeadroomPct": f"{headroom / limit:.1%}",
            "genInReserveOk": int(headroom >= RESERVE_GB * memory.GB), "genReserveGB": f"{RESERVE_GB:g}"}


def _marginal_steps(clean: pd.DataFrame) -> dict:
    """The marginal cost of a decode step over the first doubling from 8 new tokens and over the last, with the ranges
    the rows' min-max allow (``Dearer``/``Cheaper`` beyond them)."""
    n, t = clean["new_tokens"].to_numpy(), clean["time_s_median"].to_numpy()
    t_min, t_max = clean["time_s_min"].to_numpy(), clean["time_s_max"].to_numpy()
    width = n[1:] - n[:-1]
    marginal, low, high = (t[1:] - t[:-1]) / width, (t_min[1:] - t_max[:-1]) / width, (t_max[1:] - t_min[:-1]) / width
    early = next(i for i in range(len(marginal)) if n[i] >= 8 or i == len(marginal) - 1)
    late = len(marginal) - 1
    out = {"Dearer": int(low[late] > high[early]), "Cheaper": int(high[late] < low[early])}
    for name, i in (("Early", early), ("Late", late)):
        out.update({f"{name}From": int(n[i]), f"{name}To": int(n[i + 1]), f"{name}Ms": f"{marginal[i] * 1000:.1f}",
                    f"{name}LowMs": f"{low[i] * 1000:.1f}", f"{name}HighMs": f"{high[i] * 1000:.1f}"})
    return out


def output_numbers(rows: list[dict], prediction: memory.GenerationPrediction | None = None) -> dict:
    """What the output-length sweep (§1.3.2) shows: ``numbers`` (``genOut...``: the fit, the marginal step, the
    throughput's peak; with ``prediction`` the figure's marks), from the points not flagged as noise."""
    ok = ok_frame(rows, "new_tokens")
    clean = ok[~ok["noise"]].reset_index(drop=True)
    n, t_min, t_max = clean["new_tokens"].to_numpy(), clean["time_s_min"].to_numpy(), clean["time_s_max"].to_numpy()
    fit = linear_fit(n, clean["time_s_median"].to_numpy(), relative=True)
    steps = _marginal_steps(clean)
    tput, t_mean = clean["throughput_tok_s"].to_numpy(), clean["time_s_mean"].to_numpy()  # the tables' throughput
    tput_low, tput_high = tput * t_mean / t_max, tput * t_mean / t_min  # the same tokens over the slowest/fastest batch
    top = int(tput.argmax())
    at = 2 if top == len(tput) - 1 else 0 if top == 0 else 1
    falls = bool(at < 2 and tput_low[top] > tput_high[-1])
    numbers = {**_noise(ok, "new_tokens"), "Linear": int(fit["max_rel_residual"] <= 0.25),
               "PrefillMs": fit["intercept"] * 1000, "StepMs": fit["slope"] * 1000,
               "FitMiss": f"{fit['max_rel_residual']:.0%}", **steps, "TputFirst": round(float(tput[0])),
               "TputPeak": round(float(tput[top])), "TputLast": round(float(tput[-1])), "PeakLen": int(n[top]),
               "PeakAt": at, "Falls": int(falls), "FirstLen": int(n[0]), "LastLen": int(n[-1]),
               "InputLen": int(ok["input_len"].iloc[0])}
    if prediction is not None:
        numbers.update(figure_marks(rows, "new_tokens", prediction))
    return {"numbers": _prefixed("genOut", numbers), "fit": fit, "dearer": bool(steps["Dearer"]), "falls": falls,
            "rises": bool(tput_low[top] > tput_high[0]), "noise": [int(x) for x in ok.loc[ok["noise"], "new_tokens"]]}


def compare_row(name: str, note: str, model, row: dict, kv_bytes: int) -> dict:
    """One model of §1.3.3: its shape, the bytes a decode step reads (weights + ``kv_bytes``) and its time (or
    "OOM")."""
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
    """``comparable(i, j)``: the two models' min-max ranges do not overlap."""
    rows = measured.to_dict("records")
    return lambda i, j: separated(rows[i], rows[j], "t_min", "t_max")


def _value(value) -> str:
    """A feature's value in prose: counts with thousands separators, measured quantities to three figures."""
    return f"{int(value):,}" if float(value).is_integer() else f"{value:.3g}"


def ordering(measured: pd.DataFrame, feature: str) -> dict:
    """Whether ``feature`` alone orders the models as their times: ``explains`` 2 (every pair), 1 (every pair beyond the
    noise) or 0, with the pair that breaks it."""
    beyond = ordering_violation(measured[feature], measured["time"], comparable=_separated_pairs(measured))
    within = ordering_violation(measured[feature], measured["time"])
    pair = beyond if beyond is not None else within
    if pair is None:
        return {"explains": 2}
    a, b = measured.iloc[pair[0]], measured.iloc[pair[1]]
    return {"explains": 0 if beyond is not None else 1, "a": a["model"], "b": b["model"],
            "a_value": _value(a[feature]), "b_value": _value(b[feature]), "a_time": f"{a['time']:.3g}",
            "b_time": f"{b['time']:.3g}"}


def feature_orderings(measured: pd.DataFrame, features: list[str]) -> dict:
    """Per feature its :func:`ordering`, the features that explain every separated pair, and the pair counts."""
    comparable = _separated_pairs(measured)
    pairs = [(i, j) for i in range(len(measured)) for j in range(i + 1, len(measured))]
    verdicts = {f: ordering(measured, f) for f in features}
    return {"verdicts": verdicts, "explaining": [f for f in features if verdicts[f]["explains"]],
            "n_separated": sum(comparable(i, j) for i, j in pairs), "n_pairs": len(pairs)}


def run_lengths(rows: list[dict], key: str) -> dict:
    """The shortest and longest lengths of a sweep that were run, and of those not run (over the time cap)."""
    done = [r[key] for r in rows if r["status"] != STATUS_NOT_RUN]
    skipped = [r[key] for r in rows if r["status"] == STATUS_NOT_RUN]
    return {"first": min(done), "last": max(done), "skipped": len(skipped), "skipped_first": min(skipped, default=None),
            "skipped_last": max(skipped, default=None)}


def measured_by_time(compare: pd.DataFrame) -> pd.DataFrame:
    """The measured (not OOM) models of the comparison, fastest first, with their median time as ``time``."""
    measured = compare[compare["Time, median (s)"] != "OOM"].copy()
    measured["time"] = measured["Time, median (s)"].astype(float)
    return measured.sort_values("time").reset_index(drop=True)


def overlaps(measured: pd.DataFrame) -> list[str]:
    """The neighbours in the time ordering ("a and b") whose batch-to-batch (min-max) ranges overlap."""
    rows = measured.to_dict("records")
    return [f"{a['model']} and {b['model']}" for a, b in zip(rows, rows[1:]) if not separated(a, b, "t_min", "t_max")]
