"""`-t amd` on a real AMD GPU (marker `gpu`; `make test-gpu`): every per-op x per-dtype kernel of the C
target's case table (through Instruction Selection with the AMD capabilities, as the pipeline does)
against numpy, and every sample against the C target's library on the same inputs. The libraries are
called through ctypes like a C program would: only libNAME.so, with device memory from the HIP runtime
(libamdhip64.so). Skips cleanly without the runtime or a device (so everywhere but a ROCm machine).
"""
from __future__ import annotations

import ctypes
import pathlib

import numpy as np
import pytest

from gpu_samples import SAMPLES, assert_matches, c_target_runs, call
from test_c_ops import CASES, mismatches
from test_llvm_ops import seed_comparisons
from uopc.driver import BuildOptions, build
from uopc.launcher import EntryKernels, c_identifier, kernel_name
from uopc.stages.isel import isel
from uopc.targets import get_target
from uopc.stages.linearize import linearize
from uopc.targets.amd.build import build_artifacts
from uopc.targets.amd.render import render_kernel
from uopc.targets.llvm.render import AMD_ARCHS

pytestmark = pytest.mark.gpu
ROOT = pathlib.Path(__file__).resolve().parent.parent
HIP_MEMCPY_HOST_TO_DEVICE, HIP_MEMCPY_DEVICE_TO_HOST = 1, 2


class Runtime:
  """The few HIP calls the harness needs: device memory, copies, a synchronisation."""

  def __init__(self):
    self.hip = ctypes.CDLL("libamdhip64.so")
    count = ctypes.c_int()
    self.check(self.hip.hipGetDeviceCount(ctypes.byref(count)), "hipGetDeviceCount")
    if count.value == 0: raise RuntimeError("no AMD GPU")
    self.check(self.hip.hipSetDevice(0), "hipSetDevice")

  @staticmethod
  def check(err: int, what: str) -> None:
    if err != 0: raise RuntimeError(f"{what} failed with hipError {err}")

  def upload(self, host: np.ndarray) -> int:
    ptr = ctypes.c_void_p()
    self.check(self.hip.hipMalloc(ctypes.byref(ptr), ctypes.c_size_t(max(host.nbytes, 1))), "hipMalloc")
    if host.nbytes:
      self.check(self.hip.hipMemcpy(ptr, np.ascontiguousarray(host).ctypes.data_as(ctypes.c_void_p), ctypes.c_size_t(host.nbytes),
                                    HIP_MEMCPY_HOST_TO_DEVICE), "hipMemcpy to the device")
    return ptr.value

  def download(self, ptr: int, like: np.ndarray) -> np.ndarray:
    out = np.empty_like(like)
    self.check(self.hip.hipDeviceSynchronize(), "hipDeviceSynchronize (a kernel failed)")
    if out.nbytes:
      self.check(self.hip.hipMemcpy(out.ctypes.data_as(ctypes.c_void_p), ctypes.c_void_p(ptr), ctypes.c_size_t(out.nbytes),
                                    HIP_MEMCPY_DEVICE_TO_HOST), "hipMemcpy to the host")
    return out

  def free(self, ptr: int) -> None: self.check(self.hip.hipFree(ctypes.c_void_p(ptr)), "hipFree")


@pytest.fixture(scope="module")
def gpu():
  try:
    return Runtime()
  except (OSError, RuntimeError) as e:
    pytest.skip(f"no usable AMD GPU: {e}")


def kernel_entry(lib_name: str, entry: str, sinks) -> EntryKernels:
  prefix = c_identifier(lib_name)
  return EntryKernels(entry, tuple(render_kernel(linearize(isel(s, get_target("amd").ops)), kernel_name(prefix, entry, i))
                                   for i, s in enumerate(sinks)))


def test_every_op_and_dtype_matches_numpy(gpu, tmp_path):
  lib_name = "amdops"
  entries = {c.name: kernel_entry(lib_name, c.name, [c.sink]) for c in CASES.values()}
  lib = ctypes.CDLL(str(build_artifacts(tmp_path, lib_name, list(entries.values()), AMD_ARCHS)["so"]))
  failures = []
  for case in map(seed_comparisons, CASES.values()):
    got = call(gpu, lib, lib_name, entries[case.name], [np.zeros(len(case.expected), case.expected.dtype), *case.inputs])[0]
    if bad := mismatches(case, got):
      i = bad[0]
      failures.append(f"{case.name}: {len(bad)} wrong, e.g. inputs {[x[i] for x in case.inputs]} -> {got[i]!r}, expected {case.expected[i]!r}")
  assert not failures, "\n".join(failures)


@pytest.mark.parametrize("sample", SAMPLES)
def test_samples_match_the_c_target(gpu, sample, tmp_path):
  paths = build(ROOT / "samples" / sample, BuildOptions(target="amd", out_dir=tmp_path / "amd"))
  amd_lib = ctypes.CDLL(str(next(p for p in paths if p.suffix == ".so")))
  for run in c_target_runs(sample, tmp_path / "c"):
    assert_matches(run, call(gpu, amd_lib, pathlib.Path(sample).stem, run.entry, run.arrays, run.variables))
