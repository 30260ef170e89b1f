"""Timing `-t cuda` candidates on an NVIDIA GPU through the CUDA driver API (libcuda.so.1, by ctypes).

The candidate library is the ordinary `-t cuda` launcher (uopc.targets.cuda.launcher): its entry
takes device pointers and a last CUstream (NULL: the default stream) and loads its fatbin into the
current context, the device's primary context, made current here. Buffers are uploaded from the
kernel's starting contents before each measurement (uopc.tune.measure.KernelData); the time of a
call is the elapsed time between two CUDA events recorded on the default stream around it.

Not run in CI (no GPU there): tests/test_tune.py checks the CPU path end to end; this one needs a
GPU and is exercised by `uopc tune -t cuda` on one.
"""
from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from uopc.tune.measure import ENTRY, LIB, KernelData, Measurement, _median
from uopc.run import entry_strerror, library_arguments

_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, _CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 75, 76


class CudaError(RuntimeError):
  pass


class CudaDevice:
  """Device 0's primary context, device memory, copies and events."""

  def __init__(self):
    try:
      self.cu = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
      raise CudaError(f"cannot load the CUDA driver libcuda.so.1 ({e})") from None
    self._check(self.cu.cuInit(0), "cuInit")
    count, self.dev, self.ctx = ctypes.c_int(), ctypes.c_int(), ctypes.c_void_p()
    self._check(self.cu.cuDeviceGetCount(ctypes.byref(count)), "cuDeviceGetCount")
    if count.value == 0: raise CudaError("no CUDA device")
    self._check(self.cu.cuDeviceGet(ctypes.byref(self.dev), 0), "cuDeviceGet")
    self._check(self.cu.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), self.dev), "cuDevicePrimaryCtxRetain")
    self._check(self.cu.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")
    self.start, self.end = ctypes.c_void_p(), ctypes.c_void_p()
    for ev in (self.start, self.end): self._check(self.cu.cuEventCreate(ctypes.byref(ev), 0), "cuEventCreate")
    name = ctypes.create_string_buffer(256)
    self._check(self.cu.cuDeviceGetName(name, 256, self.dev), "cuDeviceGetName")
    self.description = f"{name.value.decode()} ({self.arch()})"

  def _check(self, err: int, what: str) -> None:
    if err != 0: raise CudaError(f"{what} failed with CUresult {err}")

  def arch(self) -> str:
    """The device's sm_XY (its compute capability)."""
    major, minor = ctypes.c_int(), ctypes.c_int()
    self._check(self.cu.cuDeviceGetAttribute(ctypes.byref(major), _CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self.dev), "cuDeviceGetAttribute")
    self._check(self.cu.cuDeviceGetAttribute(ctypes.byref(minor), _CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self.dev), "cuDeviceGetAttribute")
    return f"sm_{major.value}{minor.value}"

  def _upload(self, host: np.ndarray) -> int:
    ptr = ctypes.c_uint64()
    self._check(self.cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(max(host.nbytes, 1))), "cuMemAlloc")
    if host.nbytes: self._check(self.cu.cuMemcpyHtoD_v2(ptr, host.ctypes.data_as(ctypes.c_void_p), ctypes.c_size_t(host.nbytes)), "cuMemcpyHtoD")
    return ptr.value

  def _download(self, ptr: int, like: np.ndarray) -> np.ndarray:
    out = np.empty_like(like)
    self._check(self.cu.cuCtxSynchronize(), "cuCtxSynchronize (the kernel failed)")
    if out.nbytes: self._check(self.cu.cuMemcpyDtoH_v2(out.ctypes.data_as(ctypes.c_void_p), ctypes.c_uint64(ptr), ctypes.c_size_t(out.nbytes)), "cuMemcpyDtoH")
    return out

  def _elapsed(self, call) -> float:
    self._check(self.cu.cuEventRecord(self.start, None), "cuEventRecord")
    call()
    self._check(self.cu.cuEventRecord(self.end, None), "cuEventRecord")
    self._check(self.cu.cuEventSynchronize(self.end), "cuEventSynchronize")
    ms = ctypes.c_float()
    self._check(self.cu.cuEventElapsedTime(ctypes.byref(ms), self.start, self.end), "cuEventElapsedTime")
    return ms.value / 1e3

  def measure(self, so: Path, data: KernelData, runs: int, max_seconds: float) -> Measurement:
    lib = ctypes.CDLL(str(so))
    order = library_arguments(lib, LIB, ENTRY, data.args)
    ptrs = {a.name: self._upload(np.ascontiguousarray(data.inputs[a.name])) for a in order}
    try:
      fn = getattr(lib, f"{LIB}_{ENTRY}")
      fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_uint64] * len(order) + [ctypes.c_void_p]
      args = [ptrs[a.name] for a in order]
      def call() -> None:
        if (status := fn(*args, None)) != 0: raise CudaError(f"the candidate failed: {entry_strerror(lib, LIB, status)}")
      call()
      outputs = {a.name: self._download(ptrs[a.name], data.inputs[a.name]) for a in data.written()}
      return Measurement(outputs, _median(call, runs, max_seconds, self._elapsed))
    finally:
      for p in ptrs.values(): self.cu.cuMemFree_v2(ctypes.c_uint64(p))
