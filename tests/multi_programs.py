"""Multi-device programs for the tests (and samples/collectives.uop): seed 000's seven collectives written
as its compositions, tinygrad's ALLREDUCE form (also `allreduce_text`: any size, op and dtype), and a
tensor-parallel MLP, each with its numpy meaning.

`collectives(n, s)` gives a module text of n devices whose shards hold s elements, and per entry the
logical inputs and a function of them giving the expected logical outputs. Sharded buffers are split
along axis 0 (`shard`); a buffer written to an (n, ...) buffer on the n devices holds one row per device.
"""
from __future__ import annotations

from typing import Callable

import numpy as np


ONE = '"CPU:0"'


def devices(n: int) -> str: return "(" + ", ".join(f'"CPU:{i}"' for i in range(n)) + ")"


def shard(name: str, a: np.ndarray, n: int) -> dict[str, np.ndarray]:
  """The per-device arguments of a buffer sharded on axis 0, as the launcher names them."""
  return {f"{name}_dev{j}": np.ascontiguousarray(p) for j, p in enumerate(np.split(a, n, axis=0))}


def unshard(name: str, arrays: dict[str, np.ndarray], n: int) -> np.ndarray:
  return np.concatenate([arrays[f"{name}_dev{j}"] for j in range(n)], axis=0)


def _copy(name: str, n: int, x: np.ndarray, sharded: bool) -> "Prog":
  """out = COPY(x) to the other side: one device to all n (scatter) or all n to one (gather)."""
  p = Prog(name, n)
  src = p.param("x", [x.size], sharded, x)
  out = p.param("out", [x.size], not sharded)
  p.lines.append(f"  STORE({out}, {p.let('c', f'COPY({src}) {{{ONE if sharded else devices(n)}}}')})")
  p.expect = lambda x: {"out": x}
  return p


class Prog:
  """One multi-device entry: its text, its inputs (name -> (array, devices or None)) and its outputs."""

  def __init__(self, name: str, n: int):
    self.name, self.n, self.lines, self.slot = name, n, [], 0
    self.inputs: dict[str, tuple[np.ndarray, bool]] = {}
    self.outputs: dict[str, bool] = {}  # name -> sharded over the devices
    self.expect: Callable[..., dict[str, np.ndarray]] | None = None

  def param(self, name: str, shape, on_devices: bool, value: np.ndarray | None = None) -> str:
    dev = devices(self.n) if on_devices else '"CPU:0"'
    self.lines.append(f'  %{name} = PARAM({list(shape)}) {{({self.slot}, "{name}", {dev})}} : f32')
    self.slot += 1
    if value is not None: self.inputs[name] = (value, on_devices)
    else: self.outputs[name] = on_devices
    return f"%{name}"

  def let(self, name: str, text: str) -> str:
    self.lines.append(f"  %{name} = {text}")
    return f"%{name}"

  def replicate(self, x: str, s: int, tag: str) -> str:
    """seed 000's `.reshape(1, s).expand(n, s).copy(D).replicated(0)` of an (s,) value."""
    r = self.let(f"{tag}r", f"RESHAPE({x}, [1, {s}])")
    e = self.let(f"{tag}e", f"EXPAND({r}, [{self.n}, {s}])")
    c = self.let(f"{tag}c", f"COPY({e}) {{{devices(self.n)}}}")
    return self.let(f"{tag}b", f"REPLICATED({c}) {{0}}")

  def store_rows(self, out: str, x: str, s: int) -> None:
    """Store a replicated (s,) value into an (n, s) buffer on the devices: each device writes its copy."""
    r = self.let("outr", f"RESHAPE({x}, [1, {s}])")
    self.lines.append(f"  STORE({out}, {self.let('oute', f'EXPAND({r}, [{self.n}, {s}])')})")

  def text(self) -> str: return f"func {self.name} {{\n" + "\n".join(self.lines) + "\n}\n"


def _reduce_scatter(p: Prog, x: str, s: int) -> str:
  n = p.n
  r = p.let("rs0", f"RESHAPE({x}, [{n}, {n}, {s // n}])")
  t = p.let("rs1", f"PERMUTE({r}) {{(1, 0, 2)}}")
  c = p.let("rs2", f"COPY({t}) {{{devices(n)}}}")
  red = p.let("rs3", f"REDUCE({c}) {{(ADD, (1,))}}")
  return p.let("rs4", f"RESHAPE({red}, [{s}])")


def collectives(n: int, s: int, seed: int = 0) -> list[Prog]:
  """Seed 000's collectives on n devices, shards of s elements (s divisible by n for reduce_scatter)."""
  rng = np.random.default_rng(seed)
  x1, xn = rng.standard_normal(s).astype(np.float32), rng.standard_normal(n * s).astype(np.float32)
  progs = []

  p = Prog("broadcast", n)
  x = p.param("x", [s], False, x1)
  out = p.param("out", [n, s], True)
  p.store_rows(out, p.replicate(x, s, "b"), s)
  p.expect = lambda x: {"out": np.tile(x, (n, 1))}
  progs.append(p)

  progs += [_copy("scatter", n, xn, False), _copy("gather", n, xn, True)]

  p = Prog("reduce", n)
  x = p.param("x", [n * s], True, xn)
  out = p.param("out", [s], False)
  g = p.let("g", f"COPY({x}) {{{ONE}}}")
  red = p.let("red", f"REDUCE({p.let('g2', f'RESHAPE({g}, [{n}, {s}])')}) {{(ADD, (0,))}}")
  p.lines.append(f"  STORE({out}, {p.let('r', f'RESHAPE({red}, [{s}])')})")
  p.expect = lambda x: {"out": x.reshape(n, s).sum(0)}
  progs.append(p)

  p = Prog("allgather", n)
  x = p.param("x", [n * s], True, xn)
  out = p.param("out", [n, n * s], True)
  p.store_rows(out, p.replicate(x, n * s, "g"), n * s)
  p.expect = lambda x: {"out": np.tile(x, (n, 1))}
  progs.append(p)

  p = Prog("reduce_scatter", n)
  x = p.param("x", [n * s], True, xn)
  out = p.param("out", [s], True)
  p.lines.append(f"  STORE({out}, {_reduce_scatter(p, x, s)})")
  p.expect = lambda x: {"out": x.reshape(n, s).sum(0)}
  progs.append(p)

  p = Prog("allreduce", n)
  x = p.param("x", [n * s], True, xn)
  out = p.param("out", [n, s], True)
  p.store_rows(out, p.replicate(_reduce_scatter(p, x, s), s, "a"), s)
  p.expect = lambda x: {"out": np.tile(x.reshape(n, s).sum(0), (n, 1))}
  progs.append(p)

  # tinygrad 0.14's form: the devices' shards stacked (MSTACK of MSELECTs), then ALLREDUCE
  p = Prog("allreduce_op", n)
  x = p.param("x", [n * s], True, xn)
  out = p.param("out", [n, s], True)
  sel = [p.let(f"m{j}", f"MSELECT({x}) {{{j}}}") for j in range(n)]
  st = p.let("st", f"MSTACK({', '.join(sel)})")
  p.store_rows(out, p.let("ar", f"ALLREDUCE({st}) {{(ADD, {devices(n)})}}"), s)
  p.expect = lambda x: {"out": np.tile(x.reshape(n, s).sum(0), (n, 1))}
  progs.append(p)
  return progs


def tp_mlp(n: int, batch: int = 3, d_in: int = 5, hidden: int = 8, d_out: int = 4, seed: int = 0) -> Prog:
  """A tensor-parallel MLP: relu(x @ w1 + b1) @ w2 + b2 with w1 (and b1) sharded on their hidden axis
  (w1 on axis 1: a MULTI of per-device PARAMs), w2 on axis 0, so the second matmul reduces over the
  shard axis: a per-device partial product, then an allreduce."""
  rng = np.random.default_rng(seed)
  x = rng.standard_normal((batch, d_in)).astype(np.float32)
  w1 = rng.standard_normal((d_in, hidden)).astype(np.float32)
  b1 = rng.standard_normal(hidden).astype(np.float32)
  w2 = rng.standard_normal((hidden, d_out)).astype(np.float32)
  b2 = rng.standard_normal(d_out).astype(np.float32)
  p, k = Prog("tp_mlp", n), hidden // n
  xs = p.param("x", [batch * d_in], False, x.reshape(-1))
  shards = []
  for j, w in enumerate(np.split(w1, n, axis=1)):  # w1 sharded on axis 1: device j's columns
    p.lines.append(f'  %w1_{j} = PARAM([{d_in}, {k}]) {{({p.slot}, "w1_{j}", "CPU:{j}")}} : f32')
    p.inputs[f"w1_{j}"] = (np.ascontiguousarray(w), False)
    p.slot += 1
    shards.append(f"%w1_{j}")
  w1m = p.let("w1", f"MULTI({', '.join(shards)}) {{1}}")
  b1p = p.param("b1", [hidden], True, b1)
  w2p = p.param("w2", [hidden, d_out], True, w2)
  b2p = p.param("b2", [d_out], False, b2)
  out = p.param("out", [batch, d_out], False)
  xb = p.let("x3", f"RESHAPE({p.replicate(xs, batch * d_in, 'x')}, [{batch}, {d_in}, 1])")
  h = p.let("h0", f"MUL({xb}, {p.let('w1r', f'RESHAPE({w1m}, [1, {d_in}, {hidden}])')})")
  h = p.let("h1", f"RESHAPE({p.let('h', f'REDUCE({h}) {{(ADD, (1,))}}')}, [{batch}, {hidden}])")
  h = p.let("h2", f"MAX({p.let('hb', f'ADD({h}, {b1p})')}, 0.0)")
  y = p.let("y0", f"MUL({p.let('hr', f'RESHAPE({h}, [{batch}, {hidden}, 1])')}, "
                  f"{p.let('w2r', f'RESHAPE({w2p}, [1, {hidden}, {d_out}])')})")
  y = p.let("y1", f"REDUCE({y}) {{(ADD, (1,))}}")  # over the shard axis: the allreduce
  y = p.let("y2", f"COPY({p.let('yr', f'RESHAPE({y}, [{batch}, {d_out}])')}) {{{ONE}}}")
  p.lines.append(f"  STORE({out}, {p.let('y3', f'ADD({y}, {b2p})')})")
  p.expect = lambda x, b1, w2, b2, **w: {"out": np.maximum(x.reshape(batch, d_in) @ w1 + b1, 0) @ w2 + b2}
  return p


def allreduce_text(name: str, n: int, s: int, op: str = "ADD", dt: str = "f32") -> str:
  """tinygrad's ALLREDUCE form over n devices of s elements each (any dtype and op): the devices' shards
  stacked, ALLREDUCE, each device's copy stored as its row of out (x_dev<j> in, out_dev<j> out)."""
  sel = "".join(f"  %m{j} = MSELECT(%x) {{{j}}}\n" for j in range(n))
  return (f'func {name} {{\n  %x = PARAM([{n * s}]) {{(0, "x", {devices(n)})}} : {dt}\n'
          f'  %out = PARAM([{n}, {s}]) {{(1, "out", {devices(n)})}} : {dt}\n{sel}'
          f'  %st = MSTACK({", ".join(f"%m{j}" for j in range(n))})\n  %ar = ALLREDUCE(%st) {{({op}, {devices(n)})}}\n'
          f'  %r = RESHAPE(%ar, [1, {s}])\n  %e = EXPAND(%r, [{n}, {s}])\n  STORE(%out, %e)\n}}\n')
