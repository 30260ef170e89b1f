"""The memory plan: placements never overlap while both buffers are live, sharing shrinks the
workspace of the attention sample and of a chain of matmuls, and the C entry runs with a
caller-provided workspace."""
import ctypes
from pathlib import Path

import numpy as np
import pytest

from test_tensor_programs import CASES, SAMPLES, Func, np_attention, np_mlp
from uopc.frontend import load_module, parse_source
from uopc.stages.callify import callify
from uopc.stages.plan import ALIGN, plan
from uopc.stages.rangeify import rangeify

SAMPLES_DIR = Path(__file__).resolve().parent.parent / "samples"


def schedule_of(text: str):
  return plan(rangeify(callify(parse_source(text).entries[0].sink)))


@pytest.mark.parametrize("builder,shape", [(c[0], c[1]) for c in CASES], ids=[f"{c[0].__name__}{list(c[1])}" for c in CASES])
def test_live_buffers_never_share_bytes(builder, shape):
  s = schedule_of(builder(*shape).text())
  for p in s.placements:
    assert p.offset % ALIGN == 0 and p.offset + p.nbytes <= s.workspace_size
    for q in s.placements:
      if p is not q and p.first <= q.last and q.first <= p.last:
        assert p.offset + p.nbytes <= q.offset or q.offset + q.nbytes <= p.offset, (p, q)


def matmul_chain(layers: int, n: int = 4) -> Func:
  """x w0 w1 ... : each product is realized (the next one reads it inside its reduction loop)."""
  f = Func("chain")
  v = f.param("x", (n, n))
  for i in range(layers): v = f.matmul(v, f.param(f"w{i}", (n, n)), n, n, n)
  f.store(f.param("out", (n, n), out=True), v)
  return f


def test_sharing_shrinks_the_attention_workspace():
  s = plan(rangeify(callify(load_module(str(SAMPLES_DIR / "attention.uop")).entries[0].sink)))
  assert s.workspace_size < s.unshared_size


def test_buffers_live_in_disjoint_kernels_share_offset_zero():
  # the first product dies (read by the second matmul) before the third is born
  s = schedule_of(matmul_chain(4).text())
  assert len(s.placements) == 3 and s.workspace_size < s.unshared_size
  by_life = sorted(s.placements, key=lambda p: p.first)
  first = by_life[0]
  later = [p for p in by_life if p.first > first.last]
  assert later and any(p.offset == first.offset for p in later)


def test_symbolic_size_is_planned_at_its_maximum():
  text = """func rows {
  %n = DEFINE_VAR {("n", 1, 50)}
  %x = PARAM([%n, 3]) {(0, "x")} : f32
  %out = PARAM([1, 1]) {(1, "out")} : f32
  %s = REDUCE(%x) {(ADD, (1,))}
  %q = MUL(%s, %s)
  %t = REDUCE(%q) {(ADD, (0,))}
  STORE(%out, %t)
}
"""
  s = schedule_of(text)
  assert [p.nbytes for p in s.placements] == [50 * 4]
  assert "n, 1" in s.format()


def test_entry_with_caller_workspace(tmp_path):
  from uopc.driver import BuildOptions, build
  build(SAMPLES_DIR / "mlp.uop", BuildOptions(out_dir=tmp_path, opt_level=1))
  lib = ctypes.CDLL(str(tmp_path / "libmlp.so"))
  lib.mlp_mlp_workspace_size.restype = ctypes.c_size_t
  size = lib.mlp_mlp_workspace_size()
  assert size == schedule_of(SAMPLES["mlp"].text()).workspace_size
  rng = np.random.default_rng(3)
  f = SAMPLES["mlp"]
  inputs = [rng.standard_normal(shape).astype(np.float32) for _, shape, _, out in f.args if not out]
  out = np.zeros(f.args[-1][1], np.float32)
  ws = np.zeros(size, np.uint8)
  ptrs = [a.ctypes.data_as(ctypes.c_void_p) for a in inputs + [out]]
  assert lib.mlp_mlp_with_workspace(*ptrs, None) != 0  # NULL workspace: refused
  assert lib.mlp_mlp_with_workspace(*ptrs, ws.ctypes.data_as(ctypes.c_void_p)) == 0
  np.testing.assert_allclose(out, np_mlp(*[i.astype(np.float64) for i in inputs]), rtol=1e-5, atol=1e-6)


def test_symbolic_entry_runs_at_several_sizes(tmp_path):
  from uopc.driver import BuildOptions, build
  src = tmp_path / "rows.uop"
  src.write_text("""func rows {
  %n = DEFINE_VAR {("n", 1, 64)}
  %x = PARAM([%n, 5]) {(0, "x")} : f32
  %out = PARAM([%n, 5]) {(1, "out")} : f32
  %s = REDUCE(%x) {(ADD, (1,))}
  %m = REDUCE(%s) {(MAX, (0,))}
  %y = SUB(%x, %s)
  %z = MUL(%y, %m)
  STORE(%out, %z)
}
""")
  build(src, BuildOptions(out_dir=tmp_path, opt_level=1))
  lib = ctypes.CDLL(str(tmp_path / "librows.so"))
  for n in (1, 3, 64):
    x = np.random.default_rng(n).standard_normal((n, 5)).astype(np.float32)
    out = np.zeros((n, 5), np.float32)
    assert lib.rows_rows(x.ctypes.data_as(ctypes.c_void_p), out.ctypes.data_as(ctypes.c_void_p), ctypes.c_int64(n)) == 0
    s = x.astype(np.float64).sum(1, keepdims=True)
    np.testing.assert_allclose(out, (x - s) * s.max(), rtol=1e-5, atol=1e-5)
  assert lib.rows_rows(x.ctypes.data_as(ctypes.c_void_p), out.ctypes.data_as(ctypes.c_void_p), ctypes.c_int64(65)) != 0


def test_attention_sample_matches_numpy(tmp_path):
  from test_tensor_programs import build_and_run
  f = SAMPLES["attention"]
  inputs = [np.random.default_rng(5).standard_normal(shape).astype(np.float32) for _, shape, _, out in f.args if not out]
  got = build_and_run(f, inputs, tmp_path)
  np.testing.assert_allclose(got, np_attention(*[i.astype(np.float64) for i in inputs]), rtol=1e-5, atol=1e-6)
