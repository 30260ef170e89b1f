"""`-t llvm`: kernels compiled by LLVM (through llvmlite) for the host CPU, launched by the C target's
launcher.

Artifacts for NAME: NAME.ll (the LLVM module as rendered, before optimisation), NAME.o (the kernels,
optimised and compiled for the host triple with a generic CPU), NAME.h and NAME.c (the C launcher of
`uopc/launcher.py`, whose kernels are declarations of the LLVM-compiled functions) and libNAME.so
(NAME.c and NAME.o linked by $CC with the C target's flags). The kernels are `hidden` in the object,
so the library exports only the launcher's functions, as with `-t c`.
"""
from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Mapping, Sequence

from uopc.launcher import EntryKernels, render_header, render_source
from uopc.targets.llvm.compile import emit_object
from uopc.targets.llvm.render import render_module

ARTIFACTS = ("ir", "object", "source", "so", "header")


def c_declaration(kernel) -> str:
  """The C prototype of an LLVM-compiled kernel. Buffers are untyped pointers: the ABI of a pointer
  does not depend on its element type, and the launcher passes `void*` anyway. No parameter names:
  none can clash with a C keyword."""
  params = [f"{'' if p.written else 'const '}void*" if p.kind == "buffer" else "int64_t" for p in kernel.params]
  return f"void {kernel.name}({', '.join(params) or 'void'});"


def launcher_entries(entries: Sequence[EntryKernels]) -> list[EntryKernels]:
  """The entries with each kernel's source replaced by its C declaration, for the C launcher."""
  return [replace(e, kernels=tuple(replace(k, source=c_declaration(k)) for k in e.kernels)) for e in entries]


def artifact_paths(out_dir: Path, name: str) -> dict[str, Path]:
  return {"ir": out_dir / f"{name}.ll", "object": out_dir / f"{name}.o", "source": out_dir / f"{name}.c",
          "so": out_dir / f"lib{name}.so", "header": out_dir / f"{name}.h"}


def build_artifacts(out_dir: Path, name: str, entries: Sequence[EntryKernels], opt_level: int = 3,
                    env: Mapping[str, str] = os.environ) -> dict[str, Path]:
  """Write every artifact of `entries` (kernels rendered by `render_kernel(..., target="host")`) into
  `out_dir`; returns their paths by kind. The C compiler's failures are the driver's compile_shared's."""
  from uopc.driver import compile_shared
  paths = artifact_paths(out_dir, name)
  module = render_module([k for e in entries for k in e.kernels], "host", module_id=name)
  paths["ir"].write_text(module)
  paths["object"].write_bytes(emit_object(module, "host", level=opt_level))
  declared = launcher_entries(entries)
  paths["header"].write_text(render_header(name, declared))
  paths["source"].write_text(render_source(name, declared, ""))
  compile_shared(paths["source"], paths["so"], opt_level, env, inputs=(paths["object"].name,), libs=("-lm",))
  return paths
