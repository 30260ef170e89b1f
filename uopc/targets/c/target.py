"""`-t c`: kernels rendered to C, compiled with the launcher by $CC into libNAME.so."""
from __future__ import annotations

from pathlib import Path

from uopc.targets import BuildRequest, Target
from uopc.targets.capabilities import CPU


def _render(linear, name: str, loc_of, fast_math: bool = False):
  from uopc.targets.c.render import render_kernel
  from uopc.targets.c.threads import thread_tasks
  return render_kernel(thread_tasks(linear), name)


def artifacts(name: str, archs: tuple[str, ...] = ()) -> dict[str, str]:
  return {"source": f"{name}.c", "so": f"lib{name}.so", "header": f"{name}.h"}


def build(req: BuildRequest) -> dict[str, Path]:
  from uopc.driver import compile_shared
  from uopc.launcher import render_header, render_source
  from uopc.targets.c.prelude import c_prelude
  paths = {kind: req.out_dir / file for kind, file in artifacts(req.name).items()}
  paths["header"].write_text(render_header(req.name, req.entries))
  paths["source"].write_text(render_source(req.name, req.entries, c_prelude(k.source for e in req.entries for k in e.kernels)))
  if "so" in req.emit: compile_shared(paths["source"], paths["so"], req.opt_level, req.env, req.cpu_flags)
  return paths


TARGET = Target("c", "C99 with GCC/Clang vector extensions, built by $CC into a host shared library", _render, artifacts, build,
                ops=CPU, cpu_levels=True)
