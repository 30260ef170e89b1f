"""Multi-GPU benchmark of `-t cuda` multi-device programs (issue 22): run by hand on a machine with 2 to 4
NVIDIA GPUs, `python3 tests/bench/bench_multi_gpu.py` (needs torch with CUDA, numpy and uopc).

With N = torch.cuda.device_count() (2 or 4; --devices caps it) and one shard per GPU:
1. builds, with `uopc build -t cuda --arch sm_90` (one library), seed 000's seven collectives and
   tinygrad's ALLREDUCE form (tests/multi_programs.py), the tensor-parallel MLP, and an allreduce of
   --size float32 per GPU (default 256M: 1 GiB);
2. loads the library twice: one copy with NCCL (PREFIX_nccl_init on GPUs 0..N-1), one with UOPC_NCCL=0
   (copies and reductions), and runs every program through both with ctypes, device pointers from torch
   tensors on each GPU and a torch stream per GPU, each result checked against numpy;
3. times the big allreduce through uopc's NCCL path, through its composed path, and through NCCL's own
   all_reduce with torch.distributed (backend nccl, one process per GPU, torch.multiprocessing spawn),
   in the same run: the median of --reps calls after warm-up, each timed with CUDA events (uopc: on
   stream 0, as a call starts after every stream's earlier work and every stream waits for its end;
   torch: on each rank's stream, the slowest rank's median). Bus bandwidth is 2 (N - 1) / N bytes / time
   (nccl-tests' definition); the ratio is the rate against torch.distributed's.
Prints a summary table (Markdown) of the checks and the timings. NVLink multicast stays off: the variables
below are set before torch or NCCL start, and the spawned processes inherit them.
`--build-only` only builds (for --devices, default 2 and 4, no GPU needed) and says where the artifacts are.
"""
from __future__ import annotations

import os

os.environ["NCCL_NVLS_ENABLE"] = "0"  # NVLink multicast off: it can put the host's shared GPUs out of service
os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"
os.environ["NVSHMEM_DISABLE_NVLS"] = "1"

import argparse  # noqa: E402
import ctypes  # noqa: E402
import pathlib  # noqa: E402
import shutil  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

TESTS = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(TESTS))
from multi_programs import allreduce_text, collectives, shard, tp_mlp, unshard  # noqa: E402

NAME = "multigpu"  # the library: libmultigpu.so, symbols multigpu_*
BIG = "allreduce_big"
SIZE = 256 * 1024 * 1024


# ---- building ------------------------------------------------------------------------------------------------------
def programs(n: int) -> list:
  """The checked programs on n devices (each with inputs and numpy's expected outputs)."""
  return collectives(n, 4096 * n) + [tp_mlp(n, batch=64, d_in=256, hidden=128 * n, d_out=64)]


def build(n: int, size: int, out: pathlib.Path) -> pathlib.Path:
  """The library of `programs(n)` and the big allreduce, built by the uopc CLI; its path."""
  out.mkdir(parents=True, exist_ok=True)
  src = out / f"{NAME}.uop"
  src.write_text("".join(p.text() for p in programs(n)) + allreduce_text(BIG, n, size))
  t0 = time.perf_counter()
  done = subprocess.run([sys.executable, "-m", "uopc", "build", str(src), "-t", "cuda", "--arch", "sm_90", "-o", str(out), "--name", NAME],
                        capture_output=True, text=True)
  if done.returncode != 0: sys.exit(f"uopc build failed:\n{done.stderr}")
  print(f"built {out / f'lib{NAME}.so'} for {n} devices in {time.perf_counter() - t0:.1f} s")
  return out / f"lib{NAME}.so"


def entry_buffers(src: pathlib.Path, prog) -> tuple[list, dict[str, np.ndarray]]:
  """The entry's buffer arguments in order (uopc.run's, each with its PARAM and so its device) and their
  arrays: inputs split per device, outputs zeros."""
  from uopc.frontend import parse_source
  from uopc.run import entry_arguments, prepare_arrays
  from uopc.stages.multi_device import lower_entry
  module = parse_source(src.read_text(), str(src))
  entry, _ = lower_entry(module.entry(prog.name), module)
  inputs = {}
  for name, (a, sharded) in prog.inputs.items(): inputs |= shard(name, a, prog.n) if sharded else {name: a}
  args = entry_arguments(entry)
  return [a for a in args if a.kind == "buffer"], prepare_arrays(module, args, inputs, {}, None)


# ---- calling through ctypes with torch memory ----------------------------------------------------------------------------
class Library:
  """One loaded copy of the library (its own NCCL state): entries called with torch tensors and streams."""

  def __init__(self, so: pathlib.Path, n: int, nccl: bool):
    if not nccl: os.environ["UOPC_NCCL"] = "0"  # read once, at this copy's first NCCL use: just below
    self.lib = ctypes.CDLL(str(so))
    self.lib.multigpu_strerror.restype = ctypes.c_char_p
    devices = (ctypes.c_int * n)(*range(n))
    self.init_status = self.lib.multigpu_nccl_init(n, devices)
    os.environ.pop("UOPC_NCCL", None)
    self.nccl_devices = self.lib.multigpu_nccl_num_devices()

  def call(self, entry: str, pointers: list[int], streams: list[int]) -> None:
    fn = getattr(self.lib, f"{NAME}_{entry}")
    fn.argtypes = [ctypes.c_void_p] * (len(pointers) + len(streams))
    status = fn(*pointers, *streams)
    if status != 0: raise RuntimeError(f"{entry}: {status} ({self.lib.multigpu_strerror(status).decode()})")


def synchronize(torch) -> None:
  """Every GPU idle: torch's uploads ran on its own streams, which do not order uopc's."""
  for k in range(torch.cuda.device_count()): torch.cuda.synchronize(k)


def check_program(torch, lib: Library, src: pathlib.Path, prog, streams) -> float:
  """Run `prog` once with its shards on their GPUs; the largest error against numpy (raises past the bar)."""
  bufs, arrays = entry_buffers(src, prog)
  devices = list(dict.fromkeys(a.node.device for a in bufs))  # stream k runs the k-th device named, on GPU k
  tensors = {a.name: torch.from_numpy(arrays[a.name]).to(f"cuda:{devices.index(a.node.device)}") for a in bufs}
  synchronize(torch)
  lib.call(prog.name, [tensors[a.name].data_ptr() for a in bufs], [s.cuda_stream for s in streams[:len(devices)]])
  synchronize(torch)
  got = {name: t.cpu().numpy() for name, t in tensors.items()}
  worst = 0.0
  for name, want in prog.expect(**{k: v for k, (v, _) in prog.inputs.items()}).items():
    value = (unshard(name, got, prog.n) if prog.outputs[name] else got[name]).reshape(want.shape)
    # float32 sums in another order than numpy's: the bar is relative to the output's largest magnitude
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    np.testing.assert_allclose(value, want, rtol=1e-4, atol=max(1e-4, 1e-5 * scale), err_msg=f"{prog.name}: {name}")
    worst = max(worst, float(np.max(np.abs(value - want))) / max(scale, 1.0) if want.size else 0.0)
  return worst


def time_allreduce(torch, lib: Library, n: int, size: int, streams, reps: int) -> tuple[float, float]:
  """(median ms per call of the big allreduce, its largest error against the sum of the inputs)."""
  gens = [torch.Generator(device=f"cuda:{k}").manual_seed(k) for k in range(n)]
  xs = [torch.randn(size, device=f"cuda:{k}", generator=gens[k]) for k in range(n)]
  outs = [torch.zeros(size, device=f"cuda:{k}") for k in range(n)]
  pointers, handles = [t.data_ptr() for t in xs + outs], [s.cuda_stream for s in streams]
  synchronize(torch)
  for _ in range(3): lib.call(BIG, pointers, handles)  # warm up: modules, NCCL channels, allocator pools
  start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
  times = []
  with torch.cuda.device(0):
    for _ in range(reps):
      start.record(streams[0])
      lib.call(BIG, pointers, handles)
      end.record(streams[0])
      end.synchronize()
      times.append(start.elapsed_time(end))
  synchronize(torch)
  want = sum(x.to("cuda:0") for x in xs)
  err = max(float((o.to("cuda:0") - want).abs().max()) for o in outs)
  del xs, outs, want
  torch.cuda.empty_cache()
  if not err <= 1e-4 * n: raise RuntimeError(f"the allreduce of {size} float32 is off by {err}")
  return float(np.median(times)), err


# ---- NCCL's own all_reduce through torch.distributed -------------------------------------------------------------------------
def _torch_rank(rank: int, n: int, size: int, reps: int, port: int, results) -> None:
  import torch
  import torch.distributed as dist
  torch.cuda.set_device(rank)
  dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=n, device_id=torch.device(f"cuda:{rank}"))
  x = torch.randn(size, device=f"cuda:{rank}", generator=torch.Generator(device=f"cuda:{rank}").manual_seed(rank))
  for _ in range(3): dist.all_reduce(x)
  torch.cuda.synchronize()
  start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
  times = []
  for _ in range(reps):
    dist.barrier()
    start.record()
    dist.all_reduce(x)
    end.record()
    end.synchronize()
    times.append(start.elapsed_time(end))
  results.put((rank, float(np.median(times))))
  dist.destroy_process_group()


def torch_allreduce_ms(n: int, size: int, reps: int) -> float:
  import torch.multiprocessing as mp
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  results = mp.get_context("spawn").SimpleQueue()
  mp.spawn(_torch_rank, args=(n, size, reps, port, results), nprocs=n, join=True)
  return max(results.get()[1] for _ in range(n))  # the slowest rank's median


# ---- the run ---------------------------------------------------------------------------------------------------------
def rates(ms: float, n: int, size: int) -> tuple[float, float]:
  nbytes = size * 4
  return nbytes / ms / 1e6, 2 * (n - 1) / n * nbytes / ms / 1e6  # algorithm and bus bandwidth, GB/s


def run(args) -> None:
  import torch
  sys.path.insert(0, str(TESTS))
  from multi_gpu import load_nccl
  n = min(torch.cuda.device_count(), args.devices[0] if args.devices else 4)
  if n < 2: sys.exit(f"needs 2 or more GPUs, found {torch.cuda.device_count()}")
  nccl_path = load_nccl()  # torch has usually loaded it already
  out = pathlib.Path(args.out or tempfile.mkdtemp(prefix="bench_multi_gpu_"))
  so = build(n, args.size, out / "nccl")
  composed_so = out / "composed" / so.name  # a second copy: its own library instance, its own NCCL switch
  composed_so.parent.mkdir(exist_ok=True)
  shutil.copy(so, composed_so)
  libs = {"nccl": Library(so, n, nccl=True), "composed": Library(composed_so, n, nccl=False)}
  streams = [torch.cuda.Stream(device=k) for k in range(n)]
  print(f"{n} x {torch.cuda.get_device_name(0)}; torch {torch.__version__}, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}, "
        f"libnccl.so.2 {nccl_path or 'not found'}; uopc NCCL path on {libs['nccl'].nccl_devices} GPUs (init status {libs['nccl'].init_status})")
  src = out / "nccl" / f"{NAME}.uop"
  checks = []
  for prog in programs(n):
    errs = {path: check_program(torch, lib, src, prog, streams) for path, lib in libs.items()}
    checks.append((prog.name, errs))
  timings = {f"uopc {path}": time_allreduce(torch, lib, n, args.size, streams, args.reps) for path, lib in libs.items()}
  for lib in libs.values(): lib.lib.multigpu_nccl_teardown()
  torch_ms = torch_allreduce_ms(n, args.size, args.reps)
  print(f"\n### Checks against numpy ({n} GPUs, one shard per GPU)\n\n| program | uopc NCCL path: max error / max(1, largest magnitude) | composed path: the same |\n| --- | --- | --- |")
  for name, errs in checks: print(f"| {name} | {errs['nccl']:.2e} | {errs['composed']:.2e} |")
  print(f"\n### Allreduce of {args.size} float32 per GPU ({args.size * 4 / 2**30:.2f} GiB), {n} GPUs, median of {args.reps}\n")
  print("| path | time (ms) | algbw (GB/s) | busbw (GB/s) | rate vs torch.distributed | max error |\n| --- | --- | --- | --- | --- | --- |")
  rows = [(k, ms, err) for k, (ms, err) in timings.items()] + [("torch.distributed all_reduce (NCCL)", torch_ms, None)]
  for name, ms, err in rows:
    alg, bus = rates(ms, n, args.size)
    print(f"| {name} | {ms:.3f} | {alg:.1f} | {bus:.1f} | {torch_ms / ms:.1%} | {'' if err is None else f'{err:.2e}'} |")
  if libs["nccl"].nccl_devices != n: print(f"\nNOTE: uopc's NCCL path was not up (init status {libs['nccl'].init_status}): its row is the composed path")


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--build-only", action="store_true", help="only build the libraries (no GPU needed)")
  ap.add_argument("--devices", type=int, nargs="*", help="device counts to build for (--build-only; default 2 4), else the most GPUs used")
  ap.add_argument("--size", type=int, default=SIZE, help=f"float32 elements per GPU of the timed allreduce (default {SIZE})")
  ap.add_argument("--reps", type=int, default=20, help="timed calls per path (default 20)")
  ap.add_argument("--out", help="where the libraries go (default: a new temporary directory)")
  args = ap.parse_args()
  if args.build_only:
    out = pathlib.Path(args.out or tempfile.mkdtemp(prefix="bench_multi_gpu_"))
    for n in args.devices or [2, 4]: build(n, args.size, out / f"n{n}")
    return
  run(args)


if __name__ == "__main__":
  main()
