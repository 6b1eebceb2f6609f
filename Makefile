# The workbook's two commands (see README):
#   make run    set up .venv, run every notebook with the CPU profile, build report/report.pdf
#   make test   set up .venv, run the unit tests, every notebook (papermill + nbval) and the report build
# Other profiles: make run PROFILE=gpu
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
PROFILE ?= cpu
STAMP := $(VENV)/.installed

.PHONY: setup run report test rehearse lab clean-build compat

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "Python 3.11 is required (set PYTHON=/path/to/python3.11)"'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e .
	@touch $@

run: $(STAMP)
	$(BIN)/python -m helpers.run_all --profile $(PROFILE)

report: $(STAMP)
	$(BIN)/python -m helpers.run_all --profile $(PROFILE) --report-only

# On up to four workers (pytest-xdist; one per core): a test file stays on one worker, the notebooks and the report
# build share one (conftest.py). A failing test's output is as without workers; -n0 runs everything in this process.
test: $(STAMP)
	$(BIN)/python -m pytest -n auto --maxprocesses=4 tests notebooks --nbval-lax --nbval-sanitize-with tests/nbval_sanitize.cfg -p no:cacheprovider

# The GPU student's run (every notebook under params/gpu.yaml, the GPU report) rehearsed on this CPU in a few minutes:
# each Hub id resolves to a small random checkpoint of its architecture, sizes shrink (params/rehearse.yaml), all
# into build/rehearse/. CI runs it as a test (tests/test_rehearse.py).
rehearse: $(STAMP)
	$(BIN)/python -m helpers.rehearse

# The GPU machine's Python 3.12 / torch 2.11 / transformers 5.17 on this CPU: a second venv (../compat-venv, made
# once, a few GB) and the unit tests of what helpers.gpu_measure uses. Not part of `make test` or CI. See tools/compat.sh.
compat:
	bash tools/compat.sh

# trusted, the saved explorers render as they were left (untrusted, JupyterLab shows their text, "VBox(...)")
lab: $(STAMP)
	$(BIN)/jupyter trust notebooks/*.ipynb
	$(BIN)/jupyter lab notebooks/

clean-build:
	rm -rf build report/build
