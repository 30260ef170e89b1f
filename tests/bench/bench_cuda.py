"""GPU benchmark of `-t cuda` (run by hand on an NVIDIA GPU: `python tests/bench/bench_cuda.py`).

Hand-written kernel-level programs (SPECIALs, no Optimize):
- add: out = a + b over 256M float32 (one thread per element, idx0), as a bandwidth against the
  measured device-to-device copy bandwidth (cuMemcpyDtoD) of the same GPU;
- softmax of 4096 rows x 4096 float32, one thread per row (three passes over the row), vs torch;
- gemm 4096 x 4096 x 4096 in float32 and float16 (float32 accumulation), one thread per output on
  16 x 16 blocks, vs torch.matmul.
Tensor programs of tests/bench/workloads.py built by `uopc build -t cuda` (the whole pipeline, with
Optimize's GPU heuristics): add 256M, softmax and layernorm 4096x4096 (one fused kernel each), gemm
2048, gemm 4096 of float16 inputs with float32 sums (on the tensor cores, TC), and a 3x3 convolution of
a 32 x 64 x 56 x 56 batch to 64 channels written with tinygrad's conv2d (torch's cuDNN conv2d with TF32
off as the peer); then gemm 2048 again with pinned opts (GEMM_VARIANTS: the staged tile unstaged, the
other K depths, unstaged, 128 x 128 workgroups, and --fp-contract=off (the IR's two roundings: twice the float32
instructions of the default fused multiply-adds) / --fast-math);
`--hgemm-opts OPTS` (repeatable) also times the float16 gemm 4096 with OPTS pinned on
its kernel (e.g. 'TC(2,-1,4,7)'), `--hgemm-only` times only that gemm (heuristics and pins); `--gemm-opts`
and `--gemm-only` do the same for the float32 gemm 2048 (`--gemm-shape M,K,N`: another), `--ragged` times
only the float32 gemms of real models' ragged shapes (RAGGED_GEMMS), `--skinny` those with few rows
(SKINNY_GEMMS), `--conv-opts` and `--conv-only` for the batched
convolution (`--conv-shape N,C,HW,O`, repeatable: other shapes); each with torch's
time and rate for the same computation, and bandwidths also as a share of the measured copy bandwidth
and of the peak the driver reports (memory clock x bus width). Each time is the median of several
runs between CUDA events; what cannot run is printed as skipped.
"""
from __future__ import annotations

import ctypes
import math
import pathlib
import sys
import tempfile

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from test_cuda_gpu import Driver, build_library, kernel_entry  # noqa: E402
from uopc.dtype import AddrSpace, DType, dtypes  # noqa: E402
from uopc.launcher import c_identifier, entry_args  # noqa: E402
from uopc.ops import AxisType, Ops  # noqa: E402
from uopc.uop import UOp  # noqa: E402

idx = dtypes.index
REPS = 10


def c(v, dt=idx) -> UOp: return UOp.const(dt, v)
def param(slot: int, dt: DType) -> UOp: return UOp(Ops.PARAM, dt.ptr(), (), (slot, f"data{slot}"))
def load(buf: UOp, i: UOp) -> UOp: return UOp(Ops.LOAD, buf.dtype.base, (UOp(Ops.INDEX, buf.dtype, (buf, i)),))
def store(buf: UOp, i: UOp, v: UOp) -> UOp: return UOp(Ops.STORE, src=(UOp(Ops.INDEX, buf.dtype, (buf, i)), v))


def reduce_loop(slot: int, axis: int, dt: DType, init, bound: int, op: Ops, term, deps: tuple[UOp, ...]) -> UOp:
  """acc = init; for k < bound: acc = op(acc, term(k)); the final acc (a REG accumulator, as Rangeify makes one)."""
  acc = UOp(Ops.BUFFER, dt.ptr(AddrSpace.REG, 1), (), (slot, f"acc{slot}"))
  zero = c(0)
  first = store(UOp(Ops.AFTER, acc.dtype, (acc, *deps)), zero, c(init, dt))
  k = UOp(Ops.RANGE, idx, (c(bound),), (axis, AxisType.REDUCE))
  cur = UOp(Ops.LOAD, dt, (UOp(Ops.INDEX, acc.dtype, (UOp(Ops.AFTER, acc.dtype, (acc, first, k)), zero)),))
  end = UOp(Ops.END, src=(store(acc, zero, cur.alu(op, term(k))), k))
  return UOp(Ops.LOAD, dt, (UOp(Ops.INDEX, acc.dtype, (UOp(Ops.AFTER, acc.dtype, (acc, end)), zero)),))


# ---- the kernels -----------------------------------------------------------------------------------------------
def add_kernel(n: int) -> UOp:
  out, a, b = param(0, dtypes.float32), param(1, dtypes.float32), param(2, dtypes.float32)
  i = UOp(Ops.SPECIAL, idx, (c(n),), "idx0")
  return UOp(Ops.SINK, src=(store(out, i, load(a, i).alu(Ops.ADD, load(b, i))),))


def softmax_kernel(rows: int, cols: int) -> UOp:
  out, x = param(0, dtypes.float32), param(1, dtypes.float32)
  row = UOp(Ops.SPECIAL, idx, (c(rows // 32),), "gidx0").alu(Ops.MUL, c(32)).alu(Ops.ADD, UOp(Ops.SPECIAL, idx, (c(32),), "lidx0"))
  at = lambda k: row.alu(Ops.MUL, c(cols)).alu(Ops.ADD, k)  # noqa: E731
  f32 = dtypes.float32
  m = reduce_loop(0, 0, f32, -math.inf, cols, Ops.MAX, lambda k: load(x, at(k)), (row,))
  e = lambda k: UOp(Ops.EXP2, f32, (load(x, at(k)).alu(Ops.SUB, m).alu(Ops.MUL, c(1.4426950408889634, f32)),))  # noqa: E731
  s = reduce_loop(1, 1, f32, 0.0, cols, Ops.ADD, e, (row,))
  k = UOp(Ops.RANGE, idx, (c(cols),), (2, AxisType.LOOP))
  return UOp(Ops.SINK, src=(UOp(Ops.END, src=(store(out, at(k), e(k).alu(Ops.DIV, s)), k)),))


def gemm_kernel(n: int, dt: DType) -> UOp:
  out, a, b = param(0, dt), param(1, dt), param(2, dt)
  col = UOp(Ops.SPECIAL, idx, (c(n // 16),), "gidx0").alu(Ops.MUL, c(16)).alu(Ops.ADD, UOp(Ops.SPECIAL, idx, (c(16),), "lidx0"))
  row = UOp(Ops.SPECIAL, idx, (c(n // 16),), "gidx1").alu(Ops.MUL, c(16)).alu(Ops.ADD, UOp(Ops.SPECIAL, idx, (c(16),), "lidx1"))
  f32 = dtypes.float32
  wide = lambda v: v if dt is f32 else UOp(Ops.CAST, f32, (v,))  # noqa: E731
  term = lambda k: wide(load(a, row.alu(Ops.MUL, c(n)).alu(Ops.ADD, k))).alu(Ops.MUL, wide(load(b, k.alu(Ops.MUL, c(n)).alu(Ops.ADD, col))))  # noqa: E731
  acc = reduce_loop(0, 0, f32, 0.0, n, Ops.ADD, term, (row, col))
  return UOp(Ops.SINK, src=(store(out, row.alu(Ops.MUL, c(n)).alu(Ops.ADD, col), acc if dt is f32 else UOp(Ops.CAST, dt, (acc,))),))


# ---- timing -----------------------------------------------------------------------------------------------------
class Timer:
  def __init__(self, gpu: Driver):
    self.cu = gpu.cu
    self.start, self.end = ctypes.c_void_p(), ctypes.c_void_p()
    for ev in (self.start, self.end): gpu.check(self.cu.cuEventCreate(ctypes.byref(ev), 0), "cuEventCreate")

  def median_ms(self, run) -> float:
    run()  # warm up: module load, JIT, caches
    times = []
    for _ in range(REPS):
      self.cu.cuEventRecord(self.start, None)
      run()
      self.cu.cuEventRecord(self.end, None)
      self.cu.cuEventSynchronize(self.end)
      ms = ctypes.c_float()
      self.cu.cuEventElapsedTime(ctypes.byref(ms), self.start, self.end)
      times.append(ms.value)
    return float(np.median(times))


def entry_runner(gpu: Driver, out_dir: pathlib.Path, name: str, sink: UOp, arrays: list[np.ndarray]):
  """Build `sink` into libNAME.so, upload `arrays` (its buffers by slot); returns (run, download of slot 0)."""
  entry = kernel_entry(name, "main", [sink])
  lib = build_library(out_dir / name, name, [entry])
  ptrs = [gpu.upload(a) for a in arrays]
  fn = getattr(lib, f"{c_identifier(name)}_main")
  fn.argtypes = [ctypes.c_uint64] * len(entry_args(entry)) + [ctypes.c_void_p]
  def run():
    status = fn(*ptrs, None)
    if status != 0: raise RuntimeError(f"{name}: status {status}")
  return run, lambda: gpu.download(ptrs[0], arrays[0])


def torch_ms(fn) -> float | None:
  try:
    import torch
  except ImportError:
    return None
  fn(torch)
  torch.cuda.synchronize()
  start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
  times = []
  for _ in range(REPS):
    start.record()
    fn(torch)
    end.record()
    torch.cuda.synchronize()
    times.append(start.elapsed_time(end))
  return float(np.median(times))


def peak_gbs(gpu: Driver) -> float:
  """DRAM bandwidth from the driver's memory clock (kHz) and bus width (bits), double data rate."""
  clock_khz, bus_bits, dev = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
  gpu.check(gpu.cu.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
  gpu.check(gpu.cu.cuDeviceGetAttribute(ctypes.byref(clock_khz), 36, dev), "cuDeviceGetAttribute(MEMORY_CLOCK_RATE)")
  gpu.check(gpu.cu.cuDeviceGetAttribute(ctypes.byref(bus_bits), 37, dev), "cuDeviceGetAttribute(GLOBAL_MEMORY_BUS_WIDTH)")
  return 2 * clock_khz.value * 1e3 * bus_bits.value / 8 / 1e9


def bench_add(gpu: Driver, timer: Timer, out_dir: pathlib.Path) -> float:
  """The hand-written add; returns the measured device-to-device copy bandwidth in GB/s."""
  n = 256 << 20
  a, b = np.random.default_rng(0).standard_normal((2, n), dtype=np.float32)
  run, result = entry_runner(gpu, out_dir, "add", add_kernel(n), [np.zeros(n, np.float32), a, b])
  ms = timer.median_ms(run)
  assert np.array_equal(result()[:1 << 20], (a + b)[:1 << 20])
  src, dst = gpu.upload(a), gpu.upload(b)
  copy_ms = timer.median_ms(lambda: gpu.cu.cuMemcpyDtoD_v2(ctypes.c_uint64(dst), ctypes.c_uint64(src), ctypes.c_size_t(4 * n)))
  add_gbs, copy_gbs = 3 * 4 * n / ms / 1e6, 2 * 4 * n / copy_ms / 1e6
  print(f"add 256M f32:       {ms:8.3f} ms  {add_gbs:7.1f} GB/s  ({add_gbs / copy_gbs:.0%} of the {copy_gbs:.1f} GB/s cuMemcpyDtoD)")
  return copy_gbs


def bench_softmax(gpu: Driver, timer: Timer, out_dir: pathlib.Path) -> None:
  rows = cols = 4096
  x = np.random.default_rng(1).standard_normal((rows, cols), dtype=np.float32)
  run, result = entry_runner(gpu, out_dir, "softmax", softmax_kernel(rows, cols), [np.zeros(rows * cols, np.float32), x.reshape(-1)])
  ms = timer.median_ms(run)
  e = np.exp(x - x.max(axis=1, keepdims=True))
  np.testing.assert_allclose(result().reshape(rows, cols), e / e.sum(axis=1, keepdims=True), rtol=1e-4, atol=1e-7)
  ref = torch_ms(lambda t: t.softmax(_torch_tensor(t, x), dim=1))
  print(f"softmax 4096x4096:  {ms:8.3f} ms" + (f"  torch {ref:.3f} ms ({ref / ms:.0%} of torch's speed)" if ref else "  (torch not installed)"))


_TORCH_CACHE: dict = {}


def _torch_tensor(torch, array: np.ndarray):
  """The array on the GPU, uploaded once; the cache keeps the array alive so its id is never reused."""
  if id(array) not in _TORCH_CACHE: _TORCH_CACHE[id(array)] = (array, torch.from_numpy(array).cuda())
  return _TORCH_CACHE[id(array)][1]


def bench_gemm(gpu: Driver, timer: Timer, out_dir: pathlib.Path, dt: DType) -> None:
  n = 4096
  t = np.float32 if dt is dtypes.float32 else np.float16
  a, b = (np.random.default_rng(2).standard_normal((2, n, n)) / 8).astype(t)
  run, result = entry_runner(gpu, out_dir, f"gemm_{dt.short}", gemm_kernel(n, dt), [np.zeros(n * n, t), a.reshape(-1), b.reshape(-1)])
  ms = timer.median_ms(run)
  ref_rows = a[:64].astype(np.float64) @ b.astype(np.float64)
  np.testing.assert_allclose(result().reshape(n, n)[:64].astype(np.float64), ref_rows, rtol=2e-2 if t is np.float16 else 1e-4, atol=1e-2)
  tflops = 2 * n ** 3 / ms / 1e9
  ref = torch_ms(lambda torch: _torch_tensor(torch, a) @ _torch_tensor(torch, b))
  vs = f"  torch.matmul {ref:.3f} ms ({2 * n ** 3 / ref / 1e9:.1f} TFLOP/s)" if ref else "  (torch not installed)"
  print(f"gemm 4096 {dt.short:>4}:     {ms:8.3f} ms  {tflops:6.2f} TFLOP/s{vs}")


def bench_tensor_program(gpu: Driver, timer: Timer, out_dir: pathlib.Path, w, torch_fn, rng: np.random.Generator,
                         bandwidths: dict[str, float], opts: str | None = None, flags: dict | None = None, label: str = "tensor program") -> None:
  """A workload of tests/bench/workloads.py as users write it (a tensor program), built by `uopc build -t cuda`:
  Rangeify, Optimize's GPU heuristics (grid, workgroups, GROUP_REDUCE), Expand, isel, PTX; `opts` pins its
  one kernel's opts instead, `flags` are more BuildOptions (fast_math, fp_contract). Checked against the float64 reference
  before it is timed; torch runs the same computation. GB/s rates are also given as shares of
  `bandwidths` (name: GB/s)."""
  from uopc.driver import BuildOptions, build
  from uopc.stages.optimize import parse_schedule
  f, inputs = w.program, w.inputs(rng)
  work = out_dir / f"tp_{f.name}_{abs(hash((w.name, opts, str(flags))))}"
  work.mkdir(parents=True)
  (work / f"{f.name}.uop").write_text(f.text())
  schedule = parse_schedule([f"{f.name}__{f.name}_k0:{opts}"]) if opts is not None else None
  options = BuildOptions(target="cuda", out_dir=work, schedule=schedule, archs=ARCHS, **(flags or {}))
  lib = ctypes.CDLL(str(next(p for p in build(work / f"{f.name}.uop", options) if p.suffix == ".so")))
  out_arg = next(a for a in f.args if a[3])
  out = np.zeros(out_arg[1], np.float32)
  it = iter(np.ascontiguousarray(x) for x in inputs)
  ptrs = [gpu.upload(out if a[3] else next(it)) for a in f.args]
  fn = getattr(lib, f"{f.name}_{f.name}")
  fn.argtypes = [ctypes.c_uint64] * len(ptrs) + [ctypes.c_void_p]
  def run():
    if (status := fn(*ptrs, None)) != 0: raise RuntimeError(f"{w.name}: status {status}")
  ms = timer.median_ms(run)
  got = gpu.download(ptrs[[a[3] for a in f.args].index(True)], out)
  tol, ref = w.tolerance(*inputs), w.reference(*inputs)
  if flags and flags.get("allow_tf32"):  # tf32 inputs: about 1e-3 relative error (METHOD.md: tf32 near 3e-4)
    err = np.linalg.norm(got.astype(np.float64) - ref) / np.linalg.norm(ref)
    assert err < 2e-3, f"tf32 gemm: relative error {err:.2e}"
  else:
    np.testing.assert_allclose(got.astype(np.float64), ref, rtol=max(tol.rtol, 1e-4), atol=max(np.max(tol.atol), 1e-6))
  ref = torch_ms(lambda torch: torch_fn(torch, *[_torch_tensor(torch, x) for x in inputs]))
  rate = w.work / ms / 1e6  # bytes or flops per ms / 1e6 = GB/s or GFLOP/s
  vs = f"  torch {ref:.3f} ms {w.work / ref / 1e6:9.1f} {w.unit} ({ref / ms:.0%} of torch's speed)" if ref else "  (torch not installed)"
  shares = "".join(f", {rate / gbs:.0%} of {name}" for name, gbs in bandwidths.items()) if w.unit == "GB/s" else ""
  print(f"{w.name + f' ({label})':34s} {ms:8.3f} ms {rate:9.1f} {w.unit}{vs}{shares}")


def bench_batched_conv(gpu: Driver, timer: Timer, out_dir: pathlib.Path, opts: str | None = None, n: int = 32, c: int = 64,
                       hw: int = 56, o: int = 64) -> None:
  """A 3x3 convolution (padding 1) of a float32 batch n x c x hw x hw to o channels, plus bias, written with
  tinygrad's conv2d and exported by uopc.export; against torch's (cuDNN's) conv2d with TF32 off. `opts`
  pins its kernel's schedule (None: the heuristics)."""
  try:
    import torch
    from tinygrad import Tensor
  except ImportError as e:
    print(f"conv3x3 {n}x{c}x{hw}x{hw}->{o}: skipped ({e})")
    return
  import uopc
  from uopc.driver import BuildOptions, build
  text = uopc.export(lambda x, w, b: x.conv2d(w, b, padding=1), Tensor.empty(n, c, hw, hw), Tensor.empty(o, c, 3, 3), Tensor.empty(o), name="conv")
  gpu.check(gpu.cu.cuCtxSetCurrent(gpu.ctx), "cuCtxSetCurrent")  # tinygrad may have made its own context current: time in ours
  work = pathlib.Path(tempfile.mkdtemp(prefix="conv_b", dir=out_dir))
  (work / "conv.uop").write_text(text)
  from uopc.stages.optimize import parse_schedule
  schedule = parse_schedule([f"conv__conv_k0:{opts}"]) if opts is not None else None
  lib = ctypes.CDLL(str(next(p for p in build(work / "conv.uop", BuildOptions(target="cuda", out_dir=work, schedule=schedule, archs=ARCHS)) if p.suffix == ".so")))
  rng = np.random.default_rng(4)
  x, w, b = (rng.standard_normal(shape).astype(np.float32) for shape in ((n, c, hw, hw), (o, c, 3, 3), (o,)))
  out = np.zeros((n, o, hw, hw), np.float32)
  ptrs = [gpu.upload(a) for a in (x, w, b, out)]
  fn = getattr(lib, "conv_conv")
  fn.argtypes = [ctypes.c_uint64] * len(ptrs) + [ctypes.c_void_p]
  def run():
    if (status := fn(*ptrs, None)) != 0: raise RuntimeError(f"conv: status {status}")
  ms = timer.median_ms(run)
  got = gpu.download(ptrs[3], out)
  torch.backends.cudnn.allow_tf32 = False
  tx, tw, tb = (_torch_tensor(torch, a) for a in (x, w, b))
  want = torch.nn.functional.conv2d(tx, tw, tb, padding=1).cpu().numpy()
  np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)
  ref = torch_ms(lambda t: t.nn.functional.conv2d(tx, tw, tb, padding=1))
  flops = 2 * n * o * c * 9 * hw * hw
  label = opts or "tensor program, tinygrad's conv2d exported"
  print(f"conv3x3 {n}x{c}x{hw}x{hw}->{o} ({label}) {ms:8.3f} ms {flops / ms / 1e9:8.1f} TFLOP/s"
        f"  torch (cuDNN, TF32 off) {ref:.3f} ms ({ref / ms:.0%} of its speed)")


STAGED_TILE = "SPLIT(2,8,r),SPLIT(1,4,u),SPLIT(1,16,l),SPLIT(1,2,u),SPLIT(0,4,u),SPLIT(0,8,l),SPLIT(0,2,u)"  # the heuristics' staged gemm
DEPTH4 = STAGED_TILE.replace("SPLIT(2,8,r)", "SPLIT(2,4,r)")  # ... with half its K depth
OFF, FAST = {"fp_contract": False}, {"fast_math": True}
ARCHS: tuple[str, ...] = ()  # --arch: the archs every kernel is built for (() : the target's defaults)
GEMM_VARIANTS = [  # (opts of gemm 2048's kernel, build flags, label); the heuristics' own (fma, STAGE) is the row above
  (None, OFF, "--fp-contract=off: the IR's two roundings, the heuristics"),
  (DEPTH4 + ",STAGE(2)", None, "k depth 4, STAGE"),
  (STAGED_TILE, None, "unstaged"),
  (STAGED_TILE.replace("SPLIT(0,8,l)", "SPLIT(0,16,l)") + ",STAGE(2)", None, "128 x 128 a workgroup, STAGE"),
  (STAGED_TILE, OFF, "unstaged, --fp-contract=off"),
  (None, FAST, "--fast-math, the heuristics"),
  (None, {"allow_tf32": True}, "--allow-tf32: tensor cores; torch with allow_tf32 too"),
]


def bench_gemm_pins(gpu: Driver, timer: Timer, out_dir: pathlib.Path, pins: list[str | None], shape=(2048, 2048, 2048)) -> None:
  """The float32 gemm tensor program of `shape` (M, K, N, or H, M, K, N: H of them) with each of `pins` as its kernel's
  opts (None: the heuristics')."""
  from bench.workloads import batched_gemm_shape, gemm_shape
  rng = np.random.default_rng(3)
  for opts in pins:
    try:
      w = gemm_shape(*shape) if len(shape) == 3 else batched_gemm_shape(*shape)
      bench_tensor_program(gpu, timer, out_dir, w, _torch_gemm(None), rng, {}, opts, None, opts or "tensor program")
    except Exception as e:  # noqa: BLE001
      print(f"gemm {shape} ({opts}): FAILED: {type(e).__name__}: {str(e)[:300]}")


# float32 gemms of real models whose sizes the tiles do not divide (M x K x N): ViT-B/16's 197 tokens (MLP up and
# down, QKV), GPT-2's logits (50257 classes) for 64 and 128 tokens, a 1031-wide layer, ImageNet's 1000 classes
RAGGED_GEMMS = ((197, 768, 3072), (197, 3072, 768), (197, 768, 2304), (64, 768, 50257), (128, 768, 50257),
                (1024, 768, 1031), (1000, 768, 1000), (12, 197, 64, 197), (12, 197, 197, 64))  # ... and ViT's attention (H x M x K x N)
# ... and skinny ones (few rows: tokens of a small batch): GPT-2's MLP and QKV at 64 and 16 tokens, one token; its logits
SKINNY_GEMMS = ((64, 768, 3072), (64, 3072, 768), (64, 768, 2304), (16, 768, 3072), (16, 3072, 768), (1, 768, 3072), (1, 3072, 768),
                (16, 768, 50257), (1, 768, 50257))


def bench_gemm_shapes(gpu: Driver, timer: Timer, out_dir: pathlib.Path, shapes) -> None:
  """The float32 gemm tensor program of each (M, K, N) or (H, M, K, N) of `shapes` with the heuristics' opts, against torch.matmul."""
  from bench.workloads import batched_gemm_shape, gemm_shape
  rng = np.random.default_rng(3)
  for shape in shapes:
    try:
      bench_tensor_program(gpu, timer, out_dir, gemm_shape(*shape) if len(shape) == 3 else batched_gemm_shape(*shape), _torch_gemm(None), rng, {})
    except Exception as e:  # noqa: BLE001
      print(f"gemm {shape}: FAILED: {type(e).__name__}: {str(e)[:300]}")


def _torch_gemm(flags: dict | None):
  """torch's a @ b, with TF32 where the variant allows it (restored after each call)."""
  tf32 = bool(flags and flags.get("allow_tf32"))
  def run(t, a, b):
    old, t.backends.cuda.matmul.allow_tf32 = t.backends.cuda.matmul.allow_tf32, tf32
    try:
      return a @ b
    finally:
      t.backends.cuda.matmul.allow_tf32 = old
  return run


def main() -> None:
  import argparse
  parser = argparse.ArgumentParser(description="uopc -t cuda against torch on this machine's GPU")
  parser.add_argument("--hgemm-opts", action="append", default=[], metavar="OPTS", help="also time the f16 gemm 4096 with OPTS pinned")
  parser.add_argument("--arch", action="append", default=[], metavar="ARCH",
                      help="build every kernel for ARCH (repeatable), not the default archs (sm_80, sm_90a: the warpgroup MMAs "
                           "on an H100); e.g. --arch sm_80 --arch sm_90 for mma.sync only")
  parser.add_argument("--hgemm-only", action="store_true", help="time only the f16 gemm 4096 (heuristics, then each --hgemm-opts)")
  parser.add_argument("--conv-opts", action="append", default=[], metavar="OPTS", help="also time the batched convolution with OPTS pinned")
  parser.add_argument("--conv-only", action="store_true", help="time only the batched convolution (heuristics, then each --conv-opts)")
  parser.add_argument("--conv-shape", action="append", default=[], metavar="N,C,HW,O",
                      help="with --conv-only: time the 3x3 convolution of this shape instead (repeatable; e.g. 1,512,7,512 for ResNet's last stage)")
  parser.add_argument("--gemm-opts", action="append", default=[], metavar="OPTS", help="also time the float32 gemm 2048 with OPTS pinned")
  parser.add_argument("--gemm-only", action="store_true", help="time only the float32 gemm 2048 (heuristics, then each --gemm-opts)")
  parser.add_argument("--gemm-shape", default="2048,2048,2048", metavar="[H,]M,K,N", help="the float32 gemm of --gemm-only/--gemm-opts (H: batched)")
  parser.add_argument("--ragged", action="store_true", help="time only the float32 gemms of RAGGED_GEMMS (real models' shapes)")
  parser.add_argument("--skinny", action="store_true", help="time only the float32 gemms of SKINNY_GEMMS (few rows)")
  args = parser.parse_args()
  global ARCHS
  ARCHS = tuple(args.arch)
  try:
    gpu = Driver()
  except (OSError, RuntimeError) as e:
    print(f"skipped: no usable CUDA GPU ({e})")
    return
  timer = Timer(gpu)
  out_dir = pathlib.Path(tempfile.mkdtemp(prefix="uopc_bench_cuda_"))
  if args.hgemm_only:
    bench_hgemm_pins(gpu, timer, out_dir, [None, *args.hgemm_opts])
    return
  if args.conv_only:
    for shape in [tuple(int(x) for x in c.split(",")) for c in args.conv_shape] or [(32, 64, 56, 64)]:
      for opts in (None, *args.conv_opts): bench_batched_conv(gpu, timer, out_dir, opts, *shape)
    return
  shape = tuple(int(x) for x in args.gemm_shape.split(","))
  if args.gemm_only:
    bench_gemm_pins(gpu, timer, out_dir, [None, *args.gemm_opts], shape)
    return
  if args.ragged or args.skinny:
    bench_gemm_shapes(gpu, timer, out_dir, (RAGGED_GEMMS if args.ragged else ()) + (SKINNY_GEMMS if args.skinny else ()))
    return
  bandwidths = {"copy": bench_add(gpu, timer, out_dir), "peak": peak_gbs(gpu)}
  print(f"DRAM peak from the driver (memory clock x bus width): {bandwidths['peak']:.1f} GB/s")
  bench_softmax(gpu, timer, out_dir)
  for dt in (dtypes.float32, dtypes.float16): bench_gemm(gpu, timer, out_dir, dt)
  from bench.workloads import LN_EPS, elementwise, gemms, half_gemm, rows
  rng = np.random.default_rng(3)
  softmax, layernorm = rows(4096, 4096)
  with_torch = [(elementwise(256 << 20)[0], lambda t, x, y: x + y), (softmax, lambda t, x: t.softmax(x, 1)),
                (layernorm, lambda t, x, g, b: t.nn.functional.layer_norm(x, (x.shape[1],), g, b, LN_EPS)),
                (gemms([2048])[0], lambda t, a, b: a @ b), (half_gemm(4096), lambda t, a, b: a @ b)]
  for w, torch_fn in with_torch:
    try:
      bench_tensor_program(gpu, timer, out_dir, w, torch_fn, rng, bandwidths)
    except Exception as e:  # noqa: BLE001 - one failing workload must not hide the others' numbers
      print(f"{w.name} (tensor program): FAILED: {type(e).__name__}: {str(e)[:300]}")
  for opts, flags, label in GEMM_VARIANTS:  # the float32 gemm's shared-memory staging (STAGE) against its register tiles alone
    try:
      bench_tensor_program(gpu, timer, out_dir, gemms([2048])[0], _torch_gemm(flags), rng, bandwidths, opts, flags, label)
    except Exception as e:  # noqa: BLE001
      print(f"gemm 2048 ({label}): FAILED: {type(e).__name__}: {str(e)[:300]}")
  try:
    bench_batched_conv(gpu, timer, out_dir)
  except Exception as e:  # noqa: BLE001
    print(f"conv3x3 batch 32: FAILED: {type(e).__name__}: {str(e)[:300]}")
  if args.hgemm_opts: bench_hgemm_pins(gpu, timer, out_dir, args.hgemm_opts)
  for opts in args.conv_opts: bench_batched_conv(gpu, timer, out_dir, opts)
  if args.gemm_opts: bench_gemm_pins(gpu, timer, out_dir, args.gemm_opts, shape)


def bench_hgemm_pins(gpu: Driver, timer: Timer, out_dir: pathlib.Path, pins: list[str | None]) -> None:
  """The f16 gemm 4096 tensor program with each of `pins` pinned on its kernel (None: the heuristics)."""
  from bench.workloads import half_gemm
  for opts in pins:
    try:
      bench_tensor_program(gpu, timer, out_dir, half_gemm(4096), lambda t, a, b: a @ b, np.random.default_rng(3), {}, opts,
                           label=opts or "tensor program")
    except Exception as e:  # noqa: BLE001 - one failing pin must not hide the others' numbers
      print(f"gemm 4096 f16 ({opts}): FAILED: {type(e).__name__}: {str(e)[:300]}")


if __name__ == "__main__":
  main()
