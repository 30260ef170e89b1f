"""The `uopc` command line. Every user error is a located diagnostic and exit code 1; anything
unexpected is reported as an internal compiler error with exit code 2, never a bare traceback."""
from __future__ import annotations

import functools
import sys
from pathlib import Path

import click

from uopc import __version__
from uopc.cli_reporting import diagnostics_format_option, outcome, requested_format, show_usage_error, verbose_option
from uopc.diagnostics import CompileError, Loc, error
from uopc.targets import target_names

TARGET_CHOICES = target_names()


def compiler_command(fn):
  """Give the command --diagnostics-format and run it with its Reporter (uopc.reporter): a
  CompileError is reported as diagnostics (exit 1), any other exception as an internal compiler
  error (exit 2)."""
  @functools.wraps(fn)
  def wrapper(*args, diagnostics_format="text", verbose=False, **kwargs):
    from uopc.reporter import Reporter, reporting
    with reporting(Reporter(diagnostics_format, verbose)) as reporter:
      code = outcome(reporter, lambda: fn(*args, **kwargs))
    if code: sys.exit(code)
  return diagnostics_format_option(wrapper)


class UopcGroup(click.Group):
  """A bad flag or argument is bad input like any other: exit 1 (as gcc does), keeping 2 for internal errors."""

  def main(self, *args, standalone_mode=True, **kwargs):
    if not standalone_mode: return super().main(*args, standalone_mode=False, **kwargs)
    try:
      code = super().main(*args, standalone_mode=False, **kwargs)
    except click.ClickException as e:
      code = 1 if isinstance(e, click.UsageError) else e.exit_code
      argv = kwargs.get("args", args[0] if args else None)
      show_usage_error(e, code, requested_format(sys.argv[1:] if argv is None else list(argv)))
      sys.exit(code)
    except click.Abort:
      click.echo("Aborted!", err=True)
      sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


def _print_cmake_dir(ctx, param, value) -> None:
  if not value or ctx.resilient_parsing: return
  click.echo(Path(__file__).resolve().parent / "cmake")
  ctx.exit()


def _print_version(ctx: click.Context, value: bool) -> None:
  """--version: uopc's version and the outside tools a build would use (uopc/versions.py)."""
  if not value or ctx.resilient_parsing: return
  from uopc.versions import version_report
  click.echo(version_report(), nl=False)
  ctx.exit(0)


@click.group(cls=UopcGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", "-V", is_flag=True, expose_value=False, is_eager=True, callback=lambda ctx, _, value: _print_version(ctx, value),
              help="Show uopc's version and the outside tools a build would use, then exit.")
@click.option("--cmake-dir", is_flag=True, expose_value=False, is_eager=True, callback=_print_cmake_dir,
              help="Print the folder of uopc's CMake package and exit (cmake -Duopc_DIR=\"$(uopc --cmake-dir)\").")
def cli():
  """uopc: compile UOp IR programs (.uop files) ahead of time into C, PTX, AMD ISA or Metal, with a
  C header and a shared library that load and launch the kernels.

  \b
  Quick start:
    uopc check model.uop          parse and verify
    uopc fmt model.uop            print the canonical form
    uopc show model.uop           the IR with derived properties
    uopc build model.uop -t c     build model.c, libmodel.so, model.h

  See `uopc COMMAND --help` for each command.

  Every command takes --diagnostics-format=text|json|sarif (also $UOPC_DIAGNOSTICS_FORMAT): text is
  file:line:col with the source line and a caret, coloured on a terminal unless NO_COLOR is set;
  json is one object a line (file, line, column, severity, message, notes); sarif is one SARIF 2.1.0
  log for code-scanning services. Exit codes: 0 success, 1 an error in the input, the command line or
  an outside tool, 2 an internal compiler error.
  """


@cli.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@compiler_command
def check(files):
  """Parse and verify FILES; report every error found as file:line:col with the source line."""
  from uopc.frontend import load_module
  from uopc.verify import verify_module
  diags, sources = [], {}
  for f in files:
    try:
      m = load_module(f)
    except CompileError as e:
      diags += e.diagnostics; sources.update(e.sources); continue  # noqa: E702
    sources[m.path] = m.text
    diags += verify_module(m)
  if diags: raise CompileError(diags, sources)


@cli.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--check", "check_only", is_flag=True, help="Write nothing; exit 1 if FILE is not in canonical form (for CI).")
@click.option("-i", "--in-place", is_flag=True, help="Rewrite FILE in canonical form instead of printing it.")
@compiler_command
def fmt(file, check_only, in_place):
  """Print FILE in canonical form (the printer's output, which parses back to the same IR)."""
  from uopc.frontend import load_module, print_module
  m = load_module(file)
  text = print_module(m)
  if check_only:
    if text != m.text: raise CompileError([_not_canonical(file, m.text, text)], {file: m.text})
    return
  if in_place: _write_atomic(Path(file), text)
  else: click.echo(text, nl=False)


def _not_canonical(file: str, text: str, canonical: str):
  """The error of `fmt --check`, at the first line that differs from the canonical form."""
  lines, want = text.splitlines(), canonical.splitlines()
  line = next((i for i, (a, b) in enumerate(zip(lines, want)) if a != b), min(len(lines), len(want)))
  return error(Loc(file, line + 1, 1), "not in canonical form", f"run `uopc fmt -i {file}`, or see `uopc fmt {file}`")


@cli.command()
@click.argument("file", type=click.Path(dir_okay=False))
@compiler_command
def show(file):
  """Show the IR of FILE one UOp a line, with its derived dtype, shape, device, addrspace and min_max."""
  from uopc.frontend import load_module, show_module
  click.echo(show_module(load_module(file)), nl=False)


_BUILD_HELP = """Build FILE for a target: NAME.c (the C source), libNAME.so (the shared library) and
NAME.h (its header) in DIR. NAME is FILE's stem unless --name says; every C symbol starts with NAME
(characters outside [A-Za-z0-9_] made `_`), e.g. `int NAME_ENTRY(...)` per entry (see NAME.h).

The C compiler is $CC (default cc); $CFLAGS are added after uopc's flags (-O3, PIC, hidden
visibility, no FP contraction, --cpu's -march), so they win. The library is portable by default;
--cpu native (or x86-64-v3, x86-64-v4) builds it for wider vectors, with larger register tiles. A
float16/bfloat16 input that a reduction reads once per output it meets (a gemm's) is converted to
float32 once, into the workspace. Outputs are replaced only when every artifact was
built, and the same input gives byte-identical outputs.

Every target meets one accuracy bar: float32 EXP2, LOG2, SIN, SQRT, RECIP and DIV within 2 ULP of
the correctly rounded result over the whole finite domain, IEEE special values (inf, NaN, -0.0,
subnormals) right; float16/bfloat16 computed in float32 and rounded once; no fused multiply-add
formed; integers wrap, IDIV truncates, MOD takes the dividend's sign. --fast-math gives that up
for the targets' approximate instructions.

An entry on several devices (buffers on tuple devices) takes one buffer argument per device shard
(NAME_dev0, ...); with -t cuda also one stream per device: copies between GPUs go peer to peer and
each allreduce through NCCL (libnccl.so.2 loaded at run time, after NAME_nccl_init; UOPC_NCCL=0 in the
environment, or two devices on one GPU, gives the copies and reductions instead). NAME.h says how.
A -t cuda entry of several kernels, called again with the same arguments and stream, replays a CUDA
graph of its launches (UOPC_CUDA_GRAPHS=0 in the environment: direct launches always).

-v prints every outside command (the C compiler, ptxas, fatbinary, ld.lld) as a shell line; a long
build shows a progress bar when stderr is a terminal; --diagnostics-format=json|sarif writes
diagnostics for machines (see `uopc --help`).

\b
Examples:
  uopc build model.uop -t c -o build/
  uopc build model.uop -t c --emit header -o include/
  uopc build model.uop -t c -MD -o build/ --print-after linearize
"""


def _comma_list(ctx, param, value: str | None) -> tuple[str, ...] | None:
  if value is None: return None
  kinds = tuple(k.strip() for k in value.split(",") if k.strip())
  if not kinds: raise click.BadParameter(f"'{value}': a comma-separated list")
  return kinds


@cli.command(help=_BUILD_HELP)
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("-t", "--target", default="c", show_default=True, type=click.Choice(TARGET_CHOICES),
              help="Target: c (C source + host .so), llvm (host CPU through LLVM), cuda (PTX + fatbin), "
                   "amd (AMD ISA + .hsaco), metal (Metal source + launcher).")
@click.option("-o", "out_dir", default=".", show_default=True, type=click.Path(file_okay=False), help="Output directory DIR.")
@click.option("--emit", default=None, callback=_comma_list, metavar="KINDS",
              help="Comma-separated artifact kinds to write (default: all of the target's); for -t c: "
                   "source (NAME.c), so (libNAME.so), header (NAME.h); -t cuda: ptx, fatbin, source, so, header, "
                   "and ptx:sm_90a, fatbin:sm_90a where it has an sm_90a image (ptx and fatbin include them).")
@click.option("--arch", "archs", default=None, callback=_comma_list, metavar="ARCHS",
              help="GPU architectures, comma-separated (default cuda: sm_80,sm_90a; amd: gfx1100,gfx90a,gfx942). cuda: "
                   "large half-precision gemms use Hopper's wgmma on sm_90a; where the list has other archs too, those "
                   "kernels get a second image, NAME.sm_90a.ptx/.fatbin, that the library loads on compute capability 9.0 "
                   "GPUs (--arch sm_90a alone: only that image, sm_90 GPUs only; sm_80,sm_90: no wgmma).")
@click.option("-O", "opt_level", default="3", show_default=True, type=click.Choice(["0", "1", "2", "3"]),
              help="C optimisation level: -O0 .. -O3.")
@click.option("--print-before", multiple=True, metavar="STAGE", help="Print each kernel's IR before STAGE (repeatable).")
@click.option("--print-after", multiple=True, metavar="STAGE", help="Print each kernel's IR after STAGE (repeatable).")
@click.option("-MD", "make_deps", is_flag=True, help="Write a Make dependency file (DIR/NAME.d unless -MF).")
@click.option("-MF", "dep_file", type=click.Path(dir_okay=False), help="Write the dependency file here (implies -MD).")
@click.option("--allow-custom", is_flag=True, help="Compile CUSTOM/CUSTOMI ops (target source text uopc cannot check).")
@click.option("--fast-math", is_flag=True,
              help="Allow the target's approximate instructions (e.g. PTX ex2/lg2/sin.approx, fused multiply-add), and keep "
                   "a float16/bfloat16 value computed in float32 unrounded where the program converts it straight back to "
                   "float32 (a half-precision matmul summed in float32 then sums exact products, as tensor cores do). "
                   "Off by default: float32 EXP2, LOG2, SIN, SQRT, RECIP and DIV are then within 2 ULP of the correctly "
                   "rounded result on every finite input (SIN: |x| up to 1e4), special values (inf, NaN, -0.0, "
                   "subnormals) right, float16/bfloat16 computed in float32 and rounded once.")
@click.option("--fp-contract", type=click.Choice(["off", "fast"]), default=None,
              help="fast: fuse a float multiply feeding an add into one fused multiply-add, rounded once (-t cuda fma.rn, "
                   "-t amd llvm.fma; -t c, llvm and metal form none); results then differ from the IR's two roundings in "
                   "the last bits, and are more accurate. off: every operation rounds as the IR says. Default: fast on "
                   "-t cuda and -t amd (as nvcc, nvrtc and hipcc do), off on the others. --fast-math implies fast.")
@click.option("--allow-tf32", is_flag=True,
              help="-t cuda: float32 gemms may run on the tensor cores as tf32 (inputs rounded to 10 mantissa bits, "
                   "products summed in float32: about 1e-3 relative error, as torch's allow_tf32). Off by default.")
@click.option("--cpu", default="portable", show_default=True, type=click.Choice(["portable", "native", "x86-64-v2", "x86-64-v3", "x86-64-v4"]),
              help="-t c: the instruction set the library is built for. portable: the architecture's baseline (x86-64: SSE2), "
                   "runs on any machine of the architecture; x86-64-v3 (AVX2), x86-64-v4 (AVX-512) or native (-march=native: "
                   "the build machine's) give wider vectors, and the heuristics larger register tiles, but the library dies with "
                   "SIGILL on a CPU without them. No FMA either way (-ffp-contract=off).")
@click.option("--name", default=None, help="NAME of the outputs and prefix of the C symbols (default: FILE's stem).")
@click.option("--opts", "pinned", multiple=True, metavar="KERNEL:OPTS|@FILE",
              help="Apply these opts to KERNEL instead of the heuristics, e.g. 'NAME__gemm_k0:SPLIT(1,8,u),SPLIT(0,4,u)' "
                   "(kernel names as --print-after optimize shows them; 'KERNEL:' alone applies none). Opts: "
                   "SPLIT(axis,k,type[,top]) with type g l t L R G u r, PADTO(axis,m[,t]) (t: tiles of t, the last moved back to end at the axis's end instead of masked; GLOBAL axes of kernels that read no buffer they write), SWAP(axis,axis), NOLOCALS, TC(axis[,tc[,stages[,tile]]]) (tensor cores, -t cuda: a float16/bfloat16 gemm; stages 0: operands read from global memory, 1: staged in shared memory, 4 stages where they fit half the least --arch's shared memory, else as many as fit 48 KiB (default), 2, 3 or 4: that many, up to the shared memory of the least --arch (past 48 KiB: dynamic shared memory, sm_80 163 KiB, sm_86/89 99, sm_90 227); tile: tensor-core tiles a warp, -1 by size (default), 0..5 = 2x4, 4x8, 2x2, 1x2, 1x1, 4x4, 6..8 = 4x8 a warp with 2x2, 2x4 or 4x2 warps a workgroup (128x128, 128x256, 256x128 with m16n8k16), 9, 10 = warpgroup tiles (128x128 over one warpgroup, rows interleaved; 128x256 over two; wgmma with --arch sm_90a)), STAGE[(stages)] (the last opt; -t cuda: the inputs a workgroup's threads read again, such as a float32 gemm's, go through shared memory filled by cp.async; stages 1: as many as fit (default), 2 or 3; -t c/llvm, no stages: an input that the loops around a reduction read again, such as a gemm's block of b, is copied to a contiguous array first; refused where they form no tile). "
                   "@FILE reads one KERNEL:OPTS line per kernel. Repeatable.")
@click.option("--tuning", "tuning_db", type=click.Path(dir_okay=False), metavar="DB.json",
              help="A tuning database (`uopc tune`): kernels found in it get its opts, the others the heuristics "
                   "(--opts still wins); the output is byte-identical to a build with those opts pinned. No device needed.")
@click.option("--tuning-report", is_flag=True, help="With --tuning: say which kernels got the database's opts and which fell back.")
@verbose_option
@compiler_command
def build(file, target, out_dir, emit, archs, opt_level, print_before, print_after, make_deps, dep_file, allow_custom, fast_math,
          fp_contract, allow_tf32, cpu, name, pinned, tuning_db, tuning_report):
  from uopc.driver import BuildOptions, build as run_build, check_target, lib_name
  from uopc.pipeline import UnknownStageError, check_stage_name
  from uopc.stages.optimize import parse_schedule
  resolved = check_target(target)  # the build's one lookup of -t: the driver and the stages take the object
  schedule = parse_schedule(pinned) if pinned else None
  try:
    for stage in print_before + print_after: check_stage_name(resolved, stage)
    name = lib_name(file, name)
  except (UnknownStageError, ValueError) as e:
    raise click.UsageError(str(e)) from e
  if tuning_report and not tuning_db: raise click.UsageError("--tuning-report needs --tuning DB.json")
  variant_schedules = {}
  if tuning_db:
    from uopc.tune.command import build_schedules
    from uopc.tune.kernels import numeric_modes
    schedule, variant_schedules = build_schedules(file, tuning_db, target, name, archs or (), cpu, schedule, tuning_report,
                                                  modes=numeric_modes(resolved.contract(_contract(fp_contract)), allow_tf32))
  out = Path(out_dir)
  depfile = Path(dep_file) if dep_file else (out / f"{name}.d" if make_deps else None)
  run_build(file, BuildOptions(resolved, out, emit, int(opt_level), print_before, print_after, None, depfile, name, archs or (), allow_custom=allow_custom,
                               schedule=schedule, variant_schedules=variant_schedules, fast_math=fast_math, fp_contract=_contract(fp_contract),
                               allow_tf32=allow_tf32, cpu=cpu))


_RUN_HELP = """Run entry NAME of FILE on numpy arrays and print every buffer it writes (numpy style).

Buffers come from --input NAME=FILE.npy (dtype and size must match the program); a buffer with a
declared shape that is not given is zeros, or random with --seed when the entry reads it. A bare
kernel pointer (ptr<T> without a size) must be given. Sizes (DEFINE_VARs) come from --var NAME=VALUE.

With -t c (default) or -t llvm the file is built by `uopc build` into a temporary directory and the
library is called. With --emulate, the kernels that -t TARGET's pipeline makes (up to linearize) run
in uopc's reference emulator instead, which reports out-of-bounds accesses, reads of uninitialised
LOCAL memory and missing BARRIERs with their source location.

\b
Examples:
  uopc run samples/gemm.uop --seed 0
  uopc run samples/c-app/saxpy.uop --input x=x.npy --input y=y.npy --input out=out.npy --var n=4
  uopc run model.uop --entry main -t c --emulate --output out=out.npy
"""


def _pairs(ctx, param, values) -> dict[str, str]:
  out = {}
  for v in values:
    name, eq, rest = v.partition("=")
    if not eq or not name or not rest: raise click.BadParameter(f"'{v}': expected NAME=VALUE")
    out[name] = rest
  return out


def _int_pairs(ctx, param, values) -> dict[str, int]:
  pairs = _pairs(ctx, param, values)
  try:
    return {k: int(v, 0) for k, v in pairs.items()}
  except ValueError as e:
    raise click.BadParameter(f"sizes are integers: {e}") from e


@cli.command(help=_RUN_HELP)
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--entry", default=None, metavar="NAME", help="The entry to run (needed when FILE has several).")
@click.option("-t", "--target", default="c", show_default=True, type=click.Choice(["c", "llvm", "cuda", "amd", "metal"]),
              help="Target whose code runs: natively for c and llvm, in the emulator (--emulate) for any.")
@click.option("--input", "inputs", multiple=True, callback=_pairs, metavar="NAME=FILE.npy", help="A buffer's contents (repeatable).")
@click.option("--var", "variables", multiple=True, callback=_int_pairs, metavar="NAME=VALUE", help="A size's value (repeatable).")
@click.option("--seed", type=int, default=None, help="Fill the buffers not given that the entry reads with random values from this seed.")
@click.option("--output", "outputs", multiple=True, callback=_pairs, metavar="NAME=FILE.npy",
              help="Save a buffer to FILE.npy instead of printing the results (repeatable).")
@click.option("--emulate", is_flag=True, help="Run the target's kernels in the reference emulator.")
@click.option("--fp-contract", type=click.Choice(["off", "fast"]), default=None,
              help="As `uopc build --fp-contract`, for the kernels --emulate runs (default: the target's: fused "
                   "multiply-adds on -t cuda and -t amd, none on the others).")
@click.option("--fast-math", is_flag=True, help="As `uopc build --fast-math`, for the kernels that run (native or --emulate).")
@verbose_option
@compiler_command
def run(file, entry, target, inputs, variables, seed, outputs, emulate, fp_contract, fast_math):
  from uopc.run import format_result, load_inputs, run_file, save_outputs
  result = run_file(file, entry, target, load_inputs(inputs), variables, seed, emulate, fp_contract=_contract(fp_contract),
                    fast_math=fast_math)
  if outputs: save_outputs(result, outputs)
  else: click.echo(format_result(result), nl=False)


@cli.command("export")
@click.argument("target", metavar="FILE.py:FUNCTION")
@click.option("--input", "-i", "inputs", multiple=True, metavar="NAME=SHAPE[:DTYPE]",
              help="One per argument of FUNCTION, in order: e.g. x=64x768:f32 (dtype default f32; `scalar` for shape ()).")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the .uop here (atomically) instead of to stdout.")
@click.option("--name", help="The entry's name (default: FUNCTION).")
@click.option("--weights", metavar="NAME", help="A model object (or {name: Tensor} dict) in FILE whose state-dict names name the weight PARAMs.")
@click.option("--var", "var_specs", multiple=True, metavar="NAME=LO..HI",
              help="The range of a symbolic size used in --input (x=Nx768 --var N=1..128): a DEFINE_VAR of the entry.")
@click.option("--constants", type=click.Choice(["param", "embed"]), default="param", show_default=True,
              help="param: every buffer the function reads that is not an input is a PARAM (weights the application "
                   "passes); embed: those whose data tinygrad holds (realized weights, tensors made from lists or numpy) "
                   "are written into the program as BINARY data, little-endian, up to --max-constant-bytes each.")
@click.option("--max-constant-bytes", type=click.IntRange(min=0), default=1 << 20, show_default=True, metavar="BYTES",
              help="With --constants embed: a constant larger than this stays a PARAM (a note says so).")
@compiler_command
def export_cmd(target, inputs, output, name, weights, var_specs, constants, max_constant_bytes):
  """Export a tinygrad function to a .uop file: FUNCTION in FILE.py is called once on empty tinygrad
  Tensors shaped by --input (nothing is computed; tinygrad records the graph) and its graph is written
  as one `func` entry. PARAM slots: the inputs in order, then the buffers the function reads that are
  not inputs (model weights: realize them in FILE.py first), then the outputs (`out`, or out0, out1...).
  Needs tinygrad 0.14 (pip install 'uopc[tinygrad]'). An op the exporter cannot write faithfully is an
  error naming the op and the line of FILE.py that made it. With --constants embed, the weights and
  other constant tensors of up to --max-constant-bytes each become BINARY data in the program (the
  library holds them: no weight arguments); larger ones stay PARAMs, each with a note.

  Sharded tensors (Tensor.shard over devices such as ("CPU:0", "CPU:1")) export as a multi-device
  program: a weight realized sharded is a PARAM on the devices, one argument per device shard; an input
  that FUNCTION shard()s is passed whole and scattered by the program; ops keep their meaning on the whole tensor (a reduction over the shard
  axis is an allreduce); a sharded output is written shard by shard, a replicated one (an allreduce's
  result) once, on the first device. What uopc cannot run on several devices is refused at its line.

  \b
  Example:
    uopc export model.py:block -i x=64x768 -o block.uop
    uopc export model.py:block -i x=Tx768 --var T=1..1024 -o block.uop
    uopc export model.py:mlp -i x=4x64 --constants embed -o mlp.uop
  """
  from uopc.export_cli import export_file
  text = export_file(target, list(inputs), name, weights, list(var_specs), constants, max_constant_bytes)
  if output: _write_atomic(Path(output), text)
  else: click.echo(text, nl=False)


_TUNE_HELP = """Search each kernel of FILE for faster opts than the heuristics' (BEAM search over the OptOps of
`--opts`, from the heuristics' choice and its variants with one opt replaced) and record them in the tuning database DB.json, which
`uopc build --tuning DB.json` then uses on any machine, with no device.

Candidates are built in parallel (-j, default every core), then timed one at a time on the device:
-t c and -t llvm on this CPU, -t cuda on GPU 0 (through the CUDA driver); each is run on the same
random inputs and its output checked against the heuristic kernel's (a candidate with another
output is never kept); its time is the median of several runs after a warm-up. --budget is the
run's time, shared among the kernels (--kernel-budget caps each); the database is saved after each
kernel, and kernels already in it are skipped unless --retune. Entries are keyed by the kernel's IR
after Rangeify, the target, the arch (-t c: the --cpu level) with the numeric modes (--fp-contract,
--allow-tf32: a build uses only entries tuned with the same) and the search-space version.

\b
Sharding and merging (several machines or GPUs tune one model):
  uopc tune model.uop -t cuda --db part0.json --shard 0/2    (and --shard 1/2 elsewhere)
  uopc tune --merge part0.json part1.json -o tuning.json

\b
Examples:
  uopc tune model.uop -t c --db tuning.json --budget 5m
  uopc build model.uop -t c --tuning tuning.json --tuning-report -o build/
"""


@cli.command("tune", help=_TUNE_HELP)
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False), metavar="FILE | --merge DB...")
@click.option("-t", "--target", default="c", show_default=True, type=click.Choice(["c", "llvm", "cuda"]), help="Target to tune for.")
@click.option("--db", "db_path", type=click.Path(dir_okay=False), metavar="DB.json", help="The tuning database to add to (created if missing).")
@click.option("--budget", default="300s", show_default=True, metavar="TIME", help="Time for the whole run: 300s, 5m, 1h.")
@click.option("--kernel-budget", default=None, metavar="TIME", help="Time at most per kernel (default: a fair share of what is left).")
@click.option("--beam", default=4, show_default=True, type=click.IntRange(1, 64), help="Kernels kept per round of the search.")
@click.option("-j", "--jobs", default=0, type=click.IntRange(0, 1024), help="Build workers (default 0: every core).")
@click.option("--shard", default="0/1", show_default=True, metavar="I/N", help="Tune only the kernels of shard I of N (0 <= I < N), by key.")
@click.option("--cpu", default="portable", show_default=True, type=click.Choice(["portable", "native", "x86-64-v2", "x86-64-v3", "x86-64-v4"]),
              help="-t c: the instruction set to tune for (as `uopc build --cpu`).")
@click.option("--arch", default=None, metavar="ARCH", help="-t cuda: the arch the entries are for (default: the arch of the GPU's image in a default build: "
              "sm_90a on an H100 or H200, whose kernels take wgmma where they can, else the GPU's own, e.g. sm_80). Entries "
              "for sm_90a serve a default build's sm_90a image, and its other kernels too where they pin no warpgroup tile.")
@click.option("--name", default=None, help="NAME, as in `uopc build --name` (the kernels' names in the database).")
@click.option("--fp-contract", type=click.Choice(["off", "fast"]), default=None,
              help="Tune the kernels as `uopc build --fp-contract=...` builds them (default: the target's, as `uopc build`); "
                   "entries serve only builds with the same setting.")
@click.option("--allow-tf32", is_flag=True, help="-t cuda: tune as `uopc build --allow-tf32` builds (tf32 tensor cores); entries only for such builds.")
@click.option("--retune", is_flag=True, help="Search again the kernels the database already has.")
@click.option("--merge", "merge", is_flag=True, help="Merge the databases FILES into -o (on a kernel in several, the fastest entry).")
@click.option("-o", "output", type=click.Path(dir_okay=False), help="With --merge: the merged database.")
@compiler_command
def tune_cmd(files, target, db_path, budget, kernel_budget, beam, jobs, shard, cpu, arch, name, fp_contract, allow_tf32, retune, merge,
             output):
  from uopc.tune.command import merge_files, parse_budget, parse_shard, tune
  from uopc.tune.search import TuneOptions
  if merge: return click.echo(merge_files(files, output))
  if len(files) != 1: raise click.UsageError("tune takes one FILE (or --merge DB...)")
  if db_path is None: raise click.UsageError("tune needs --db DB.json (the database to write)")
  options = TuneOptions(target, cpu, arch, parse_budget(budget, "--budget"), parse_budget(kernel_budget, "--kernel-budget") if kernel_budget else None,
                        beam, jobs, parse_shard(shard), retune=retune, name=name, fp_contract=_contract(fp_contract),
                        allow_tf32=allow_tf32)
  click.echo(tune(files[0], db_path, options))


def _contract(choice: str | None) -> bool | None:
  """--fp-contract's answer: True (fast), False (off), None (not given: the target's default, Target.contract)."""
  return None if choice is None else choice == "fast"


def _write_atomic(path: Path, text: str) -> None:
  tmp = path.with_name(f".{path.name}.tmp")
  tmp.write_text(text)
  tmp.replace(path)


def main():
  run_with_deep_stack(lambda: cli(prog_name="uopc"))


GC_YOUNG_THRESHOLD = 20_000  # allocations between young-generation collections (CPython's default: 700)


def run_with_deep_stack(fn) -> None:
  """Passes recurse over the program graph, whose depth is the user's longest chain of ops; run the
  compiler on a thread with a large stack so that deep programs compile instead of overflowing.

  The cyclic garbage collector runs less often: the compiler allocates millions of small objects
  (UOps, their source tuples, the passes' maps) that live to the end of a pass and form no cycles, and
  with the default thresholds the collections that re-walk them all took a third of the time of a
  20,000-op program's build (tests/bench/RESULTS.md, "Compile cost")."""
  import gc
  import threading
  gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
  sys.setrecursionlimit(1_000_000)
  threading.stack_size(1 << 30)  # 1 GiB of address space; pages are only touched as the recursion goes
  outcome: list[BaseException] = []

  def target():
    try:
      fn()
    except BaseException as e:  # noqa: BLE001 - handed to the main thread, which re-raises it
      outcome.append(e)

  worker = threading.Thread(target=target, name="uopc")
  worker.start()
  worker.join()
  if outcome: raise outcome[0]
