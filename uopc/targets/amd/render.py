"""`-t amd` kernels: the LLVM IR renderer for AMDGPU, with each kernel's launch geometry attached
for the HIP launcher (the launcher only sees RenderedKernel-shaped objects)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from uopc.diagnostics import Loc
from uopc.targets.geometry import Geometry, workgroup_geometry
from uopc.targets.c.render import RenderedKernel
from uopc.targets.llvm import render as llvm_render
from uopc.uop import UOp


@dataclass(frozen=True)
class AmdKernel:
  """A rendered AMDGPU kernel (`source` is its LLVM IR) and the grid/block it is launched with."""
  kernel: RenderedKernel
  geometry: Geometry

  @property
  def name(self) -> str: return self.kernel.name
  @property
  def source(self) -> str: return self.kernel.source
  @property
  def params(self): return self.kernel.params


def render_kernel(linear: UOp, name: str, loc_of: Callable[[UOp], Loc | None] = lambda u: None) -> AmdKernel:
  """The kernel's text does not depend on the arch: NAME.<arch>.o differ only by the target machine."""
  return AmdKernel(llvm_render.render_kernel(linear, name, "amdgcn", None, loc_of), workgroup_geometry(linear, loc_of))
