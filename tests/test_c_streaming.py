"""-t c's streaming (non-temporal) stores: a large output that the kernel writes once and never reads
goes past the caches when its buffer is 16-byte aligned at run time, with ordinary stores otherwise;
small outputs and buffers the kernel reads back keep ordinary stores. Checked for the source it
writes, for results (aligned and unaligned buffers, every --cpu level this machine runs), and for
gcc/clang -Wall -Wextra -Werror and ASan/UBSan."""
from __future__ import annotations

import ctypes
import io
from pathlib import Path

import numpy as np
import pytest

from bench.workloads import elementwise_add as add
from c_harness import Call, compile_c, have, run_calls
from test_cpu_levels import RUNNABLE
from test_tensor_programs import Func
from uopc.driver import BuildOptions, build
from uopc.targets.c.render import STREAM_MIN_BYTES

N = STREAM_MIN_BYTES // 4  # float32 elements of an output just big enough to stream


def accumulate(n: int) -> Func:
  """out = out + x: the kernel reads the buffer it writes."""
  f = Func("acc")
  x, out = f.param("x", (n,)), f.param("out", (n,), out=True)
  f.store(out, f.op("ADD", out, x))
  return f


def _build(tmp_path: Path, f: Func, cpu: str = "portable", emit=None) -> Path:
  src = tmp_path / f"{f.name}_{cpu}.uop"
  src.write_text(f.text())
  out = tmp_path / f"{f.name}_{cpu}"
  build(src, BuildOptions("c", out, emit=emit, name="s", print_out=io.StringIO(), cpu=cpu))
  return out


def test_only_large_outputs_written_once_stream(tmp_path):
  big = (_build(tmp_path, add(N), emit=("source",)) / "s.c").read_text()
  assert "uopc_stream_store(" in big.split("void s__add_k0", 1)[1] and "UOPC_STREAM_FENCE();" in big
  assert "% 16u) == 0;" in big  # the buffer's alignment, checked at run time
  small = (_build(tmp_path, add(N // 2), emit=("source",)) / "s.c").read_text()
  assert "uopc_stream_store(" not in small.split("void s__add_k0", 1)[1]
  read_back = (_build(tmp_path, accumulate(N), emit=("source",)) / "s.c").read_text()
  assert "uopc_stream_store(" not in read_back.split("void s__acc_k0", 1)[1]


@pytest.mark.parametrize("cpu", ["portable", *RUNNABLE])
@pytest.mark.parametrize("offset", [0, 1, 4], ids=["aligned", "4-byte", "16-byte"])
def test_streamed_results_are_exact_at_any_alignment(tmp_path, cpu, offset):
  lib = ctypes.CDLL(str(_build(tmp_path, add(N), cpu) / "libs.so"))
  rng = np.random.default_rng(offset)
  x, y = rng.standard_normal(N, dtype=np.float32), rng.standard_normal(N, dtype=np.float32)
  room = np.full(N + 16, np.nan, np.float32)
  base = (-room.ctypes.data // 4) % 16  # the first element at a 64-byte boundary
  out = room[base + offset:base + offset + N]
  assert lib.s_add(*(a.ctypes.data_as(ctypes.c_void_p) for a in (x, y, out))) == 0
  np.testing.assert_array_equal(out, x + y)
  assert np.isnan(room[:base + offset]).all() and np.isnan(room[base + offset + N:]).all()  # nothing outside written


@pytest.mark.parametrize("cc", [c for c in ("gcc", "clang") if have(c)])
def test_streaming_source_is_clean_under_warnings_and_sanitizers(tmp_path, cc):
  source = (_build(tmp_path, add(N), emit=("source",)) / "s.c").read_text()
  lib = compile_c(source, cc, sanitize=cc == "gcc")
  rng = np.random.default_rng(0)
  x, y = rng.standard_normal(N, dtype=np.float32), rng.standard_normal(N, dtype=np.float32)
  (_, _, got), = run_calls(lib, [Call("s_add", (x, y, np.zeros(N, np.float32)))], sanitize=cc == "gcc")
  np.testing.assert_array_equal(got, x + y)
