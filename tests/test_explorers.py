"""The explorers' computing parts (helpers.explorers): token provenance, Eq. 5 curves, the batching simulation, KV
sizes and the live decode-step measurement; and that every explorer widget builds."""
import ipywidgets as widgets
import numpy as np
import pytest
import torch

from helpers import memory
from helpers.explorers import (ACCEPTED, BONUS, CORRECTED, batching_explorer, kv_cache_explorer, kv_cache_sizes,
                               measure_decode_step, speculative_explorer, speedup_curve, speedup_explorer, token_pieces,
                               token_provenance, tokens_html, verify_line)
from helpers.batching.simulate import (compare_policies, output_lengths, poisson_arrivals, simulate_batching,
                                      step_time_function)
from helpers.explorers.specdec import DEFAULT_PROMPT_ID, default_prompt, result_html, rounds_table, run_speculative
from helpers.models import load_cpu_tokenizer, model_config
from helpers.prompts import load_prompts
from helpers.specdec import speculative_generate
from helpers.specdec.analysis import linear_verify_cost, optimal_gamma, predicted_speedup


# ------------------------------------------------------------------------------------------------- notebook 07


def test_token_provenance_rounds():
    # round 1: 2 of 3 accepted, then a correction; round 2: none accepted; round 3: all 3, then the bonus
    provenance = token_provenance([2, 0, 3], [3, 3, 3])
    assert provenance == [(1, ACCEPTED), (1, ACCEPTED), (1, CORRECTED), (2, CORRECTED),
                          (3, ACCEPTED), (3, ACCEPTED), (3, ACCEPTED), (3, BONUS)]
    assert token_provenance([2, 0, 3], [3, 3, 3], n_tokens=5) == provenance[:5]  # EOS inside round 3
    assert token_provenance([0], [0]) == [(1, BONUS)]  # a last round with no budget left to draft


@pytest.mark.parametrize("accepted, gammas, n_tokens", [([4], [3], None), ([1, 1], [2], None), ([1], [2], 3)])
def test_token_provenance_rejects_inconsistent_counts(accepted, gammas, n_tokens):
    with pytest.raises(ValueError):
        token_provenance(accepted, gammas, n_tokens)


def test_token_provenance_matches_a_real_generation(peaked_pair):
    target, draft = peaked_pair
    ids = torch.tensor([[1, 5, 9, 2]])
    for gamma in (1, 3, 5):
        result = speculative_generate(target, draft, ids, 23, gamma, eos_token_id=-1)
        stats = result.stats
        provenance = token_provenance(stats.accepted_per_round, stats.gamma_per_round, len(result.tokens))
        assert len(provenance) == len(result.tokens) == 23
        assert sum(kind == ACCEPTED for _, kind in provenance) == stats.accepted
        assert sum(kind == CORRECTED for _, kind in provenance) == stats.rejections
        assert provenance[-1][0] == stats.rounds
        assert rounds_table(stats.accepted_per_round, stats.gamma_per_round)["tokens"].sum() == 23


def test_token_pieces_join_to_the_decoded_text():
    tokenizer = load_cpu_tokenizer()
    prompt = tokenizer("def f(x):\n")["input_ids"]
    ids = tokenizer("    return x + 'é'  # ünïcode\n\tpass")["input_ids"]
    pieces = token_pieces(tokenizer, ids, prompt)
    assert len(pieces) == len(ids)
    assert "".join(pieces) == tokenizer.decode(prompt + ids)[len(tokenizer.decode(prompt)):]


def test_tokens_html_marks_every_token_and_shows_whitespace():
    pieces = ["if", " x <", " 1:\n", "\treturn"]
    provenance = token_provenance([2, 0], [2, 2])  # accepted, accepted, bonus; then a correction
    page = tokens_html(pieces, provenance, prompt="def f(x):\n")
    assert [page.count(f'class="tok {kind}"') for kind in (ACCEPTED, BONUS, CORRECTED)] == [2, 1, 1]
    assert page.count("↵") == 2 and "⇥" in page  # the prompt's newline and the token's
    assert "x &lt;" in page and "x <" not in page  # escaped
    assert 'title="round 2: ' in page
    with pytest.raises(ValueError):
        tokens_html(pieces[:3], provenance)


def test_run_speculative_and_its_page():
    run = run_speculative("def add(a, b):\n", "draft", 3, 0.0, 16)
    assert run["identical"] and len(run["tokens"]) == len(run["pieces"]) <= 16
    page = result_html(run, counter=7)
    assert 'data-run="7"' in page and "speedup" in page and "tok/s" in page
    assert page.count('class="tok ') >= len(run["tokens"])
    with pytest.raises(ValueError, match="empty"):
        run_speculative("", "draft", 3)
    with pytest.raises(ValueError, match="unknown draft"):
        run_speculative("x = 1", "draft-9l", 3)


def test_default_prompt_is_a_heldout_code_prompt():
    assert default_prompt() == next(row["prompt"] for row in load_prompts("cpu") if row["id"] == DEFAULT_PROMPT_ID)


def test_default_prompt_is_continued_without_a_loop_and_a_loop_is_flagged():
    """Regression: the explorer's showcase emitted a column of "#" lines and reported it as a 2.36x speedup."""
    from helpers.stats import REPETITIVE_SHARE, repeated_ngram_share

    run = run_speculative(default_prompt(), "draft", 4, 0.0, 48)
    assert repeated_ngram_share(run["tokens"]) <= REPETITIVE_SHARE
    assert "repetitive output" not in result_html(run)
    looped = {**run, "tokens": [7, 8, 9] * 16}  # the same run, as if the output had been a loop
    assert "repetitive output" in result_html(looped).split('class="legend"')[0]  # in the summary, by the speedup


def test_speculative_explorer_builds_without_running():
    explorer = speculative_explorer("x = 1\n", run=False)
    assert isinstance(explorer, widgets.VBox)
    assert "press Generate" in explorer.children[-1].value


def test_the_explorer_page_is_styled_per_kind_and_names_its_run():
    """The page is built from a table of CSS rules and small tags (no long HTML strings): every token kind has its
    colours, and the outer div carries the class and run number the browser test waits for."""
    from helpers.explorers.specdec import CSS, STYLES, _page, _tag

    for kind, (background, colour, border) in STYLES.items():
        assert f".wb-explorer .tok.{kind} {{background: {background}; color: {colour}; border-bottom: {border}}}" in CSS
    assert CSS.startswith("<style>") and CSS.endswith("</style>") and ".wb-explorer td, .wb-explorer th {" in CSS
    assert _tag("span", "x", cls="tok bonus", title="t") == '<span class="tok bonus" title="t">x</span>'
    assert _page(3, "body").startswith('<div class="wb-explorer explorer-07" data-run="3"><style>')


# ------------------------------------------------------------------------------------------------- notebook 09


def test_speedup_curve_is_eq5():
    curve = speedup_curve(0.8, 0.05, 1.1, 0.02, range(1, 11))
    verify = 1.1 + 0.02 * (np.arange(1, 11) - 1)
    assert np.allclose(curve["speedup"], predicted_speedup(np.arange(1, 11), 0.8, 0.05, verify))
    assert np.allclose(curve["round_cost"], np.arange(1, 11) * 0.05 + verify)
    line = linear_verify_cost([1, 2], [1.1, 1.12])
    best = curve.loc[curve["speedup"].idxmax()]
    assert (int(best["gamma"]), best["speedup"]) == pytest.approx(optimal_gamma(0.8, 0.05, line, range(1, 11)))
    with pytest.raises(ValueError):
        speedup_curve(0.8, 0.05, 0.1, -0.5, range(1, 5))  # T_V/T_T would turn negative


def test_the_reference_curve_uses_the_analysis_verify_cost_floor_included():
    gammas, ratios = [2, 3, 4, 6], [1.30, 1.26, 1.40, 1.52]  # a line through them dips below 1.26 at gamma 1-2
    at_1, slope = verify_line(gammas, ratios)
    curve = speedup_curve(0.8, 0.05, at_1, slope, range(1, 9), verify_floor=min(ratios))
    analysis = linear_verify_cost(gammas, ratios)
    assert at_1 < min(ratios) and np.allclose(curve["verify_ratio"], [analysis(g) for g in range(1, 9)])


def test_verify_line():
    assert verify_line([1, 2, 4], [1.1, 1.2, 1.4]) == pytest.approx((1.1, 0.1))
    assert verify_line([3], [1.3]) == (1.3, 0.0)


def test_speedup_explorer_builds():
    measured = {"09": __import__("pandas").DataFrame({"gamma": [1, 2, 4], "speedup": [1.2, 1.4, 1.5]})}
    assert isinstance(speedup_explorer(measured, alpha=0.8, c=0.07, verify_ratio=1.05, verify_slope=0.01), widgets.VBox)


# ------------------------------------------------------------------------------------------------- notebook 05


def test_workload_draws():
    assert output_lengths(5, 32, 0.0) == [32] * 5
    lengths = output_lengths(4000, 32, 1.0, max_output=10_000)
    assert abs(np.mean(lengths) / 32 - 1) < 0.1 and min(lengths) >= 1
    assert poisson_arrivals(3, 0.0) == [0.0] * 3
    arrivals = poisson_arrivals(2000, 50.0)
    assert arrivals[0] == 0 and np.all(np.diff(arrivals) >= 0) and abs(arrivals[-1] / 2000 * 50 - 1) < 0.1


def test_step_time_function_interpolates_measured_steps():
    step = step_time_function({1: 0.01, 4: 0.016, 8: 0.024})
    assert step(1) == 0.01 and step(2) == pytest.approx(0.012) and step(16) == pytest.approx(0.04)
    assert step_time_function(None)(5) == 1.0


def _check_run(run, lengths, batch_size):
    timeline = run["timeline"]
    assert timeline["useful"].sum() == sum(lengths) == run["tokens"]  # every token exactly once
    assert timeline["rows"].max() <= batch_size and (timeline["useful"] <= timeline["rows"]).all()
    assert not np.isnan(run["finish"]).any()


def test_uniform_offline_workload_policies_agree():
    lengths, arrivals = [16] * 8, [0.0] * 8
    runs = compare_policies(lengths, arrivals, batch_size=4)
    for run in runs.values():
        _check_run(run, lengths, 4)
        assert run["wasted"] == 0 and run["steps"] == 32
    assert runs["static"]["makespan"] == runs["continuous"]["makespan"] == 32


def test_high_variance_favours_continuous_batching():
    lengths, arrivals = output_lengths(32, 32, 1.0, seed=3), [0.0] * 32
    runs = compare_policies(lengths, arrivals, batch_size=8, step_seconds={1: 0.006, 8: 0.009})
    for run in runs.values():
        _check_run(run, lengths, 8)
    assert runs["continuous"]["wasted"] == 0 < runs["static"]["wasted"]
    assert runs["continuous"]["throughput"] > runs["static"]["throughput"]


def test_arrivals_and_kv_limit():
    lengths, arrivals = [4, 4, 4], [0.0, 10.0, 10.5]
    run = simulate_batching(lengths, arrivals, policy="continuous", batch_size=4)
    _check_run(run, lengths, 4)
    assert run["finish"][0] == 4 and run["finish"][1] == 14 and run["makespan"] == 15  # idle until request 1 arrives
    # two blocks of 16 tokens: one request of 20 prompt + 4 output tokens at a time
    tight = simulate_batching([4] * 3, [0.0] * 3, policy="continuous", batch_size=4, prompt_lens=[20] * 3,
                              kv_blocks=2, block_size=16)
    assert tight["timeline"]["rows"].max() == 1 and tight["makespan"] == 12
    with pytest.raises(ValueError, match="KV blocks"):
        simulate_batching([4], [0.0], policy="static", batch_size=1, prompt_lens=[40], kv_blocks=2, block_size=16)
    with pytest.raises(ValueError, match="policy"):
        simulate_batching([4], [0.0], policy="paged", batch_size=1)


def test_batching_explorer_builds():
    assert isinstance(batching_explorer({1: 0.006, 8: 0.009}), widgets.VBox)


# ------------------------------------------------------------------------------------------------- notebook 04


def test_kv_cache_sizes_follow_the_formula():
    sizes = kv_cache_sizes("cpu/Qwen3-8B", 256, 2)
    assert sizes["bytes"] == memory.kv_cache_bytes(model_config("cpu/Qwen3-8B"), 256, 2, 4)
    assert sizes["full_model"] == "Qwen/Qwen3-8B"
    assert sizes["full_bytes"] == 2 * 36 * 8 * 128 * 2 * 256 * 2  # Qwen3-8B: 36 layers, 8 KV heads of 128, bf16
    assert "full_model" not in kv_cache_sizes("cpu-pair/target", 16, 1)


def test_measure_decode_step_is_remembered():
    first = measure_decode_step("cpu-pair/target", 16, 1, repeats=1)
    assert first["cached_s"] > 0 and first["uncached_s"] > 0
    assert measure_decode_step("cpu-pair/target", 16, 1, repeats=1) is first
    with pytest.raises(ValueError, match="seq_len"):
        measure_decode_step("cpu-pair/target", 10_000, 1, repeats=1)


def test_kv_cache_explorer_builds_without_running():
    assert isinstance(kv_cache_explorer(run=False), widgets.VBox)


def test_a_button_shows_its_work_and_its_failure():
    import ipywidgets as widgets

    from helpers.explorers.controls import on_press

    button, status, output = widgets.Button(), widgets.Label(""), widgets.HTML("")
    press = on_press(button, status, output, lambda: ("<p>done</p>", "ok"), busy="working")
    press()
    assert (output.value, status.value, button.disabled) == ("<p>done</p>", "ok", False)

    def fails():
        raise ValueError("a <bad> input")

    on_press(button, status, output, fails, busy="working")()
    assert status.value == "failed" and "ValueError: a &lt;bad&gt; input" in output.value and not button.disabled
