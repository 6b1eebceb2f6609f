"""helpers.specdec.methods: a decoding method is one registry entry. A method defined here, in a test (one drafter and
one registry line), joins notebook 10's and 13's comparisons and both benchmarks' method lists, and stays lossless."""
from __future__ import annotations

import argparse

import matplotlib

matplotlib.use("Agg")

import pytest
import torch

from helpers.experiments import comparison, nb10, nb13
from helpers.experiments.nb10 import bench as tree_bench
from helpers.experiments.nb10.figures import sweep_figure
from helpers.experiments.nb10.study import cost_model
from helpers.experiments.nb13 import bench as heads_bench
from helpers.models.runtime import resolve_runtime
from helpers.specdec import methods
from helpers.specdec.chain import Drafter, generate_chain
from helpers.specdec.core import GenerationStats
from committed_rows import cpu_params
from tiny_models import PEAK, perturbed_copy, tiny_qwen3


class RepeatDrafter(Drafter):
    """A trivial drafting method: propose the last ``ngram`` committed tokens again (greedy only)."""

    def __init__(self, ngram: int):
        self.ngram, self.tokens = ngram, []

    def start(self, input_ids, capacity, hidden=None):
        self.tokens = input_ids[0].tolist()

    def propose(self, pending, limit, temperature, generator=None):
        drafts = self.tokens[-self.ngram:][:max(limit, 0)]
        return torch.tensor([drafts], dtype=torch.long, device=pending.device).view(1, -1), None

    def commit(self, drafts, accepted, next_token, emitted, hidden=None):
        self.tokens += emitted


REPEAT = methods.Method(
    "repeat", lambda spec: f"repeat n{spec['ngram']}",
    lambda spec, target, drafter, input_ids, max_new_tokens, **options: generate_chain(
        target, RepeatDrafter(spec["ngram"]), input_ids, max_new_tokens,
        stats=GenerationStats(runtime=resolve_runtime("auto", target)), **options),
    family="repeat", defaults=({"method": "repeat", "ngram": 2},))


@pytest.fixture
def registered():
    methods.register(REPEAT)  # the one registry line a new method needs
    yield REPEAT
    methods.unregister("repeat")


@pytest.fixture(scope="module")
def target():
    return tiny_qwen3(0, head_scale=PEAK)


def test_every_method_the_notebooks_compare_is_registered():
    params10, params13 = cpu_params(nb10), cpu_params(nb13)
    for spec in nb10.specs(params10) + nb13.specs(params13) + tree_bench.default_specs():
        assert methods.label(spec).isascii()  # labels go into the LaTeX report
    assert methods.names() == ("ar", "linear", "adaptive", "static", "dynamic", "lookup", "medusa", "eagle")
    assert [methods.get(name).drafter for name in ("ar", "lookup", "medusa", "eagle")] == [None, None, "medusa", "eagle"]
    with pytest.raises(ValueError, match="unknown method 'beam'"):
        methods.get("beam")


def test_a_new_method_joins_both_notebooks_and_both_benchmarks(registered):
    assert methods.names()[-1] == "repeat" and methods.label({"method": "repeat", "ngram": 2}) == "repeat n2"
    params10, params13 = cpu_params(nb10), cpu_params(nb13)
    assert nb10.specs(params10)[-1] == nb13.specs(params13)[-1] == {"method": "repeat", "ngram": 2}
    assert tree_bench.default_specs()[-1] == {"method": "repeat", "ngram": 2}
    parser = argparse.ArgumentParser()
    heads_bench.add_arguments(parser)
    assert nb13.specs(heads_bench._params(parser.parse_args([])))[-1] == {"method": "repeat", "ngram": 2}


def test_a_method_joins_only_the_comparisons_that_hold_its_drafter(registered):
    methods.register(methods.Method("heads2", lambda spec: "heads2", REPEAT.run, drafter="medusa",
                                    defaults=({"method": "heads2"},)))
    try:
        assert {"method": "heads2"} in nb13.specs(cpu_params(nb13))  # notebook 13 loads the Medusa heads
        assert {"method": "heads2"} not in nb10.specs(cpu_params(nb10))  # notebook 10 has only the draft model
    finally:
        methods.unregister("heads2")
    assert "heads2" not in methods.names() and "repeat" in methods.names()


def test_a_new_method_is_lossless_and_summarised_with_the_others(registered, target):
    draft = perturbed_copy(target, 0.3, relative=True)
    ids = torch.tensor([[5, 9, 2, 7, 5, 9, 2, 7, 5, 9]])
    cases = [{"id": "p1", "source": "code", "input_ids": ids}, {"id": "p2", "source": "prose", "input_ids": ids[:, :4]}]
    specs = [{"method": "ar"}, {"method": "linear", "gamma": 2}, *methods.extra_specs(["ar", "linear"], ["draft"])]
    rows = comparison.compare_methods(target, draft, cases, specs, 12, repeats=1)
    mine = [row for row in rows if row["method"] == "repeat"]
    assert len(mine) == 2 and all(row["identical_to_ar"] for row in mine)  # greedy output equals AR's
    assert all(row["proposed"] > 0 for row in mine)  # it did draft
    summary = comparison.summarise_methods(rows)
    assert list(summary.method) == ["ar", "linear", "repeat"] and bool(summary.lossless.all())
    assert summary.set_index("label").drafter["repeat n2"] == "repeat"
    # notebook 10's cost model and figure take it too (no draft forwards: its round costs one verify forward)
    costs = {"target_step_s": 1.0, "T_V": {1: 1.0, 2: 1.1, 4: 1.2, 8: 1.5}, "T_D": {1: 0.1}}
    model = cost_model(rows, costs).set_index("label")
    assert model.draft_cost["repeat n2"] == 0 and model.verify_cost["repeat n2"] >= 1
    assert sweep_figure(summary).axes


def test_run_hands_each_method_its_own_drafter(target):
    seen = {}
    methods.register(methods.Method("probe", lambda spec: "probe", lambda spec, t, drafter, *a, **o: seen.update(
        drafter=drafter), drafter="eagle"))
    try:
        methods.run({"method": "probe"}, target, {"draft": "d", "eagle": "e"}, None, 1)
        assert seen["drafter"] == "e"
        with pytest.raises(KeyError):
            methods.run({"method": "probe"}, target, "a draft model alone", None, 1)
    finally:
        methods.unregister("probe")
