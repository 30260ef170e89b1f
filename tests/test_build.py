"""`uopc build -t c` end to end: the seeds' programs built, linked into a C program and run; byte-identical
rebuilds; atomic outputs on failure; -MD/-MF; --emit; --print-after; target and stage errors."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from uopc.cli import cli

SAXPY = Path(__file__).resolve().parent.parent / "samples" / "c-app" / "saxpy.uop"


def uopc(*args, env=None):
  return CliRunner(env=env).invoke(cli, ["build", *map(str, args)])


def entry_name(path: Path) -> str:
  from uopc.frontend import load_module
  return load_module(str(path)).entries[0].name


def run_c(tmp: Path, out: Path, name: str, body: str, includes: str = "") -> str:
  """Compile `body` (the inside of main) against NAME.h / libNAME.so in `out`, run it, return stdout."""
  src = tmp / "main.c"
  src.write_text(f'#include <stdio.h>\n#include "{name}.h"\n{includes}\nint main(void) {{\n{body}\n  return 0;\n}}\n')
  exe = tmp / "main"
  cc = subprocess.run(["gcc", "-std=c99", "-Wall", "-Werror", f"-I{out}", str(src), f"-L{out}", f"-l{name}",
                       f"-Wl,-rpath,{out}", "-o", str(exe)], capture_output=True, text=True)
  assert cc.returncode == 0, cc.stderr
  done = subprocess.run([str(exe)], capture_output=True, text=True)
  assert done.returncode == 0, done.stdout + done.stderr
  return done.stdout


# ---- the seeds' programs ---------------------------------------------------------------------------------
SAMPLES = Path(__file__).resolve().parent.parent / "samples"
SEED002_ADD1, SEED002_ADD_LIDX, SEED002_CAST = ((SAMPLES / f"seed002_{n}.uop").read_text() for n in ("add1", "add2", "cast"))
# seed 001's STORE example (data0[0] = 10) and ALU example (data0[0] = data1[0] + data2[0]) as listings
SEED001_STORE = """0 UOps.DEFINE_GLOBAL : ptr.dtypes.int [] (0, 'data0', True)
1 UOps.CONST : dtypes.int [] 0
2 UOps.CONST : dtypes.int [] 10
3 UOps.STORE : [0, 1, 2] None
"""
SEED001_ALU = """0 UOps.DEFINE_GLOBAL : ptr.dtypes.int [] (0, 'data0', True)
1 UOps.DEFINE_GLOBAL : ptr.dtypes.int [] (1, 'data1', False)
2 UOps.DEFINE_GLOBAL : ptr.dtypes.int [] (2, 'data2', False)
3 UOps.CONST : dtypes.int [] 0
4 UOps.LOAD : dtypes.int [1, 3] None
5 UOps.LOAD : dtypes.int [2, 3] None
6 UOps.ALU : dtypes.int [4, 5] BinaryOps.ADD
7 UOps.CONST : dtypes.int [] 0
8 UOps.STORE : [0, 7, 6] None
"""

# (listing, C declarations, call arguments, what to print, expected output: the seeds' stated results)
SEED_CASES = {
  "seed002_add1": (SEED002_ADD1, "int a[1] = {1}, b[1] = {2}, c[1] = {0};", "c, a, b", 'printf("%d\\n", c[0]);', "3\n"),
  "seed002_add_lidx": (SEED002_ADD_LIDX, "int a[3] = {1, 2, 3}, b[3] = {2, 5, 6}, c[3] = {0, 0, -1};", "c, a, b",
                       'printf("%d %d %d\\n", c[0], c[1], c[2]);', "3 7 -1\n"),  # lidx0 < 2: c[2] untouched
  "seed002_cast": (SEED002_CAST, "int a[2] = {1, 3}, b[2] = {4, 3}; float c[2] = {0, 0};", "c, a, b",
                   'printf("%.1f %.1f\\n", c[0], c[1]);', "5.0 6.0\n"),
  "seed001_store": (SEED001_STORE, "int c[1] = {0};", "c", 'printf("%d\\n", c[0]);', "10\n"),
  "seed001_alu": (SEED001_ALU, "int a[1] = {20}, b[1] = {22}, c[1] = {0};", "c, a, b", 'printf("%d\\n", c[0]);', "42\n"),
}


def build_and_run_seed(tmp_path: Path, case: str, target: str) -> Path:
  """Build SEED_CASES[case] for `target`, call its entry from a C program and check what it prints; the
  output folder."""
  listing, decls, call, show, expected = SEED_CASES[case]
  src = tmp_path / f"{case}.uop"
  src.write_text(listing)
  out = tmp_path / "out"
  r = uopc(src, "-t", target, "-o", out)
  assert r.exit_code == 0, r.output
  body = f'  {decls}\n  int rc = {case}_{entry_name(src)}({call});\n  if (rc != UOPC_OK) return 10 + rc;\n  {show}'
  assert run_c(tmp_path, out, case, body) == expected
  return out


@pytest.mark.parametrize("case", sorted(SEED_CASES))
def test_seed_programs_build_and_run(tmp_path, case):
  build_and_run_seed(tmp_path, case, "c")


def test_saxpy_sample_checks_its_arguments(tmp_path):
  out = tmp_path / "out"
  assert uopc(SAXPY, "-o", out).exit_code == 0
  body = """  float x[4] = {1, 2, 3, 4}, y[4] = {0.5f, 0.5f, 0.5f, 0.5f}, o[4] = {0};
  printf("%d %d %d ", saxpy_saxpy(o, x, y, 0), saxpy_saxpy(o, NULL, y, 4), saxpy_saxpy(o, x, y, 1048577));
  int rc = saxpy_saxpy(o, x, y, 4);  /* its own statement: C leaves argument order unspecified */
  printf("%d %g %g %g %g\\n", rc, o[0], o[1], o[2], o[3]);"""
  assert run_c(tmp_path, out, "saxpy", body) == "2 1 2 0 3 5.5 8 10.5\n"


# ---- reproducibility and atomic outputs -----------------------------------------------------------------
OUTPUTS = ("saxpy.c", "libsaxpy.so", "saxpy.h")


@pytest.mark.parametrize("cflags", ["", "-g"])  # with -g, no staging path may reach the debug info
def test_two_builds_are_byte_identical(tmp_path, cflags):
  for d in ("a", "b"): assert uopc(SAXPY, "-o", tmp_path / d, env={"CFLAGS": cflags}).exit_code == 0
  for f in OUTPUTS:
    assert subprocess.run(["cmp", str(tmp_path / "a" / f), str(tmp_path / "b" / f)]).returncode == 0, f


def _snapshot(d: Path) -> dict[str, bytes]: return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


def test_bad_input_leaves_earlier_outputs_untouched(tmp_path):
  out = tmp_path / "out"
  assert uopc(SAXPY, "-o", out).exit_code == 0
  before = _snapshot(out)
  bad = tmp_path / "bad" / "saxpy.uop"
  bad.parent.mkdir()
  bad.write_text(SAXPY.read_text().replace("%r = ADD(%ax, %yv)", "%r = ADD(%ax, %nowhere)"))
  r = uopc(bad, "-o", out)
  assert r.exit_code == 1
  assert f"{bad}:" in r.stderr and "error:" in r.stderr
  assert _snapshot(out) == before


def test_a_failing_c_compiler_is_the_users_error_and_leaves_outputs(tmp_path):
  """A compiler that fails on a one-line C file with the same flags too (CC=false, a bad CFLAGS, a
  CC that does not exist) is exit 1 with its own words; the earlier outputs stay."""
  out = tmp_path / "out"
  assert uopc(SAXPY, "-o", out).exit_code == 0
  before = _snapshot(out)
  r = uopc(SAXPY, "-o", out, env={"CC": "false"})
  assert r.exit_code == 1 and "internal compiler error" not in r.stderr
  assert "error: false failed (exit 1)" in r.stderr and "fails on a minimal input too" in r.stderr
  assert _snapshot(out) == before
  r = uopc(SAXPY, "-o", out, env={"CC": "gcc", "CFLAGS": "-fno-such-flag"})
  assert r.exit_code == 1 and "unrecognized command-line option" in r.stderr  # the compiler's own stderr is shown
  r = uopc(SAXPY, "-o", out, env={"CC": str(tmp_path / "no-such-cc")})
  assert r.exit_code == 1 and "cannot run" in r.stderr and "No such file" in r.stderr
  assert _snapshot(out) == before


def test_a_compiler_that_fails_only_on_our_code_is_an_internal_error(tmp_path):
  """Our output refused by a compiler that builds other C fine: an internal compiler error (exit 2)."""
  picky = tmp_path / "picky-cc"
  picky.write_text('#!/bin/sh\nfor a in "$@"; do case "$a" in *.uopc-probe.c) exec cc "$@";; esac; done\n'
                   'echo "picky: I refuse this code" >&2; exit 1\n')
  picky.chmod(0o755)
  r = uopc(SAXPY, "-o", tmp_path / "out", env={"CC": str(picky)})
  assert r.exit_code == 2 and "internal compiler error" in r.stderr and "picky: I refuse this code" in r.stderr
  assert not (tmp_path / "out").exists() or not any(p.is_file() for p in (tmp_path / "out").rglob("*"))


def test_a_ptxas_or_linker_that_fails_everywhere_is_the_users_error(tmp_path):
  bin_dir = tmp_path / "cuda" / "bin"
  bin_dir.mkdir(parents=True)
  for tool in ("ptxas", "fatbinary"):
    (bin_dir / tool).write_text("#!/bin/sh\necho 'this ptxas is broken' >&2; exit 3\n")
    (bin_dir / tool).chmod(0o755)
  r = uopc(SAXPY, "-t", "cuda", "-o", tmp_path / "c", env={"CUDA_HOME": str(tmp_path / "cuda")})
  assert r.exit_code == 1 and "ptxas failed (exit 3)" in r.stderr and "this ptxas is broken" in r.stderr
  r = uopc(SAXPY, "-t", "amd", "--arch", "gfx90a", "-o", tmp_path / "a", env={"LD_LLD": "false"})
  assert r.exit_code == 1 and "false failed (exit 1)" in r.stderr and "internal compiler error" not in r.stderr


def test_cflags_from_the_environment_reach_the_compiler(tmp_path):
  r = uopc(SAXPY, "-o", tmp_path, env={"CFLAGS": "-DFOO -Werror=this-is-not-a-warning"})
  assert r.exit_code == 1 and "this-is-not-a-warning" in r.stderr


# ---- options ---------------------------------------------------------------------------------------------
def test_depfile_lists_artifacts_and_input(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  (tmp_path / "my model.uop").write_text(SAXPY.read_text())
  assert uopc("my model.uop", "-o", "out", "-MD", "--name", "m").exit_code == 0
  assert (tmp_path / "out" / "m.d").read_text() == "out/m.c out/libm.so out/m.h: my\\ model.uop\n"


def test_mf_names_the_depfile_and_emit_header_writes_only_the_header(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  (tmp_path / "deps").mkdir()
  r = uopc(SAXPY, "-o", "inc", "--emit", "header", "-MF", "deps/h.d")
  assert r.exit_code == 0, r.output
  assert sorted(p.name for p in (tmp_path / "inc").iterdir()) == ["saxpy.h"]
  assert (tmp_path / "deps" / "h.d").read_text() == f"inc/saxpy.h: {SAXPY}\n"


def test_print_after_linearize(tmp_path):
  r = uopc(SAXPY, "-o", tmp_path, "--print-after", "linearize")
  assert r.exit_code == 0, r.output
  head, _, body = r.stdout.partition("\n")
  assert head == "# *** IR after linearize: saxpy__saxpy_k0 ***"
  ops = body.split()
  for op in ("RANGE", "LOAD", "STORE", "END"): assert any(op in w for w in ops), (op, body)


def test_print_before_render_and_after_render_show_ir_then_c(tmp_path):
  r = uopc(SAXPY, "-o", tmp_path, "--print-before", "render", "--print-after", "render")
  assert r.exit_code == 0, r.output
  before, after = r.stdout.split("# *** IR after render: saxpy__saxpy_k0 ***\n")
  assert before.startswith("# *** IR before render: saxpy__saxpy_k0 ***\n")
  assert "void saxpy__saxpy_k0(" in after




def test_a_file_without_entries_is_an_error(tmp_path):
  src = tmp_path / "empty.uop"
  src.write_text("# nothing here\n")
  r = uopc(src, "-o", tmp_path / "out")
  assert r.exit_code == 1 and f"uopc: error: {src} has no entries: nothing to build" in r.stderr


def test_unknown_stage_is_a_usage_error_listing_stages(tmp_path):
  r = uopc(SAXPY, "-o", tmp_path, "--print-after", "vectorize")
  assert r.exit_code == 1
  assert "unknown stage 'vectorize'" in r.stderr and "valid stages: " in r.stderr and "linearize" in r.stderr


def test_unknown_target_is_a_usage_error(tmp_path):
  r = uopc(SAXPY, "-t", "vax", "-o", tmp_path)
  assert r.exit_code == 1 and "'vax' is not one of" in r.stderr
  assert list(tmp_path.iterdir()) == []


def test_emit_names_an_artifact_of_the_target(tmp_path):
  r = uopc(SAXPY, "--emit", "header,fatbin", "-o", tmp_path)
  assert r.exit_code == 1 and "target c has no artifact 'fatbin'" in r.stderr and "source, so, header" in r.stderr
  assert list(tmp_path.iterdir()) == []


def test_bad_name_is_a_usage_error(tmp_path):
  r = uopc(SAXPY, "-o", tmp_path, "--name", "../escape")
  assert r.exit_code == 1 and "cannot name the outputs" in r.stderr


CUSTOM_KERNEL = """kernel k {
  %out = PARAM {(0, "out")} : ptr<i32>
  %i = INDEX(%out, 0)
  %v = CUSTOM {"42"} : i32
  STORE(%i, %v)
}
"""


def test_custom_code_needs_allow_custom(tmp_path):
  src = tmp_path / "custom.uop"
  src.write_text(CUSTOM_KERNEL)
  r = uopc(src, "-o", tmp_path / "out")
  assert r.exit_code == 1
  assert r.stderr.startswith(f"{src}:4:3: error: CUSTOM injects target source text that uopc cannot check\n")
  assert "--allow-custom" in r.stderr and not (tmp_path / "out").exists()


def test_a_deep_chain_of_ops_compiles(tmp_path):
  """Passes recurse over the graph: a 5000-op chain must not hit Python's recursion limit."""
  lines = ["func chain {", '  %x = PARAM([16]) {(0, "x")} : f32', "  %c = CONST {1.0} : f32"]
  lines += [f"  %v{i} = ADD({'%x' if i == 0 else f'%v{i - 1}'}, %c)" for i in range(5000)]
  lines += ['  %out = PARAM([16]) {(1, "out")} : f32', "  STORE(%out, %v4999)", "}"]
  src = tmp_path / "chain.uop"
  src.write_text("\n".join(lines) + "\n")
  r = subprocess.run([sys.executable, "-m", "uopc", "build", str(src), "-o", str(tmp_path / "out")], capture_output=True, text=True)
  assert r.returncode == 0, r.stderr
  assert (tmp_path / "out" / "libchain.so").is_file()
