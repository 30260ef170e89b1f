"""`-t llvm`: kernels rendered to LLVM IR and compiled by llvmlite for the host CPU, linked with the C
target's launcher into libNAME.so (see host.py). THREAD axes run as on `-t c`: the THREAD RANGE becomes
the kernel's task argument (uopc/targets/c/threads.py) and the launcher runs the tasks on worker threads."""
from __future__ import annotations

from pathlib import Path

from uopc.targets import BuildRequest, Target
from uopc.targets.capabilities import CPU


def _render(linear, name: str, loc_of, fast_math: bool = False):
  from uopc.targets.c.threads import thread_tasks
  from uopc.targets.llvm.render import render_kernel
  return render_kernel(thread_tasks(linear), name, "host", None, loc_of)


def artifacts(name: str, archs: tuple[str, ...] = ()) -> dict[str, str]:
  return {"ir": f"{name}.ll", "object": f"{name}.o", "source": f"{name}.c", "so": f"lib{name}.so", "header": f"{name}.h"}


def build(req: BuildRequest) -> dict[str, Path]:
  from uopc.targets.llvm.host import build_artifacts
  return build_artifacts(req.out_dir, req.name, req.entries, req.opt_level, req.env)


TARGET = Target("llvm", "LLVM IR compiled by llvmlite for the host CPU, with the C launcher, into a host shared library",
                _render, artifacts, build, ops=CPU)
