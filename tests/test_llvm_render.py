"""FileCheck tests of the LLVM IR renderer: how each target lowers threads, barriers, LDS, gated memory,
the dtypes that differ between registers and memory, and the ops whose semantics SPEC-NOTES pins; and
the errors it reports instead of rendering something wrong. Every rendered module is also parsed and
verified by LLVM."""
from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from test_llvm_memory import SHIFT  # the gated load that test runs against a guard page
from uopc.diagnostics import CompileError, Loc
from uopc.frontend import parse_source
from uopc.stages.linearize import linearize
from uopc.targets.llvm.compile import emit_object, parse_and_verify
from uopc.targets.llvm.render import render_kernel, render_module

ROOT = Path(__file__).resolve().parents[1]

LDS_REDUCE = """
kernel tile_sum {
  %out = PARAM {(0, "out")} : ptr<f32>
  %x = PARAM {(1, "x")} : ptr<f32>
  %tile = BUFFER {(2, "tile")} : ptr<f32, local, 64>
  %g = SPECIAL(4) {"gidx0"} : index
  %l = SPECIAL(64) {"lidx0"} : index
  %row = MUL(%g, 64)
  %i = ADD(%row, %l)
  %p1 = INDEX(%x, %i)
  %v = LOAD(%p1)
  %p2 = INDEX(%tile, %l)
  %st = STORE(%p2, %v)
  %b = BARRIER(%st)
  %t = AFTER(%tile, %b)
  %p3 = INDEX(%t, 0)
  %first = LOAD(%p3)
  %p4 = INDEX(%out, %i)
  STORE(%p4, %first)
}
"""

FLAT = """
kernel flat {
  %out = PARAM {(0, "out")} : ptr<i32>
  %n = DEFINE_VAR {("n", 1, 100000)}
  %i = SPECIAL(%n) {"idx0"} : index
  %c = CAST(%i) : i32
  %p7 = INDEX(%out, %i)
  STORE(%p7, %c)
}
"""

SEMANTICS = """
kernel sem {
  %o = PARAM {(0, "o")} : ptr<bool>
  %q = PARAM {(1, "q")} : ptr<i32>
  %u = PARAM {(2, "u")} : ptr<u32>
  %m = PARAM {(3, "m")} : ptr<f32>
  %a = PARAM {(4, "a")} : ptr<f32>
  %r = RANGE(8) {(0, AxisType.LOOP)}
  %p8 = INDEX(%a, %r)
  %x = LOAD(%p8)
  %ne = CMPNE(%x, %x)
  %p9 = INDEX(%o, %r)
  STORE(%p9, %ne)
  %xi = CAST(%x) : i32
  %d = IDIV(%xi, 3)
  %s = SHR(%d, 1)
  %p10 = INDEX(%q, %r)
  STORE(%p10, %s)
  %xu = CAST(%x) : u32
  %du = IDIV(%xu, 3)
  %su = SHR(%du, 1)
  %p11 = INDEX(%u, %r)
  STORE(%p11, %su)
  %mx = MAX(%x, 0.0)
  %p12 = INDEX(%m, %r)
  STORE(%p12, %mx)
}
"""


def kernel_of(text: str, target: str, arch: str | None = None):
  module = parse_source(text, "test.uop")
  entry = module.entries[0]
  return render_kernel(linearize(entry.sink), entry.name, target, arch, module.loc_of)


def rendered(text: str, target: str = "host", arch: str | None = None) -> str:
  """The module of one kernel, checked by LLVM's parser and verifier, and compiled to an object."""
  kernel = kernel_of(text, target, arch)
  module = render_module([kernel], target, arch)
  parse_and_verify(module)
  assert emit_object(module, target, arch)
  return module


def filecheck(text: str, checks: str) -> None:
  with tempfile.TemporaryDirectory() as tmp:
    check_file = Path(tmp) / "checks.txt"
    check_file.write_text(checks)
    tool = shutil.which("filecheck") or str(ROOT / ".venv/bin/filecheck")
    done = subprocess.run([tool, str(check_file)], input=text, capture_output=True, text=True)
  assert done.returncode == 0, f"{done.stdout}{done.stderr}\n--- input ---\n{text}"


def test_amdgpu_ids_barrier_and_lds():
  filecheck(rendered(LDS_REDUCE, "amdgcn", "gfx1100"), """
CHECK: target triple = "amdgcn-amd-amdhsa"
CHECK: @tile_sum.tile = internal addrspace(3) global [64 x float] poison
CHECK: define amdgpu_kernel void @tile_sum(ptr addrspace(1) noalias %out, ptr addrspace(1) noalias readonly %x) nounwind "amdgpu-flat-work-group-size"="1,64"
CHECK: call i32 @llvm.amdgcn.workgroup.id.x()
CHECK: call i32 @llvm.amdgcn.workitem.id.x()
CHECK: [[SLOT:%[a-z.0-9]+]] = getelementptr inbounds float, ptr addrspace(3) @tile_sum.tile, i64
CHECK: load float, ptr addrspace(1)
CHECK: store float {{.*}}, ptr addrspace(3) [[SLOT]]
CHECK-NEXT: fence syncscope("workgroup") release
CHECK-NEXT: call void @llvm.amdgcn.s.barrier()
CHECK-NEXT: fence syncscope("workgroup") acquire
CHECK: load float, ptr addrspace(3)
CHECK: store float {{.*}}, ptr addrspace(1)
CHECK-NOT: br label %loop
CHECK: ret void
CHECK: !{i32 1, !"amdhsa_code_object_version", i32 500}
""")


def test_host_threads_are_loops_and_barrier_needs_no_threads():
  """On the host gidx0 is a loop; a kernel whose workgroups have one thread keeps its BARRIER a no-op."""
  single = LDS_REDUCE.replace('%l = SPECIAL(64) {"lidx0"} : index', "%l = CONST {0} : index")
  filecheck(rendered(single), """
CHECK: define hidden void @tile_sum(ptr noalias %out, ptr noalias readonly %x) nounwind
CHECK: %tile.buf = alloca [64 x float], align 16
CHECK: [[LOOP:loop.[0-9]+]]:
CHECK-NEXT: %gidx0 = phi i64 [ 0, %entry.0 ], [ %gidx0.next, %[[LATCH:latch.[0-9]+]] ]
CHECK-NEXT: icmp slt i64 %gidx0, 4
CHECK-NOT: barrier
CHECK: [[LATCH]]:
CHECK-NEXT: %gidx0.next = add i64 %gidx0, 1
CHECK-NEXT: br label %[[LOOP]]
""")


def test_host_refuses_a_barrier_between_thread_loop_iterations():
  with pytest.raises(CompileError, match="BARRIER between the threads of a workgroup"):
    kernel_of(LDS_REDUCE, "host")


def test_gated_load_reads_memory_only_when_the_gate_holds():
  filecheck(rendered(SHIFT), """
CHECK: [[BEFORE:body.[0-9]+]]:
CHECK: [[GATE:%[a-z.0-9]+]] = icmp slt i64
CHECK-NEXT: br i1 [[GATE]], label %[[LOAD:load.[0-9]+]], label %[[DONE:loaded.[0-9]+]]
CHECK: [[LOAD]]:
CHECK-NEXT: [[V:%[a-z.0-9]+]] = load float
CHECK-NEXT: br label %[[DONE]]
CHECK: [[DONE]]:
CHECK-NEXT: phi float [ [[V]], %[[LOAD]] ], [ 0xBFF0000000000000, %[[BEFORE]] ]
""")


def test_flat_index_is_guarded_by_its_bound_on_amdgpu():
  filecheck(rendered(FLAT, "amdgcn", "gfx90a"), """
CHECK: define amdgpu_kernel void @flat(ptr addrspace(1) noalias %out, i64 %n) nounwind "amdgpu-flat-work-group-size"="1,256"
CHECK: [[G:%[a-z.0-9]+]] = call i32 @llvm.amdgcn.workgroup.id.x()
CHECK: [[T:%[a-z.0-9]+]] = call i32 @llvm.amdgcn.workitem.id.x()
CHECK: mul i64 {{.*}}, 256
CHECK: [[IDX:%idx0[.0-9]*]] = add i64
CHECK: [[IN:%[a-z.0-9]+]] = icmp slt i64 [[IDX]], %n
CHECK: br i1 [[IN]], label %inside.{{[0-9]+}}, label %exit.0
""")


def test_host_flat_index_loops_to_its_run_time_bound():
  filecheck(rendered(FLAT), """
CHECK: define hidden void @flat(ptr noalias %out, i64 %n)
CHECK: %idx0 = phi i64
CHECK-NEXT: icmp slt i64 %idx0, %n
""")


def test_semantics_of_compares_division_shifts_max_and_bool_memory():
  filecheck(rendered(SEMANTICS), """
CHECK: fcmp une float
CHECK: zext i1 {{.*}} to i8
CHECK: store i8
CHECK: fptosi float {{.*}} to i32
CHECK: sdiv i32
CHECK: ashr i32
CHECK: fptoui float {{.*}} to i32
CHECK: udiv i32
CHECK: lshr i32
CHECK: call float @llvm.maximum.f32
""")


def test_bool_loads_are_bytes_compared_with_zero():
  text = """
kernel nots {
  %o = PARAM {(0, "o")} : ptr<bool>
  %i = PARAM {(1, "i")} : ptr<bool>
  %p13 = INDEX(%i, 0)
  %v = LOAD(%p13)
  %n = NOT(%v)
  %p14 = INDEX(%o, 0)
  STORE(%p14, %n)
}
"""
  filecheck(rendered(text), """
CHECK: [[B:%[a-z.0-9]+]] = load i8
CHECK-NEXT: [[V:%[a-z.0-9]+]] = icmp ne i8 [[B]], zeroinitializer
CHECK-NEXT: xor i1 [[V]], true
""")


def test_register_buffers_are_private_allocas_on_amdgpu():
  text = """
kernel acc {
  %o = PARAM {(0, "o")} : ptr<f32>
  %acc = BUFFER {(1, "acc")} : ptr<f32, reg, 1>
  %p15 = INDEX(%acc, 0)
  %z = STORE(%p15, 0.0)
  %a = AFTER(%acc, %z)
  %p16 = INDEX(%a, 0)
  %v = LOAD(%p16)
  %p17 = INDEX(%o, 0)
  STORE(%p17, %v)
}
"""
  filecheck(rendered(text, "amdgcn", "gfx942"), """
CHECK: %acc.buf = alloca [1 x float], align 16, addrspace(5)
CHECK: store float 0x0000000000000000, ptr addrspace(5)
""")


@pytest.mark.parametrize("op", ["SIN", "POW"])
def test_amdgpu_refuses_transcendentals_without_an_accurate_lowering(op):
  args = "%x, %x" if op == "POW" else "%x"
  text = f"""
kernel t {{
  %o = PARAM {{(0, "o")}} : ptr<f32>
  %p18 = INDEX(%o, 0)
  %x = LOAD(%p18)
  %y = {op}({args})
  %p19 = INDEX(%o, 0)
  STORE(%p19, %y)
}}
"""
  with pytest.raises(CompileError, match=f"{op} on f32 has no AMDGPU lowering") as info:
    kernel_of(text, "amdgcn")
  assert info.value.diagnostics[0].loc.line == 6  # the op's line
  assert "llvm.sin.f32" in rendered(text, "host") or "llvm.pow.f32" in rendered(text, "host")


def test_amdgpu_keeps_correctly_rounded_sqrt():
  text = """
kernel s {
  %o = PARAM {(0, "o")} : ptr<f32>
  %p20 = INDEX(%o, 0)
  %x = LOAD(%p20)
  %p21 = INDEX(%o, 0)
  %p22 = SQRT(%x)
  STORE(%p21, %p22)
}
"""
  filecheck(rendered(text, "amdgcn", "gfx1100"), "CHECK: call float @llvm.sqrt.f32\n")


def test_vectors_load_build_and_split():
  text = """
kernel v {
  %o = PARAM {(0, "o")} : ptr<f32>
  %x = PARAM {(1, "x")} : ptr<f32>
  %p23 = INDEX(%x, 0)
  %v = LOAD(%p23) : f32x4
  %w = ADD(%v, %v)
  %a = GEP(%w) {(3,)} : f32
  %b = GEP(%w) {(0,)} : f32
  %s = STACK(%a, %b, %a, %b) : f32x4
  %p24 = INDEX(%o, 0)
  STORE(%p24, %s)
}
"""
  filecheck(rendered(text), """
CHECK: load <4 x float>, ptr {{.*}}, align 4
CHECK: fadd <4 x float>
CHECK: extractelement <4 x float> {{.*}}, i32 3
CHECK: insertelement <4 x float>
CHECK: store <4 x float>
""")


def test_renderer_output_is_deterministic():
  assert rendered(LDS_REDUCE, "amdgcn") == rendered(LDS_REDUCE, "amdgcn")
  assert rendered(SEMANTICS) == rendered(SEMANTICS)


def test_buffers_sharing_a_name_get_distinct_storage():
  text = """
kernel twice {
  %o = PARAM {(0, "o")} : ptr<f32>
  %a = BUFFER {(1, "acc")} : ptr<f32, reg, 1>
  %b = BUFFER {(2, "acc")} : ptr<f32, reg, 2>
  %pa = INDEX(%a, 0)
  %sa = STORE(%pa, 1.0)
  %pb = INDEX(%b, 1)
  %sb = STORE(%pb, 2.0)
  %aa = AFTER(%a, %sa)
  %ab = AFTER(%b, %sb)
  %qa = INDEX(%aa, 0)
  %qb = INDEX(%ab, 1)
  %va = LOAD(%qa)
  %vb = LOAD(%qb)
  %s = ADD(%va, %vb)
  %po = INDEX(%o, 0)
  STORE(%po, %s)
}
"""
  filecheck(rendered(text), """
CHECK-DAG: %acc.buf = alloca [1 x float]
CHECK-DAG: %acc.2.buf = alloca [2 x float]
""")


@pytest.mark.parametrize("target", ["host", "amdgcn"])
def test_ops_it_cannot_render_are_located_errors(target):
  from uopc.dtype import dtypes
  from uopc.ops import Ops
  from uopc.uop import UOp
  out = UOp(Ops.PARAM, dtypes.float32.ptr(), (), (0, "out"))
  custom = UOp(Ops.CUSTOM, dtypes.float32, (), "sinf(1)")
  store = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, out.dtype, (out, UOp.const(dtypes.index, 0))), custom))
  where = Loc("prog.uop", 7, 3)
  with pytest.raises(CompileError, match="CUSTOM injects source text") as info:
    render_kernel(linearize(UOp(Ops.SINK, dtypes.void, (store,))), "k", target, None, lambda u: where if u is custom else None)
  assert info.value.diagnostics[0].loc == where


def test_print_after_render_shows_the_llvm_ir(tmp_path):
  from click.testing import CliRunner
  from uopc.cli import cli
  result = CliRunner().invoke(cli, ["build", str(ROOT / "samples" / "seed002_add2.uop"), "-t", "llvm", "-o", str(tmp_path),
                                    "--print-after", "render"])
  assert result.exit_code == 0, result.output
  filecheck(result.output, """
CHECK: # *** IR after render: seed002_add2__seed002_add2_k0 ***
CHECK: define hidden void @seed002_add2__seed002_add2_k0(ptr noalias %data0, ptr noalias readonly %data1, ptr noalias readonly %data2)
CHECK: %lidx0 = phi i64
""")


def test_program_names_never_clash_with_labels_or_loop_counters():
  """Buffers named like the renderer's own names (entry, exit, loop counters) still give valid IR."""
  text = """
kernel clash {
  %exit = PARAM {(0, "exit")} : ptr<i32>
  %entry = PARAM {(1, "entry")} : ptr<i32>
  %ridx0 = PARAM {(2, "ridx0")} : ptr<i32>
  %r = RANGE(4) {(0, AxisType.LOOP)}
  %pe = INDEX(%entry, %r)
  %v = LOAD(%pe)
  %pr = INDEX(%ridx0, %r)
  %w = LOAD(%pr)
  %s = ADD(%v, %w)
  %px = INDEX(%exit, %r)
  STORE(%px, %s)
}
"""
  filecheck(rendered(text), """
CHECK: define hidden void @clash(ptr noalias %exit, ptr noalias readonly %entry, ptr noalias readonly %ridx0)
CHECK: %ridx0.{{[0-9]+}} = phi i64
""")


def test_names_from_the_input_stay_data():
  """Quotes, comment markers, NUL, newlines, non-ASCII, names shaped like generated ones, a repeated name:
  each argument gets a name of [A-Za-z0-9_.] (arg.<slot>.<name with other characters as _>), so none of
  the input's characters reaches the IR, and LLVM's parser takes it for both targets."""
  names = ['o*/ system(\\"id\\"); /*', "a\\x00b\\nc", "exit.0", "val.1", "\u00e9\u6f22", "x", "x", "%1 = add"]
  lines = [f'  %p{i} = PARAM {{({i}, "{n}")}} : ptr<f32>' for i, n in enumerate(names)] + ["  %r = RANGE(4) {(0, AxisType.LOOP)}"]
  for i in range(len(names)): lines += [f"  %i{i} = INDEX(%p{i}, %r)", f"  %v{i} = LOAD(%i{i})"]
  lines += ["  %s0 = ADD(%v0, %v1)"] + [f"  %s{i} = ADD(%s{i - 1}, %v{i + 1})" for i in range(1, len(names) - 1)]
  text = "kernel hostile {\n" + "\n".join(lines) + f"\n  STORE(%i0, %s{len(names) - 2})\n}}\n"
  for target, arch in (("host", None), ("amdgcn", "gfx90a")):
    ir = rendered(text, target, arch)
    define = next(line for line in ir.splitlines() if line.startswith("define"))
    assert re.findall(r"%([^ ,)]+)", define) == ["arg.0.o___system__id______", "arg.1.a_b_c", "arg.2.exit_0", "arg.3.val_1",
                                                  "arg.4.__", "x", "arg.6.x", "arg.7._1___add"]
    assert all(ord(c) < 128 for c in ir) and "system(" not in ir and "/*" not in ir
