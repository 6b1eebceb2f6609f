import os

import matplotlib.pyplot as plt
import pandas as pd
import pytest
import torch

from helpers import hardware, paths, plotting, tables, timing


def test_paths_do_not_depend_on_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert (paths.CONFIGS_DIR / "Qwen__Qwen3-8B.json").exists()
    assert (paths.NOTEBOOKS_DIR).is_dir()


def test_output_root_redirect(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBOOK_OUTPUT_ROOT", str(tmp_path))
    assert paths.figures_dir("cpu") == tmp_path / "figures" / "cpu"
    assert paths.generated_dir("gpu") == tmp_path / "report" / "generated" / "gpu"


def test_device_info_cpu():
    info = hardware.device_info("cpu")
    assert info["device"] == "cpu" and info["cpu_threads"] >= 1 and info["device_name"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU error")
def test_gpu_profile_without_gpu_is_a_clear_error():
    with pytest.raises(RuntimeError, match="no CUDA GPU"):
        hardware.resolve_device("cuda")
    with pytest.raises(ValueError):
        hardware.resolve_device("tpu")
    assert hardware.resolve_device("auto").type == "cpu"


def test_measure_warms_up_then_repeats():
    calls = []
    result = timing.measure(lambda: calls.append(1), warmup=3, repeats=4)
    assert len(calls) == 7 and len(result.samples) == 4
    assert result.mean >= 0 and result.std >= 0 and result.median >= 0
    assert set(result.as_dict()) == {"time_s_mean", "time_s_std", "time_s_median", "time_s_samples"}


def test_measure_uses_given_clock_and_validates():
    ticks = iter(range(100))
    result = timing.measure(lambda: None, warmup=0, repeats=3, clock=lambda: float(next(ticks)))
    assert result.samples == [1.0, 1.0, 1.0] and result.std == 0.0
    with pytest.raises(ValueError):
        timing.measure(lambda: None, repeats=0)
    with pytest.raises(ValueError, match="CUDA"):
        timing.measure(lambda: None, device="cpu", cuda_events=True)
    with timing.Timer("cpu") as t:
        sum(range(1000))
    assert t.seconds > 0


def test_figures_are_reproducible(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBOOK_OUTPUT_ROOT", str(tmp_path))
    plotting.set_theme()
    outputs = []
    for _ in range(2):
        fig, ax = plt.subplots(figsize=plotting.figsize())
        ax.plot([1, 2, 3], [1, 4, 9])
        outputs.append(plotting.save_figure(fig, "square", "unit").read_bytes())
        plt.close(fig)
    assert outputs[0] == outputs[1] and outputs[0].startswith(b"%PDF")
    assert (tmp_path / "figures" / "unit" / "square.png").exists()
    with pytest.raises(ValueError):
        plotting.save_figure(fig, "a/b", "unit")


def test_booktabs_table_and_numbers(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBOOK_OUTPUT_ROOT", str(tmp_path))
    df = pd.DataFrame({"model": ["Qwen/Qwen3_8B"], "tokens": [12345], "time (s)": [0.012345], "ok": [None]})
    path = tables.write_table(df, "t1", "unit", caption="50% of it")
    tex = path.read_text()
    assert "\\toprule" in tex and "\\midrule" in tex and "\\bottomrule" in tex
    assert "Qwen/Qwen3\\_8B" in tex and "12{,}345" in tex and "0.0123" in tex and "--" in tex
    assert (path.parent / "t1.caption.tex").read_text().strip() == "\\caption{50\\% of it}"
    numbers = tables.write_numbers("01_x", "unit", {"a": 3, "b": 0.5, "c": 1.5e-7, "d": "x_y"}).read_text()
    assert "\\wbset{a}{3}" in numbers and "\\wbset{b}{0.5}" in numbers and "10^{-7}" in numbers and "x\\_y" in numbers
    with pytest.raises(ValueError):
        tables.write_numbers("01_x", "unit", {"bad key": 1})


def test_table_counts_stay_integers_and_large_values_plain():
    """Regression: a row of mixed dtypes turned context lengths into floats, printed 1.02e+03 and 4.1e+03 (4096), and
    1240 tokens/s printed 1.24e+03."""
    df = pd.DataFrame({"context": [1024, 4096], "speedup": [1.234, 0.5], "tok/s": [1241.7, 88.12]})
    tex = tables.table_tex(df)
    assert "1{,}024 & 1.23 & 1{,}242" in tex and "4{,}096 & 0.5 & 88.1" in tex and "e+" not in tex
    assert "2.00" in tables.table_tex(pd.DataFrame({"x": [2.0]}), float_format="{:.2f}")  # fixed formats untouched


def test_headers_and_captions_set_the_handouts_symbols_as_maths():
    """Regression (a review of every table): headers printed T\\_V/T\\_T, gamma and tau as code names."""
    assert tables.typeset("T_V(gamma)/T_T") == r"$T_V(\gamma)/T_T$"
    # a factor's x is a times sign in the numbers' sentences; a draft's shape keeps its x
    assert tables.typeset("rounds 1.15x cheaper than draft-4x144") == r"rounds 1.15$\times$ cheaper than draft-4x144"
    assert tables.format_number("best at gamma 7 (1.50x)") == r"best at $\gamma$ 7 (1.50$\times$)"
    assert tables.typeset("tau from a_d, n >= 2") == r"$\tau$ from $a_d$, n $\geq$ 2"
    assert tables.typeset("Eq.5 gamma at 50%") == r"Eq.5 $\gamma$ at 50\%"
    # names that only contain a symbol stay text, escaped
    assert tables.typeset("gamma_key c_round T_V_s alphas") == r"gamma\_key c\_round T\_V\_s alphas"
    header = tables.table_tex(pd.DataFrame({"alpha": [0.5], "T_V/T_T": [1.2], "c": [0.1]})).splitlines()[2]
    assert header == r"$\alpha$ & $T_V/T_T$ & $c$ \\"  # a header that is just c is the cost ratio


def test_counts_agree_with_their_nouns():
    """Regression: captions said "1 thread(s)" and "1 layer(s)"."""
    assert tables.count(1, "thread") == "1 thread" and tables.count(2, "thread") == "2 threads"
    assert tables.count(0, "KV head") == "0 KV heads" and tables.count(3, "batch", "batches") == "3 batches"


def test_show_dashes_missing_cells_and_words_code_headers():
    """A notebook's displayed table: no NaN, code names as words, the handout's symbols and the index kept."""
    df = pd.DataFrame({"acceptance_rate": [0.12345, float("nan")], "T_V": [1.0, 2.0], "draft": ["a", "b"]})
    shown = tables.show(df)
    text, html = repr(shown), shown._repr_html_()
    assert "NaN" not in text and "NaN" not in html and tables.NOT_APPLICABLE in text and tables.NOT_APPLICABLE in html
    assert "acceptance rate" in text and "T_V" in text and "0.123" in text and "0.1235" not in text
    assert list(shown.df.columns) == ["acceptance rate", "T_V", "draft"] and list(df.columns)[0] == "acceptance_rate"
    pivot = pd.DataFrame({"s": ["x", "y"], "b": [1, 2], "v": [0.5, 1.25]}).pivot(index="s", columns="b", values="v")
    assert "1.2" in repr(tables.show(pivot, 1)) and tables.NOT_APPLICABLE in repr(tables.show(pivot, 1))
    # regression: notebooks showed pandas' row numbers beside every table; index=False drops them, not a pivot's rows
    numbered = pd.DataFrame({"draft": ["a", "b"], "tau": [1.0, 2.0]}, index=[7, 8])
    for shown in (repr(tables.show(numbered, index=False)), tables.show(numbered, index=False)._repr_html_()):
        assert "7" not in shown and "8" not in shown and "draft" in shown
    assert "7" in repr(tables.show(numbered))  # the default keeps them (notebooks 09 and 11 check their output)
    kept = repr(tables.show(pivot, 1, index=False))
    assert kept.split()[0] == "s" and "x" in kept and "y" in kept


def test_relative_spread_is_robust_to_one_outlier():
    assert timing.relative_spread([1.0]) == 0.0
    assert timing.relative_spread([1.0, 1.0, 1.0]) == 0.0
    assert timing.relative_spread([0.9, 1.0, 1.1]) == pytest.approx(0.1)  # three samples: half the range / median
    # the disturbed 64-token point of an old sweep ([0.338, 0.106, 0.125]) is far too spread ...
    assert timing.relative_spread([0.338, 0.106, 0.125]) > 0.5
    # ... but one outlier among agreeing samples barely moves it
    assert timing.relative_spread([0.338, 0.106, 0.125, 0.11, 0.12, 0.115, 0.108]) < 0.15
    assert timing.Timing([0.9, 1.0, 1.1]).spread == pytest.approx(0.1)
    with pytest.raises(ValueError, match="positive"):
        timing.relative_spread([0.0, 0.0])


def _fake_clock(durations: dict, calls: list):
    """A clock and functions whose k-th call of ``key`` "takes" ``durations[key][k]`` seconds (last value repeats)."""
    now = [0.0]

    def make(key):
        def fn():
            k = sum(1 for c in calls if c == key)
            calls.append(key)
            seq = durations[key]
            now[0] += seq[min(k, len(seq) - 1)]
        return fn

    return {key: make(key) for key in durations}, (lambda: now[0])


def test_measure_interleaved_alternates_order_and_warms_up():
    calls = []
    fns, clock = _fake_clock({"a": [1.0], "b": [2.0], "c": [3.0]}, calls)
    result = timing.measure_interleaved(fns, repeats=3, warmup=1, clock=clock)
    assert calls == ["a", "b", "c"] + ["a", "b", "c", "c", "b", "a", "a", "b", "c"]  # warm-ups, then rounds
    assert {key: t.samples for key, t in result.items()} == {"a": [1.0] * 3, "b": [2.0] * 3, "c": [3.0] * 3}


def test_measure_interleaved_repeats_noisy_points_until_they_settle_or_the_cap():
    calls = []
    # "noisy" is disturbed once, then steady; "wild" never settles; "calm" is steady from the start
    fns, clock = _fake_clock({"calm": [1.0], "noisy": [3.0, 1.0],
                              "wild": [1.0, 2.0, 4.0, 8.0]}, calls)
    seen = []
    result = timing.measure_interleaved(fns, repeats=3, max_repeats=9, max_spread=0.1, clock=clock, on_call=seen.append)
    assert len(result["calm"].samples) == 3
    assert 3 < len(result["noisy"].samples) < 9 and result["noisy"].spread <= 0.1 and result["noisy"].median == 1.0
    assert len(result["wild"].samples) == 9 and result["wild"].spread > 0.1  # capped
    assert seen == calls


def test_measure_interleaved_needs_more_and_validation():
    calls = []
    fns, clock = _fake_clock({"a": [1.0], "b": [1.0]}, calls)
    result = timing.measure_interleaved(fns, repeats=2, max_repeats=5, clock=clock,
                                        needs_more=lambda samples: ["b"] if len(samples["b"]) < 4 else [])
    assert len(result["a"].samples) == 2 and len(result["b"].samples) == 4
    with pytest.raises(ValueError, match="max_repeats"):
        timing.measure_interleaved(fns, repeats=3, max_repeats=2)
    with pytest.raises(ValueError, match="repeats"):
        timing.measure_interleaved(fns, repeats=0)
    with pytest.raises(ValueError, match="max_spread"):
        timing.measure_interleaved(fns, max_spread=0)
    with pytest.raises(ValueError, match="CUDA"):
        timing.measure_interleaved(fns, device="cpu", cuda_events=True)
