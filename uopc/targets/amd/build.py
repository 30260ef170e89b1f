"""`-t amd` artifacts for NAME: NAME.<arch>.s, .o and .hsaco per arch (codeobj.py), NAME.h and
NAME_hip.c (launcher.py) and libNAME.so, the launcher with every arch's code object embedded, built
by $CC with the C target's flags. Without ld.lld there are no code objects, so no NAME_hip.c and no
libNAME.so either (codeobj.py says so on stderr)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Sequence

from uopc.launcher import EntryKernels
from uopc.targets.amd.codeobj import DEFAULT_ARCHS, build_code_objects, check_archs
from uopc.targets.amd.launcher import render_header, render_source


def build_artifacts(out_dir: Path, name: str, entries: Sequence[EntryKernels], archs: Sequence[str] = DEFAULT_ARCHS,
                    opt_level: int = 3, env: Mapping[str, str] = os.environ) -> dict[str, Path]:
  """Write the artifacts of `entries` (AmdKernels) into `out_dir`; returns their paths by kind."""
  from uopc.driver import compile_shared
  check_archs(archs)
  written = build_code_objects(out_dir, name, [k for e in entries for k in e.kernels], archs, opt_level, env)
  header = out_dir / f"{name}.h"
  header.write_text(render_header(name, entries))
  written["header"] = header
  hsacos = [written.get(f"hsaco.{arch}") for arch in archs]
  if None in hsacos: return written
  source, so = out_dir / f"{name}_hip.c", out_dir / f"lib{name}.so"
  source.write_text(render_source(name, entries, [p.read_bytes() for p in hsacos]))
  compile_shared(source, so, opt_level, env, libs=("-ldl", "-lpthread"))
  written.update(source=source, so=so)
  return written
