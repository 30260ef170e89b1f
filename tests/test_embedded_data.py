"""BINARY data in tensor programs: the `x"..."` byte-string syntax (round trip, located errors), the typed
view `BITCAST(BINARY) : T` (little-endian elements), and constant buffers built into every target's
library (native C and LLVM runs and the emulators checked against numpy; the launcher sources checked by
their own tests: tests/test_embedded_data_gpu.py)."""
from __future__ import annotations

import numpy as np
import pytest

from uopc.diagnostics import CompileError
from uopc.dtype import dtypes
from uopc.frontend import parse_source, print_module
from uopc.ops import Ops
from uopc.run import run_file
from uopc.uop import UOp
from uopc.verify import verify_module


def hexstr(a: np.ndarray) -> str:
  """The little-endian bytes of `a` in the text syntax (numpy decides the bytes, not uopc)."""
  return 'x"' + a.astype(a.dtype.newbyteorder("<")).tobytes().hex() + '"'


def errors(text: str) -> list[tuple]:
  with pytest.raises(CompileError) as e: parse_source(text, "t.uop")
  return [(d.loc.line, d.loc.col, d.message) for d in e.value.diagnostics]


def verify_errors(text: str) -> list[str]:
  return [d.message for d in verify_module(parse_source(text, "t.uop")) if d.severity == "error"]


# ---- syntax -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("data", [b"", b"\x00", bytes(range(256)), b"\xff" * 1000])
def test_binary_round_trips(data):
  text = f'func f {{\n  %b = BINARY {{x"{data.hex()}"}}\n  %o = PARAM([{len(data)}]) {{(0, "o")}} : u8\n  STORE(%o, %b)\n}}\n'
  m = parse_source(text, "t.uop")
  b = next(u for u in m.entries[0].sink.toposort() if u.op is Ops.BINARY)
  assert b.arg == data and b.dtype is dtypes.uint8 and b.shape == (len(data),)
  printed = print_module(m)
  assert f'BINARY {{x"{data.hex()}"}}' in printed  # lower case, no dtype: u8 is derived
  assert parse_source(printed, "p.uop").entries[0].sink is m.entries[0].sink


def test_upper_case_digits_parse_and_print_lower_case():
  m = parse_source('func f {\n  %b = BINARY {x"00FFaB"}\n  SINK(%b)\n}\n', "t.uop")
  assert next(u for u in m.entries[0].sink.toposort() if u.op is Ops.BINARY).arg == b"\x00\xff\xab"
  assert 'x"00ffab"' in print_module(m)


def test_malformed_byte_strings_are_located():
  assert errors('func f {\n  %b = BINARY {x"00g1"}\n}\n') == [
    (2, 20, "'g' is not a hex digit: a byte string is x\"...\" with two hex digits (0-9, a-f) per byte")]
  assert errors('func f {\n  %b = BINARY {x"abc"}\n}\n') == [(2, 16, "a byte string needs two hex digits per byte; this one has 3 digits")]
  assert errors('func f {\n  %b = BINARY {x"0 1"}\n}\n')[0][:2] == (2, 19)


def test_binary_arg_must_be_bytes_and_views_whole_elements():
  assert verify_errors('func f {\n  %b = BINARY {"00"}\n  SINK(%b)\n}\n') == ["BINARY arg must be bytes, got str"]
  assert verify_errors('func f {\n  %b = BINARY {x"000000"}\n  %w = BITCAST(%b) : f32\n  SINK(%w)\n}\n') == [
    "BITCAST of 3 bytes of BINARY data to f32: not a whole number of 4-byte elements"]


def test_bitcast_of_binary_rescales_its_axis():
  b = UOp(Ops.BINARY, dtypes.uint8, (), b"\x00" * 24)
  assert UOp(Ops.BITCAST, dtypes.float32, (b,)).shape == (6,)
  assert UOp(Ops.BITCAST, dtypes.float64, (b,)).shape == (3,)
  assert UOp(Ops.BITCAST, dtypes.int8, (b,)).shape == (24,)


# ---- building and running ------------------------------------------------------------------------------
W = (np.arange(12, dtype=np.float32).reshape(3, 4) - 5.5) / 3
IDX = np.array([[2, -7, 100]], dtype=np.int16)
HALF = np.array([1.5, -2.25, 65504.0, 2.0 ** -24], dtype=np.float16)


def program() -> str:
  return f"""func embed {{
  %x = PARAM([3, 4]) {{(0, "x")}} : f32
  %out = PARAM([3, 4]) {{(1, "out")}} : f32
  %h = PARAM([4]) {{(2, "h")}} : f32
  %wb = BINARY {{{hexstr(W)}}}
  %w = RESHAPE(BITCAST(%wb) : f32, [3, 4])
  %ib = BINARY {{{hexstr(IDX)}}}
  %i = RESHAPE(CAST(BITCAST(%ib) : i16) : f32, [3, 1])
  %y = MUL(ADD(%x, %w), %i)
  STORE(%out, %y)
  %hb = BINARY {{{hexstr(HALF)}}}
  %hv = CAST(BITCAST(%hb) : f16) : f32
  STORE(%h, %hv)
}}
"""


MODES = [("c", False), ("llvm", False), ("c", True), ("cuda", True), ("amd", True), ("metal", True)]


@pytest.mark.parametrize("target,emulated", MODES, ids=[f"{t}{'-emulated' if e else ''}" for t, e in MODES])
def test_constants_match_numpy_on_every_target(tmp_path, target, emulated):
  path = tmp_path / "embed.uop"
  path.write_text(_nested_ops_as_statements(program()))
  x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
  res = run_file(path, target=target, inputs={"x": x}, emulated=emulated)
  np.testing.assert_allclose(res.arrays["out"], (x + W) * IDX.reshape(3, 1).astype(np.float32), rtol=1e-6)
  np.testing.assert_array_equal(res.arrays["h"], HALF.astype(np.float32))


def _nested_ops_as_statements(text: str) -> str:
  """The program above with its nested operands written out one statement each (the text syntax has
  no nested expressions)."""
  return (text.replace("  %w = RESHAPE(BITCAST(%wb) : f32, [3, 4])", "  %wf = BITCAST(%wb) : f32\n  %w = RESHAPE(%wf, [3, 4])")
          .replace("  %i = RESHAPE(CAST(BITCAST(%ib) : i16) : f32, [3, 1])",
                   "  %is = BITCAST(%ib) : i16\n  %if = CAST(%is) : f32\n  %i = RESHAPE(%if, [3, 1])")
          .replace("  %y = MUL(ADD(%x, %w), %i)", "  %s = ADD(%x, %w)\n  %y = MUL(%s, %i)")
          .replace("  %hv = CAST(BITCAST(%hb) : f16) : f32", "  %hh = BITCAST(%hb) : f16\n  %hv = CAST(%hh) : f32"))


def test_constants_are_not_arguments_and_equal_data_is_stored_once(tmp_path):
  from uopc.driver import BuildOptions, build
  data = hexstr(np.arange(8, dtype=np.int32))
  path = tmp_path / "twice.uop"
  path.write_text(f"""func a {{
  %o = PARAM([8]) {{(0, "o")}} : i32
  %b = BINARY {{{data}}}
  %w = BITCAST(%b) : i32
  STORE(%o, %w)
}}

func b {{
  %o = PARAM([8]) {{(0, "o")}} : i32
  %b = BINARY {{{data}}}
  %w = BITCAST(%b) : i32
  %t = ADD(%w, %w)
  STORE(%o, %t)
}}
""")
  build(path, BuildOptions(target="c", out_dir=tmp_path / "out"))
  header = (tmp_path / "out" / "twice.h").read_text()
  assert "int twice_a(int32_t* o);" in header and "int twice_b(int32_t* o);" in header
  source = (tmp_path / "out" / "twice.c").read_text()
  assert source.count("static const unsigned char twice__data") == 1 and "aligned(64)" in source
  assert run_file(path, entry="b").arrays["o"].tolist() == [2 * v for v in range(8)]


def test_a_constant_in_a_reusable_call_body_is_bound_at_every_call_site(tmp_path):
  path = tmp_path / "call.uop"
  path.write_text(f"""func f {{
  %x = PARAM([4]) {{(0, "x")}} : f32
  %out = PARAM([4]) {{(1, "out")}} : f32
  %a0 = PARAM([4]) {{(0, "arg0")}} : f32
  %b = BINARY {{{hexstr(np.array([1, 2, 3, 4], np.float32))}}}
  %w = BITCAST(%b) : f32
  %m = MUL(%a0, %w)
  %t = TUPLE(%m)
  %c1 = CALL(%t, %x)
  %g1 = GETTUPLE(%c1) {{0}}
  %c2 = CALL(%t, %g1)
  %g2 = GETTUPLE(%c2) {{0}}
  STORE(%out, %g2)
}}
""")
  x = np.array([1.0, -2.0, 0.5, 3.0], np.float32)
  for target, emulated in (("c", False), ("llvm", False), ("c", True)):
    got = run_file(path, target=target, emulated=emulated, inputs={"x": x}).arrays["out"]
    np.testing.assert_array_equal(got, x * np.array([1, 4, 9, 16], np.float32))
