"""Benchmarks: ``python -m helpers.bench <name> [options]``.

Each benchmark is a module exposing ``add_arguments(parser)`` and ``run(args) -> dict``: a topic package's
``bench.py`` (``kv_cache``, ``batching``) or an experiment module of the speculative-decoding notebooks
(``helpers.experiments.nb07.bench``, ``nb10.bench``, ``selfspec_bench``, ``nb13.bench``, ``nb14.bench``; ``model_bench``: the model
file's fused projections). It prints a readable table while it
runs; this entry point prints the returned figures as ONE JSON object on the last line, so scripts can parse
``tail -n1``.
"""
from __future__ import annotations

import argparse
import json
import sys

from helpers.batching import bench as batching_bench
from helpers.experiments import model_bench
from helpers.experiments.nb10 import bench as tree_bench
from helpers.experiments.nb07 import bench as specdec_bench
from helpers.experiments.nb11 import bench as selfspec_bench
from helpers.experiments.nb13 import bench as heads_bench
from helpers.experiments.nb14 import bench as serving_bench
from helpers.kv_cache import bench as kv_cache_bench

BENCHMARKS = {"kv_cache": kv_cache_bench, "specdec": specdec_bench, "batching": batching_bench,
              "tree": tree_bench, "selfspec": selfspec_bench, "heads": heads_bench, "model": model_bench,
              "serving": serving_bench}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m helpers.bench", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="name", required=True, metavar="BENCHMARK")
    for name, module in BENCHMARKS.items():
        sub_parser = sub.add_parser(name, help=(module.__doc__ or name).strip().splitlines()[0])
        module.add_arguments(sub_parser)
    args = parser.parse_args(argv)
    figures = BENCHMARKS[args.name].run(args)
    print(json.dumps(figures, sort_keys=True, default=str))
    return figures


if __name__ == "__main__":
    main(sys.argv[1:])
