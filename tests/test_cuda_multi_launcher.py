"""The CUDA launcher's multi-device entries without a GPU, against a fake libcuda.so.1 (tests/fake_cuda.py:
host memory as device memory, every call recorded). Checked: every operation (a kernel launch or a copy)
runs on its device's stream in its pushed context, in the schedule's order across streams, the first
after the work queued on every stream before the call, and every stream waits for the last; copies of a
contiguous range are cuMemcpyPeerAsync between the two contexts (cuMemcpyDtoDAsync within one) moving
the right bytes; each device's workspace is allocated and freed on its own stream in its own context;
two logical devices given one stream need no event and no peer access. The generated C compiles with
the system C compiler, warnings as errors."""
from __future__ import annotations

import pathlib
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from fake_cuda import build_fakes, call  # noqa: E402
from multi_programs import collectives, tp_mlp  # noqa: E402

from uopc.driver import BuildOptions, build  # noqa: E402
from uopc.frontend import parse_source  # noqa: E402
from uopc.pipeline import compile_module  # noqa: E402
from uopc.run import entry_arguments, prepare_arrays  # noqa: E402
from uopc.stages.multi_device import lower_entry  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
  d = tmp_path_factory.mktemp("cuda_multi")
  progs = {p.name: p for p in collectives(2, 4) + [tp_mlp(2)]}
  path = d / "multi.uop"
  path.write_text("".join(p.text() for p in progs.values()))
  build(path, BuildOptions(target="cuda", out_dir=d / "out"))
  module = parse_source(path.read_text(), str(path))
  entries = {e.name: e for e in compile_module(module, "cuda", "multi")}
  return {"dir": d, "fakes": build_fakes(d), "lib": d / "out" / "libmulti.so", "entries": entries, "progs": progs, "module": module}


def arguments(module, prog) -> tuple[list[str], dict[str, np.ndarray]]:
  """The entry's buffer argument names in order and their arrays (inputs split per device, outputs zeros)."""
  from multi_programs import shard
  entry, _ = lower_entry(module.entry(prog.name), module)
  inputs = {}
  for name, (a, sharded) in prog.inputs.items(): inputs |= shard(name, a, prog.n) if sharded else {name: a}
  args = entry_arguments(entry)
  arrays = prepare_arrays(module, args, inputs, {}, None)
  return [a.name for a in args if a.kind == "buffer"], arrays


def run(built, entry: str, streams: list[int], **kw) -> dict:
  names, arrays = arguments(built["module"], built["progs"][entry])
  got = call(built["fakes"], built["lib"], "multi", entry, [(arrays[n].ravel(), arrays[n].dtype.name) for n in names], streams, **kw)
  got["names"] = names
  return got


def ops(log: list) -> list:
  return [x for x in log if x[0] in ("launch", "copy")]


@pytest.mark.parametrize("entry", ["gather", "reduce_scatter", "allreduce", "tp_mlp"])
def test_operations_run_on_their_devices_stream_in_schedule_order(built, entry):
  got = run(built, entry, [1, 2], nccl=False)
  assert got["status"] == 0 and got["depth"] == 0, got["message"]
  log, schedule = got["log"], built["entries"][entry].launches
  assert ["peer", 102] in log and ["peer", 101] in log  # the two contexts see each other's memory
  stream_of = {"CPU:0": 1, "CPU:1": 2}
  assert len(ops(log)) == len(schedule)
  prev = None
  for ln, op in zip(schedule, ops(log)):
    stream = stream_of[ln.device]
    if ln.copy is None: assert op[0] == "launch" and op[2:] == [stream, 1]  # its device's stream, its context pushed
    else: assert op[:2] == ["copy", "peer"] and op[3] == 100 + stream and op[7] == stream  # into its context, on its stream
    before = log[:log.index(op)]
    if prev is None: assert ["wait", stream, 3 - stream] in before  # the first waits for what the other stream had queued
    elif prev != stream: assert before[-1] == ["wait", stream, prev]  # a switch of stream waits for the previous one's work
    prev = stream
  tail = log[log.index(ops(log)[-1]) + 1:]
  assert ["wait", 3 - prev, prev] in tail  # every stream waits for the last operation
  assert any(ln.copy for ln in schedule)  # the schedule has copies, run on the destination's stream


def test_contiguous_copies_move_the_bytes_the_schedule_names(built):
  got = run(built, "scatter", [1, 2], nccl=False)
  assert got["status"] == 0
  (copy,) = [x for x in got["log"] if x[0] == "copy"]
  x, out1 = got["names"].index("x"), got["names"].index("out_dev1")
  assert copy == ["copy", "peer", got["pointers"][out1], 102, got["pointers"][x] + 16, 101, 16, 2]  # x[4:8] into out_dev1
  want = built["progs"]["scatter"].inputs["x"][0][4:]
  np.testing.assert_array_equal(np.float32(got["arrays"][out1]), want)  # moved for real by the fake


def test_each_device_has_its_own_workspace_on_its_stream(built):
  got = run(built, "tp_mlp", [1, 2], nccl=False)
  assert got["status"] == 0
  log = got["log"]
  allocs, frees = [x for x in log if x[0] == "alloc"], [x for x in log if x[0] == "free"]
  assert sorted((s, ctx) for _, s, ctx, _, _ in allocs) == [(1, 101), (2, 102)] == sorted((s, ctx) for _, s, ctx in frees)
  last = log.index(ops(log)[-1])
  assert all(log.index(a) < log.index(ops(log)[0]) for a in allocs) and all(log.index(f) > last for f in frees)
  spans = {d: size for d, _, size in built["entries"]["tp_mlp"].workspace.devices}
  assert {s: size for _, s, _, size, _ in allocs} == {1: spans["CPU:0"], 2: spans["CPU:1"]}


def test_two_logical_devices_on_one_stream_need_no_events(built):
  got = run(built, "allreduce", [7, 7], nccl=False)
  assert got["status"] == 0 and got["depth"] == 0
  assert not [x for x in got["log"] if x[0] in ("wait", "peer")]
  assert {x[2] for x in got["log"] if x[0] == "launch"} == {7}
  assert {x[1] for x in got["log"] if x[0] == "copy"} == {"dtod"}  # one context: device to device


def test_the_launcher_compiles_cleanly_with_the_system_compiler(built):
  source = built["dir"] / "out" / "multi_cuda.c"
  for std in ("c99", "c11"):
    done = subprocess.run(["cc", f"-std={std}", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter", "-fPIC", "-shared", "-fvisibility=hidden",
                           str(source), "-o", str(built["dir"] / f"check_{std}.so"), "-ldl", "-lpthread"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[:4000]


def test_names_that_close_a_comment_stay_inside_it(tmp_path):
  """Buffer and device names are written into the header's and launcher's comments: `*/` and newlines in
  them must not end those comments (the C compiler, run by the build, would fail)."""
  devs = '("D*/0", "D\\n*/1")'
  text = (f'func ar {{\n  %x = PARAM([8]) {{(0, "x*/y", {devs})}} : f32\n  %out = PARAM([2, 4]) {{(1, "o*/", {devs})}} : f32\n'
          f'  %m0 = MSELECT(%x) {{0}}\n  %m1 = MSELECT(%x) {{1}}\n  %st = MSTACK(%m0, %m1)\n  %a = ALLREDUCE(%st) {{(ADD, {devs})}}\n'
          '  %r = RESHAPE(%a, [1, 4])\n  %e = EXPAND(%r, [2, 4])\n  STORE(%out, %e)\n}\n')
  path = tmp_path / "hostile.uop"
  path.write_text(text)
  for target in ("cuda", "c"):
    build(path, BuildOptions(target=target, out_dir=tmp_path / target))
    assert (tmp_path / target / "libhostile.so").exists()
  assert "D* /0" in (tmp_path / "cuda" / "hostile.h").read_text()


def test_a_single_device_workspace_comes_from_the_librarys_own_pool(tmp_path):
  """One pool per context, made when the module is loaded (pinned device memory on the context's device,
  keeping all freed memory), and each call's workspace allocated from it on the call's stream and freed
  there after the kernels."""
  path = tmp_path / "two.uop"
  path.write_text(ROOT.joinpath("samples", "models", "cross_entropy.uop").read_text())
  build(path, BuildOptions(target="cuda", out_dir=tmp_path / "out"))
  module = parse_source(path.read_text(), str(path))
  (entry,) = compile_module(module, "cuda", "two")
  assert entry.workspace is not None
  args = [(np.zeros(1), "float32"), (np.zeros(1), "int32"), (np.zeros(1), "float32")]  # kernels only record: any pointer
  got = call(build_fakes(tmp_path), tmp_path / "out" / "libtwo.so", "two", "cross_entropy", args, [7], nccl=False, repeat=3,
              env={"UOPC_CUDA_GRAPHS": "0"})  # direct launches each time (tests/test_cuda_graphs.py: replays)
  assert got["status"] == 0, got["message"]
  log = got["log"]
  pools = [x for x in log if x[0] == "pool"]
  assert len(pools) == 1 and pools[0][3:5] == [1, 1]  # pinned, on a device
  assert [x for x in log if x[0] == "pool_attr"] == [["pool_attr", pools[0][1], 4, 2 ** 64 - 1]]  # no release threshold
  allocs, frees = [x for x in log if x[0] == "alloc"], [x for x in log if x[0] == "free"]
  assert [(a[1], a[3], a[5]) for a in allocs] == [(7, entry.workspace.size, pools[0][1])] * 3 and [f[1] for f in frees] == [7] * 3
  order = [x[0] for x in log if x[0] in ("alloc", "launch", "free")]
  assert order == (["alloc"] + ["launch"] * len(entry.kernels) + ["free"]) * 3  # each call: alloc, its kernels, free
