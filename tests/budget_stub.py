"""A result store with no rows and a budget that refuses everything (the GPU window's store at its deadline): an
experiment's measure() must raise :class:`Stop` naming the model before it loads one."""
from __future__ import annotations


class Stop(Exception):
    pass


class RefusingBudget:
    def check(self, what):
        raise Stop(what)


class EmptyStore:
    budget = RefusingBudget()

    def has(self, config):
        return False


def empty_stores(name):
    """The store factory ``measure(params, store)`` takes: an :class:`EmptyStore` for every result name."""
    return EmptyStore()
