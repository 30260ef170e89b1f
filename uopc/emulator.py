"""The reference emulator: executes a linearized kernel (a LINEAR UOp) with numpy.

The threads of a workgroup run in lock step: every value is a numpy array over the threads (shape
(T,) for a scalar, (T, n) for a vector of n lanes), and control flow keeps an *active* mask, so a
RANGE whose bound differs between threads, or an IF, runs only the threads it should. Workgroups
run one after the other. SPECIAL `lidx<n>` and `idx<n>` are thread dims of the workgroup, `gidx<n>`
workgroup dims; a CPU pipeline's SPECIAL (a loop there) is executed the same way.

Semantics follow SPEC-NOTES exactly, independently of any renderer: integers wrap, IDIV truncates,
MOD takes the dividend's sign, SHR is arithmetic on signed types; float16/bfloat16 arithmetic is done
in float32 and rounded once to nearest even; MAX propagates NaN; CMPNE is true for NaN.

What a real device would do wrong silently is reported as a located diagnostic (a CompileError):
out-of-bounds loads and stores, reads of LOCAL memory no thread wrote, a LOCAL location written by
one thread and then read or written by another with no BARRIER in between, a BARRIER reached by only
some threads, and the undefined behaviour of SPEC-NOTES (division by zero, shifts by the bit width or
more) on the threads that execute it; a float-to-int cast out of range where its value is used
(`uopc.emulator_poison`: a WHERE's discarded arm is not a use).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from ml_dtypes import bfloat16

from uopc import emulator_poison
from uopc.diagnostics import CompileError, Loc, error
from uopc.dtype import AddrSpace, DType, PtrDType, dtypes
from uopc.ops import FUSED, Ops
from uopc.stages.tensor_cores import ASYNC, LDMATRIX, WARP_SIZE, by_arg, ldmatrix_sources
from uopc.stages.warpgroup_mma import WARPGROUP, Operand, warpgroup_arg
from uopc.wgmma_layout import byte_addresses

NP_DTYPES = {"bool": np.bool_, "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
             "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64,
             "float16": np.float16, "bfloat16": bfloat16, "float32": np.float32, "float64": np.float64,
             "index": np.int64}
LocOf = Callable[[object], "Loc | None"]


def np_dtype(dt: DType) -> np.dtype: return np.dtype(NP_DTYPES[dt.scalar.name])


class EmulationError(CompileError):
  """A run-time fault of the emulated program (one located diagnostic)."""


# ---- rounding and arithmetic ---------------------------------------------------------------------------
def _is_half(dt: DType) -> bool: return dt.scalar in (dtypes.float16, dtypes.bfloat16)


def round_to(x: np.ndarray, dt: DType) -> np.ndarray:
  """A float64/float32 array rounded once to nearest even into float dtype `dt`."""
  if dt.scalar is not dtypes.bfloat16: return x.astype(np_dtype(dt))
  # float64 -> bfloat16 in one rounding: round to float32 *to odd* first (truncate, then set the last
  # bit when inexact); with 16 spare bits, the second rounding cannot double-round.
  x = np.asarray(x, np.float64)
  with np.errstate(all="ignore"):
    f = x.astype(np.float32)
    away = np.isfinite(x) & (np.abs(f.astype(np.float64)) > np.abs(x))
    f = np.where(away, np.nextafter(f, np.float32(0)), f)
    inexact = np.isfinite(x) & (f.astype(np.float64) != x)
    bits = f.view(np.uint32) | inexact.astype(np.uint32)
  return bits.view(np.float32).astype(bfloat16)


def _compute(x: np.ndarray, dt: DType) -> np.ndarray:
  """A float operand in its arithmetic type: float16/bfloat16 widen to float32."""
  return x.astype(np.float32) if _is_half(dt) else x


_FLOAT_FNS = {
  Ops.ADD: np.add, Ops.SUB: np.subtract, Ops.MUL: np.multiply, Ops.DIV: np.divide, Ops.NEG: np.negative,
  Ops.MAX: np.maximum, Ops.TRUNC: np.trunc, Ops.SQRT: np.sqrt, Ops.EXP2: np.exp2, Ops.LOG2: np.log2, Ops.SIN: np.sin,
  Ops.POW: np.power, Ops.RECIP: lambda x: np.divide(x.dtype.type(1), x), Ops.MULACC: lambda a, b, c: a * b + c,
}
def _fused(a, b, c):
  """a * b + c rounded once: float32 (and float16/bfloat16, computed in it) through float64, where the
  product is exact and the sum rounds once before the float32 rounding (a double rounding that differs
  from a true fused multiply-add only in ties of the last bit); float64 through longdouble (x86: 64-bit
  mantissa, likewise)."""
  wide = np.longdouble if a.dtype == np.float64 else np.float64
  return (a.astype(wide) * b.astype(wide) + c.astype(wide)).astype(a.dtype)


def _tf32(v: np.ndarray) -> np.ndarray:
  """float32 values rounded to tf32 (10 mantissa bits) to nearest, ties away from zero (cvt.rna.tf32.f32)."""
  bits = v.astype(np.float32).view(np.uint32)
  finite = (bits & 0x7F800000) != 0x7F800000
  rounded = ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).astype(np.uint32)
  return np.where(finite, rounded, bits).view(np.float32)


_INT_FNS = {
  Ops.ADD: np.add, Ops.SUB: np.subtract, Ops.MUL: np.multiply, Ops.NEG: np.negative, Ops.MAX: np.maximum,
  Ops.AND: np.bitwise_and, Ops.OR: np.bitwise_or, Ops.XOR: np.bitwise_xor, Ops.NOT: np.invert,
  Ops.TRUNC: lambda x: x, Ops.MULACC: lambda a, b, c: a * b + c,
}
_BOOL_FNS = {Ops.ADD: np.logical_or, Ops.OR: np.logical_or, Ops.MAX: np.logical_or, Ops.MUL: np.logical_and,
             Ops.AND: np.logical_and, Ops.XOR: np.logical_xor, Ops.NOT: np.logical_not}
_COMPARE_FNS = {Ops.CMPLT: np.less, Ops.CMPNE: np.not_equal, Ops.CMPGT: np.greater, Ops.CMPGE: np.greater_equal,
                Ops.CMPLE: np.less_equal, Ops.CMPEQ: np.equal}


def trunc_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """C division: toward zero; MIN / -1 wraps to MIN. `b` must be nonzero."""
  if a.dtype.kind == "u": return np.floor_divide(a, b).astype(a.dtype)  # no -1 to compare with (numpy < 2.4 raises)
  neg_one = b == -1
  b = np.where(neg_one, 1, b).astype(a.dtype)
  q = np.floor_divide(a, b)
  q = q + ((np.remainder(a, b) != 0) & ((a < 0) != (b < 0))).astype(a.dtype)
  return np.where(neg_one, np.negative(a), q).astype(a.dtype)


def trunc_mod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """C remainder: the sign of the dividend; a % -1 is 0."""
  if a.dtype.kind == "u": return np.remainder(a, b).astype(a.dtype)
  return (a - trunc_div(a, b) * np.where(b == -1, -1, b).astype(a.dtype)).astype(a.dtype)


def threefry2x32(x: np.ndarray, key: np.ndarray) -> np.ndarray:
  """Threefry-2x32 with 20 rounds on uint64 words, as SPEC-NOTES defines it."""
  m32 = np.uint64(0xFFFFFFFF)
  def rotl(v, r): return ((v << np.uint64(r)) | (v >> np.uint64(32 - r))) & m32
  k0, k1 = key & m32, key >> np.uint64(32)
  ks = (k1, k0 ^ k1 ^ np.uint64(0x1BD11BDA), k0)
  x0, x1 = (x & m32) + ks[2] & m32, ((x >> np.uint64(32)) + ks[0]) & m32
  rot = ((13, 15, 26, 6), (17, 29, 16, 24))
  for i in range(5):
    for r in rot[i % 2]:
      x0 = (x0 + x1) & m32
      x1 = rotl(x1, r) ^ x0
    x0 = (x0 + ks[i % 3]) & m32
    x1 = (x1 + ks[(i + 1) % 3] + np.uint64(i + 1)) & m32
  return (x1 << np.uint64(32)) | x0


# ---- memory --------------------------------------------------------------------------------------------
@dataclass
class _Memory:
  """A buffer: GLOBAL arguments are shared by all threads; LOCAL is per workgroup and tracked for
  initialisation and races; REG is per thread (data has one row per thread)."""
  name: str
  space: AddrSpace
  data: np.ndarray
  written: np.ndarray | None = None   # LOCAL: was the element ever written
  writer: np.ndarray | None = None    # LOCAL: the thread that wrote it last
  epoch: np.ndarray | None = None     # LOCAL: the barrier epoch of that write
  pending: np.ndarray | None = None   # LOCAL: an asynchronous copy to it may not have landed

  @property
  def size(self) -> int: return self.data.shape[-1]


def _local(name: str, dt: DType, size: int) -> _Memory:
  return _Memory(name, AddrSpace.LOCAL, np.zeros(size, np_dtype(dt)), np.zeros(size, bool),
                 np.full(size, -1, np.int64), np.full(size, -1, np.int64), np.zeros(size, bool))


@dataclass
class _Block:
  """An open RANGE or IF: where it starts, a loop's bound, and the active threads outside it."""
  opener: object
  pc: int
  bound: np.ndarray | None
  outer: np.ndarray


@dataclass
class Launch:
  """The geometry the SPECIALs of a kernel ask for: workgroup dims (gidx) and thread dims (lidx, idx)."""
  groups: dict[str, int] = field(default_factory=dict)
  threads: dict[str, int] = field(default_factory=dict)

  @property
  def num_threads(self) -> int: return math.prod(self.threads.values())


# ---- the emulator --------------------------------------------------------------------------------------
def emulate(linear, buffers: dict[int, np.ndarray], variables: dict[str, int] | None = None,
            loc_of: LocOf | None = None) -> None:
  """Run the kernel `linear` (Ops.LINEAR) once over its whole grid. `buffers` maps each pointer
  PARAM's slot to a 1-D numpy array of its element dtype, which is read and written in place;
  `variables` gives each DEFINE_VAR's value. Faults raise EmulationError located by `loc_of`."""
  if linear.op is not Ops.LINEAR: raise ValueError(f"emulate needs a LINEAR, got {linear.op.name}")
  _Emulator(linear.src, buffers, dict(variables or {}), loc_of or (lambda u: None)).run()


class _Emulator:
  def __init__(self, prog: tuple, buffers: dict[int, np.ndarray], variables: dict[str, int], loc_of: LocOf):
    self.prog, self.loc_of, self.variables = prog, loc_of, variables
    self.globals = {slot: _Memory(f"slot {slot}", AddrSpace.GLOBAL, arr) for slot, arr in buffers.items()}
    self.group: dict[str, int] = {}
    self.jump = self._match_blocks()
    self.launch = self._launch()

  # ---- diagnostics ----
  def _loc(self, u) -> Loc | None:
    for v in (u, *u.src[:1]):
      if (loc := self.loc_of(v)) is not None: return loc
    return None

  def fail(self, u, message: str) -> EmulationError:
    return EmulationError([error(self._loc(u), message)])

  def _who(self, lane: int) -> str:
    t = f"thread {lane}" if self.launch.threads else "the kernel"
    where = ", ".join(f"{k}={v}" for k, v in self.group.items())
    return f"{t} of workgroup {where}" if self.launch.groups else t

  # ---- set-up ----
  def _match_blocks(self) -> dict[int, int]:
    """Opener position <-> closer position, for the jumps of loops and IFs."""
    at = {u: i for i, u in enumerate(self.prog)}
    jump: dict[int, int] = {}
    for i, u in enumerate(self.prog):
      if u.op in (Ops.END, Ops.ENDIF):
        opener = u.src[1] if u.op is Ops.END else u.src[0]
        if opener not in at: raise self.fail(u, f"{u.op.name} closes a block that is not in the program")
        jump[at[opener]], jump[i] = i, at[opener]
    return jump

  def _uniform(self, u) -> int:
    """A launch bound (CONST, DEFINE_VAR and integer arithmetic on them), the same for every thread."""
    if u.op is Ops.CONST: return int(u.arg)
    if u.op is Ops.DEFINE_VAR: return self._variable(u)
    xs = [np.array([self._uniform(s)], np.int64) for s in u.src]
    return int(self._alu(u, xs, np.ones(1, bool))[0])

  def _launch(self) -> Launch:
    launch = Launch()
    for u in self.prog:
      if u.op is not Ops.SPECIAL: continue
      name = str(u.arg)
      dims = launch.groups if name.startswith("gidx") else launch.threads
      if not name.startswith(("gidx", "lidx", "idx")): raise self.fail(u, f"unknown SPECIAL '{name}'")
      if name in dims: raise self.fail(u, f"SPECIAL '{name}' is defined twice")
      dims[name] = self._uniform(u.src[0])
    return launch

  def _variable(self, u) -> int:
    name, lo, hi = u.arg
    if name not in self.variables: raise self.fail(u, f"no value for DEFINE_VAR '{name}'")
    v = int(self.variables[name])
    if not lo <= v <= hi: raise self.fail(u, f"DEFINE_VAR '{name}' = {v} is outside its range [{lo}, {hi}]")
    return v

  # ---- running ----
  def run(self) -> None:
    groups = self.launch.groups
    for g in np.ndindex(*groups.values()):
      self.group = dict(zip(groups, g))
      self._run_group()

  def _run_group(self) -> None:
    names, shape = list(self.launch.threads), tuple(self.launch.threads.values())
    self.T = math.prod(shape)
    self.lanes = dict(zip(names, (a.ravel().astype(np.int64) for a in np.indices(shape)))) if names else {}
    self.values: dict = {}
    self.poison: dict = {}  # value -> (mask of its poisoned lanes, the CAST they come from): uopc.emulator_poison
    self.fresh = None       # the out-of-range lanes of the CAST just evaluated
    self.active = np.ones(self.T, bool)
    self.stack: list[_Block] = []
    self.barrier_epoch = 0
    self.in_flight: list = []   # committed groups of asynchronous copies to LOCAL memory not yet waited for, oldest first
    self.open_group: list = []  # copies started since the last commit
    pc = 0
    while pc < len(self.prog):
      pc = self._step(pc, self.prog[pc])

  def _step(self, pc: int, u) -> int:
    op = u.op
    if self.poison and (hit := emulator_poison.used(u, self.poison, self.active)) is not None:
      origin = self.poison[hit[0]][1]
      raise self.fail(origin, f"undefined behaviour: CAST of an out-of-range float to {origin.dtype}, whose value {op.name} uses "
                              f"({self._who(hit[1])})")
    if op is Ops.RANGE: return self._enter_loop(pc, u)
    if op is Ops.END: return self._end_loop(pc, u)
    if op is Ops.IF:
      gate = self.values[u.src[0]].astype(bool)
      self.values[u] = gate
      self.stack.append(_Block(u, pc, None, self.active))
      self.active = self.active & gate
      return pc + 1 if self.active.any() else self.jump[pc]
    if op is Ops.ENDIF:
      self.active = self.stack.pop().outer
      return pc + 1
    self.values[u] = self._eval(u)
    if self.poison or self.fresh is not None:
      if (p := emulator_poison.propagate(u, self.values, self.poison, self.fresh)) is not None: self.poison[u] = p
      else: self.poison.pop(u, None)
      self.fresh = None
    return pc + 1

  def _enter_loop(self, pc: int, u) -> int:
    bound = self.values[u.src[0]]
    i = np.zeros(self.T, np.int64)
    self.values[u] = i
    inside = self.active & (i < bound)
    if not inside.any(): return self.jump[pc] + 1
    self.stack.append(_Block(u, pc, bound, self.active))
    self.active = inside
    return pc + 1

  def _end_loop(self, pc: int, u) -> int:
    if u.src[1].op is Ops.SPECIAL: return pc + 1  # a thread index, not a loop, in the emulator
    loop = self.stack[-1]
    i = self.values[loop.opener] + 1
    self.values[loop.opener] = i
    inside = loop.outer & (i < loop.bound)
    if inside.any():
      self.active = inside
      return loop.pc + 1
    self.stack.pop()
    self.active = loop.outer
    return pc + 1

  # ---- one value ----
  def _eval(self, u):
    op, dt = u.op, u.dtype
    if op is Ops.CONST: return self._const(u)
    if op is Ops.DEFINE_VAR: return np.full(self.T, self._variable(u), np.int64)
    if op is Ops.SPECIAL:
      name = str(u.arg)
      return np.full(self.T, self.group[name], np.int64) if name in self.launch.groups else self.lanes[name]
    if op is Ops.PARAM: return self._param(u)
    if op is Ops.BUFFER: return self._buffer(u)
    if op is Ops.AFTER: return self.values[u.src[0]]
    if op is Ops.INDEX:
      mem, base = self.values[u.src[0]]
      return (mem, base + self.values[u.src[1]].astype(np.int64))
    if op is Ops.LOAD: return self._load(u)
    if op is Ops.STORE: return self._store(u)
    if op is Ops.BARRIER: return self._barrier(u)
    if op in (Ops.GROUP, Ops.NOOP, Ops.SINK): return None
    if op is Ops.STACK: return np.stack([self.values[s] for s in u.src], axis=1)
    if op is Ops.GEP:
      lanes = u.arg if isinstance(u.arg, tuple) else (u.arg,)
      v = self.values[u.src[0]][:, list(lanes)]
      return v[:, 0] if dt.count == 1 else v
    if op is Ops.CAST: return self._cast(u, self.values[u.src[0]], u.src[0].dtype, dt)
    if op is Ops.BITCAST: return self._bitcast(self.values[u.src[0]], dt)
    if op is Ops.WMMA: return self._wmma(u)
    return self._alu(u, [self.values[s] for s in u.src], self.active)

  def _wmma(self, u):
    """D = A @ B + C per warp (32 consecutive threads, lidx0 fastest, as on the GPU) from the lanes'
    fragments (uopc.stages.tensor_cores), computed in float64 (the products of half-precision inputs
    exactly) and rounded once to the accumulator's dtype; the hardware rounds its partial sums in its
    own way, so results agree to a few ULP."""
    if (spec := warpgroup_arg(u.arg)) is not None: return self._wgmma(u, spec.n, spec.input, spec.a, spec.b)
    tc = by_arg(u.arg)
    if tc is None: raise self.fail(u, f"WMMA {u.arg!r}: no such tensor core")
    if not self.active.all(): raise self.fail(u, "WMMA reached by only some threads: every lane of a warp must take part")
    warp, lane, _ = self._warps(u)
    group, pair, kpair = lane // 4, 2 * (lane % 4), tc.k_lanes * (lane % 4)
    (m, n, k), warps = tc.dims, self.T // WARP_SIZE
    a, b, c = (np.zeros((warps,) + shape) for shape in ((m, k), (k, n), (m, n)))
    for mat, frag, offsets, (row, col) in ((a, 0, tc.a, (group, kpair)), (b, 1, tc.b, (kpair, group)), (c, 2, tc.c, (group, pair))):
      for i, (dr, dc) in enumerate(offsets):
        v = self.values[u.src[frag]][:, i]
        mat[warp, row + dr, col + dc] = (_tf32(v) if tc.k_lanes == 1 and frag < 2 else v).astype(np.float64)
    d = round_to(a @ b + c, u.dtype)
    return np.stack([d[warp, group + dr, pair + dc] for dr, dc in tc.c], axis=1)

  def _wgmma(self, u, n: int, in_dt: str, a: Operand, b: Operand):
    """A warpgroup MMA (uopc.stages.warpgroup_mma): the 4 warps of each warpgroup (128 consecutive threads)
    compute D(64 x n) = A(64 x 16) @ B(16 x n) + D, reading A and B from LOCAL memory where wgmma's
    descriptors point (uopc.wgmma_layout: its own reading of the PTX layouts, not the compiler's) from the
    address the INDEX gives (the same for the whole warpgroup); thread (warp w, lane l) holds D's element
    (16 w + 8 ((r // 2) % 2) + l // 4, 8 (r // 4) + 2 (l % 4) + r % 2) in its accumulator r. Float64 from
    the exact inputs, rounded once (as `_wmma`); every element read counts as read by every thread of the
    warpgroup (uninitialised, in-flight and race checks)."""
    if not self.active.all(): raise self.fail(u, "warpgroup WMMA reached by only some threads: all 128 of a warpgroup must take part")
    warp, lane, _ = self._warps(u)
    if self.T % WARPGROUP: raise self.fail(u, f"a warpgroup WMMA needs workgroups of whole warpgroups of {WARPGROUP} threads")
    if u.dtype.count != n // 2 or u.src[2].dtype.count != n // 2:
      raise self.fail(u, f"a warpgroup WMMA of n = {n} has {n // 2} accumulators")
    group, w, r = warp // 4, warp % 4, np.arange(n // 2)
    rows = 16 * w[:, None] + 8 * ((r // 2) % 2) + lane[:, None] // 4
    cols = 8 * (r // 4) + 2 * (lane[:, None] % 4) + r % 2
    mats = []
    for src, op, extent in ((0, a, 64), (1, b, n)):
      mem, offs = self.values[u.src[src]]
      if mem.space is not AddrSpace.LOCAL or mem.data.dtype != np_dtype(getattr(dtypes, in_dt)):
        raise self.fail(u, f"a warpgroup WMMA reads {in_dt} from LOCAL memory, not {mem.data.dtype} from '{mem.name}'")
      start = np.zeros(self.T // WARPGROUP, np.int64)
      start[group] = offs
      if (start[group] != offs).any(): raise self.fail(u, f"a warpgroup WMMA's threads give different addresses of '{mem.name}'")
      size = mem.data.itemsize
      try: cells = np.stack([byte_addresses(op, int(s) * size, extent, size) // size for s in start])  # (groups, extent, 16)
      except ValueError as e: raise self.fail(u, f"warpgroup WMMA on '{mem.name}': {e}") from None
      if (cells < 0).any() or (cells >= mem.size).any():
        raise self.fail(u, f"out-of-bounds warpgroup WMMA from '{mem.name}': it reads past its {mem.size} elements")
      self._check_local_read(u, mem, np.arange(self.T), cells[group].reshape(self.T, -1))
      mats.append(mem.data[cells].astype(np.float64))
    d = np.zeros((self.T // WARPGROUP, 64, n))
    d[group[:, None], rows, cols] = self.values[u.src[2]]
    d = round_to(mats[0] @ mats[1].transpose(0, 2, 1) + d, u.dtype)
    return d[group[:, None], rows, cols]

  def _warps(self, u) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each thread's warp and lane (32 consecutive threads of a workgroup, lidx0 fastest, as on the GPU),
    and the thread index of every (warp, lane)."""
    names = sorted(n for n in self.launch.threads if n.startswith("lidx"))
    if len(names) != len(self.launch.threads) or self.T % WARP_SIZE:
      raise self.fail(u, f"{u.op.name} needs workgroups (lidx) of whole warps of {WARP_SIZE} threads")
    tid, stride = np.zeros(self.T, np.int64), 1
    for name in names:
      tid, stride = tid + self.lanes[name] * stride, stride * self.launch.threads[name]
    warp, lane = tid // WARP_SIZE, tid % WARP_SIZE
    where = np.zeros((self.T // WARP_SIZE, WARP_SIZE), np.int64)
    where[warp, lane] = np.arange(self.T)
    return warp, lane, where

  def _ldmatrix(self, u):
    """A warp-wide matrix load (uopc.stages.tensor_cores): each lane's elements from the rows whose
    addresses other lanes of its warp give."""
    if not self.active.all(): raise self.fail(u, f"{LDMATRIX} reached by only some threads: every lane of a warp must take part")
    mem, offs = self.values[u.src[0]]
    warp, lane, where = self._warps(u)
    src = np.array([ldmatrix_sources(x, u.dtype.count, u.arg[1]) for x in range(WARP_SIZE)])  # (32, count, 2)
    cells = offs[where[warp[:, None], src[lane][:, :, 0]]] + src[lane][:, :, 1]
    if (cells < 0).any() or (cells >= mem.size).any():
      raise self.fail(u, f"out-of-bounds {LDMATRIX} from '{mem.name}': a row address is past its {mem.size} elements")
    self._check_local_read(u, mem, np.arange(self.T), cells)
    return mem.data[cells]

  def _const(self, u):
    shape = (self.T,) if u.dtype.count == 1 else (self.T, u.dtype.count)
    with np.errstate(all="ignore"):
      if _is_half(u.dtype): return np.full(shape, round_to(np.array(float(u.arg)), u.dtype))
      return np.full(shape, u.arg, np_dtype(u.dtype))

  def _param(self, u):
    slot = u.arg[0]
    if slot not in self.globals: raise self.fail(u, f"no buffer for PARAM slot {slot} ('{u.arg[1]}')")
    mem = self.globals[slot]
    mem.name = str(u.arg[1])
    want = np_dtype(u.dtype.base)
    if mem.data.dtype != want: raise self.fail(u, f"buffer '{mem.name}' holds {mem.data.dtype}, the program reads {u.dtype.base}")
    return (mem, np.zeros(self.T, np.int64))

  def _buffer(self, u):
    dt: PtrDType = u.dtype
    name = str(u.arg[1]) if isinstance(u.arg, tuple) and len(u.arg) > 1 else "buffer"
    if dt.addrspace is AddrSpace.LOCAL: mem = _local(name, dt.base, dt.size)
    else: mem = _Memory(name, dt.addrspace, np.zeros((self.T, dt.size), np_dtype(dt.base)))
    return (mem, np.zeros(self.T, np.int64))

  # ---- memory ----
  def _access(self, u, gate_pos: int, count: int):
    """(memory, offsets, lanes) of a LOAD/STORE: the threads that do access, after the bounds check."""
    mem, offs = self.values[u.src[0]]
    on = self.active.copy()
    if len(u.src) > gate_pos: on &= self.values[u.src[gate_pos]].astype(bool)
    lanes = np.flatnonzero(on)
    bad = lanes[(offs[lanes] < 0) | (offs[lanes] + count > mem.size)]
    if bad.size:
      lane = int(bad[0])
      what = "load from" if u.op is Ops.LOAD else "store to"
      raise self.fail(u, f"out-of-bounds {what} '{mem.name}': {self._who(lane)} accesses element {int(offs[lane])}"
                         f"{f' (+{count} lanes)' if count > 1 else ''}, but it has {mem.size} elements")
    return mem, offs, lanes

  def _cells(self, offs: np.ndarray, lanes: np.ndarray, count: int) -> np.ndarray:
    return offs[lanes][:, None] + np.arange(count)[None, :]

  def _load(self, u):
    if isinstance(u.arg, tuple) and u.arg[:1] == (LDMATRIX,): return self._ldmatrix(u)
    dt = u.dtype
    if len(u.src) == 3 and u.src[2].dtype.count > 1: return self._masked_load(u)
    mem, offs, lanes = self._access(u, 2, dt.count)
    out = np.array(self.values[u.src[1]]) if len(u.src) == 3 else np.zeros((self.T,) + ((dt.count,) if dt.count > 1 else ()), np_dtype(dt))
    cells = self._cells(offs, lanes, dt.count)
    if mem.space is AddrSpace.LOCAL: self._check_local_read(u, mem, lanes, cells)
    got = mem.data[lanes[:, None], cells] if mem.space is AddrSpace.REG else mem.data[cells]
    out[lanes] = got[:, 0] if dt.count == 1 else got
    return out

  def _masked_load(self, u):
    """A vector LOAD with a gate per lane: each lane reads (and is bounds-checked) only where its gate is set."""
    mem, offs = self.values[u.src[0]]
    gates = np.asarray(self.values[u.src[2]]).astype(bool) & self.active[:, None]
    out = np.array(self.values[u.src[1]])
    for j in range(u.dtype.count):
      lanes = np.flatnonzero(gates[:, j])
      cells = offs[lanes] + j
      if (bad := lanes[(cells < 0) | (cells >= mem.size)]).size:
        raise self.fail(u, f"out-of-bounds load from '{mem.name}': {self._who(int(bad[0]))} accesses element {int(offs[bad[0]]) + j}"
                           f" (lane {j} of a masked load), but it has {mem.size} elements")
      if mem.space is AddrSpace.LOCAL: self._check_local_read(u, mem, lanes, cells[:, None])
      out[lanes, j] = mem.data[lanes, cells] if mem.space is AddrSpace.REG else mem.data[cells]
    return out

  def _store(self, u):
    value = self.values[u.src[1]]
    count = u.src[1].dtype.count
    mem, offs, lanes = self._access(u, 2, count)
    cells = self._cells(offs, lanes, count)
    vals = value[lanes].reshape(len(lanes), count)
    if mem.space is AddrSpace.LOCAL: self._track_local_write(u, mem, lanes, cells)
    if mem.space is AddrSpace.REG: mem.data[lanes[:, None], cells] = vals
    else: mem.data[cells] = vals
    if isinstance(u.arg, tuple) and u.arg[:1] == (ASYNC,):  # in flight until a BARRIER (ASYNC, n) with n later groups
      mem.pending[cells] = True
      self.open_group.append((mem, cells))
      if u.arg[1]: self.in_flight, self.open_group = self.in_flight + [self.open_group], []
    return None

  def _check_local_read(self, u, mem: _Memory, lanes: np.ndarray, cells: np.ndarray) -> None:
    if mem.pending[cells].any():
      row, col = np.argwhere(mem.pending[cells])[0]
      raise self.fail(u, f"read of LOCAL memory '{mem.name}' in flight: {self._who(int(lanes[row]))} reads element "
                         f"{int(cells[row, col])}, which an asynchronous copy has not been waited for")
    unwritten = ~mem.written[cells]
    if unwritten.any():
      row, col = np.argwhere(unwritten)[0]
      raise self.fail(u, f"read of uninitialised LOCAL memory '{mem.name}': {self._who(int(lanes[row]))} reads element "
                         f"{int(cells[row, col])}, which no thread has written")
    self._check_race(u, mem, lanes, cells, "reads")

  def _check_race(self, u, mem: _Memory, lanes: np.ndarray, cells: np.ndarray, verb: str) -> None:
    other = (mem.epoch[cells] == self.barrier_epoch) & (mem.writer[cells] != lanes[:, None]) & (mem.writer[cells] >= 0)
    if other.any():
      row, col = np.argwhere(other)[0]
      cell = int(cells[row, col])
      raise self.fail(u, f"missing BARRIER: {self._who(int(lanes[row]))} {verb} element {cell} of LOCAL '{mem.name}', "
                         f"which thread {int(mem.writer[cell])} wrote with no BARRIER in between")

  def _track_local_write(self, u, mem: _Memory, lanes: np.ndarray, cells: np.ndarray) -> None:
    self._check_race(u, mem, lanes, cells, "writes")
    flat, owner = cells.ravel(), np.repeat(lanes, cells.shape[1])
    uniq, first = np.unique(flat, return_index=True)
    if len(uniq) != len(flat):  # two threads store to one element in the same instruction
      dup = next(i for i in range(len(flat)) if first[np.searchsorted(uniq, flat[i])] != i)
      raise self.fail(u, f"missing BARRIER: threads {int(owner[first[np.searchsorted(uniq, flat[dup])]])} and "
                         f"{int(owner[dup])} both write element {int(flat[dup])} of LOCAL '{mem.name}' at once")
    mem.written[flat], mem.writer[flat], mem.epoch[flat] = True, owner, self.barrier_epoch

  def _barrier(self, u):
    if not self.active.all():
      raise self.fail(u, "BARRIER reached by only some threads of the workgroup (inside divergent control flow)")
    if isinstance(u.arg, tuple) and u.arg[:1] == (ASYNC,):
      done, self.in_flight = self.in_flight[:len(self.in_flight) - u.arg[1]], self.in_flight[len(self.in_flight) - u.arg[1]:]
      for mem, cells in (x for group in done for x in group): mem.pending[cells] = False
    self.barrier_epoch += 1
    return None

  # ---- arithmetic ----
  def _ub(self, u, bad: np.ndarray, on: np.ndarray, what: str) -> None:
    hit = np.flatnonzero(np.broadcast_to(bad, on.shape[:1] + bad.shape[1:]).reshape(len(on), -1).any(axis=1) & on)
    if hit.size: raise self.fail(u, f"undefined behaviour: {what} ({self._who(int(hit[0]))})")

  def _alu(self, u, xs: list, on: np.ndarray):
    op, dt = u.op, u.dtype
    src_dt = (u.src[1] if op is Ops.WHERE else u.src[0]).dtype.scalar
    with np.errstate(all="ignore"):
      if op is Ops.WHERE: return np.where(xs[0], xs[1], xs[2])
      if op in _COMPARE_FNS: return _COMPARE_FNS[op](*[_compute(x, src_dt) for x in xs])
      if src_dt.is_float() and op is Ops.MULACC and u.arg == FUSED: res = _fused(*[_compute(x, src_dt) for x in xs])
      elif src_dt.is_float() and op in _FLOAT_FNS: res = _FLOAT_FNS[op](*[_compute(x, src_dt) for x in xs])
      else: res = None
      if res is not None:
        return round_to(res, dt) if _is_half(dt) else res.astype(np_dtype(dt))
      if src_dt.is_bool() and op in _BOOL_FNS: return _BOOL_FNS[op](*xs)
      if src_dt.is_int(): return self._int_alu(u, op, src_dt, xs, on)
    raise self.fail(u, f"the emulator cannot run {op.name} on {src_dt}")

  def _int_alu(self, u, op: Ops, dt: DType, xs: list, on: np.ndarray):
    if op in _INT_FNS: return _INT_FNS[op](*xs).astype(xs[0].dtype)
    if op in (Ops.IDIV, Ops.MOD, Ops.FLOORDIV, Ops.FLOORMOD):
      a, b = xs
      self._ub(u, b == 0, on, f"{op.name} by zero")
      b = np.where(b == 0, 1, b).astype(b.dtype)
      fn = {Ops.IDIV: trunc_div, Ops.MOD: trunc_mod, Ops.FLOORDIV: np.floor_divide, Ops.FLOORMOD: np.remainder}[op]
      return fn(a, b).astype(a.dtype)
    if op in (Ops.SHL, Ops.SHR):
      a, b = xs
      bits = dt.itemsize * 8
      bad = (b < 0) | (b >= bits)
      self._ub(u, bad, on, f"{op.name} by {int(np.asarray(b)[np.nonzero(bad)][0]) if bad.any() else 0} on {dt}, not in [0, {bits})")
      b = np.where(bad, 0, b).astype(a.dtype)
      return (np.left_shift if op is Ops.SHL else np.right_shift)(a, b).astype(a.dtype)
    if op is Ops.THREEFRY and dt is dtypes.uint64: return threefry2x32(*xs)
    raise self.fail(u, f"the emulator cannot run {op.name} on {dt}")

  def _cast(self, u, x: np.ndarray, src: DType, dst: DType) -> np.ndarray:
    with np.errstate(all="ignore"):
      if dst.scalar is dtypes.bool: return _compute(x, src) != 0
      if dst.is_float():
        return round_to(x.astype(np.float64), dst) if _is_half(dst) else x.astype(np_dtype(dst))
      if src.is_float():
        t = np.trunc(x.astype(np.float64))
        lo, hi = dst.scalar.min, dst.scalar.max
        inside = (t >= lo) & (t <= hi)
        if not inside.all(): self.fresh = ~inside & emulator_poison.fit(self.active, inside.shape)
        return np.where(inside, t, 0).astype(np_dtype(dst))
      return x.astype(np_dtype(dst))

  @staticmethod
  def _bitcast(x: np.ndarray, dst: DType) -> np.ndarray:
    raw = np.ascontiguousarray(x).reshape(len(x), -1).view(np.uint8)
    out = raw.view(np_dtype(dst))
    return out[:, 0] if dst.count == 1 else out

