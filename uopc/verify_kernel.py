"""The verifier's rules for the kernel-level ops, a part of uopc/verify.py (whose module docstring states
how rules work): memory (LOAD, STORE and ATOMICADD, with the tensor-core pipeline's ldmatrix loads and
asynchronous copies, and their BARRIER waits) and ordering (RANGE, END, IF/ENDIF, SPECIAL, GROUP).
"""
from __future__ import annotations

import re
from typing import Iterator

from uopc.dtype import AddrSpace, dtypes
from uopc.ops import AxisType, Ops
from uopc.stages.tensor_cores import ASYNC, LDMATRIX
from uopc.uop import UOp
from uopc.verify_util import EFFECTS, _fmt, _is_device, _is_int, _is_int_scalar, _known


# ---- memory -------------------------------------------------------------------------------------------
def _check_gate(u: UOp, gate: UOp) -> Iterator[str]:
  if gate.dtype.scalar is not dtypes.bool: yield f"{u.op.name} gate must be bool, got {gate.dtype}"


def _check_load(u: UOp) -> Iterator[str]:
  src = u.src[0]
  if len(u.src) == 2: yield "LOAD takes (index) or (index, alt, gate), got 2 sources"
  if src.dtype is dtypes.void: yield f"LOAD of a {src.op.name}, which has no value"
  elif src.dtype.is_ptr():
    if u.dtype.scalar is not src.dtype.base: yield f"LOAD through {src.dtype} gives {src.dtype.base}, not {u.dtype}"
  elif u.dtype is not src.dtype: yield f"LOAD (a copy) has dtype {u.dtype}, its source {src.dtype}"
  if len(u.src) == 3:
    if u.src[1].dtype is not u.dtype: yield f"LOAD alternative value is {u.src[1].dtype}, the load {u.dtype}"
    yield from _check_gate(u, u.src[2])
    if u.src[2].dtype.count not in (1, u.dtype.count): yield f"LOAD gate is {u.src[2].dtype}: one bool, or one per lane of {u.dtype}"
  a = u.arg
  if isinstance(a, tuple) and a[:1] == (LDMATRIX,):
    if len(a) != 2 or not isinstance(a[1], bool): yield f"LOAD arg must be ({LDMATRIX!r}, trans), got {a!r}"
    if u.dtype.scalar.itemsize != 2 or u.dtype.count not in (2, 4, 8): yield f"{LDMATRIX} loads 2, 4 or 8 16-bit lanes, not {u.dtype}"
    if not (src.dtype.is_ptr() and src.dtype.addrspace is AddrSpace.LOCAL): yield f"{LDMATRIX} reads LOCAL memory"
    return
  if a is not None and not (isinstance(a, tuple) and 1 <= len(a) <= 2 and _is_device(a[0])
                            and (len(a) == 1 or a[1] is None or isinstance(a[1], AddrSpace))):
    yield f"LOAD arg must be (device, addrspace), got {a!r}"


def _check_store(u: UOp) -> Iterator[str]:
  dst, val = u.src[0], u.src[1]
  if val.dtype is dtypes.void: yield f"STORE value is a {val.op.name}, which has no value"
  elif dst.dtype.is_ptr():
    if val.dtype.scalar is not dst.dtype.base: yield f"STORE of {val.dtype} into {dst.dtype}: the value must be {dst.dtype.base}"
  elif dst.dtype is dtypes.void: yield f"STORE target is a {dst.op.name}, not a buffer"
  elif val.dtype is not dst.dtype: yield f"STORE of {val.dtype} into a {dst.dtype} buffer"
  elif _known(dst.shape) and _known(val.shape) and dst.shape != val.shape:
    yield f"STORE value shape {_fmt(val.shape)} differs from the buffer's shape {_fmt(dst.shape)}"
  if len(u.src) == 3:
    yield from _check_gate(u, u.src[2])
    if u.src[2].dtype.count != 1: yield f"STORE gate is {u.src[2].dtype}: a store takes one bool"
  if u.arg is not None:
    if not (isinstance(u.arg, tuple) and len(u.arg) == 2 and u.arg[0] == ASYNC and isinstance(u.arg[1], bool)):
      yield f"STORE arg must be ({ASYNC!r}, commit) (an asynchronous copy) or none, got {u.arg!r}"
    elif not (dst.dtype.is_ptr() and dst.dtype.addrspace is AddrSpace.LOCAL and val.op is Ops.LOAD and val.src[0].dtype.is_ptr()
              and val.src[0].dtype.addrspace is AddrSpace.GLOBAL and val.dtype.scalar.itemsize * val.dtype.count in (4, 8, 16)):
      yield "an asynchronous STORE copies 4, 8 or 16 bytes LOADed from GLOBAL memory into LOCAL memory"
    elif len(val.src) == 3 and not all(x.op is Ops.CONST and x.arg == 0 for x in (val.src[1].src if val.src[1].op is Ops.STACK else (val.src[1],))):
      yield "a gated asynchronous copy fills zeros: its LOAD's alternative must be 0"


def _check_barrier(u: UOp) -> Iterator[str]:
  a = u.arg
  if a is not None and not (isinstance(a, tuple) and len(a) == 2 and a[0] == ASYNC and isinstance(a[1], int) and a[1] >= 0):
    yield f"BARRIER arg must be ({ASYNC!r}, groups of copies still in flight) or none, got {a!r}"


def _check_atomicadd(u: UOp) -> Iterator[str]:
  dst, val = u.src
  if not dst.dtype.is_ptr(): yield f"ATOMICADD target must be a pointer, got {dst.dtype}"
  elif val.dtype is not dst.dtype.base: yield f"ATOMICADD of {val.dtype} into {dst.dtype}"
  if u.dtype not in (dtypes.void, val.dtype): yield f"ATOMICADD has dtype {u.dtype}, expected void or {val.dtype}"


# ---- ordering -----------------------------------------------------------------------------------------
def _check_loop_bound(u: UOp) -> Iterator[str]:
  b = u.src[0]
  if not _is_int_scalar(b.dtype): yield f"{u.op.name} bound must be an integer scalar, got {b.dtype}"
  elif u.dtype is not b.dtype: yield f"{u.op.name} has dtype {u.dtype}, its bound {b.dtype}"
  elif b.op is Ops.CONST and _is_int(b.arg) and b.arg < 0: yield f"{u.op.name} bound {b.arg} is negative"


def _check_range(u: UOp) -> Iterator[str]:
  yield from _check_loop_bound(u)
  a = u.arg
  if not (isinstance(a, tuple) and len(a) == 2 and _is_int(a[0]) and isinstance(a[1], AxisType)):
    yield f"RANGE arg must be (axis_id, AxisType), got {a!r}"


SPECIAL_NAME = re.compile(r"(gidx|lidx|idx)[0-9]+")


def _check_special(u: UOp) -> Iterator[str]:
  yield from _check_loop_bound(u)
  if not (isinstance(u.arg, str) and SPECIAL_NAME.fullmatch(u.arg)):
    yield f"SPECIAL name must be gidx<n>, lidx<n> or idx<n>, got {u.arg!r}"


def _check_end(u: UOp) -> Iterator[str]:
  body, rng = u.src
  if rng.op is not Ops.RANGE: yield f"END must close a RANGE, got {rng.op.name}"
  if body.dtype is not dtypes.void: yield f"END body must be {EFFECTS}, got {body.op.name}"


def _sources_are_effects(u: UOp) -> Iterator[str]:
  for i, s in enumerate(u.src):
    if s.dtype is not dtypes.void: yield f"{u.op.name} source {i} is {s.op.name}, not {EFFECTS}"


def _check_if(u: UOp) -> Iterator[str]:
  yield from _check_gate(u, u.src[0])
  if len(u.src) == 2 and u.src[1].op is not Ops.BARRIER: yield f"IF dependency must be a BARRIER, got {u.src[1].op.name}"


def _check_endif(u: UOp) -> Iterator[str]:
  if u.src[0].op is not Ops.IF: yield f"ENDIF must close an IF, got {u.src[0].op.name}"


def _is_void(u: UOp) -> Iterator[str]:
  if u.dtype is not dtypes.void: yield f"{u.op.name} has no value: its dtype is void, got {u.dtype}"
