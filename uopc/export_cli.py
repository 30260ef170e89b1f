"""`uopc export FILE.py:FUNCTION`: a tinygrad function in a Python file -> a `.uop` file.

The file is run as a Python program (as `python FILE.py` would import it, with its folder on
sys.path); FUNCTION is a top-level name in it, called once on `Tensor.empty` inputs built from the
`--input NAME=SHAPE[:DTYPE]` specs, in order. Nothing is computed: tinygrad only records the graph.
"""
from __future__ import annotations

import re
import runpy
import sys
from pathlib import Path

from uopc.diagnostics import CompileError, error

_DIM = r"(?:\d+|[A-Za-z_][A-Za-z0-9_]*)"
_SPEC = re.compile(rf"(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<shape>{_DIM}(?:[x,]{_DIM})*|scalar)(?::(?P<dtype>\w+))?\Z")
_VAR = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<lo>\d+)\.\.(?P<hi>\d+)\Z")


def parse_input(spec: str) -> tuple[str, tuple[int | str, ...], str]:
  """`x=4x768:f16` -> ("x", (4, 768), "f16"); the dtype defaults to f32; `x=scalar` is shape (); a dim that
  is a name (`x=Nx768`) is a symbolic size, given its range by --var N=LO..HI."""
  m = _SPEC.match(spec)
  if m is None:
    raise CompileError([error(None, f"bad --input '{spec}': write NAME=SHAPE[:DTYPE], e.g. x=4x768:f32, x=Nx768 or n=scalar:i32")])
  shape = () if m["shape"] == "scalar" else tuple(int(d) if d.isdigit() else d for d in re.split(r"[x,]", m["shape"]))
  return m["name"], shape, m["dtype"] or "f32"


def parse_vars(specs: list[str]) -> dict[str, tuple[int, int]]:
  """`N=1..128` -> {"N": (1, 128)}."""
  out = {}
  for spec in specs:
    m = _VAR.match(spec)
    if m is None or int(m["lo"]) > int(m["hi"]) or int(m["lo"]) < 1:
      raise CompileError([error(None, f"bad --var '{spec}': write NAME=LO..HI with 1 <= LO <= HI, e.g. N=1..128")])
    out[m["name"]] = (int(m["lo"]), int(m["hi"]))
  return out


def _dims(shape: tuple, ranges: dict[str, tuple[int, int]], made: dict) -> tuple:
  """Sizes for Tensor.empty: numbers as they are, a name as a tinygrad Variable bound to its largest value."""
  from tinygrad import Variable
  out = []
  for d in shape:
    if isinstance(d, int): out.append(d); continue  # noqa: E702
    if d not in ranges: raise CompileError([error(None, f"--input uses the size '{d}': give its range with --var {d}=LO..HI")])
    if d not in made: made[d] = Variable(d, *ranges[d]).bind(ranges[d][1])
    out.append(made[d])
  return tuple(out)


def _tinygrad_dtype(name: str):
  from tinygrad import dtypes
  from uopc.dtype import scalar_by_name
  dt = scalar_by_name(name)
  if dt is None or dt.kind == "index": raise CompileError([error(None, f"unknown dtype '{name}' in --input")])
  return getattr(dtypes, dt.name)


def load_function(target: str):
  """`path/to/file.py:name` -> (the callable, the module's globals)."""
  path, sep, name = target.rpartition(":")
  if not sep or not path or not name:
    raise CompileError([error(None, f"'{target}': name the function as FILE.py:FUNCTION")])
  if not Path(path).is_file(): raise CompileError([error(None, f"{path}: no such file")])
  sys.path.insert(0, str(Path(path).resolve().parent))
  try:
    namespace = runpy.run_path(path, run_name="__uopc_export__")
  except SyntaxError as e:
    raise CompileError([error(None, f"{path}:{e.lineno}: {e.msg}")]) from None
  finally:
    sys.path.pop(0)
  fn = namespace.get(name)
  if not callable(fn): raise CompileError([error(None, f"{path} has no function '{name}'")])
  return fn, namespace


def export_file(target: str, specs: list[str], name: str | None, weights: str | None, var_specs: list[str] = (),
                constants: str = "param", max_constant_bytes: int = 1 << 20) -> str:
  from uopc.frontend.tinygrad import export, require_tinygrad
  require_tinygrad()
  from tinygrad import Tensor
  fn, namespace = load_function(target)
  inputs, ranges, made = [parse_input(s) for s in specs], parse_vars(list(var_specs)), {}
  examples = [Tensor.empty(*_dims(shape, ranges, made), dtype=_tinygrad_dtype(dt)) for _, shape, dt in inputs]
  model = None
  if weights is not None:
    if weights not in namespace: raise CompileError([error(None, f"--weights: {target.rpartition(':')[0]} has no name '{weights}'")])
    model = namespace[weights]
  return export(fn, *examples, name=name or target.rpartition(":")[2], input_names=[n for n, _, _ in inputs], weights=model,
                constants=constants, max_constant_bytes=max_constant_bytes)
