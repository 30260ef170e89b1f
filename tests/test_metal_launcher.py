"""The Metal launcher: NAME.h is valid C99 and C++11, NAME_launcher.m passes clang's Objective-C
checks against the stub SDK headers in tests/metal/sdk, and the encoded launches follow the kernels'
SPECIAL bounds and argument positions. (Running it needs macOS and a GPU: never here.)"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from test_metal import LOOP, REDUCE_LOCAL, filecheck, needs_clang

from uopc.frontend import parse_source
from uopc.launcher import EntryKernels
from uopc.stages.linearize import linearize
from uopc.targets.metal.launcher import build_macos, render_header, render_launcher
from uopc.targets.metal.render import render_kernel, render_module

SDK = Path(__file__).parent / "metal" / "sdk"
FLAT = """kernel flat {
  %out = PARAM {(0, "out")} : ptr<f32>
  %n = DEFINE_VAR {("n", 1, 100000)} : index
  %i = SPECIAL(%n) {"idx0"} : index
  %p = INDEX(%out, %i) : ptr<f32>
  %st = STORE(%p, 1.0)
  SINK(%st)
}
"""


def _entries(name: str):
  out = []
  for text, entry in ((REDUCE_LOCAL, "reduce"), (LOOP, "sum"), (FLAT, "flat")):
    m = parse_source(text, f"{entry}.uop")
    out.append(EntryKernels(entry, (render_kernel(linearize(m.entries[0].sink), f"{name}__{entry}_k0", m.loc_of),)))
  return out


@pytest.fixture
def built(tmp_path):
  entries = _entries("lib")
  (tmp_path / "lib.h").write_text(render_header("lib", entries))
  launcher = render_launcher("lib", entries, render_module([k for e in entries for k in e.kernels]))
  (tmp_path / "lib_launcher.m").write_text(launcher)
  return tmp_path


@pytest.mark.parametrize("compiler,lang", [("gcc", ["-x", "c", "-std=c99"]), ("g++", ["-x", "c++", "-std=c++11"])])
def test_header_is_c99_and_cxx11(built, compiler, lang):
  done = subprocess.run([compiler, *lang, "-fsyntax-only", "-Wall", "-Werror", "-pedantic", str(built / "lib.h")],
                        capture_output=True, text=True)
  assert done.returncode == 0, done.stderr


def _objc_errors(path: Path) -> str:
  cmd = ["clang", "-x", "objective-c", "-fsyntax-only", "-fobjc-arc", "-fobjc-runtime=macosx-11.0", "-Wall", "-Werror",
         "-I", str(SDK), "-I", str(path.parent), str(path)]
  done = subprocess.run(cmd, capture_output=True, text=True)
  return "" if done.returncode == 0 else done.stdout + done.stderr


@needs_clang
def test_launcher_passes_objective_c_checks(built):
  assert _objc_errors(built / "lib_launcher.m") == ""


@needs_clang
def test_objective_c_check_catches_a_wrong_selector(built):
  m = built / "lib_launcher.m"
  m.write_text(m.read_text().replace("setBuffer:", "setBufer:", 1))
  assert "setBufer" in _objc_errors(m)


def test_launches_follow_special_bounds_and_argument_positions(built):
  filecheck((built / "lib_launcher.m").read_text(), """CHECK: static const char lib__metal_source[] =
CHECK: "kernel void lib__reduce_k0(device float* out, const device float* x, constant int& n {{.*}}
CHECK: options.fastMathEnabled = NO;
CHECK: int lib_reduce(void* queue, void* out, const void* x, int64_t n) {
CHECK: if (n < INT64_C(1) || n > INT64_C(4096)) return UOPC_ERR_VAR_RANGE;
CHECK: [enc setBuffer:(__bridge id<MTLBuffer>)(void*)out offset:0 atIndex:0];
CHECK-NEXT: [enc setBuffer:(__bridge id<MTLBuffer>)(void*)x offset:0 atIndex:1];
CHECK-NEXT: { int32_t v = (int32_t)n; [enc setBytes:&v length:sizeof(v) atIndex:2]; }
CHECK-NEXT: [enc dispatchThreadgroups:MTLSizeMake((NSUInteger)(int64_t)n, (NSUInteger)INT64_C(1), (NSUInteger)INT64_C(1)) threadsPerThreadgroup:MTLSizeMake((NSUInteger)INT64_C(16), (NSUInteger)INT64_C(1), (NSUInteger)INT64_C(1))];
CHECK: int lib_sum(void* queue, void* out, const void* x) {
CHECK: [enc dispatchThreadgroups:MTLSizeMake((NSUInteger)INT64_C(1), (NSUInteger)INT64_C(1), (NSUInteger)INT64_C(1)) threadsPerThreadgroup:MTLSizeMake((NSUInteger)INT64_C(1), (NSUInteger)INT64_C(1), (NSUInteger)INT64_C(1))];
CHECK: int lib_flat(void* queue, void* out, int64_t n) {
CHECK: [enc dispatchThreads:MTLSizeMake((NSUInteger)(int64_t)n, (NSUInteger)INT64_C(1), (NSUInteger)INT64_C(1)) threadsPerThreadgroup:MTLSizeMake(MIN(((id<MTLComputePipelineState>)[pipelines objectAtIndex:2]).maxTotalThreadsPerThreadgroup, (NSUInteger)(int64_t)n), 1, 1)];
CHECK: int lib_synchronize(void* queue) {
""")


@pytest.mark.skipif(shutil.which("xcrun") is not None, reason="builds for real where Xcode exists")
def test_macos_build_is_skipped_without_xcode(built):
  assert build_macos(built, "lib") == []
