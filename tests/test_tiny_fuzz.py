"""The differential fuzzer shaped like real programs (issue 26): random chains of tinygrad Tensor methods
(tests/tiny_program_gen.py), exported with `uopc.export`, built for the CPU targets and run in the
emulator of every GPU target, against what tinygrad computes on its CPU backend for the same inputs.

Each batch's programs go into one module, built once per target. A disagreement is checked again against
tinygrad in float64 (the program run on float64 inputs) before it counts: tinygrad's float32 has errors
of its own (SPEC-NOTES: its `sin` near pi/2). Floats must agree to 1e-4 of the output's largest
magnitude (plus 1e-5), integers exactly. CI runs UOPC_TINY_FUZZ_BATCHES (default 4) batches of
UOPC_TINY_FUZZ_PROGRAMS (default 60) from seed 0; `make fuzz` runs many more from a random seed
(UOPC_TINY_FUZZ_SEED=N replays). tests/tiny_fuzz_corpus/ keeps every program that ever failed, run each
time as its own test. Where tinygrad cannot compile a program's whole graph, the oracle runs it realized
line by line (`stepwise`); uopc still compiles it as written.
"""
from __future__ import annotations

import os
import re
import secrets
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tinygrad", reason="tinygrad 0.14 is not installed (pip install -e '.[test]')")
from tinygrad import Tensor, dtypes  # noqa: E402

import uopc  # noqa: E402
from tiny_program_gen import TinyProgram, random_program  # noqa: E402
from uopc.frontend import parse_source  # noqa: E402
from uopc.run import _LIB, build_library, call_entry, entry_arguments, prepare_arrays, run_emulated  # noqa: E402

BATCHES = int(os.environ.get("UOPC_TINY_FUZZ_BATCHES", "4"))
PROGRAMS = int(os.environ.get("UOPC_TINY_FUZZ_PROGRAMS", "60"))
_SEED_ENV = os.environ.get("UOPC_TINY_FUZZ_SEED", "0")
SEED = secrets.randbits(32) if _SEED_ENV == "random" else int(_SEED_ENV)
# (target, emulated, --cpu): -t c also for the build machine's vectors (AVX2/AVX-512: masked vector loads, wider tiles)
TARGETS = [("c", False, "portable"), ("c", False, os.environ.get("UOPC_FUZZ_CPU", "native")), ("llvm", False, "portable"),
           ("cuda", True, ""), ("amd", True, ""), ("metal", True, "")]
CORPUS = Path(__file__).resolve().parent / "tiny_fuzz_corpus"


def tinygrad_outputs(p: TinyProgram, float64: bool = False) -> list[np.ndarray]:
  fn = p.function()
  args = [Tensor(a.astype(np.float64) if float64 and a.dtype == np.float32 else a) for a in p.inputs]
  ret = fn(*args)
  return [t.numpy() for t in (ret if isinstance(ret, tuple) else (ret,))]


def close(got: np.ndarray, want: np.ndarray) -> bool:
  if got.shape != want.shape: return False
  if want.dtype.kind in "biu": return bool(np.array_equal(got, want))
  g, w = got.astype(np.float64), want.astype(np.float64)
  nan = np.isnan(w)
  if not np.array_equal(np.isnan(g), nan): return False
  finite = w[~nan]
  scale = float(np.max(np.abs(finite[np.isfinite(finite)]), initial=0.0))
  return bool(np.all(np.abs(g[~nan] - w[~nan]) <= 1e-4 * scale + 1e-5) or np.array_equal(g[~nan], w[~nan]))


def stepwise(p: TinyProgram) -> TinyProgram:
  """p with every intermediate `tN = ...` realized on its own line: the same values, computed by tinygrad
  one graph a line (where it cannot compile the whole graph at once)."""
  return TinyProgram(p.name, re.sub(r"^(  t\d+ = )(.*)$", r"\1(\2).realize()", p.source, flags=re.M), p.inputs)


def oracle(p: TinyProgram) -> tuple[TinyProgram, list[np.ndarray]]:
  """(the program tinygrad ran, its outputs): p itself, else, where tinygrad's compiler fails on the whole
  graph (seen: an endless rewrite after a log_softmax or min indexed by an integer tensor), p stepwise."""
  try:
    return p, tinygrad_outputs(p)
  except Exception:  # noqa: BLE001 - tinygrad's own failure, not uopc's
    return stepwise(p), tinygrad_outputs(stepwise(p))


def run_batch(progs: list[TinyProgram], tmp_path: Path) -> list[str]:
  """Every program on every target; the failures, each with the program's source and what differed. A
  program that tinygrad cannot run even stepwise has no oracle: it is left out with a warning naming it.
  uopc always compiles the program as written (one graph)."""
  wants, texts, failures, kept, refs = [], [], [], [], []
  for p in progs:
    try:
      ref, want = oracle(p)
    except Exception as e:  # noqa: BLE001 - tinygrad's own failure, not uopc's
      warnings.warn(f"{p.name}: tinygrad cannot run it ({type(e).__name__}: {str(e)[:200]}); left out:\n{p.source}", stacklevel=1)
      continue
    wants.append(want)
    refs.append(ref)
    kept.append(p)
    examples = [Tensor.empty(*a.shape, dtype=Tensor(a).dtype) for a in p.inputs]
    texts.append(uopc.export(p.function(), *examples, name=p.name))
  progs = kept
  path = tmp_path / "batch.uop"
  path.write_text("\n".join(texts))
  module = parse_source(path.read_text(), str(path))
  for target, emulated, cpu in TARGETS:
    lib = None if emulated else __import__("ctypes").CDLL(str(build_library(path, target, tmp_path / f"{target}-{cpu}", cpu)))
    target += f" --cpu {cpu}" if not emulated and cpu != "portable" else ""
    for p, ref, want, text in zip(progs, refs, wants, texts):
      entry = module.entry(p.name)
      args = entry_arguments(entry)
      arrays = prepare_arrays(module, args, {f"x{i}": a for i, a in enumerate(p.inputs)}, {}, None)
      try:
        if emulated: run_emulated(module, entry, target, args, arrays, {})
        else: call_entry(lib, _LIB, entry.name, args, arrays, {})
      except Exception as e:  # noqa: BLE001 - reported with the program
        failures.append(f"{target}: {type(e).__name__}: {e}\n{p.source}"); continue  # noqa: E702
      names = ["out"] if len(want) == 1 else [f"out{i}" for i in range(len(want))]
      got = [arrays[n] for n in names]
      if all(close(g, w) for g, w in zip(got, want)): continue
      if all(close(g, w.astype(g.dtype)) for g, w in zip(got, tinygrad_outputs(ref, float64=True))): continue  # tinygrad's float32 error
      failures.append(f"{target}{' (emulated)' if emulated else ''}: differs from tinygrad\n{p.source}inputs: "
                      f"{[a.tolist() for a in p.inputs]}\ngot {[g.tolist() for g in got]}\nwant {[w.tolist() for w in want]}\n{text}")
  return failures


@pytest.mark.parametrize("batch", range(BATCHES))
def test_random_tinygrad_programs_agree_on_every_target(batch, tmp_path):
  rng = np.random.default_rng([SEED, batch])
  progs = [random_program(rng, f"p{batch}_{i}") for i in range(PROGRAMS)]
  failures = run_batch(progs, tmp_path)
  assert not failures, f"UOPC_TINY_FUZZ_SEED={SEED} batch {batch}: {len(failures)} failures\n\n" + "\n\n".join(failures[:5])


def _corpus() -> list[Path]: return sorted(CORPUS.glob("*.py"))


@pytest.mark.parametrize("case", _corpus(), ids=[p.stem for p in _corpus()])
def test_every_program_that_ever_failed(case, tmp_path):
  """A corpus file holds the program's source (a function named like the file) and its inputs as a literal
  `INPUTS = [...]` of numpy arrays."""
  scope = {"np": np, "Tensor": Tensor, "dtypes": dtypes}
  exec(compile(case.read_text(), str(case), "exec"), scope)  # noqa: S102 - our own corpus
  source = case.read_text().split("\nINPUTS")[0] + "\n"
  p = TinyProgram(case.stem, source, [np.asarray(a) for a in scope["INPUTS"]])
  failures = run_batch([p], tmp_path)
  assert not failures, "\n\n".join(failures)


def test_a_program_tinygrad_runs_only_stepwise_is_still_checked(tmp_path, monkeypatch):
  """Where tinygrad fails on the whole graph, the oracle is the program realized line by line; uopc's
  build of the program as written is checked against it (a wrong oracle here is caught)."""
  rng = np.random.default_rng([0, 1])
  p = random_program(rng, "whole")
  real = tinygrad_outputs
  def tinygrad(q, float64=False):
    if ".realize()" not in q.source: raise RuntimeError("infinite loop in graph_rewrite (stack too big)")
    return [w + 1 if w.dtype.kind in "biu" else w * 2 + 1 for w in real(q, float64)]
  monkeypatch.setattr(__import__(__name__), "tinygrad_outputs", tinygrad)
  assert stepwise(p).source.count(".realize()") == p.source.count("\n  t")
  failures = run_batch([p], tmp_path)
  assert failures and all("whole" in f for f in failures)


def test_a_program_tinygrad_cannot_run_is_left_out_with_a_warning(tmp_path, monkeypatch):
  """The oracle's own failure (tinygrad's compiler raising, even stepwise) leaves that program out, named
  in a warning; the batch's other programs are still checked (one made wrong here is still caught)."""
  rng = np.random.default_rng([0, 0])
  good, broken = random_program(rng, "good"), random_program(rng, "broken")
  real = tinygrad_outputs
  def oracle(p, float64=False):
    if p.name == "broken": raise RuntimeError("infinite loop in graph_rewrite (stack too big)")
    return [w + 1 if w.dtype.kind in "biu" else w * 2 + 1 for w in real(p, float64)]
  monkeypatch.setattr(__import__(__name__), "tinygrad_outputs", oracle)
  with pytest.warns(UserWarning, match="broken: tinygrad cannot run it"):
    failures = run_batch([broken, good], tmp_path)
  assert failures and all("good" in f and "broken" not in f.split("\n")[0] for f in failures)
