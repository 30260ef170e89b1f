"""`uopc run`: natively built libraries and the emulator on .npy inputs, checked against numpy, and
the user errors it reports as diagnostics."""
import numpy as np
import pytest
from click.testing import CliRunner

from uopc.cli import cli

SAXPY = "samples/c-app/saxpy.uop"
GEMM = "samples/gemm.uop"
MODES = [("c", False), ("c", True), ("llvm", False)]


def uopc(*args):
  return CliRunner().invoke(cli, [str(a) for a in args])


def line_of(path: str, needle: str) -> int:
  return 1 + next(i for i, line in enumerate(open(path).read().splitlines()) if needle in line)


def save(tmp_path, name, array) -> str:
  path = tmp_path / f"{name}.npy"
  np.save(path, array)
  return f"{name}={path}"


@pytest.mark.parametrize("target,emulate", MODES)
def test_gemm_from_npy_inputs_matches_numpy(tmp_path, target, emulate):
  a = np.arange(12, dtype=np.float32).reshape(4, 3) - 5
  b = np.arange(6, dtype=np.float32).reshape(3, 2) * 0.5
  res = uopc("run", GEMM, "-t", target, *(["--emulate"] if emulate else []), "--input", save(tmp_path, "A", a),
             "--input", save(tmp_path, "B", b), "--output", f"C={tmp_path / 'c.npy'}")
  assert res.exit_code == 0, res.output
  np.testing.assert_array_equal(np.load(tmp_path / "c.npy"), a @ b)


@pytest.mark.parametrize("target,emulate", MODES)
def test_saxpy_with_bare_pointers_and_a_size(tmp_path, target, emulate):
  x, y = np.arange(6, dtype=np.float32), np.full(6, 0.25, np.float32)
  res = uopc("run", SAXPY, "-t", target, *(["--emulate"] if emulate else []), "--input", save(tmp_path, "x", x),
             "--input", save(tmp_path, "y", y), "--input", save(tmp_path, "out", np.zeros(6, np.float32)), "--var", "n=4")
  assert res.exit_code == 0, res.output
  assert res.output == "out: float32[6]\n[0.25 2.75 5.25 7.75 0.   0.  ]\n"  # 2.5 * x + y for the first n = 4


def test_printed_output_names_the_buffer_dtype_and_shape():
  res = uopc("run", "samples/arange.uop")
  assert res.exit_code == 0, res.output
  assert res.output == "out: int32[5]\n[0 1 2 3 4]\n"


def test_seeded_inputs_are_reproducible_and_agree_with_the_emulator():
  native = uopc("run", GEMM, "--seed", "7")
  assert native.exit_code == 0 and native.output == uopc("run", GEMM, "--seed", "7").output
  assert native.output == uopc("run", GEMM, "--seed", "7", "--emulate").output
  assert native.output != uopc("run", GEMM, "--seed", "8").output


def test_a_bare_pointer_without_input_is_located(tmp_path):
  res = uopc("run", SAXPY, "--var", "n=4", "--input", save(tmp_path, "x", np.zeros(4, np.float32)))
  assert res.exit_code == 1
  assert res.output.splitlines()[:3] == [
    f"{SAXPY}:{line_of(SAXPY, '%out = PARAM')}:3: error: buffer 'out' has no declared size: give it with --input out=FILE.npy",
    '  %out = PARAM {(0, "out")} : ptr<f32>', "  ^"]


def test_wrong_dtype_and_wrong_size_are_located(tmp_path):
  res = uopc("run", GEMM, "--input", save(tmp_path, "A", np.zeros((4, 3), np.float64)))
  assert res.exit_code == 1
  assert res.output.startswith(f"{GEMM}:{line_of(GEMM, '%A = PARAM')}:3: error: input 'A' holds float64, but buffer 'A' is float32\n")
  res = uopc("run", GEMM, "--input", save(tmp_path, "A", np.zeros(11, np.float32)))
  assert res.exit_code == 1
  assert res.output.startswith(f"{GEMM}:{line_of(GEMM, '%A = PARAM')}:3: error: input 'A' has 11 elements (shape (11,)), but buffer 'A' has shape (4, 3) (12 elements)\n")


def test_size_errors(tmp_path):
  x = save(tmp_path, "x", np.zeros(4, np.float32))
  res = uopc("run", SAXPY, "--input", x, "--input", x.replace("x=", "y=", 1), "--input", x.replace("x=", "out=", 1))
  assert res.exit_code == 1 and "error: size 'n' needs a value: --var n=VALUE (in [1, 1048576])" in res.output
  res = uopc("run", SAXPY, "--var", "n=0")
  assert res.exit_code == 1 and "--var n=0 is outside the range [1, 1048576]" in res.output
  res = uopc("run", SAXPY, "--var", "m=3")
  assert res.exit_code == 1 and "the entry has no DEFINE_VAR 'm'" in res.output


def test_unknown_names_and_unreadable_files(tmp_path):
  res = uopc("run", GEMM, "--input", save(tmp_path, "Z", np.zeros(1, np.float32)))
  assert res.exit_code == 1 and "--input Z: the entry has no buffer 'Z'" in res.output and "note: its buffers: A, B, C" in res.output
  res = uopc("run", GEMM, "--input", f"A={tmp_path / 'missing.npy'}")
  assert res.exit_code == 1 and "uopc: error: cannot read --input A=" in res.output
  res = uopc("run", GEMM, "--output", f"Q={tmp_path / 'q.npy'}")
  assert res.exit_code == 1 and "--output Q: entry 'gemm' has no buffer 'Q'" in res.output
  res = uopc("run", GEMM, "--entry", "nope")
  assert res.exit_code == 1 and "has no entry 'nope'" in res.output


def test_several_entries_need_entry(tmp_path):
  two = tmp_path / "two.uop"
  two.write_text("\n".join(open(p).read() for p in ("samples/arange.uop", GEMM)))
  res = uopc("run", two)
  assert res.exit_code == 1 and "has 2 entries: choose one with --entry" in res.output and "note: entries: arange, gemm" in res.output
  res = uopc("run", two, "--entry", "arange")
  assert res.exit_code == 0 and res.output == "out: int32[5]\n[0 1 2 3 4]\n"


def test_emulator_faults_are_located_with_a_caret(tmp_path):
  src = tmp_path / "oob.uop"
  src.write_text("""kernel oob {
  %out = PARAM {(0, "out")} : ptr<i32, 4>
  %i = RANGE(5) {(0, AxisType.LOOP)} : index
  %p = INDEX(%out, %i) : ptr<i32, 4>
  %st = STORE(%p, 7)
  %e = END(%st, %i)
  SINK(%e)
}
""")
  res = uopc("run", src, "--emulate")
  assert res.exit_code == 1
  assert res.output.splitlines() == [f"{src}:5:3: error: out-of-bounds store to 'out': the kernel accesses element 4, but it has 4 elements",
                                     "  %st = STORE(%p, 7)", "  ^"]


def test_device_targets_need_the_emulator():
  res = uopc("run", GEMM, "-t", "cuda")
  assert res.exit_code == 1 and "-t cuda runs on a device: use --emulate" in res.output
