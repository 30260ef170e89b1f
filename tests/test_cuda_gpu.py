"""`-t cuda` on a real GPU (marker `gpu`; `make test-gpu`): every per-op x per-dtype kernel of the C
target's case table (through Instruction Selection, as the pipeline does) against numpy; every sample
against the C target's library on the same inputs; hand-written kernels for what the samples do not
reach (threads, the flat-index guard, shared memory and barriers, gated and vector memory, atomics,
run-time sizes, multi-kernel workspaces). The libraries are called through ctypes like a C program
would: only libNAME.so, with device memory from the CUDA driver (libcuda.so.1).

Set UOPC_CUDA_SANITIZER=1 to run this module again under `compute-sanitizer --tool memcheck`
(test_under_compute_sanitizer; skipped where compute-sanitizer is not installed). Skips cleanly
without libcuda.so.1 or a device.
"""
from __future__ import annotations

import ctypes
import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

from gpu_samples import SAMPLES, assert_matches, c_target_runs, call
from test_c_ops import CASES, mismatches
from test_llvm_ops import seed_comparisons
from uopc.dtype import AddrSpace, dtypes
from uopc.driver import BuildOptions, build
from uopc.launcher import EntryKernels, c_identifier, kernel_name
from uopc.ops import AxisType, Ops
from uopc.stages.isel import isel
from uopc.targets import get_target
from uopc.stages.linearize import linearize
from uopc.targets import BuildRequest
from uopc.targets.cuda import target as cuda_target
from uopc.targets.cuda.ptx import render_kernel
from uopc.uop import UOp

pytestmark = pytest.mark.gpu
ROOT = pathlib.Path(__file__).resolve().parent.parent
idx = dtypes.index


# ---- the CUDA driver, through ctypes ----------------------------------------------------------------------------
def check(err: int, what: str) -> None:
  if err != 0: raise RuntimeError(f"{what} failed with CUresult {err}")


def cuda_driver() -> tuple[ctypes.CDLL, int]:
  """libcuda.so.1, initialised, and its number of devices (OSError or RuntimeError where there is none)."""
  cu = ctypes.CDLL("libcuda.so.1")
  check(cu.cuInit(0), "cuInit")
  count = ctypes.c_int()
  check(cu.cuDeviceGetCount(ctypes.byref(count)), "cuDeviceGetCount")
  if count.value == 0: raise RuntimeError("no CUDA device")
  return cu, count.value


class Driver:
  """The few driver calls the harness needs: a primary context, device memory and copies."""
  check = staticmethod(check)

  def __init__(self):
    self.cu, _ = cuda_driver()
    dev, self.ctx = ctypes.c_int(), ctypes.c_void_p()
    self.check(self.cu.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    self.check(self.cu.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), dev), "cuDevicePrimaryCtxRetain")
    self.check(self.cu.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")

  def upload(self, host: np.ndarray) -> int:
    ptr = ctypes.c_uint64()
    self.check(self.cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(max(host.nbytes, 1))), "cuMemAlloc")
    if host.nbytes:
      self.check(self.cu.cuMemcpyHtoD_v2(ptr, np.ascontiguousarray(host).ctypes.data_as(ctypes.c_void_p), ctypes.c_size_t(host.nbytes)), "cuMemcpyHtoD")
    return ptr.value

  def download(self, ptr: int, like: np.ndarray) -> np.ndarray:
    out = np.empty_like(like)
    self.check(self.cu.cuCtxSynchronize(), "cuCtxSynchronize (a kernel failed)")
    if out.nbytes: self.check(self.cu.cuMemcpyDtoH_v2(out.ctypes.data_as(ctypes.c_void_p), ctypes.c_uint64(ptr), ctypes.c_size_t(out.nbytes)), "cuMemcpyDtoH")
    return out

  def free(self, ptr: int) -> None: self.check(self.cu.cuMemFree_v2(ctypes.c_uint64(ptr)), "cuMemFree")

  def compute_capability(self) -> tuple[int, int]:
    major, minor = ctypes.c_int(), ctypes.c_int()
    for out, attr in ((major, 75), (minor, 76)):  # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR / _MINOR
      self.check(self.cu.cuDeviceGetAttribute(ctypes.byref(out), attr, 0), "cuDeviceGetAttribute")
    return major.value, minor.value


@pytest.fixture(scope="module")
def gpu():
  try:
    return Driver()
  except (OSError, RuntimeError) as e:
    pytest.skip(f"no usable CUDA GPU: {e}")


# ---- building and calling libraries ------------------------------------------------------------------------------
def build_library(out: pathlib.Path, name: str, entries: list[EntryKernels]) -> ctypes.CDLL:
  out.mkdir(parents=True, exist_ok=True)
  kinds = tuple(cuda_target.artifacts(name))
  paths = cuda_target.build(BuildRequest(out, name, entries, kinds, 3, cuda_target.DEFAULT_ARCHS))
  return ctypes.CDLL(str(paths["so"]))


def kernel_entry(lib_name: str, entry: str, sinks: list[UOp], workspace=None) -> EntryKernels:
  prefix = c_identifier(lib_name)
  kernels = tuple(render_kernel(linearize(isel(s, get_target("cuda").ops)), kernel_name(prefix, entry, i)) for i, s in enumerate(sinks))
  return EntryKernels(entry, kernels, workspace)


# ---- every op and dtype ----------------------------------------------------------------------------------------------
def _pow64_mismatches(case, got: np.ndarray) -> list[int]:
  """PTX has no pow, so float64 POW is Instruction Selection's EXP2(b * LOG2(a)), whose relative error
  is about |b * log2(a)| * 2^-53 (documented in uopc/stages/transcendental.py): allow that, plus 2 ULP."""
  a, b = (x.astype(np.float64) for x in case.inputs)
  with np.errstate(all="ignore"):
    allowed = (np.abs(b * np.log2(a)) + 2) * np.spacing(np.abs(case.expected))
    bad = ~((np.abs(got - case.expected) <= allowed) | (np.isnan(got) & np.isnan(case.expected)) | (got == case.expected))
  return np.flatnonzero(bad).tolist()


def test_every_op_and_dtype_matches_numpy(gpu, tmp_path):
  lib_name = "cudaops"
  entries = {c.name: kernel_entry(lib_name, c.name, [c.sink]) for c in CASES.values()}
  lib = build_library(tmp_path, lib_name, list(entries.values()))
  failures = []
  for case in map(seed_comparisons, CASES.values()):
    got = call(gpu, lib, lib_name, entries[case.name], [np.zeros(len(case.expected), case.expected.dtype), *case.inputs])[0]
    if case.name == "k_pow_float64": bad = _pow64_mismatches(case, got)
    else: bad = mismatches(case, got)
    if bad:
      i = bad[0]
      failures.append(f"{case.name}: {len(bad)} wrong, e.g. inputs {[x[i] for x in case.inputs]} -> {got[i]!r}, expected {case.expected[i]!r}")
  assert not failures, "\n".join(failures)


# ---- samples against the C target -------------------------------------------------------------------------------------
@pytest.mark.parametrize("sample", SAMPLES)
def test_samples_match_the_c_target(gpu, sample, tmp_path):
  paths = build(ROOT / "samples" / sample, BuildOptions(target="cuda", out_dir=tmp_path / "cuda"))
  cuda_lib = ctypes.CDLL(str(next(p for p in paths if p.suffix == ".so")))
  for run in c_target_runs(sample, tmp_path / "c"):
    assert_matches(run, call(gpu, cuda_lib, pathlib.Path(sample).stem, run.entry, run.arrays, run.variables))


# ---- hand-written kernels: threads, guards, shared memory, atomics, sizes, workspaces ---------------------------------------
def _param(slot: int, dt=dtypes.float32):
  return UOp(Ops.PARAM, dt.ptr(), (), (slot, f"data{slot}"))


def _store(buf: UOp, i: UOp, value: UOp, *gate: UOp) -> UOp:
  return UOp(Ops.STORE, src=(UOp(Ops.INDEX, buf.dtype, (buf, i)), value, *gate))


def _load(buf: UOp, i: UOp, dt=None) -> UOp:
  return UOp(Ops.LOAD, dt or buf.dtype.base, (UOp(Ops.INDEX, buf.dtype, (buf, i)),))


def _sink(*xs: UOp) -> UOp: return UOp(Ops.SINK, src=xs)


def test_flat_index_guard_with_a_run_time_size(gpu, tmp_path):
  """out[i] = x[i] * 2 for i < n, n a DEFINE_VAR: the grid comes from n at launch, threads past n do nothing."""
  out, x = _param(0), _param(1)
  n = UOp(Ops.DEFINE_VAR, idx, (), ("n", 1, 1 << 20))
  i = UOp(Ops.SPECIAL, idx, (n,), "idx0")
  entry = kernel_entry("flat", "scale", [_sink(_store(out, i, _load(x, i).alu(Ops.MUL, UOp.const(dtypes.float32, 2.0))))])
  lib = build_library(tmp_path, "flat", [entry])
  xs = np.arange(1500, dtype=np.float32)
  for size in (1, 255, 256, 1000, 1500):
    got = call(gpu, lib, "flat", entry, [np.full(1500, -1.0, np.float32), xs], {"n": size})[0]
    np.testing.assert_array_equal(got, np.where(np.arange(1500) < size, xs * 2, -1.0).astype(np.float32))


def test_shared_memory_barrier_and_vector_loads(gpu, tmp_path):
  """Each block of 64 threads loads float4s into shared memory, waits at the barrier and writes the
  block's 256 floats reversed: a missing barrier or a wrong shared address shows in the result."""
  out, x = _param(0), _param(1)
  g = UOp(Ops.SPECIAL, idx, (UOp.const(idx, 8),), "gidx0")
  lid = UOp(Ops.SPECIAL, idx, (UOp.const(idx, 64),), "lidx0")
  temp = UOp(Ops.BUFFER, dtypes.float32.ptr(AddrSpace.LOCAL, 256), (), (0, "temp"))
  four = lid.alu(Ops.MUL, UOp.const(idx, 4))
  base = g.alu(Ops.MUL, UOp.const(idx, 256))
  fill = _store(temp, four, _load(x, base.alu(Ops.ADD, four), dtypes.float32.vec(4)))
  after = UOp(Ops.AFTER, temp.dtype, (temp, UOp(Ops.BARRIER, src=(fill,))))
  rev = [UOp(Ops.LOAD, dtypes.float32, (UOp(Ops.INDEX, temp.dtype, (after, UOp.const(idx, 255).alu(Ops.SUB, four.alu(Ops.ADD, UOp.const(idx, j))))),))
         for j in range(4)]
  st = _store(out, base.alu(Ops.ADD, four), UOp(Ops.STACK, dtypes.float32.vec(4), tuple(rev)))
  entry = kernel_entry("shared", "reverse", [_sink(st)])
  lib = build_library(tmp_path, "shared", [entry])
  xs = np.random.default_rng(3).standard_normal(2048).astype(np.float32)
  got = call(gpu, lib, "shared", entry, [np.zeros(2048, np.float32), xs])[0]
  np.testing.assert_array_equal(got, xs.reshape(8, 256)[:, ::-1].reshape(-1))


def test_gated_loads_and_atomic_add(gpu, tmp_path):
  """Every thread adds x[i] (0 past the gate's end) to one int32 counter with atom.global.add."""
  out, x = _param(0, dtypes.int32), _param(1, dtypes.int32)
  i = UOp(Ops.SPECIAL, idx, (UOp.const(idx, 4096),), "idx0")
  gate = i.alu(Ops.CMPLT, UOp.const(idx, 3000))
  val = UOp(Ops.LOAD, dtypes.int32, (UOp(Ops.INDEX, x.dtype, (x, i)), UOp.const(dtypes.int32, 0), gate))
  add = UOp(Ops.ATOMICADD, dtypes.void, (UOp(Ops.INDEX, out.dtype, (out, UOp.const(idx, 0))), val))
  entry = kernel_entry("atomic", "count", [_sink(add)])
  lib = build_library(tmp_path, "atomic", [entry])
  xs = np.random.default_rng(5).integers(-1000, 1000, 4096).astype(np.int32)
  got = call(gpu, lib, "atomic", entry, [np.zeros(1, np.int32), xs])[0]
  assert got[0] == xs[:3000].sum()


def test_two_kernels_through_a_workspace(gpu, tmp_path):
  """k0 writes x + 1 into an intermediate (slot 1, in the workspace), k1 reads it and writes its square."""
  from uopc.launcher import Workspace
  out, mid, x = _param(0), _param(1), _param(2)
  r = UOp(Ops.RANGE, idx, (UOp.const(idx, 100),), (0, AxisType.LOOP))
  k0 = _sink(UOp(Ops.END, src=(_store(mid, r, _load(x, r).alu(Ops.ADD, UOp.const(dtypes.float32, 1.0))), r)))
  k1 = _sink(UOp(Ops.END, src=(_store(out, r, _load(mid, r).alu(Ops.MUL, _load(mid, r))), r)))
  entry = kernel_entry("ws", "square", [k0, k1], Workspace(512, ((1, 64),)))
  lib = build_library(tmp_path, "ws", [entry])
  xs = np.linspace(-3, 3, 100).astype(np.float32)
  got = call(gpu, lib, "ws", entry, [np.zeros(100, np.float32), xs])[0]
  np.testing.assert_array_equal(got, (xs + 1) * (xs + 1))


def _ulp_distance_u8(got: UOp, want: UOp) -> UOp:
  """|bits(got) - bits(want)| for non-negative floats as uint8, saturated at 255; 0 when both are NaN, 255
  when only one is."""
  i32 = dtypes.int32
  d = UOp(Ops.BITCAST, i32, (got,)).alu(Ops.SUB, UOp(Ops.BITCAST, i32, (want,)))
  d = d.alu(Ops.CMPLT, UOp.const(i32, 0)).alu(Ops.WHERE, d.alu(Ops.MUL, UOp.const(i32, -1)), d)
  d = d.alu(Ops.CMPLT, UOp.const(i32, 0)).alu(Ops.WHERE, UOp.const(i32, 255), d)  # -INT_MIN wraps
  d = d.alu(Ops.CMPLT, UOp.const(i32, 255)).alu(Ops.WHERE, d, UOp.const(i32, 255))
  nan_got, nan_want = got.alu(Ops.CMPNE, got), want.alu(Ops.CMPNE, want)
  d = nan_got.alu(Ops.CMPNE, nan_want).alu(Ops.WHERE, UOp.const(i32, 255), nan_got.alu(Ops.WHERE, UOp.const(i32, 0), d))
  return UOp(Ops.CAST, dtypes.uint8, (d,))


def test_float32_exp2_within_2_ulp_on_every_input(gpu, tmp_path):
  """EXP2 of float32 is ex2.approx.f32 (uopc/targets/cuda/ptx.py): for all 2^32 bit patterns, its ULP
  distance from the float64 decomposition's result rounded to float32 (within 1 ULP of float64, so
  correctly rounded but for ties closer than 2^-29 ULP) is at most 2, subnormal results and special
  values included. The kernel computes the distances; 16 launches of 2^28 inputs each."""
  out = _param(0, dtypes.uint8)
  chunk = 1 << 28
  base = UOp(Ops.DEFINE_VAR, idx, (), ("base", 0, (1 << 32) - chunk))
  i = UOp(Ops.SPECIAL, idx, (UOp.const(idx, chunk),), "idx0")
  x = UOp(Ops.BITCAST, dtypes.float32, (UOp(Ops.CAST, dtypes.uint32, (i.alu(Ops.ADD, base),)),))
  got = UOp(Ops.EXP2, dtypes.float32, (x,))
  want = UOp(Ops.CAST, dtypes.float32, (UOp(Ops.EXP2, dtypes.float64, (UOp(Ops.CAST, dtypes.float64, (x,)),)),))
  entry = kernel_entry("exp2all", "distances", [_sink(_store(out, i, _ulp_distance_u8(got, want)))])
  assert "ex2.approx.f32" in entry.kernels[0].source
  lib = build_library(tmp_path, "exp2all", [entry])
  worst = {}
  for start in range(0, 1 << 32, chunk):
    dist = call(gpu, lib, "exp2all", entry, [np.zeros(chunk, np.uint8)], {"base": start})[0]
    worst[start] = (int(dist.max()), start + int(dist.argmax()))
  assert max(w for w, _ in worst.values()) <= 2, {hex(s): (w, hex(b)) for s, (w, b) in worst.items() if w > 2}


def test_under_compute_sanitizer():
  """This module again, under compute-sanitizer's memcheck: any out-of-bounds or misaligned access fails it."""
  if os.environ.get("UOPC_CUDA_SANITIZER") != "1": pytest.skip("set UOPC_CUDA_SANITIZER=1 to run under compute-sanitizer")
  tool = shutil.which("compute-sanitizer")
  if tool is None: pytest.skip("compute-sanitizer not installed")
  env = {**os.environ, "UOPC_CUDA_SANITIZER": "0"}
  done = subprocess.run([tool, "--tool", "memcheck", "--error-exitcode", "99", sys.executable, "-m", "pytest", "-q", "-p", "no:xdist",
                         "-m", "gpu", __file__, "-k", "not compute_sanitizer"], capture_output=True, text=True, env=env, cwd=ROOT)
  assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
