"""Differential testing: random tensor programs (tests/program_gen.py) built for every available
target, run natively (-t c, -t llvm) and in the emulator (every target's lowering, with the IR's own
roundings: --fp-contract=off, since numpy rounds each operation; the GPU targets' default fused
multiply-adds are tested in test_fp_contract), each result compared exactly with the generator's own
numpy evaluation. Among the programs are the forms the
compiler folds (arange, its one-hot gather, POW by a constant exponent), checked against numpy's
evaluation of the unfolded forms; `test_the_generator_writes_the_forms_the_compiler_folds` checks that
they are folded.

Programs come in batches (one .uop file with one `func` entry each, one build per batch), in
SHARDS tests that `pytest -n` runs side by side, from fixed seeds in CI. `make fuzz` runs many more:
UOPC_FUZZ_BATCHES sets the batches per shard and UOPC_FUZZ_SEED the base seed ("random": fresh ones).
A failure names the program, its text and both results; shrinking is off (a batch is large).
"""
import ctypes
import faulthandler
import io
import os
import signal
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, seed, settings, strategies as st

from program_gen import Program, programs
from uopc.diagnostics import CompileError
from uopc.driver import BuildOptions, build
from uopc.frontend import load_module
from uopc.run import build_library, call_entry, entry_arguments, run_emulated
from uopc.targets import UnknownTargetError, get_target, target_names
from uopc.verify import verify_module

BATCH = 50
SHARDS = 2
BATCHES = int(os.environ.get("UOPC_FUZZ_BATCHES", "30"))
SEED = os.environ.get("UOPC_FUZZ_SEED", "0")
NATIVE = ("c", "llvm")


def _available(name: str) -> bool:
  try:
    get_target(name)
    return True
  except (UnknownTargetError, ImportError):
    return False


TARGETS = tuple(t for t in target_names() if _available(t))
# the native targets, each built for the portable baseline, and -t c for the build machine's vectors too
# (AVX2/AVX-512: wider register tiles, masked vector loads; UOPC_FUZZ_CPU=x86-64-v3 picks another --cpu level)
WIDE = os.environ.get("UOPC_FUZZ_CPU", "native")
NATIVE_BUILDS = [(t, "portable") for t in NATIVE if t in TARGETS] + ([("c", WIDE)] if "c" in TARGETS else [])


def _mismatch(prog: Program, how: str, got: dict, text: str) -> str:
  lines = [f"{how}: program {prog.name} disagrees with numpy", text]
  for name, want in prog.outputs.items():
    lines.append(f"{name}: expected {want.tolist()}\n{' ' * len(name)}  got      {got[name].tolist()}")
  return "\n".join(lines)


def _same(got: np.ndarray, want: np.ndarray) -> bool:
  if got.dtype != want.dtype or got.shape != want.shape: return False
  if want.dtype.kind == "f" or want.dtype.name == "bfloat16":
    return bool(np.array_equal(got.astype(np.float64), want.astype(np.float64), equal_nan=True))
  return bool(np.array_equal(got, want))


def _arrays(prog: Program) -> dict[str, np.ndarray]:
  return {**{k: v.copy() for k, v in prog.inputs.items()}, **{k: v.copy() for k, v in prog.out_init.items()}}


def _check(prog: Program, how: str, arrays: dict) -> None:
  assert all(_same(arrays[k], v) for k, v in prog.outputs.items()), _mismatch(prog, how, arrays, prog.text())


def in_child(fn) -> str | None:
  """Run fn() in a forked child process: None if it returned, else its exception or the signal that
  killed it, so that a crash in a compiled library (SIGFPE, SIGSEGV) is reported with its program instead
  of taking the test worker down."""
  if not hasattr(os, "fork"):
    fn()
    return None
  r, w = os.pipe()
  pid = os.fork()
  if pid == 0:  # the child: only ctypes and numpy, then _exit (no pytest teardown, no atexit)
    os.close(r)
    faulthandler.disable()  # a crash is the parent's to report, not a traceback on the run's stderr
    try:
      fn()
      msg = b""
    except BaseException as e:  # noqa: BLE001 - everything goes back to the parent
      msg = f"{type(e).__name__}: {e}".encode() or b"error"
    os.write(w, msg)
    os._exit(0)
  os.close(w)
  with os.fdopen(r, "rb") as f: data = f.read()
  _, status = os.waitpid(pid, 0)
  if os.WIFSIGNALED(status): return f"the library was killed by signal {signal.Signals(os.WTERMSIG(status)).name}"
  return data.decode(errors="replace") or None


def run_batch(progs: list[Program], base: Path) -> None:
  """Build and run one batch in a fresh folder under `base` (pytest's tmp_path: hypothesis calls this once an
  example), removed afterwards."""
  for i, p in enumerate(progs): p.name = f"p{i}"
  with tempfile.TemporaryDirectory(prefix="uopc-diff-", dir=base) as tmp:
    path = Path(tmp) / "batch.uop"
    path.write_text("".join(p.text() for p in progs))
    module = load_module(str(path))
    assert not [d for d in verify_module(module) if d.severity == "error"], "the generator made an invalid program"
    args = {p.name: entry_arguments(module.entry(p.name)) for p in progs}
    for target, cpu in NATIVE_BUILDS:
      so = build_library(path, target, Path(tmp) / f"{target}-{cpu}", cpu)
      how = f"-t {target}" + (f" --cpu {cpu}" if cpu != "portable" else "")
      def native(so=so, how=how):
        lib = ctypes.CDLL(str(so))
        for p in progs:
          arrays = _arrays(p)
          call_entry(lib, "prog", p.name, args[p.name], arrays, {})
          _check(p, how, arrays)
      if (problem := in_child(native)) is not None: pytest.fail(f"{how}: {problem}\n{path.read_text()}")
    for target in TARGETS:
      for p in progs:
        arrays = _arrays(p)
        try:
          run_emulated(module, module.entry(p.name), target, args[p.name], arrays, {}, fp_contract=False)
        except CompileError as e:
          pytest.fail(f"-t {target} --emulate: program {p.name} faulted\n{e.format()}\n{p.text()}")
        _check(p, f"-t {target} --emulate", arrays)


def test_a_crash_or_an_assertion_in_the_child_comes_back_as_text():
  def boom(): raise AssertionError("lanes differ")
  assert in_child(lambda: None) is None
  assert in_child(boom) == "AssertionError: lanes differ"
  if hasattr(os, "fork"):
    assert in_child(lambda: os.kill(os.getpid(), signal.SIGFPE)) == "the library was killed by signal SIGFPE"


def test_the_targets_under_test():
  assert "c" in TARGETS


@pytest.mark.parametrize("shard", range(SHARDS))
def test_random_programs_agree_with_numpy(shard, tmp_path):
  @settings(max_examples=BATCHES, deadline=None, database=None, phases=[Phase.generate], suppress_health_check=list(HealthCheck))
  @given(st.lists(programs(), min_size=BATCH, max_size=BATCH))
  def check(progs): run_batch(progs, tmp_path)
  (check if SEED == "random" else seed(int(SEED) * SHARDS + shard)(check))()


@pytest.mark.parametrize("op", ["op_arange", "op_one_hot", "op_pow"])
def test_the_generator_writes_the_forms_the_compiler_folds(op, tmp_path):
  """Programs of one fold's form each (on an input): arange's window sums and the one-hot sum leave no
  reduction loop after Rangeify, the generator's POWs no POW after Instruction Selection; each program
  still agrees with numpy on every target."""
  @settings(max_examples=3, deadline=None, database=None, phases=[Phase.generate], suppress_health_check=list(HealthCheck))
  @given(st.lists(programs(ops=(op,), min_ops=1, max_ops=1), min_size=8, max_size=8))
  def check(progs):
    run_batch(progs, tmp_path)
    (tmp_path / "f.uop").write_text("".join(p.text() for p in progs))
    printed = io.StringIO()
    build(tmp_path / "f.uop", BuildOptions("c", tmp_path / "out", emit=("source",), print_after=("isel", "rangeify"), print_out=printed))
    sections = printed.getvalue().split("# *** IR after ")[1:]
    ir = "".join(x for x in sections if x.startswith("isel" if op == "op_pow" else "rangeify"))
    folded = "POW(" if op == "op_pow" else "REDUCE"
    assert any(folded in p.text() for p in progs), "no program of the batch has the form"
    assert ("= POW(" not in ir) if op == "op_pow" else ("AxisType.REDUCE" not in ir)
  seed(0)(check)()
