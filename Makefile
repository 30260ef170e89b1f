# uopc developer entry points. `make demo` sets up and runs a sample end to end; `make test` runs the tests.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
UOPC := $(VENV)/bin/uopc
JOBS ?= 2

.PHONY: setup demo test test-gpu bench fuzz clean
setup: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,cuda]'
	touch $@

demo: setup
	$(MAKE) -C samples/c-app UOPC=$(abspath $(UOPC)) run

test: setup
	$(PY) -m pytest -q -n $(JOBS) -m "not gpu"

test-gpu: setup
	$(PY) -m pytest -q -m gpu

clean:
	rm -rf build dist *.egg-info $(VENV) .pytest_cache
	$(MAKE) -C samples/c-app clean
