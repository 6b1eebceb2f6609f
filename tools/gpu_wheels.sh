#!/usr/bin/env bash
# Wheels that the GPU machine may lack (it has Python 3.12, torch 2.11, transformers 5.17 and their dependencies, no
# network): what helpers.gpu_measure imports beyond those, for CPython 3.12 on x86-64 Linux, into build/gpu-wheels/
# (ignored by git; carry it to the GPU machine, 64 MiB at most per command). On the GPU machine:
#   python -c "import pandas, scipy, yaml" || pip install --no-index --find-links build/gpu-wheels pandas scipy pyyaml
# numpy comes with torch; if it is missing there too, GPU_WHEELS="numpy" bash tools/gpu_wheels.sh in a second folder.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${GPU_WHEELS_DIR:-build/gpu-wheels}
mkdir -p "$DEST"
# shellcheck disable=SC2086
python3 -m pip download --quiet --only-binary=:all: --no-deps --implementation cp --python-version 3.12 --abi cp312 \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --abi none --platform any -d "$DEST" ${GPU_WHEELS:-pandas scipy python-dateutil six tzdata pyyaml}
du -sh "$DEST"; ls "$DEST"
