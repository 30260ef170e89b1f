"""The C launcher on hand-written kernels: the header's C99/C++11/pycparser validity, the wrappers'
argument checks, the metadata tables read back from C, exported symbols, and thread safety."""
from __future__ import annotations

import shutil
import subprocess
from collections import namedtuple
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from pycparser import c_ast, parse_file

from uopc.driver import compile_shared
from uopc.dtype import dtypes
from uopc.launcher import EntryKernels, c_identifier, entry_args, render_header, render_source

# RenderedKernel/KernelParam-shaped records: the launcher only reads these fields
Kernel = namedtuple("Kernel", "name source params")
Param = namedtuple("Param", "name slot kind dtype written vmin vmax")

PRELUDE = "#include <stdint.h>"
F32 = dtypes.float32


def _buf(name, slot, written, dt=F32, size=-1): return Param(name, slot, "buffer", dt.ptr(size=size), written, None, None)
def _var(name, lo, hi): return Param(name, None, "var", dtypes.index, False, lo, hi)


def saxpy_entry(prefix: str) -> EntryKernels:
  """out[i] = 2*x[i] + y[i] for i < n; x has a known size of 64."""
  src = f"""void {prefix}__saxpy_k0(float* restrict data0, const float* restrict data1, const float* restrict data2, int64_t n) {{
  for (int64_t i = 0; i < n; i++) data0[i] = 2.0f * data1[i] + data2[i];
}}"""
  return EntryKernels("saxpy", (Kernel(f"{prefix}__saxpy_k0", src, (_buf("data0", 0, True), _buf("data1", 1, False, size=64),
                                                                   _buf("data2", 2, False), _var("n", 1, 64))),))


def two_kernel_entry(prefix: str) -> EntryKernels:
  """k0: tmp[i] = a[i] * 3; k1: out[i] = tmp[i] + 1, for 4 int32 elements: out = 3a + 1."""
  k0 = f"""void {prefix}__chain_k0(int32_t* restrict data1, const int32_t* restrict data2) {{
  for (int i = 0; i < 4; i++) data1[i] = data2[i] * 3;
}}"""
  k1 = f"""void {prefix}__chain_k1(int32_t* restrict data0, const int32_t* restrict data1) {{
  for (int i = 0; i < 4; i++) data0[i] = data1[i] + 1;
}}"""
  i32 = dtypes.int32
  return EntryKernels("chain", (
    Kernel(f"{prefix}__chain_k0", k0, (_buf("data1", 1, True, i32, 4), _buf("data2", 2, False, i32, 4))),
    Kernel(f"{prefix}__chain_k1", k1, (_buf("data0", 0, True, i32, 4), _buf("data1", 1, False, i32, 4)))))


def reserved_names_entry(prefix: str) -> EntryKernels:
  """A DEFINE_VAR named like a C++ keyword still gives a valid prototype; it fills out[0] = class."""
  src = f"""void {prefix}__keywords_k0(int64_t* restrict data0, int64_t class_) {{ data0[0] = class_; }}"""
  return EntryKernels("keywords", (Kernel(f"{prefix}__keywords_k0", src,
                                          (_buf("data0", 0, True, dtypes.int64, 1), _var("class", -5, 5))),))


def all_entries(prefix): return [saxpy_entry(prefix), two_kernel_entry(prefix), reserved_names_entry(prefix)]


def run(cmd, **kw) -> subprocess.CompletedProcess:
  done = subprocess.run(cmd, capture_output=True, text=True, **kw)
  assert done.returncode == 0, f"{cmd} failed:\n{done.stdout}{done.stderr}"
  return done


@pytest.fixture(scope="module")
def lib(tmp_path_factory) -> Path:
  """libmodel.so + model.h built from all_entries by the driver's compiler step."""
  d = tmp_path_factory.mktemp("launcher")
  entries = all_entries("model")
  (d / "model.h").write_text(render_header("model", entries))
  (d / "model.c").write_text(render_source("model", entries, PRELUDE))
  compile_shared(d / "model.c", d / "libmodel.so", 2, {"CC": "gcc", "CFLAGS": "-Wall -Wextra -Werror"})
  return d


def test_prefix_is_a_c_identifier():
  assert c_identifier("my-model.v2") == "my_model_v2"
  assert c_identifier("2fast") == "u2fast"
  assert c_identifier("saxpy") == "saxpy"


def test_entry_arguments_merge_kernels_in_slot_order():
  args = entry_args(two_kernel_entry("m"))
  assert [(a.name, a.written, a.shape) for a in args] == [("data0", True, (4,)), ("data1", True, (4,)), ("data2", False, (4,))]


def test_prototypes_are_const_correct(lib):
  header = (lib / "model.h").read_text()
  assert "int model_saxpy(float* data0, const float* data1, const float* data2, int64_t n);" in header
  assert "int model_chain(int32_t* data0, int32_t* data1, const int32_t* data2);" in header
  assert "int model_keywords(int64_t* data0, int64_t arg1_class);" in header


@pytest.mark.parametrize("compiler,std,lang", [("gcc", "c99", "c"), ("g++", "c++11", "c++"),
                                               ("clang", "c99", "c"), ("clang++", "c++11", "c++")])
def test_header_compiles_strictly(lib, compiler, std, lang):
  if shutil.which(compiler) is None: pytest.skip(f"{compiler} is not installed")
  run([compiler, f"-std={std}", "-x", lang, "-fsyntax-only", "-Wall", "-Wextra", "-pedantic", "-Werror", str(lib / "model.h")])


# minimal stand-ins for the system headers, so pycparser sees only the header's own declarations
FAKE_LIBC = {
  "stddef.h": "typedef unsigned long size_t;\n#define NULL ((void*)0)\n",
  "stdint.h": "".join(f"typedef {c} {n};\n" for n, c in [
    ("int8_t", "signed char"), ("int16_t", "short"), ("int32_t", "int"), ("int64_t", "long long"),
    ("uint8_t", "unsigned char"), ("uint16_t", "unsigned short"), ("uint32_t", "unsigned int"),
    ("uint64_t", "unsigned long long")]),
  "stdbool.h": "typedef _Bool bool;\n",
}


def test_header_parses_with_pycparser(lib, tmp_path):
  for name, text in FAKE_LIBC.items(): (tmp_path / name).write_text(text)
  ast = parse_file(str(lib / "model.h"), use_cpp=True, cpp_path="gcc",
                   cpp_args=["-E", "-nostdinc", f"-I{tmp_path}"])
  funcs = {d.name: d for d in ast.ext if isinstance(d, c_ast.Decl) and isinstance(d.type, c_ast.FuncDecl)}
  assert set(funcs) == {"model_saxpy", "model_chain", "model_keywords", "model_strerror", "model_num_entries",
                        "model_entry_info", "model_find_entry"}
  params = funcs["model_saxpy"].type.args.params
  assert [p.name for p in params] == ["data0", "data1", "data2", "n"]
  assert [p.type.type.quals for p in params[:3]] == [[], ["const"], ["const"]]


def test_only_the_public_functions_are_exported(lib):
  with open(lib / "libmodel.so", "rb") as f:
    dynsym = ELFFile(f).get_section_by_name(".dynsym")
    defined = {s.name for s in dynsym.iter_symbols() if s["st_shndx"] != "SHN_UNDEF" and s.name}
  assert defined == {"model_saxpy", "model_chain", "model_keywords", "model_strerror", "model_num_entries",
                     "model_entry_info", "model_find_entry"}


CHECKS_C = r"""
#include <stdio.h>
#include <string.h>
#include "model.h"
#define EXPECT(c) do { if (!(c)) { printf("FAILED line %d: %s\n", __LINE__, #c); return 1; } } while (0)
int main(void) {
  float out[64], x[64], y[64];
  for (int i = 0; i < 64; i++) { x[i] = (float)i; y[i] = 0.5f; out[i] = -1.0f; }
  EXPECT(model_saxpy(NULL, x, y, 8) == UOPC_ERR_NULL_POINTER);
  EXPECT(model_saxpy(out, x, NULL, 8) == UOPC_ERR_NULL_POINTER);
  EXPECT(model_saxpy(out, x, y, 0) == UOPC_ERR_VAR_RANGE);
  EXPECT(model_saxpy(out, x, y, 65) == UOPC_ERR_VAR_RANGE);
  EXPECT(model_saxpy(out, out, y, 8) == UOPC_ERR_ALIASED);
  EXPECT(out[0] == -1.0f);                      /* a refused call ran nothing */
  EXPECT(model_saxpy(out, x, y, 64) == UOPC_OK);
  EXPECT(model_saxpy(out, x, y, 1) == UOPC_OK); /* both ends of [1, 64] are accepted */
  for (int i = 0; i < 64; i++) EXPECT(out[i] == 2.0f * i + 0.5f);
  int32_t a[4] = {1, -2, 3, 7}, tmp[4], res[4];
  EXPECT(model_chain(res, res, a) == UOPC_ERR_ALIASED);
  EXPECT(model_chain(res, tmp, a) == UOPC_OK);
  EXPECT(res[0] == 4 && res[1] == -5 && res[2] == 10 && res[3] == 22);
  int64_t k = 0;
  EXPECT(model_keywords(&k, -6) == UOPC_ERR_VAR_RANGE);
  EXPECT(model_keywords(&k, -5) == UOPC_OK && k == -5);
  EXPECT(strcmp(model_strerror(UOPC_ERR_VAR_RANGE), "a size argument is outside the [min, max] range the program declares") == 0);
  EXPECT(strcmp(model_strerror(99), "unknown uopc status code") == 0);
  EXPECT(model_entry_info(-1) == NULL && model_entry_info(3) == NULL);
  EXPECT(model_find_entry("chain") == 1 && model_find_entry("nope") == -1 && model_find_entry(NULL) == -1);
  /* dump the metadata for the Python side to compare */
  for (int e = 0; e < model_num_entries(); e++) {
    const uopc_entry_info* info = model_entry_info(e);
    printf("%s", info->name);
    for (int i = 0; i < info->num_args; i++) {
      const uopc_arg_info* a = &info->args[i];
      printf(" %s:%d:%d:%s:%d:%d", a->name, a->kind, a->dtype, a->dtype_name, a->written, a->ndim);
      for (int d = 0; d < a->ndim; d++) printf("x%lld", (long long)a->shape[d]);
      if (a->kind == UOPC_ARG_VAR) printf("[%lld,%lld]", (long long)a->min, (long long)a->max);
    }
    printf("\n");
  }
  return 0;
}
"""


def _build_and_run(lib: Path, tmp: Path, source: str, compiler: str, flags: list[str]) -> str:
  (tmp / "main.c").write_text(source)
  exe = tmp / "main"
  run([compiler, *flags, f"-I{lib}", str(tmp / "main.c"), f"-L{lib}", "-lmodel", f"-Wl,-rpath,{lib}", "-o", str(exe)])
  return run([str(exe)]).stdout


def test_argument_checks_results_and_metadata_from_c(lib, tmp_path):
  out = _build_and_run(lib, tmp_path, CHECKS_C, "gcc", ["-std=c99", "-Wall", "-Werror"])
  # kind 0 buffer / 1 var; dtype 11 float32, 3 int32, 4 int64, 13 index (the ABI enum)
  assert out.splitlines() == [
    "saxpy data0:0:11:float32:1:-1 data1:0:11:float32:0:1x64 data2:0:11:float32:0:-1 n:1:13:index:0:-1[1,64]",
    "chain data0:0:3:int32:1:1x4 data1:0:3:int32:1:1x4 data2:0:3:int32:0:1x4",
    "keywords data0:0:4:int64:1:1x1 class:1:13:index:0:-1[-5,5]",
  ]


def test_metadata_from_cpp(lib, tmp_path):
  src = '#include "model.h"\n#include <cstdio>\nint main() { std::printf("%d %s\\n", model_num_entries(), model_entry_info(2)->args[1].name); }\n'
  (tmp_path / "main.cpp").write_text(src)
  run(["g++", "-std=c++11", "-Wall", "-Werror", f"-I{lib}", str(tmp_path / "main.cpp"), f"-L{lib}", "-lmodel",
       f"-Wl,-rpath,{lib}", "-o", str(tmp_path / "main")])
  assert run([str(tmp_path / "main")]).stdout == "3 class\n"


THREADS_C = r"""
#include <pthread.h>
#include <stdio.h>
#include "model.h"
enum { T = 8, N = 64 };
static float xs[T][N], ys[T][N], outs[T][N];
static int codes[T];
static void* work(void* p) {
  int t = (int)(size_t)p;
  for (int rep = 0; rep < 200; rep++) codes[t] |= model_saxpy(outs[t], xs[t], ys[t], N);
  return NULL;
}
int main(void) {
  pthread_t th[T];
  for (int t = 0; t < T; t++) for (int i = 0; i < N; i++) { xs[t][i] = (float)(t * N + i); ys[t][i] = (float)t; }
  for (int t = 0; t < T; t++) pthread_create(&th[t], NULL, work, (void*)(size_t)t);
  for (int t = 0; t < T; t++) pthread_join(th[t], NULL);
  for (int t = 0; t < T; t++) {
    if (codes[t] != UOPC_OK) { printf("thread %d: %s\n", t, model_strerror(codes[t])); return 1; }
    for (int i = 0; i < N; i++)
      if (outs[t][i] != 2.0f * (float)(t * N + i) + (float)t) { printf("thread %d element %d wrong\n", t, i); return 1; }
  }
  printf("ok\n");
  return 0;
}
"""


def test_concurrent_calls_under_thread_sanitizer(lib, tmp_path):
  """Threads share the library (and its metadata) but write distinct outputs; TSan reports any race."""
  out = _build_and_run(lib, tmp_path, THREADS_C, "gcc", ["-std=gnu99", "-fsanitize=thread", "-g", "-pthread"])
  assert out == "ok\n"
