"""Memory in the PTX renderer: kernel arrays (REG and LOCAL BUFFERs), INDEX addresses, LOAD, STORE
and ATOMICADD, including the tensor-core pipeline's forms (warp-wide `ldmatrix` loads and `cp.async`
copies, uopc/stages/tensor_cores.py). A part of uopc/targets/cuda/ptx.py, whose `_Kernel` each function
takes; its module docstring states the register conventions.

Invariant: a REG buffer indexed only at constant offsets lives in registers (`_RegArray`), every other
BUFFER is a `.shared` (LOCAL) or `.local` (REG) array; vectors move in accesses of at most 16 bytes.
A kernel's LOCAL buffers are static `.shared` arrays while they total at most STATIC_SHARED_BYTES (each
rounded up to 16 bytes); past that they all live in the module's one dynamic shared array
(DYNAMIC_SHARED, `.extern`, declared by `render_module`), each at a 16-byte aligned offset in the order
the kernel declares them, and the launch passes their total (`shared_layout`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from uopc.dtype import AddrSpace, DType, PtrDType, dtypes
from uopc.ops import Ops
from uopc.stages.tensor_cores import ASYNC, LDMATRIX
from uopc.targets.cuda.ptx_types import _HALF, _mov_type, _root, int_type, mem_type, reg_class
from uopc.targets.cuda.target import STATIC_SHARED_BYTES
from uopc.uop import UOp

if TYPE_CHECKING:
  from uopc.targets.cuda.ptx import _Kernel


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


DYNAMIC_SHARED = "uopc_dynamic_shared"  # the module's dynamic shared memory (its size is the launch's)
SHARED_ALIGN = 16


def _array_bytes(dt: PtrDType) -> int: return max(1, dt.size * dt.base.itemsize)


def shared_layout(uops, align: int = SHARED_ALIGN) -> tuple[dict[UOp, int], int]:
  """({LOCAL BUFFER: its offset in the dynamic shared array}, their total bytes) when the kernel's LOCAL
  buffers need more than STATIC_SHARED_BYTES, else ({}, 0): they stay static arrays. Each starts at a
  multiple of `align` bytes."""
  offsets, total = {}, 0
  for u in uops:
    if u.op is Ops.BUFFER and isinstance(u.dtype, PtrDType) and u.dtype.addrspace is AddrSpace.LOCAL and u.dtype.size >= 0:
      offsets[u] = total
      total += -(-_array_bytes(u.dtype) // align) * align
  return (offsets, total) if total > STATIC_SHARED_BYTES else ({}, 0)


def _buffer(k: _Kernel, u: UOp) -> None:
  dt = u.dtype
  if not isinstance(dt, PtrDType) or dt.addrspace is AddrSpace.GLOBAL or dt.size < 0:
    raise k.fail(u, f"BUFFER of dtype {dt}: only sized LOCAL/REG buffers are kernel arrays")
  if _in_registers(k, u):
    k.r[u] = _RegArray(dt.base.scalar)
    return
  if u in k.shared_offsets:  # a part of the dynamic shared array
    base = k.op1("mov.u64", dtypes.uint64, DYNAMIC_SHARED)
    k.r[u] = k.op1("add.s64", dtypes.uint64, base, str(k.shared_offsets[u])) if k.shared_offsets[u] else base
    return
  space, prefix = (".shared", "temp") if dt.addrspace is AddrSpace.LOCAL else (".local", "acc")
  name = f"{prefix}{len(k.arrays)}"
  k.arrays.append(f"  {space} .align {k.shared_align if space == '.shared' else 16} .b8 {name}[{_array_bytes(dt)}];")
  k.r[u] = k.op1("mov.u64", dtypes.uint64, name)


_SPACE = {AddrSpace.GLOBAL: "global", AddrSpace.LOCAL: "shared", AddrSpace.REG: "local"}


@dataclass(frozen=True)
class _Address:
  """An INDEX into GLOBAL/LOCAL memory: a 64-bit address register and a constant byte displacement,
  accessed as `[reg+disp]`. Offsets of the form ADD(base, CONST c) (uopc.stages.address_offsets) share
  the register of `base`, computed once per block; c goes into the displacement."""
  reg: str
  disp: int = 0


def _register(k: _Kernel, addr) -> str:
  """An address as one register (an INDEX whose pointer is itself an INDEX)."""
  if not isinstance(addr, _Address): return addr
  return k.op1("add.s64", dtypes.uint64, addr.reg, str(addr.disp)) if addr.disp else addr.reg


def _index(k: _Kernel, u: UOp) -> None:
  if len(u.src) != 2 or not isinstance(u.src[0].dtype, PtrDType): raise k.fail(u, "INDEX must be INDEX(pointer, offset)")
  base, off = k.r[u.src[0]], u.src[1]
  size = u.src[0].dtype.base.itemsize
  if isinstance(base, _RegArray):
    k.r[u] = _RegSlot(base, int(off.arg))
    return
  base, disp = _register(k, base), 0
  if off.op is Ops.ADD and off.src[1].op is Ops.CONST: off, disp = off.src[0], int(off.src[1].arg) * size
  if off.op is Ops.CONST:
    k.r[u] = _Address(base, disp + int(off.arg) * size)
    return
  if (reg := next((d[(base, off)] for _, d in k.addresses if (base, off) in d), None)) is None:
    reg = k.addresses[-1][1][(base, off)] = _scaled(k, base, off, size)
  k.r[u] = _Address(reg, disp)


def _scaled(k: _Kernel, base: str, off: UOp, size: int) -> str:
  """base + off * size in a 64-bit register."""
  if off.dtype in (dtypes.int32, dtypes.uint32):  # a 32-bit offset (uopc.stages.index_width): widened by the multiply-add
    return k.op1(f"mad.wide.{int_type(off.dtype)}", dtypes.uint64, k.r[off], str(size), base)
  wide = k.r[off] if reg_class(off.dtype) == "b64" else k.op1(f"cvt.{int_type(off.dtype)[0]}64.{int_type(off.dtype)}", dtypes.int64, k.r[off])
  return k.op1("mad.lo.s64", dtypes.uint64, wide, str(size), base)


def _access(k: _Kernel, u: UOp, value_dt: DType) -> tuple[str, str, str | None]:
  """(state space, address register, gate predicate or None) of a LOAD/STORE/ATOMICADD."""
  idx = u.src[0]
  if idx.op is not Ops.INDEX or not isinstance(idx.dtype, PtrDType): raise k.fail(u, f"{u.op.name} must go through an INDEX")
  if value_dt != idx.dtype.base and value_dt.scalar != idx.dtype.base:
    raise k.fail(u, f"{u.op.name} of {value_dt} through a pointer to {idx.dtype.base}")
  gate = u.src[2] if len(u.src) == 3 and u.src[2].op is not Ops.IF else None  # an IF source: already inside the IF
  return _SPACE[idx.dtype.addrspace], k.r[idx], (k.r[gate] if gate is not None else None)


def _address(addr: _Address, offset: int) -> str:
  disp = addr.disp + offset
  return f"[{addr.reg}+{disp}]" if disp else f"[{addr.reg}]"


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
  if isinstance(addr, _RegSlot) and u in k.wgmma_accs:  # a warpgroup MMA works on the elements' registers in place
    k.set_lanes(u, [addr.array.reg(k, addr.offset + j) for j in range(n)])
    return
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
    for j, r in enumerate(regs):
      if (d := addr.array.reg(k, addr.offset + j)) != r: k.emit(f"{guard}mov.{_mov_type(dt)} {d}, {r}")  # in place: nothing
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
  k.emit(f"atom.{space}.add.{_ATOMIC_TYPES[value.dtype]} {old}, {_address(addr, 0)}, {k.r[value]}")
  k.r[u] = old
