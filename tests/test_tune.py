"""`uopc tune` and `uopc build --tuning` (issue 20) on the CPU: tune a small program with a tiny budget,
build from the database in a fresh process byte for byte as with the opts pinned, merge databases,
stale and inapplicable entries falling back with a note, located errors for corrupted databases,
shards, budgets, the output check that keeps wrong candidates out, and the progress display."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from uopc.cli import cli
from uopc.tune import db as tuning_db
from uopc.tune.kernels import Kernel, load_checked, program_kernels
from uopc.tune.measure import KernelData, mismatch
from uopc.tune.progress import Progress
from uopc.tune.search import TuneOptions, _shard, tune_file
from uopc.tune.space import SPACE_VERSION
from uopc.run import Arg
from uopc.dtype import dtypes

ROOT = Path(__file__).resolve().parent.parent


def mlp(relu_floor: float = 0.0) -> str:
  """x[16,32] @ w1[32,64] -> max(., floor) -> @ w2[64,16]: two kernels (a gemm each), small enough to build fast."""
  return f"""func mlp {{
  %out = PARAM([16, 16]) {{(3, "out")}} : f32
  %x = PARAM([16, 32]) {{(0, "x")}} : f32
  %a = RESHAPE(%x, [16, 32, 1])
  %w1 = PARAM([32, 64]) {{(1, "w1")}} : f32
  %b = RESHAPE(%w1, [1, 32, 64])
  %p = MUL(%a, %b)
  %s = REDUCE(%p) {{(ADD, (1,))}}
  %h = RESHAPE(%s, [16, 64])
  %floor = CONST {{{relu_floor}}}
  %r = MAX(%h, %floor)
  %c = RESHAPE(%r, [16, 64, 1])
  %w2 = PARAM([64, 16]) {{(2, "w2")}} : f32
  %d = RESHAPE(%w2, [1, 64, 16])
  %q = MUL(%c, %d)
  %t = REDUCE(%q) {{(ADD, (1,))}}
  %o = RESHAPE(%t, [16, 16])
  %0 = STORE(%out, %o)
  SINK(%0)
}}
"""


def uopc(*args):
  return CliRunner().invoke(cli, [str(a) for a in args])


def uopc_process(*args, cwd: Path) -> subprocess.CompletedProcess:
  """uopc in a fresh Python process (nothing cached from this one)."""
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))  # keep the caller's too
  return subprocess.run([sys.executable, "-m", "uopc", *map(str, args)], capture_output=True, text=True, cwd=cwd, env=env)


def program(tmp_path: Path, text: str, name: str = "mlp.uop") -> Path:
  path = tmp_path / name
  path.write_text(text)
  return path


def kernels_of(path: Path, target: str = "c", arch: str = "portable") -> list[Kernel]:
  return program_kernels(load_checked(str(path)), target, path.stem, arch, SPACE_VERSION)


def entry(k: Kernel, opts: str, time_us: float = 1.0, device: str = "test", arch: str = "portable", space: int = SPACE_VERSION) -> tuning_db.Entry:
  return tuning_db.Entry(k.name, "c", arch, space, opts, time_us, "", 2.0, device)


def outputs(d: Path) -> dict[str, bytes]:
  return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


# ---- the whole flow ------------------------------------------------------------------------------------------------
def test_tune_then_build_from_the_database_in_a_fresh_process_is_the_pinned_build(tmp_path):
  src, db = program(tmp_path, mlp()), tmp_path / "tuning.json"
  res = uopc_process("tune", src, "-t", "c", "--db", db, "--budget", "6s", "-j", "2", cwd=tmp_path)
  assert res.returncode == 0, res.stderr
  assert "2 of 2 kernels tuned" in res.stdout, res.stdout
  entries = tuning_db.load(db)
  assert sorted(e.kernel for e in entries.values()) == ["mlp__mlp_k0", "mlp__mlp_k1"]
  assert db.read_text() == tuning_db.dumps(entries)  # sorted and stable: loading and saving changes no byte
  for e in entries.values():
    assert e.time_us > 0 and e.heuristic_us > 0 and e.device and e.target == "c" and e.space == SPACE_VERSION
  built = uopc_process("build", src, "-t", "c", "--tuning", db, "--tuning-report", "-o", tmp_path / "tuned", cwd=tmp_path)
  assert built.returncode == 0, built.stderr
  assert "2 of 2 kernels from the database" in built.stderr
  pins = [a for e in sorted(entries.values(), key=lambda e: e.kernel) for a in ("--opts", f"{e.kernel}:{e.opts}")]
  pinned = uopc_process("build", src, "-t", "c", *pins, "-o", tmp_path / "pinned", cwd=tmp_path)
  assert pinned.returncode == 0, pinned.stderr
  assert outputs(tmp_path / "tuned") == outputs(tmp_path / "pinned")


def test_the_database_opts_are_what_the_build_uses(tmp_path):
  """An entry with opts the heuristics would not pick: the build follows it, byte for byte as --opts."""
  src, db = program(tmp_path, mlp()), tmp_path / "db.json"
  k0 = kernels_of(src)[0]
  tuning_db.save(db, {k0.key: entry(k0, "SPLIT(0,2,u)")})
  assert uopc("build", src, "--tuning", db, "-o", tmp_path / "tuned").exit_code == 0
  assert uopc("build", src, "--opts", f"{k0.name}:SPLIT(0,2,u)", "-o", tmp_path / "pinned").exit_code == 0
  assert uopc("build", src, "-o", tmp_path / "plain").exit_code == 0
  assert outputs(tmp_path / "tuned") == outputs(tmp_path / "pinned") != outputs(tmp_path / "plain")


def test_opts_pinned_on_the_command_line_win_over_the_database(tmp_path):
  src, db = program(tmp_path, mlp()), tmp_path / "db.json"
  k0 = kernels_of(src)[0]
  tuning_db.save(db, {k0.key: entry(k0, "SPLIT(0,2,u)")})
  res = uopc("build", src, "--tuning", db, "--tuning-report", "--opts", f"{k0.name}:", "-o", tmp_path / "a")
  assert res.exit_code == 0, res.output
  assert f"{k0.name}: --opts" in res.output
  assert uopc("build", src, "--opts", f"{k0.name}:", "-o", tmp_path / "b").exit_code == 0
  assert outputs(tmp_path / "a") == outputs(tmp_path / "b")


# ---- fallbacks -------------------------------------------------------------------------------------------------------
def test_a_stale_entry_falls_back_to_the_heuristics_with_a_note(tmp_path):
  (tmp_path / "old").mkdir()
  (tmp_path / "new").mkdir()
  old, new = program(tmp_path, mlp(0.0), "old/mlp.uop"), program(tmp_path, mlp(0.5), "new/mlp.uop")
  db = tmp_path / "db.json"
  tuning_db.save(db, {k.key: entry(k, "SPLIT(0,2,u)") for k in kernels_of(old)})
  # the relu's floor is in one kernel: that one changed, the other did not
  (changed,), (same,) = ([k for k in kernels_of(new) if (k.key in tuning_db.load(db)) == known] for known in (False, True))
  res = uopc("build", new, "--tuning", db, "--tuning-report", "-o", tmp_path / "tuned")
  assert res.exit_code == 0, res.output
  assert f"note: {db}: kernel {changed.name}: the database's entry" in res.output
  assert "is stale (the kernel changed since it was tuned); it gets the heuristics" in res.output
  assert f"{changed.name}: heuristics: not in the database" in res.output
  assert f"{same.name}: database: SPLIT(0,2,u)" in res.output
  assert uopc("build", new, "--opts", f"{same.name}:SPLIT(0,2,u)", "-o", tmp_path / "pinned").exit_code == 0
  assert outputs(tmp_path / "tuned") == outputs(tmp_path / "pinned")


def test_an_entry_from_another_search_space_is_stale(tmp_path):
  src, db = program(tmp_path, mlp()), tmp_path / "db.json"
  k0 = kernels_of(src)[0]
  tuning_db.save(db, {"0" * 32: entry(k0, "SPLIT(0,2,u)", space=SPACE_VERSION - 1)})
  res = uopc("build", src, "--tuning", db, "-o", tmp_path / "out")
  assert res.exit_code == 0 and f"tuned with search space {SPACE_VERSION - 1}" in res.output, res.output


def test_opts_that_no_longer_apply_fall_back_with_a_note(tmp_path):
  src, db = program(tmp_path, mlp()), tmp_path / "db.json"
  k0 = kernels_of(src)[0]
  tuning_db.save(db, {k0.key: entry(k0, "SPLIT(0,7,u)")})  # 7 divides no axis
  res = uopc("build", src, "--tuning", db, "--tuning-report", "-o", tmp_path / "tuned")
  assert res.exit_code == 0, res.output
  assert "do not apply" in res.output and "mlp__mlp_k0: heuristics" in res.output
  assert uopc("build", src, "-o", tmp_path / "plain").exit_code == 0
  assert outputs(tmp_path / "tuned") == outputs(tmp_path / "plain")


# ---- the database file --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text,where,message", [
  ('{"entries": {\n  "k": {"opts": }\n}', "2:17", "not a tuning database: Expecting value"),
  ('{"format": 1}\n', "1:1", "expected"),
  ('{\n"entries": {\n "abc": {"kernel": 3}\n}, "format": 1}\n', "3:2", "entry abc: field 'kernel' is missing or not a string"),
  ('{"entries": {}, "format": 7}\n', "1:17", "format 7"),
])
def test_a_corrupted_database_is_a_located_error(tmp_path, text, where, message):
  db = tmp_path / "bad.json"
  db.write_text(text)
  res = uopc_process("build", ROOT / "samples/gemm.uop", "--tuning", db, "-o", tmp_path / "out", cwd=tmp_path)
  assert res.returncode == 1
  assert f"{db}:{where}: error: " in res.stderr and message in res.stderr, res.stderr
  assert "Traceback" not in res.stderr and not (tmp_path / "out").exists()


def test_a_missing_database_is_an_error(tmp_path):
  res = uopc("build", ROOT / "samples/gemm.uop", "--tuning", tmp_path / "none.json", "-o", tmp_path)
  assert res.exit_code == 1 and "no such file" in res.output


def test_merge_keeps_every_kernel_and_the_fastest_entry(tmp_path):
  src = program(tmp_path, mlp())
  k0, k1 = kernels_of(src)
  a = {k0.key: entry(k0, "SPLIT(0,2,u)", 5.0, "box a")}
  b = {k0.key: entry(k0, "SPLIT(0,4,u)", 3.0, "box b"), k1.key: entry(k1, "", 9.0, "box b")}
  tuning_db.save(tmp_path / "a.json", a)
  tuning_db.save(tmp_path / "b.json", b)
  res = uopc("tune", "--merge", tmp_path / "a.json", tmp_path / "b.json", "-o", tmp_path / "all.json")
  assert res.exit_code == 0, res.output
  merged = tuning_db.load(tmp_path / "all.json")
  assert merged == {k0.key: b[k0.key], k1.key: b[k1.key]}
  assert tuning_db.merge(b, a) == tuning_db.merge(a, b) == merged
  assert uopc("tune", "--merge", tmp_path / "a.json").exit_code == 1  # no -o


def test_shards_split_the_kernels_by_key_without_overlap(tmp_path):
  kernels = [Kernel(f"k{i}", None, f"{i * 7919:032x}") for i in range(20)] + [Kernel("again", None, f"{0:032x}")]
  shards = [_shard(kernels, (i, 3)) for i in range(3)]
  keys = [k.key for s in shards for k in s]
  assert sorted(keys) == sorted({k.key for k in kernels}) and all(shards)


@pytest.mark.parametrize("args,message", [
  (["--budget", "soon"], "expected a duration"),
  (["--shard", "2/2"], "0 <= I < N"),
  (["-t", "c", "--cpu", "native", "--kernel-budget", "1x"], "expected a duration"),
])
def test_bad_tune_options_are_errors(tmp_path, args, message):
  res = uopc("tune", ROOT / "samples/gemm.uop", "--db", tmp_path / "db.json", *args)
  assert res.exit_code == 1 and message in res.output and not (tmp_path / "db.json").exists()


def test_cuda_without_a_gpu_is_an_error(tmp_path, monkeypatch):
  from uopc.tune import measure_cuda
  def no_gpu(self): raise measure_cuda.CudaError("no CUDA device")
  monkeypatch.setattr(measure_cuda.CudaDevice, "__init__", no_gpu)
  res = uopc("tune", ROOT / "samples/gemm.uop", "--db", tmp_path / "db.json", "-t", "cuda", "--arch", "sm_90")
  assert res.exit_code == 1 and "-t cuda is tuned on a GPU: no CUDA device" in res.output and "Traceback" not in res.output


def test_cuda_candidates_build_without_a_gpu(tmp_path):
  """The CUDA half that needs no GPU: a candidate library, whose metadata orders the kernel's buffers."""
  import ctypes
  from uopc.run import library_arguments
  from uopc.stages.optimize import heuristic_opts, target_caps, type_axes
  from uopc.tune.compile import Job, build_candidate
  from uopc.tune.measure import ENTRY, LIB, kernel_data
  k = kernels_of(program(tmp_path, mlp()), "cuda", "sm_90")[0]
  caps = target_caps("cuda")
  built = build_candidate(Job(k.name, k.sink, heuristic_opts(type_axes(k.sink, caps), caps), "cuda", None, ("sm_90",), (), str(tmp_path / "c")))
  assert built.so is not None, built.error
  data = kernel_data(k.sink)
  order = library_arguments(ctypes.CDLL(built.so), LIB, ENTRY, data.args)
  assert sorted(a.name for a in order) == sorted(a.name for a in data.args)


@pytest.mark.gpu
def test_tune_cuda_on_a_gpu_then_build_without_one(tmp_path):
  from uopc.tune.measure_cuda import CudaDevice, CudaError
  from uopc.tune.search import default_arch
  try:
    arch = default_arch("cuda", CudaDevice().arch())  # an H100's image of a default build: sm_90a
  except CudaError as e:
    pytest.skip(f"no usable CUDA GPU: {e}")
  src, db = program(tmp_path, mlp()), tmp_path / "db.json"
  res = uopc_process("tune", src, "-t", "cuda", "--db", db, "--budget", "20s", cwd=tmp_path)
  assert res.returncode == 0 and "2 of 2 kernels tuned" in res.stdout, res.stderr
  entries = tuning_db.load(db)
  assert all(e.arch == f"{arch}+contract" for e in entries.values())  # a default -t cuda build fuses multiply-adds
  built = uopc_process("build", src, "-t", "cuda", "--arch", arch, "--tuning", db, "-o", tmp_path / "tuned", cwd=tmp_path)
  pins = [a for e in entries.values() for a in ("--opts", f"{e.kernel}:{e.opts}")]
  pinned = uopc_process("build", src, "-t", "cuda", "--arch", arch, *pins, "-o", tmp_path / "pinned", cwd=tmp_path)
  assert built.returncode == pinned.returncode == 0, built.stderr + pinned.stderr
  assert outputs(tmp_path / "tuned") == outputs(tmp_path / "pinned")
  # a default build (every default arch) takes them too: the mlp's kernels are the same in every image
  built = uopc_process("build", src, "-t", "cuda", "--tuning", db, "-o", tmp_path / "tuned_default", cwd=tmp_path)
  pinned = uopc_process("build", src, "-t", "cuda", *pins, "-o", tmp_path / "pinned_default", cwd=tmp_path)
  assert built.returncode == pinned.returncode == 0, built.stderr + pinned.stderr
  assert outputs(tmp_path / "tuned_default") == outputs(tmp_path / "pinned_default")


# ---- the search -----------------------------------------------------------------------------------------------------
def test_a_candidate_with_another_output_is_never_kept(tmp_path, monkeypatch):
  """A device that corrupts the output of every candidate but each kernel's first (the heuristics', built
  into candidate directory 1): the entries keep the heuristics' opts."""
  from uopc.tune import search
  from uopc.tune.measure import CpuDevice
  class Corrupting(CpuDevice):
    def measure(self, so, data, runs, max_seconds):
      m = super().measure(so, data, 1, 0.0)
      if Path(so).parent.name != "1": m.outputs = {k: v + 1 for k, v in m.outputs.items()}
      return m
  monkeypatch.setattr(search, "make_device", lambda target: Corrupting())
  src, db = program(tmp_path, mlp()), tmp_path / "db.json"
  reports = tune_file(str(src), str(db), TuneOptions(budget=15.0, jobs=1, shard=(0, 1)), Progress(io.StringIO()))
  tuned = [r for r in reports if r.entry is not None]
  # every kept entry is the heuristics' (the only candidate measured right); a loaded machine may spend a
  # kernel's share of the budget before its first other candidate is timed, so "wrong" is asked of one
  assert len(tuned) == 2 and all(r.entry.opts == r.entry.heuristic_opts and r.measured == 1 for r in tuned)
  assert any(r.wrong > 0 for r in tuned)


def test_a_gather_is_tuned_with_its_declared_table_size_and_refused_without_it():
  """The embedding's table index depends on the data (idx * 64 + c): its size comes from the entry's
  declared shape (it was inferred as 2^38 elements and the tuner died); with no declaration the kernel is
  not tunable, with a reason, and the run goes on."""
  from uopc.tune.measure import NotTunable, kernel_data
  k = program_kernels(load_checked(str(ROOT / "samples/models/embedding.uop")), "c", "e", "portable", SPACE_VERSION)[0]
  data = kernel_data(k.sink, declared=dict(k.sizes))
  assert data.inputs["table"].size == 1000 * 64 and data.inputs["idx"].size == 32
  with pytest.raises(NotTunable, match="'table' is not declared and its index depends on data"):
    kernel_data(k.sink)


def test_mismatch_allows_reordered_sums_and_rejects_wrong_values():
  arg = Arg("out", "buffer", 0, dtypes.float32, None, True, False, None)
  data = KernelData([arg], {})
  ref = {"out": np.array([1.0, -2.0, 3.0, np.nan], np.float32)}
  assert mismatch(ref, {"out": ref["out"] * np.float32(1 + 1e-6)}, data) is None
  assert "out[1]" in mismatch(ref, {"out": np.array([1.0, -2.1, 3.0, np.nan], np.float32)}, data)
  assert mismatch(ref, {"out": np.array([1.0, -2.0, 3.0, 0.0], np.float32)}, data) is not None


def test_kernels_already_in_the_database_are_skipped(tmp_path):
  src, db = program(tmp_path, mlp()), tmp_path / "db.json"
  tuning_db.save(db, {k.key: entry(k, "") for k in kernels_of(src)})
  before = db.read_bytes()
  res = uopc("tune", src, "--db", db, "--budget", "1s", "-j", "1")
  assert res.exit_code == 0 and res.output.count("in the database") == 2, res.output
  assert db.read_bytes() == before


# ---- progress ---------------------------------------------------------------------------------------------------------
class _Tty(io.StringIO):
  def isatty(self) -> bool: return True


def test_progress_without_a_tty_writes_lines_only():
  out = io.StringIO()
  p = Progress(out)
  p.step("k0: 1.00x")
  p.line("k0: done")
  p.close()
  assert out.getvalue() == "k0: done\n"


def test_progress_bar_on_a_tty_without_tqdm(monkeypatch):
  monkeypatch.setitem(sys.modules, "tqdm", None)  # import tqdm fails
  out = _Tty()
  p = Progress(out)
  assert p.bar and p.tqdm is None
  p.step("k0: 1.25x")
  p.line("k0: done")
  p.close()
  assert "\r" in out.getvalue() and "1 candidates | k0: 1.25x" in out.getvalue() and "k0: done\n" in out.getvalue()


def test_database_text_is_sorted_and_stable():
  e = tuning_db.Entry("k", "c", "portable", 1, "SPLIT(0,2,u)", 1.5, "", 2.0, "cpu")
  text = tuning_db.dumps({"b" * 32: e, "a" * 32: e})
  assert text.index("a" * 32) < text.index("b" * 32) and text.endswith("}\n")
  assert tuning_db.dumps(tuning_db.parse(text, "x.json")) == text
  assert json.loads(text)["format"] == tuning_db.FORMAT


def test_entries_are_for_builds_of_the_same_numeric_modes(tmp_path):
  """A database tuned without --fp-contract=fast serves only builds without it (and the other way round);
  a build of other modes falls back to the heuristics with a note saying why."""
  src, db = program(tmp_path, mlp()), tmp_path / "db.json"
  k0 = kernels_of(src)[0]
  modes = kernels_of(src, arch="portable+contract")[0]
  assert modes.key != k0.key  # the modes are part of the key
  tuning_db.save(db, {k0.key: entry(k0, "SPLIT(0,2,u)")})
  res = uopc("build", src, "--tuning", db, "--tuning-report", "--fp-contract", "fast", "-o", tmp_path / "fused")
  assert res.exit_code == 0, res.output
  assert "was tuned for portable, this build is portable+contract" in res.output
  assert f"{k0.name}: heuristics: not in the database" in res.output
  tuning_db.save(db, {modes.key: entry(modes, "SPLIT(0,2,u)", arch="portable+contract")})
  res = uopc("build", src, "--tuning", db, "--tuning-report", "--fp-contract", "fast", "-o", tmp_path / "fused2")
  assert f"{k0.name}: database: SPLIT(0,2,u)" in res.output, res.output
  res = uopc("build", src, "--tuning", db, "--tuning-report", "-o", tmp_path / "plain")
  assert f"{k0.name}: heuristics: not in the database" in res.output and "was tuned for portable+contract" in res.output


def test_tuning_under_a_numeric_mode_keys_its_entries_by_it(tmp_path):
  src, db = program(tmp_path, mlp()), tmp_path / "tuning.json"
  res = uopc_process("tune", src, "-t", "c", "--db", db, "--budget", "3s", "-j", "2", "--fp-contract", "fast", cwd=tmp_path)
  assert res.returncode == 0, res.stderr
  entries = tuning_db.load(db)
  assert entries and {e.arch for e in entries.values()} == {"portable+contract"}
  assert set(entries) == {k.key for k in kernels_of(src, arch="portable+contract")}


def test_under_allow_tf32_float32_outputs_agree_to_tf32s_error():
  """The tuner's check of a candidate against the heuristic kernel: float32 to 1e-4 of the output's scale,
  to tf32's 2e-3 when the kernels may run as tf32 (an exact float32 candidate against a tf32 reference)."""
  from types import SimpleNamespace

  from uopc.dtype import dtypes
  ref = np.random.default_rng(0).standard_normal(256).astype(np.float32)
  got = (ref * (1 + 5e-4)).astype(np.float32)  # differences of tf32's size (a 10-bit mantissa)
  data = SimpleNamespace(written=lambda: [SimpleNamespace(name="out", dtype=dtypes.float32)])
  assert mismatch({"out": ref}, {"out": got}, data) is not None
  assert mismatch({"out": ref}, {"out": got}, data, tf32=True) is None


def test_variants_revise_one_of_the_heuristics_opts_at_a_time(tmp_path):
  """The search's variants of the heuristics' opts H (uopc.tune.space.variants): each is H with one opt
  replaced by another of the same OptOp on the same axis, the later opts kept where they still apply (else
  dropped); a float16 gemm's TC staging and tile, its first opt, are among them, and each variant's kernel
  is the one its opts make when pinned (what a database entry rebuilds)."""
  sys.path.insert(0, str(ROOT / "tests"))
  from test_tensor_cores import gemm_relu
  from uopc.stages.optimize import apply_opts, heuristic_opts, target_caps, type_axes
  from uopc.tune.space import variants
  k = kernels_of(program(tmp_path, gemm_relu(1024, 64, 1024, "f16").text(), "g.uop"), "cuda", "sm_90")[0]
  caps = target_caps("cuda", None, ("sm_80", "sm_90"))
  typed = type_axes(k.sink, caps)
  h = heuristic_opts(typed, caps)
  assert [str(o) for o in h] == ["TC(2,-1)", "SPLIT(1,4,l)"], h
  prefixes = [apply_opts(typed, h[:j], caps, k.name) for j in range(len(h) + 1)]
  found = variants(prefixes, h, caps)
  assert found and len({o for o, _ in found}) == len(found)
  for opts, sink in found:
    j = next(i for i, (a, b) in enumerate(zip(opts, h)) if a != b)
    assert opts[j].op is h[j].op and opts[j].axis == h[j].axis and opts[:j] == h[:j]
    assert opts[j + 1:] in (h[j + 1:], ())
    assert sink == apply_opts(typed, opts, caps, k.name)
  texts = {",".join(map(str, o)) for o, _ in found}
  assert {"TC(2,-1,4),SPLIT(1,4,l)", "TC(2,-1,2),SPLIT(1,4,l)", "TC(2,-1,4,6)"} <= texts, texts  # staging; a tile that sets the warps itself
  assert any(t.startswith("TC(2,-1),SPLIT(1,") and t != "TC(2,-1),SPLIT(1,4,l)" for t in texts), texts
