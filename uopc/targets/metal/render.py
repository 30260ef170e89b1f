"""Render a linearized kernel (`LINEAR`) as a Metal Shading Language compute kernel, in the shape
seed 002 prints:

  kernel void E_2(device int* data0, const device int* data1, const device int* data2,
                  uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int lidx0 = lid.x; /* 2 */
  int val0 = *(data1+lidx0);
  int val1 = *(data2+lidx0);
  *(data0+lidx0) = (val0+val1);
  }

Conventions:
- Buffers (PARAMs) come first, by slot, `const` when the kernel never writes them; their argument
  table indices are implicit (0, 1, ...). A DEFINE_VAR follows as `constant int& name [[buffer(k)]]`
  with k its position in the signature: the launcher binds every argument at its position.
- `index` is Metal's `int` (as in seed 002), so DEFINE_VAR ranges must fit in 32 bits.
- A LOAD always gets its own variable (`valN`); an ALU value used once is written inline at its
  use, one used more often gets a variable (`aluN`). Integer results narrower than int are cast back
  to their type, because Metal, like C++, computes `char + char` in int.
- SPECIAL `gidx<n>`/`lidx<n>` read `gid`/`lid` (threadgroup position, thread position in the
  threadgroup) along x, y, z; `idx<n>` reads `tid` ([[thread_position_in_grid]]), which the
  signature then gains. The END that the linearizer gives a SPECIAL closes nothing on a GPU.
- Float MAX propagates NaN (SPEC-NOTES) through `uopc_fmax`; half and bfloat transcendentals are
  computed in float and rounded once. The module is meant to be compiled without fast math.
- float64, vectors wider than 4 lanes and ops that Instruction Selection must lower first
  (THREEFRY, FLOORDIV, FLOORMOD, WMMA, CUSTOM ...) are refused with a located CompileError.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable

import numpy as np

from uopc.diagnostics import CompileError, Diagnostic, Loc, error
from uopc.dtype import AddrSpace, DType, PtrDType, dtypes
from uopc.targets import param_name
from uopc.ops import FUSED, GroupOp, Ops
from uopc.targets.c.render import KernelParam, RenderedKernel
from uopc.uop import UOp

LocOf = Callable[[UOp], "Loc | None"]

METAL_SCALARS: dict[DType, str] = {
  dtypes.bool: "bool", dtypes.int8: "char", dtypes.int16: "short", dtypes.int32: "int", dtypes.int64: "long",
  dtypes.uint8: "uchar", dtypes.uint16: "ushort", dtypes.uint32: "uint", dtypes.uint64: "ulong",
  dtypes.float16: "half", dtypes.bfloat16: "bfloat", dtypes.float32: "float", dtypes.index: "int",
}
ADDRSPACE = {AddrSpace.GLOBAL: "device", AddrSpace.LOCAL: "threadgroup", AddrSpace.REG: "thread"}
INDEX_RANGE = (-2**31, 2**31 - 1)

PRELUDE = "#include <metal_stdlib>\nusing namespace metal;"
# Helpers a kernel may call; render_module emits the ones its kernels use.
HELPERS = {
  "uopc_fmax": "template <typename T> inline T uopc_fmax(T a, T b) { return select(max(a, b), a + b, isunordered(a, b)); }",
}

_INFIX = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.IDIV: "/", Ops.MOD: "%", Ops.XOR: "^",
          Ops.OR: "|", Ops.AND: "&", Ops.SHR: ">>", Ops.SHL: "<<", Ops.CMPLT: "<", Ops.CMPNE: "!=", Ops.CMPGT: ">",
          Ops.CMPGE: ">=", Ops.CMPLE: "<=", Ops.CMPEQ: "=="}
# results that C++ promotion would widen past a narrow integer type
_WIDENING = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.XOR, Ops.OR, Ops.AND, Ops.SHR, Ops.SHL,
                       Ops.NEG, Ops.MULACC})
_SKIPPED = frozenset({Ops.SINK, Ops.GROUP, Ops.NOOP})
_SPECIAL_BASE = {"gidx": "gid", "lidx": "lid", "idx": "tid"}
_METAL_KEYWORDS = frozenset("""kernel vertex fragment device constant threadgroup thread thread_local bool char
  short int long uchar ushort uint ulong half bfloat float double void const volatile if else for while do
  return break continue switch case default struct union enum class template typename namespace using auto
  static inline true false select max min gid lid tid metal precise as_type sizeof this new delete""".split())


def metal_type(dt: DType) -> str | None:
  """The Metal spelling of a value dtype (`float4`, `half`, `int`), or None when Metal lacks it."""
  base = METAL_SCALARS.get(dt.scalar)
  if base is None or dt.count > 4: return None
  return base if dt.count == 1 else f"{base}{dt.count}"


def _missing_dtype(dt: DType) -> DType | None:
  """The part of dt (itself, or a pointer's element) that Metal cannot hold, if any."""
  if dt is dtypes.void: return None
  inner = dt.base if isinstance(dt, PtrDType) else dt
  return inner if metal_type(inner) is None else None


def float_literal(value: float, dt: DType) -> str:
  """A float constant that reads back to exactly the dtype's value (float32 shortest digits)."""
  if math.isnan(value): text = "NAN"
  elif math.isinf(value): text = "INFINITY" if value > 0 else "(-INFINITY)"
  else:
    text = str(np.float32(value))
    text = (text if ("." in text or "e" in text) else text + ".0") + "f"
    if text.startswith("-"): text = f"({text})"
  return text if dt.scalar is dtypes.float32 else f"{metal_type(dt.scalar)}({text})"


def const_literal(value, dt: DType) -> str:
  scalar = dt.scalar
  if scalar is dtypes.bool: text = "true" if value else "false"
  elif scalar.is_float(): text = float_literal(float(value), scalar)
  else: text = _int_literal(int(value), scalar)
  return text if dt.count == 1 else f"{metal_type(dt)}({text})"


def _int_literal(v: int, dt: DType) -> str:
  suffix = {dtypes.int64: "l", dtypes.uint32: "u", dtypes.uint64: "ul"}.get(dt, "")
  if v == dt.min and dt.kind in ("i", "index") and dt.itemsize >= 4: text = f"({v + 1}{suffix}-1{suffix})"
  elif v < 0: text = f"({v}{suffix})"
  else: text = f"{v}{suffix}"
  return f"({metal_type(dt)})({text})" if dt.itemsize < 4 else text


def _strip_parens(s: str) -> str:
  """(a+b) -> a+b when the outer parentheses enclose the whole string."""
  if not (s.startswith("(") and s.endswith(")")): return s
  depth = 0
  for i, ch in enumerate(s):
    depth += {"(": 1, ")": -1}.get(ch, 0)
    if depth == 0 and i < len(s) - 1: return s
  return s[1:-1]


class _Kernel:
  """One pass over the LINEAR: each UOp gets an expression (`r`) and may write lines."""

  def __init__(self, linear: UOp, name: str, loc_of: LocOf):
    self.uops, self.name, self.loc_of = list(linear.src), name, loc_of
    self.uses: dict[UOp, int] = {}
    for u in self.uops:
      for s in u.src: self.uses[s] = self.uses.get(s, 0) + 1
    self.r: dict[UOp, str] = {}
    self.lines: list[str] = []
    self.depth = 1
    self.counters: dict[str, int] = {}
    self.taken: set[str] = set()
    self.written = {_root(u.src[0]) for u in self.uops if u.op is Ops.STORE}

  # ---- names and diagnostics -------------------------------------------------------------------------
  def fresh(self, prefix: str) -> str:
    while True:
      n = self.counters.get(prefix, 0)
      self.counters[prefix] = n + 1
      if (name := f"{prefix}{n}") not in self.taken: self.taken.add(name); return name  # noqa: E702

  def user_name(self, name: str, fallback: str) -> str:
    """A program's own name (data0, n) if it is a fresh identifier Metal does not reserve."""
    ok = re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name or "") and name not in _METAL_KEYWORDS and name not in self.taken \
      and not name.startswith("uopc_")
    if not ok: return self.fresh(fallback)
    self.taken.add(name)
    return name

  def diag(self, u: UOp, message: str) -> Diagnostic: return error(self.loc_of(u), f"metal: {message}")

  def emit(self, line: str) -> None: self.lines.append("  " * (self.depth - 1) + line)

  # ---- the walk --------------------------------------------------------------------------------------
  def check(self) -> None:
    diags = []
    for u in self.uops:
      if u.op not in (Ops.INDEX, Ops.AFTER) and (bad := _missing_dtype(u.dtype)) is not None:
        spelled = bad.name if bad.count == 1 else f"{bad.name}x{bad.count}"
        what = f"{bad.name} type" if bad.count == 1 else "vectors wider than 4 lanes"
        diags.append(self.diag(u, f"{u.op.name} of {spelled} is not supported: Metal has no {what}"))
      elif u.op not in _RENDERERS:
        lower = " (instruction selection must lower it first)" if u.op in GroupOp.Decomposed else ""
        diags.append(self.diag(u, f"{u.op.name} is not supported by the Metal renderer{lower}"))
      elif u.op is Ops.CONST and u.dtype is dtypes.index and not INDEX_RANGE[0] <= u.arg <= INDEX_RANGE[1]:
        diags.append(self.diag(u, f"index constant {u.arg} does not fit Metal's 32-bit index"))
      elif u.op is Ops.DEFINE_VAR and not (INDEX_RANGE[0] <= u.vmin and u.vmax <= INDEX_RANGE[1]):
        diags.append(self.diag(u, f"DEFINE_VAR {u.arg[0]} range [{u.vmin}, {u.vmax}] does not fit Metal's 32-bit index"))
      elif u.op is Ops.SPECIAL and not re.fullmatch(r"(gidx|lidx|idx)[012]", str(u.arg)):
        diags.append(self.diag(u, f"SPECIAL {u.arg!r}: Metal has gidx0-2, lidx0-2 and idx0-2"))
    if diags: raise CompileError(diags)

  def run(self) -> tuple[str, list]:
    self.check()
    for u in self.uops:
      if u.op not in _SKIPPED: _RENDERERS[u.op](self, u)
    return self.signature(), self.lines

  def value(self, u: UOp, expr: str, prefix: str = "alu") -> None:
    """Give u its expression, inline when it has at most one use, else through a variable."""
    if self.uses.get(u, 0) <= 1: self.r[u] = expr
    else:
      name = self.fresh(prefix)
      self.emit(f"{metal_type(u.dtype)} {name} = {_strip_parens(expr)};")
      self.r[u] = name

  # ---- signature -------------------------------------------------------------------------------------
  def signature(self) -> str:
    args = [f"{'' if p in self.written else 'const '}{ADDRSPACE[AddrSpace.GLOBAL]} {metal_type(p.dtype.base)}* {self.r[p]}"
            for p in self.buffers()]
    args += [f"constant int& {self.r[v]} [[buffer({len(args) + i})]]" for i, v in enumerate(self.vars())]
    args += ["uint3 gid [[threadgroup_position_in_grid]]", "uint3 lid [[thread_position_in_threadgroup]]"]
    if any(u.op is Ops.SPECIAL and str(u.arg).startswith("idx") for u in self.uops):
      args.append("uint3 tid [[thread_position_in_grid]]")
    return f"kernel void {self.name}({', '.join(args)})"

  def buffers(self) -> list[UOp]:
    return sorted((u for u in self.uops if u.op is Ops.PARAM), key=lambda u: u.arg[0])

  def vars(self) -> list[UOp]:
    return sorted((u for u in self.uops if u.op is Ops.DEFINE_VAR), key=lambda u: u.arg[0])

  def params(self) -> tuple:
    bufs = tuple(KernelParam(param_name(p), p.arg[0], "buffer", p.dtype, p in self.written, None, None) for p in self.buffers())
    return bufs + tuple(KernelParam(v.arg[0], None, "var", dtypes.index, False, v.vmin, v.vmax) for v in self.vars())


def _root(u: UOp) -> UOp:
  """The buffer an INDEX/AFTER chain points into."""
  while u.op in (Ops.INDEX, Ops.AFTER): u = u.src[0]
  return u


# ---- one function per op -----------------------------------------------------------------------------------
def _param(k: _Kernel, u: UOp) -> None:
  if not isinstance(u.dtype, PtrDType) or u.dtype.addrspace is not AddrSpace.GLOBAL:
    raise CompileError([k.diag(u, "a kernel PARAM must be a pointer to global memory")])
  k.r[u] = k.user_name(u.arg[1], "data")


def _buffer(k: _Kernel, u: UOp) -> None:
  dt = u.dtype
  name = k.user_name(u.arg[1] if isinstance(u.arg, tuple) and len(u.arg) > 1 else "", "temp")
  space = "threadgroup " if dt.addrspace is AddrSpace.LOCAL else ""
  k.emit(f"{space}{metal_type(dt.base)} {name}[{dt.size}];")
  k.r[u] = name


def _define_var(k: _Kernel, u: UOp) -> None: k.r[u] = k.user_name(u.arg[0], "var")


def _const(k: _Kernel, u: UOp) -> None: k.r[u] = const_literal(u.arg, u.dtype)


def _special(k: _Kernel, u: UOp) -> None:
  kind, axis = re.fullmatch(r"([a-z]+)(\d)", u.arg).groups()
  name = k.user_name(u.arg, kind)
  k.emit(f"int {name} = {_SPECIAL_BASE[kind]}.{'xyz'[int(axis)]}; /* {_strip_parens(k.r[u.src[0]])} */")
  k.r[u] = name


def _range(k: _Kernel, u: UOp) -> None:
  name = k.fresh("ridx")
  k.emit(f"for (int {name} = 0; {name} < {_strip_parens(k.r[u.src[0]])}; {name}++) {{")
  k.depth += 1
  k.r[u] = name


def _close(k: _Kernel, u: UOp) -> None:
  if u.op is Ops.END and u.src[1].op is Ops.SPECIAL: return  # a GPU thread index opens no block
  k.depth -= 1
  k.emit("}")


def _if(k: _Kernel, u: UOp) -> None:
  k.emit(f"if ({_strip_parens(k.r[u.src[0]])}) {{")
  k.depth += 1


def _barrier(k: _Kernel, u: UOp) -> None: k.emit("threadgroup_barrier(mem_flags::mem_threadgroup);")


def _after(k: _Kernel, u: UOp) -> None: k.r[u] = k.r[u.src[0]]


def _index(k: _Kernel, u: UOp) -> None: k.r[u] = f"{k.r[u.src[0]]}+{k.r[u.src[1]]}"


def _deref(k: _Kernel, index: UOp, dt: DType) -> str:
  """`*(buf+i)`, through a cast to a vector pointer when the access is wider than the element."""
  ptr = index.dtype if isinstance(index.dtype, PtrDType) else index.src[0].dtype
  if dt.count == ptr.base.count: return f"*({k.r[index]})"
  return f"*(({ADDRSPACE[ptr.addrspace]} {metal_type(dt)}*)({k.r[index]}))"


def _load(k: _Kernel, u: UOp) -> None:
  val = _deref(k, u.src[0], u.dtype)
  if len(u.src) == 3: val = f"({k.r[u.src[2]]}?{val}:{k.r[u.src[1]]})"
  name = k.fresh("val")
  k.emit(f"{metal_type(u.dtype)} {name} = {val};")
  k.r[u] = name


def _store(k: _Kernel, u: UOp) -> None:
  line = f"{_deref(k, u.src[0], u.src[1].dtype)} = {k.r[u.src[1]]};"
  k.emit(f"if ({_strip_parens(k.r[u.src[2]])}) {{ {line} }}" if len(u.src) == 3 else line)


def _operands(k: _Kernel, u: UOp) -> list[str]:
  """Operand expressions. A left operand that is the same ADD/MUL/XOR drops its parentheses, as seed
  002 does: `((a+b)+c)` and `(a+b+c)` parse the same; the right operand keeps them (float order)."""
  xs = [k.r[s] for s in u.src]
  if u.op in (Ops.ADD, Ops.MUL, Ops.XOR) and u.src[0].op is u.op: xs[0] = _strip_parens(xs[0])
  return xs


def _in_float(dt: DType, template: str, *xs: str) -> str:
  """template(xs) for float32; half and bfloat operands go to float and the result is rounded once."""
  if dt.scalar is dtypes.float32: return template.format(*xs)
  f = metal_type(dtypes.float32.vec(dt.count))
  return f"({metal_type(dt)})({template.format(*(f'({f})({x})' for x in xs))})"


def _alu_expr(k: _Kernel, u: UOp) -> str:
  op, dt, xs = u.op, u.dtype, _operands(k, u)
  if op in (Ops.AND, Ops.OR) and dt.scalar is dtypes.bool and dt.count == 1:  # the same value; `&` on bools is an error under -Werror
    return f"({xs[0]}{'&&' if op is Ops.AND else '||'}{xs[1]})"
  if op in _INFIX: return f"({xs[0]}{_INFIX[op]}{xs[1]})"
  if op is Ops.MAX: return f"{'uopc_fmax' if dt.scalar.is_float() else 'max'}({xs[0]}, {xs[1]})"
  if op is Ops.WHERE: return f"({xs[0]}?{xs[1]}:{xs[2]})" if dt.count == 1 else f"select({xs[2]}, {xs[1]}, {xs[0]})"
  if op is Ops.NEG: return f"(!{xs[0]})" if dt.scalar is dtypes.bool else f"(-{xs[0]})"
  if op is Ops.NOT: return f"(!{xs[0]})" if dt.scalar is dtypes.bool else f"({xs[0]}!=1)"  # NOT is CMPNE(A, 1)
  if op is Ops.TRUNC: return f"trunc({xs[0]})"
  if op is Ops.MULACC and u.arg == FUSED: return f"fma({xs[0]}, {xs[1]}, {xs[2]})"  # rounded once
  if op is Ops.MULACC: return f"(({xs[0]}*{xs[1]})+{xs[2]})"  # two roundings, as its decomposition
  return _in_float(dt, _FLOAT_TEMPLATES[op], *xs)


_FLOAT_TEMPLATES = {Ops.DIV: "({0}/{1})", Ops.RECIP: "(1.0f/{0})", Ops.SQRT: "precise::sqrt({0})",
                    Ops.EXP2: "precise::exp2({0})", Ops.LOG2: "precise::log2({0})", Ops.SIN: "precise::sin({0})",
                    Ops.POW: "precise::exp2(precise::log2({0})*{1})"}  # POW by its definition in seed 000


def _alu(k: _Kernel, u: UOp) -> None:
  expr = _alu_expr(k, u)
  if u.op in _WIDENING and u.dtype.count == 1 and u.dtype.kind in ("i", "u") and u.dtype.itemsize < 4:
    expr = f"({metal_type(u.dtype)})({expr})"
  k.value(u, expr)


def _cast(k: _Kernel, u: UOp) -> None:
  x, t = k.r[u.src[0]], metal_type(u.dtype)
  k.value(u, f"({t})({x})" if u.dtype.count == 1 else f"{t}({_strip_parens(x)})", "cast")


def _bitcast(k: _Kernel, u: UOp) -> None: k.value(u, f"as_type<{metal_type(u.dtype)}>({_strip_parens(k.r[u.src[0]])})", "cast")


def _stack(k: _Kernel, u: UOp) -> None:
  k.value(u, f"{metal_type(u.dtype)}({', '.join(_strip_parens(k.r[s]) for s in u.src)})", "vec")


def _gep(k: _Kernel, u: UOp) -> None:
  lanes = u.arg if isinstance(u.arg, tuple) else (u.arg,)
  v = k.r[u.src[0]]
  parts = [f"{v}[{i}]" for i in lanes]
  k.value(u, parts[0] if len(parts) == 1 else f"{metal_type(u.dtype)}({', '.join(parts)})", "gep")


_RENDERERS: dict[Ops, Callable[[_Kernel, UOp], None]] = {
  Ops.PARAM: _param, Ops.BUFFER: _buffer, Ops.DEFINE_VAR: _define_var, Ops.CONST: _const, Ops.SPECIAL: _special,
  Ops.RANGE: _range, Ops.END: _close, Ops.IF: _if, Ops.ENDIF: _close, Ops.BARRIER: _barrier, Ops.AFTER: _after,
  Ops.INDEX: _index, Ops.LOAD: _load, Ops.STORE: _store, Ops.CAST: _cast, Ops.BITCAST: _bitcast, Ops.STACK: _stack,
  Ops.GEP: _gep, **{op: _alu for op in GroupOp.ALU - {Ops.THREEFRY, Ops.FLOORDIV, Ops.FLOORMOD}},
  **{op: lambda k, u: None for op in _SKIPPED},
}


@dataclass(frozen=True)
class MetalKernel(RenderedKernel):
  """A RenderedKernel plus its launch shape: per axis x, y, z the bound UOp (a CONST or an expression
  of DEFINE_VARs) of gidx/lidx (dispatch "groups": threadgroups x threads per threadgroup) or of
  idx (dispatch "threads": the whole grid of threads; the launcher picks the threadgroup size)."""
  dispatch: str = "groups"
  grid: tuple = ()
  threads: tuple = ()


def _launch(linear: UOp, loc_of: LocOf) -> tuple[str, tuple, tuple]:
  bounds: dict[str, UOp] = {u.arg: u.src[0] for u in linear.src if u.op is Ops.SPECIAL}
  one = UOp.const(dtypes.index, 1)
  axes = lambda kind: tuple(bounds.get(f"{kind}{i}", one) for i in range(3))  # noqa: E731
  flat = [u for u in linear.src if u.op is Ops.SPECIAL and u.arg.startswith("idx")]
  if not flat: return "groups", axes("gidx"), axes("lidx")
  if len(flat) != len(bounds):
    raise CompileError([error(loc_of(flat[0]), "metal: idx<n> cannot be mixed with gidx<n>/lidx<n> in one kernel")])
  return "threads", axes("idx"), ()


def render_kernel(linear: UOp, name: str, loc_of: LocOf | None = None) -> MetalKernel:
  """A LINEAR as one Metal kernel named `name`; `loc_of` locates refused ops in the source."""
  loc_of = loc_of or (lambda u: None)
  k = _Kernel(linear, name, loc_of)
  signature, lines = k.run()
  return MetalKernel(name, "\n".join([f"{signature} {{", *lines, "}"]) + "\n", k.params(), *_launch(linear, loc_of))


def render_module(kernels) -> str:
  """The `.metal` file: the prelude, the helpers the kernels call, then every kernel."""
  body = "".join(k.source for k in kernels)
  helpers = [text for helper, text in HELPERS.items() if re.search(rf"\b{helper}\(", body)]
  return "\n".join([PRELUDE, *helpers]) + "\n" + body
