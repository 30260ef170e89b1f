"""The real-model programs of samples/models on an NVIDIA GPU: uopc -t cuda next to tinygrad's CUDA
backend, same inputs, one run (`python tests/bench/bench_models_cuda.py [--filter NAME ...]`, on the GPU
machine; tinygrad must be importable there).

uopc: the program exported with `uopc.export`, built with `uopc build -t cuda`, its entry called on
device buffers; the time is the median of several calls between CUDA events on the default stream
(its kernel launches and its kernels). tinygrad: the same function under TinyJit on its CUDA device
(default settings, no BEAM), timed two ways: the median wall time of a replay and a synchronize (its
kernels and its launch loop), and its kernel time as tinygrad itself counts it under DEBUG=2
(`GlobalCounters.time_sum_s`: each kernel between events, summed per call; median of the calls), the
number to hold uopc's CUDA-event time against. Each result is checked against tinygrad's before
anything is timed.
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import io
import os
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
  import uopc
  from uopc.driver import BuildOptions, build
  gpu.check(gpu.cu.cuCtxSetCurrent(gpu.ctx), "cuCtxSetCurrent")  # tinygrad made its own context current
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
  return timer.median_ms(run), got


def tinygrad_ms(p, arrays) -> tuple[float, float, np.ndarray]:
  """(wall ms of a replay, kernel ms of a replay under DEBUG=2, result)."""
  from tinygrad import Device, GlobalCounters, Tensor, TinyJit
  from tinygrad.helpers import Context
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
  kernel = []
  with contextlib.redirect_stdout(io.StringIO()), Context(DEBUG=2):  # DEBUG=2 prints a line per kernel
    for _ in range(10):
      GlobalCounters.reset(); run(); kernel.append(GlobalCounters.time_sum_s)  # noqa: E702
  return statistics.median(times) * 1e3, statistics.median(kernel) * 1e3, last[0].numpy()


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
        t_ms, k_ms, want = tinygrad_ms(p, arrays)
        work = Path(tmp) / p.name
        work.mkdir()
        u_ms, got = uopc_ms(gpu, timer, p, arrays, want, work)
        if problem := check(p.name, got, want):
          failures.append(f"{p.name}: uopc and tinygrad differ: {problem}"); continue  # noqa: E702
      except Exception as e:  # noqa: BLE001 - one program's failure is reported, the others still run
        failures.append(f"{p.name}: {type(e).__name__}: {str(e)[:300]}"); continue  # noqa: E702
      rows.append((p.name, u_ms, t_ms, k_ms))
      print(f"{p.name:20s} uopc {u_ms:9.3f} ms   tinygrad {t_ms:9.3f} ms (kernels {k_ms:9.3f})   {k_ms / u_ms:6.2f}x", file=sys.stderr, flush=True)
  lines = ["| program | uopc ms (CUDA events) | tinygrad ms (TinyJit replay) | tinygrad kernel ms (DEBUG=2) | tinygrad kernels / uopc |",
           "|---|---:|---:|---:|---:|"]
  lines += [f"| {n} | {u:.4f} | {t:.4f} | {k:.4f} | {k / u:.2f}x |" for n, u, t, k in rows]
  if rows:
    geo = float(np.exp(np.mean([np.log(k / u) for _, u, _, k in rows])))
    lines += ["", f"Geometric mean of tinygrad's kernel time / uopc's over {len(rows)} programs: {geo:.2f}x (above 1: uopc faster)."]
  lines += [f"- FAILED {f}" for f in failures]
  print("\n".join(lines))
  return 1 if failures else 0


if __name__ == "__main__":
  os.environ.setdefault("DEV", "CUDA")  # tinygrad 0.14: CUDA=1 is deprecated
  sys.exit(main(sys.argv[1:]))
