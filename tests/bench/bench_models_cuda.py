"""The real-model programs of samples/models on an NVIDIA GPU: uopc -t cuda next to tinygrad's CUDA
backend, same inputs, one run (`python tests/bench/bench_models_cuda.py [--filter NAME ...]
[--variant LABEL=KERNEL:OPTS|LABEL=@FILE ...]`, on the GPU machine; tinygrad must be importable there).

`--variant` times other schedules in the same run: each LABEL's specs (repeatable; `uopc build --opts`
syntax, kernels named PROGRAM__PROGRAM_kN as `--print-after optimize` shows them) pin the opts of the
kernels they name, and every program with such a kernel is built and timed again with them (a row
"PROGRAM [LABEL]", checked against tinygrad like the others), next to its heuristic build.

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


def uopc_ms(gpu, timer, p, arrays, like, work: Path, schedule=None) -> tuple[float, np.ndarray]:
  import uopc
  from uopc.driver import BuildOptions, build
  gpu.check(gpu.cu.cuCtxSetCurrent(gpu.ctx), "cuCtxSetCurrent")  # tinygrad made its own context current
  work.mkdir(parents=True, exist_ok=True)
  src = work / f"{p.name}.uop"
  src.write_text(uopc.export(p.fn, *p.examples(), name=p.name))
  built = build(src, BuildOptions(target="cuda", out_dir=work, schedule=schedule))
  lib = ctypes.CDLL(str(next(x for x in built if x.suffix == ".so")))
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


def variants(specs: list[str]) -> dict[str, dict[str, tuple]]:
  """`LABEL=SPEC` arguments as {label: {kernel: opts}} (a label's specs together, as `--opts` takes them)."""
  from uopc.stages.optimize import parse_schedule
  by_label: dict[str, list[str]] = {}
  for spec in specs:
    label, sep, rest = spec.partition("=")
    if not sep or not label: raise SystemExit(f"--variant {spec!r}: expected LABEL=KERNEL:OPTS or LABEL=@FILE")
    by_label.setdefault(label, []).append(rest)
  return {label: parse_schedule(rest) for label, rest in by_label.items()}


def main(argv: list[str]) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--filter", nargs="*", default=[], help="run only programs whose name contains one of these")
  ap.add_argument("--variant", action="append", default=[], metavar="LABEL=KERNEL:OPTS|LABEL=@FILE",
                  help="also time the programs whose kernels these opts name with them pinned (repeatable)")
  args = ap.parse_args(argv)
  pinned = variants(args.variant)
  from programs import programs
  gpu = Driver()
  timer = Timer(gpu)
  rows, failures = [], []
  with tempfile.TemporaryDirectory(prefix="uopc-bench-models-cuda-") as tmp:
    for p in programs("real"):
      if args.filter and not any(f in p.name for f in args.filter): continue
      arrays = p.arrays(seed=0)
      mine = {label: {k: o for k, o in s.items() if k.startswith(f"{p.name}__{p.name}_k")} for label, s in pinned.items()}
      builds = [(p.name, None)] + [(f"{p.name} [{label}]", s) for label, s in mine.items() if s]
      try:
        t_ms, k_ms, want = tinygrad_ms(p, arrays)
      except Exception as e:  # noqa: BLE001 - one program's failure is reported, the others still run
        failures.append(f"{p.name}: tinygrad: {type(e).__name__}: {str(e)[:300]}"); continue  # noqa: E702
      for n, (name, schedule) in enumerate(builds):
        try:
          u_ms, got = uopc_ms(gpu, timer, p, arrays, want, Path(tmp) / p.name / str(n), schedule)
          if problem := check(p.name, got, want):
            failures.append(f"{name}: uopc and tinygrad differ: {problem}"); continue  # noqa: E702
        except Exception as e:  # noqa: BLE001
          failures.append(f"{name}: {type(e).__name__}: {str(e)[:300]}"); continue  # noqa: E702
        rows.append((name, u_ms, t_ms, k_ms))
        print(f"{name:20s} uopc {u_ms:9.3f} ms   tinygrad {t_ms:9.3f} ms (kernels {k_ms:9.3f})   {k_ms / u_ms:6.2f}x", file=sys.stderr, flush=True)
  lines = ["| program | uopc ms (CUDA events) | tinygrad ms (TinyJit replay) | tinygrad kernel ms (DEBUG=2) | tinygrad kernels / uopc |",
           "|---|---:|---:|---:|---:|"]
  lines += [f"| {n} | {u:.4f} | {t:.4f} | {k:.4f} | {k / u:.2f}x |" for n, u, t, k in rows]
  if plain := [r for r in rows if " [" not in r[0]]:
    geo = float(np.exp(np.mean([np.log(k / u) for _, u, _, k in plain])))
    lines += ["", f"Geometric mean of tinygrad's kernel time / uopc's over {len(plain)} programs: {geo:.2f}x (above 1: uopc faster)."]
  lines += [f"- FAILED {f}" for f in failures]
  print("\n".join(lines))
  return 1 if failures else 0


if __name__ == "__main__":
  os.environ.setdefault("DEV", "CUDA")  # tinygrad 0.14: CUDA=1 is deprecated
  sys.exit(main(sys.argv[1:]))
