"""`-t cuda` without a GPU: ptxas accepts every sample and every per-op x per-dtype kernel for sm_80 and
sm_90; FileCheck checks of the PTX-specific lowering; the launcher compiles warning-free against its
header and, with no CUDA driver on the machine, reports that through its status codes; the build
falls back to a PTX-only fatbin without ptxas and to embedded PTX without fatbinary."""
from __future__ import annotations

import ctypes
import os
import pathlib
import shutil
import re
import subprocess
import sys
import textwrap

import pytest

from test_c_ops import CASES
from uopc.diagnostics import CompileError
from uopc.dtype import AddrSpace, dtypes
from uopc.driver import BuildOptions, build
from uopc.launcher import EntryKernels, Workspace, c_identifier, kernel_name
from uopc.ops import AxisType, Ops
from uopc.stages.isel import isel
from uopc.targets import get_target
from uopc.stages.linearize import linearize
from uopc.targets.cuda import toolchain
from uopc.targets.cuda.launcher import render_header, render_source
from uopc.targets.cuda.ptx import render_kernel, render_module
from uopc.uop import UOp

ROOT = pathlib.Path(__file__).resolve().parent.parent
SAMPLES = sorted((ROOT / "samples").glob("*.uop"))
PTXAS = toolchain.find_tool("ptxas")
needs_ptxas = pytest.mark.skipif(PTXAS is None, reason="ptxas not found (CUDA_HOME, PATH or the nvidia-cuda-nvcc wheel)")
REFUSED = {Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.POW}  # approximate only (EXP2: of float64): isel decomposes them
idx = dtypes.index


def ptxas_accepts(ptx: str, arch: str, tmp_path: pathlib.Path, opt: str = "-O3") -> None:
  src = tmp_path / f"m_{arch}.ptx"
  src.write_text(ptx)
  done = subprocess.run([str(PTXAS), f"-arch={arch}", opt, src.name, "-o", f"m_{arch}.cubin"], cwd=tmp_path,
                        capture_output=True, text=True)
  assert done.returncode == 0, done.stderr[:4000]


def filecheck(text: str, checks: str, tmp_path: pathlib.Path) -> None:
  """Run the `filecheck` package's FileCheck on text with the CHECK lines `checks`."""
  check_file = tmp_path / "checks.txt"
  check_file.write_text(textwrap.dedent(checks))
  done = subprocess.run([shutil.which("filecheck") or str(pathlib.Path(sys.executable).parent / "filecheck"), str(check_file)],
                        input=text, capture_output=True, text=True)
  assert done.returncode == 0, f"{done.stdout}{done.stderr}\n--- input ---\n{text}"


def op_of(case) -> Ops: return case.sink.src[0].src[0].src[1].op


def lowered(case, fast_math: bool = False) -> UOp:
  """The case's kernel as the pipeline hands it to the renderer: through Instruction Selection for cuda."""
  return linearize(isel(case.sink, get_target("cuda").ops, fast_math))


# ---- ptxas accepts everything the renderer makes ---------------------------------------------------------------
@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_ptxas_accepts_every_op_and_dtype(arch, tmp_path):
  # -O0: the check is that the PTX is valid (types, operands, arch); optimising 500 kernels adds nothing to it
  kernels = [render_kernel(lowered(c), c.name, arch) for c in CASES.values()]
  ptxas_accepts(render_module(kernels, arch), arch, tmp_path, "-O0")


@needs_ptxas
def test_fast_math_transcendentals_assemble(tmp_path):
  kernels = [render_kernel(lowered(c, fast_math=True), c.name, fast_math=True) for c in CASES.values() if op_of(c) in REFUSED]
  ptx = render_module(kernels)
  assert "ex2.approx.f32" in ptx and "lg2.approx.f32" in ptx and "sin.approx.f32" in ptx
  assert "fma.rn.f32" in render_kernel(lowered(CASES["k_mulacc_float32"], fast_math=True), "k", fast_math=True).source
  ptxas_accepts(ptx, "sm_80", tmp_path, "-O0")


@needs_ptxas
@pytest.mark.parametrize("sample", [s.name for s in SAMPLES])
def test_samples_build_with_ptxas(sample, tmp_path):
  """Every sample builds (SASS for sm_80 and sm_90 by ptxas, fatbin, launcher), or, while Instruction
  Selection is not in the pipeline, is refused for a transcendental with a diagnostic naming it."""
  try:
    written = build(ROOT / "samples" / sample, BuildOptions(target="cuda", out_dir=tmp_path))
  except CompileError as e:
    assert any(op.name in d.message for d in e.diagnostics for op in REFUSED), e.format()
    return
  assert {p.name for p in written} >= {f"{pathlib.Path(sample).stem}.{ext}" for ext in ("ptx", "fatbin", "h")}


def _unary_kernel(op: Ops, dt) -> tuple[UOp, UOp]:
  """out[r] = op(float(r)) over 4 elements of dt: (the kernel, the op's uop)."""
  r = UOp(Ops.RANGE, idx, (UOp.const(idx, 4),), (0, AxisType.LOOP))
  out = UOp(Ops.PARAM, dt.ptr(), (), (0, "out"))
  u = UOp(op, dt, (UOp(Ops.CAST, dt, (r,)),))
  return UOp(Ops.SINK, src=(UOp(Ops.END, src=(UOp(Ops.STORE, src=(UOp(Ops.INDEX, out.dtype, (out, r)), u)), r)),)), u


def test_refusals_name_the_op_with_its_location():
  sink, log = _unary_kernel(Ops.LOG2, dtypes.float32)
  from uopc.diagnostics import Loc
  with pytest.raises(CompileError) as e:
    render_kernel(linearize(sink), "k", loc_of=lambda u: Loc("f.uop", 3, 7) if u is log else None)
  (d,) = e.value.diagnostics
  assert "LOG2" in d.message and str(d.loc) == "f.uop:3:7"
  with pytest.raises(CompileError, match="sm_80 or later"):
    render_kernel(linearize(sink), "k", arch="sm_75", fast_math=True)


def test_exp2_is_ex2_approx_without_ftz_except_for_float64(tmp_path):
  """ex2.approx.f32 meets the 2-ULP bar (checked on every input by test_cuda_gpu.py) but only without .ftz,
  which would flush subnormal results; float64 has no accurate instruction and is refused."""
  for dt in (dtypes.float32, dtypes.float16, dtypes.bfloat16):
    filecheck(render_kernel(linearize(_unary_kernel(Ops.EXP2, dt)[0]), "k").source, """
      CHECK-NOT: ftz
      CHECK: ex2.approx.f32
      CHECK-NOT: ftz
      """, tmp_path)
  with pytest.raises(CompileError, match="EXP2 of float64"):
    render_kernel(linearize(_unary_kernel(Ops.EXP2, dtypes.float64)[0]), "k")


# ---- FileCheck: the PTX-specific lowering ---------------------------------------------------------------------------
def _kernel(*stores: UOp) -> str:
  return render_kernel(linearize(UOp(Ops.SINK, src=stores)), "k").source


def _param(slot: int, dt=dtypes.float32):
  return UOp(Ops.PARAM, dt.ptr(), (), (slot, f"data{slot}"))


def test_special_registers_and_flat_index_guard(tmp_path):
  out, x = _param(0), _param(1)
  g, l = UOp(Ops.SPECIAL, idx, (UOp.const(idx, 8),), "gidx0"), UOp(Ops.SPECIAL, idx, (UOp.const(idx, 4),), "lidx1")
  i = g.alu(Ops.MUL, UOp.const(idx, 4)).alu(Ops.ADD, l)
  a = UOp(Ops.STORE, src=(UOp(Ops.INDEX, out.dtype, (out, i)), UOp(Ops.LOAD, dtypes.float32, (UOp(Ops.INDEX, x.dtype, (x, i)),))))
  filecheck(_kernel(a), """
    CHECK: mov.u32 [[G:%r[0-9]+]], %ctaid.x;
    CHECK: mov.u32 [[L:%r[0-9]+]], %tid.y;
    CHECK-NOT: bra
    CHECK: ld.global.f32
    CHECK: st.global.f32
    """, tmp_path)
  f = UOp(Ops.SPECIAL, idx, (UOp.const(idx, 1000),), "idx0")
  b = UOp(Ops.STORE, src=(UOp(Ops.INDEX, out.dtype, (out, f)), UOp.const(dtypes.float32, 1.0)))
  filecheck(_kernel(b), """
    CHECK: mov.u32 [[B:%r[0-9]+]], %ctaid.x;
    CHECK: mov.u32 [[N:%r[0-9]+]], %ntid.x;
    CHECK: mov.u32 [[T:%r[0-9]+]], %tid.x;
    CHECK: mul.wide.u32 [[W:%rd[0-9]+]], [[B]], [[N]];
    CHECK: add.s64 [[I:%rd[0-9]+]]
    CHECK: setp.ge.s64 [[P:%p[0-9]+]], [[I]]
    CHECK: @[[P]] bra [[SKIP:\\$L[0-9]+]];
    CHECK: st.global.f32
    CHECK: [[SKIP]]:
    CHECK-NEXT: ret;
    """, tmp_path)
  exact = UOp(Ops.SPECIAL, idx, (UOp.const(idx, 1024),), "idx0")  # a multiple of the block: no guard
  assert "bra" not in _kernel(UOp(Ops.STORE, src=(UOp(Ops.INDEX, out.dtype, (out, exact)), UOp.const(dtypes.float32, 1.0))))


def test_gated_loads_yield_alt_and_gated_stores_are_predicated(tmp_path):
  out, x = _param(0), _param(1)
  r = UOp(Ops.RANGE, idx, (UOp.const(idx, 10),), (0, AxisType.LOOP))
  gate = r.alu(Ops.CMPLT, UOp.const(idx, 5))
  ld = UOp(Ops.LOAD, dtypes.float32, (UOp(Ops.INDEX, x.dtype, (x, r)), UOp.const(dtypes.float32, -1.0), gate))
  st = UOp(Ops.STORE, src=(UOp(Ops.INDEX, out.dtype, (out, r)), ld, gate))
  filecheck(_kernel(UOp(Ops.END, src=(st, r))), """
    CHECK: mov.f32 [[ALT:%f[0-9]+]], 0fBF800000;
    CHECK: [[TOP:\\$L[0-9]+]]:
    CHECK: setp.ge.s64 {{%p[0-9]+}}
    CHECK: setp.lt.s64 [[G:%p[0-9]+]]
    CHECK: mov.f32 [[V:%f[0-9]+]], [[ALT]];
    CHECK-NEXT: @[[G]] ld.global.f32 [[V]], [{{%rd[0-9]+}}];
    CHECK: @[[G]] st.global.f32 [{{%rd[0-9]+}}], [[V]];
    CHECK: add.s64
    CHECK-NEXT: bra.uni [[TOP]];
    """, tmp_path)


def test_shared_memory_barrier_and_vector_loads(tmp_path):
  out, x = _param(0), _param(1)
  lid = UOp(Ops.SPECIAL, idx, (UOp.const(idx, 64),), "lidx0")
  temp = UOp(Ops.BUFFER, dtypes.float32.ptr(AddrSpace.LOCAL, 256), (), (0, "temp"))
  four = lid.alu(Ops.MUL, UOp.const(idx, 4))
  v = UOp(Ops.LOAD, dtypes.float32.vec(4), (UOp(Ops.INDEX, x.dtype, (x, four)),))
  fill = UOp(Ops.STORE, src=(UOp(Ops.INDEX, temp.dtype, (temp, four)), v))
  bar = UOp(Ops.BARRIER, src=(fill,))
  back = UOp(Ops.INDEX, temp.dtype, (UOp(Ops.AFTER, temp.dtype, (temp, bar)), UOp.const(idx, 252).alu(Ops.SUB, four)))
  st = UOp(Ops.STORE, src=(UOp(Ops.INDEX, out.dtype, (out, four)), UOp(Ops.LOAD, dtypes.float32.vec(4), (back,))))
  filecheck(_kernel(st), """
    CHECK: .shared .align 16 .b8 temp0[1024];
    CHECK: mov.u64 [[T:%rd[0-9]+]], temp0;
    CHECK: mov.u32 {{%r[0-9]+}}, %tid.x;
    CHECK: ld.global.v4.f32 {[[A:%f[0-9]+]], {{%f[0-9]+}}, {{%f[0-9]+}}, {{%f[0-9]+}}}, [{{%rd[0-9]+}}];
    CHECK: st.shared.v4.f32 [{{%rd[0-9]+}}], {[[A]],
    CHECK: bar.sync 0;
    CHECK: ld.shared.v4.f32
    CHECK: st.global.v4.f32
    """, tmp_path)


def test_semantics_instructions(tmp_path):
  """SPEC-NOTES spelled in PTX: truncating IDIV, MOD as rem, arithmetic SHR on signed, NaN-true CMPNE,
  NaN-propagating MAX, correctly rounded DIV/SQRT/RECIP, bf16 rounded once, bools as bytes."""
  src = {n: render_kernel(lowered(CASES[n]), n).source for n in
         ("k_idiv_int32", "k_mod_int64", "k_shr_int16", "k_shr_uint32", "k_cmpne_float32", "k_max_float32", "k_div_float32",
          "k_sqrt_float32", "k_recip_float64", "k_add_bfloat16", "k_cmpne_bool", "k_add_int8", "k_cast_float32_to_int8",
          "k_cast_int32_to_float32", "k_bitcast_float32_to_int32", "k_add_float16", "k_cmpge_float32")}
  expect = {"k_idiv_int32": "div.s32", "k_mod_int64": "rem.s64", "k_shr_int16": "shr.s32", "k_shr_uint32": "shr.u32",
            "k_cmpne_float32": "setp.neu.f32", "k_max_float32": "max.NaN.f32", "k_div_float32": "div.rn.f32",
            "k_sqrt_float32": "sqrt.rn.f32", "k_recip_float64": "rcp.rn.f64", "k_add_bfloat16": "cvt.rn.bf16.f32",
            "k_cmpne_bool": "ld.global.u8", "k_add_int8": "cvt.s32.s8", "k_cast_float32_to_int8": "cvt.rzi.s32.f32",
            "k_cast_int32_to_float32": "cvt.rn.f32.s32", "k_bitcast_float32_to_int32": "mov.b32",
            "k_add_float16": "add.rn.f16", "k_cmpge_float32": "setp.geu.f32"}
  for name, instr in expect.items(): assert f"{instr} " in src[name], f"{name}: no {instr}\n{src[name]}"
  filecheck(src["k_cmpne_bool"], """
    CHECK: ld.global.u8 [[A:%r[0-9]+]]
    CHECK: setp.ne.u32 [[PA:%p[0-9]+]], [[A]], 0;
    CHECK: xor.pred [[X:%p[0-9]+]]
    CHECK: selp.u32 [[B:%r[0-9]+]], 1, 0, [[X]];
    CHECK: st.global.u8 [{{%rd[0-9]+}}], [[B]];
    """, tmp_path)


def test_module_header():
  ptx = render_module([render_kernel(lowered(CASES["k_add_int32"]), "k")])
  assert ptx.splitlines()[4:7] == [".version 7.8", ".target sm_80", ".address_size 64"]
  assert ".visible .entry k(" in ptx


# ---- the launcher --------------------------------------------------------------------------------------------------
LIB = "cudaops"


def _entries():
  names = ["k_add_float32", "k_where_int8", "k_cast_float16_to_bfloat16"]
  prefix = c_identifier(LIB)
  entries = [EntryKernels(n, (render_kernel(lowered(CASES[n]), kernel_name(prefix, n, 0)),)) for n in names]
  two = tuple(render_kernel(lowered(CASES[n]), kernel_name(prefix, "pair", i)) for i, n in enumerate(["k_add_float32", "k_mul_float32"]))
  entries.append(EntryKernels("pair", two, Workspace(4096, ((1, 0),))))
  return entries


def _compile(cmd: list[str], cwd: pathlib.Path) -> None:
  done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
  assert done.returncode == 0, f"{' '.join(cmd)}\n{done.stdout}{done.stderr}"


@pytest.fixture(scope="module")
def launcher_lib(tmp_path_factory):
  out = tmp_path_factory.mktemp("cuda_launcher")
  entries = _entries()
  (out / f"{LIB}.h").write_text(render_header(LIB, entries))
  (out / f"{LIB}_cuda.c").write_text(render_source(LIB, entries, render_module([k for e in entries for k in e.kernels]).encode() + b"\0"))
  _compile(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-fPIC", "-shared", "-fvisibility=hidden",
            f"{LIB}_cuda.c", "-o", f"lib{LIB}.so", "-ldl", "-lpthread"], out)
  return out


def test_launcher_compiles_and_links_against_its_header(launcher_lib):
  main = launcher_lib / "main.c"
  main.write_text(f"""#include "{LIB}.h"
#include <stdio.h>
int main(void) {{
  float out[96] = {{0}}, a[96] = {{0}}, b[96] = {{0}};
  int s = {LIB}_k_add_float32(out, a, b, (CUstream)0);
  printf("%d %s %d %s\\n", {LIB}_num_entries(), {LIB}_entry_info(3)->name, s, {LIB}_strerror(UOPC_ERR_ALIASED));
  return {LIB}_find_entry("pair") == 3 ? 0 : 1;
}}
""")
  _compile(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "main.c", "-o", "main", f"-L{launcher_lib}", f"-l{LIB}",
            f"-Wl,-rpath,{launcher_lib}"], launcher_lib)
  if shutil.which("g++"):
    (launcher_lib / "main.cc").write_text(f'#include "{LIB}.h"\nint main() {{ return {LIB}_num_entries() == 4 ? 0 : 1; }}\n')
    _compile(["g++", "-std=c++11", "-Wall", "-Wextra", "-Werror", "main.cc", "-o", "maincc", f"-L{launcher_lib}", f"-l{LIB}",
              f"-Wl,-rpath,{launcher_lib}"], launcher_lib)
  done = subprocess.run([str(launcher_lib / "main")], capture_output=True, text=True)
  assert done.returncode == 0 and done.stdout.startswith("4 pair ")
  header = (launcher_lib / f"{LIB}.h").read_text()
  assert "typedef struct CUstream_st* CUstream;" in header and "#include <cuda" not in header
  assert f"int {LIB}_pair(float* out, const float* in1, CUstream stream);" in header  # slot 1 is the workspace


def _have_driver() -> bool:
  try:
    ctypes.CDLL("libcuda.so.1")
    return True
  except OSError:
    return False


def test_argument_checks_come_before_the_driver(launcher_lib):
  lib = ctypes.CDLL(str(launcher_lib / f"lib{LIB}.so"))
  fn = getattr(lib, f"{LIB}_k_add_float32")
  fn.argtypes = [ctypes.c_void_p] * 4
  buf = ctypes.create_string_buffer(16)
  assert fn(None, buf, buf, None) == 1  # UOPC_ERR_NULL_POINTER
  assert fn(buf, buf, ctypes.create_string_buffer(16), None) == 3  # UOPC_ERR_ALIASED
  strerror = getattr(lib, f"{LIB}_strerror")
  strerror.restype = ctypes.c_char_p
  assert b"CUDA driver" in strerror(100)
  if not _have_driver():
    assert fn(buf, ctypes.create_string_buffer(16), ctypes.create_string_buffer(16), None) == 100  # UOPC_CUDA_ERR_NO_DRIVER


# ---- the build: artifacts, fallbacks, arch checks, determinism ----------------------------------------------------------------
SAMPLE = ROOT / "samples" / "seed002_add2.uop"


def _tools_dir(tmp_path: pathlib.Path, *tools: str) -> dict[str, str]:
  """An environment whose PATH holds only `tools` (found on this machine) and a C compiler."""
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  for t in tools: (bin_dir / t).symlink_to(toolchain.find_tool(t))
  env = {k: v for k, v in os.environ.items() if k != "CUDA_HOME"}
  return env | {"PATH": f"{bin_dir}:{pathlib.Path(shutil.which('cc')).parent}"}


def test_without_ptxas_the_fatbin_holds_only_ptx(tmp_path, monkeypatch, capsys):
  if toolchain.find_tool("fatbinary") is None: pytest.skip("fatbinary not found")
  monkeypatch.setattr(toolchain, "_wheel_bin_dirs", lambda: [])
  env = _tools_dir(tmp_path, "fatbinary")
  written = build(SAMPLE, BuildOptions(target="cuda", out_dir=tmp_path / "out", env=env))
  assert "seed002_add2.fatbin" in {p.name for p in written}
  assert capsys.readouterr().err.count("no ptxas") == 1


def test_without_cuda_tools_the_library_embeds_the_ptx(tmp_path, monkeypatch, capsys):
  monkeypatch.setattr(toolchain, "_wheel_bin_dirs", lambda: [])
  env = _tools_dir(tmp_path)
  written = build(SAMPLE, BuildOptions(target="cuda", out_dir=tmp_path / "out", env=env))
  assert {p.name for p in written} == {"seed002_add2.ptx", "seed002_add2_cuda.c", "libseed002_add2.so", "seed002_add2.h"}
  assert capsys.readouterr().err.count("no fatbinary") == 1
  source = (tmp_path / "out" / "seed002_add2_cuda.c").read_text()
  image = re.search(r"__image\[\] __attribute__\(\(aligned\(16\)\)\) = \{([^}]*)\};", source).group(1)
  assert bytes(int(b) for b in image.replace(",", " ").split()) == (tmp_path / "out" / "seed002_add2.ptx").read_bytes() + b"\0"


@needs_ptxas
def test_arch_list_and_byte_identical_outputs(tmp_path):
  a = build(SAMPLE, BuildOptions(target="cuda", out_dir=tmp_path / "a", archs=("sm_86",)))
  b = build(SAMPLE, BuildOptions(target="cuda", out_dir=tmp_path / "b", archs=("sm_86",)))
  assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]
  default = build(SAMPLE, BuildOptions(target="cuda", out_dir=tmp_path / "c"))
  fatbins = [next(p for p in ps if p.suffix == ".fatbin").read_bytes() for ps in (a, default)]
  assert fatbins[0] != fatbins[1]
  with pytest.raises(CompileError, match="sm_70"):
    build(SAMPLE, BuildOptions(target="cuda", out_dir=tmp_path / "d", archs=("sm_70",)))


def test_emit_picks_artifacts(tmp_path):
  written = build(SAMPLE, BuildOptions(target="cuda", out_dir=tmp_path, emit=("ptx", "header")))
  assert sorted(p.name for p in written) == ["seed002_add2.h", "seed002_add2.ptx"]
