"""LLVM IR renderer: one linearized kernel (`LINEAR`) to the LLVM IR text of one function, for the host
CPU (`target="host"`) or AMDGPU (`target="amdgcn"`), and `render_module` to make a whole module.

Control flow. RANGE opens a loop whose counter is a phi (`ridxK`), END closes it through a latch
block. IF/ENDIF and gated LOAD/STORE branch around the guarded code: a gated load reads memory only
on the taken path and merges its `alt` with a phi. On the host a SPECIAL is a loop over its bound,
closed by its END (the linearizer gives every SPECIAL one; a CPU has no grid), so a BARRIER inside
a thread loop (`lidx`) cannot be honoured and is refused. On AMDGPU SPECIALs are the workgroup/workitem ids
(`idx<n>` is workgroup * size + item, guarded by its bound) and BARRIER is
`s.barrier` between workgroup-scope release/acquire fences.

Values. Every value lives in an SSA register (LLVM's mem2reg is not needed); CONSTs are inlined as
literals. Types are in types.py: bool is i1 in registers and i8 in memory; bfloat16 is computed in
float32 and rounded to nearest even once per op (`round_bf16`). A vector dtype (Expand's UPCAST lanes)
is an LLVM vector in every op: loads and stores move the whole vector (aligned to its scalar), casts,
bitcasts and ALU ops work lane-wise, constants are splats, a gated load's `alt` fills every lane.

Semantics are those of SPEC-NOTES: IDIV/MOD `sdiv`/`srem` (`udiv`/`urem` unsigned), SHR `ashr` on
signed, integer ADD/MUL wrap (no nsw/nuw flags; MIN / -1 wraps too, as in the C target), CMPNE `fcmp une`, the decomposed comparisons by
their definitions (CMPGE = NOT CMPLT is `fcmp uge`: true on NaN), float MAX through `llvm.maximum`
(NaN-propagating), float->int `fptosi`/`fptoui`, CAST to bool `x != 0`.
"""
from __future__ import annotations

import re
from typing import Callable, Sequence

from uopc.diagnostics import CompileError, Loc, error
from uopc.dtype import AddrSpace, DType, PtrDType, dtypes
from uopc.ops import Ops
from uopc.targets import param_name
from uopc.targets.c.render import STACK_ARRAY_BYTES, KernelParam, RenderedKernel
from uopc.targets.llvm.arith import _Arithmetic
from uopc.targets.llvm.types import const_literal, is_signed, mangle, mem_type, ptr_type, reg_type
from uopc.uop import UOp

TARGETS = ("host", "amdgcn")
AMD_ARCHS = ("gfx1100", "gfx90a", "gfx942")

# Transcendentals as LLVM intrinsics. On the host they call libm (correctly rounded or within an
# ULP: accurate). On AMDGPU only these meet SPEC-NOTES's bar (2 ULP over the finite domain, IEEE
# specials): llvm.sqrt and fdiv (RECIP, DIV) are correctly rounded by the backend's default lowering
# (no !fpmath, no afn); llvm.exp2/llvm.log2 on f32 become v_exp_f32/v_log_f32 (1 ULP) with the
# backend's scaling for subnormals. llvm.sin becomes v_sin_f32 after a float32 multiply by 1/(2pi),
# whose error grows with |x| (far beyond 2 ULP at 1e4), and llvm.pow has no AMDGPU lowering at all:
# both are refused there until Instruction Selection decomposes them.
_STRUCTURE = frozenset({Ops.GROUP, Ops.SINK, Ops.NOOP})
_REFUSALS = {Ops.CUSTOM: "CUSTOM injects source text of a C-like target: the LLVM targets cannot take it",
             Ops.CUSTOMI: "CUSTOMI injects source text of a C-like target: the LLVM targets cannot take it",
             Ops.WMMA: "WMMA (tensor cores) is not supported by the LLVM renderer yet"}



_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _input_names(params: Sequence[KernelParam]) -> dict[tuple[str, int | str], str]:
  """The IR name of each kernel argument, by ("buffer", slot) or ("var", name). A plain identifier of up to 64
  characters is its own name (generated names all end in .N, so they cannot take it); any other name, or a repeated one,
  becomes arg.<slot>.<name with other characters as _>: three parts, never generated, distinct by slot,
  and plain enough for the AMD metadata's YAML. No other character of the input reaches the IR."""
  out: dict[tuple[str, int | str], str] = {}
  for p in params:
    plain = _PLAIN.fullmatch(p.name) and len(p.name) <= 64 and p.name not in out.values()  # LLVM cuts long local names
    out[_arg_key(p.kind, p.slot, p.name)] = p.name if plain else f"arg.{p.slot}.{re.sub(r'[^A-Za-z0-9_]', '_', p.name)[:32]}"
  return out


def _arg_key(kind: str, slot: int, name: str) -> tuple[str, int | str]: return (kind, slot if kind == "buffer" else name)


def _llvm_name(name: str) -> str:
  """A local or global LLVM name: bare when it is a plain identifier, else quoted with every byte
  outside [-A-Za-z$._0-9 ] as a \\HH escape, so a name from the input stays a name whatever it holds.
  LLVM allows no NUL in names: a backslash is first doubled and NUL written as backslash-0 (C's
  escapes), which keeps distinct names distinct."""
  if re.fullmatch(r"[-A-Za-z$._][-A-Za-z$._0-9]*", name): return name
  raw = name.replace("\\", "\\\\").replace("\0", "\\0").encode()
  return '"' + "".join(chr(b) if chr(b).isascii() and (chr(b).isalnum() or chr(b) in "-$._ ") else f"\\{b:02X}" for b in raw) + '"'


def _slot(u: UOp) -> int: return u.arg[0] if isinstance(u.arg, tuple) else u.arg


def _base_buffer(u: UOp) -> UOp:
  while u.op in (Ops.INDEX, Ops.AFTER, Ops.CAST) and u.src: u = u.src[0]
  return u


def kernel_params(linear: UOp) -> tuple[KernelParam, ...]:
  """Buffers by slot, then DEFINE_VARs by name: the signature order every target shares."""
  uops = linear.src
  written = {_base_buffer(u.src[0]) for u in uops if u.op in (Ops.STORE, Ops.ATOMICADD)}
  bufs = sorted((u for u in uops if u.op is Ops.PARAM), key=_slot)
  dvars = sorted((u for u in uops if u.op is Ops.DEFINE_VAR), key=lambda u: u.arg[0])
  return tuple([KernelParam(param_name(b), _slot(b), "buffer", b.dtype, b in written, None, None) for b in bufs] +
               [KernelParam(v.arg[0], len(bufs) + i, "var", v.dtype, False, v.arg[1], v.arg[2]) for i, v in enumerate(dvars)])


class _Kernel(_Arithmetic):
  """The state of rendering one function: the instruction lines, the open blocks, the SSA names."""

  def __init__(self, linear: UOp, name: str, target: str, loc_of: Callable[[UOp], Loc | None]):
    if target not in TARGETS: raise ValueError(f"unknown LLVM target {target!r}; expected one of {TARGETS}")
    self.linear, self.name, self.amdgpu, self.loc_of = linear, name, target == "amdgcn", loc_of
    self.lines: list[str] = []
    self.allocas: list[str] = []
    self.globals: list[str] = []
    self.declares: set[str] = set()
    self.ref: dict[UOp, str] = {}
    self.block = "entry.0"
    self.counter = 0
    self.open: list[tuple[str, UOp, int]] = []  # ("range" | "if", uop, number), innermost last
    self.loop_names: dict[int, str] = {}  # loop number -> its counter's name
    self.ranges = 0
    self.buffer_names: set[str] = set()
    self.arg_ir = _input_names(kernel_params(linear))
    self.arg_names = set(self.arg_ir.values())  # loop counters must not take these

  # ---- emission helpers ---------------------------------------------------------------------------
  def fail(self, u: UOp, message: str) -> CompileError:
    return CompileError([error(self.loc_of(u), message)])

  def number(self) -> int:
    """A fresh number for an SSA name or a block label."""
    self.counter += 1
    return self.counter

  def fresh(self, prefix: str) -> str: return f"%{prefix}.{self.number()}"

  def emit(self, line: str) -> None: self.lines.append(f"  {line}")

  def value(self, expr: str, prefix: str = "t") -> str:
    name = self.fresh(prefix)
    self.emit(f"{name} = {expr}")
    return name

  def label(self, name: str) -> None:
    self.lines.append(f"{name}:")
    self.block = name

  def intrinsic(self, ret: str, name: str, args: list[tuple[str, str]], overload: str | None = None) -> str:
    full = f"llvm.{name}" + (f".{mangle(overload)}" if overload else "")
    self.declares.add(f"declare {ret} @{full}({', '.join(t for t, _ in args)})")
    return self.value(f"call {ret} @{full}({', '.join(f'{t} {v}' for t, v in args)})")

  def ptr(self, dt: DType) -> str: return ptr_type(dt, self.amdgpu)

  # ---- the function -------------------------------------------------------------------------------
  def render(self) -> str:
    for u in self.linear.src: self.render_uop(u)
    if self.open: raise self.fail(self.open[-1][1], f"{self.open[-1][1].op.name} is never closed")
    self.emit("br label %exit.0")
    self.label("exit.0")
    self.emit("ret void")
    return "\n".join([*self.globals, *sorted(self.declares), self.signature() + " {", "entry.0:", *self.allocas,
                      *self.lines, "}"]) + "\n"

  def signature(self) -> str:
    args = []
    for p in kernel_params(self.linear):
      name = self.arg_ir[_arg_key(p.kind, p.slot, p.name)]
      if p.kind == "buffer": args.append(f"{self.ptr(p.dtype)} noalias {'' if p.written else 'readonly '}%{name}")
      else: args.append(f"i64 %{name}")
    if self.amdgpu:
      from uopc.targets.geometry import workgroup_geometry
      size = workgroup_geometry(self.linear, self.loc_of).max_flat_size
      return (f"define amdgpu_kernel void @{_llvm_name(self.name)}({', '.join(args)}) "
              f'nounwind "amdgpu-flat-work-group-size"="1,{size}"')
    return f"define hidden void @{_llvm_name(self.name)}({', '.join(args)}) nounwind"

  def render_uop(self, u: UOp) -> None:
    if u.op in _STRUCTURE: return
    handler = _HANDLERS.get(u.op)
    if handler is None:
      if u.op in _ALU_OPS: handler = _Kernel.alu
      else: raise self.fail(u, _REFUSALS.get(u.op, f"the LLVM renderer cannot render {u.op.name} (it should be lowered before rendering)"))
    out = handler(self, u)
    if out is not None: self.ref[u] = out

  def val(self, u: UOp) -> str:
    """The operand naming `u`'s value: its register, or the literal of a CONST (the linear order need not list CONSTs)."""
    if u in self.ref: return self.ref[u]
    if u.op is Ops.CONST: return self.const(u)
    raise self.fail(u, f"{u.op.name} is used before the linear order defines it")

  def typed(self, u: UOp) -> str: return f"{reg_type(u.dtype)} {self.val(u)}"

  # ---- sources ------------------------------------------------------------------------------------
  def param(self, u: UOp) -> str: return f"%{self.arg_ir[('buffer', _slot(u))]}"

  def define_var(self, u: UOp) -> str:
    arg = f"%{self.arg_ir[('var', u.arg[0])]}"
    return arg if reg_type(u.dtype) == "i64" else self.value(f"trunc i64 {arg} to {reg_type(u.dtype)}", "var")

  def const(self, u: UOp) -> str: return const_literal(u.arg, u.dtype)

  def buffer(self, u: UOp) -> str:
    dt: PtrDType = u.dtype
    if dt.size < 0: raise self.fail(u, f"BUFFER {param_name(u)!r} needs a known size to be allocated")
    array = f"[{dt.size} x {mem_type(dt.base)}]"
    name = param_name(u)
    if not _PLAIN.fullmatch(name): name = f"buf.{_slot(u)}.{re.sub(r'[^A-Za-z0-9_]', '_', name)[:32]}"  # as _input_names
    elif name in self.buffer_names: name = f"{name}.{_slot(u)}"  # two BUFFERs may share a program name
    self.buffer_names.add(name)
    if self.amdgpu and dt.addrspace is AddrSpace.LOCAL:
      glob = f"@{_llvm_name(f'{self.name}.{name}')}"
      self.globals.append(f"{glob} = internal addrspace(3) global {array} poison, align 16")
      return glob
    if dt.addrspace is AddrSpace.LOCAL and dt.size * dt.base.itemsize > STACK_ARRAY_BYTES:  # as the C target: per thread
      glob = f"@{_llvm_name(f'{self.name}.{name}')}"
      self.globals.append(f"{glob} = internal thread_local global {array} zeroinitializer, align 64")
      return glob
    alloca = f"%{_llvm_name(f'{name}.buf')}"
    space = ", addrspace(5)" if self.amdgpu else ""
    self.allocas.append(f"  {alloca} = alloca {array}, align 16{space}")
    return alloca

  # ---- loops and threads ---------------------------------------------------------------------------
  def open_loop(self, bound: str, name: str) -> int:
    k = self.number()
    if name in self.arg_names: name = f"{name}.{k}"
    self.loop_names[k] = name
    pre = self.block
    self.emit(f"br label %loop.{k}")
    self.label(f"loop.{k}")
    self.emit(f"%{name} = phi i64 [ 0, %{pre} ], [ %{name}.next, %latch.{k} ]")
    self.emit(f"%cond.{k} = icmp slt i64 %{name}, {bound}")
    self.emit(f"br i1 %cond.{k}, label %body.{k}, label %done.{k}")
    self.label(f"body.{k}")
    return k

  def close_loop(self, k: int) -> None:
    name = self.loop_names[k]
    self.emit(f"br label %latch.{k}")
    self.label(f"latch.{k}")
    self.emit(f"%{name}.next = add i64 %{name}, 1")
    self.emit(f"br label %loop.{k}")
    self.label(f"done.{k}")

  def index_value(self, u: UOp) -> str:
    """An index-typed source as i64 (RANGE bounds and offsets may be narrower ints)."""
    ty = reg_type(u.dtype)
    if ty == "i64": return self.val(u)
    return self.value(f"{'sext' if is_signed(u.dtype) else 'zext'} {ty} {self.val(u)} to i64")

  def range_(self, u: UOp) -> str:
    name = f"ridx{self.ranges}"
    self.ranges += 1
    k = self.open_loop(self.index_value(u.src[0]), name)
    self.open.append(("range", u, k))
    return self.narrow(f"%{self.loop_names[k]}", u.dtype)

  def narrow(self, i64: str, dt: DType) -> str:
    return i64 if reg_type(dt) == "i64" else self.value(f"trunc i64 {i64} to {reg_type(dt)}")

  def end(self, u: UOp) -> None:
    rng = u.src[-1]
    if rng.op is Ops.SPECIAL and self.amdgpu: return  # the hardware runs the threads
    if not self.open or self.open[-1][0] != "range" or self.open[-1][1] is not rng:
      raise self.fail(u, f"END does not close the innermost open {rng.op.name}")
    self.close_loop(self.open.pop()[2])

  def special(self, u: UOp) -> str:
    name = u.arg if isinstance(u.arg, str) else str(u.arg)
    m = re.fullmatch(r"(gidx|lidx|idx)([0-2])", name)
    if m is None: raise self.fail(u, f"SPECIAL {name!r} is not gidx<n>, lidx<n> or idx<n> with n in 0..2")
    if not self.amdgpu: return self.host_special(u, name)
    kind, axis = m.group(1), "xyz"[int(m.group(2))]
    if kind == "idx": return self.narrow(self.flat_index(u, name, axis), u.dtype)
    fn = "workgroup.id" if kind == "gidx" else "workitem.id"
    raw = self.intrinsic("i32", f"amdgcn.{fn}.{axis}", [])
    return self.narrow(self.value(f"zext i32 {raw} to i64", name), u.dtype)

  def host_special(self, u: UOp, name: str) -> str:
    """A CPU runs the threads of a SPECIAL one after another: a loop, closed by the SPECIAL's END."""
    k = self.open_loop(self.index_value(u.src[0]), name)
    self.open.append(("range", u, k))
    return self.narrow(f"%{self.loop_names[k]}", u.dtype)

  def flat_index(self, u: UOp, name: str, axis: str) -> str:
    """idx<n> = workgroup id * workgroup size + workitem id; items past the bound return at once."""
    from uopc.targets.geometry import idx_local_size
    group = self.value(f"zext i32 {self.intrinsic('i32', f'amdgcn.workgroup.id.{axis}', [])} to i64")
    item = self.value(f"zext i32 {self.intrinsic('i32', f'amdgcn.workitem.id.{axis}', [])} to i64")
    base = self.value(f"mul i64 {group}, {idx_local_size(u.src[0])}")
    idx = self.value(f"add i64 {base}, {item}", name)
    inside = self.value(f"icmp slt i64 {idx}, {self.index_value(u.src[0])}")
    k = self.number()
    self.emit(f"br i1 {inside}, label %inside.{k}, label %exit.0")
    self.label(f"inside.{k}")
    return idx

  def if_(self, u: UOp) -> None:
    k = self.number()
    self.emit(f"br i1 {self.val(u.src[0])}, label %then.{k}, label %endif.{k}")
    self.label(f"then.{k}")
    self.open.append(("if", u, k))

  def endif(self, u: UOp) -> None:
    if not self.open or self.open[-1][0] != "if" or self.open[-1][1] is not u.src[0]:
      raise self.fail(u, "ENDIF does not close the innermost open IF")
    k = self.open.pop()[2]
    self.emit(f"br label %endif.{k}")
    self.label(f"endif.{k}")

  def barrier(self, u: UOp) -> None:
    if not self.amdgpu:
      if any(b.op is Ops.SPECIAL and str(b.arg).startswith("lidx") for _, b, _ in self.open):
        raise self.fail(u, "BARRIER between the threads of a workgroup (lidx) cannot run on the host, "
                           "where the threads are a sequential loop")
      return  # one thread per workgroup: nothing to wait for
    self.emit('fence syncscope("workgroup") release')
    self.intrinsic_void("amdgcn.s.barrier")
    self.emit('fence syncscope("workgroup") acquire')

  def intrinsic_void(self, name: str) -> None:
    self.declares.add(f"declare void @llvm.{name}()")
    self.emit(f"call void @llvm.{name}()")

  def passthrough(self, u: UOp) -> str: return self.val(u.src[0])
  def bind(self, u: UOp) -> str: return self.val(u.src[-1])

  # ---- memory -------------------------------------------------------------------------------------
  def index(self, u: UOp) -> str:
    buf = u.src[0]
    if len(u.src) != 2: raise self.fail(u, "INDEX at kernel level takes (buffer, offset)")
    elem = mem_type(buf.dtype.base)
    return self.value(f"getelementptr inbounds {elem}, {self.ptr(buf.dtype)} {self.val(buf)}, i64 {self.index_value(u.src[1])}", "idx")

  def address(self, u: UOp) -> tuple[str, str]:
    """The pointer operand of a LOAD/STORE/ATOMICADD: its type and value."""
    if not u.dtype.is_ptr(): raise self.fail(u, f"{u.op.name} does not give a pointer to load or store through")
    return self.ptr(u.dtype), self.val(u)

  def load(self, u: UOp) -> str:
    pty, ptr = self.address(u.src[0])
    if len(u.src) == 1: return self.load_now(u.dtype, pty, ptr)
    if len(u.src) != 3: raise self.fail(u, "a gated LOAD takes (index, alt, gate)")
    alt, gate = u.src[1], u.src[2]
    k = self.number()
    before = self.block
    self.emit(f"br i1 {self.val(gate)}, label %load.{k}, label %loaded.{k}")
    self.label(f"load.{k}")
    val = self.load_now(u.dtype, pty, ptr)
    taken = self.block
    self.emit(f"br label %loaded.{k}")
    self.label(f"loaded.{k}")
    return self.value(f"phi {reg_type(u.dtype)} [ {val}, %{taken} ], [ {self.val(alt)}, %{before} ]", "val")

  def load_now(self, dt: DType, pty: str, ptr: str) -> str:
    raw = self.value(f"load {mem_type(dt)}, {pty} {ptr}, align {dt.scalar.itemsize}", "val")
    return self.from_memory(raw, dt)

  def from_memory(self, raw: str, dt: DType) -> str:
    mty = mem_type(dt)
    if dt.scalar is dtypes.bool: return self.value(f"icmp ne {mty} {raw}, zeroinitializer")
    if dt.scalar is dtypes.bfloat16: return self.bf16_from_bits(raw, dt)
    return raw

  def to_memory(self, val: str, dt: DType) -> str:
    if dt.scalar is dtypes.bool: return self.value(f"zext {reg_type(dt)} {val} to {mem_type(dt)}")
    if dt.scalar is dtypes.bfloat16: return self.bf16_to_bits(val, dt)
    return val

  def store(self, u: UOp) -> None:
    pty, ptr = self.address(u.src[0])
    val = u.src[1]
    if len(u.src) == 2: return self.store_now(val, pty, ptr)
    k = self.number()
    self.emit(f"br i1 {self.val(u.src[2])}, label %store.{k}, label %stored.{k}")
    self.label(f"store.{k}")
    self.store_now(val, pty, ptr)
    self.emit(f"br label %stored.{k}")
    self.label(f"stored.{k}")

  def store_now(self, val: UOp, pty: str, ptr: str) -> None:
    bits = self.to_memory(self.val(val), val.dtype)
    self.emit(f"store {mem_type(val.dtype)} {bits}, {pty} {ptr}, align {val.dtype.scalar.itemsize}")

  def atomic_add(self, u: UOp) -> str:
    pty, ptr = self.address(u.src[0])
    dt = u.src[1].dtype
    if dt.count != 1 or dt.scalar in (dtypes.bool, dtypes.bfloat16):
      raise self.fail(u, f"ATOMICADD of {dt} is not supported by the LLVM renderer")
    op = "fadd" if dt.is_float() else "add"
    scope = ' syncscope("agent")' if self.amdgpu else ""
    return self.value(f"atomicrmw {op} {pty} {ptr}, {self.typed(u.src[1])}{scope} monotonic, align {dt.itemsize}")

  # ---- vectors ------------------------------------------------------------------------------------
  def stack(self, u: UOp) -> str:
    if u.dtype.count != len(u.src): raise self.fail(u, "STACK at kernel level builds a vector of its scalars")
    vec, ty = "poison", reg_type(u.dtype)
    for lane, s in enumerate(u.src): vec = self.value(f"insertelement {ty} {vec}, {self.typed(s)}, i32 {lane}")
    return vec

  def gep(self, u: UOp) -> str:
    lanes = u.arg if isinstance(u.arg, tuple) else (u.arg,)
    src = self.typed(u.src[0])
    if len(lanes) == 1: return self.value(f"extractelement {src}, i32 {lanes[0]}")
    mask = ", ".join(f"i32 {i}" for i in lanes)
    return self.value(f"shufflevector {src}, {reg_type(u.src[0].dtype)} poison, <{len(lanes)} x i32> <{mask}>")

  # ---- bfloat16 -----------------------------------------------------------------------------------
_ALU_OPS = frozenset({Ops.RECIP, Ops.TRUNC, Ops.ADD, Ops.MUL, Ops.MAX, Ops.MOD, Ops.IDIV, Ops.CMPLT, Ops.CMPNE,
                      Ops.XOR, Ops.OR, Ops.AND, Ops.SHR, Ops.SHL, Ops.WHERE, Ops.NEG, Ops.SUB, Ops.DIV, Ops.CMPGT,
                      Ops.CMPGE, Ops.CMPLE, Ops.CMPEQ, Ops.NOT, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.POW,
                      Ops.MULACC, Ops.THREEFRY, Ops.FLOORDIV, Ops.FLOORMOD})

_HANDLERS: dict[Ops, Callable[[_Kernel, UOp], str | None]] = {
  Ops.PARAM: _Kernel.param, Ops.DEFINE_VAR: _Kernel.define_var, Ops.CONST: _Kernel.const, Ops.BUFFER: _Kernel.buffer,
  Ops.RANGE: _Kernel.range_, Ops.END: _Kernel.end, Ops.SPECIAL: _Kernel.special, Ops.IF: _Kernel.if_,
  Ops.ENDIF: _Kernel.endif, Ops.BARRIER: _Kernel.barrier, Ops.AFTER: _Kernel.passthrough, Ops.BIND: _Kernel.bind,
  Ops.INDEX: _Kernel.index, Ops.LOAD: _Kernel.load, Ops.STORE: _Kernel.store, Ops.ATOMICADD: _Kernel.atomic_add,
  Ops.STACK: _Kernel.stack, Ops.GEP: _Kernel.gep, Ops.CAST: _Kernel.cast, Ops.BITCAST: _Kernel.bitcast,
}


def render_kernel(linear: UOp, name: str, target: str = "host", arch: str | None = None,
                  loc_of: Callable[[UOp], Loc | None] = lambda u: None) -> RenderedKernel:
  """The LLVM IR of one kernel: its LDS globals and intrinsic declarations, then the function.
  `render_module` joins kernels into a module."""
  if linear.op is not Ops.LINEAR: raise ValueError(f"render_kernel takes a LINEAR UOp, not {linear.op.name}")
  if target == "amdgcn" and (arch or AMD_ARCHS[0]) not in AMD_ARCHS:
    raise CompileError([error(None, f"unknown AMD arch '{arch}'", f"known: {', '.join(AMD_ARCHS)}")])
  return RenderedKernel(name, _Kernel(linear, name, target, loc_of).render(), kernel_params(linear))


def render_module(kernels, target: str = "host", arch: str | None = None, module_id: str = "uopc") -> str:
  """A whole LLVM module: the target's triple and data layout, then each kernel's text, declarations
  shared by several kernels written once."""
  from uopc.targets.llvm.compile import target_machine
  tm = target_machine(target, arch)
  declares, body = set(), []
  for k in kernels:
    lines = k.source.splitlines()
    declares.update(line for line in lines if line.startswith("declare "))
    body.append("\n".join(line for line in lines if not line.startswith("declare ")))
  flags = []
  if target == "amdgcn":
    flags = ["!llvm.module.flags = !{!0}", '!0 = !{i32 1, !"amdhsa_code_object_version", i32 500}']
  return "\n".join([f"; ModuleID = '{module_id}'", f'target datalayout = "{tm.target_data}"',
                    f'target triple = "{tm.triple}"', "", *sorted(declares), "", "\n".join(body), *flags]) + "\n"
