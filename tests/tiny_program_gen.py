"""Random programs written the way models are: chains of tinygrad Tensor methods (elementwise with
broadcasting, reductions over any axis with and without keepdim, pad with values, shrink, flip, permute,
reshape, expand, cumsum, softmax, matmul, casts, powers by constants, argmax and indexing by an integer
tensor: the forms whose arange and one-hot uopc folds), 1-4 inputs of ranks 1-4 with odd sizes.

`random_program(rng, name)` writes a program as Python source (`def NAME(x0, x1, ...): ...`, one Tensor
method a line) while applying each step to empty Tensors of the same shapes, so that every step is one
tinygrad accepts; values stay well-conditioned (a logarithm's argument is positive, a divisor is away
from 0, an exponential's argument is clipped) so that float32 results can be compared to 1e-4.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tinygrad import Tensor, dtypes

SIZES = (1, 2, 3, 5, 7)


@dataclass
class TinyProgram:
  name: str
  source: str                 # the Python text defining the function `name`
  inputs: list[np.ndarray]

  def function(self):
    scope = {"Tensor": Tensor, "dtypes": dtypes}
    exec(compile(self.source, f"<{self.name}>", "exec"), scope)  # noqa: S102 - our own generated source
    return scope[self.name]


class _Writer:
  def __init__(self, rng: np.random.Generator):
    self.rng, self.lines, self.shapes, self.n = rng, [], {}, 0
    self.inputs: list[np.ndarray] = []
    self.ints: set[str] = set()  # the integer inputs (indices)

  def new_input(self, shape: tuple[int, ...], kind: str = "f", high: int = 6) -> str:
    """A float32 input (kind "f"), or int32 in [-high + 1, high) (kind "i")."""
    name = f"x{len(self.inputs)}"
    a = self.rng.standard_normal(shape).astype(np.float32) if kind == "f" else self.rng.integers(1 - high, high, shape).astype(np.int32)
    self.inputs.append(a)
    self.shapes[name] = tuple(shape)
    if kind == "i": self.ints.add(name)
    return name

  def let(self, expr: str, shape: tuple[int, ...]) -> str:
    name = f"t{self.n}"
    self.n += 1
    self.lines.append(f"  {name} = {expr}")
    self.shapes[name] = tuple(shape)
    return name


def _shape_of(expr: str, shapes: dict[str, tuple], ints: set[str] = frozenset()) -> tuple[int, ...]:
  """The shape tinygrad gives `expr` (evaluated lazily on empty Tensors of the names' dtypes: nothing is computed)."""
  def empty(k, v):
    dt = dtypes.int32 if k in ints else dtypes.float32
    return Tensor.empty(*v, dtype=dt) if v else Tensor.empty(1, dtype=dt).reshape(())
  scope = {k: empty(k, v) for k, v in shapes.items()}
  scope["dtypes"] = dtypes
  return tuple(eval(expr, scope).shape)  # noqa: S307 - our own generated expression


def _axis(rng, rank: int) -> int: return int(rng.integers(0, rank))


def _unary(w: _Writer, t: str) -> str:
  forms = ["{t}.relu()", "{t}.sigmoid()", "{t}.tanh()", "{t}.abs()", "(-{t})", "{t}.square()", "{t}.clip(-4, 4).exp()",
           "({t}.abs() + 0.5).log()", "({t}.abs() + 0.1).sqrt()", "({t}.abs() + 0.5).reciprocal()", "{t}.sin()",
           "{t}.gelu()", "{t}.silu()", "({t} * 2 + 1)", "{t}.maximum(0.25)", "({t} ** 2)", "({t} ** 3)",
           "({t}.abs() + 0.5) ** 0.5", "({t}.abs() + 0.5) ** -1", "({t}.clip(-3, 3) ** 4)", "({t}.abs() + 0.5) ** -2",
           "({t}.abs() + 0.5) ** 1.5"]  # no .half().float(): tinygrad folds the round trip away (SPEC-NOTES)
  return w.let(w.rng.choice(forms).format(t=t), w.shapes[t])


def _broadcast_partner(w: _Writer, t: str) -> str:
  """A new input whose shape broadcasts against t's: some axes 1, maybe fewer leading axes."""
  shape = list(w.shapes[t])
  partner = [1 if w.rng.random() < 0.4 else d for d in shape]
  drop = int(w.rng.integers(0, len(shape) + 1)) if shape else 0
  return w.new_input(tuple(partner[drop:]))


def _binary(w: _Writer, t: str) -> str:
  u = _broadcast_partner(w, t)
  forms = ["({t} + {u})", "({t} - {u})", "({t} * {u})", "({t} / ({u}.abs() + 0.5))", "{t}.maximum({u})",
           "({t} > {u}).where({t}, {u})", "(({t} < 0.3) * {u})", "{t}.minimum({u})"]
  expr = w.rng.choice(forms).format(t=t, u=u)
  return w.let(expr, _shape_of(expr, w.shapes, w.ints))


def _reduce(w: _Writer, t: str) -> str:
  shape = w.shapes[t]
  if not shape: return t
  axis, keep = _axis(w.rng, len(shape)), bool(w.rng.random() < 0.5)
  op = w.rng.choice(["sum", "max", "min", "mean"] + (["prod"] if shape[axis] <= 3 else []))
  inner = f"{t}.clip(-2, 2)" if op == "prod" else t
  expr = f"{inner}.{op}(axis={axis}, keepdim={keep})"
  return w.let(expr, _shape_of(expr, w.shapes, w.ints))


def _movement(w: _Writer, t: str) -> str:
  shape, rng = w.shapes[t], w.rng
  if not shape: return w.let(f"{t}.reshape(1)", (1,))
  rank = len(shape)
  choice = rng.choice(["pad", "shrink", "flip", "permute", "reshape", "expand"])
  if choice == "pad":
    pads = tuple((int(rng.integers(0, 3)), int(rng.integers(0, 3))) for _ in shape)
    value = rng.choice(["", ", value=1.5", ", value=-2.0"])
    expr = f"{t}.pad({pads}{value})"
  elif choice == "shrink":
    axis = _axis(rng, rank)
    lo = int(rng.integers(0, shape[axis]))
    hi = int(rng.integers(lo + 1, shape[axis] + 1))
    expr = f"{t}[{', '.join([':'] * axis + [f'{lo}:{hi}'])}]"
  elif choice == "flip": expr = f"{t}.flip({_axis(rng, rank)})"
  elif choice == "permute": expr = f"{t}.permute{tuple(int(i) for i in rng.permutation(rank))}"
  elif choice == "reshape":
    if rank >= 2 and rng.random() < 0.5:
      i = _axis(rng, rank - 1)
      new = shape[:i] + (shape[i] * shape[i + 1],) + shape[i + 2:]
    else:
      new = tuple(reversed(shape)) if rng.random() < 0.5 else (int(np.prod(shape)),)
      if int(np.prod(new)) != int(np.prod(shape)): new = (int(np.prod(shape)),)
    expr = f"{t}.reshape{new}" if len(new) > 1 else f"{t}.reshape({new[0]})"
  else:
    k = int(rng.choice([2, 3]))
    axis = int(rng.integers(0, rank + 1))
    target = shape[:axis] + (k,) + shape[axis:]
    expr = f"{t}.unsqueeze({axis}).expand{target}"
  return w.let(expr, _shape_of(expr, w.shapes, w.ints))


def _scan(w: _Writer, t: str) -> str:
  shape = w.shapes[t]
  if not shape: return t
  axis = _axis(w.rng, len(shape))
  expr = w.rng.choice([f"{t}.cumsum({axis})", f"{t}.softmax({axis})", f"{t}.log_softmax({axis})"])
  return w.let(expr, _shape_of(expr, w.shapes, w.ints))


def _index(w: _Writer, t: str) -> str:
  """The forms built on tinygrad's arange: t's rows picked by an integer tensor (a one-hot sum over the
  rows, some indices out of range or negative), or the argmax of a new input along an axis, added to t."""
  shape = w.shapes[t]
  if len(shape) >= 2 and w.rng.random() < 0.6:
    rows = shape[0]
    idx = w.new_input((int(w.rng.choice(SIZES)),), "i", high=rows + 1)
    expr = f"{t}[{idx}]"
  else:
    x = w.new_input(shape or (int(w.rng.choice(SIZES)),))
    axis = _axis(w.rng, len(w.shapes[x]))
    expr = f"({t} + {x}.argmax(axis={axis}, keepdim=True).float())"
  return w.let(expr, _shape_of(expr, w.shapes, w.ints))


def _matmul(w: _Writer, t: str) -> str:
  shape = w.shapes[t]
  if not shape: return t
  k = int(w.rng.choice(SIZES))
  other = w.new_input((shape[-1], k))
  expr = f"({t} @ {other})"
  return w.let(expr, _shape_of(expr, w.shapes, w.ints))


def _int_chain(w: _Writer) -> str:
  """An integer input through integer ops, then to float (exact in float32: small values)."""
  x = w.new_input(tuple(int(w.rng.choice(SIZES)) for _ in range(int(w.rng.integers(1, 4)))), "i")
  forms = ["({x} * 3 + 1)", "{x}.maximum(0)", "({x} * {x})", "({x} > 0).where({x}, -{x})"]
  t = w.let(w.rng.choice(forms).format(x=x), w.shapes[x])
  if w.rng.random() < 0.5:
    axis = _axis(w.rng, len(w.shapes[t]))
    expr = f"{t}.sum(axis={axis})"
    t = w.let(expr, _shape_of(expr, w.shapes, w.ints))
  return w.let(f"{t}.float()", w.shapes[t])


STEPS = [(_unary, 3), (_binary, 3), (_reduce, 2), (_movement, 4), (_scan, 1), (_matmul, 1), (_index, 1)]


def random_program(rng: np.random.Generator, name: str, max_steps: int = 7) -> TinyProgram:
  w = _Writer(rng)
  t = _int_chain(w) if rng.random() < 0.15 else w.new_input(tuple(int(rng.choice(SIZES)) for _ in range(int(rng.integers(1, 5)))))
  kinds, weights = zip(*STEPS)
  p = np.array(weights, float) / sum(weights)
  for _ in range(int(rng.integers(2, max_steps + 1))):
    if len(w.inputs) >= 4 and rng.random() < 0.8:  # at most 4 inputs: no more binaries or matmuls then
      step = rng.choice([_unary, _reduce, _movement, _scan])
    else:
      step = kinds[int(rng.choice(len(kinds), p=p))]
    if int(np.prod(w.shapes[t] or (1,))) > 4096: step = _reduce
    t = step(w, t)
  outs = [t]
  if rng.random() < 0.2 and w.n >= 2: outs.insert(0, f"t{int(rng.integers(0, w.n - 1))}")
  args = ", ".join(f"x{i}" for i in range(len(w.inputs)))
  body = "\n".join(w.lines) + f"\n  return {', '.join(outs)}\n"
  return TinyProgram(name, f"def {name}({args}):\n{body}", w.inputs)
