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
(The dtype-to-PTX-type mapping is uopc/targets/cuda/ptx_types.py; memory accesses, kernel arrays and
the tensor-core pipeline's ldmatrix and cp.async are uopc/targets/cuda/ptx_memory.py.)

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
from dataclasses import dataclass
from typing import Any, Callable

from uopc.diagnostics import CompileError, Diagnostic, Loc, error
from uopc.dtype import AddrSpace, DType, PtrDType, dtypes
from uopc.ops import FUSED, GroupOp, Ops
from uopc.stages.tensor_cores import ASYNC, CUDA_TENSOR_CORES, TF32_TENSOR_CORE, by_arg
from uopc.targets import param_name
from uopc.targets.cuda.ptx_memory import DYNAMIC_SHARED, _atomic_add, _buffer, _index, _load, _store, shared_layout
from uopc.targets.cuda.ptx_wgmma import WGMMA_ALIGN, WGMMA_ARCH, WGMMA_PTX_VERSION, accumulator_loads, before, is_wgmma, render_wgmma
from uopc.targets.cuda.ptx_types import _CLASSES, _HALF, _SMALL_INTS, _float_t, _mov_type, _root, const_bits, int_type, reg_class
from uopc.targets.geometry import Geometry, idx_local_size, workgroup_geometry
from uopc.targets.c.render import KernelParam, RenderedKernel
from uopc.uop import UOp

LocOf = Callable[[UOp], "Loc | None"]
RENDER_ARCH = "sm_80"   # the oldest arch the PTX runs on: max.NaN and cvt to bf16 need it
ARCH_PATTERN = r"sm_(\d+)[af]?"
PTX_VERSION = "7.8"     # the first PTX ISA with sm_90; every driver since CUDA 11.8 JIT-compiles it

_TRANSCENDENTAL = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.POW})
_ACCURATE_EXP2 = frozenset({dtypes.float16, dtypes.bfloat16, dtypes.float32})  # ex2.approx.f32 meets the bar for them
_NO_CODE = frozenset({Ops.GROUP, Ops.SINK, Ops.NOOP})
_ISEL_LOWERS = frozenset({Ops.THREEFRY, Ops.FLOORDIV, Ops.FLOORMOD})  # uopc.stages.isel decomposes them for cuda


@dataclass(frozen=True)
class CudaKernel(RenderedKernel):
  """A rendered PTX `.entry` (`source`), the grid and block it is launched with and the dynamic shared
  memory it needs (bytes; 0: none, its LOCAL buffers, if any, are static)."""
  geometry: Geometry | None = None
  shared_bytes: int = 0
  wgmma: bool = False  # it has warpgroup MMAs: sm_90a only


class _Kernel:
  def __init__(self, linear: UOp, name: str, arch: str, fast_math: bool, loc_of: LocOf):
    self.uops, self.name, self.arch_num, self.fast_math, self.loc_of = linear.src, name, arch_number(arch), fast_math, loc_of
    self.counts = {c: 0 for c in _CLASSES}
    self.labels = 0
    self.lines: list[str] = []
    self.arrays: list[str] = []
    self.r: dict[UOp, Any] = {}          # a scalar's register, or a tuple of lane registers
    self.closers: dict[UOp, list[str]] = {}  # what an END/ENDIF emits, set by its opener
    self.addresses: list[tuple[UOp | None, dict]] = [(None, {})]  # per open block (its opener): (pointer register,
                                         # offset) -> the address computed in it, valid until the block closes
    self.params = self._params()
    self.async_loads = {u.src[1] for u in self.uops if u.op is Ops.STORE and isinstance(u.arg, tuple) and u.arg[:1] == (ASYNC,)}
    self.wgmma = any(is_wgmma(u) for u in self.uops)  # warpgroup MMAs (uopc/targets/cuda/ptx_wgmma.py)
    self.wgmma_accs, self.wgmma_open, self.wgmma_pending, self.wgmma_last = accumulator_loads(self.uops), False, 0, None
    self.shared_align = WGMMA_ALIGN if self.wgmma else 16
    # LOCAL buffers in dynamic shared memory, if they need it
    self.shared_offsets, self.shared_bytes = shared_layout(self.uops, self.shared_align)
    self.max_negations = _max_negations(self.uops)

  def _close_block(self, opener: UOp) -> None:
    """Forget the addresses computed inside `opener`'s block (and any block still open inside it)."""
    if any(o is opener for o, _ in self.addresses):
      while self.addresses.pop()[0] is not opener: pass

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
      if u.op in (Ops.END, Ops.ENDIF): self._close_block(u.src[1] if u.op is Ops.END else u.src[0])
      if self.wgmma: before(self, u)
      if u.op not in _NO_CODE: _RENDERERS[u.op](self, u)
      if u.op in (Ops.RANGE, Ops.IF, Ops.SPECIAL): self.addresses.append((u, {}))
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


def arch_number(arch: str) -> int: return int(re.fullmatch(ARCH_PATTERN, arch).group(1))


def supported_arch(arch: str) -> bool:
  """sm_80 or later (sm_XY, or its arch-specific sm_XYa / family sm_XYf form)."""
  return re.fullmatch(ARCH_PATTERN, arch) is not None and arch_number(arch) >= 80



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
  if isinstance(u.arg, tuple) and u.arg[:1] == (ASYNC,):
    k.emit(f"cp.async.wait_group {u.arg[1]}")  # this thread's copies first
    if k.wgmma: k.emit("fence.proxy.async.shared::cta")  # written by the generic proxy, read by wgmma's async one
  k.emit("bar.sync 0")
def _after(k: _Kernel, u: UOp) -> None: k.r[u] = k.r[u.src[0]]


# ---- memory ---------------------------------------------------------------------------------------------------
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


def _max_negations(uops: tuple[UOp, ...]) -> frozenset[UOp]:
  """The signed 32-bit negations (NEG, MUL by -1, a vector's lanes too) that a signed MAX reads: each is written `not`
  then `add 1`, not `neg.s32` or a multiply. ptxas 13.0 for sm_90/sm_90a folds a chain of max.s32 (or min.s32, or the
  compare and select that make one) into three-input VIMNMX3 and drops the negation of an operand it folds into it:
  max(max(-a, -b), -c) came out as max(max(-a, b), -c) on an H100 (tinygrad's int min, -max(-x), and the max of
  -|x| gave positive values). It does not take this form for a negation (the add folds into VIADDMNMX instead);
  unsigned and 64-bit maxima are not affected."""
  out = set()
  for u in uops:
    if u.op is not Ops.MAX or int_type(u.dtype.scalar) != "s32" or not u.dtype.scalar.is_int(): continue
    for s in u.src:
      while s.op is Ops.GEP: s = s.src[0]
      if s.op is Ops.NEG or s.op is Ops.MUL and _minus_one(s) is not None: out.add(s)
  return frozenset(out)


def _minus_one(u: UOp) -> int | None:
  """Which source of MUL u is the constant -1 (a vector's: every lane), if one is."""
  def minus_one(s: UOp) -> bool:
    return s.op is Ops.CONST and s.arg == -1 or s.op is Ops.STACK and all(minus_one(x) for x in s.src)
  return next((i for i, s in enumerate(u.src) if minus_one(s)), None)


def _int_alu(k: _Kernel, u: UOp, op: Ops, dt: DType, xs: tuple[str, ...]) -> str:
  t = int_type(dt)
  if op in _INT_CMP: return k.op1(f"setp.{_INT_CMP[op]}.{t}", dtypes.bool, *xs)
  if op is Ops.TRUNC: return xs[0]
  if op not in _INT_OPS: raise k.fail(u, f"{op.name} of {dt} is not supported by the PTX renderer")
  if t == "s32" and u in k.max_negations:  # see _max_negations
    x = xs[0] if op is Ops.NEG else xs[1 - _minus_one(u)]
    return k.canonical(k.op1("add.s32", dt, k.op1("not.b32", dt, x), "1"), dt)
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
  if op is Ops.MULACC:  # ADD(MUL(a, b), c) rounds twice (seed 000); {"fused"} and fast math round once
    if k.fast_math or u.arg == FUSED: return k.op1(f"fma.rn.{t}", dt, *xs)
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
  """mma.sync of the tensor core the arg names: the half-precision fragments go in pairs per 32-bit register
  (a warpgroup MMA: uopc/targets/cuda/ptx_wgmma.py)."""
  if is_wgmma(u): return render_wgmma(k, u)
  tc = by_arg(u.arg)
  if tc is None: raise k.fail(u, f"WMMA {u.arg!r}: no such tensor core (PTX has {', '.join(str(t.arg) for t in (*CUDA_TENSOR_CORES, TF32_TENSOR_CORE))})")
  a, b, c = (k.lanes(s) for s in u.src)
  if (len(a), len(b), len(c)) != (len(tc.a), len(tc.b), len(tc.c)) or u.src[0].dtype.scalar != tc.input:
    raise k.fail(u, f"WMMA {tc}: fragments of {len(tc.a)}, {len(tc.b)} and {len(tc.c)} elements expected")
  def pairs(regs: tuple[str, ...]) -> list[str]:
    if tc.k_lanes == 1: return [k.op1("cvt.rna.tf32.f32", dtypes.uint32, r) for r in regs]  # a float32 each, read as tf32
    return [k.op1("mov.b32", dtypes.uint32, f"{{{lo}, {hi}}}") for lo, hi in zip(regs[::2], regs[1::2])]
  d = [k.new(tc.acc) for _ in c]
  def group(regs) -> str: return "{" + ", ".join(regs) + "}"
  t_in = "tf32" if tc.k_lanes == 1 else _float_t(tc.input)
  types = f"{_float_t(tc.acc)}.{t_in}.{t_in}.{_float_t(tc.acc)}"
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
  return CudaKernel(name, source, k.params, workgroup_geometry(linear, loc_of), k.shared_bytes, k.wgmma)


def module_arch(kernels) -> str:
  """The arch the module's PTX names: sm_90a where a kernel has warpgroup MMAs, else RENDER_ARCH."""
  return WGMMA_ARCH if any(getattr(k, "wgmma", False) for k in kernels) else RENDER_ARCH


def render_module(kernels, arch: str = RENDER_ARCH) -> str:
  """The `.ptx` file: the module header (with the dynamic shared array where a kernel uses it), then
  every kernel's `.entry`. A module with warpgroup MMAs is for sm_90a only (`module_arch`)."""
  arch, version = (WGMMA_ARCH, WGMMA_PTX_VERSION) if module_arch(kernels) == WGMMA_ARCH else (arch, PTX_VERSION)
  head = f"//\n// Generated by uopc; do not edit.\n//\n\n.version {version}\n.target {arch}\n.address_size 64\n"
  align = WGMMA_ALIGN if any(k.wgmma for k in kernels) else 16
  if any(k.shared_bytes for k in kernels): head += f"\n.extern .shared .align {align} .b8 {DYNAMIC_SHARED}[];\n"
  return head + "".join(f"\n{k.source}" for k in kernels)
