#!/usr/bin/env bash
# `make compat`: the GPU machine's software on this CPU (issue 15). The GPU machine has Python 3.12 with torch 2.11
# and transformers 5.17 preinstalled (not our pins), no Jupyter and no network; helpers runs there from the checkout
# (PYTHONPATH), not installed. This creates a second virtual environment with those versions (once; PyPI's torch
# 2.11 for Linux is a CUDA build of a few GB) and runs the unit tests of what the GPU run uses: the model file and
# runtime, generation/KV/specdec sweeps and costs, the results store and helpers.gpu_measure (with its dry run).
# Not part of CI (.ci/run does not call it). Settings: COMPAT_PYTHON, COMPAT_VENV, COMPAT_TESTS, COMPAT_PIP_ARGS.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
VENV=${COMPAT_VENV:-$ROOT/../compat-venv}
if [ -z "${COMPAT_PYTHON:-}" ]; then
    # a candidate must run: pyenv's shim for python3.12 exists on PATH even where no 3.12 is selected, and fails
    for candidate in $(command -v python3.12 || true) $(ls -d /root/.pyenv/versions/3.12*/bin/python 2>/dev/null); do
        if "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
            COMPAT_PYTHON=$candidate
            break
        fi
    done
fi
if [ ! -x "$VENV/bin/python" ]; then
    if [ -z "$COMPAT_PYTHON" ] || [ ! -x "$COMPAT_PYTHON" ]; then
        echo "compat: no Python 3.12 found: set COMPAT_PYTHON=/path/to/python3.12" >&2
        exit 2
    fi
    "$COMPAT_PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    # the GPU machine's versions; the rest is what helpers imports at run time (pip picks the versions)
    "$VENV/bin/python" -m pip install --quiet ${COMPAT_PIP_ARGS:-} torch==2.11.0 transformers==5.17.0 pyyaml \
        safetensors tokenizers pandas matplotlib seaborn scipy tqdm pytest
fi
"$VENV/bin/python" -c 'import sys, torch, transformers; print("compat:", sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__)'
TESTS=${COMPAT_TESTS:-"tests/test_models.py tests/test_decoder_model.py tests/test_model_families.py tests/test_cached_decoder.py tests/test_loading.py
  tests/test_generation_bench.py tests/test_kv_cache.py tests/test_kv_sweep.py tests/test_specdec.py
  tests/test_specdec_costs.py tests/test_specdec_bench.py tests/test_specdec_batched.py tests/test_specdec_core.py tests/test_specdec_analysis.py
  tests/test_specdec_tree.py tests/test_specdec_medusa.py tests/test_specdec_feature_draft.py tests/test_results.py
  tests/test_core.py tests/test_memory.py tests/test_prompts.py tests/test_gpu_specs.py tests/test_gpu_measure.py
  tests/test_compiled_steps.py tests/test_graphed_steps.py tests/test_model_kernels.py tests/test_step_profile.py"}
# shellcheck disable=SC2086
PYTHONPATH="$ROOT" exec "$VENV/bin/python" -m pytest -p no:cacheprovider -q -rs $TESTS "$@"
