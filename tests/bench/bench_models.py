"""Real-model programs (samples/models/programs.py) at their real shapes: uopc next to tinygrad, same
inputs, same machine, one run. Each program is exported with `uopc.export`, built with `uopc build -t c`
and called through ctypes; tinygrad runs the same function on its CPU device under TinyJit (after the
capturing calls, a call replays the compiled kernels: no scheduling, no compiling). Both results are
checked against each other before anything is timed.

What is timed: one call to completion, median of several (at least 3, more while they fit the budget),
after warm-up. uopc's call is the entry function of the built library (its kernels and its worker
threads, with its workspace allocated once); tinygrad's is the TinyJit replay plus a device
synchronize (its kernels, and the Python of the replay loop: a few microseconds per kernel).

  python tests/bench/bench_models.py [--filter NAME ...] [--cpu portable] [--budget SECONDS]
"""
from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "samples" / "models"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import describe  # noqa: E402
from runners import Tinygrad, uopc_command  # noqa: E402

MIN_RUNS = 3
UOPC_ENV = dict(os.environ)  # before tinygrad's column sets CC=clang for its own compiles: uopc builds with the caller's $CC


def median_time(call, budget: float, max_runs: int = 50) -> float:
  start = time.perf_counter(); call(); first = time.perf_counter() - start  # noqa: E702
  runs = max(MIN_RUNS, min(max_runs, int(budget / max(first, 1e-6))))
  times = []
  for _ in range(runs):
    start = time.perf_counter(); call(); times.append(time.perf_counter() - start)  # noqa: E702
  return statistics.median(times)


class UopcModel:
  """The exported program built as a C library; `call` runs its entry on the prepared buffers."""

  def __init__(self, p, arrays: list[np.ndarray], like: np.ndarray, workdir: Path, build_args: list[str]):
    import uopc
    out = workdir / p.name
    out.mkdir()
    (out / f"{p.name}.uop").write_text(uopc.export(p.fn, *p.examples(), name=p.name))
    cmd = [*uopc_command(), "build", str(out / f"{p.name}.uop"), "-t", "c", "-o", str(out), *build_args]
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=UOPC_ENV)
    self.build_s = time.perf_counter() - start
    if done.returncode: raise RuntimeError(f"{' '.join(cmd)}: {done.stderr}")
    lib = ctypes.CDLL(str(out / f"lib{p.name}.so"))
    self.out = np.zeros_like(like)
    self.buffers = [np.ascontiguousarray(a) for a in arrays] + [self.out]
    args = [ctypes.c_void_p(b.ctypes.data) for b in self.buffers]
    fn = getattr(lib, f"{p.name}_{p.name}")
    try:
      size = getattr(lib, f"{p.name}_{p.name}_workspace_size")
      size.restype = ctypes.c_size_t
      self.workspace = np.zeros(max(1, size()), np.uint8)
      fn = getattr(lib, f"{p.name}_{p.name}_with_workspace")
      args.append(ctypes.c_void_p(self.workspace.ctypes.data))
    except AttributeError:
      pass
    fn.restype = ctypes.c_int
    self.fn, self.args = fn, args

  def call(self) -> None:
    if (rc := self.fn(*self.args)) != 0: raise RuntimeError(f"entry returned {rc}")


class TinygradModel:
  def __init__(self, p, arrays: list[np.ndarray]):
    tg = Tinygrad()  # checks clang, sets CC for its CPU device
    tensors = [tg.Tensor(a, device="CPU").realize() for a in arrays]
    jitted = tg.TinyJit(lambda *ts: p.fn(*ts).contiguous().realize())  # a view (a flip, a permute) realizes as no kernel: tinygrad too must write the output
    device, last = tg.Device["CPU"], []
    def call() -> None:
      last[:] = [jitted(*tensors)]
      device.synchronize()
    for _ in range(3): call()  # TinyJit captures on the second call
    self.call, self.result = call, lambda: last[0].numpy()


def check(name: str, got: np.ndarray, want: np.ndarray) -> str:
  if got.shape != want.shape: return f"shape {got.shape} != {want.shape}"
  if want.dtype.kind in "iu": return "" if np.array_equal(got, want) else f"{np.count_nonzero(got != want)} indices differ"
  nan = np.isnan(want)
  if not np.array_equal(np.isnan(got), nan): return f"{np.count_nonzero(np.isnan(got) != nan)} NaNs differ"  # NaN where the other is not
  got, want = got[~nan], want[~nan]  # the same NaNs: compare the rest
  if not want.size: return ""
  scale = float(np.max(np.abs(want))) or 1.0
  err = float(np.max(np.abs(got.astype(np.float64) - want))) / scale
  tol = 3e-3 if name == "half_matmul" else 1e-4  # tinygrad multiplies float16 inputs in float (see test_model_programs)
  return "" if err <= tol else f"max error {err:.2g} of the largest magnitude"


def main(argv: list[str]) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--filter", nargs="*", default=[], help="run only programs whose name contains one of these")
  ap.add_argument("--cpu", default="native", help="uopc build --cpu (default native, as tinygrad compiles with -march=native; portable, x86-64-v3, ...)")
  ap.add_argument("--budget", type=float, default=1.0, help="seconds of timed calls per cell (default 1)")
  args = ap.parse_args(argv)
  from programs import programs
  progs = [p for p in programs("real") if not args.filter or any(f in p.name for f in args.filter)]
  build_args = ["--cpu", args.cpu] if args.cpu != "portable" else []
  rows, failures = [], []
  t0 = time.perf_counter()
  with tempfile.TemporaryDirectory(prefix="uopc-bench-models-") as tmp:
    for p in progs:
      arrays = p.arrays(seed=0)
      try:
        tg = TinygradModel(p, arrays)
        mine = UopcModel(p, arrays, tg.result(), Path(tmp), build_args)
        mine.call()
        if problem := check(p.name, mine.out, tg.result()):
          failures.append(f"{p.name}: uopc and tinygrad differ: {problem}"); continue  # noqa: E702
        u, t = median_time(mine.call, args.budget), median_time(tg.call, args.budget)
      except Exception as e:  # noqa: BLE001 - one program's failure is reported, the others still run
        failures.append(f"{p.name}: {type(e).__name__}: {str(e)[:300]}"); continue  # noqa: E702
      rows.append((p.name, u, t, mine.build_s))
      print(f"{p.name:20s} uopc {u * 1e3:9.3f} ms   tinygrad {t * 1e3:9.3f} ms   {t / u:6.2f}x", file=sys.stderr)
  env = UOPC_ENV
  lines = ["## Real-model programs, CPU", "", f"`{' '.join(['python', 'tests/bench/bench_models.py', *argv])}`", ""]
  lines += [f"- {k}: {v}" for k, v in describe(env, Tinygrad.version(), args.cpu)]
  lines += ["", "| program | uopc ms | tinygrad ms | tinygrad / uopc | uopc build s |", "|---|---:|---:|---:|---:|"]
  lines += [f"| {n} | {u * 1e3:.3f} | {t * 1e3:.3f} | {t / u:.2f}x | {b:.1f} |" for n, u, t, b in rows]
  if rows:
    geo = float(np.exp(np.mean([np.log(t / u) for _, u, t, _ in rows])))
    lines += ["", f"Geometric mean of tinygrad / uopc over {len(rows)} programs: {geo:.2f}x (above 1: uopc faster)."]
  lines += [f"- FAILED {f}" for f in failures]
  lines += ["", f"({time.perf_counter() - t0:.0f} s)"]
  print("\n".join(lines))
  return 1 if failures else 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
