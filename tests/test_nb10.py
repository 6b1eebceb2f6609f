"""helpers.experiments.nb10: notebook 10's configurations and measurement find the committed CPU rows (nothing is
measured), and the analysis returns the numbers the notebook prints, from those rows."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest
import torch

from helpers.experiments import nb10
from helpers.experiments.comparison import best_of, summarise_methods
from helpers.experiments.nb10.figures import forward_costs_figure
from helpers.experiments.nb10.study import cost_model
from committed_rows import cpu_params, measure_committed


@pytest.fixture(scope="module")
def params():
    return cpu_params(nb10)


@pytest.fixture(scope="module")
def study(params):
    torch.manual_seed(0)
    target, draft, tokenizer = nb10.load_pair(params)
    open_rows, cases = nb10.workloads(params, target, tokenizer)
    measured = measure_committed(nb10, params, models=(target, draft, tokenizer), cases=cases)
    summaries = {workload: summarise_methods(found) for workload, found in measured["rows"].items()}
    return {"target": target, "tokenizer": tokenizer, "open_rows": open_rows, "cases": cases, **measured,
            "summaries": summaries, "best": nb10.best_methods(summaries["open-ended"])}


def test_configs_cover_the_costs_and_every_prompt_of_both_workloads(params, study):
    configs = nb10.configs(params, study["cases"])
    assert configs["costs"]["kind"] == "costs" and configs["costs"]["widths"] == nb10.cost_widths(params)
    assert 1 in nb10.cost_widths(params)
    prompts = [key for key in configs if key != "costs"]
    assert len(prompts) == params["tree_prompt_count"] + params["tree_grounded_count"]
    assert configs[prompts[0]]["specs"] == nb10.specs(params) and nb10.specs(params)[0] == {"method": "ar"}


def test_measure_returns_costs_with_int_keys_and_runs_per_workload(study):
    assert all(isinstance(n, int) for n in study["costs"]["T_V"]) and 1 in study["costs"]["T_D"]
    assert set(study["rows"]) == {"open-ended", "in-context"} and all(study["rows"].values())


def test_cost_summary_and_figure(study):
    found = nb10.cost_summary(study["costs"])
    assert found["tv_max_nodes"] == max(study["costs"]["T_V"]) and found["tv_grows"] in (0, 1)
    assert found["T_T_ms"] == 1e3 * study["costs"]["target_step_s"]
    assert forward_costs_figure(study["costs"]).axes


def test_cost_summary_names_t_v_by_drafted_tokens_as_eq5_does():
    # regression: T_V's argument was the positions here and the drafted tokens in notebook 09 (Eq. 5's T_V(gamma))
    costs = {"target_step_s": 1.0, "T_V": {1: 1.0, 8: 1.5, 32: 2.0}, "T_D": {1: 0.1, 16: 0.3}}
    found = nb10.cost_summary(costs)
    assert found["tv_max_nodes"] == 32 and found["tv_max_ratio"] == 2.0 and found["tv_one"] == 1.0
    # the notebook names the widest forward by the drafted tokens it verifies, one less than its positions
    import json

    from helpers import paths

    cells = json.loads((paths.REPO_ROOT / "notebooks" / "10_tree_and_lookup_decoding.ipynb").read_text())["cells"]
    source = "".join(line for cell in cells for line in cell["source"])
    assert "T_V({section2['tv_max_nodes'] - 1})/T_T" in source and "T_V(p - 1)" in source


def test_best_methods_and_ties(study):
    open_summary = study["summaries"]["open-ended"]
    best = study["best"]
    assert best["linear"].label == best_of(open_summary, "linear").label
    assert best["numbers"]["best_linear_speedup"] == best["linear"].speedup
    ties = nb10.ties_with_fastest(study["rows"]["open-ended"], open_summary, best)
    assert ties["numbers"]["tied_count"] == len(ties["tied_labels"]) >= 1
    assert ties["numbers"]["tied_fastest_label"] == ties["ties"].label.iloc[0] == ties["tied_labels"][0]
    assert set(ties["smallest_tied"]) == set(best["smallest_fastest"]) == {"static", "dynamic"}
    assert ties["numbers"]["smallest_trees_tied"] == int(all(ties["smallest_tied"].values()))


def test_lookup_coverage_and_copies(params, study):
    per_source = nb10.by_source(study["rows"]["open-ended"])
    assert {"best linear", "best tree", "lookup x"} <= set(per_source.columns)
    greedy = nb10.greedy_outputs(study["target"], study["cases"], params["tree_new_tokens"])
    label = best_of(summarise_methods(study["rows"]["open-ended"] + study["rows"]["in-context"]), "lookup").label
    coverage = nb10.coverage(study["cases"], greedy, study["rows"], label, params["pld_ngram"])
    assert len(coverage) == len(greedy) and coverage.context.between(0, 1).all()
    share = coverage.groupby("workload", sort=False)[["prompt", "context"]].mean()
    assert list(share.index) == ["open-ended", "in-context"]
    lookup = nb10.lookup_summary(coverage, study["summaries"], per_source, label, study["rows"]["in-context"])
    assert lookup["numbers"]["pld_label"] == label and "cover_in_prompt" in lookup["numbers"]
    # the best draft-model method is named with those the prompts cannot separate from it
    numbers = lookup["numbers"]
    assert numbers["in_model_tied_count"] >= 1 and numbers["in_model_tied_low"] <= numbers["in_model_speedup"]
    assert lookup["slowest_context"] == coverage.set_index("id").context[lookup["slowest"]]
    assert lookup["by_source"]["PLD x"].max() == numbers["pld_best_source_speedup"]
    copied = nb10.copies(study["tokenizer"], study["cases"]["in-context"], greedy)
    assert copied["share"] > 0.5 and copied["numbers"]["in_copied_pct"] == 100 * copied["share"]
    assert copied["prompts"] == len(study["cases"]["in-context"]) >= copied["numbers"]["in_full_copies"]
    task = nb10.copy_task(study["target"], study["tokenizer"], {**params, "tree_grounded_count": 1})
    assert task["copy_tokens"] <= task["copy_reference"] and task["copy_head_lines"] >= 1


def test_eq5_summary_keeps_the_report_keys_in_order(study):
    table = cost_model(study["rows"]["open-ended"], study["costs"])
    found = nb10.eq5_summary(table, study["rows"]["open-ended"], study["best"])
    keys = list(found["numbers"])
    assert keys[:2] == ["eq5_tree_error_pct", "eq5_rank_corr"] and keys[-1] == "tree_measured_wins"
    assert keys.index("eq5_bias_tree") < keys.index("eq5_family_spread") < keys.index("trees_overpredicted")
    assert found["methods"] == len(table) and found["decode_fastest"] in set(table.label)


def test_showcase_prompt_is_continued_as_code_not_a_loop(params, study):
    """Regression: section 1 drew a round of `self.assertEqual(self.(self.(...`, the first open-ended prompt's loop,
    beside its tau; the showcase is a prompt the small target continues sensibly, and a loop is flagged."""
    from helpers.specdec import autoregressive_generate

    case = nb10.showcase_case(params, study["tokenizer"], "cpu")
    assert case["id"] == nb10.SHOWCASE_PROMPTS["cpu"] and case["source"] == "code"
    tokens = autoregressive_generate(study["target"], case["input_ids"], params["tree_new_tokens"],
                                     eos_token_id=-1).tokens.tolist()
    assert not nb10.repetition(tokens)["repetitive"]
    loop = nb10.repetition([1, 2, 3] * 16)
    assert loop["repetitive"] and loop["share"] > loop["threshold"]
    first = study["cases"]["open-ended"][0]  # the old showcase: flagged
    looped = autoregressive_generate(study["target"], first["input_ids"], params["tree_new_tokens"], eos_token_id=-1)
    assert nb10.repetition(looped.tokens.tolist())["share"] > nb10.repetition(tokens)["share"]


def test_gpu_width_costs_read_the_windows_step_profile():
    """Regression: the report said a GPU forward over tens of positions costs about what one does; the H200's step
    profile timed the CPU pair's target at width 8 2.66x its width-1 step (Qwen3-8B 1.12x), and nothing wider."""
    from helpers import paths

    table = nb10.gpu_width_costs([paths.REPO_ROOT / "results" / "gpu-h200"])
    ratio = table.set_index("model").ratio
    assert ratio["cpu-pair/target"] == pytest.approx(5.7677 / 2.16699, rel=1e-3) and ratio["Qwen/Qwen3-8B"] < 1.25
    numbers = nb10.gpu_width_numbers(table, "cpu-pair/target")
    assert numbers["gpuwide_own_wide"] == 8 and numbers["gpuwide_flat"] == 1 and "gpuwide_handout_ratio" in numbers
    assert "gpuwide_handout_ratio" not in nb10.gpu_width_numbers(table, "Qwen/Qwen3-8B")  # its own target: once
    assert nb10.gpu_width_numbers(table.iloc[:0], "cpu-pair/target") == {}
    tex = (paths.REPORT_DIR / "sections" / "10_tree_and_lookup_decoding.tex").read_text()
    assert "costs about what one does" not in tex and "gpuwide_own_ratio" in tex
