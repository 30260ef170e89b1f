"""Render a linearized kernel (a LINEAR UOp) to a C99 function `void NAME(params)`.

Every value becomes one statement `T name = expr;` in instruction order, except constants, pointer
arithmetic (INDEX) and AFTER, which are inlined. Values nothing live reads are not emitted, so the
output compiles warning-free. Arithmetic follows SPEC-NOTES exactly:

- integers: ADD/SUB/MUL/NEG/SHL in an unsigned type (wrap, no signed-overflow UB), IDIV/MOD
  truncating via prelude helpers (INT_MIN / -1 wraps), SHR arithmetic on signed types;
- floats: float16/bfloat16 are carried as their bits, computed in float and rounded once to
  nearest even; MAX propagates NaN; CMPNE is true for NaN; CAST to bool is `x != 0`;
- BITCAST through a union (no strict-aliasing UB); vectors are GCC/Clang vector_size types and
  elementwise ops on them are computed lane by lane with the scalar rules;
- SPECIAL (a GPU thread index) is a loop over its bound: a CPU has no grid.

Streaming stores. A vector STORE to a global buffer that the kernel never reads, whose offset is a
proven multiple of 16 bytes and that writes STREAM_MIN_BYTES or more over the kernel's loops (a
large output written once), goes past the caches with non-temporal stores (`uopc_stream_store`,
SSE2's movntdq; a plain store where the compiler has no SSE2): the CPU then need not read each line
before writing it, a third less memory traffic for `out = x + y`. The buffer's own alignment is
known only at run time, so the kernel checks it once and stores the ordinary way when it is not
16-byte aligned; a fence at the kernel's end orders the stores before the caller (or the thread
join) sees the buffer.

Long kernels. A kernel of more than LONG_KERNEL_LINES statements is preceded by GCC's
`optimize("ira-algorithm=priority")` attribute (under `#if` for GCC only): GCC's default register
allocator is quadratic in a long chain of dependent values. Other kernels' C is unchanged.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from uopc.dtype import AddrSpace, DType, PtrDType, dtypes
from uopc.targets import param_name
from uopc.ops import FUSED, GroupOp, Ops
from uopc.targets.c.prelude import C_PRELUDE, masked_load, vector_max, vector_type_name
from uopc.targets.c.scalar import _COMPARE_OPS, _HALF_NAMES, _fail, _is_half, _lanes, alu_expr, cast_expr, ctype, render_const
from uopc.targets.c.shuffle import shuffle, shuffle_sources
from uopc.targets.c.threads import TASK_PARAM
from uopc.uop import UOp

__all__ = ["C_PRELUDE", "KernelParam", "RenderedKernel", "render_kernel"]


@dataclass(frozen=True)
class KernelParam:
  """One argument of a rendered kernel. `slot`: the PARAM slot of a buffer; for a var, its position in
  the C parameter list. `dtype`: the PtrDType of a buffer, the scalar dtype of a var. vmin/vmax: a var's
  DEFINE_VAR range (None for buffers)."""
  name: str
  slot: int
  kind: str  # "buffer" | "var"
  dtype: DType
  written: bool
  vmin: Any = None
  vmax: Any = None


@dataclass(frozen=True)
class RenderedKernel:
  name: str
  source: str
  params: tuple[KernelParam, ...]


def render_kernel(linear: UOp, name: str) -> RenderedKernel:
  """The C definition of kernel `name` from its LINEAR (see uopc.stages.linearize)."""
  if linear.op is not Ops.LINEAR: raise _fail(f"expected a LINEAR, got {linear.op.name}")
  _check_identifier(name, "kernel name")
  return _Renderer(linear.src, name).render()


# ---- errors and names ----------------------------------------------------------------------------------


_C_KEYWORDS = frozenset(
  "auto break case char const continue default do double else enum extern float for goto if inline int long register "
  "restrict return short signed sizeof static struct switch typedef union unsigned void volatile while _Bool _Complex "
  "_Imaginary bool true false".split())


def _check_identifier(name: Any, what: str) -> None:
  if not isinstance(name, str) or not name.isidentifier() or not name.isascii() or name in _C_KEYWORDS \
     or name.startswith("uopc_"):
    raise _fail(f"{what} {name!r} is not usable as a C identifier")


# ---- the renderer --------------------------------------------------------------------------------------
_EFFECTS = frozenset({Ops.STORE, Ops.RANGE, Ops.SPECIAL, Ops.END, Ops.IF, Ops.ENDIF, Ops.BARRIER})
_NO_CODE = frozenset({Ops.GROUP, Ops.NOOP, Ops.SINK})  # ordering only: nothing to do on a CPU
_PREFIX = {Ops.CAST: "cast", Ops.STACK: "vec", Ops.GEP: "gep"}  # of _vector's values; the rest are alu


def _root_buffer(u: UOp) -> UOp:
  while u.op is Ops.AFTER: u = u.src[0]
  return u


_VECTOR_FLOAT_OPS = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.DIV: "/"}
STREAM_MIN_BYTES = 1 << 23  # a STORE writing this much goes past the caches (8 MiB: well beyond L2, a large share of L3)
STREAM_ALIGN = 16           # bytes: the alignment of a non-temporal store (movntdq)
LONG_KERNEL_LINES = 4096    # statements beyond which GCC allocates the kernel's registers in linear time
STACK_ARRAY_BYTES = 1 << 16  # a LOCAL array larger than this is thread-local storage, not on the stack (_buffer)
# GCC's default (Chaitin-Briggs) register allocator takes time quadratic in a chain of dependent values
# in one function: 9.4 s of gcc -O3 for a 20,000-op chain, 1.4 s with the priority allocator
_LONG_KERNEL_ATTRIBUTE = ["#if defined(__GNUC__) && !defined(__clang__)",
                          '__attribute__((optimize("ira-algorithm=priority"))) /* a long kernel: see uopc\'s C renderer */',
                          "#endif"]


def _known_factor(e: UOp) -> int:
  """A number that integer expression e is a proven multiple of (0 for the constant 0)."""
  if e.op is Ops.CONST and isinstance(e.arg, int): return abs(e.arg)
  if e.op in (Ops.ADD, Ops.SUB): return math.gcd(_known_factor(e.src[0]), _known_factor(e.src[1]))
  if e.op is Ops.MUL: return _known_factor(e.src[0]) * _known_factor(e.src[1])
  if e.op is Ops.SHL and e.src[1].op is Ops.CONST and isinstance(e.src[1].arg, int) and 0 <= e.src[1].arg < 32:
    return _known_factor(e.src[0]) << e.src[1].arg
  return 1


def _c_name(p: KernelParam) -> str:
  """A buffer is `data<slot>` inside the kernel, whatever the program calls it: the user's names could
  clash with the generated ones (val0, alu3) and only the launcher's signature shows them."""
  return f"data{p.slot}" if p.kind == "buffer" else p.name


class _Renderer:
  def __init__(self, uops: tuple[UOp, ...], name: str):
    self.uops, self.name = uops, name
    self.live = self._live()
    self.names: dict[UOp, str] = {}
    self.taken: set[str] = set()
    self.counters: dict[str, int] = {}
    self.lines: list[str] = []
    self.open_blocks: list[UOp] = []
    self.params = self._params()
    self.stored = self._bytes_stored()
    self.users: dict[UOp, list[UOp]] = {}
    for u in uops:
      if u in self.live:
        for x in u.src: self.users.setdefault(x, []).append(u)
    self.masks: set[UOp] = set()  # vector comparisons kept as -1/0 integer masks (every user a WHERE of their lane width)
    self.whole: set[UOp] = set()  # vector values computed by whole-vector expressions
    self.streamed: dict[UOp, str] = {}  # buffer -> the name of its run-time alignment flag

  # ---- analysis ----
  def _live(self) -> set:
    """Effects, and every value an emitted statement reads (END/AFTER order but do not read their body)."""
    live: set = set()
    for u in reversed(self.uops):
      if u.op not in _EFFECTS and u not in live: continue
      live.add(u)
      if u.op in (Ops.END, Ops.AFTER): live.add(u.src[1] if u.op is Ops.END else u.src[0])
      else: live.update(u.src)
    return live

  def _bytes_stored(self) -> dict[UOp, int]:
    """The bytes the kernel's vector STOREs write to each global buffer it never reads, over all its loops
    and THREAD tasks (0 where a loop's bound is not a constant)."""
    tasks = next((u.arg[2] + 1 for u in self.uops if u.op is Ops.DEFINE_VAR and u.arg[0] == TASK_PARAM), 1)
    read = {_root_buffer(u.src[0].src[0]) for u in self.uops if u.op is Ops.LOAD and u.src and u.src[0].op is Ops.INDEX}
    out: dict[UOp, int] = {}
    trips = [tasks]
    for u in self.uops:
      if u.op in (Ops.RANGE, Ops.SPECIAL): trips.append(trips[-1] * (u.src[0].arg if u.src[0].op is Ops.CONST else 0))
      elif u.op is Ops.END: trips.pop()
      elif u.op is Ops.STORE and u.src[0].op is Ops.INDEX and (buf := _root_buffer(u.src[0].src[0])).op is Ops.PARAM and buf not in read:
        out[buf] = out.get(buf, 0) + trips[-1] * u.src[1].dtype.itemsize
    return out

  def _params(self) -> tuple[KernelParam, ...]:
    written = {_root_buffer(u.src[0].src[0]) for u in self.uops if u.op is Ops.STORE and u.src[0].op is Ops.INDEX}
    buffers = sorted((u for u in self.uops if u.op is Ops.PARAM), key=lambda u: u.arg[0] if isinstance(u.arg, tuple) else -1)
    vars_ = sorted((u for u in self.uops if u.op is Ops.DEFINE_VAR), key=lambda u: str(u.arg[0]) if isinstance(u.arg, tuple) else "")
    params = []
    for u in buffers:
      if not isinstance(u.dtype, PtrDType) or not isinstance(u.arg, tuple) or not isinstance(u.arg[0], int):
        raise _fail(f"PARAM {u.arg!r} of dtype {u.dtype} is not a kernel buffer argument (slot, name) of pointer dtype")
      if u.dtype.addrspace is not AddrSpace.GLOBAL: raise _fail(f"PARAM data{u.arg[0]} must be in the global addrspace")
      if any(p.slot == u.arg[0] for p in params): raise _fail(f"two PARAMs use slot {u.arg[0]}")
      self._claim(u, f"data{u.arg[0]}")
      params.append(KernelParam(param_name(u), u.arg[0], "buffer", u.dtype, u in written))
    for u in vars_:
      if not (isinstance(u.arg, tuple) and len(u.arg) == 3): raise _fail(f"DEFINE_VAR arg {u.arg!r} is not (name, min, max)")
      _check_identifier(u.arg[0], "DEFINE_VAR name")
      self._claim(u, u.arg[0])
      params.append(KernelParam(u.arg[0], len(params), "var", u.dtype, False, u.arg[1], u.arg[2]))
    return tuple(params)

  # ---- names and output ----
  def _claim(self, u: UOp, name: str) -> None:
    if name in self.taken: raise _fail(f"the name {name!r} is used twice in kernel {self.name}")
    self.taken.add(name)
    self.names[u] = name

  def _fresh(self, prefix: str) -> str:
    while True:
      n = self.counters.get(prefix, 0)
      self.counters[prefix] = n + 1
      if (name := f"{prefix}{n}") not in self.taken:
        self.taken.add(name)
        return name

  def _line(self, text: str) -> None: self.lines.append("  " * (len(self.open_blocks) + 1) + text)

  def _define(self, u: UOp, expr: str, prefix: str) -> None: self._define_as(u, ctype(u.dtype), expr, prefix)

  def _define_as(self, u: UOp, ctype_: str, expr: str, prefix: str) -> None:
    name = self._fresh(prefix)
    self._line(f"{ctype_} {name} = {expr};")
    self.names[u] = name

  def render(self) -> RenderedKernel:
    for u in self.uops:
      if u in self.live: self._render(u)
    if self.open_blocks: raise _fail(f"{self.open_blocks[-1].op.name} is never closed")
    unused = [f"  (void){_c_name(p)};" for p, u in zip(self.params, self._param_uops()) if u not in self.live]
    aligned = [f"  const int {flag} = ((uintptr_t)(const void*){self.names[buf]} % {STREAM_ALIGN}u) == 0;" for buf, flag in self.streamed.items()]
    fence = ["  UOPC_STREAM_FENCE();"] if self.streamed else []
    args = ", ".join(self._param_decl(p) for p in self.params) or "void"
    head = _LONG_KERNEL_ATTRIBUTE if len(self.lines) > LONG_KERNEL_LINES else []
    source = "\n".join([*head, f"void {self.name}({args}) {{", *unused, *aligned, *self.lines, *fence, "}", ""])
    return RenderedKernel(self.name, source, self.params)

  def _param_uops(self) -> list[UOp]:
    by_name = {self.names[u]: u for u in self.uops if u.op in (Ops.PARAM, Ops.DEFINE_VAR)}
    return [by_name[_c_name(p)] for p in self.params]

  @staticmethod
  def _param_decl(p: KernelParam) -> str:
    if p.kind == "var": return f"{ctype(p.dtype)} {p.name}"
    return f"{'' if p.written else 'const '}{ctype(p.dtype)} restrict {_c_name(p)}"

  # ---- one instruction ----
  def _render(self, u: UOp) -> None:
    op = u.op
    if op in (Ops.PARAM, Ops.DEFINE_VAR): return  # named with the signature
    if op in _NO_CODE: return
    if op is Ops.CONST: self.names[u] = self._const(u)
    elif op is Ops.AFTER: self.names[u] = self.names[u.src[0]]
    elif op is Ops.INDEX: self._index(u)
    elif op is Ops.BUFFER: self._buffer(u)
    elif op in (Ops.RANGE, Ops.SPECIAL): self._loop(u)
    elif op is Ops.IF:
      self._line(f"if ({self.names[u.src[0]]}) {{")
      self.open_blocks.append(u)
    elif op in (Ops.END, Ops.ENDIF):
      if not self.open_blocks: raise _fail(f"{op.name} closes no open block")
      self.open_blocks.pop()
      self._line("}")
    elif op is Ops.BARRIER: self._barrier()
    elif op is Ops.LOAD: self._load(u)
    elif op is Ops.STORE: self._store(u)
    elif op is Ops.STACK: self._stack(u)
    elif op is Ops.GEP: self._gep(u)
    elif op is Ops.BITCAST: self._bitcast(u)
    elif op is Ops.CAST or op in GroupOp.ALU: self._elementwise(u)
    else: raise _fail(f"cannot render op {op.name}")

  def _const(self, u: UOp) -> str:
    if u.dtype.count == 1: return render_const(u.arg, u.dtype)
    return f"(({ctype(u.dtype)}){{{', '.join([render_const(u.arg, u.dtype.scalar)] * u.dtype.count)}}})"

  def _index(self, u: UOp) -> None:
    if len(u.src) != 2 or not isinstance(u.src[0].dtype, PtrDType): raise _fail("INDEX must be INDEX(pointer, offset)")
    if not u.src[1].dtype.is_int() or u.src[1].dtype.count != 1: raise _fail(f"INDEX offset of dtype {u.src[1].dtype}")
    self.names[u] = f"({self.names[u.src[0]]}+{self.names[u.src[1]]})"

  def _buffer(self, u: UOp) -> None:
    dt = u.dtype
    if not isinstance(dt, PtrDType) or dt.addrspace is AddrSpace.GLOBAL or dt.size < 0:
      raise _fail(f"BUFFER of dtype {dt}: only sized LOCAL/REG buffers are local arrays")
    name = self._fresh("temp" if dt.addrspace is AddrSpace.LOCAL else "acc")
    # a large LOCAL array (a block of b that STAGE copies, up to 1 MiB) is one per thread, not on the stack of
    # whichever thread calls the library: that thread runs tasks too, and its stack may be small
    storage = "static _Thread_local " if dt.addrspace is AddrSpace.LOCAL and dt.size * dt.base.itemsize > STACK_ARRAY_BYTES else ""
    self._line(f"{storage}{ctype(dt.base)} {name}[{dt.size}];")
    self.names[u] = name

  def _loop(self, u: UOp) -> None:
    if len(u.src) != 1: raise _fail(f"{u.op.name} must have its bound as only source")
    if u.op is Ops.SPECIAL:
      _check_identifier(u.arg, "SPECIAL name")
      self._claim(u, u.arg)
      name = u.arg
    else:
      name = self._fresh("ridx")
      self.names[u] = name
    self._line(f"for ({ctype(u.dtype)} {name} = 0; {name} < {self.names[u.src[0]]}; {name}++) {{")
    self.open_blocks.append(u)

  def _barrier(self) -> None:
    """Ordering only on a CPU, except inside a loop over the threads of a workgroup: those run one after the
    other, so no thread could wait for the others there."""
    if threads := [b.arg for b in self.open_blocks if b.op is Ops.SPECIAL and str(b.arg).startswith("lidx")]:
      raise _fail(f"BARRIER inside the loop over thread index {threads[0]} cannot synchronize threads on a CPU")

  def _memory_access(self, u: UOp, value_dt: DType) -> tuple[str, str | None]:
    """(pointer expression, gate or None) of a LOAD/STORE, after checking the value fits the pointer."""
    idx = u.src[0]
    if idx.op is not Ops.INDEX: raise _fail(f"{u.op.name} must go through an INDEX, not {idx.op.name}")
    base = idx.dtype.base
    if value_dt != base and value_dt.scalar != base:
      raise _fail(f"{u.op.name} of {value_dt} through a pointer to {base}")
    gate = u.src[2] if len(u.src) == 3 else None
    if gate is not None and gate.op is Ops.IF: gate = None  # an IF source places it in the IF block: already guarded
    return self.names[idx], (self.names[gate] if gate is not None else None)

  def _load(self, u: UOp) -> None:
    if len(u.src) not in (1, 3): raise _fail("LOAD must be LOAD(index) or LOAD(index, alt, gate)")
    ptr, gate = self._memory_access(u, u.dtype)
    alt = self.names[u.src[1]] if gate is not None else None
    if u.dtype.count == 1:
      self._define(u, f"({gate}?*{ptr}:{alt})" if gate is not None else f"*{ptr}", "val")
      return
    if gate is not None and u.src[2].dtype.count > 1:  # a gate per lane: a masked vector load
      self._define(u, masked_load(u.dtype, ptr, gate, alt), "val")
      return self.whole.add(u)
    if gate is None and _lanes(u.dtype.count) != u.dtype.count:  # 3 lanes of a 4-lane type: a 12-byte memcpy goes through
      # the stack and its read back whole stalls store forwarding (row maxima of a 3-column difference: 2.5x slower)
      self._define(u, "{" + ", ".join(f"({ptr})[{j}]" for j in range(u.dtype.count)) + "}", "val")
      return self.whole.add(u)
    self._define(u, alt if alt is not None else "{0}", "val")
    self.whole.add(u)
    copy = f"memcpy(&{self.names[u]}, {ptr}, {u.dtype.itemsize});"
    self._line(f"if ({gate}) {copy}" if gate is not None else copy)

  def _store(self, u: UOp) -> None:
    if len(u.src) not in (2, 3): raise _fail("STORE must be STORE(index, value) or STORE(index, value, gate)")
    value = u.src[1]
    ptr, gate = self._memory_access(u, value.dtype)
    if value.dtype.count == 1: stmt = f"*{ptr} = {self.names[value]};"
    elif _lanes(value.dtype.count) == value.dtype.count and u.src[0].dtype.addrspace is AddrSpace.GLOBAL:
      stmt = f"uopc_vstore({ptr}, {self.names[value]});"  # see the prelude; a local array keeps memcpy (registers)
    else: stmt = f"memcpy({ptr}, &{self.names[value]}, {value.dtype.itemsize});"  # fewer lanes than its C type's
    if gate is None and (flag := self._stream_flag(u)) is not None:
      stmt = f"if ({flag}) uopc_stream_store({ptr}, &{self.names[value]}, {value.dtype.itemsize}); else {stmt}"
    self._line(f"if ({gate}) {stmt}" if gate is not None else stmt)

  def _stream_flag(self, u: UOp) -> str | None:
    """The alignment flag of the buffer when STORE u streams (see the module docstring), else None."""
    idx, value = u.src[0], u.src[1]
    buf = _root_buffer(idx.src[0])
    if self.stored.get(buf, 0) < STREAM_MIN_BYTES or value.dtype.count == 1 or value.dtype.itemsize % STREAM_ALIGN: return None
    if _known_factor(idx.src[1]) * value.dtype.scalar.itemsize % STREAM_ALIGN or any(b.op is Ops.IF for b in self.open_blocks): return None
    if buf not in self.streamed: self.streamed[buf] = self._fresh("aligned")
    return self.streamed[buf]

  def _lane(self, u: UOp, i: int) -> str: return f"{self.names[u]}[{i}]" if u.dtype.count > 1 else self.names[u]

  def _vector(self, u: UOp, lanes: list[str]) -> None:
    self._define(u, lanes[0] if u.dtype.count == 1 else f"{{{', '.join(lanes)}}}", _PREFIX.get(u.op, "alu"))

  def _stack(self, u: UOp) -> None:
    if u.dtype.count != len(u.src) or any(s.dtype != u.dtype.scalar for s in u.src):
      raise _fail(f"STACK of {len(u.src)} values into {u.dtype} is not a vector of its scalars")
    if shuffle_sources(u, self.masks) is not None: return self._define(u, shuffle(u, self.names, _lanes(u.dtype.count)), "vec")
    self._vector(u, [self.names[s] for s in u.src])

  def _gep(self, u: UOp) -> None:
    lanes = u.arg if isinstance(u.arg, tuple) else (u.arg,)
    vec = u.src[0]
    if len(lanes) != u.dtype.count or not all(isinstance(i, int) and 0 <= i < vec.dtype.count for i in lanes):
      raise _fail(f"GEP {u.arg!r} out of the lanes of {vec.dtype}")
    if u.dtype.count == 1 and all(shuffle_sources(w, self.masks) is not None for w in self.users.get(u, [])):
      self.names[u] = self._lane(vec, lanes[0])  # only shuffles use it, which name its lane themselves
      return
    self._vector(u, [self._lane(vec, i) for i in lanes])

  def _bitcast(self, u: UOp) -> None:
    src = u.src[0]
    if src.dtype.itemsize != u.dtype.itemsize or src.dtype.is_ptr() or u.dtype.is_ptr():
      raise _fail(f"BITCAST from {src.dtype} to {u.dtype} changes the size")
    self._define(u, f"((union {{ {ctype(src.dtype)} from; {ctype(u.dtype)} to; }}){{ .from = {self.names[src]} }}).to", "cast")

  def _elementwise(self, u: UOp) -> None:
    n = u.dtype.count
    if any(s.dtype.count != n for s in u.src): raise _fail(f"{u.op.name} mixes vector widths")
    if n > 1 and u.op in _COMPARE_OPS and (mask := self._mask(u)) is not None:
      self._define_as(u, mask[0], mask[1], "mask")
      self.masks.add(u)
      return
    if n > 1 and (expr := self._whole_vector(u)) is not None:
      # whole-vector operations, each lane computed exactly as the scalar op (IEEE arithmetic without
      # contraction, wrapping integers, NaN-aware MAX, 0/1 bools): the compiler gets SIMD instructions
      # instead of re-assembling lanes
      self._define(u, expr, _PREFIX.get(u.op, "alu"))
      self.whole.add(u)
      return
    if u.op is Ops.CAST:
      self._vector(u, [cast_expr(self._lane(u.src[0], i), u.src[0].dtype.scalar, u.dtype.scalar) for i in range(n)])
      return
    src_dt = (u.src[1] if u.op is Ops.WHERE else u.src[0]).dtype.scalar
    fused = u.op is Ops.MULACC and u.arg == FUSED
    self._vector(u, [alu_expr(u.op, u.dtype.scalar, src_dt, [self._lane(s, i) for s in u.src], fused) for i in range(n)])

  # ---- whole-vector expressions ----
  def _whole_vector(self, u: UOp) -> str | None:
    """A GCC/Clang vector-extension expression computing every lane of vector ALU/CAST u as the scalar
    rules do, or None where only the lane-by-lane form is exact (16-bit floats, integer division,
    float-to-int casts, narrow shifts, THREEFRY, transcendentals)."""
    op, dt, xs = u.op, u.dtype, [self.names[s] for s in u.src]
    if op is Ops.MULACC and u.arg == FUSED and dt.scalar.is_float(): return None  # fma lane by lane
    # index arithmetic (addresses, gates) stays lane by lane: its lanes are taken apart again for the scalar
    # loads they address, which whole int64 vectors would make gcc extract one by one (conv3x3: 35 -> 313 ms)
    if dtypes.index in (dt.scalar, *(s.dtype.scalar for s in u.src)): return None
    if op is Ops.CAST and u.src[0] in self.masks:  # -1/0 lanes of the same width: 1/0 as numbers
      return f"(({ctype(dt)})(-{xs[0]}))" if dt.scalar.is_int() else f"__builtin_convertvector(-{xs[0]}, {ctype(dt)})"
    if op is Ops.CAST: return self._vector_cast(u.src[0].dtype, dt, xs[0])
    if op is Ops.WHERE:  # by a mask, or a bool vector (computed whole or put together lane by lane) made one
      return _select(xs[0], xs[1], xs[2], dt, convert=u.src[0] not in self.masks)
    src = u.src[0].dtype
    # bools that gate loads and stores lane by lane are made lane by lane too (packing them into a vector
    # only to take it apart again costs more than it saves)
    if dt.scalar is dtypes.bool and any(w.op in (Ops.GEP, Ops.LOAD, Ops.STORE) for w in self.users.get(u, [])): return None
    if op in _COMPARE_OPS:
      if not (src.scalar.is_int() or src.scalar in (dtypes.float32, dtypes.float64, dtypes.bool)): return None
      a, b = xs
      mask = {Ops.CMPLT: f"-({a}<{b})", Ops.CMPGT: f"-({b}<{a})", Ops.CMPEQ: f"-({a}=={b})", Ops.CMPNE: f"-({a}!={b})",
              Ops.CMPGE: f"(1+({a}<{b}))", Ops.CMPLE: f"(1+({b}<{a}))"}[op]
      return f"__builtin_convertvector({mask}, {ctype(dt)})"
    st = dt.scalar
    if st is dtypes.bool:  # 0/1 lanes
      one = _splat("1", dt)
      forms = {Ops.ADD: "({0}|{1})", Ops.OR: "({0}|{1})", Ops.MAX: "({0}|{1})", Ops.MUL: "({0}&{1})", Ops.AND: "({0}&{1})",
               Ops.XOR: "({0}^{1})"}
      if op in forms: return forms[op].format(*xs)
      return f"({xs[0]}^{one})" if op is Ops.NOT else None
    if _is_half(st): return self._half_vector(u, xs)
    if st in (dtypes.float32, dtypes.float64):
      forms = {Ops.ADD: "({0}+{1})", Ops.SUB: "({0}-{1})", Ops.MUL: "({0}*{1})", Ops.DIV: "({0}/{1})", Ops.NEG: "(-{0})",
               Ops.MULACC: "(({0}*{1})+{2})"}
      if op in forms: return forms[op].format(*xs)
      if op is Ops.RECIP: return f"({_splat(render_const(1.0, st), dt)}/{xs[0]})"
      if op is Ops.TRUNC: return _vector_trunc(xs[0], dt)
      if op is Ops.MAX:  # NaN if either is NaN (as uopc_maxf), else the larger
        a, b = xs
        generic = _select(f"(({a}!={a})|({b}!={b}))", f"({a}+{b})", _select(f"({a}>{b})", a, b, dt), dt)
        return f"{macro}({a}, {b}, {generic})" if (macro := vector_max(st, _lanes(dt.count))) else generic
      return None
    if st.is_int():
      t, w = ctype(dt), vector_type_name(_unsigned(st), _lanes(dt.count))
      forms = {Ops.ADD: f"({t})(({w}){{0}}+({w}){{1}})", Ops.SUB: f"({t})(({w}){{0}}-({w}){{1}})",
               Ops.MUL: f"({t})(({w}){{0}}*({w}){{1}})", Ops.NEG: f"({t})(-({w}){{0}})",
               Ops.MULACC: f"({t})(({w}){{0}}*({w}){{1}}+({w}){{2}})", Ops.AND: "({0}&{1})", Ops.OR: "({0}|{1})",
               Ops.XOR: "({0}^{1})", Ops.NOT: "(~{0})", Ops.TRUNC: "{0}"}
      if st.itemsize >= 4: forms.update({Ops.SHL: f"({t})(({w}){{0}}<<({w}){{1}})", Ops.SHR: "({0}>>{1})"})
      if op in forms: return forms[op].format(*xs)
      if op is Ops.MAX: return _select(f"({xs[0]}>{xs[1]})", xs[0], xs[1], dt)
    return None

  def _half_vector(self, u: UOp, xs: list[str]) -> str | None:
    """float16/bfloat16 arithmetic whole: operands widened to float32 vectors, the float op, one rounding
    back. A float32 op on 16-bit values then one rounding equals the scalar rule's (float arithmetic, then a
    rounding to 16 bits): float's 24 bits are at least 2p+2 (p = 11, or 8 for bfloat16), so the two
    roundings of +, -, *, / never differ from one."""
    n, st = _lanes(u.dtype.count), u.dtype.scalar
    if not all(s.dtype.scalar is st for s in u.src): return None
    forms = {Ops.ADD: "({0}+{1})", Ops.SUB: "({0}-{1})", Ops.MUL: "({0}*{1})", Ops.DIV: "({0}/{1})", Ops.NEG: "(-{0})"}
    if u.op not in forms: return None
    name = _HALF_NAMES[st]
    wide = [f"uopc_{name}_to_float_x{n}({x})" for x in xs]
    return f"uopc_float_to_{name}_x{n}({forms[u.op].format(*wide)})"

  def _mask(self, u: UOp) -> tuple[str, str] | None:
    """(C type, expression) of comparison u as a -1/0 integer mask of its operands' lane width, when every
    user is a WHERE selecting values of that width by it or a CAST to numbers of that width (its negation, or
    that converted: 1/0 lanes), so that no 0/1 bool vector is made, else None."""
    src = u.src[0].dtype.scalar
    if not (src.is_int() or src in (dtypes.float32, dtypes.float64, dtypes.bool)) or src is dtypes.index: return None
    users = self.users.get(u, [])
    def takes_mask(w: UOp) -> bool:
      to = w.dtype.scalar
      if w.op is Ops.CAST: return to.itemsize == src.itemsize and (to.is_int() or to in (dtypes.float32, dtypes.float64))
      return w.op is Ops.WHERE and w.src[0] is u and w.src[1] is not u and w.src[2] is not u and w.dtype.scalar.itemsize == src.itemsize
    if not users or not all(map(takes_mask, users)): return None
    m = vector_type_name(_SIGNED[src.itemsize], _lanes(u.dtype.count))
    a, b = (self.names[x] for x in u.src)
    form = {Ops.CMPLT: f"(({m})({a}<{b}))", Ops.CMPGT: f"(({m})({b}<{a}))", Ops.CMPEQ: f"(({m})({a}=={b}))",
            Ops.CMPNE: f"(({m})({a}!={b}))", Ops.CMPGE: f"(~({m})({a}<{b}))", Ops.CMPLE: f"(~({m})({b}<{a}))"}[u.op]
    return m, form

  def _vector_cast(self, src: DType, dst: DType, x: str) -> str | None:
    if src == dst: return x
    n = _lanes(dst.count)
    if _is_half(src.scalar) and dst.scalar in (dtypes.float32, dtypes.float64):  # widening is exact
      wide = f"uopc_{_HALF_NAMES[src.scalar]}_to_float_x{n}({x})"
      return wide if dst.scalar is dtypes.float32 else f"__builtin_convertvector({wide}, {ctype(dst)})"
    if src.scalar is dtypes.float32 and _is_half(dst.scalar): return f"uopc_float_to_{_HALF_NAMES[dst.scalar]}_x{n}({x})"
    if _is_half(src.scalar) or _is_half(dst.scalar): return None
    if dst.scalar is dtypes.bool: return f"__builtin_convertvector(-({x}!=0), {ctype(dst)})"
    # float to int: only to int32, where vector and scalar conversions are the same instruction family and agree
    # even out of range (x86: 0x80000000; arm: saturation); other widths lane by lane, as the scalar cast does
    if src.scalar.is_float() and not dst.scalar.is_float() and dst.scalar is not dtypes.int32: return None
    return f"__builtin_convertvector({x}, {ctype(dst)})"


_UNSIGNED = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}
_SIGNED = {1: dtypes.int8, 2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}


def _unsigned(st: DType) -> DType: return _UNSIGNED[st.itemsize]


def _splat(literal: str, dt: DType) -> str:
  return f"(({ctype(dt)}){{{', '.join([literal] * dt.count)}}})"


def _vector_trunc(x: str, dt: DType) -> str:
  """trunc of every lane whole, bit for bit the scalar truncf/trunc: lanes under 2^23 (float64: 2^52) in
  magnitude go through the integer conversion of their width and back, with x's sign bit put back (trunc(-0.5)
  is -0.0); the others (integers already, infinities, NaN: every comparison false) stay as they are."""
  st = dt.scalar
  i = vector_type_name(_SIGNED[st.itemsize], _lanes(dt.count))
  big = _splat(render_const(2.0 ** (23 if st is dtypes.float32 else 52), st), dt)
  back = f"__builtin_convertvector(__builtin_convertvector({x}, {i}), {ctype(dt)})"
  signed = f"(({ctype(dt)})(({i}){back}|(({i}){x}&({i}){_splat(render_const(-0.0, st), dt)})))"
  return _select(f"(({x}<{big})&((-{big})<{x}))", signed, x, dt)


def _select(cond: str, a: str, b: str, dt: DType, convert: bool = False) -> str:
  """Lanes of a where cond, else of b, by bits: cond is a comparison's mask (-1/0 lanes, of any integer
  vector type of the lane width), or with `convert` a bool vector (0/1 lanes)."""
  m = vector_type_name(_SIGNED[dt.scalar.itemsize], _lanes(dt.count))
  mask = f"(-__builtin_convertvector({cond}, {m}))" if convert else f"(({m}){cond})"  # cond: a bool vector, or a mask
  return f"(({ctype(dt)})((({m}){a}&{mask})|(({m}){b}&~{mask})))"
