# gradkit: the two set-up commands are `make demo` and `make test`; both build .venv from nothing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
BACKENDS ?= tensorflow jax torch
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.demo-installed

.PHONY: demo test test-fast bench lint format clean

# The demo runs on TensorFlow alone: it installs gradkit and the CPU build of TensorFlow, nothing else.
$(DEMO_STAMP): pyproject.toml constraints.txt
	@echo "make demo: creating $(VENV) with gradkit and TensorFlow (CPU) only, about 2 GB; 1-3 minutes..."
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e . tensorflow-cpu
	touch $(DEMO_STAMP)

# Tests need all three backends and the peer libraries; torchattacks, adv-lib and decomon go in without their dependencies
# (they would replace the CPU build of torch with a CUDA one, and adv-lib's visdom and torchvision are stubbed in tests).
$(STAMP): pyproject.toml constraints.txt
	@echo "make test: installing TensorFlow, JAX, PyTorch (CPU), ART, foolbox, torchattacks, adv-lib, decomon, pytest and ruff"
	@echo "into $(VENV), about 3 GB; several minutes on a first run..."
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e ".[jax,torch,test]" tensorflow-cpu
	$(PY) -m pip install -q --no-deps -c constraints.txt torchattacks adv-lib decomon
	touch $(STAMP) $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	@b=$${KERAS_BACKEND:-tensorflow}; if [ "$$b" != tensorflow ] && ! $(PY) -c "import $$b" 2>/dev/null; then \
	  echo "make demo: installing the $$b backend..."; $(PY) -m pip install -q -c constraints.txt -e ".[$$b]"; fi
	KERAS_BACKEND=$${KERAS_BACKEND:-tensorflow} $(VENV)/bin/gradkit study --out runs/demo

# Two pytest-xdist workers per backend (one per core of a CI machine); a test file stays on one worker, so
# its module fixtures (the quick study) run once. `make test WORKERS=0` runs in one process. Each worker
# runs PyTorch's (OpenMP's) ops on one thread: two workers of two threads on two cores made the quick
# study 5x slower on PyTorch.
WORKERS ?= 2
test: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks examples
	@set -e; for b in $(BACKENDS); do \
	  echo "=== pytest on KERAS_BACKEND=$$b"; \
	  OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} KERAS_BACKEND=$$b $(PY) -m pytest -q -p no:cacheprovider -n $(WORKERS) \
	    --dist loadfile --durations=8 $(PYTEST_ARGS); \
	done

test-fast: $(STAMP)
	@set -e; for b in $(BACKENDS); do KERAS_BACKEND=$$b $(PY) -m pytest -q -m "not slow" -n $(WORKERS) --dist loadfile $(PYTEST_ARGS); done

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
