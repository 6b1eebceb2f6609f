"""Benchmarks: ``python -m helpers.bench <name> [options]``.

Each benchmark lives in its own module exposing ``add_arguments(parser)`` and ``run(args) -> dict``. It
prints a readable table while it runs; this entry point prints the returned figures as ONE JSON object on
the last line, so scripts can parse ``tail -n1``.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys

# name -> module implementing it (imported lazily: each pulls in torch/transformers)
BENCHMARKS = {
    "kv_cache": "helpers.kv_cache_bench",
    "specdec": "helpers.specdec_bench",
    "batching": "helpers.batching.bench",
}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m helpers.bench", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="name", required=True, metavar="BENCHMARK")
    modules = {}
    for name, module_name in BENCHMARKS.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if err.name != module_name:
                raise
            continue  # not implemented yet
        modules[name] = module
        sub_parser = sub.add_parser(name, help=(module.__doc__ or name).strip().splitlines()[0])
        module.add_arguments(sub_parser)
    args = parser.parse_args(argv)
    figures = modules[args.name].run(args)
    print(json.dumps(figures, sort_keys=True, default=str))
    return figures


if __name__ == "__main__":
    main(sys.argv[1:])
