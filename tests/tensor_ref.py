"""A numpy reference evaluator of tensor-level UOp programs (seed 000 semantics), for the tests.

Written from the seed's op table alone, sharing nothing with the compiler's stages: every op is one
numpy call on whole arrays, so a test's expected values never come from the code under test.
`run_func(sink, arrays, variables)` runs a `func` entry: PARAMs are looked up by name in `arrays`
(outputs too: STORE writes into them in place) and DEFINE_VARs by name in `variables`.
A buffer is read as of a moment (uopc's rule, the README's "Writing a buffer that is also read"): read
plainly, its value on entry; through `AFTER(buf, STORE(buf, ..))`, the value that STORE wrote.
"""
from __future__ import annotations

import numpy as np
from ml_dtypes import bfloat16

from uopc.dtype import DType
from uopc.ops import GroupOp, Ops
from uopc.uop import UOp

NP_DTYPES = {"bool": np.bool_, "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
             "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64,
             "float16": np.float16, "bfloat16": bfloat16, "float32": np.float32, "float64": np.float64,
             "index": np.int64}


def np_dtype(dt: DType): return NP_DTYPES[dt.scalar.name]


def _trunc_div(a, b):
  q = np.abs(a) // np.abs(b)
  return np.where((a < 0) != (b < 0), -q, q).astype(a.dtype)


def _trunc_mod(a, b): return (a - _trunc_div(a, b) * b).astype(a.dtype)


_BINARY = {
  Ops.ADD: np.add, Ops.MUL: np.multiply, Ops.SUB: np.subtract, Ops.MAX: np.maximum, Ops.IDIV: _trunc_div,
  Ops.MOD: _trunc_mod, Ops.CMPLT: np.less, Ops.CMPNE: np.not_equal, Ops.CMPEQ: np.equal, Ops.CMPGT: np.greater,
  Ops.CMPGE: np.greater_equal, Ops.CMPLE: np.less_equal, Ops.XOR: np.bitwise_xor, Ops.OR: np.bitwise_or,
  Ops.AND: np.bitwise_and, Ops.SHL: np.left_shift, Ops.SHR: np.right_shift, Ops.DIV: np.divide, Ops.POW: np.power,
}
_UNARY = {
  Ops.RECIP: np.reciprocal, Ops.TRUNC: np.trunc, Ops.NEG: np.negative, Ops.EXP2: np.exp2, Ops.LOG2: np.log2,
  Ops.SIN: np.sin, Ops.SQRT: np.sqrt, Ops.NOT: np.logical_not,
}
_REDUCE = {Ops.ADD: np.sum, Ops.MUL: np.prod, Ops.MAX: np.max}


class _Evaluator:
  def __init__(self, arrays: dict, variables: dict):
    self.arrays, self.variables = arrays, variables
    self.entry = {name: a.copy() for name, a in arrays.items()}  # the values plain reads see
    self.buffers: dict[UOp, np.ndarray] = {}                     # BUFFERs' contents, as STOREs write them
    self.written: dict[UOp, np.ndarray] = {}                     # STORE -> a copy of what it wrote
    self.values: dict[UOp, object] = {}
    self.args: tuple | None = None  # the argument values, while evaluating a FUNCTION body

  def dims(self, shape_operand: UOp) -> tuple[int, ...]:
    return tuple(int(self.eval(s)) for s in shape_operand.src)

  def eval(self, u: UOp):
    if u not in self.values: self.values[u] = self.compute(u)
    return self.values[u]

  def compute(self, u: UOp):
    op, src = u.op, u.src
    if op is Ops.PARAM and self.args is not None: return self.args[u.arg[0]]
    if op is Ops.PARAM: return self.entry[u.arg[1]]
    if op is Ops.BUFFER: return np.zeros(self.dims(src[0]), np_dtype(u.dtype))
    if op is Ops.DEFINE_VAR: return np.int64(self.variables[u.arg[0]])
    if op is Ops.CONST: return np.array(u.arg, np_dtype(u.dtype))
    if op in _UNARY or op in _BINARY or op in (Ops.WHERE, Ops.MULACC):
      with np.errstate(all="ignore"): return self.alu(u)
    if op is Ops.CAST:
      with np.errstate(all="ignore"): return np.asarray(self.eval(src[0])).astype(np_dtype(u.dtype))
    if op is Ops.BITCAST: return self.bitcast(u)
    if op in GroupOp.Markers or op is Ops.LOAD: return np.array(self.eval(src[0]))
    if op is Ops.AFTER:
      for d in src[1:]: self.eval(d)
      deps = [s for d in src[1:] for s in (d.src if d.op is Ops.GROUP else (d,))]
      writes = [d for d in deps if d.op is Ops.STORE and _base(d.src[0]) is _base(u)]
      return self.written[writes[-1]] if writes else self.eval(src[0])
    if op in (Ops.SINK, Ops.GROUP):
      for s in src: self.eval(s)
      return None
    if op is Ops.STORE: return self.store(u)
    if op is Ops.REDUCE:
      red, axes = u.arg
      with np.errstate(all="ignore"): return _REDUCE[red](self.eval(src[0]), axis=tuple(axes), keepdims=True)
    if op is Ops.GETTUPLE: return self.call(src[0], u.arg)
    return self.movement(u)

  def alu(self, u: UOp):
    xs = [np.asarray(self.eval(s)) for s in u.src]
    if u.op is Ops.WHERE: return np.where(xs[0], xs[1], xs[2]).astype(np_dtype(u.dtype))
    if u.op is Ops.MULACC: return (xs[0] * xs[1] + xs[2]).astype(np_dtype(u.dtype))
    if u.op in _UNARY: return _UNARY[u.op](xs[0]).astype(np_dtype(u.dtype))
    if u.op in (Ops.SHL, Ops.SHR): xs[1] = xs[1].astype(xs[0].dtype)
    return np.asarray(_BINARY[u.op](xs[0], xs[1])).astype(np_dtype(u.dtype))

  def bitcast(self, u: UOp):
    x = np.ascontiguousarray(self.eval(u.src[0]))
    out = x.view(np_dtype(u.dtype))
    return out.reshape(x.shape[:-1] + (-1,)) if x.ndim else out.reshape(())

  def store(self, u: UOp):
    self.eval(u.src[0])  # the target's AFTERs: their dependencies run first
    target = _base(u.src[0])
    buf = self.arrays[target.arg[1]] if target.op is Ops.PARAM else \
      self.buffers.setdefault(target, np.zeros(self.dims(target.src[0]), np_dtype(target.dtype)))
    val = np.broadcast_to(self.eval(u.src[1]), buf.shape)
    if len(u.src) > 2: val = np.where(self.eval(u.src[2]), val, buf)
    buf[...] = val
    self.written[u] = buf.copy()
    return None

  def call(self, fn: UOp, i: int):
    inner = _Evaluator(self.arrays, self.variables)
    inner.args = tuple(self.eval(a) for a in fn.src[1:])
    return inner.eval(fn.src[0].src[i])

  def movement(self, u: UOp):
    op, src = u.op, u.src
    x = np.asarray(self.eval(src[0]))
    if op is Ops.RESHAPE: return x.reshape(self.dims(src[1]))
    if op is Ops.EXPAND: return np.broadcast_to(x, self.dims(src[1]))
    if op is Ops.PERMUTE: return np.transpose(x, u.arg)
    if op is Ops.FLIP: return np.flip(x, axis=tuple(i for i, f in enumerate(u.arg) if f))
    if op is Ops.SHRINK:
      return x[tuple(slice(o, o + n) for o, n in zip(self.dims(src[1]), self.dims(src[2])))]
    if op is Ops.PAD:
      out = np.zeros(self.dims(src[2]), x.dtype)
      out[tuple(slice(o, o + n) for o, n in zip(self.dims(src[1]), x.shape))] = x
      return out
    if op is Ops.STACK: return np.stack([np.asarray(self.eval(s)) for s in src])
    if op is Ops.INDEX: return x[self.outer_indices(src[1:])]
    raise NotImplementedError(f"tensor_ref: {op}")


  def outer_indices(self, idxs: tuple[UOp, ...]) -> tuple:
    """Each (k,)-shaped index makes its own output axis (an outer product, not numpy's zipped indexing)."""
    arrs = [np.asarray(self.eval(i)).astype(np.int64) for i in idxs]
    n_axes = sum(a.ndim for a in arrs)
    out, pos = [], 0
    for a in arrs:
      out.append(a.reshape((1,) * pos + a.shape + (1,) * (n_axes - pos - a.ndim)))
      pos += a.ndim
    return tuple(out)


def _base(u: UOp) -> UOp:
  """The buffer under AFTERs."""
  while u.op is Ops.AFTER: u = u.src[0]
  return u


def run_func(sink: UOp, arrays: dict[str, np.ndarray], variables: dict[str, int] | None = None) -> dict[str, np.ndarray]:
  """Run a tensor-level entry on numpy arrays (outputs are written in place) and return `arrays`."""
  _Evaluator(arrays, variables or {}).eval(sink)
  return arrays
