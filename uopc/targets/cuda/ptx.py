"""Render a linearized kernel (`LINEAR`) as a PTX `.entry`, and a whole `.ptx` module.

PTX is written directly (no CUDA C): ptxas assembles it for each sm_XX and the driver JIT-compiles
it for newer GPUs. The text is valid for sm_80 and later (`RENDER_ARCH`); `arch` only turns on
instructions a later arch adds (bf16 ADD/SUB/MUL on sm_90).

Values live in virtual registers that ptxas allocates; PTX registers are not SSA, so a RANGE counter
is one register stepped at its END. Register classes:
- bool: `.pred` (`%p`); in memory a byte (ld/st `.u8`, 0 or 1).
- int8/16, uint8/16, int32, uint32: 32-bit (`%r`). An 8/16-bit value is always kept sign- or
  zero-extended (canonical), so compares, division and shifts see its real value; ops that can
  carry out of the narrow width (ADD, MUL, SHL, ...) re-extend their result.
- int64, uint64, index and addresses: 64-bit (`%rd`). float32 `%f`, float64 `%fd`, float16 and
  bfloat16 as 16-bit bits (`%h`). A vector is one register per lane.

Semantics are those of SPEC-NOTES: integer ADD/MUL wrap, IDIV/MOD are `div`/`rem` (truncating), SHR
is `shr.s` on signed types, CMPNE is `setp.neu` (true for NaN), CMPGE/CMPLE are NOT of a CMPLT (seed
000: `setp.geu`/`setp.leu`), float MAX is `max.NaN`, float to int `cvt.rzi`, int to float `cvt.rn`,
CAST to bool `x != 0`. Float ADD/SUB/MUL carry `.rn`, which keeps ptxas from fusing them into an FMA.
float16 uses `.f16` instructions where they round exactly like the float32 reference (ADD, SUB,
MUL, NEG, MAX, TRUNC, compares); the rest of float16 and bfloat16 is computed in float32 and rounded
once (`cvt.rn.f16.f32`, `cvt.rn.bf16.f32`). A conversion to bfloat16 from float64 or an integer
goes through float32 rounded to odd, so that it is rounded once. SQRT, DIV and RECIP are the
correctly rounded `sqrt.rn`, `div.rn`, `rcp.rn`. float32 EXP2 (and float16/bfloat16 EXP2 through it)
is `ex2.approx.f32` without `.ftz`: NVIDIA documents it within 2 ULP over the whole range (it is
exp2f), and tests/test_cuda_gpu.py checks all 2^32 inputs against the float64 decomposition (at most 2
ULP on the H100, subnormal results and special values included). LOG2, SIN, POW and float64 EXP2 have
only `.approx` instructions that miss SPEC-NOTES's accuracy bar: they are refused unless
`fast_math=True` (which also fuses MULACC into `fma.rn`). Instruction Selection (`uopc.stages.isel`,
table "cuda") decomposes them, and THREEFRY, FLOORDIV and FLOORMOD, before rendering.

Threads: `gidx<n>` is `%ctaid`, `lidx<n>` is `%tid`, `idx<n>` is `%ctaid * %ntid + %tid`, and when
its bound is not a multiple of the block the threads past it branch to the SPECIAL's END. The
launch geometry (grid and block from the SPECIALs) is `uopc.targets.geometry`'s, shared by
every GPU target.
"""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from typing import Any, Callable

import ml_dtypes
import numpy as np

from uopc.diagnostics import CompileError, Diagnostic, Loc, error
from uopc.dtype import AddrSpace, DType, PtrDType, dtypes
from uopc.ops import GroupOp, Ops
from uopc.stages.tensor_cores import ASYNC, CUDA_TENSOR_CORES, LDMATRIX, by_arg
from uopc.targets import param_name
from uopc.targets.geometry import Geometry, idx_local_size, workgroup_geometry
from uopc.targets.c.render import KernelParam, RenderedKernel
from uopc.uop import UOp

LocOf = Callable[[UOp], "Loc | None"]
RENDER_ARCH = "sm_80"   # the oldest arch the PTX runs on: max.NaN and cvt to bf16 need it
ARCH_PATTERN = r"sm_(\d+)[af]?"
PTX_VERSION = "7.8"     # the first PTX ISA with sm_90; every driver since CUDA 11.8 JIT-compiles it

# register class of a scalar dtype: (register prefix, declaration type)
_CLASSES = {"pred": ("%p", ".pred"), "b16": ("%h", ".b16"), "b32": ("%r", ".b32"), "b64": ("%rd", ".b64"),
            "f32": ("%f", ".f32"), "f64": ("%fd", ".f64")}
_HALF = (dtypes.float16, dtypes.bfloat16)
_SMALL_INTS = (dtypes.int8, dtypes.int16, dtypes.uint8, dtypes.uint16)
_TRANSCENDENTAL = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.POW})
_ACCURATE_EXP2 = frozenset({dtypes.float16, dtypes.bfloat16, dtypes.float32})  # ex2.approx.f32 meets the bar for them
_NO_CODE = frozenset({Ops.GROUP, Ops.SINK, Ops.NOOP})
_ISEL_LOWERS = frozenset({Ops.THREEFRY, Ops.FLOORDIV, Ops.FLOORMOD})  # uopc.stages.isel decomposes them for cuda


def reg_class(dt: DType) -> str:
  dt = dt.scalar
  if dt.is_ptr(): return "b64"
  if dt is dtypes.bool: return "pred"
  if dt in _HALF: return "b16"
  if dt is dtypes.float32: return "f32"
  if dt is dtypes.float64: return "f64"
  if dt.is_int(): return "b64" if dt.itemsize == 8 else "b32"
  raise ValueError(f"no PTX register for {dt}")


def int_type(dt: DType) -> str:
  """The PTX type integer arithmetic on dt uses (8/16-bit values are computed in 32 bits)."""
  return ("u" if dt.is_unsigned() else "s") + ("64" if dt.itemsize == 8 else "32")


def mem_type(dt: DType) -> str:
  """The PTX type of one element of dt in memory."""
  if dt is dtypes.bool: return "u8"
  if dt in _HALF: return "b16"
  if dt.is_float(): return f"f{dt.bits}"
  return ("u" if dt.is_unsigned() else "s") + str(dt.bits)


def _float_t(dt: DType) -> str: return {dtypes.float16: "f16", dtypes.bfloat16: "bf16"}.get(dt, f"f{dt.bits}")


def const_bits(value: Any, dt: DType) -> str:
  """An immediate holding exactly `value` in scalar dtype dt's register (ints canonical, floats as bits)."""
  if dt.is_int():
    v = int(value) & ((1 << (64 if dt.itemsize == 8 else 32)) - 1)  # narrow signed ints sign-extended to 32 bits
    return f"0x{v:016X}" if dt.itemsize == 8 else f"0x{v:08X}"
  with np.errstate(over="ignore"):
    if dt is dtypes.float16: return f"0x{int(np.array(value, np.float16).view(np.uint16)):04X}"
    if dt is dtypes.bfloat16: return f"0x{int(np.array(value, ml_dtypes.bfloat16).view(np.uint16)):04X}"
    if dt is dtypes.float32: return f"0f{struct.unpack('<I', struct.pack('<f', np.float32(value)))[0]:08X}"
  return f"0d{struct.unpack('<Q', struct.pack('<d', float(value)))[0]:016X}"


@dataclass(frozen=True)
class CudaKernel(RenderedKernel):
  """A rendered PTX `.entry` (`source`) and the grid and block it is launched with."""
  geometry: Geometry | None = None


class _Kernel:
  def __init__(self, linear: UOp, name: str, arch: str, fast_math: bool, loc_of: LocOf):
    self.uops, self.name, self.arch_num, self.fast_math, self.loc_of = linear.src, name, _arch_number(arch), fast_math, loc_of
    self.counts = {c: 0 for c in _CLASSES}
    self.labels = 0
    self.lines: list[str] = []
    self.arrays: list[str] = []
    self.r: dict[UOp, Any] = {}          # a scalar's register, or a tuple of lane registers
    self.closers: dict[UOp, list[str]] = {}  # what an END/ENDIF emits, set by its opener
    self.params = self._params()
    self.async_loads = {u.src[1] for u in self.uops if u.op is Ops.STORE and isinstance(u.arg, tuple) and u.arg[:1] == (ASYNC,)}

  # ---- registers, labels, diagnostics ----------------------------------------------------------------
  def reg(self, cls: str) -> str:
    n = self.counts[cls]
    self.counts[cls] = n + 1
    return f"{_CLASSES[cls][0]}{n}"

  def new(self, dt: DType) -> str: return self.reg(reg_class(dt))
  def label(self) -> str:
    self.labels += 1
    return f"$L{self.labels}"

  def emit(self, line: str) -> None: self.lines.append(line if line.endswith(":") else f"  {line};")
  def diag(self, u: UOp, message: str) -> Diagnostic: return error(self.loc_of(u), f"cuda: {message}")
  def fail(self, u: UOp, message: str) -> CompileError: return CompileError([self.diag(u, message)])

  def op1(self, instr: str, dt: DType, *xs: str) -> str:
    d = self.new(dt)
    self.emit(f"{instr} {', '.join((d,) + xs)}")
    return d

  # ---- checks ------------------------------------------------------------------------------------------
  def check(self) -> None:
    diags = []
    for u in self.uops:
      if u.op in _TRANSCENDENTAL and not self.fast_math and not (u.op is Ops.EXP2 and u.dtype.scalar in _ACCURATE_EXP2):
        diags.append(self.diag(u, f"{u.op.name} of {u.dtype.scalar.name} has only approximate PTX instructions, which miss "
                                  "the accuracy SPEC-NOTES asks for: Instruction Selection must decompose it first"))
      elif u.op not in _RENDERERS:
        lower = " (Instruction Selection must lower it first)" if u.op in GroupOp.Decomposed else ""
        diags.append(self.diag(u, f"{u.op.name} is not supported by the PTX renderer{lower}"))
      elif u.op is Ops.SPECIAL and not re.fullmatch(r"(gidx|lidx|idx)[012]", str(u.arg)):
        diags.append(self.diag(u, f"SPECIAL {u.arg!r}: CUDA has gidx0-2, lidx0-2 and idx0-2"))
    if diags: raise CompileError(diags)

  def _params(self) -> tuple[KernelParam, ...]:
    written = {_root(u.src[0]) for u in self.uops if u.op in (Ops.STORE, Ops.ATOMICADD)}
    buffers = sorted((u for u in self.uops if u.op is Ops.PARAM), key=lambda u: u.arg[0])
    vars_ = sorted((u for u in self.uops if u.op is Ops.DEFINE_VAR), key=lambda u: u.arg[0])
    for u in buffers:
      if not isinstance(u.dtype, PtrDType) or u.dtype.addrspace is not AddrSpace.GLOBAL:
        raise self.fail(u, "a kernel PARAM must be a pointer to global memory")
    return tuple(KernelParam(param_name(u), u.arg[0], "buffer", u.dtype, u in written) for u in buffers) + \
      tuple(KernelParam(u.arg[0], i, "var", dtypes.index, False, u.vmin, u.vmax) for i, u in enumerate(vars_, len(buffers)))

  def param_name(self, i: int) -> str: return f"{self.name}_param_{i}"

  # ---- the walk ----------------------------------------------------------------------------------------
  def render(self) -> str:
    self.check()
    for u in self.uops:
      if u.op not in _NO_CODE: _RENDERERS[u.op](self, u)
    decls = [f"  .reg {_CLASSES[c][1]} {_CLASSES[c][0]}<{n}>;" for c, n in self.counts.items() if n]
    params = ",\n".join(f"  .param {'.u64' if p.kind == 'buffer' else '.s64'} {self.param_name(i)}" for i, p in enumerate(self.params))
    return "\n".join([f".visible .entry {self.name}(", params, ")", "{", *decls, *self.arrays, *self.lines, "  ret;", "}", ""])

  # ---- lanes ---------------------------------------------------------------------------------------------
  def lanes(self, u: UOp) -> tuple[str, ...]:
    v = self.r[u]
    return v if isinstance(v, tuple) else (v,)

  def set_lanes(self, u: UOp, regs: list[str]) -> None: self.r[u] = regs[0] if u.dtype.count == 1 else tuple(regs)

  # ---- small-int canonical form and float compute types -----------------------------------------------
  def canonical(self, x: str, dt: DType) -> str:
    """Re-extend a narrow integer held in 32 bits after an op that may carry past its width."""
    if dt not in _SMALL_INTS: return x
    if dt.is_unsigned(): return self.op1("and.b32", dt, x, "0xFF" if dt.itemsize == 1 else "0xFFFF")
    return self.op1(f"cvt.s32.s{dt.bits}", dt, x)

  def to_f32(self, x: str, dt: DType) -> str:
    if dt is dtypes.float16: return self.op1("cvt.f32.f16", dtypes.float32, x)
    if dt is dtypes.bfloat16:  # bfloat16 is the top half of a float32
      wide = self.op1("cvt.u32.u16", dtypes.uint32, x)
      return self.op1("mov.b32", dtypes.float32, self.op1("shl.b32", dtypes.uint32, wide, "16"))
    return x

  def from_f32(self, f: str, dt: DType) -> str:
    if dt in _HALF: return self.op1(f"cvt.rn.{_float_t(dt)}.f32", dt, f)
    return f

  def compute_type(self, dt: DType) -> DType: return dtypes.float64 if dt is dtypes.float64 else dtypes.float32


def _arch_number(arch: str) -> int: return int(re.fullmatch(ARCH_PATTERN, arch).group(1))


def supported_arch(arch: str) -> bool:
  """sm_80 or later (sm_XY, or its arch-specific sm_XYa / family sm_XYf form)."""
  return re.fullmatch(ARCH_PATTERN, arch) is not None and _arch_number(arch) >= 80


def _root(u: UOp) -> UOp:
  while u.op in (Ops.INDEX, Ops.AFTER): u = u.src[0]
  return u


# ---- sources, threads, blocks -------------------------------------------------------------------------------
def _param(k: _Kernel, u: UOp) -> None:
  i = next(i for i, p in enumerate(k.params) if p.kind == "buffer" and p.slot == u.arg[0])
  d = k.reg("b64")
  k.emit(f"ld.param.u64 {d}, [{k.param_name(i)}]")
  k.emit(f"cvta.to.global.u64 {d}, {d}")
  k.r[u] = d


def _define_var(k: _Kernel, u: UOp) -> None:
  i = next(i for i, p in enumerate(k.params) if p.kind == "var" and p.name == u.arg[0])
  d = k.reg("b64")
  k.emit(f"ld.param.s64 {d}, [{k.param_name(i)}]")
  k.r[u] = d if reg_class(u.dtype) == "b64" else k.op1("cvt.u32.u64", u.dtype, d)


def _const(k: _Kernel, u: UOp) -> None:
  dt = u.dtype.scalar
  if dt is dtypes.bool:
    one = k.op1("mov.b32", dtypes.uint32, "1" if u.arg else "0")
    reg = k.op1("setp.ne.u32", dt, one, "0")
  else: reg = k.op1(f"mov.{'b' + str(dt.bits) if dt in _HALF else _mov_type(dt)}", dt, const_bits(u.arg, dt))
  k.set_lanes(u, [reg] * u.dtype.count)


def _mov_type(dt: DType) -> str:
  cls = reg_class(dt)
  return cls if cls in ("f32", "f64") else "b" + cls[1:]


class _RegArray:
  """A REG buffer whose every access is at a constant offset (a register tile's accumulators after
  Expand): one PTX register per element, read and written by `mov`. As a `.local` array it would rely
  on ptxas to promote it to registers, which ptxas does not always do (a 4 x 8 tile's 32 accumulators
  stayed in local memory: 128 bytes of stack frame, every update a local load and store)."""

  def __init__(self, dt: DType):
    self.dt, self.regs = dt, {}

  def reg(self, k: _Kernel, i: int) -> str:
    if i not in self.regs: self.regs[i] = k.new(self.dt)
    return self.regs[i]


@dataclass(frozen=True)
class _RegSlot:
  """An INDEX into a _RegArray: its elements from `offset` on."""
  array: _RegArray
  offset: int


def _in_registers(k: _Kernel, buf: UOp) -> bool:
  """A REG buffer of a non-bool dtype that is only ever indexed at constant offsets."""
  if buf.dtype.addrspace is not AddrSpace.REG or buf.dtype.base.scalar is dtypes.bool: return False
  return all(u.src[1].op is Ops.CONST for u in k.uops if u.op is Ops.INDEX and _root(u.src[0]) is buf)


def _buffer(k: _Kernel, u: UOp) -> None:
  dt = u.dtype
  if not isinstance(dt, PtrDType) or dt.addrspace is AddrSpace.GLOBAL or dt.size < 0:
    raise k.fail(u, f"BUFFER of dtype {dt}: only sized LOCAL/REG buffers are kernel arrays")
  if _in_registers(k, u):
    k.r[u] = _RegArray(dt.base.scalar)
    return
  space, prefix = (".shared", "temp") if dt.addrspace is AddrSpace.LOCAL else (".local", "acc")
  name = f"{prefix}{len(k.arrays)}"
  k.arrays.append(f"  {space} .align 16 .b8 {name}[{max(1, dt.size * dt.base.itemsize)}];")
  k.r[u] = k.op1("mov.u64", dtypes.uint64, name)


_SREG = {"gidx": "%ctaid", "lidx": "%tid"}


def _special(k: _Kernel, u: UOp) -> None:
  kind, axis = re.fullmatch(r"([a-z]+)(\d)", u.arg).groups()
  xyz = "xyz"[int(axis)]
  wide = reg_class(u.dtype) == "b64"
  if kind in _SREG:
    r = k.op1("mov.u32", dtypes.uint32, f"{_SREG[kind]}.{xyz}")
    k.r[u] = k.op1("cvt.u64.u32", u.dtype, r) if wide else r
    return
  group, size, item = (k.op1("mov.u32", dtypes.uint32, f"%{s}.{xyz}") for s in ("ctaid", "ntid", "tid"))
  if wide: idx = k.op1("add.s64", u.dtype, k.op1("mul.wide.u32", u.dtype, group, size), k.op1("cvt.u64.u32", u.dtype, item))
  else: idx = k.op1("mad.lo.s32", u.dtype, group, size, item)
  k.r[u] = idx
  bound = u.src[0]
  if bound.op is Ops.CONST and bound.arg % idx_local_size(bound) == 0: return  # every thread is inside
  skip = k.label()
  past = k.op1(f"setp.ge.{int_type(u.dtype)}", dtypes.bool, idx, cast_scalar(k, k.r[bound], bound.dtype, u.dtype))
  k.emit(f"@{past} bra {skip}")
  k.closers[u] = [f"{skip}:"]


def _range(k: _Kernel, u: UOp) -> None:
  i, top, done, p = k.new(u.dtype), k.label(), k.label(), k.new(dtypes.bool)
  k.emit(f"mov.{_mov_type(u.dtype)} {i}, 0")
  k.emit(f"{top}:")
  k.emit(f"setp.ge.{int_type(u.dtype)} {p}, {i}, {cast_scalar(k, k.r[u.src[0]], u.src[0].dtype, u.dtype)}")
  k.emit(f"@{p} bra {done}")
  k.r[u] = i
  k.closers[u] = [f"add.{int_type(u.dtype)} {i}, {i}, 1", f"bra.uni {top}", f"{done}:"]


def _if(k: _Kernel, u: UOp) -> None:
  end = k.label()
  k.emit(f"@!{k.r[u.src[0]]} bra {end}")
  k.closers[u] = [f"{end}:"]


def _close(k: _Kernel, u: UOp) -> None:
  for line in k.closers.pop(u.src[1] if u.op is Ops.END else u.src[0], []): k.emit(line)


def _barrier(k: _Kernel, u: UOp) -> None:
  if isinstance(u.arg, tuple) and u.arg[:1] == (ASYNC,): k.emit(f"cp.async.wait_group {u.arg[1]}")  # this thread's copies first
  k.emit("bar.sync 0")
def _after(k: _Kernel, u: UOp) -> None: k.r[u] = k.r[u.src[0]]


# ---- memory ---------------------------------------------------------------------------------------------------
_SPACE = {AddrSpace.GLOBAL: "global", AddrSpace.LOCAL: "shared", AddrSpace.REG: "local"}


def _index(k: _Kernel, u: UOp) -> None:
  if len(u.src) != 2 or not isinstance(u.src[0].dtype, PtrDType): raise k.fail(u, "INDEX must be INDEX(pointer, offset)")
  base, off = k.r[u.src[0]], u.src[1]
  size = u.src[0].dtype.base.itemsize
  if isinstance(base, _RegArray):
    k.r[u] = _RegSlot(base, int(off.arg))
    return
  if off.op is Ops.CONST:
    k.r[u] = k.op1("add.s64", dtypes.uint64, base, str(int(off.arg) * size))
    return
  wide = k.r[off] if reg_class(off.dtype) == "b64" else k.op1(f"cvt.{int_type(off.dtype)[0]}64.{int_type(off.dtype)}", dtypes.int64, k.r[off])
  k.r[u] = k.op1("mad.lo.s64", dtypes.uint64, wide, str(size), base)


def _access(k: _Kernel, u: UOp, value_dt: DType) -> tuple[str, str, str | None]:
  """(state space, address register, gate predicate or None) of a LOAD/STORE/ATOMICADD."""
  idx = u.src[0]
  if idx.op is not Ops.INDEX or not isinstance(idx.dtype, PtrDType): raise k.fail(u, f"{u.op.name} must go through an INDEX")
  if value_dt != idx.dtype.base and value_dt.scalar != idx.dtype.base:
    raise k.fail(u, f"{u.op.name} of {value_dt} through a pointer to {idx.dtype.base}")
  gate = u.src[2] if len(u.src) == 3 and u.src[2].op is not Ops.IF else None  # an IF source: already inside the IF
  return _SPACE[idx.dtype.addrspace], k.r[idx], (k.r[gate] if gate is not None else None)


def _address(reg: str, offset: int) -> str: return f"[{reg}+{offset}]" if offset else f"[{reg}]"


def _vector_width(dt: DType) -> int:
  """Lanes per ld/st .v2/.v4 (1: lane by lane): PTX vector accesses are at most 16 bytes."""
  n, size = dt.count, dt.scalar.itemsize
  return n if n in (2, 4) and dt.scalar is not dtypes.bool and n * size <= 16 else 1


def _packed(dt: DType) -> bool:
  """A vector of 2, 4 or 8 half-precision lanes: moved as 1, 2 or 4 32-bit words (ld/st .b32, .v2.b32,
  .v4.b32), each word split into or made from two 16-bit registers with `mov.b32 {lo, hi}`."""
  return dt.scalar in _HALF and dt.count in (2, 4, 8)


def _load(k: _Kernel, u: UOp) -> None:
  if u in k.async_loads: return  # the cp.async of its STORE reads the memory
  if len(u.src) not in (1, 3): raise k.fail(u, "LOAD must be LOAD(index) or LOAD(index, alt, gate)")
  space, addr, gate = _access(k, u, u.dtype)
  dt, n = u.dtype.scalar, u.dtype.count
  guard = f"@{gate} " if gate else ""
  if isinstance(addr, _RegSlot):  # a copy of each element: later stores overwrite the element's register
    out = [k.new(dt) for _ in range(n)]
    for j, d in enumerate(out):
      if gate: k.emit(f"mov.{_mov_type(dt)} {d}, {k.lanes(u.src[1])[j]}")
      k.emit(f"{guard}mov.{_mov_type(dt)} {d}, {addr.array.reg(k, addr.offset + j)}")
    k.set_lanes(u, out)
    return
  raw_dt = dtypes.uint32 if dt is dtypes.bool else dt
  out = [k.new(raw_dt) for _ in range(n)]
  if gate:
    for d, a in zip(out, k.lanes(u.src[1])):
      if dt is not dtypes.bool: k.emit(f"mov.{_mov_type(dt)} {d}, {a}")
  if isinstance(u.arg, tuple) and u.arg[:1] == (LDMATRIX,):  # a warp-wide matrix load (uopc.stages.tensor_cores)
    words = [k.new(dtypes.uint32) for _ in range(n // 2)]
    k.emit(f"ldmatrix.sync.aligned.m8n8.x{n // 2}{'.trans' if u.arg[1] else ''}.shared.b16 {{{', '.join(words)}}}, {_address(addr, 0)}")
    for j, w in enumerate(words): k.emit(f"mov.b32 {{{out[2 * j]}, {out[2 * j + 1]}}}, {w}")
    k.set_lanes(u, out)
    return
  if _packed(u.dtype) and not gate:
    words = [k.new(dtypes.uint32) for _ in range(n // 2)]
    dst = words[0] if len(words) == 1 else "{" + ", ".join(words) + "}"
    k.emit(f"ld.{space}{'' if len(words) == 1 else f'.v{len(words)}'}.b32 {dst}, {_address(addr, 0)}")
    for j, w in enumerate(words): k.emit(f"mov.b32 {{{out[2 * j]}, {out[2 * j + 1]}}}, {w}")
    k.set_lanes(u, out)
    return
  width = _vector_width(u.dtype)
  for j in range(0, n, width):
    regs = out[j:j + width]
    dst = regs[0] if width == 1 else "{" + ", ".join(regs) + "}"
    vec = "" if width == 1 else f".v{width}"
    k.emit(f"{guard}ld.{space}{vec}.{mem_type(dt)} {dst}, {_address(addr, j * dt.itemsize)}")
  if dt is dtypes.bool:  # bytes to predicates; a gated bool starts as its alt
    preds = []
    for d, a in zip(out, k.lanes(u.src[1]) if gate else out):
      p = k.new(dtypes.bool)
      if gate:
        k.emit(f"mov.pred {p}, {a}")
      k.emit(f"{guard}setp.ne.u32 {p}, {d}, 0")
      preds.append(p)
    out = preds
  k.set_lanes(u, out)


def _store(k: _Kernel, u: UOp) -> None:
  if len(u.src) not in (2, 3): raise k.fail(u, "STORE must be STORE(index, value) or STORE(index, value, gate)")
  value = u.src[1]
  space, addr, gate = _access(k, u, value.dtype)
  dt = value.dtype.scalar
  if isinstance(u.arg, tuple) and u.arg[:1] == (ASYNC,):  # an asynchronous copy (uopc.stages.tensor_cores)
    size, (src_space, src, fill) = dt.itemsize * value.dtype.count, _access(k, value, value.dtype)
    if (space, src_space, gate) != ("shared", "global", None) or size not in (4, 8, 16):
      raise k.fail(u, "an asynchronous copy moves 4, 8 or 16 bytes from global to shared memory, ungated")
    reads = f", {k.op1('selp.u32', dtypes.uint32, str(size), '0', fill)}" if fill else ""  # bytes read, the rest zeros
    k.emit(f"cp.async.{'cg' if size == 16 else 'ca'}.shared.global {_address(addr, 0)}, {_address(src, 0)}, {size}{reads}")
    if u.arg[1]: k.emit("cp.async.commit_group")
    return
  regs = list(k.lanes(value))
  guard = f"@{gate} " if gate else ""
  if isinstance(addr, _RegSlot):
    for j, r in enumerate(regs): k.emit(f"{guard}mov.{_mov_type(dt)} {addr.array.reg(k, addr.offset + j)}, {r}")
    return
  if dt is dtypes.bool: regs = [k.op1("selp.u32", dtypes.uint32, "1", "0", p) for p in regs]
  if _packed(value.dtype):
    words = [k.new(dtypes.uint32) for _ in range(len(regs) // 2)]
    for j, w in enumerate(words): k.emit(f"mov.b32 {w}, {{{regs[2 * j]}, {regs[2 * j + 1]}}}")
    src = words[0] if len(words) == 1 else "{" + ", ".join(words) + "}"
    k.emit(f"{guard}st.{space}{'' if len(words) == 1 else f'.v{len(words)}'}.b32 {_address(addr, 0)}, {src}")
    return
  width = _vector_width(value.dtype)
  for j in range(0, len(regs), width):
    src = regs[j] if width == 1 else "{" + ", ".join(regs[j:j + width]) + "}"
    k.emit(f"{guard}st.{space}{'' if width == 1 else f'.v{width}'}.{mem_type(dt)} {_address(addr, j * dt.itemsize)}, {src}")


_ATOMIC_TYPES = {dtypes.int32: "s32", dtypes.uint32: "u32", dtypes.uint64: "u64", dtypes.float32: "f32", dtypes.float64: "f64"}


def _atomic_add(k: _Kernel, u: UOp) -> None:
  value = u.src[1]
  if value.dtype not in _ATOMIC_TYPES: raise k.fail(u, f"ATOMICADD of {value.dtype} is not supported by the PTX renderer")
  space, addr, _ = _access(k, u, value.dtype)
  old = k.new(value.dtype)
  k.emit(f"atom.{space}.add.{_ATOMIC_TYPES[value.dtype]} {old}, [{addr}], {k.r[value]}")
  k.r[u] = old


# ---- vectors and bit casts ----------------------------------------------------------------------------------------
def _stack(k: _Kernel, u: UOp) -> None:
  if u.dtype.count != len(u.src): raise k.fail(u, f"STACK of {len(u.src)} values into {u.dtype}")
  k.set_lanes(u, [k.r[s] for s in u.src])


def _gep(k: _Kernel, u: UOp) -> None:
  lanes = u.arg if isinstance(u.arg, tuple) else (u.arg,)
  src = k.lanes(u.src[0])
  if len(lanes) != u.dtype.count or not all(isinstance(i, int) and 0 <= i < len(src) for i in lanes):
    raise k.fail(u, f"GEP {u.arg!r} out of the lanes of {u.src[0].dtype}")
  k.set_lanes(u, [src[i] for i in lanes])


def _bitcast(k: _Kernel, u: UOp) -> None:
  src = u.src[0]
  if src.dtype.count != u.dtype.count or src.dtype.itemsize != u.dtype.itemsize:
    raise k.fail(u, f"BITCAST from {src.dtype} to {u.dtype} must keep the lanes and the size in the PTX renderer")
  k.set_lanes(u, [_bitcast_scalar(k, x, src.dtype.scalar, u.dtype.scalar) for x in k.lanes(src)])


def _bitcast_scalar(k: _Kernel, x: str, src: DType, dst: DType) -> str:
  if src is dtypes.bool: return k.op1("selp.u32", dst, "1", "0", x)
  if dst is dtypes.bool: return k.op1("setp.ne.u32", dst, x, "0")
  s, d = reg_class(src), reg_class(dst)
  if s == "b16" and d == "b32": return k.op1(f"cvt.{'u32.u16' if dst.is_unsigned() else 's32.s16'}", dst, x)
  if s == "b32" and d == "b16": return k.op1("cvt.u16.u32", dst, x)
  if s == d: return k.canonical(x, dst)  # the same bits in the same register class (int8 <-> uint8 re-extends)
  return k.op1(f"mov.b{src.bits}", dst, x)


# ---- casts ----------------------------------------------------------------------------------------------------------
def _cast(k: _Kernel, u: UOp) -> None:
  src = u.src[0]
  if src.dtype.count != u.dtype.count: raise k.fail(u, f"CAST from {src.dtype} to {u.dtype} changes the lanes")
  k.set_lanes(u, [cast_scalar(k, x, src.dtype.scalar, u.dtype.scalar) for x in k.lanes(src)])


def cast_scalar(k: _Kernel, x: str, src: DType, dst: DType) -> str:
  if src is dst: return x
  if dst is dtypes.bool: return _to_bool(k, x, src)
  if src is dtypes.bool:
    one = "1" if dst.is_int() else const_bits(1.0, dst)
    zero = "0" if dst.is_int() else const_bits(0.0, dst)
    return k.op1(f"selp.{_mov_type(dst) if dst not in _HALF else 'b16'}", dst, one, zero, x)
  if src.is_int() and dst.is_int(): return _int_to_int(k, x, src, dst)
  if src is dtypes.bfloat16: return cast_scalar(k, k.to_f32(x, src), dtypes.float32, dst)
  if dst is dtypes.bfloat16: return _to_bf16(k, x, src)
  if dst.is_float():
    rnd = "" if dst.itemsize > src.itemsize and src.is_float() else ".rn"  # widening a float is exact
    return k.op1(f"cvt{rnd}.{_float_t(dst)}.{int_type(src) if src.is_int() else _float_t(src)}", dst, x)
  return k.canonical(k.op1(f"cvt.rzi.{int_type(dst)}.{_float_t(src)}", dst, x), dst)


def _to_bool(k: _Kernel, x: str, src: DType) -> str:
  if src in _HALF:  # zero or minus zero: every bit but the sign is clear (NaN is not)
    return k.op1("setp.ne.b16", dtypes.bool, k.op1("and.b16", src, x, "0x7FFF"), "0")
  if src.is_float(): return k.op1(f"setp.neu.{_float_t(src)}", dtypes.bool, x, const_bits(0.0, src))
  return k.op1(f"setp.ne.{int_type(src)}", dtypes.bool, x, "0")


def _int_to_int(k: _Kernel, x: str, src: DType, dst: DType) -> str:
  s, d = reg_class(src), reg_class(dst)
  if s == "b64" and d == "b32": x = k.op1("cvt.u32.u64", dst, x)
  elif s == "b32" and d == "b64": return k.op1(f"cvt.{int_type(src)[0]}64.{int_type(src)}", dst, x)
  return k.canonical(x, dst)


def _to_bf16(k: _Kernel, x: str, src: DType) -> str:
  """One rounding to bfloat16. From float32 (or float16, exact in float32) cvt.rn does it; from float64
  or an integer (sm_80 has no direct cvt), convert to float32 rounding to odd: toward zero, then set
  the last bit if that was inexact. A float32 rounded to odd has 16 bits more than bfloat16, so
  rounding it to nearest even gives the once-rounded result."""
  if src is dtypes.float16: src, x = dtypes.float32, k.op1("cvt.f32.f16", dtypes.float32, x)
  if src is not dtypes.float32:
    if k.arch_num >= 90: return k.op1(f"cvt.rn.bf16.{int_type(src) if src.is_int() else 'f64'}", dtypes.bfloat16, x)
    f = k.op1(f"cvt.rz.f32.{int_type(src) if src.is_int() else 'f64'}", dtypes.float32, x)
    back = k.op1(f"cvt.rzi.{int_type(src)}.f32" if src.is_int() else "cvt.f64.f32", src, f)
    inexact = k.op1(f"setp.ne.{int_type(src) if src.is_int() else 'f64'}", dtypes.bool, back, x)
    bits = k.op1("mov.b32", dtypes.uint32, f)
    k.emit(f"@{inexact} or.b32 {bits}, {bits}, 1")
    src, x = dtypes.float32, k.op1("mov.b32", dtypes.float32, bits)
  return k.op1("cvt.rn.bf16.f32", dtypes.bfloat16, x)


# ---- ALU -------------------------------------------------------------------------------------------------------------
def _alu(k: _Kernel, u: UOp) -> None:
  n = u.dtype.count
  if any(s.dtype.count != n for s in u.src): raise k.fail(u, f"{u.op.name} mixes vector widths")
  src_dt = (u.src[1] if u.op is Ops.WHERE else u.src[0]).dtype.scalar
  lanes = [tuple(k.lanes(s)[i] for s in u.src) for i in range(n)]
  k.set_lanes(u, [alu_scalar(k, u, src_dt, xs) for xs in lanes])


def alu_scalar(k: _Kernel, u: UOp, dt: DType, xs: tuple[str, ...]) -> str:
  op = u.op
  if op is Ops.WHERE: return _where(k, dt, *xs)
  if op in _SWAPPED: op, xs = _SWAPPED[op], (xs[1], xs[0])
  if dt is dtypes.bool: return _bool_alu(k, u, op, xs)
  if dt.is_int(): return _int_alu(k, u, op, dt, xs)
  return _float_alu(k, u, op, dt, xs)


_SWAPPED = {Ops.CMPGT: Ops.CMPLT}  # CMPGT(a, b) is CMPLT(b, a) (seed 000)


def _where(k: _Kernel, dt: DType, c: str, a: str, b: str) -> str:
  if dt is dtypes.bool:
    d = k.new(dt)
    k.emit(f"@{c} mov.pred {d}, {a}")
    k.emit(f"@!{c} mov.pred {d}, {b}")
    return d
  return k.op1(f"selp.{'b16' if dt in _HALF else _mov_type(dt)}", dt, a, b, c)


def _bool_alu(k: _Kernel, u: UOp, op: Ops, xs: tuple[str, ...]) -> str:
  b = dtypes.bool
  if op in (Ops.ADD, Ops.OR, Ops.MAX): return k.op1("or.pred", b, *xs)
  if op in (Ops.MUL, Ops.AND): return k.op1("and.pred", b, *xs)
  if op in (Ops.XOR, Ops.SUB, Ops.CMPNE): return k.op1("xor.pred", b, *xs)
  if op is Ops.NOT: return k.op1("not.pred", b, xs[0])
  if op is Ops.CMPLT: return k.op1("and.pred", b, k.op1("not.pred", b, xs[0]), xs[1])
  if op is Ops.CMPEQ: return k.op1("not.pred", b, k.op1("xor.pred", b, *xs))
  if op is Ops.CMPGE: return k.op1("not.pred", b, _bool_alu(k, u, Ops.CMPLT, xs))
  if op is Ops.CMPLE: return k.op1("not.pred", b, _bool_alu(k, u, Ops.CMPLT, (xs[1], xs[0])))
  raise k.fail(u, f"{op.name} of bool is not supported by the PTX renderer")


_INT_CMP = {Ops.CMPLT: "lt", Ops.CMPNE: "ne", Ops.CMPGE: "ge", Ops.CMPLE: "le", Ops.CMPEQ: "eq"}
# op -> instruction; {t}: s32/u32/s64/u64, {b}: b32/b64; whether the result can leave a narrow type's range
_INT_OPS = {Ops.ADD: ("add.{t}", True), Ops.SUB: ("sub.{t}", True), Ops.MUL: ("mul.lo.{t}", True),
            Ops.MULACC: ("mad.lo.{t}", True), Ops.IDIV: ("div.{t}", True), Ops.MOD: ("rem.{t}", False),
            Ops.MAX: ("max.{t}", False), Ops.AND: ("and.{b}", False), Ops.OR: ("or.{b}", False),
            Ops.XOR: ("xor.{b}", False), Ops.NOT: ("not.{b}", True), Ops.NEG: ("neg.{s}", True),
            Ops.SHL: ("shl.{b}", True), Ops.SHR: ("shr.{t}", False)}


def _int_alu(k: _Kernel, u: UOp, op: Ops, dt: DType, xs: tuple[str, ...]) -> str:
  t = int_type(dt)
  if op in _INT_CMP: return k.op1(f"setp.{_INT_CMP[op]}.{t}", dtypes.bool, *xs)
  if op is Ops.TRUNC: return xs[0]
  if op not in _INT_OPS: raise k.fail(u, f"{op.name} of {dt} is not supported by the PTX renderer")
  if op in (Ops.SHL, Ops.SHR) and dt.itemsize == 8: xs = (xs[0], k.op1("cvt.u32.u64", dtypes.uint32, xs[1]))
  instr, widens = _INT_OPS[op]
  bits = t[1:]
  d = k.op1(instr.format(t=t, b=f"b{bits}", s=f"s{bits}"), dt, *xs)
  return k.canonical(d, dt) if widens else d


# float compares: CMPGE/CMPLE are NOT of a CMPLT in seed 000, so true on NaN (unordered)
_FLOAT_CMP = {Ops.CMPLT: "lt", Ops.CMPNE: "neu", Ops.CMPGE: "geu", Ops.CMPLE: "leu", Ops.CMPEQ: "eq"}
_FLOAT_OPS = {Ops.ADD: "add.rn", Ops.SUB: "sub.rn", Ops.MUL: "mul.rn", Ops.DIV: "div.rn", Ops.RECIP: "rcp.rn",
              Ops.SQRT: "sqrt.rn", Ops.NEG: "neg", Ops.TRUNC: "cvt.rzi"}
_APPROX = {Ops.EXP2: "ex2.approx", Ops.LOG2: "lg2.approx", Ops.SIN: "sin.approx"}
_F16_NATIVE = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.NEG, Ops.TRUNC, Ops.MAX})  # exact .f16 instructions


def _native(k: _Kernel, op: Ops, dt: DType) -> bool:
  """Whether dt has its own instruction for op (else it is computed in float32 and rounded once)."""
  if dt in (dtypes.float32, dtypes.float64): return True
  if dt is dtypes.float16: return op in _F16_NATIVE or op in _FLOAT_CMP
  return op in (Ops.NEG, Ops.MAX) or (k.arch_num >= 90 and op in (Ops.ADD, Ops.SUB, Ops.MUL))


def _float_alu(k: _Kernel, u: UOp, op: Ops, dt: DType, xs: tuple[str, ...]) -> str:
  if not _native(k, op, dt):
    c = k.compute_type(dt)
    res = _float_alu(k, u, op, c, tuple(k.to_f32(x, dt) for x in xs))
    return res if op in _FLOAT_CMP else k.from_f32(res, dt)
  t = _float_t(dt)
  if op in _FLOAT_CMP: return k.op1(f"setp.{_FLOAT_CMP[op]}.{t}", dtypes.bool, *xs)
  if op is Ops.MAX: return _float_max(k, dt, *xs)
  if op is Ops.MULACC:  # ADD(MUL(a, b), c) rounds twice (seed 000); fast math fuses it (isel forms it then)
    if k.fast_math: return k.op1(f"fma.rn.{t}", dt, *xs)
    return k.op1(f"add.rn.{t}", dt, k.op1(f"mul.rn.{t}", dt, xs[0], xs[1]), xs[2])
  if op in _FLOAT_OPS:
    if op is Ops.TRUNC: return k.op1(f"cvt.rzi.{t}.{t}", dt, xs[0])
    return k.op1(f"{_FLOAT_OPS[op]}.{t}", dt, *xs)
  if op in _TRANSCENDENTAL: return _approx(k, op, dt, xs)
  raise k.fail(u, f"{op.name} of {dt} is not supported by the PTX renderer")


def _float_max(k: _Kernel, dt: DType, a: str, b: str) -> str:
  t = _float_t(dt)
  if dt is not dtypes.float64: return k.op1(f"max.NaN.{t}", dt, a, b)
  d = k.op1("max.f64", dt, a, b)  # max.f64 returns the other operand for one NaN; a + b is NaN then
  nan = k.op1("setp.nan.f64", dtypes.bool, a, b)
  k.emit(f"@{nan} add.rn.f64 {d}, {a}, {b}")
  return d


def _approx(k: _Kernel, op: Ops, dt: DType, xs: tuple[str, ...]) -> str:
  """The .approx instructions work on float32; only ex2.approx.f32 is accurate (see the module docstring)."""
  f32 = dtypes.float32
  fx = [x if dt is f32 else k.op1("cvt.rn.f32.f64", f32, x) for x in xs]
  if op is Ops.POW: res = k.op1("ex2.approx.f32", f32, k.op1("mul.rn.f32", f32, k.op1("lg2.approx.f32", f32, fx[0]), fx[1]))
  else: res = k.op1(f"{_APPROX[op]}.f32", f32, fx[0])
  return res if dt is f32 else k.op1("cvt.f64.f32", dt, res)


def _wmma(k: _Kernel, u: UOp) -> None:
  """mma.sync of the tensor core the arg names: the half-precision fragments go in pairs per 32-bit register."""
  tc = by_arg(u.arg)
  if tc is None: raise k.fail(u, f"WMMA {u.arg!r}: no such tensor core (PTX has {', '.join(str(t.arg) for t in CUDA_TENSOR_CORES)})")
  a, b, c = (k.lanes(s) for s in u.src)
  if (len(a), len(b), len(c)) != (len(tc.a), len(tc.b), len(tc.c)) or u.src[0].dtype.scalar != tc.input:
    raise k.fail(u, f"WMMA {tc}: fragments of {len(tc.a)}, {len(tc.b)} and {len(tc.c)} elements expected")
  def pairs(regs: tuple[str, ...]) -> list[str]:
    return [k.op1("mov.b32", dtypes.uint32, f"{{{lo}, {hi}}}") for lo, hi in zip(regs[::2], regs[1::2])]
  d = [k.new(tc.acc) for _ in c]
  def group(regs) -> str: return "{" + ", ".join(regs) + "}"
  types = f"{_float_t(tc.acc)}.{_float_t(tc.input)}.{_float_t(tc.input)}.{_float_t(tc.acc)}"
  k.emit(f"mma.sync.aligned.{tc.name}.row.col.{types} {group(d)}, {group(pairs(a))}, {group(pairs(b))}, {group(c)}")
  k.set_lanes(u, d)


_RENDERERS: dict[Ops, Callable[[_Kernel, UOp], None]] = {
  Ops.PARAM: _param, Ops.DEFINE_VAR: _define_var, Ops.CONST: _const, Ops.BUFFER: _buffer, Ops.SPECIAL: _special,
  Ops.RANGE: _range, Ops.END: _close, Ops.IF: _if, Ops.ENDIF: _close, Ops.BARRIER: _barrier, Ops.AFTER: _after,
  Ops.INDEX: _index, Ops.LOAD: _load, Ops.STORE: _store, Ops.ATOMICADD: _atomic_add, Ops.STACK: _stack, Ops.GEP: _gep,
  Ops.BITCAST: _bitcast, Ops.CAST: _cast, Ops.WMMA: _wmma, **{op: _alu for op in GroupOp.ALU - _ISEL_LOWERS},
  **{op: lambda k, u: None for op in _NO_CODE},
}


# ---- entry points ---------------------------------------------------------------------------------------------------
def render_kernel(linear: UOp, name: str, arch: str = RENDER_ARCH, fast_math: bool = False,
                  loc_of: LocOf | None = None) -> CudaKernel:
  """The PTX `.entry` of kernel `name` from its LINEAR, with its launch geometry; `loc_of` locates
  refused ops in the source."""
  if linear.op is not Ops.LINEAR: raise CompileError([error(None, f"cuda: expected a LINEAR, got {linear.op.name}")])
  if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name): raise CompileError([error(None, f"cuda: kernel name {name!r} is not a PTX identifier")])
  loc_of = loc_of or (lambda u: None)
  if not supported_arch(arch):
    raise CompileError([error(None, f"cuda: arch {arch!r} is not sm_80 or later (sm_XY, sm_XYa, sm_XYf)")])
  k = _Kernel(linear, name, arch, fast_math, loc_of)
  source = k.render()
  return CudaKernel(name, source, k.params, workgroup_geometry(linear, loc_of))


def render_module(kernels, arch: str = RENDER_ARCH) -> str:
  """The `.ptx` file: the module header, then every kernel's `.entry`."""
  head = f"//\n// Generated by uopc; do not edit.\n//\n\n.version {PTX_VERSION}\n.target {arch}\n.address_size 64\n"
  return head + "".join(f"\n{k.source}" for k in kernels)
