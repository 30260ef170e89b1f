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
	$(PY) -m pip install -q -e '.[test,cuda,amd]'
	rm -rf build uopc.egg-info  # setuptools' by-products; the install's metadata is in the venv
	touch $@

demo: setup
	$(MAKE) -C samples/c-app UOPC=$(abspath $(UOPC)) run

# tests/install_tools.py first: the outside tools the tests use (llvm-mc >= 19, ld.lld, clang, cmake, ninja), by version,
# installed with apt-get when root; otherwise it says which are missing and their tests skip.
test: setup
	$(PY) tests/install_tools.py
	$(PY) -m pytest -q -n $(JOBS) -m "not gpu"

test-gpu: setup
	$(PY) -m pytest -q -m gpu

# CPU benchmark: uopc -t c next to numpy and tinygrad's CPU backend (tests/bench/RESULTS.md).
# BENCH_ARGS passes options through, e.g. BENCH_ARGS="--filter gemm --build-arg=-O2".
BENCH_ARGS ?=
bench: $(VENV)/.bench-installed
	sh tests/bench/install_clang.sh
	$(PY) tests/bench/bench_cpu.py $(BENCH_ARGS)

# Without network the install fails, no stamp is made (it is tried again next time) and the
# benchmark still runs with its tinygrad column n/a.
$(VENV)/.bench-installed: $(VENV)/.installed
	$(PY) -m pip install -q -e '.[bench]' && rm -rf build uopc.egg-info && touch $@ || echo "make bench: could not install tinygrad; its column will say n/a" >&2

# The differential test with many more random programs than CI runs, from fresh seeds;
# UOPC_FUZZ_SEED=N replays the batches of base seed N.
fuzz: setup
	UOPC_FUZZ_BATCHES=$${UOPC_FUZZ_BATCHES:-200} UOPC_FUZZ_SEED=$${UOPC_FUZZ_SEED:-random} $(PY) -m pytest -q -n $(JOBS) tests/test_differential.py

clean:
	rm -rf build dist *.egg-info $(VENV) tests/.pytest_cache tests/.hypothesis
	$(MAKE) -C samples/c-app clean
