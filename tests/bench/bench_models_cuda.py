"""The real-model programs of samples/models on an NVIDIA GPU: uopc -t cuda next to tinygrad's CUDA
backend, same inputs, one run (`python tests/bench/bench_models_cuda.py [--filter NAME ...]`, on the GPU
machine; tinygrad must be importable there).

uopc: the program exported with `uopc.export`, built with `uopc build -t cuda`, its entry called on
device buffers; the time is the median of several calls between CUDA events on the default stream
(its kernel launches and its kernels). tinygrad: the same function under TinyJit on its CUDA device
(default settings, no BEAM): its kernel time as tinygrad itself reports it (GlobalCounters.time_sum_s
of a replay under DEBUG=2, which waits for and times each kernel), and the wall time of a replay and a
synchronize (its kernels and its Python launch loop). Each result is checked against tinygrad's before
anything is timed.
"""
from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "samples" / "models"))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_cuda import Timer  # noqa: E402
from bench_models import check  # noqa: E402
from test_cuda_gpu import Driver  # noqa: E402


def uopc_ms(gpu, timer, p, arrays, like, work: Path) -> tuple[float, np.ndarray]:
  """In the harness's own context (tinygrad makes its context current on this thread: CUDA events of
  another context cannot be recorded there), restored afterwards."""
  theirs = ctypes.c_void_p()
  gpu.check(gpu.cu.cuCtxGetCurrent(ctypes.byref(theirs)), "cuCtxGetCurrent")
  gpu.check(gpu.cu.cuCtxSetCurrent(gpu.ctx), "cuCtxSetCurrent")
  try:
    return _uopc_ms(gpu, timer, p, arrays, like, work)
  finally:
    gpu.check(gpu.cu.cuCtxSetCurrent(theirs), "cuCtxSetCurrent")


def _uopc_ms(gpu, timer, p, arrays, like, work: Path) -> tuple[float, np.ndarray]:
  import uopc
  from uopc.driver import BuildOptions, build
  src = work / f"{p.name}.uop"
  src.write_text(uopc.export(p.fn, *p.examples(), name=p.name))
  lib = ctypes.CDLL(str(next(x for x in build(src, BuildOptions(target="cuda", out_dir=work)) if x.suffix == ".so")))
  out = np.zeros_like(like)
  ptrs = [gpu.upload(np.ascontiguousarray(a)) for a in arrays] + [gpu.upload(out)]
  fn = getattr(lib, f"{p.name}_{p.name}")
  fn.argtypes = [ctypes.c_uint64] * len(ptrs) + [ctypes.c_void_p]
  def run():
    if (status := fn(*ptrs, None)) != 0: raise RuntimeError(f"{p.name}: status {status}")
  run()
  got = gpu.download(ptrs[-1], out)
  events = timer.median_ms(run)
  def synced():
    run()
    gpu.check(gpu.cu.cuCtxSynchronize(), "cuCtxSynchronize")
  walls = []
  for _ in range(10):
    t = time.perf_counter(); synced(); walls.append(time.perf_counter() - t)  # noqa: E702
  wall = statistics.median(walls) * 1e3
  print(f"  {p.name}: CUDA events {events:.4f} ms, wall clock with a synchronize {wall:.4f} ms", file=sys.stderr)
  return (events if events > 0 else wall), got


def tinygrad_ms(p, arrays) -> tuple[float, np.ndarray]:
  from tinygrad import Device, Tensor, TinyJit
  tensors = [Tensor(a, device="CUDA").realize() for a in arrays]
  jitted = TinyJit(lambda *ts: p.fn(*ts).realize())
  last = []
  def run():
    last[:] = [jitted(*tensors)]
    Device["CUDA"].synchronize()
  for _ in range(3): run()
  times = []
  for _ in range(10):
    t = time.perf_counter(); run(); times.append(time.perf_counter() - t)  # noqa: E702
  from tinygrad.helpers import Context, GlobalCounters
  kernel = []
  for _ in range(5):  # DEBUG=2: tinygrad waits for each kernel and sums their times (its own kernel time)
    GlobalCounters.reset()
    with Context(DEBUG=2): run()
    kernel.append(GlobalCounters.time_sum_s * 1e3)
  return statistics.median(times) * 1e3, statistics.median(kernel), last[0].numpy()


def main(argv: list[str]) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--filter", nargs="*", default=[])
  args = ap.parse_args(argv)
  from programs import programs
  gpu = Driver()
  timer = Timer(gpu)
  rows, failures = [], []
  with tempfile.TemporaryDirectory(prefix="uopc-bench-models-cuda-") as tmp:
    for p in programs("real"):
      if args.filter and not any(f in p.name for f in args.filter): continue
      arrays = p.arrays(seed=0)
      try:
        t_ms, tk_ms, want = tinygrad_ms(p, arrays)
        work = Path(tmp) / p.name
        work.mkdir()
        u_ms, got = uopc_ms(gpu, timer, p, arrays, want, work)
        if problem := check(p.name, got, want):
          failures.append(f"{p.name}: uopc and tinygrad differ: {problem}"); continue  # noqa: E702
      except Exception as e:  # noqa: BLE001 - one program's failure is reported, the others still run
        failures.append(f"{p.name}: {type(e).__name__}: {str(e)[:300]}"); continue  # noqa: E702
      rows.append((p.name, u_ms, tk_ms, t_ms))
      print(f"{p.name:20s} uopc {u_ms:9.3f} ms   tinygrad kernels {tk_ms:9.3f} ms (replay {t_ms:.3f})", file=sys.stderr, flush=True)
  lines = ["| program | uopc ms (CUDA events) | tinygrad kernels ms (DEBUG=2 time_sum_s) | tinygrad replay ms | tinygrad kernels / uopc |",
           "|---|---:|---:|---:|---:|"]
  lines += [f"| {n} | {u:.3f} | {k:.3f} | {t:.3f} | {k / u:.2f}x |" for n, u, k, t in rows]
  if rows:
    geo = float(np.exp(np.mean([np.log(k / u) for _, u, k, _ in rows])))
    lines += ["", f"Geometric mean of tinygrad's kernel time / uopc's over {len(rows)} programs: {geo:.2f}x (above 1: uopc faster)."]
  lines += [f"- FAILED {f}" for f in failures]
  print("\n".join(lines))
  return 1 if failures else 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
