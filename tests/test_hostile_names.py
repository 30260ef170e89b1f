"""Every string from the input is data in every emitter (issue 23): PARAM and DEFINE_VAR names with
quotes, backslashes, newlines, comment markers, `#`, `%`, NUL, non-ASCII, C keywords, the launchers'
own names and 10,000 characters build with every target; each artifact passes its real tool (the C
compiler builds the libraries, ptxas the PTX, llvm-mc the AMD ISA, clang++ the Metal source), a C
program calls the entry through its header, and no name appears as written outside escaped strings."""
from __future__ import annotations

import ctypes
import os
import subprocess

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from test_amd_codeobj import LLVM_MC, needs_llvm_mc
from test_metal import metal_syntax_errors, needs_clang
from uopc.driver import BuildOptions, build
from uopc.frontend import format_arg
from uopc.run import _EntryInfo

# as the .uop string literal writes them (the front end decodes the escapes)
HOSTILE = ['o*/ system(\\"id\\"); /*', "back\\\\slash", "new\\nline", "#define x 1", "%1 = add", "nul\\x00byte",
           "\u00e9t\u00e9 \u6f22", "int", "stream", "queue", "workspace", "status", "dead_dead", "UOPC_OK", "int64_t",
           "y", "TRUE", "a" * 10_000]
DECODED = [h.encode().decode("unicode_escape") if "\\" in h else h for h in HOSTILE]


def program(literals: list[str] = tuple(f'"{h}"' for h in HOSTILE)) -> str:
  """PARAMs named by the string literals, summed into `out`, and a DEFINE_VAR with quotes in its name."""
  lines = [f'  %p{i} = PARAM([4]) {{({i}, {n})}} : f32' for i, n in enumerate(literals)]
  lines += [f'  %out = PARAM([4]) {{({len(literals)}, "out")}} : f32', '  %n = DEFINE_VAR {("it\'s \\"n\\"", 1, 8)} : index']
  total = "%p0"
  for i in range(1, len(literals)):
    lines.append(f"  %s{i} = ADD({total}, %p{i})")
    total = f"%s{i}"
  return "func dead {\n" + "\n".join(lines + [f"  STORE(%out, {total})"]) + "\n}\n"


def _text_artifacts(out):
  return {p.name: p.read_text(errors="replace") for p in out.iterdir() if p.suffix in (".c", ".h", ".ll", ".ptx", ".s", ".metal", ".m")}


def _no_name_as_written(texts: dict[str, str]) -> None:
  """Each name holds a character that every emitter escapes or replaces (a quote, a backslash, a
  newline, NUL, `*/`, `#`, `%`, non-ASCII): written as it is, it would be outside any string."""
  for name, text in texts.items():
    for raw in DECODED:
      if any(c in raw for c in '"\\\n\0#%') or not raw.isascii():
        assert raw not in text, f"{name} holds the name {raw[:40]!r} as written"


@pytest.mark.parametrize("target", ["c", "llvm"])
def test_cpu_libraries_build_and_run(tmp_path, target):
  (tmp_path / "dead.uop").write_text(program())
  out = tmp_path / "out"
  build(tmp_path / "dead.uop", BuildOptions(target, out))
  _no_name_as_written(_text_artifacts(out))
  lib = ctypes.CDLL(str(out / "libdead.so"))
  bufs = [np.full(4, i + 1, np.float32) for i in range(len(HOSTILE))] + [np.zeros(4, np.float32)]
  assert lib.dead_dead(*(ctypes.c_void_p(b.ctypes.data) for b in bufs), ctypes.c_int64(2)) == 0
  assert bufs[-1].tolist() == [sum(range(1, len(HOSTILE) + 1))] * 4
  main = tmp_path / "main.c"
  main.write_text('#include <string.h>\n#include "dead.h"\nint main(void) { const uopc_entry_info* e = dead_entry_info(0);\n'
                  '  return !(e->num_args == %d && strcmp(e->args[0].name, %s) == 0); }\n' % (len(HOSTILE) + 2, _c_literal(DECODED[0])))
  subprocess.run(["cc", "-std=c99", "-Wall", "-Werror", str(main), "-I", str(out), "-L", str(out), "-ldead", "-o", str(tmp_path / "m")], check=True)
  subprocess.run([str(tmp_path / "m")], check=True, env={"LD_LIBRARY_PATH": str(out)})


def _c_literal(s: str) -> str: return '"' + "".join(f"\\{b:03o}" for b in s.encode()) + '"'


def test_cuda_launcher_and_ptx(tmp_path):
  (tmp_path / "dead.uop").write_text(program())
  out = tmp_path / "out"
  build(tmp_path / "dead.uop", BuildOptions("cuda", out))  # ptxas (the nvcc wheel) and the C compiler run here
  assert (out / "libdead.so").is_file()
  _no_name_as_written(_text_artifacts(out))


@needs_llvm_mc
def test_amd_launcher_and_isa(tmp_path):
  (tmp_path / "dead.uop").write_text(program())
  out = tmp_path / "out"
  build(tmp_path / "dead.uop", BuildOptions("amd", out, archs=("gfx90a",)))
  _no_name_as_written(_text_artifacts(out))
  done = subprocess.run([LLVM_MC.path, "-triple=amdgcn-amd-amdhsa", "-mcpu=gfx90a", "-filetype=obj", "-o", str(tmp_path / "k.o"),
                         str(out / "dead.gfx90a.s")], capture_output=True, text=True)
  assert done.returncode == 0, done.stderr[:2000]


@needs_clang
def test_metal_source_and_launcher(tmp_path):
  (tmp_path / "dead.uop").write_text(program())
  out = tmp_path / "out"
  build(tmp_path / "dead.uop", BuildOptions("metal", out))
  assert metal_syntax_errors((out / "dead.metal").read_text()) == ""
  _no_name_as_written(_text_artifacts(out))


# ---- random names (make fuzz runs many more: UOPC_NAME_FUZZ_EXAMPLES) ---------------------------------------
NAME_EXAMPLES = int(os.environ.get("UOPC_NAME_FUZZ_EXAMPLES", "3"))
ANY_CHAR = st.characters(min_codepoint=0, max_codepoint=0x10FFFF, blacklist_categories=("Cs",))  # every code point a str holds
NAMES = st.lists(st.text(ANY_CHAR, min_size=1, max_size=24) | st.sampled_from(["int", "stream", "x", "UOPC_OK", "dead_dead"]),
                 min_size=1, max_size=6, unique=True).filter(lambda ns: "out" not in ns)  # an entry's names are distinct


def _build_every_target(path, out_root) -> None:
  for target, extra in (("c", {}), ("llvm", {}), ("cuda", {}), ("metal", {})):
    out = out_root / target
    build(path, BuildOptions(target, out, **extra))
    if target == "metal": assert metal_syntax_errors((out / "dead.metal").read_text()) == ""
  if LLVM_MC.path:
    out = out_root / "amd"
    build(path, BuildOptions("amd", out, archs=("gfx90a",)))
    done = subprocess.run([LLVM_MC.path, "-triple=amdgcn-amd-amdhsa", "-mcpu=gfx90a", "-filetype=obj", "-o", str(out / "k.o"),
                           str(out / "dead.gfx90a.s")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[:2000]


@needs_clang
@settings(max_examples=NAME_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(names=NAMES)
def test_random_names_build_with_every_target_and_run(tmp_path, names):
  """Any names at all (the printer's string literal spells them): every target builds, every artifact
  passes its tool, and the C library runs with the metadata naming each argument as written."""
  root = tmp_path / f"ex{len(list(tmp_path.iterdir()))}"
  root.mkdir()
  (root / "dead.uop").write_text(program([format_arg(n) for n in names]))
  _build_every_target(root / "dead.uop", root)
  lib = ctypes.CDLL(str(root / "c" / "libdead.so"))
  bufs = [np.full(4, i + 1, np.float32) for i in range(len(names))] + [np.zeros(4, np.float32)]
  assert lib.dead_dead(*(ctypes.c_void_p(b.ctypes.data) for b in bufs), ctypes.c_int64(2)) == 0
  assert bufs[-1].tolist() == [float(sum(range(1, len(names) + 1)))] * 4
  info = lib.dead_entry_info
  info.restype = ctypes.POINTER(_EntryInfo)
  entry = info(0).contents
  assert [entry.args[i].name.decode("utf-8", "surrogateescape") for i in range(len(names))] == [n.split("\0")[0] for n in names]


# ---- short plain names in a multi-kernel entry ---------------------------------------------------------
# Plain lower-case names are kept as they are in the prototype: none may collide with a local of a launcher's
# own (the CUDA graph path's run function once unpacked its arguments from a struct pointer named `c`, so a
# PARAM named `c`, an LSTM's cell state, failed the C compiler)
SHORT = ["c", "call", "key", "g", "s", "e", "p", "i", "k", "n", "t", "run", "capture", "exec", "failed", "task",
         "lib", "ctx", "fn", "data", "size", "shared", "kernel", "module", "dev", "device", "buf", "ptr", "result", "rc",
         "tid", "pool", "done", "graph", "entry", "info", "mask", "bytes", "launch", "sizes", "keys", "slot", "state"]


def _two_kernels(names: list[str]) -> str:
  """out = t - sum(t), t the elementwise sum of the PARAMs: the whole sum is a kernel of its own on every target."""
  lines = [f'  %p{i} = PARAM([256]) {{({i}, "{n}")}} : f32' for i, n in enumerate(names)]
  lines += [f'  %out = PARAM([256]) {{({len(names)}, "out")}} : f32']
  total = "%p0"
  for i in range(1, len(names)):
    lines.append(f"  %s{i} = ADD({total}, %p{i})")
    total = f"%s{i}"
  lines += [f"  %r = REDUCE({total}) {{(ADD, (0,))}}", "  %m = EXPAND(%r, [256])", f"  %d = SUB({total}, %m)", "  STORE(%out, %d)"]
  return "func shortnames {\n" + "\n".join(lines) + "\n}\n"


@needs_clang
def test_short_plain_names_in_multi_kernel_entries(tmp_path):
  path = tmp_path / "shortnames.uop"
  path.write_text(_two_kernels(SHORT))
  for target, extra in (("c", {}), ("llvm", {}), ("cuda", {}), ("metal", {})) + ((("amd", {"archs": ("gfx90a",)}),) if LLVM_MC.path else ()):
    out = tmp_path / target
    build(path, BuildOptions(target, out, **extra))
    header = (out / "shortnames.h").read_text()
    assert all(f" {n}," in header or f" {n})" in header for n in SHORT), f"{target}: a plain name was renamed"
    if target == "metal": assert metal_syntax_errors((out / "shortnames.metal").read_text()) == ""
  assert "__graph_call" in (tmp_path / "cuda" / "shortnames_cuda.c").read_text()  # the multi-kernel (graph) path
  lib = ctypes.CDLL(str(tmp_path / "c" / "libshortnames.so"))
  bufs = [np.full(256, 1.0, np.float32) for _ in SHORT] + [np.zeros(256, np.float32)]
  assert lib.shortnames_shortnames(*(ctypes.c_void_p(b.ctypes.data) for b in bufs)) == 0
  assert np.allclose(bufs[-1], len(SHORT) - 256.0 * len(SHORT))
