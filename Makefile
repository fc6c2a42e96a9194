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

.PHONY: demo test clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed-demo: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[anndata]'
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[anndata,test,bench]'
	touch $@ $(VENV)/.installed-demo

demo: $(VENV)/.installed-demo
	$(BIN)/dppca-dask demo --data $(DATA) --n-features $(N_FEATURES) --workdir $(DEMO_DIR)

test: $(VENV)/.installed-test
	$(BIN)/python -m pytest $(PYTEST_ARGS)

clean:
	rm -rf build .pytest_cache .hypothesis
