"""Multi-device programs on real GPUs (marker `gpu`, `make test-gpu`): seed 000's collectives, tinygrad's
ALLREDUCE form and the tensor-parallel MLP built with -t cuda, called through ctypes with each device
shard in its GPU's memory and one stream per device, checked against numpy. Each runs both ways: by
default (an allreduce through NCCL where libnccl.so.2 loads, PREFIX_nccl_init set up the GPUs and the
devices are distinct GPUs) and with UOPC_NCCL=0 (copies and reductions).
- One GPU: two and three logical devices, every shard on GPU 0 and one stream for all: NCCL cannot
  apply (it needs distinct GPUs), so both ways compose, the default one after initializing NCCL.
- Several GPUs (skipped with fewer than 2): one shard per GPU, 2 up to 4 of them; by default NCCL is
  up on all of them when libnccl.so.2 is found (`multi_gpu.load_nccl`).
"""
from __future__ import annotations

import ctypes
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from multi_gpu import Gpus, load_nccl  # noqa: E402
from multi_programs import collectives, tp_mlp  # noqa: E402
from test_multi_device import _arrays, _check, _module  # noqa: E402

from uopc.pipeline import compile_module  # noqa: E402
from uopc.run import _LIB, build_library  # noqa: E402
from uopc.targets.cuda.multi_device import entry_devices  # noqa: E402

pytestmark = pytest.mark.gpu
NO_NCCL = 104


@pytest.fixture(scope="module")
def gpus():
  try:
    return Gpus()
  except (OSError, RuntimeError) as e:
    pytest.skip(f"no usable CUDA GPU: {e}")


def run_programs(gpus: Gpus, tmp_path: pathlib.Path, progs, gpu_of: list[int], streams: list[int], nccl: str, monkeypatch) -> int:
  """Build `progs` (all on n = len(gpu_of) devices; device k's shards on GPU gpu_of[k], queued on
  streams[k]), run each against numpy; returns how many GPUs NCCL was set up on."""
  if nccl == "off": monkeypatch.setenv("UOPC_NCCL", "0")
  else: monkeypatch.delenv("UOPC_NCCL", raising=False)
  found = nccl != "off" and load_nccl() is not None
  n = len(gpu_of)
  path, module = _module(tmp_path, progs, f"multi{n}")
  lib = ctypes.CDLL(str(build_library(path, "cuda", tmp_path / f"cuda_{nccl}")))  # its own library: UOPC_NCCL is read once
  kernels = {e.name: e for e in compile_module(module, "cuda", _LIB)}
  distinct = sorted(set(gpu_of))
  status = getattr(lib, f"{_LIB}_nccl_init")(len(distinct), (ctypes.c_int * len(distinct))(*distinct))
  assert status == (0 if found else NO_NCCL), status
  strerror = getattr(lib, f"{_LIB}_strerror")
  strerror.restype = ctypes.c_char_p
  for p in progs:
    entry, args, arrays = _arrays(module, p)
    devices = entry_devices(kernels[p.name])
    bufs = [a for a in args if a.kind == "buffer"]
    gpu = {a.name: gpu_of[devices.index(a.node.device)] for a in bufs}
    ptrs = {a.name: gpus.upload(gpu[a.name], arrays[a.name]) for a in bufs}
    fn = getattr(lib, f"{_LIB}_{p.name}")
    fn.argtypes = [ctypes.c_uint64] * len(bufs) + [ctypes.c_void_p] * len(devices)
    status = fn(*[ptrs[a.name] for a in bufs], *[streams[k] for k in range(len(devices))])
    assert status == 0, strerror(status).decode()
    gpus.synchronize()
    for a in bufs: arrays[a.name] = gpus.download(gpu[a.name], ptrs[a.name], arrays[a.name])
    for a in bufs: gpus.free(gpu[a.name], ptrs[a.name])
    _check(p, arrays)
  active = getattr(lib, f"{_LIB}_nccl_num_devices")()
  getattr(lib, f"{_LIB}_nccl_teardown")()
  return active


@pytest.mark.parametrize("nccl", ["default", "off"])
@pytest.mark.parametrize("n", [2, 3])
def test_collectives_on_one_gpu_as_several_logical_devices(gpus, n, nccl, tmp_path, monkeypatch):
  progs = collectives(n, 2 * n) + [tp_mlp(n, hidden=2 * n)]
  active = run_programs(gpus, tmp_path, progs, [0] * n, [gpus.streams[0]] * n, nccl, monkeypatch)
  assert active <= 1  # one communicator at most: the n logical devices always compose


@pytest.mark.parametrize("nccl", ["default", "off"])
def test_collectives_with_one_shard_per_gpu(gpus, nccl, tmp_path, monkeypatch):
  n = min(len(gpus), 4)
  if n < 2: pytest.skip("needs 2 or more GPUs")
  progs = collectives(n, 2 * n * 64) + [tp_mlp(n, batch=16, d_in=32, hidden=16 * n, d_out=8)]
  active = run_programs(gpus, tmp_path, progs, list(range(n)), gpus.streams[:n], nccl, monkeypatch)
  assert active == (n if nccl == "default" and load_nccl() else 0)
