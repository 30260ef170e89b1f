"""Seeds 001-003's listings with integer index arithmetic: each sample runs with `uopc run -t c` and gives
what its seed says; ints meeting indices unify only in legacy statements, never in modern ones."""
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from uopc.cli import cli
from uopc.dtype import dtypes
from uopc.frontend import load_module, parse_source
from uopc.ops import Ops
from uopc.verify import verify_module

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
i32 = np.int32

# sample -> (its buffers before the run, data0 after it: the seeds' stated results)
CASES = {
  "seed002_gidx_add": ({"data0": np.zeros(4, i32)}, [1, 2, 3, 4]),                        # data0[g] = g + 1
  "seed001_loop_store": ({"data0": np.zeros(10, i32)}, list(range(10))),                  # data0[i] = i
  "seed001_loop_offset": ({"data0": np.zeros(6, i32), "data1": np.arange(10, 16, dtype=i32)},
                          [0, 0, 12 * 2, 13 * 3, 14 * 4, 15 * 5]),                        # i in 2..5: data1[i] * i
  "seed003_acc": ({"data0": np.zeros(1, i32), "data1": np.arange(10, dtype=i32)}, [45]),  # sum of data1
  "seed003_gated": ({"data0": np.full(4, -1, i32), "data1": np.arange(10, 14, dtype=i32)},
                    [10, 11, 7, -1]),                    # g < 3: (g < 2 ? data1[g] : 7); data0[3] untouched
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_legacy_sample_runs_as_its_seed_says(tmp_path, name):
  buffers, expected = CASES[name]
  inputs = []
  for buf, array in buffers.items():
    np.save(tmp_path / f"{buf}.npy", array)
    inputs += ["--input", f"{buf}={tmp_path / buf}.npy"]
  out = tmp_path / "out.npy"
  res = CliRunner().invoke(cli, ["run", str(SAMPLES / f"{name}.uop"), "-t", "c", *inputs, "--output", f"data0={out}"])
  assert res.exit_code == 0, res.output
  assert np.load(out).tolist() == expected


def _store(name: str):
  """The last STORE of a sample's only entry."""
  return next(u for u in reversed(load_module(SAMPLES / f"{name}.uop").entries[0].sink.toposort()) if u.op is Ops.STORE)


def test_int_meeting_an_index_becomes_one_and_is_cast_when_stored():
  store = _store("seed002_gidx_add")
  cast = store.src[1]
  assert cast.op is Ops.CAST and cast.dtype is dtypes.int32
  add = cast.src[0]
  assert add.op is Ops.ADD and add.dtype is dtypes.index and add.src[0].op is Ops.SPECIAL
  assert add.src[1].op is Ops.CONST and add.src[1].dtype is dtypes.index and add.src[1].arg == 1


def test_a_loaded_int_meeting_the_loop_counter_is_cast_to_index():
  mul = _store("seed001_loop_offset").src[1].src[0]
  assert mul.op is Ops.MUL and mul.dtype is dtypes.index
  assert mul.src[0].op is Ops.CAST and mul.src[0].src[0].op is Ops.LOAD and mul.src[0].src[0].dtype is dtypes.int32


def test_an_accumulator_used_as_a_value_is_loaded():
  store = _store("seed003_acc")
  assert store.src[1].op is Ops.LOAD and store.src[1].src[0].dtype.addrspace.name == "REG"


def _verify_messages(text: str) -> list[str]:
  return [d.message for d in verify_module(parse_source(text, "t.uop"))]


def test_modern_statements_are_never_retyped():
  modern = ('kernel k {\n  %b = PARAM {(0, "b")} : ptr<i32>\n  %g = SPECIAL(4) {"gidx0"}\n  %one = CONST {1} : i32\n'
            '  %s = ADD(%g, %one)\n  %p = INDEX(%b, %g)\n  STORE(%p, %s)\n}\n')
  assert _verify_messages(modern) == ["ADD operands have different dtypes: index and i32",
                                      "STORE of index into ptr<i32>: the value must be i32"]


def test_a_legacy_int_into_a_float_buffer_stays_an_error():
  listing = ("0 UOps.DEFINE_GLOBAL : ptr.dtypes.float [] (0, 'data0', True)\n"
             "1 UOps.SPECIAL : dtypes.int [] (0, 'gidx0', 4)\n2 UOps.STORE : [0, 1, 1] None\n")
  assert _verify_messages(listing) == ["STORE of index into ptr<f32>: the value must be f32"]


def test_legacy_float_arithmetic_with_an_index_is_not_unified():
  listing = ("0 UOps.DEFINE_GLOBAL : ptr.dtypes.float [] (0, 'd', True)\n1 UOps.SPECIAL : dtypes.int [] (0, 'gidx0', 4)\n"
             "2 UOps.CONST : dtypes.float [] 1.5\n3 UOps.ALU : dtypes.float [1, 2] BinaryOps.ADD\n4 UOps.STORE : [0, 1, 3] None\n")
  assert _verify_messages(listing) == ["ADD operands have different dtypes: index and f32"]


def test_a_loop_bound_without_a_value_is_a_located_error():
  """Found by tests/fuzz_uop.py: a legacy CONST with no value as a LOOP bound raised a TypeError."""
  from uopc.diagnostics import CompileError
  from uopc.frontend import parse_source
  text = "0 UOps.CONST : dtypes.int []\n1 UOps.CONST : dtypes.int [] 10\n2 UOps.LOOP : dtypes.int [0, 1] None\n3 UOps.ENDLOOP : [2] None\n"
  with pytest.raises(CompileError) as e:
    parse_source(text, "loop.uop")
  assert "loop.uop:3:1: error: LOOP's start must be an integer, got CONST None" in e.value.format()
