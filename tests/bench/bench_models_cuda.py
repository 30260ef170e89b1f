"""The real-model programs of samples/models on an NVIDIA GPU: uopc -t cuda next to tinygrad's CUDA
backend, same inputs, one run (`python tests/bench/bench_models_cuda.py [--filter NAME ...]
[--variant LABEL=KERNEL:OPTS|LABEL=@FILE ...]`, on the GPU machine; tinygrad must be importable there).

`--variant` times other schedules in the same run: each LABEL's specs (repeatable; `uopc build --opts`
syntax, kernels named PROGRAM__PROGRAM_kN as `--print-after optimize` shows them) pin the opts of the
kernels they name, and every program with such a kernel is built and timed again with them (a row
"PROGRAM [LABEL]", checked against tinygrad like the others), next to its heuristic build.

uopc: the program exported with `uopc.export`, built with `uopc build -t cuda`, its entry called on
device buffers; the time is the median of several calls between CUDA events on the default stream
(its kernel launches and its kernels; an entry of several kernels, called again with the same arguments,
replays its own CUDA graph of them: uopc/targets/cuda/graphs.py; UOPC_CUDA_GRAPHS=0 times direct launches), and the median replay of the entry captured into a CUDA graph on its
own stream (its kernels back to back, without the host's launch gaps between them). tinygrad: the same function under TinyJit on its CUDA device
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


def uopc_ms(gpu, timer, p, arrays, like, work: Path, schedule=None) -> tuple[float, float | None, np.ndarray]:
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
  return timer.median_ms(run), graph_ms(gpu, fn, ptrs), got


def graph_ms(gpu, fn, ptrs, reps: int = 50) -> float | None:
  """The entry captured into a CUDA graph on its own stream and replayed: the median time between events
  of one replay, its kernels back to back without the host's launch gaps (as tinygrad's DEBUG=2 sum of
  per-kernel times has none); None where the capture fails (the entry is then not capturable)."""
  cu, c = gpu.cu, ctypes
  stream, graph, exe = c.c_void_p(), c.c_void_p(), c.c_void_p()
  start, end = c.c_void_p(), c.c_void_p()
  gpu.check(cu.cuStreamCreate(c.byref(stream), 1), "cuStreamCreate")  # CU_STREAM_NON_BLOCKING
  for ev in (start, end): gpu.check(cu.cuEventCreate(c.byref(ev), 0), "cuEventCreate")
  if fn(*ptrs, stream) != 0 or cu.cuStreamSynchronize(stream) != 0: return None
  if cu.cuStreamBeginCapture_v2(stream, 2) != 0: return None  # CU_STREAM_CAPTURE_MODE_RELAXED
  status = fn(*ptrs, stream)
  if cu.cuStreamEndCapture(stream, c.byref(graph)) != 0 or status != 0: return None
  if cu.cuGraphInstantiateWithFlags(c.byref(exe), graph, c.c_ulonglong(0)) != 0: return None
  times = []
  for _ in range(reps + 1):
    cu.cuEventRecord(start, stream)
    gpu.check(cu.cuGraphLaunch(exe, stream), "cuGraphLaunch")
    cu.cuEventRecord(end, stream)
    gpu.check(cu.cuEventSynchronize(end), "cuEventSynchronize")
    ms = c.c_float()
    cu.cuEventElapsedTime(c.byref(ms), start, end)
    times.append(ms.value)
  cu.cuGraphExecDestroy(exe); cu.cuGraphDestroy(graph); cu.cuStreamDestroy_v2(stream)  # noqa: E702
  return float(np.median(times[1:]))


def tinygrad_ms(p, arrays) -> tuple[float, float, np.ndarray]:
  """(wall ms of a replay, kernel ms of a replay under DEBUG=2, result)."""
  from tinygrad import Device, GlobalCounters, Tensor, TinyJit
  from tinygrad.helpers import Context
  tensors = [Tensor(a, device="CUDA").realize() for a in arrays]
  jitted = TinyJit(lambda *ts: p.fn(*ts).contiguous().realize())  # a view (a flip, a permute) realizes as no kernel: tinygrad too must write the output
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
          u_ms, g_ms, got = uopc_ms(gpu, timer, p, arrays, want, Path(tmp) / p.name / str(n), schedule)
          if problem := check(p.name, got, want):
            failures.append(f"{name}: uopc and tinygrad differ: {problem}"); continue  # noqa: E702
        except Exception as e:  # noqa: BLE001
          failures.append(f"{name}: {type(e).__name__}: {str(e)[:300]}"); continue  # noqa: E702
        rows.append((name, u_ms, g_ms, t_ms, k_ms))
        print(f"{name:20s} uopc {u_ms:9.3f} ms (graph {g_ms or float('nan'):9.3f})   tinygrad {t_ms:9.3f} ms (kernels {k_ms:9.3f})   {k_ms / u_ms:6.2f}x", file=sys.stderr, flush=True)
  lines = ["| program | uopc ms (CUDA events) | uopc ms (graph replay) | tinygrad ms (TinyJit replay) | tinygrad kernel ms (DEBUG=2) "
           "| tinygrad kernels / uopc events | tinygrad kernels / uopc graph |", "|---|---:|---:|---:|---:|---:|---:|"]
  def ratio(k: float, u: float | None) -> str: return "n/a" if u is None else f"{k / u:.2f}x"
  lines += [f"| {n} | {u:.4f} | {'n/a' if g is None else f'{g:.4f}'} | {t:.4f} | {k:.4f} | {k / u:.2f}x | {ratio(k, g)} |" for n, u, g, t, k in rows]
  if plain := [r for r in rows if " [" not in r[0]]:
    geo = float(np.exp(np.mean([np.log(k / u) for _, u, _, _, k in plain])))
    lines += ["", f"Geometric mean of tinygrad's kernel time / uopc's (events) over {len(plain)} programs: {geo:.2f}x (above 1: uopc faster)."]
    if all(g is not None for _, _, g, _, _ in plain):
      geo_g = float(np.exp(np.mean([np.log(k / g) for _, _, g, _, k in plain])))
      lines += [f"Geometric mean of tinygrad's kernel time / uopc's graph replay: {geo_g:.2f}x."]
  lines += [f"- FAILED {f}" for f in failures]
  print("\n".join(lines))
  return 1 if failures else 0


if __name__ == "__main__":
  os.environ.setdefault("DEV", "CUDA")  # tinygrad 0.14: CUDA=1 is deprecated
  sys.exit(main(sys.argv[1:]))
