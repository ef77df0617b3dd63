# gradkit: the two set-up commands are `make demo` and `make test`; both build .venv from nothing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
BACKENDS ?= tensorflow jax torch
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast bench lint format clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e ".[jax,torch,test]" tensorflow-cpu
	touch $(STAMP)

demo: $(STAMP)
	KERAS_BACKEND=$${KERAS_BACKEND:-tensorflow} $(VENV)/bin/gradkit study --out runs/demo

test: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks examples
	@set -e; for b in $(BACKENDS); do \
	  echo "=== pytest on KERAS_BACKEND=$$b"; \
	  KERAS_BACKEND=$$b $(PY) -m pytest -q -p no:cacheprovider $(PYTEST_ARGS); \
	done

test-fast: $(STAMP)
	@set -e; for b in $(BACKENDS); do KERAS_BACKEND=$$b $(PY) -m pytest -q -m "not slow" $(PYTEST_ARGS); done

bench: $(STAMP)
	@set -e; for b in $(BACKENDS); do KERAS_BACKEND=$$b $(PY) benchmarks/run.py; done

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks examples
	$(VENV)/bin/ruff format --check src tests benchmarks examples

format: $(STAMP)
	$(VENV)/bin/ruff format src tests benchmarks examples
	$(VENV)/bin/ruff check --fix src tests benchmarks examples

clean:
	rm -rf $(VENV) runs build *.egg-info
