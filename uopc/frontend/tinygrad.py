"""tinygrad 0.14 tensor graphs -> uopc text: the front end of real models.

`export(fn, *examples)` calls `fn` on tinygrad Tensors and converts the lazy graph it builds (nothing
is run: tinygrad only schedules at `realize()`) into one `func` entry. The conversion is faithful or
refuses: every tinygrad op is either written as the seed-000 op with the same meaning or reported as
an ExportError naming the op and the user's Python line that made it.

Invariants of the written entry:
- PARAM slots: the example inputs in order (0..n-1), then the other buffers the graph reads (model
  weights, in the order the graph first meets them), then one PARAM per output, stored once each.
- Where tinygrad and seed 000 spell an op differently the rewrite is exact: tinygrad's REDUCE drops
  its n leading axes (seed 000 keeps them as 1: a RESHAPE follows), its EXPAND prepends axes (a
  RESHAPE to size-1 axes precedes seed 000's EXPAND), RECIPROCAL/CDIV/CMOD/FDIV are RECIP/IDIV/MOD/DIV.
- A weak constant (`weakint`/`weakfloat`, and any value computed only from them) takes the dtype of
  what it meets, as in tinygrad; one that meets nothing typed gets the default int32/float32.
- A tinygrad FUNCTION (from `uopc.function` / `tinygrad.function`) stays a FUNCTION over a TUPLE of
  PARAMs whose results are read through GETTUPLE; Callify inlines it.
"""
from __future__ import annotations

import functools
import inspect
import os
import sys
import weakref
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from uopc.diagnostics import CompileError, Loc, error
from uopc.frontend.parser import c_identifier, parse_source
from uopc.frontend.printer import format_arg, print_module
from uopc.frontend import tinygrad_multi as multi
from uopc.frontend.tinygrad_constants import DEFAULT_MAX_BYTES, Constants, buffer_data
from uopc.frontend.tinygrad_multi import devices_arg
from uopc.ops import Ops

try:
  from tinygrad import Tensor, dtypes as tdt
  from tinygrad.uop.ops import Ops as T, UOp as TUOp
except ImportError:  # pragma: no cover - exercised only where tinygrad is missing
  Tensor = None

_TINYGRAD_DIR = os.path.dirname(sys.modules["tinygrad"].__file__) if Tensor is not None else "<none>"
_UOPC_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_RENAMED = {"RECIPROCAL": "RECIP", "CDIV": "IDIV", "CMOD": "MOD", "FDIV": "DIV"}
_ALU = frozenset("""ADD MUL MAX SUB NEG CMPLT CMPNE CMPEQ WHERE EXP2 LOG2 SIN SQRT RECIPROCAL TRUNC CDIV CMOD
  FDIV POW AND OR XOR SHL SHR FLOORDIV FLOORMOD MULACC THREEFRY""".split())
_PASS = frozenset({"DETACH", "CONTIGUOUS_BACKWARD"})
_MOVEMENT = frozenset({"RESHAPE", "EXPAND", "PERMUTE", "PAD", "SHRINK", "FLIP"})
_HINTS = {
  "AFTER": "an assignment to an input or a view of one, to a realized weight, or to a tensor that something else "
           "also reads before it (tinygrad's result then depends on its schedule), or random numbers inside the traced "
           "function; realize the model's weights and random tensors before exporting "
           "(e.g. Tensor.realize(*nn.state.get_parameters(model)))",
  "STORE": "an assignment inside the traced function; uopc exports pure functions",
}


def require_tinygrad() -> None:
  if Tensor is None:
    raise CompileError([error(None, "the tinygrad front end needs tinygrad 0.14: pip install 'uopc[tinygrad]'")])


def uopc_dtype(dt: Any) -> str:
  """A tinygrad scalar dtype -> its uopc spelling; weak dtypes get tinygrad's defaults."""
  table = {tdt.bool: "bool", tdt.int8: "i8", tdt.int16: "i16", tdt.int32: "i32", tdt.int64: "i64", tdt.uint8: "u8",
           tdt.uint16: "u16", tdt.uint32: "u32", tdt.uint64: "u64", tdt.float16: "f16", tdt.bfloat16: "bf16",
           tdt.float32: "f32", tdt.float64: "f64", tdt.weakint: "i32", tdt.weakfloat: "f32"}
  if dt in table: return table[dt]
  raise _Unsupported(f"dtype {dt} has no uopc equivalent")


def _variable(u: Any) -> bool:
  """tinygrad 0.14's Variable: a BUFFER of an ALU-space scalar carrying a name and bounds."""
  return u.op is T.BUFFER and getattr(u.arg, "name", None) is not None and getattr(u.arg, "vmin_vmax", None) is not None


def _is_weak(u: Any) -> bool: return u.dtype in (tdt.weakint, tdt.weakfloat)


class _Unsupported(Exception):
  """Raised inside the walk; turned into a located ExportError by `export`."""

  def __init__(self, message: str, node: Any = None):
    super().__init__(message)
    self.node = node


# ---- where the user's code made each tinygrad node ---------------------------------------------------
class Sites:
  """tinygrad UOp -> (file, line) of the user's code that created it, recorded while tracing: every
  Tensor built during the trace marks the nodes new in its graph with the innermost caller frame that
  is neither tinygrad's nor uopc's."""

  def __init__(self): self.at: dict[Any, tuple[str, int]] = {}

  def record(self, root: Any) -> None:
    stack = [root]
    site = None
    while stack:
      u = stack.pop()
      if u in self.at: continue
      site = site or _user_frame()
      self.at[u] = site
      stack.extend(u.src)

  def of(self, u: Any) -> tuple[str, int] | None: return self.at.get(u)


def _user_frame() -> tuple[str, int]:
  f = sys._getframe(1)
  while f is not None:
    path = os.path.abspath(f.f_code.co_filename)
    if not (path.startswith(_TINYGRAD_DIR) or path.startswith(_UOPC_DIR) or "/contextlib.py" in path
            or "/functools.py" in path):
      return (path, f.f_lineno)
    f = f.f_back
  return ("<unknown>", 0)


@contextmanager
def recording(sites: Sites) -> Iterator[None]:
  """Patch Tensor for the duration of a trace: construction, so each new node gets its user site (both
  `Tensor(...)` and `_apply_uop`, which builds the result of an elementwise op without `__init__`, and an
  assignment's new node); `realize` keeps the graph lazy (it changes no value, and would run tinygrad on the
  empty examples, whose result became a weight PARAM); reading values into Python raises (the program would bake
  in what empty examples gave)."""
  original, original_apply, original_assign = Tensor.__init__, Tensor._apply_uop, Tensor.assign
  def init(self, *args, **kwargs):
    original(self, *args, **kwargs)
    sites.record(self.uop)
  def apply(self, *args, **kwargs):
    ret = original_apply(self, *args, **kwargs)
    sites.record(ret.uop)
    return ret
  def assign(self, *args, **kwargs):
    ret = original_assign(self, *args, **kwargs)
    sites.record(self.uop)
    return ret
  def realize(self, *others, **kwargs): return self  # values do not change; tinygrad would run on the empty examples
  def read(self, *args, **kwargs):
    raise ValueError("the function reads a tensor's values in Python (numpy, item, tolist, data); an exported program "
                     "cannot depend on them: compute with Tensor ops (where, maximum, ...) instead")
  patched = {"__init__": init, "_apply_uop": apply, "assign": assign, "realize": realize,
             **{name: read for name in ("numpy", "item", "tolist", "data")}}
  saved = {name: Tensor.__dict__[name] for name in patched}
  for name, fn in patched.items(): setattr(Tensor, name, fn)
  try: yield
  finally:
    for name, fn in saved.items(): setattr(Tensor, name, fn)


# ---- the graph walk ----------------------------------------------------------------------------------
@dataclass
class Param:
  slot: int
  name: str
  shape: tuple        # as the PARAM declares it (a sharded one: its shards one after the other along axis 0)
  dtype: str
  devices: Any = None  # None, one device, or the tuple of devices of a sharded PARAM (one argument per shard)
  axis: int | None = None  # a sharded PARAM's shard axis in the whole tensor (see uopc.frontend.tinygrad_multi)

  def __post_init__(self):
    if self.devices is not None: self.devices = multi.device_names(self.devices)

  def declare(self, w: "Writer") -> str:
    """The PARAM statement; its value's name."""
    dev = "" if self.devices is None else f", {devices_arg(self.devices)}"
    return w.let(f"PARAM({w.dims(self.shape)}) {{({self.slot}, \"{self.name}\"{dev})}} : {self.dtype}", self.name)


class Writer:
  """Statements of one entry (or one FUNCTION body scope shares the entry's lines)."""

  def __init__(self):
    self.lines: list[str] = []
    self.count = 0

    self.used: set[str] = set()
    self.sizes: dict[Any, str] = {}
    self.current: Any = None             # the tinygrad node being written
    self.origin: dict[int, Any] = {}     # index in `lines` -> the tinygrad node that statement writes

  def let(self, text: str, name: str | None = None) -> str:
    """A new statement: `%name` for a PARAM (suffixed when taken), `%t.<n>` for the rest (a '.' is in no
    C identifier, so the two never meet)."""
    self.count += 1
    full = f"%t.{self.count}"
    if name is not None:
      full = f"%{name}" if f"%{name}" not in self.used else f"%{name}_{self.count}"
    self.used.add(full)
    self.origin[len(self.lines)] = self.current
    self.lines.append(f"  {full} = {text}")
    return full

  def dims(self, shape: Sequence) -> str:
    """A shape operand: sizes as numbers, a symbolic size (a tinygrad Variable, or an expression of some)
    as the value that computes it."""
    return "[" + ", ".join(str(d) if isinstance(d, int) else self.size(d) for d in shape) + "]"

  def size(self, d: Any) -> str:
    """The index-valued statement of a symbolic size: a Variable is a DEFINE_VAR (one per name)."""
    key = ("size", d)
    if key in self.sizes: return self.sizes[key]
    if d.op is T.AFTER and d.src[0].op is T.BUFFER: out = self.size(d.src[0])
    elif _variable(d):
      lo, hi = d.arg.vmin_vmax
      out = self.let(f"DEFINE_VAR {{({format_arg(d.arg.name)}, {lo}, {hi})}} : index", c_identifier(d.arg.name))
    elif d.op is T.CONST: out = self.let(f"CONST {{{int(d.arg)}}} : index")
    elif d.op.name in _ALU and d.op.name not in ("WHERE", "THREEFRY", "MULACC"):
      out = self.let(f"{_RENAMED.get(d.op.name, d.op.name)}({', '.join(self.size(s) for s in d.src)})")
    else: raise _Unsupported(f"a size computed by {d.op.name} is not exported", d)
    self.sizes[key] = out
    return out


class Converter:
  """Writes the uopc statements for a set of tinygrad roots. `leaves` maps tinygrad nodes that stand
  for a PARAM (inputs, weights, formals of a FUNCTION body) to their uopc value name."""

  def __init__(self, w: Writer, leaves: dict[Any, str], new_weight: Callable[[Any], str], sites: Sites):
    self.w, self.leaves, self.new_weight, self.sites = w, leaves, new_weight, sites
    self.done: dict[tuple[Any, str | None], str] = {}
    self.users: dict[Any, set] | None = None  # node -> the nodes that read it, over the whole traced graph

  def value(self, root: Any, want: str | None = None) -> str:
    """The uopc name of `root`'s value; a weak root is written in dtype `want`."""
    for u in self._order(root):
      if not _is_weak(u) and (u, None) not in self.done: self.done[(u, None)] = self._convert(u, None)
    return self._get(root, want)

  def _order(self, root: Any) -> list[Any]:
    """Sources before users, stopping at leaves and at nodes already written (an explicit stack)."""
    order, seen, stack = [], set(), [(root, False)]
    while stack:
      u, expanded = stack.pop()
      if expanded: order.append(u); continue  # noqa: E702
      if u in seen or (u, None) in self.done: continue
      seen.add(u)
      stack.append((u, True))
      stack.extend((s, False) for s in reversed(self._operands(u)))
    return order

  def _operands(self, u: Any) -> tuple:
    """The value sources of u: a movement op's shape operands, a buffer's size and a FUNCTION's body are not values."""
    if u.op is T.AFTER and u not in self.leaves and (v := self._fill(u)) is not None: return (v,)
    if u in self.leaves or u.op in (T.BUFFER, T.PARAM, T.FUNCTION, T.CONST, T.AFTER, T.STORE): return ()
    if multi.is_multi(u): return multi.operands(u)
    if u.op is T.RESHAPE and u.src[0].op is T.BUFFER: return ()  # a weight: written with its tensor's shape
    if u.op.name in ("RESHAPE", "EXPAND", "PERMUTE", "PAD", "SHRINK", "FLIP"): return u.src[:1]
    return u.src

  def _get(self, u: Any, want: str | None) -> str:
    if not _is_weak(u): return self.done[(u, None)] if (u, None) in self.done else self.value(u)
    dt = want or uopc_dtype(u.dtype)
    if (u, dt) not in self.done: self.done[(u, dt)] = self._convert(u, dt)
    return self.done[(u, dt)]

  def _convert(self, u: Any, weak_as: str | None) -> str:
    outer, self.w.current = self.w.current, u
    try:
      return self._write(u, weak_as)
    except _Unsupported as e:
      if e.node is None: e.node = u
      raise
    finally: self.w.current = outer

  def _write(self, u: Any, weak_as: str | None) -> str:
    if u in self.leaves: return self.leaves[u]
    name = u.op.name
    if multi.is_multi(u):
      try: return multi.convert(self, u, weak_as)
      except multi.Unsupported as e: raise _Unsupported(str(e), u) from None
    if name == "AFTER" and u.src[0].op is T.BUFFER and _variable(u.src[0]) or _variable(u):
      return self.w.let(f"CAST({self.w.size(u)}) : {weak_as or uopc_dtype(u.dtype)}")
    if name == "BUFFER": return self._weight(u, tuple(u.shape))
    if name == "AFTER" and (v := self._fill(u)) is not None: return self._get(v, weak_as)
    if name == "CONST": return self._const(u, weak_as)
    if name in _PASS: return self._get(u.src[0], weak_as)
    if name == "CONTIGUOUS": return self.w.let(f"CONTIGUOUS({self._get(u.src[0], weak_as)})")
    if name in _ALU: return self._alu(u, weak_as)
    if name in ("CAST", "BITCAST"): return self._cast(u)
    if name == "REDUCE": return self._reduce(u, weak_as)
    if name in ("RESHAPE", "EXPAND", "PERMUTE", "PAD", "SHRINK", "FLIP"): return self._movement(u, weak_as)
    if name == "STACK" and u.dtype != tdt.void: return self.w.let(f"STACK({', '.join(self._get(s, weak_as) for s in u.src)})")
    if name == "GETTUPLE": return self._gettuple(u)
    if name == "FUNCTION": return self._function(u)
    if name == "COPY": return self._get(u.src[0], weak_as)  # a copy between two single devices does not change a value
    raise _Unsupported(f"tinygrad op {name} is not supported by the exporter" + (f" ({_HINTS[name]})" if name in _HINTS else ""))

  def _fill(self, u: Any) -> Any:
    """The value an assignment inside the trace leaves, `AFTER(view, STORE(view, value))` storing the whole view:
    into a fresh buffer (tinygrad 0.14's `Tensor.full`, so `zeros`, `ones`, `*_like`, writes its value so) or
    into a value computed in the trace (`y = x * 2; y += 1`: nothing outside changes; what read y before
    keeps reading the old value, as in tinygrad). None where the AFTER is anything else: an assignment to an
    input, to a view of one, or to a weight that holds data (a side effect a pure entry cannot have)."""
    if len(u.src) != 2 or u.src[1].op is not T.STORE or not self._only_for(u): return None
    view, (target, value) = u.src[0], u.src[1].src[:2]
    if target is not view or tuple(value.shape) != tuple(view.shape): return None
    base = view
    while base.op.name in _MOVEMENT and base not in self.leaves: base = base.src[0]
    if base in self.leaves or any(base is getattr(leaf, "base", None) for leaf in self.leaves): return None
    if base.op is not T.BUFFER: return None if base.op in (T.PARAM, T.COPY) or multi.is_multi(base) else value
    return None if _variable(base) or buffer_data(base)[0] is not None else value

  def _only_for(self, u: Any) -> bool:
    """The value before assignment `u` (its view) and what is computed from it serve only the new value: where
    something else reads it too (`y *= y; z = y * 1; y -= 3; return y + z`), tinygrad gives that reader the value
    after the assignment or before it depending on its schedule, so such a program is refused, not guessed."""
    if self.users is None: return False
    view, store = u.src[0], u.src[1]
    reach: dict[Any, bool] = {}
    for n in store.src[1].toposort():
      reach[n] = n is view or any(reach.get(x, False) for x in n.src)
    inside = {n for n, r in reach.items() if r} | {view}
    return all(r in inside or r is store or r is u for n in inside for r in self.users.get(n, ()))

  def _const(self, u: Any, weak_as: str | None) -> str:
    v = u.arg
    if not isinstance(v, (bool, int, float)):
      try: v = float(v)
      except (TypeError, ValueError): raise _Unsupported(f"CONST {v!r} has no uopc value") from None
    dt = weak_as or uopc_dtype(u.dtype)
    if dt == "bool": v = bool(v)
    elif dt[0] in "iu":  # wrapped to the dtype, as tinygrad's own constants are (x - 200 on uint8 multiplies by -1)
      bits = int(dt[1:])
      v = int(v) & ((1 << bits) - 1)
      if dt[0] == "i" and v >= 1 << (bits - 1): v -= 1 << bits
    else: v = float(v)
    return self.w.let(f"CONST {{{format_arg(v)}}} : {dt}")

  def _operand_dtype(self, u: Any, weak_as: str | None, i: int) -> str | None:
    """The dtype a weak source i of ALU `u` takes: the op's own dtype, or for a comparison the dtype of
    a typed partner (or the default)."""
    if u.op.name == "WHERE" and i == 0: return "bool"
    if u.op.name in ("CMPLT", "CMPNE", "CMPEQ"):
      typed = [s for s in u.src if not _is_weak(s)]
      return uopc_dtype(typed[0].dtype) if typed else None
    if u.op.name in ("SHL", "SHR") and i == 1 and not _is_weak(u.src[0]): return uopc_dtype(u.src[0].dtype)
    return weak_as or uopc_dtype(u.dtype)

  def _alu(self, u: Any, weak_as: str | None) -> str:
    ops = [self._get(s, self._operand_dtype(u, weak_as, i)) for i, s in enumerate(u.src)]
    if u.op.name == "POW" and (weak_as or uopc_dtype(u.dtype))[0] in "iu": return self._int_pow(u, ops[0])
    return self.w.let(f"{_RENAMED.get(u.op.name, u.op.name)}({', '.join(ops)})")

  def _int_pow(self, u: Any, base: str) -> str:
    """An integer POW (seed 000's POW is a float op): by a constant exponent n >= 0, the products tinygrad's own
    rewrite makes of it (x ** 3 = x * x * x; integer products wrap, so their order does not matter)."""
    e = u.src[1]
    while e.op.name in _MOVEMENT: e = e.src[0]
    n = e.arg if e.op is T.CONST and isinstance(e.arg, (int, float)) and not isinstance(e.arg, bool) else None
    if n is None or n < 0 or n != int(n):
      raise _Unsupported("POW of integers is exported only by a constant exponent of 0 or more (tinygrad's own rule)")
    n, acc, p = int(n), None, base
    if n == 0: return self.w.let(f"ADD({self.w.let(f'MUL({base}, 0)')}, 1)")
    while n:
      if n & 1: acc = p if acc is None else self.w.let(f"MUL({acc}, {p})")
      n >>= 1
      if n: p = self.w.let(f"MUL({p}, {p})")
    return acc

  def _cast(self, u: Any) -> str:
    src = u.src[0]
    if u.op.name == "BITCAST" and src.dtype.itemsize != u.dtype.itemsize:
      raise _Unsupported("a BITCAST between dtypes of different sizes is not exported")
    return self.w.let(f"{u.op.name}({self._get(src, None)}) : {uopc_dtype(u.dtype)}")

  def _reduce(self, u: Any, weak_as: str | None) -> str:
    op, n = u.arg
    x = self._get(u.src[0], weak_as)
    if n == 0: return x
    red = self.w.let(f"REDUCE({x}) {{({op.name}, {format_arg(tuple(range(n)))})}}")
    return self.w.let(f"RESHAPE({red}, {self.w.dims(u.shape)})")

  def _movement(self, u: Any, weak_as: str | None) -> str:
    if u.op is T.RESHAPE and u.src[0].op is T.BUFFER and (u.src[0], None) not in self.done and u.src[0] not in self.leaves:
      self.done[(u.src[0], None)] = self._weight(u.src[0], tuple(u.shape))  # a weight keeps its tensor's shape
      return self.done[(u.src[0], None)]
    x, name, ps = self._get(u.src[0], weak_as), u.op.name, tuple(u.src[0].shape)
    if name == "RESHAPE": return x if tuple(u.shape) == ps else self.w.let(f"RESHAPE({x}, {self.w.dims(u.shape)})")
    if name == "EXPAND":
      lead = tuple(u.marg)
      if not lead: return x
      ones = self.w.let(f"RESHAPE({x}, {self.w.dims((1,) * len(lead) + ps)})")
      return self.w.let(f"EXPAND({ones}, {self.w.dims(lead + ps)})")
    if name == "PERMUTE": return self.w.let(f"PERMUTE({x}) {{{format_arg(tuple(u.marg))}}}")
    if name == "FLIP": return self.w.let(f"FLIP({x}) {{{format_arg(tuple(u.marg))}}}")
    offsets, sizes = [o for o, _ in u.marg], [s for _, s in u.marg]
    return self.w.let(f"{name}({x}, {self.w.dims(offsets)}, {self.w.dims(sizes)})")

  def _weight(self, buf: Any, shape: tuple) -> str:
    """A buffer that is not an input; one on a tuple of devices (outside an UNSHARD) holds a whole copy on
    each: one PARAM (or embedded constant), copied to every device."""
    value = self.new_weight(buf, shape)
    return multi.replicate(self.w, value, buf.arg.device) if isinstance(buf.arg.device, tuple) else value

  def _gettuple(self, u: Any) -> str:
    fn = u.src[0]
    if fn.op is not T.FUNCTION: raise _Unsupported(f"GETTUPLE of {fn.op.name} is not exported")
    return self.w.let(f"GETTUPLE({self._get(fn, None)}) {{{u.arg}}}")

  def _function(self, fn: Any) -> str:
    """A FUNCTION(TUPLE(body...), args...) of tinygrad: its formals become uopc PARAMs of the body."""
    args = [self._get(a, None) for a in fn.src[1:]]
    body = fn.src[0]
    formals = {p: p for p in body.toposort() if p.op is T.PARAM}
    inner: dict[Any, str] = {}
    for p in sorted(formals, key=lambda p: p.arg.slot):
      inner[p] = self.w.let(f"PARAM({self.w.dims(p.shape)}) {{({p.arg.slot}, \"arg{p.arg.slot}\")}} : {uopc_dtype(p.dtype)}", f"arg{p.arg.slot}")
    sub = Converter(self.w, inner, self._no_weights, self.sites)
    values = [sub.value(s) for s in body.src]
    tup = self.w.let(f"TUPLE({', '.join(values)})")
    op = "CALL" if body in _CALL_BODIES else "FUNCTION"
    return self.w.let(f"{op}({', '.join([tup] + args)})")

  def _no_weights(self, u: Any, shape: tuple) -> str:
    raise _Unsupported("a buffer read inside a FUNCTION body that is not one of its arguments")


# ---- the public entry points -------------------------------------------------------------------------
def _as_tensor(x: Any, i: int) -> Any:
  if isinstance(x, Tensor): return x
  try:
    import numpy as np
    if isinstance(x, np.ndarray): return Tensor(x)
  except ImportError:  # pragma: no cover
    pass
  raise CompileError([error(None, f"example input {i} is a {type(x).__name__}; pass a tinygrad Tensor "
                                  "(e.g. Tensor.empty(shape, dtype=...)) or a numpy array")])


def _input_names(fn: Callable, n: int, given: Sequence[str] | None) -> list[str]:
  if given is not None:
    if len(given) != n: raise CompileError([error(None, f"{len(given)} input names for {n} example inputs")])
    return [c_identifier(g) for g in given]
  try:
    params = [p.name for p in inspect.signature(fn).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
  except (TypeError, ValueError):
    params = []
  return params[:n] + [f"x{i}" for i in range(len(params), n)] if len(params) >= n else [f"x{i}" for i in range(n)]


def _outputs(ret: Any, fn_name: str) -> list[Any]:
  outs = list(ret) if isinstance(ret, (tuple, list)) else [ret]
  for i, t in enumerate(outs):
    if not isinstance(t, Tensor):
      raise CompileError([error(None, f"{fn_name} returned a {type(t).__name__} as output {i}; an exported function returns Tensors")])
  return outs


def _named_weights(weights: Any) -> dict[str, Any]:
  """name -> Tensor, from a model (its state dict) or a {name: Tensor} mapping."""
  if weights is None: return {}
  from tinygrad.nn.state import get_state_dict
  return dict(weights) if isinstance(weights, dict) else get_state_dict(weights)


def _weight_names(weights: Any) -> dict[Any, str]:
  """BUFFER node -> name, from a model (its state dict) or a {name: Tensor} mapping."""
  out = {}
  for key, t in _named_weights(weights).items():
    base = next((u for u in t.uop.toposort() if u.op is T.BUFFER), None)
    if base is not None: out.setdefault(base, c_identifier(key))
  return out


@dataclass
class Traced:
  """The result of tracing: the entry's text and its parameter lists."""
  text: str
  inputs: list[Param]
  weights: list[tuple[Param, Any]]  # (param, the tinygrad BUFFER node: realized weights carry data)
  outputs: list[Param]


def trace(fn: Callable, examples: Sequence[Any], name: str | None = None, input_names: Sequence[str] | None = None,
          weights: Any = None, constants: Constants | None = None) -> Traced:
  """Call `fn` on the examples under site recording and write its graph as one `func` entry; `constants`
  says which buffers that are not inputs are embedded as BINARY data (default: none)."""
  require_tinygrad()
  constants = constants or Constants()
  tensors = [_as_tensor(x, i) for i, x in enumerate(examples)]
  entry = c_identifier(name or getattr(fn, "__name__", "model"))
  sites = Sites()
  for t in tensors: sites.record(t.uop)
  before = [t.uop for t in tensors]
  named = _named_weights(weights)
  weights_before = {k: t.uop for k, t in named.items()}
  with recording(sites):
    try:
      ret = fn(*tensors)
    except Exception as e:  # noqa: BLE001 - the user's code failed on the example inputs: their error, located
      raise _user_exception(e, entry) from None
  outs = _outputs(ret, entry)
  for i, (t, u) in enumerate(zip(tensors, before)):
    if t.uop is not u:  # `x.assign(...)` or an in-place op on an input: a side effect a pure entry cannot have
      raise _located(_Unsupported(f"the function assigns to example input {i}; uopc exports pure functions (assign "
                                  "to a copy, e.g. `x = x + 1`, and return it)", t.uop), sites, entry)
  for k, t in named.items():
    if t.uop is not weights_before[k]:  # BatchNorm's running statistics in training mode: a side effect no output reads
      constants.notes.append((sites.of(t.uop), f"in {entry}: the function assigns to weight '{k}'; the exported entry "
                                               "computes its outputs only and does not update it"))
  w, leaves = Writer(), {}
  names = _input_names(fn, len(tensors), input_names)
  inputs = []
  for i, (t, nm) in enumerate(zip(tensors, names)):
    if t.uop in leaves: continue  # the same tensor passed twice: its first slot
    try:
      inputs.append(_input(w, leaves, t, i, nm))
    except multi.Unsupported as e:
      raise CompileError([error(None, f"in {entry}: example input {i} ({nm}): {e}")]) from None
  wnames, found = _weight_names(weights), []
  used = set(names)
  def new_weight(buf: Any, shape: tuple, devices: Any = None, axis: int | None = None) -> str:
    dtype, wanted = uopc_dtype(buf.dtype), wnames.get(buf, f"w{len(found)}")
    if (embedded := constants.embed(buf, shape, dtype, w.let, w.dims, sites.of(buf), wanted, devices is not None)) is not None:
      return embedded
    p = Param(len(tensors) + len(found), _unique(wanted, used), shape, dtype, devices, axis)
    found.append((p, buf))
    return p.declare(w)
  conv = Converter(w, leaves, new_weight, sites)
  conv.users = {}
  for n in TUOp.sink(*[t.uop for t in outs]).toposort():
    for x in n.src: conv.users.setdefault(x, set()).add(n)
  values = []
  for i, t in enumerate(outs):
    try:
      values.append(conv.value(t.uop))
    except _Unsupported as e:
      raise _located(e, sites, entry) from None
  outputs = []
  for i, (t, v) in enumerate(zip(outs, values)):
    nm = _unique("out" if len(outs) == 1 else f"out{i}", used)
    w.current = t.uop
    try: p, v = _output(w, t, v, len(tensors) + len(found) + i, nm)
    except RuntimeError as e: raise _located(_Unsupported(f"tinygrad cannot place output {i} on its devices: {e}", t.uop), sites, entry) from None
    w.lines.append(f"  STORE({p.declare(w)}, {v})")
    outputs.append(p)
  text = f"func {entry} {{\n" + "\n".join(w.lines) + "\n}\n"
  if problems := multi.sharding_problems(text, entry, [w.origin.get(i) for i in range(len(w.lines))]):
    parts = [_located(_Unsupported(message, node), sites, entry) for node, message in problems]
    raise CompileError([d for p in parts for d in p.diagnostics], {k: v for p in parts for k, v in p.sources.items()})
  return Traced(text, inputs, found, outputs)


def _input(w: Writer, leaves: dict, t: Any, slot: int, name: str) -> Param:
  """The PARAM of example input `t`: sharded (an UNSHARD: one argument per device shard), replicated over
  devices (one argument the program copies to each), or on one device."""
  u, dtype = t.uop, uopc_dtype(t.dtype)
  if u.op is T.UNSHARD:
    k, n, shard = multi.input_sharding(u)
    p = Param(slot, name, multi.layout_shape(shard, n), dtype, u.device, k)
    leaves[u] = multi.whole_from_layout(w.let, w.dims, p.declare(w), shard, k, n)
  else:
    p = Param(slot, name, tuple(t.shape), dtype)
    leaves[u.src[0] if u.op is T.COPY and isinstance(u.device, tuple) else u] = p.declare(w)
  return p


def _output(w: Writer, t: Any, value: str, slot: int, name: str) -> tuple[Param, str]:
  """The PARAM of output `t` and the value stored there: a sharded output shard by shard, a replicated one
  on the first of its devices."""
  u, dtype = t.uop, uopc_dtype(t.dtype)
  if not isinstance(u.device, tuple): return Param(slot, name, tuple(t.shape), dtype), value
  whole, n = tuple(t.shape), len(u.device)
  if u.axis is None or not all(isinstance(d, int) for d in whole):
    return Param(slot, name, whole, dtype, u.device[0]), w.let(f"COPY({value}) {{{devices_arg(u.device[0])}}}")
  shard = whole[:u.axis] + (whole[u.axis] // n,) + whole[u.axis + 1:]
  return (Param(slot, name, multi.layout_shape(shard, n), dtype, u.device, u.axis),
          multi.layout_from_whole(w.let, w.dims, value, whole, u.axis, n))


def _unique(name: str, used: set[str]) -> str:
  base, k = name, 1
  while name in used: name, k = f"{base}_{k}", k + 1
  used.add(name)
  return name


def _located(e: _Unsupported, sites: Sites, entry: str) -> CompileError:
  site = sites.of(e.node) if e.node is not None else None
  if site is None or site[0] == "<unknown>":
    return CompileError([error(None, f"in {entry}: {e}")])
  return _at(site[0], site[1], f"in {entry}: {e}")


def _user_exception(e: Exception, entry: str) -> CompileError:
  """An exception from the traced function: reported at the innermost line of the user's code."""
  import traceback
  frames = [f for f in traceback.extract_tb(e.__traceback__)
            if not (os.path.abspath(f.filename).startswith(_TINYGRAD_DIR) or os.path.abspath(f.filename).startswith(_UOPC_DIR))]
  message = f"in {entry}: calling it on the example inputs raised {type(e).__name__}: {e}"
  if not frames: return CompileError([error(None, message)])
  path, line = os.path.abspath(frames[-1].filename), frames[-1].lineno or 0
  return _at(path, line, message)


def _at(path: str, line: int, message: str) -> CompileError:
  try:
    with open(path) as f: source = f.read()
  except OSError:
    return CompileError([error(None, f"{path}:{line}: {message}")])
  lines, col = source.splitlines(), 1
  if 1 <= line <= len(lines): col = len(lines[line - 1]) - len(lines[line - 1].lstrip()) + 1
  return CompileError([error(Loc(path, line, col), message)], {path: source})


def _canonical(text: str, what: str) -> str:
  """Parse the written text with uopc's own front end and print it back canonically. The exporter writes
  well-formed programs by construction, so a diagnostic here is uopc's bug, not the user's."""
  try:
    module = parse_source(text, f"<export of {what}>")
  except CompileError as e:
    raise RuntimeError(f"the tinygrad exporter wrote a program uopc rejects:\n{e.format()}\n--- program ---\n{text}") from None
  module.names = {u: n for u, n in module.names.items() if u.op in (Ops.PARAM, Ops.DEFINE_VAR)}  # the rest are numbered
  return print_module(module)


def export(fn: Callable, *example_inputs: Any, name: str | None = None, input_names: Sequence[str] | None = None,
           weights: Any = None, constants: str = "param", max_constant_bytes: int = DEFAULT_MAX_BYTES) -> str:
  """The `.uop` text of one `func` entry computing `fn` on inputs shaped like `example_inputs`.
  PARAM slots: the inputs, the other buffers the graph reads (weights: named from `weights`, a model or
  a {name: Tensor} dict, else w0, w1, ...), then the outputs (`out`, or out0, out1, ...).
  `constants="embed"` writes each of those other buffers whose data tinygrad holds and whose size is at
  most `max_constant_bytes` into the program as BINARY data instead of a PARAM (see
  uopc.frontend.tinygrad_constants); the others stay PARAMs, each with a note saying why."""
  consts = Constants(constants, max_constant_bytes)
  t = trace(fn, example_inputs, name, input_names, weights, consts)
  consts.report()
  return _canonical(t.text, t.text.split()[1])


def export_module(functions: Sequence[tuple], weights: Any = None, constants: str = "param",
                  max_constant_bytes: int = DEFAULT_MAX_BYTES) -> str:
  """Several entries in one file: each item is `(fn, example_inputs)` or `(fn, example_inputs, name)`;
  `constants` and `max_constant_bytes` as for `export` (equal data is stored once by the library)."""
  texts, names = [], set()
  consts = Constants(constants, max_constant_bytes)
  for item in functions:
    fn, examples, nm = (item + (None,))[:3]
    t = trace(fn, examples, nm, None, weights, consts)
    entry = t.text.split()[1]
    if entry in names: raise CompileError([error(None, f"two exported entries are named '{entry}'; pass distinct names")])
    names.add(entry)
    texts.append(t.text)
  consts.report()
  return _canonical("\n".join(texts), "module")


_CALL_BODIES: "weakref.WeakSet" = weakref.WeakSet()  # FUNCTION bodies made by uopc.function: written as CALL


def function(fn: Callable | None = None, *, inline: bool = False, **kwargs: Any) -> Any:
  """Seed 000's @function on tinygrad Tensors: the decorated function, called on Tensors, is traced (nothing
  runs) into a FUNCTION whose body is a TUPLE over PARAMs, its results read through GETTUPLE; several
  outputs; every call reuses the one body. Exported as a CALL, a reusable kernel compiled once whatever
  the number of call sites; `inline=True` exports a FUNCTION instead, which Callify inlines (fusable with
  its neighbours). tinygrad's own `function` builds the graph; `kwargs` go to it."""
  require_tinygrad()
  from tinygrad.function import function as tg_function
  def wrap(f: Callable) -> Callable:
    traced = tg_function(f, **kwargs)
    if inline: return traced
    @functools.wraps(f)
    def call(*args: Any, **kw: Any) -> Any:
      ret = traced(*args, **kw)
      for t in (ret if isinstance(ret, tuple) else (ret,)): _CALL_BODIES.add(t.uop.src[0].src[0])
      return ret
    return call
  return wrap(fn) if fn is not None else wrap


