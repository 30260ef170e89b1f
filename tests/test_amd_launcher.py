"""The HIP launcher of `-t amd` without ROCm: NAME.h compiles as C99 and C++11, NAME_hip.c with
-Wall -Wextra -Werror, and the library runs against a stub `libamdhip64.so` (written here, in C) that
accepts only the code object of one arch and records what it is asked to launch: the grid and block
the kernel's SPECIALs give, the argument values, the kernel's name, the stream, the error paths."""
from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from uopc.frontend import parse_source
from uopc.pipeline import compile_module
from uopc.targets.amd.build import build_artifacts
from uopc.targets.amd.codeobj import find_linker, missing_linker

pytestmark = pytest.mark.skipif(find_linker() is None, reason=missing_linker())

# EF_AMDGPU_MACH_* of the ELF header's e_flags (low byte): what the stub checks to accept a code object
MACH = {"gfx90a": 0x3F, "gfx1100": 0x41, "gfx942": 0x4C}

STUB = r"""
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
typedef int hipError_t;
int stub_loads, stub_launches, stub_accepted_mach = -1, stub_nargs;  /* the test sets stub_nargs: HIP reads it from the metadata */
int64_t stub_grid[3], stub_block[3];
uint64_t stub_args[8];
void* stub_stream;
char stub_function[128];
static int wanted(void) { const char* m = getenv("STUB_MACH"); return m ? atoi(m) : -1; }
hipError_t hipGetDevice(int* d) { *d = 0; return 0; }
hipError_t hipModuleLoadData(void** module, const void* image) {
  const unsigned char* elf = image;
  uint32_t flags;
  stub_loads++;
  if (memcmp(elf, "\177ELF", 4) != 0) return 200;  /* hipErrorInvalidImage */
  memcpy(&flags, elf + 48, 4);                      /* e_flags of an ELF64 header */
  if ((int)(flags & 0xff) != wanted()) return 209;  /* hipErrorNoBinaryForGpu */
  stub_accepted_mach = (int)(flags & 0xff);
  *module = (void*)image;
  return 0;
}
hipError_t hipModuleGetFunction(void** fn, void* module, const char* name) {
  (void)module;
  *fn = strdup(name);  /* the function handle is its name, so a launch can record which kernel it runs */
  return 0;
}
hipError_t hipModuleLaunchKernel(void* fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                                 unsigned shared, void* stream, void** params, void** extra) {
  (void)shared; (void)extra;
  stub_launches++;
  strncpy(stub_function, (const char*)fn, sizeof stub_function - 1);
  stub_grid[0] = gx; stub_grid[1] = gy; stub_grid[2] = gz;
  stub_block[0] = bx; stub_block[1] = by; stub_block[2] = bz;
  stub_stream = stream;
  char key[192];  /* $STUB_NARGS_<kernel> overrides stub_nargs for entries that launch several kernels */
  snprintf(key, sizeof key, "STUB_NARGS_%s", stub_function);
  int nargs = getenv(key) ? atoi(getenv(key)) : stub_nargs;
  for (int i = 0; i < nargs && i < 8; i++) memcpy(&stub_args[i], params[i], 8);
  return getenv("STUB_FAIL_LAUNCH") ? 98 : 0;
}
unsigned char stub_device_memory[1 << 16];
size_t stub_malloc_size;
void* stub_freed;
hipError_t hipMallocAsync(void** p, size_t size, void* stream) { (void)stream; stub_malloc_size = size; *p = stub_device_memory; return 0; }
hipError_t hipFreeAsync(void* p, void* stream) { (void)stream; stub_freed = p; return 0; }
const char* hipGetErrorString(hipError_t e) { return e == 98 ? "stub: invalid value" : "stub: other error"; }
"""

PROGRAM = """
kernel tiles {
  %out = PARAM {(0, "out")} : ptr<f32>
  %x = PARAM {(1, "x")} : ptr<f32>
  %g = SPECIAL(6) {"gidx0"} : index
  %l = SPECIAL(32) {"lidx0"} : index
  %row = MUL(%g, 32)
  %i = ADD(%row, %l)
  %px = INDEX(%x, %i)
  %v = LOAD(%px)
  %po = INDEX(%out, %i)
  STORE(%po, %v)
}
kernel rows {
  %out = PARAM {(0, "out")} : ptr<i32>
  %n = DEFINE_VAR {("n", 0, 4096)}
  %l = SPECIAL(%n) {"lidx0"} : index
  %c = CAST(%l) : i32
  %po = INDEX(%out, %l)
  STORE(%po, %c)
}
kernel flat {
  %out = PARAM {(0, "out")} : ptr<i32>
  %n = DEFINE_VAR {("n", 1, 100000)}
  %i = SPECIAL(%n) {"idx0"} : index
  %c = CAST(%i) : i32
  %po = INDEX(%out, %i)
  STORE(%po, %c)
}
"""


@pytest.fixture(scope="module")
def stub(tmp_path_factory) -> ctypes.CDLL:
  """The stub runtime, loaded under the SONAME the launcher dlopens, so that dlopen finds it loaded."""
  d = tmp_path_factory.mktemp("stub")
  (d / "stub.c").write_text(STUB)
  subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libamdhip64.so", "-o", str(d / "libamdhip64.so"), str(d / "stub.c")],
                 check=True)
  return ctypes.CDLL(str(d / "libamdhip64.so"), mode=ctypes.RTLD_GLOBAL)


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> dict[str, Path]:
  module = parse_source(PROGRAM, "tiles.uop")
  out = tmp_path_factory.mktemp("lib")
  return build_artifacts(out, "tiles", compile_module(module, "amd", "tiles"), ("gfx1100", "gfx90a", "gfx942"))


def compiles(cmd: list[str]) -> None:
  done = subprocess.run(cmd, capture_output=True, text=True)
  assert done.returncode == 0 and not done.stderr, done.stderr


def test_header_is_c99_and_cxx11(library):
  compiles(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-fsyntax-only", "-x", "c", str(library["header"])])
  if shutil.which("g++"):
    compiles(["g++", "-std=c++11", "-Wall", "-Wextra", "-Werror", "-fsyntax-only", "-x", "c++", str(library["header"])])
  assert "int tiles_flat(int32_t* out, int64_t n, hipStream_t stream);" in library["header"].read_text()


@pytest.mark.parametrize("cc", ["gcc", "clang"])
def test_launcher_compiles_warning_free(library, cc):
  if not shutil.which(cc): pytest.skip(f"{cc} not installed")
  compiles([cc, "-std=c99", "-Wall", "-Wextra", "-Werror", "-fsyntax-only", str(library["source"])])


def entry(lib: ctypes.CDLL, stub: ctypes.CDLL, name: str, nargs: int):
  """An entry of `lib`, with the stub told how many kernel arguments (all but the stream) to record."""
  ctypes.c_int.in_dll(stub, "stub_nargs").value = nargs - 1
  fn = getattr(lib, name)
  fn.argtypes = [ctypes.c_void_p] * nargs
  fn.restype = ctypes.c_int
  return fn


@pytest.fixture
def launched(stub, library, monkeypatch):
  monkeypatch.setenv("STUB_MACH", str(MACH["gfx942"]))
  return ctypes.CDLL(str(library["so"])), stub


def counter(stub, name: str) -> int: return ctypes.c_int.in_dll(stub, name).value


def recorded(stub, name: str, n: int) -> list[int]:
  return list((ctypes.c_int64 * n).in_dll(stub, name))


def test_launch_geometry_arguments_and_code_object_choice(launched):
  lib, stub = launched
  out, x = np.zeros(192, np.float32), np.ones(192, np.float32)
  stream = ctypes.c_void_p(0x5150)
  assert entry(lib, stub, "tiles_tiles", 3)(out.ctypes.data, x.ctypes.data, stream) == 0
  assert counter(stub, "stub_accepted_mach") == MACH["gfx942"]  # gfx1100 and gfx90a were refused first
  assert ctypes.string_at(ctypes.addressof(ctypes.c_char.in_dll(stub, "stub_function"))) == b"tiles__tiles_k0"
  assert recorded(stub, "stub_grid", 3) == [6, 1, 1] and recorded(stub, "stub_block", 3) == [32, 1, 1]
  assert [a & (2**64 - 1) for a in recorded(stub, "stub_args", 2)] == [out.ctypes.data, x.ctypes.data]
  assert ctypes.c_void_p.in_dll(stub, "stub_stream").value == 0x5150


def test_flat_index_grid_covers_a_run_time_size(launched):
  lib, stub = launched
  out = np.zeros(1000, np.int32)
  fn = entry(lib, stub, "tiles_flat", 3)
  fn.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p]
  assert fn(out.ctypes.data, 1000, None) == 0
  assert recorded(stub, "stub_grid", 3) == [4, 1, 1] and recorded(stub, "stub_block", 3) == [256, 1, 1]  # ceil(1000 / 256)
  assert recorded(stub, "stub_args", 2)[1] == 1000
  before = counter(stub, "stub_launches")
  assert fn(out.ctypes.data, 0, None) == lib_status(lib, "tiles", "UOPC_ERR_VAR_RANGE")  # n's declared range is [1, 100000]
  assert fn(None, 10, None) == lib_status(lib, "tiles", "UOPC_ERR_NULL_POINTER")
  assert counter(stub, "stub_launches") == before  # nothing is launched after a failed check


def test_runtime_errors_come_back_with_hip_messages(launched, monkeypatch):
  lib, stub = launched
  monkeypatch.setenv("STUB_FAIL_LAUNCH", "1")
  out = np.zeros(4, np.int32)
  fn = entry(lib, stub, "tiles_flat", 3)
  fn.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p]
  code = fn(out.ctypes.data, 4, None)
  assert code == 1000 + 98  # UOPC_HIP_ERR_RUNTIME + hipErrorInvalidValue
  strerror = lib.tiles_strerror
  strerror.restype = ctypes.c_char_p
  assert strerror(code) == b"stub: invalid value"
  assert strerror(101) == b"none of the library's code objects runs on this GPU"


def lib_status(lib, prefix: str, name: str) -> int:
  """A uopc_status value, read back through the message table rather than assumed."""
  strerror = getattr(lib, f"{prefix}_strerror")
  strerror.restype = ctypes.c_char_p
  messages = {b"a buffer argument is NULL": "UOPC_ERR_NULL_POINTER",
              b"a size argument is outside the [min, max] range the program declares": "UOPC_ERR_VAR_RANGE"}
  return next(code for code in range(16) if messages.get(strerror(code)) == name)


COLUMN_SUMS = """func colsum {
  %x = PARAM([4, 6]) {(0, "x")} : f32
  %out = PARAM([4, 6]) {(1, "out")} : f32
  %s = REDUCE(%x) {(ADD, (0,))}
  %b = EXPAND(%s, [4, 6])
  %d = SUB(%x, %b)
  STORE(%out, %d)
}
"""


def test_intermediate_buffers_live_in_a_workspace_allocated_on_the_stream(stub, tmp_path, monkeypatch):
  """out = x - (column sums of x) runs two kernels that pass the sums through the memory plan's workspace."""
  from uopc.frontend import load_module
  monkeypatch.setenv("STUB_MACH", str(MACH["gfx1100"]))
  (tmp_path / "colsum.uop").write_text(COLUMN_SUMS)
  module = load_module(str(tmp_path / "colsum.uop"))
  entries = compile_module(module, "amd", "gath")
  (e,) = entries
  assert e.workspace is not None and len(e.kernels) == 2
  built = build_artifacts(tmp_path, "gath", entries, ("gfx1100",))
  for cc in ("gcc", "clang"):
    if shutil.which(cc): compiles([cc, "-std=c99", "-Wall", "-Wextra", "-Werror", "-fsyntax-only", str(built["source"])])
  lib = ctypes.CDLL(str(built["so"]))
  size = getattr(lib, f"gath_{e.name}_workspace_size")
  size.restype = ctypes.c_size_t
  assert size() == e.workspace.size
  bufs = [np.zeros(64, np.float32) for _ in range(2)]
  before = counter(stub, "stub_launches")
  last = e.kernels[-1]
  for k in e.kernels: monkeypatch.setenv(f"STUB_NARGS_{k.name}", str(len(k.params)))
  assert entry(lib, stub, f"gath_{e.name}", 3)(*(b.ctypes.data for b in bufs), None) == 0
  assert counter(stub, "stub_launches") == before + 2
  assert ctypes.c_size_t.in_dll(stub, "stub_malloc_size").value == e.workspace.size
  memory = ctypes.addressof(ctypes.c_ubyte.in_dll(stub, "stub_device_memory"))
  assert ctypes.c_void_p.in_dll(stub, "stub_freed").value == memory
  offsets = dict(e.workspace.offsets)
  # the last launch's arguments: the caller's buffers, and the intermediate at its offset in the workspace
  expected = [memory + offsets[p.slot] if p.slot in offsets else bufs[p.slot].ctypes.data for p in last.params]
  assert [a & (2**64 - 1) for a in recorded(stub, "stub_args", len(last.params))] == expected


def test_run_time_workgroup_sizes_are_checked_before_launching(launched):
  """lidx0's bound is a DEFINE_VAR: the block is n work-items, none when n is 0, refused past 1024."""
  lib, stub = launched
  out = np.zeros(4096, np.int32)
  fn = entry(lib, stub, "tiles_rows", 3)
  fn.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p]
  assert fn(out.ctypes.data, 100, None) == 0
  assert recorded(stub, "stub_grid", 3) == [1, 1, 1] and recorded(stub, "stub_block", 3) == [100, 1, 1]
  before = counter(stub, "stub_launches")
  assert fn(out.ctypes.data, 0, None) == 0 and counter(stub, "stub_launches") == before
  assert fn(out.ctypes.data, 2048, None) == 102  # UOPC_HIP_ERR_LAUNCH_SIZE
  assert counter(stub, "stub_launches") == before
