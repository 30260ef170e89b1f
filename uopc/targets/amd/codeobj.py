"""AMD ISA and HSA code objects: for each arch, NAME.<arch>.s (the ISA as text), NAME.<arch>.o (the
relocatable object llvmlite emits) and NAME.<arch>.hsaco, the object linked by `ld.lld -shared` into
the shared ELF the HIP runtime loads: machine EM_AMDGPU, one `<kernel>.kd` kernel descriptor per
kernel and the `amdhsa` metadata note (code object v5) naming each kernel's arguments.

LLVM has no linker of its own in llvmlite, so `ld.lld` is looked up at build time: $LD_LLD, else the
newest ld.lld of at least LLD_MIN_VERSION among `ld.lld` / `ld.lld-<N>` on PATH and
/usr/lib/llvm-<N>/bin/ld.lld (uopc.tools; Debian's `lld-19` package), else the one in PyPI's
`ziglang` wheel (`zig ld.lld`; `pip install 'uopc[amd]'`), so that pip alone can build for AMD.
LLD 14 refuses code object v5 ("unknown abi version"); 16 and later link it. Without a linker the .s
and .o are still written and the build says, once on stderr, that no .hsaco (and so no launcher
library) could be made, and why. A linker is a command: a path, or the zig binary and `ld.lld`.
"""
from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path
from typing import Mapping, Sequence

from uopc.targets.llvm.compile import compile_module, parse_and_verify
from uopc.targets.llvm.render import AMD_ARCHS, render_module
from uopc import progress
from uopc.diagnostics import warning
from uopc.reporter import current
from uopc.tools import ToolFailure, describe_missing, find_tool, run_on_generated, tool_version

DEFAULT_ARCHS = ("gfx1100",)


LLD_MIN_VERSION = 16


def find_linker(env: Mapping[str, str] = os.environ) -> tuple[str, ...] | None:
  """The ld.lld command to link code objects with ($LD_LLD, an installed one, the ziglang wheel's), or None."""
  if env.get("LD_LLD"): return (env["LD_LLD"],)
  if found := find_tool("ld.lld", LLD_MIN_VERSION, env): return (found.path,)
  return zig_linker()


def zig_linker() -> tuple[str, ...] | None:
  """`zig ld.lld` from the ziglang wheel (the `amd` extra) when it is installed and its LLD is new enough."""
  spec = importlib.util.find_spec("ziglang")
  if spec is None or not spec.submodule_search_locations: return None
  zig = next((p for d in spec.submodule_search_locations for p in (Path(d) / "zig", Path(d) / "zig.exe") if p.is_file()), None)
  if zig is None or (tool_version(str(zig), "ld.lld") or 0) < LLD_MIN_VERSION: return None
  return (str(zig), "ld.lld")


def missing_linker(env: Mapping[str, str] = os.environ) -> str:
  """Why there is no linker, and the ways to get one."""
  return (describe_missing("ld.lld", LLD_MIN_VERSION, "lld-19", env)
          + ", or `pip install 'uopc[amd]'` (the ziglang wheel's ld.lld), or set LD_LLD")


def check_archs(archs: Sequence[str]) -> None:
  from uopc.diagnostics import CompileError, error
  bad = [a for a in archs if a not in AMD_ARCHS]
  if bad or not archs:
    raise CompileError([error(None, f"unknown AMD arch {', '.join(bad) or '(none)'}", f"known: {', '.join(AMD_ARCHS)}")])


def code_object(kernels: Sequence, arch: str, module_id: str, opt_level: int = 3) -> tuple[str, bytes]:
  """The ISA text and the relocatable object of `kernels` (rendered with target="amdgcn") for `arch`.
  Code generation rewrites the IR it runs on, and a clone did not always give the same registers, so
  both are generated from their own parse of the optimised IR's text: the .s is the .o's source."""
  module, tm = compile_module(render_module(kernels, "amdgcn", arch, module_id), "amdgcn", arch, opt_level)
  optimised = str(module)
  return tag_metadata_names(tm.emit_assembly(parse_and_verify(optimised))), tm.emit_object(parse_and_verify(optimised))


# A YAML 1.1 reader takes these plain scalars for a bool, null or number, not a string.
_YAML_WORDS = frozenset("y yes n no true false on off null ~".split())
_YAML_NUMBER = re.compile(r"[-+]?(\.?[0-9]|\.(inf|nan)$)", re.IGNORECASE)
_METADATA_NAME = re.compile(r"^(\s+(?:- )?\.name:\s+)(\S.*)$", re.MULTILINE)


def tag_metadata_names(asm: str) -> str:
  """The ISA text with a `!str` tag on each `.name` of its YAML metadata that a reader would not take for
  a string. LLVM writes them as they are, so a kernel argument named `y` or `n` read back as a bool and
  llvm-mc refused the .s ("invalid HSA metadata"); quotes do not help, as llvm-mc types a scalar by its
  text unless tagged. The object's metadata (msgpack) is typed already."""
  def tag(m: re.Match) -> str:
    name = m.group(2)
    text = name[1:-1] if len(name) >= 2 and name[0] == name[-1] and name[0] in "'\"" else name  # LLVM quotes some ('True')
    if text.lower() in _YAML_WORDS or _YAML_NUMBER.match(text): return f"{m.group(1)}!str {name}"
    return m.group(0)
  start, end = asm.find(".amdgpu_metadata"), asm.find(".end_amdgpu_metadata")
  return asm if start < 0 else asm[:start] + _METADATA_NAME.sub(tag, asm[start:end]) + asm[end:]


def link(obj: Path, out: Path, linker: Sequence[str]) -> None:
  """`ld.lld -shared` of one code object. A linker that cannot link an object of an empty kernel
  (llvmlite's, for the same arch) is the user's to replace (exit 1); failing on ours alone is our bug."""
  def probe() -> list[str]:
    arch = out.suffixes[-2].lstrip(".") if len(out.suffixes) > 1 else DEFAULT_ARCHS[0]
    (obj.parent / ".uopc-probe.o").write_bytes(code_object([], arch, "probe")[1])
    return [*linker, "-shared", "--no-undefined", "-o", ".uopc-probe.hsaco", ".uopc-probe.o"]
  try:
    run_on_generated([*linker, "-shared", "--no-undefined", "-o", out.name, obj.name], out.parent, probe)
  finally:
    for leftover in (".uopc-probe.o", ".uopc-probe.hsaco"): (obj.parent / leftover).unlink(missing_ok=True)
  if not out.is_file(): raise ToolFailure(f"{' '.join(linker)} wrote no {out.name}")


def artifact_paths(out_dir: Path, name: str, arch: str) -> dict[str, Path]:
  return {f"{kind}.{arch}": out_dir / f"{name}.{arch}.{ext}" for kind, ext in (("asm", "s"), ("object", "o"), ("hsaco", "hsaco"))}


def build_code_objects(out_dir: Path, name: str, kernels: Sequence, archs: Sequence[str] = DEFAULT_ARCHS,
                       opt_level: int = 3, env: Mapping[str, str] = os.environ) -> dict[str, Path]:
  """Write NAME.<arch>.s, .o and (with a linker) .hsaco per arch; returns the paths written by kind."""
  check_archs(archs)
  linker = find_linker(env)
  if linker is None:
    current().report(warning(None, f"{missing_linker(env)}: writing the AMD .s and .o only, without the .hsaco code objects "
                                   "and the HIP launcher library"))
  written: dict[str, Path] = {}
  progress.expect(len(archs))
  for arch in archs:
    paths = artifact_paths(out_dir, name, arch)
    asm, obj = code_object(kernels, arch, name, opt_level)
    paths[f"asm.{arch}"].write_text(asm)
    paths[f"object.{arch}"].write_bytes(obj)
    if linker is not None: link(paths[f"object.{arch}"], paths[f"hsaco.{arch}"], linker)
    written.update({k: p for k, p in paths.items() if p.is_file()})
    progress.step(arch)
  return written
