"""`uopc build`: parse, verify, lower every entry, write the launcher, build the shared library.

Outputs for NAME in DIR: DIR/NAME.c (source), DIR/libNAME.so (so), DIR/NAME.h (header), and with
-MD a Make dependency file (DIR/NAME.d unless -MF says). Everything is made in a staging directory
inside DIR and renamed into place only after every artifact succeeded, so a failed build leaves
earlier outputs untouched and no partial files. The same input and flags give byte-identical outputs.
"""
from __future__ import annotations

import os
import platform
import re
import shlex
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, TextIO

from uopc import progress
from uopc.diagnostics import CompileError, error
from uopc.pipeline import PrintOptions, check_stage_name, compile_module
from uopc.reporter import current
from uopc.targets import BuildRequest, Target, UnknownTargetError, get_target
from uopc.tools import ToolFailure, run_on_generated, run_tool

# Flags for fast code on the host CPU's baseline ISA. No -march=native: libraries built in CI are
# shipped to other machines, where native code can die with SIGILL, and the .so would depend on the
# build host (breaking reproducible builds). `--cpu native` builds for this machine (see CPU_LEVELS).
# -O3 turns the vectoriser on. -ffp-contract=off: no fused multiply-add behind the program's back,
# so float results match the IR's rounding on every target. -fno-math-errno: math calls need not set
# errno (kernels never read it), which lets them vectorise without changing any value. -pthread: THREAD
# axes run on worker threads (uopc/targets/c/threads.py).
BASE_CFLAGS = ("-fPIC", "-shared", "-fvisibility=hidden", "-ffp-contract=off", "-fno-math-errno", "-pthread")

# `--cpu LEVEL`: the instruction set the C library is built for. "portable" (the default) adds no
# -march and runs on every machine of the architecture; the others trade that for wider vectors:
# x86-64-v2 (SSE4.2), x86-64-v3 (AVX2, FMA), x86-64-v4 (AVX-512), native (the build host's, which
# also makes the .so depend on the machine that built it). FMA is never used either way
# (-ffp-contract=off). The heuristics size their register tiles by the vector registers the level
# has, which the compiler's predefined macros for these flags tell (see cpu_vector_bytes).
CPU_LEVELS = ("portable", "native", "x86-64-v2", "x86-64-v3", "x86-64-v4")
PORTABLE_VECTOR_BYTES = 16  # SSE2 on x86-64, NEON on arm64: the baseline every 64-bit host has


def cpu_flags(cpu: str, machine: str | None = None) -> tuple[str, ...]:
  """The compiler flags of `--cpu cpu` (native: -march=native on x86, -mcpu=native elsewhere)."""
  if cpu not in CPU_LEVELS: raise CompileError([error(None, f"unknown --cpu '{cpu}'; levels: {', '.join(CPU_LEVELS)}")])
  if cpu == "portable": return ()
  if cpu == "native" and (machine or platform.machine()).lower() not in ("x86_64", "amd64", "i386", "i686"): return ("-mcpu=native",)
  return (f"-march={cpu}",)


def cpu_vector_bytes(cpu: str, env: Mapping[str, str]) -> int:
  """Bytes of the widest vector register `--cpu cpu` gives the C compiler ($CC): 64 where it
  defines __AVX512F__ for those flags, 32 for __AVX__, else 16. Asking the compiler (`-dM -E`)
  also checks that it takes the flags, with a clear error where it does not."""
  flags = cpu_flags(cpu)
  if not flags: return PORTABLE_VECTOR_BYTES
  cmd = [*shlex.split(env.get("CC") or "cc"), *flags, "-dM", "-E", "-x", "c", os.devnull]
  try:
    done = run_tool(cmd)
  except OSError as e:
    raise CompileError([error(None, f"cannot run the C compiler '{cmd[0]}' ({e.strerror}); set CC to a C compiler")]) from e
  if done.returncode != 0:
    raise CompileError([error(None, f"--cpu {cpu}: the C compiler does not take {' '.join(flags)}: {shlex.join(cmd)}",
                              (done.stderr.strip().splitlines() or ["(no output)"])[0])])
  macros = {line.split()[1] for line in done.stdout.splitlines() if line.startswith("#define ") and len(line.split()) > 1}
  return 64 if "__AVX512F__" in macros else 32 if "__AVX__" in macros else PORTABLE_VECTOR_BYTES


@dataclass(frozen=True)
class BuildOptions:
  target: str | Target = "c"    # -t: a name (resolved once by `build`) or the Target itself
  out_dir: Path = Path(".")
  emit: tuple[str, ...] | None = None   # artifact kinds to write; None: all of the target's
  opt_level: int = 3
  print_before: tuple[str, ...] = ()
  print_after: tuple[str, ...] = ()
  print_out: TextIO | None = None
  depfile: Path | None = None      # where to write Make dependencies; None: none
  name: str | None = None          # NAME; defaults to the input's file stem
  archs: tuple[str, ...] = ()      # GPU architectures; () means the target's defaults
  schedule: Mapping[str, tuple] | None = None  # kernel name -> the opts --opts pins (uopc.stages.optimize)
  # the schedule of each arch variant (Target.arch_variants), by its archs: --opts and a tuning database's entries for
  # those archs; a variant missing here gets `schedule`
  variant_schedules: Mapping[tuple[str, ...], Mapping[str, tuple]] = field(default_factory=dict)
  allow_custom: bool = False       # compile CUSTOM/CUSTOMI (unchecked target source text)
  fast_math: bool = False          # allow the targets' approximate instructions (below the accuracy bar of the README)
  fp_contract: bool | None = None  # fuse float ADD(MUL) into one multiply-add (--fp-contract); None: the target's default (Target.contract)
  allow_tf32: bool = False         # --allow-tf32: float32 gemms on the tf32 tensor cores (cuda)
  cpu: str = "portable"            # -t c: the instruction set the library is built for (CPU_LEVELS)
  env: Mapping[str, str] = field(default_factory=lambda: os.environ)


def lib_name(path: str | Path, name: str | None) -> str:
  name = name if name is not None else Path(path).stem
  if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*", name):
    raise ValueError(f"'{name}' cannot name the outputs: use letters, digits, '_', '.', '+' or '-' (see --name)")
  return name


def check_target(target: str | Target) -> Target:
  """The Target of -t NAME (a Target is returned as it is): the one lookup of a build, whose stages then
  take the object."""
  if isinstance(target, Target): return target
  try:
    return get_target(target)
  except UnknownTargetError as e:
    raise CompileError([error(None, str(e))]) from e


def check_emit(target: Target, emit: tuple[str, ...] | None, archs: tuple[str, ...]) -> tuple[str, ...]:
  """The artifact kinds to write: `emit` (None: all), each with its arch variants' (`KIND:ARCHS`, e.g. the
  `ptx:sm_90a` of `ptx`)."""
  kinds = tuple(target.artifacts("NAME", archs))
  if emit is None: return kinds
  if bad := [k for k in emit if k not in kinds]:
    raise CompileError([error(None, f"target {target.name} has no artifact {', '.join(map(repr, bad))}",
                              f"artifacts of -t {target.name}: {', '.join(kinds)}")])
  return tuple(dict.fromkeys(k for e in emit for k in kinds if k == e or k.startswith(f"{e}:")))


def build(path: str | Path, opts: BuildOptions = BuildOptions()) -> list[Path]:
  """Build `path`; returns the paths written. Raises CompileError for errors in the input."""
  target = check_target(opts.target)
  archs = opts.archs or target.default_archs
  emit = check_emit(target, opts.emit, archs)
  for stage in opts.print_before + opts.print_after: check_stage_name(target, stage)
  name = lib_name(path, opts.name)
  if opts.cpu != "portable" and not target.cpu_levels:
    raise CompileError([error(None, f"--cpu {opts.cpu} is for -t c; -t {target.name} builds for its own targets")])
  with current().progress(f"{name} (-t {target.name})"):
    return _build(path, opts, target, archs, emit, name)


def arch_variants(target: Target, archs: tuple[str, ...], opts: BuildOptions) -> tuple:
  """The ArchVariants (uopc.pipeline) of a build of `target` for `archs`, each with its schedule."""
  from uopc.pipeline import ArchVariant
  groups = target.arch_variants(archs) if target.arch_variants else ()
  return tuple(ArchVariant(g, opts.variant_schedules.get(g, opts.schedule)) for g in groups)


def _build(path: str | Path, opts: BuildOptions, target: Target, archs: tuple[str, ...], emit: tuple[str, ...], name: str) -> list[Path]:
  variants = arch_variants(target, archs, opts)
  entries = _lower(str(path), opts, target, name, cpu_vector_bytes(opts.cpu, opts.env), archs, variants)
  outputs = {k: opts.out_dir / f for k, f in target.artifacts(name, archs).items() if k in emit}
  opts.out_dir.mkdir(parents=True, exist_ok=True)
  staging = Path(tempfile.mkdtemp(prefix=f".{name}.uopc-", dir=opts.out_dir))
  try:
    staged = target.build(BuildRequest(staging, name, entries, emit, opts.opt_level, archs, opts.env, cpu_flags(opts.cpu),
                                       tuple(v.archs for v in variants)))
    if opts.depfile is not None:
      staged[opts.depfile] = staging / "deps.d"
      staged[opts.depfile].write_text(make_dependencies(list(outputs.values()), [Path(path)]))
    outputs = {k: dest for k, dest in outputs.items() if k in staged}  # a target may lack a tool here (it says so)
    for kind, dest in outputs.items(): os.replace(staged[kind], dest)
    if opts.depfile is not None: os.replace(staged[opts.depfile], opts.depfile)
  finally:
    shutil.rmtree(staging, ignore_errors=True)
  return list(outputs.values()) + ([opts.depfile] if opts.depfile is not None else [])


def _lower(path: str, opts: BuildOptions, target: Target, name: str, vector_bytes: int, archs: tuple[str, ...] = (), variants: tuple = ()):
  from uopc.frontend import load_module
  from uopc.verify import verify_module
  module = load_module(path)
  diags = verify_module(module)
  errors = [d for d in diags if d.severity == "error"] + ([] if opts.allow_custom else _custom_code(module))
  if errors: raise CompileError(errors, {module.path: module.text})
  for d in diags: current().report(d, module.text)
  printing = PrintOptions(frozenset(opts.print_before), frozenset(opts.print_after), opts.print_out or sys.stdout)
  return compile_module(module, target, name, printing, opts.schedule, opts.fast_math, vector_bytes, archs,
                        opts.fp_contract, opts.allow_tf32, variants)


def _custom_code(module) -> list:
  """CUSTOM/CUSTOMI inject target source text that no check sees, so they need the user's explicit consent."""
  from uopc.ops import Ops
  found = {u for e in module.entries for u in e.sink.toposort() if u.op in (Ops.CUSTOM, Ops.CUSTOMI)}
  return [error(module.loc_of(u), f"{u.op.name} injects target source text that uopc cannot check",
                "pass --allow-custom to compile it anyway") for u in sorted(found, key=lambda u: _loc_key(module.loc_of(u)))]


def _loc_key(loc) -> tuple: return (loc.line, loc.col) if loc else (0, 0)


def compiler_command(source: Path, output: Path, opt_level: int, env: Mapping[str, str], extra: tuple[str, ...] = ()) -> list[str]:
  """CC (default cc), our flags and `extra` (--cpu's), then CFLAGS so the user has the last word. Run in
  the source's directory with relative names, and the staging path mapped away, so it is not embedded
  in the .so."""
  cc = shlex.split(env.get("CC") or "cc")
  return [*cc, *BASE_CFLAGS, f"-O{opt_level}", *extra, f"-ffile-prefix-map={source.parent.resolve()}=.", *shlex.split(env.get("CFLAGS", "")),
          "-o", output.name, source.name, "-lm"]  # kernels call libm (sinf, exp2f, ...)


def compile_shared(source: Path, output: Path, opt_level: int, env: Mapping[str, str], extra: tuple[str, ...] = (),
                   inputs: tuple[str, ...] = (), libs: tuple[str, ...] = ()) -> None:
  """$CC on generated `source` (plus `inputs`, e.g. an object file, and `libs`) into `output`. A
  compiler that cannot run, or that fails on a one-line C file with the same flags too, is the
  user's to fix (exit 1); a failure on our source alone is an internal compiler error."""
  cmd = [*compiler_command(source, output, opt_level, env, extra), *inputs, *libs]
  def probe() -> list[str]:
    (source.parent / ".uopc-probe.c").write_text("int uopc_probe(void) { return 0; }\n")
    return [*compiler_command(source.parent / ".uopc-probe.c", source.parent / ".uopc-probe.so", opt_level, env, extra), *libs]
  progress.expect(1)
  try:
    run_on_generated(cmd, source.parent, probe)  # env picks CC and CFLAGS; the compiler runs in ours
    progress.step(output.name)
  finally:
    for leftover in (".uopc-probe.c", ".uopc-probe.so"): (source.parent / leftover).unlink(missing_ok=True)
  if not output.is_file(): raise ToolFailure(f"the C compiler wrote no {output.name}: {shlex.join(cmd)}")



def _make_escape(p: Path) -> str:
  return re.sub(r"([ #\\])", r"\\\1", str(p)).replace("$", "$$")


def make_dependencies(targets: list[Path], prerequisites: list[Path]) -> str:
  """A rule like gcc -MD writes: every artifact depends on the .uop file."""
  return f"{' '.join(map(_make_escape, targets))}: {' '.join(map(_make_escape, prerequisites))}\n"
