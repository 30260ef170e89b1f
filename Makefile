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

# CPU benchmark: uopc -t c next to numpy and tinygrad's CPU backend, then the real-model programs of
# samples/models next to tinygrad (tests/bench/RESULTS.md).
# BENCH_ARGS passes options through, e.g. BENCH_ARGS="--filter gemm --build-arg=-O2".
BENCH_ARGS ?=
bench: $(VENV)/.bench-installed
	sh tests/bench/install_clang.sh
	$(PY) tests/bench/bench_cpu.py $(BENCH_ARGS)
	$(PY) tests/bench/bench_models.py

# Without network the install fails, no stamp is made (it is tried again next time) and the
# benchmark still runs with its tinygrad column n/a.
$(VENV)/.bench-installed: $(VENV)/.installed
	$(PY) -m pip install -q -e '.[bench]' && rm -rf build uopc.egg-info && touch $@ || echo "make bench: could not install tinygrad; its column will say n/a" >&2

# Fuzzing at length (tests run each part briefly): the coverage-guided fuzzer (atheris) on the parser and
# verifier (FUZZ_RUNS inputs) and through the pipeline up to Render (a tenth of them), random names through
# every target, then the differential tests with many more random programs than CI runs, from fresh seeds:
# the IR-level one (UOPC_FUZZ_SEED=N replays its batches) and the tinygrad one, 170 x 60 = 10^4 programs
# written with tinygrad's methods on every target (UOPC_TINY_FUZZ_SEED=N replays). Each seed is drawn once,
# printed first, and shared by every worker, so a run that passes can be replayed too. The libFuzzer corpus
# and any crash land in build/fuzz/.
FUZZ_RUNS ?= 100000
fuzz: setup
	rm -rf build/fuzz && mkdir -p build/fuzz/corpus build/fuzz/crashes && cp samples/*.uop build/fuzz/corpus/
	$(PY) tests/fuzz_uop.py -runs=$(FUZZ_RUNS) -max_len=4096 -artifact_prefix=build/fuzz/crashes/ build/fuzz/corpus
	$(PY) tests/fuzz_uop.py --pipeline -runs=$$(( $(FUZZ_RUNS) / 10 )) -max_len=4096 -artifact_prefix=build/fuzz/crashes/ build/fuzz/corpus
	UOPC_NAME_FUZZ_EXAMPLES=200 $(PY) -m pytest -q tests/test_hostile_names.py -k random_names
	seed=$${UOPC_FUZZ_SEED:-$$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}; echo "UOPC_FUZZ_SEED=$$seed"; \
	UOPC_FUZZ_BATCHES=$${UOPC_FUZZ_BATCHES:-200} UOPC_FUZZ_SEED=$$seed $(PY) -m pytest -q -n $(JOBS) tests/test_differential.py
	seed=$${UOPC_TINY_FUZZ_SEED:-$$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}; echo "UOPC_TINY_FUZZ_SEED=$$seed"; \
	UOPC_TINY_FUZZ_BATCHES=$${UOPC_TINY_FUZZ_BATCHES:-170} UOPC_TINY_FUZZ_SEED=$$seed $(PY) -m pytest -q -n $(JOBS) tests/test_tiny_fuzz.py

clean:
	rm -rf build dist *.egg-info $(VENV) tests/.pytest_cache tests/.hypothesis
	$(MAKE) -C samples/c-app clean
