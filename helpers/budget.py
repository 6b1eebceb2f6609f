"""A command's time budget: measurements start only while they can still finish (the GPU window's rule), and every
row a budgeted store writes can trigger a callback (the window rewrites its archive after each one)."""
from __future__ import annotations

import time

from helpers.experiments.common import BudgetExhausted, describe_config
from helpers.results import ResultStore

__all__ = ["Budget", "BudgetExhausted", "BudgetStore"]


class Budget:
    """Seconds left for this command; a new measurement starts only when ``margin`` plus twice the longest one so
    far (in this part: :meth:`start_part`) still fit (the next length of a sweep costs about twice the last)."""

    def __init__(self, seconds: float | None, margin: float = 30.0, part_start: float = 0.0):
        self.deadline = None if not seconds else time.monotonic() + seconds
        self.margin = margin
        self.part_start = part_start
        self.longest = 0.0

    def start_part(self) -> None:
        """A new part's measurements cost what its own do, not the last part's longest: until one has run, assume
        ``part_start`` seconds (a model load and a first configuration)."""
        self.longest = self.part_start

    def left(self) -> float:
        return float("inf") if self.deadline is None else self.deadline - time.monotonic()

    def check(self, what: str) -> None:
        need = self.margin + 2 * self.longest
        if self.left() < need:
            raise BudgetExhausted(f"budget: stopped before {what} ({self.left():.0f} s left, {need:.0f} s needed); "
                                  "run the same command again to resume")

    def took(self, seconds: float) -> None:
        self.longest = max(self.longest, seconds)


class BudgetStore(ResultStore):
    """A :class:`ResultStore` that checks the budget before measuring a configuration it does not hold yet."""

    budget = Budget(None)
    measured = 0
    after_row = None  # called after every row written (the window refreshes its archive: a kill loses no row)

    def add_row(self, config, metrics, meta, status="ok"):
        row = super().add_row(config, metrics, meta, status)
        if BudgetStore.after_row is not None:
            BudgetStore.after_row()
        return row

    def run(self, config, fn, *, meta, rerun=False):
        if not rerun and self.has(config):
            return super().run(config, fn, meta=meta)
        self.budget.check(f"{self.notebook}: {describe_config(config)}")
        start = time.monotonic()
        row = super().run(config, fn, meta=meta, rerun=rerun)
        self.budget.took(time.monotonic() - start)
        BudgetStore.measured += 1
        print(f"  measured {self.notebook}: {describe_config(config)} ({time.monotonic() - start:.1f} s)", flush=True)
        return row
