"""Several real GPUs from Python without torch, for the multi-device GPU tests: the primary context of each
CUDA device and a stream in it, device memory and copies, through libcuda.so.1 (ctypes); and
`load_nccl`, which makes libnccl.so.2 loadable by a uopc library's dlopen (pip's nvidia-nccl wheels put it
where the loader does not look)."""
from __future__ import annotations

import ctypes
import importlib.util
import pathlib

import numpy as np

from test_cuda_gpu import check, cuda_driver


def load_nccl() -> str | None:
  """Load libnccl.so.2 (RTLD_GLOBAL: a later dlopen of that name finds it) from the loader's path or an
  nvidia-nccl wheel; the path loaded, or None where there is none."""
  candidates = ["libnccl.so.2"]
  spec = importlib.util.find_spec("nvidia")
  for root in (spec.submodule_search_locations or []) if spec else []:
    candidates += sorted(str(p) for p in pathlib.Path(root).glob("nccl*/lib/libnccl.so.2"))
  for c in candidates:
    try:
      ctypes.CDLL(c, mode=ctypes.RTLD_GLOBAL)
      return c
    except OSError:
      continue
  return None


class Gpus:
  """Every CUDA device's primary context and one stream in it; device memory by device index."""

  check = staticmethod(check)

  def __init__(self):
    self.cu, count = cuda_driver()
    self.ctxs, self.streams = [], []
    for i in range(count):
      dev, ctx, stream = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_void_p()
      self.check(self.cu.cuDeviceGet(ctypes.byref(dev), i), "cuDeviceGet")
      self.check(self.cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
      self.check(self.cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
      self.check(self.cu.cuStreamCreate(ctypes.byref(stream), 1), "cuStreamCreate")  # CU_STREAM_NON_BLOCKING
      self.ctxs.append(ctx)
      self.streams.append(stream.value)
    self.cu.cuCtxSetCurrent(self.ctxs[0])

  def __len__(self) -> int: return len(self.ctxs)

  def upload(self, gpu: int, host: np.ndarray) -> int:
    ptr = ctypes.c_uint64()
    self.check(self.cu.cuCtxSetCurrent(self.ctxs[gpu]), "cuCtxSetCurrent")
    self.check(self.cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(max(host.nbytes, 1))), "cuMemAlloc")
    if host.nbytes:
      self.check(self.cu.cuMemcpyHtoD_v2(ptr, np.ascontiguousarray(host).ctypes.data_as(ctypes.c_void_p), ctypes.c_size_t(host.nbytes)), "cuMemcpyHtoD")
    return ptr.value

  def synchronize(self) -> None:
    for ctx in self.ctxs:
      self.check(self.cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
      self.check(self.cu.cuCtxSynchronize(), "cuCtxSynchronize (a kernel or copy failed)")

  def download(self, gpu: int, ptr: int, like: np.ndarray) -> np.ndarray:
    out = np.empty_like(like)
    self.check(self.cu.cuCtxSetCurrent(self.ctxs[gpu]), "cuCtxSetCurrent")
    if out.nbytes: self.check(self.cu.cuMemcpyDtoH_v2(out.ctypes.data_as(ctypes.c_void_p), ctypes.c_uint64(ptr), ctypes.c_size_t(out.nbytes)), "cuMemcpyDtoH")
    return out

  def free(self, gpu: int, ptr: int) -> None:
    self.check(self.cu.cuCtxSetCurrent(self.ctxs[gpu]), "cuCtxSetCurrent")
    self.check(self.cu.cuMemFree_v2(ctypes.c_uint64(ptr)), "cuMemFree")
