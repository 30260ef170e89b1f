"""The multi-GPU benchmark's parts that need no GPU: `--build-only` builds its library (the collectives, the
MLP and the big allreduce, with the NCCL entry points) for 2 and 3 devices; the arguments it passes are the
prototype's, in order, each on the GPU of its device; NVLink multicast is off as soon as it is imported.
(The benchmark itself runs on a multi-GPU machine: `python3 tests/bench/bench_multi_gpu.py`.)"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_multi_gpu as bench  # noqa: E402


def test_build_only_makes_the_library_for_each_device_count(tmp_path):
  done = subprocess.run([sys.executable, str(HERE / "bench_multi_gpu.py"), "--build-only", "--devices", "2", "3", "--size", "1536",
                         "--out", str(tmp_path)], capture_output=True, text=True)
  assert done.returncode == 0, done.stderr
  for n in (2, 3):
    header = (tmp_path / f"n{n}" / f"{bench.NAME}.h").read_text()
    assert (tmp_path / f"n{n}" / f"lib{bench.NAME}.so").exists() and f"int {bench.NAME}_nccl_init(int num_devices" in header
    streams = ", ".join(f"CUstream stream_{k}" for k in range(n))
    big = ", ".join([f"const float* x_dev{k}" for k in range(n)] + [f"float* out_dev{k}" for k in range(n)])
    assert f"int {bench.NAME}_{bench.BIG}({big}, {streams});" in header
    for p in bench.programs(n):  # what the benchmark passes is what the prototype takes, each shard on its own GPU
      bufs, arrays = bench.entry_buffers(tmp_path / f"n{n}" / f"{bench.NAME}.uop", p)
      proto = re.search(rf"int {bench.NAME}_{p.name}\((.*)\);", header).group(1)
      assert [a.split()[-1].lstrip("*") for a in proto.split(", ") if "CUstream" not in a] == [a.name for a in bufs]
      devices = list(dict.fromkeys(a.node.device for a in bufs))
      assert len(devices) == n and all(devices.index(a.node.device) == int(a.name[-1]) for a in bufs if "_dev" in a.name)
      assert all(arrays[a.name].size for a in bufs)


def test_nvlink_multicast_is_off_once_imported():
  env = {k: v for k, v in os.environ.items() if k not in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")}
  code = "import os, bench_multi_gpu; print(os.environ['NCCL_NVLS_ENABLE'], os.environ['TORCH_SYMM_MEM_DISABLE_MULTICAST'], os.environ['NVSHMEM_DISABLE_NVLS'])"
  done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=HERE, env={**env, "NCCL_NVLS_ENABLE": "1"})
  assert done.returncode == 0, done.stderr
  assert done.stdout.split() == ["0", "1", "1"]
  text = (HERE / "bench_multi_gpu.py").read_text()
  assert text.index('os.environ["NVSHMEM_DISABLE_NVLS"]') < text.index("\nimport argparse")  # before anything else is imported
