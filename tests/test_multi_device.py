"""Multi-device programs end to end: seed 000's seven collectives (and tinygrad's ALLREDUCE form) on 2, 3
and 4 devices and a tensor-parallel MLP, built with -t c (and -t llvm), called through ctypes with one
buffer per device shard and checked against numpy; the same programs in the emulator; uneven shapes
refused with located errors; the header and metadata naming the per-device arguments; the PTX of the
collectives accepted by ptxas. (On real GPUs: test_multi_gpu.py.)
"""
from __future__ import annotations

import ctypes
import pathlib
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from multi_programs import collectives, shard, tp_mlp, unshard  # noqa: E402

from uopc.diagnostics import CompileError  # noqa: E402
from uopc.frontend import parse_source  # noqa: E402
from uopc.run import _LIB, build_library, call_entry, entry_arguments, prepare_arrays, run_emulated  # noqa: E402
from uopc.stages.multi_device import lower_entry  # noqa: E402


def _module(tmp_path: pathlib.Path, progs, name: str = "multi"):
  path = tmp_path / f"{name}.uop"
  path.write_text("".join(p.text() for p in progs))
  return path, parse_source(path.read_text(), str(path))


def _arrays(module, prog):
  """The entry (lowered) and its argument arrays: sharded inputs split per device, outputs zeros."""
  entry, _ = lower_entry(module.entry(prog.name), module)
  inputs = {}
  for name, (a, sharded) in prog.inputs.items(): inputs |= shard(name, a, prog.n) if sharded else {name: a}
  args = entry_arguments(entry)
  return entry, args, prepare_arrays(module, args, inputs, {}, None)


def _check(prog, arrays) -> None:
  want = prog.expect(**{k: v for k, (v, _) in prog.inputs.items()})
  for name, value in want.items():
    got = unshard(name, arrays, prog.n) if prog.outputs[name] else arrays[name]
    np.testing.assert_allclose(got.reshape(value.shape), value, rtol=1e-5, atol=1e-5, err_msg=f"{prog.name}: {name}")


def _run_native(tmp_path, progs, target="c") -> None:
  path, module = _module(tmp_path, progs)
  lib = ctypes.CDLL(str(build_library(path, target, tmp_path / "out")))
  for p in progs:
    entry, args, arrays = _arrays(module, p)
    call_entry(lib, _LIB, entry.name, args, arrays, {})
    _check(p, arrays)


@pytest.mark.parametrize("n", [2, 3, 4])
def test_collectives_on_the_c_target_match_numpy(n, tmp_path):
  _run_native(tmp_path, collectives(n, 2 * n * 3 // 2 if n % 2 == 0 else 2 * n) + [tp_mlp(n, hidden=2 * n)])


def test_collectives_on_the_llvm_target_match_numpy(tmp_path):
  _run_native(tmp_path, collectives(2, 6) + [tp_mlp(2)], target="llvm")


@pytest.mark.parametrize("n", [2, 3])
def test_the_emulator_runs_multi_device_programs(n, tmp_path):
  progs = collectives(n, 2 * n) + [tp_mlp(n, hidden=2 * n)]
  _, module = _module(tmp_path, progs)
  for p in progs:
    entry, args, arrays = _arrays(module, p)
    run_emulated(module, entry, "c", args, arrays, {})
    _check(p, arrays)


def test_uopc_run_emulate_takes_the_shard_arguments(tmp_path):
  p = collectives(2, 4)[1]  # scatter
  path, _ = _module(tmp_path, [p])
  np.save(tmp_path / "x.npy", p.inputs["x"][0])
  done = subprocess.run([sys.executable, "-m", "uopc", "run", str(path), "--emulate", "--input", f"x={tmp_path / 'x.npy'}",
                         "--output", f"out_dev1={tmp_path / 'o1.npy'}"], capture_output=True, text=True)
  assert done.returncode == 0, done.stderr
  np.testing.assert_array_equal(np.load(tmp_path / "o1.npy"), p.inputs["x"][0][4:])


def test_the_header_and_metadata_name_the_device_shards(tmp_path):
  path, _ = _module(tmp_path, [collectives(2, 4)[2], tp_mlp(2)])  # gather, the MLP
  build_library(path, "c", tmp_path / "out")
  header = (tmp_path / "out" / f"{_LIB}.h").read_text()
  assert "int prog_gather(const float* x_dev0, const float* x_dev1, float* out);" in header
  assert "x_dev0 = rows [0, 4) on CPU:0, x_dev1 = rows [4, 8) on CPU:1" in header
  assert "w1_0 on CPU:0, w1_1 on CPU:1" in header
  lib = ctypes.CDLL(str(tmp_path / "out" / f"lib{_LIB}.so"))
  lib.prog_find_entry.restype = ctypes.c_int
  from uopc.run import _EntryInfo
  lib.prog_entry_info.restype = ctypes.POINTER(_EntryInfo)
  info = lib.prog_entry_info(lib.prog_find_entry(b"gather")).contents
  assert [info.args[i].name.decode() for i in range(info.num_args)] == ["x_dev0", "x_dev1", "out"]


def test_kernels_and_copies_run_per_device(tmp_path):
  """Every launch writes buffers of one device, a copy kernel reads another's; nothing is left on a tuple."""
  from uopc.stages.rangeify import rangeify
  _, module = _module(tmp_path, collectives(2, 4))
  entry, _ = lower_entry(module.entry("allreduce"), module)
  nodes = entry.sink.toposort()
  assert not any(isinstance(u.device, tuple) for u in nodes)
  copies = [u for u in nodes if u.op.name == "LOAD" and u.arg]
  assert copies and all(c.device != c.src[0].device for c in copies)
  assert len(rangeify(entry.sink).launches) >= 2 * 2  # per device: the chunk sums, the gathers


D2, D4 = '("CPU:0", "CPU:1")', '("CPU:0", "CPU:1", "CPU:2", "CPU:3")'
ERRORS = [
  (f'%x = PARAM([7]) {{(0, "x", {D2})}} : f32\n%out = PARAM([7]) {{(1, "out", {D2})}} : f32\nSTORE(%out, %x)',
   "size 7 of axis 0 does not divide evenly across 2 devices", 2, 3),
  (f'%x = PARAM([6]) {{(0, "x", "CPU:0")}} : f32\n%c = COPY(%x) {{{D4}}}\n%out = PARAM([6]) {{(1, "out", {D4})}} : f32\n'
   'STORE(%out, %c)', "COPY of shape (6,) to 4 devices: size 6 of axis 0 does not divide evenly across 4 devices", 3, 3),
  (f'%x = PARAM([4, 3]) {{(0, "x", {D2})}} : f32\n%r = RESHAPE(%x, [3, 4])\n%out = PARAM([3, 4]) {{(1, "out", {D2})}} : f32\n'
   'STORE(%out, %r)', "RESHAPE (4, 3) -> (3, 4) of a value on 2 devices: size 3 of axis 0 does not divide evenly", 3, 3),
  (f'%x = PARAM([4, 2]) {{(0, "x", {D2})}} : f32\n%p = PERMUTE(%x) {{(1, 0)}}\n%r = RESHAPE(%p, [8])\n'
   f'%out = PARAM([8]) {{(1, "out", {D2})}} : f32\nSTORE(%out, %r)', "RESHAPE (2, 4) -> (8,) moves elements between the shards of axis 1", 4, 3),
  (f'%x = PARAM([4]) {{(0, "x", {D2})}} : f32\n%y = PARAM([4]) {{(1, "y", "CPU:0")}} : f32\n%r = ADD(%x, %y)\n'
   f'%out = PARAM([4]) {{(2, "out", {D2})}} : f32\nSTORE(%out, %r)', "ADD of values on different devices", 4, 3),
]


@pytest.mark.parametrize("stmts, message, line, col", ERRORS, ids=["param", "copy", "reshape", "boundary", "devices"])
def test_what_cannot_be_sharded_is_a_located_error(stmts, message, line, col, tmp_path):
  text = "func f {\n" + "".join(f"  {s}\n" for s in stmts.splitlines()) + "}\n"
  path = tmp_path / "bad.uop"
  path.write_text(text)
  module = parse_source(text, str(path))
  with pytest.raises(CompileError) as e:
    lower_entry(module.entries[0], module)
  d = e.value.diagnostics[0]
  assert message in d.message and (d.loc.line, d.loc.col) == (line, col), e.value.format()
  done = subprocess.run([sys.executable, "-m", "uopc", "build", str(path), "-t", "c", "-o", str(tmp_path / "o")],
                        capture_output=True, text=True)
  assert done.returncode == 1 and f"bad.uop:{line}:{col}: error: " in done.stderr and message in done.stderr and "^" in done.stderr


def test_the_ptx_of_the_collectives_passes_ptxas(tmp_path):
  from uopc.driver import BuildOptions, build
  from uopc.targets.cuda import toolchain
  ptxas = toolchain.find_tool("ptxas")
  if ptxas is None: pytest.skip("ptxas not found (CUDA_HOME, PATH or the nvidia-cuda-nvcc wheel)")
  path, _ = _module(tmp_path, collectives(2, 4) + [tp_mlp(2)])
  build(path, BuildOptions(target="cuda", out_dir=tmp_path / "cu"))
  assert "x_dev0 = rows [0, 4) on CPU:0" in (tmp_path / "cu" / "multi.h").read_text()  # the CUDA header says it too
  ptx = tmp_path / "cu" / "multi.ptx"
  done = subprocess.run([str(ptxas), "-arch=sm_80", "-O3", str(ptx), "-o", str(tmp_path / "m.cubin")], capture_output=True, text=True)
  assert done.returncode == 0, done.stderr[:4000]


def test_a_whole_copy_meets_a_sharded_value_and_a_buffer_updates_in_place(tmp_path):
  """x (sharded) += y (a whole copy on each device): each device adds its block of y, in place."""
  from multi_programs import Prog
  p = Prog("update", 2)
  rng = np.random.default_rng(1)
  x0, y0 = rng.standard_normal(8).astype(np.float32), rng.standard_normal(8).astype(np.float32)
  x = p.param("x", [8], True, x0)
  y = p.param("y", [8], False, y0)
  p.lines.append(f"  STORE({x}, {p.let('s', f'ADD({x}, {p.replicate(y, 8, chr(121))})')})")
  p.outputs["x"] = True
  p.expect = lambda x, y: {"x": x + y}
  path, module = _module(tmp_path, [p])
  entry, args, arrays = _arrays(module, p)
  run_emulated(module, entry, "c", args, arrays, {})
  _check(p, arrays)
  lib = ctypes.CDLL(str(build_library(path, "c", tmp_path / "out")))
  entry, args, arrays = _arrays(module, p)
  call_entry(lib, _LIB, entry.name, args, arrays, {})
  _check(p, arrays)
