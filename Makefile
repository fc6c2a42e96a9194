# Quick start: `make demo` (set up, ingest the sample data, run the main job) and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
# The sample data: LIBSVM's w8a when it is present beside the project; otherwise the demo generates data.
DATA ?= ../shared/data/w8a.svm
# Its public number of columns (w8a: 300 keyword features), declared at ingest.
N_FEATURES ?= 300
DEMO_DIR ?= build/demo
PYTEST_ARGS ?=

# One BLAS/OpenMP thread per process: Dask workers run the parallelism; oversubscribing 2 cores costs 10x.
export OMP_NUM_THREADS := 1
export OPENBLAS_NUM_THREADS := 1
export MKL_NUM_THREADS := 1

# The lowest supported versions: a second virtual environment built with every floor of pyproject.toml pinned
# (ci/lowest-constraints.txt), running a fast subset of the suite.
LOWEST_VENV := .venv-lowest
LOWEST_TESTS ?= tests/test_packaging_imports.py tests/test_packaging_extras.py tests/test_packaging_metrics_reuse.py \
	tests/test_packaging_mtx_fast_path.py tests/accounting/test_gaussian_library_calibration.py \
	tests/accounting/test_composition.py tests/storage tests/ingest/test_ingest_parquet.py \
	tests/ingest/test_ingest_anndata.py tests/ingest/test_ingest_mtx.py tests/ingest/test_ingest_svmlight.py \
	tests/cli/test_cli_strict_json.py tests/kernels/test_compiled_private_step.py tests/coordinator_client

.PHONY: demo test docs test-lowest clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed-demo: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[anndata,parquet]'
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[anndata,parquet,test,bench,scanpy,typecheck,numba]'
	touch $@ $(VENV)/.installed-demo

$(VENV)/.installed-docs: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[docs]'
	touch $@

demo: $(VENV)/.installed-demo
	$(BIN)/dppca-dask demo --data $(DATA) --n-features $(N_FEATURES) --workdir $(DEMO_DIR)

test: $(VENV)/.installed-test
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# The documentation site (docs/, Sphinx) into build/docs, warnings as errors; offline, about 10 s. Its docstring
# examples run under doctest in `make test` (tests/test_docstring_examples.py).
docs: $(VENV)/.installed-docs
	$(BIN)/python -m sphinx -W --keep-going -q -b html docs build/docs
	@echo "docs: build/docs/index.html"

$(LOWEST_VENV)/.installed: pyproject.toml ci/lowest-constraints.txt
	$(PYTHON) -m venv $(LOWEST_VENV)
	$(LOWEST_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(LOWEST_VENV)/bin/python -m pip install --quiet -c ci/lowest-constraints.txt -e '.[anndata,parquet,test,numba]'
	touch $@

# Deselected here (run by `make test`): with distributed 2025.1 the session's LocalCluster does not close after
# these in-process CLI runs in the same pytest process (the newest releases close it); not yet understood. The same
# happens when any test runs after tests/coordinator_client/test_executor.py in the session (a test that only
# passes will do), so that file stays the last of LOWEST_TESTS: its directory last, and last within it.
LOWEST_DESELECT ?= --deselect tests/coordinator_client/test_executor.py::test_the_commands_take_executor

test-lowest: $(LOWEST_VENV)/.installed
	$(LOWEST_VENV)/bin/python -m pytest -m 'not slow' -p no:cacheprovider $(LOWEST_TESTS) $(LOWEST_DESELECT) $(PYTEST_ARGS)

clean:
	rm -rf build .pytest_cache .hypothesis $(LOWEST_VENV)
