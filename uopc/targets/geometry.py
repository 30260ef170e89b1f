"""The launch geometry of a GPU kernel, from its SPECIALs: shared by the GPU renderers (AMDGPU's
`amdgpu-flat-work-group-size` attribute, the block size of `idx<n>` in PTX and AMDGPU) and the CUDA and
HIP launchers (the grid and block they launch, `size_expr`), so both sides agree by construction.

`gidx<n>` is the workgroup id along axis n (the grid is its bound), `lidx<n>` the work-item id in the
workgroup (the block is its bound), `idx<n>` a flat index: blocks of `idx_local_size` items, as many
as cover the bound, the items past the bound doing nothing.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable

from uopc.diagnostics import CompileError, Loc, error
from uopc.dtype import dtypes
from uopc.ops import Ops
from uopc.uop import UOp

IDX_BLOCK = 256       # work-items per workgroup for idx<n> when the bound does not make it smaller
MAX_WORKGROUP = 1024  # the most work-items a workgroup (CUDA: block) has on every GPU we target

Size = int | UOp  # a known size, or an index expression over DEFINE_VARs evaluated at launch


@dataclass(frozen=True)
class Geometry:
  grid: tuple[Size, Size, Size]   # workgroups along x, y, z
  block: tuple[Size, Size, Size]  # work-items per workgroup along x, y, z

  @property
  def max_flat_size(self) -> int:
    """The largest workgroup the kernel can be launched with: exact when the block is known."""
    if all(isinstance(b, int) for b in self.block): return max(1, math.prod(self.block))
    return MAX_WORKGROUP


def _size(u: UOp) -> Size: return u.arg if u.op is Ops.CONST else u


def idx_local_size(bound: UOp) -> int:
  return max(1, min(bound.arg, IDX_BLOCK)) if bound.op is Ops.CONST else IDX_BLOCK


def _blocks_to_cover(bound: UOp, size: int) -> Size:
  if bound.op is Ops.CONST: return -(-bound.arg // size)
  return bound.alu(Ops.ADD, UOp.const(dtypes.index, size - 1)).alu(Ops.IDIV, UOp.const(dtypes.index, size))


def workgroup_geometry(linear: UOp, loc_of: Callable[[UOp], Loc | None] = lambda u: None) -> Geometry:
  grid: list[Size] = [1, 1, 1]
  block: list[Size] = [1, 1, 1]
  seen: dict[int, tuple[str, UOp]] = {}  # axis -> (kind, first SPECIAL) per grid/block role
  for u in linear.src:
    if u.op is not Ops.SPECIAL: continue
    m = re.fullmatch(r"(gidx|lidx|idx)([0-2])", str(u.arg))
    if m is None: raise CompileError([error(loc_of(u), f"SPECIAL {u.arg!r} is not gidx<n>, lidx<n> or idx<n> with n in 0..2")])
    kind, axis, bound = m.group(1), int(m.group(2)), u.src[0]
    for role in (("grid",) if kind == "gidx" else ("block",) if kind == "lidx" else ("grid", "block")):
      key = (role, axis)
      if key in seen and seen[key][1] is not u:
        raise CompileError([error(loc_of(u), f"SPECIAL {u.arg} and {seen[key][1].arg} both set the {role} size along axis {axis}")])
      seen[key] = (kind, u)
    if kind == "gidx": grid[axis] = _size(bound)
    elif kind == "lidx": block[axis] = _size(bound)
    else:
      block[axis] = idx_local_size(bound)
      grid[axis] = _blocks_to_cover(bound, block[axis])
  geo = Geometry(tuple(grid), tuple(block))
  if all(isinstance(b, int) for b in geo.block) and math.prod(geo.block) > MAX_WORKGROUP:
    raise CompileError([error(None, f"a workgroup of {' x '.join(map(str, geo.block))} work-items is more than "
                                    f"the {MAX_WORKGROUP} a GPU workgroup can hold")])
  return geo


_C_BINARY = {Ops.ADD: "+", Ops.MUL: "*", Ops.IDIV: "/", Ops.MOD: "%", Ops.SUB: "-"}


def size_expr(size, var_names: dict[str, str]) -> str:
  """A launch size as a C int64_t expression over the entry's DEFINE_VAR arguments."""
  if isinstance(size, int): return f"INT64_C({size})"
  u: UOp = size
  if u.op is Ops.CONST: return f"INT64_C({int(u.arg)})"
  if u.op is Ops.DEFINE_VAR: return f"(int64_t){var_names[u.arg[0]]}"
  if u.op in _C_BINARY: return f"({size_expr(u.src[0], var_names)} {_C_BINARY[u.op]} {size_expr(u.src[1], var_names)})"
  if u.op is Ops.MAX:
    a, b = size_expr(u.src[0], var_names), size_expr(u.src[1], var_names)
    return f"({a} > {b} ? {a} : {b})"
  if u.op is Ops.CAST: return size_expr(u.src[0], var_names)
  raise CompileError([error(None, f"a launch size computed with {u.op.name} cannot be evaluated by the launcher")])


def launch_block(prefix: str, index: int, kernel, by_key: dict, offsets: dict[int, int], workspace_local: str,
                 on_error: str, indent: str, datas: dict[int, int] | None = None, data_local: str = "", shared: bool = False) -> list[str]:
  """C statements of a GPU launcher that launch `kernel` through `{prefix}__launch(functions[index], grid,
  block, stream, args)`: locals for its intermediate buffers (`workspace_local` formatted with `i` and
  `offset`: a pointer into the workspace, made a local so that the argument array can point at it) and
  for its constant data (`datas`: slot -> index in the library's data table; `data_local` formatted with
  `i` and `k`, the index: the device copy of that data), its arguments in signature order, its grid and
  block as C int64_t expressions over the entry's size arguments, and `on_error` (a statement) when the
  launch fails; each line starts with `indent`. With `shared`, the kernel's dynamic shared memory
  (`kernel.shared_bytes`) follows the block: `__launch(functions[index], grid, block, bytes, stream, args)`."""
  var_names = {a.key: a.c_name for a in by_key.values() if a.kind == "var"}
  datas = datas or {}
  locals_, actual = [], []
  for i, p in enumerate(kernel.params):
    if p.kind == "buffer" and p.slot in offsets:
      locals_.append(f"  {workspace_local.format(i=i, offset=offsets[p.slot])}")
      actual.append(f"ws{i}")
    elif p.kind == "buffer" and p.slot in datas:
      locals_.append(f"  {data_local.format(i=i, k=datas[p.slot])}")
      actual.append(f"c{i}")
    else: actual.append(by_key[("buffer", p.slot) if p.kind == "buffer" else ("var", p.name)].c_name)
  grid = ", ".join(size_expr(s, var_names) for s in kernel.geometry.grid)
  block = ", ".join(size_expr(s, var_names) for s in kernel.geometry.block)
  lines = [f"{{ /* {kernel.name} */", *locals_,
           f"  void* args[] = {{{', '.join(f'(void*)&{a}' for a in actual) or 'NULL'}}};",
           f"  const int64_t grid[3] = {{{grid}}}, block[3] = {{{block}}};",
           f"  status = {prefix}__launch(functions[{index}], grid, block, {f'{kernel.shared_bytes}, ' if shared else ''}stream, args);",
           f"  if (status != UOPC_OK) {on_error};", "}"]
  return [indent + line for line in lines]
