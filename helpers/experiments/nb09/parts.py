"""The GPU window's cost parts, which feed notebook 09 (and the report's window tables): each handout model's decode
step mode by mode (``decode``), transformers' own decoding beside it (``peers``), Eq. 5's terms of the handout pairs
(``eq5``), the CPU pair's terms and end-to-end runs (``graphs``) and where a step's time goes (``profile``)."""
from __future__ import annotations

from helpers.experiments import gpu_costs
from helpers.experiments.common import BudgetExhausted
from helpers.experiments.nb09 import decode_modes, step_profile
from helpers.experiments.packages import Part

FATAL = (BudgetExhausted,)  # a budget stop ends the part; any other failure is recorded in its row


def _decode(params, store, settings):
    decode_modes.measure(params, store, {**settings.decode, "modes": settings.modes}, fatal=FATAL)


def _peers(params, store, settings):
    decode_modes.measure_peers(params, store, settings.decode, fatal=FATAL)


def _eq5(params, store, settings):
    gpu_costs.measure_eq5(params, store(gpu_costs.COSTS), settings, settings.pairs, "random", fatal=FATAL)


def _graphs(params, store, settings):
    gpu_costs.measure_graphs(params, store, settings, fatal=FATAL)


def _profile(params, store, settings):
    step_profile.measure_profiles(params, store, settings, fatal=FATAL)


COST_PARTS = (
    Part("decode", (decode_modes.DECODE_STEPS,), _decode),
    Part("peers", (decode_modes.DECODE_STEPS,), _peers),
    Part("eq5", (gpu_costs.COSTS,), _eq5),
    Part("graphs", (gpu_costs.GRAPHS,), _graphs, report=gpu_costs.write_report_tables),
    Part("profile", (step_profile.STEP_PROFILE,), _profile),
)
