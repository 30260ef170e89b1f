"""Arch variants (uopc.pipeline.ArchVariant, Target.arch_variants): a -t cuda build whose archs mix sm_90a
with others (the default, sm_80 and sm_90a) gives the kernels that can use warpgroup MMAs a variant of their
own for sm_90a, in a second image (NAME.sm_90a.ptx/.fatbin) that the launcher loads on GPUs of compute
capability 9.0; every other GPU, and every kernel without such a variant, gets the library's own. Here: which
builds get one, the artifacts, ptxas on both, the launcher's choice against a fake driver (uopc/targets/cuda
launcher: the kernel's shared memory tells the images apart), --print-after, --emit, --opts and --tuning; on
an H100 the default build's results (the GPU test at the end)."""
from __future__ import annotations

import ctypes
import io

import numpy as np
import pytest

from fake_cuda import build_fakes, call
from gpu_samples import call as gpu_call
from test_cuda_gpu import gpu  # noqa: F401 (a fixture)
from test_cuda_ptx import needs_ptxas, ptxas_accepts
from test_optimize import program
from test_tensor_cores import assert_gemm_relu, gemm_relu, inputs
from uopc.driver import BuildOptions, build
from uopc.stages.optimize import parse_schedule
from uopc.targets.cuda.target import DEFAULT_ARCHS, arch_variants

KERNEL = "g__tc_f16_k0"
ARGS = [([0], "uint16"), ([0], "uint16"), ([0], "float32"), ([0], "float32")]


def _build(d, f=None, archs=(), emit=None, **kw) -> dict[str, str]:
  """Build `f` (default: a 2048 x 256 x 2048 float16 gemm, which sm_90a puts on warpgroup MMAs) as g; {file: text}
  of the text artifacts written."""
  d.mkdir(parents=True, exist_ok=True)
  (d / "g.uop").write_text(program([f or gemm_relu(2048, 256, 2048, "f16")]))
  paths = build(d / "g.uop", BuildOptions(target="cuda", out_dir=d / "out", archs=archs, emit=emit, **kw))
  return {p.name: (p.read_text() if p.suffix in (".ptx", ".c", ".h") else "") for p in paths}


def test_only_builds_that_mix_sm_90a_with_other_archs_have_a_variant():
  assert DEFAULT_ARCHS == ("sm_80", "sm_90a") and arch_variants(DEFAULT_ARCHS) == (("sm_90a",),)
  assert arch_variants(("sm_86", "sm_90a", "sm_100")) == (("sm_90a",),)
  assert all(arch_variants(a) == () for a in (("sm_90a",), ("sm_80", "sm_90"), ("sm_80",), ("sm_90a", "sm_90a")))


@needs_ptxas
def test_default_build_has_a_sm_90a_image_for_the_warpgroup_gemm(tmp_path):
  out = _build(tmp_path)
  assert set(out) == {"g.ptx", "g.sm_90a.ptx", "g.fatbin", "g.sm_90a.fatbin", "g_cuda.c", "libg.so", "g.h"}
  own, hopper = out["g.ptx"], out["g.sm_90a.ptx"]
  assert ".target sm_80" in own and "wgmma" not in own and "mma.sync" in own
  assert ".target sm_90a" in hopper and "wgmma.mma_async" in hopper and "mma.sync" not in hopper
  ptxas_accepts(own, "sm_80", tmp_path)
  ptxas_accepts(hopper, "sm_90a", tmp_path)
  source = out["g_cuda.c"]
  assert "g__image_capability[g__NUM_IMAGES] = {0, 90}" in source and "if (g__variant_of(functions) == 1) {" in source
  # the same kernel, two geometries: one warpgroup of 128 threads and 96 KiB, or 2 x 2 warps and 64 KiB
  assert "block[3] = {INT64_C(32), INT64_C(4), INT64_C(1)}" in source and "block[3] = {INT64_C(32), INT64_C(2), INT64_C(2)}" in source
  assert "g__shared_bytes[g__NUM_IMAGES][g__NUM_KERNELS] = {{65536}, {98304}}" in source


def test_builds_without_an_arch_specific_kernel_keep_one_image(tmp_path):
  """A gemm too small for warpgroup tiles, and builds that name sm_90a alone or no sm_90a: one image, as before."""
  small = _build(tmp_path / "small", gemm_relu(256, 256, 256, "f16"), emit=("ptx", "source"))
  assert set(small) == {"g.ptx", "g_cuda.c"} and "__images" not in small["g_cuda.c"] and "variant_of" not in small["g_cuda.c"]
  hopper = _build(tmp_path / "hopper", archs=("sm_90a",), emit=("ptx",))
  assert set(hopper) == {"g.ptx"} and "wgmma.mma_async" in hopper["g.ptx"]
  plain = _build(tmp_path / "plain", archs=("sm_80", "sm_90"), emit=("ptx", "source"))
  assert set(plain) == {"g.ptx", "g_cuda.c"} and "wgmma" not in plain["g.ptx"]


def test_the_own_image_is_the_build_for_the_other_archs(tmp_path):
  """The library's own kernels are what a build without sm_90a makes (the heuristics for every arch of the build)."""
  mixed = _build(tmp_path / "mixed", emit=("ptx",))
  plain = _build(tmp_path / "plain", archs=("sm_80", "sm_90"), emit=("ptx",))
  assert mixed["g.ptx"] == plain["g.ptx"]
  assert set(mixed) == {"g.ptx", "g.sm_90a.ptx"}  # --emit ptx writes the variant's PTX too


def test_a_library_with_multi_device_entries_keeps_one_image(tmp_path, capsys):
  from multi_programs import tp_mlp
  d = tmp_path / "multi"
  d.mkdir()
  (d / "g.uop").write_text(program([gemm_relu(2048, 256, 2048, "f16")]) + tp_mlp(2).text())
  paths = build(d / "g.uop", BuildOptions(target="cuda", out_dir=d / "out", emit=("ptx",)))
  assert [p.name for p in paths] == ["g.ptx"] and "wgmma" not in paths[0].read_text()
  assert "g has multi-device entries: every kernel is built once for all archs (no sm_90a image" in capsys.readouterr().err


def test_emit_names_a_variants_artifact(tmp_path):
  assert set(_build(tmp_path / "a", emit=("ptx:sm_90a",))) == {"g.sm_90a.ptx"}
  from uopc.diagnostics import CompileError
  with pytest.raises(CompileError, match="no artifact 'ptx:sm_90a'"):
    _build(tmp_path / "b", archs=("sm_80", "sm_90"), emit=("ptx:sm_90a",))


def test_print_after_optimize_shows_the_variant(tmp_path):
  printed = io.StringIO()
  _build(tmp_path, emit=("ptx",), print_after=("optimize",), print_out=printed)
  text = printed.getvalue()
  assert f"IR after optimize: {KERNEL} ***" in text and f"IR after optimize: {KERNEL} [sm_90a] ***" in text
  own, hopper = text.split(f"{KERNEL} [sm_90a] ***")
  assert "# opts: TC(2,-1)," in own and "# opts: TC(2,-1,1,9)\n" in hopper


def test_opts_pin_both_images(tmp_path):
  """--opts pins the kernel in both images: a warpgroup tile is mma.sync in the own image, wgmma in sm_90a's."""
  pinned = parse_schedule([f"{KERNEL}:TC(2,-1,1,9)"])
  out = _build(tmp_path / "wg", emit=("ptx",), schedule=pinned)
  assert "wgmma" not in out["g.ptx"] and "wgmma.mma_async" in out["g.sm_90a.ptx"]
  out = _build(tmp_path / "plain", emit=("ptx",), schedule=parse_schedule([f"{KERNEL}:TC(2,-1,1,7)"]))
  assert set(out) == {"g.ptx"}  # not a warpgroup tile: no variant


# ---- the launcher's choice, against a fake driver --------------------------------------------------------------------


@pytest.fixture(scope="module")
def library(tmp_path_factory):
  d = tmp_path_factory.mktemp("variants")
  _build(d, emit=("ptx", "source", "so", "header"))
  return build_fakes(d), d / "out" / "libg.so"


@pytest.mark.parametrize("cc, shared", [("90", 98304), ("80", 65536), ("86", 65536), ("89", 65536), ("100", 65536), ("120", 65536)])
def test_the_launcher_loads_the_sm_90a_image_on_compute_capability_9_0_only(library, cc, shared):
  fakes, lib = library
  got = call(fakes, lib, "g", "tc_f16", ARGS, [7], nccl=False, env={"FAKE_CC": cc}, repeat=2)
  assert got["status"] == 0, got["message"]
  log = [x for x in got["log"] if x[0] in ("attribute", "launch", "shared")]
  assert log == [["attribute", KERNEL, 8, shared], ["launch", KERNEL, 7, 0], ["shared", KERNEL, shared],
                 ["launch", KERNEL, 7, 0], ["shared", KERNEL, shared]]


def test_a_driver_that_cannot_load_the_variant_gets_the_own_image(library):
  """CUDA_ERROR_NO_BINARY_FOR_GPU (209) for the sm_90a image, as from a driver too old for it: the own image."""
  fakes, lib = library
  got = call(fakes, lib, "g", "tc_f16", ARGS, [7], nccl=False, env={"FAKE_CC": "90", "FAKE_LOAD_FAIL": "209"})
  assert got["status"] == 0, got["message"]
  assert [x for x in got["log"] if x[0] == "shared"] == [["shared", KERNEL, 65536]]
  got = call(fakes, lib, "g", "tc_f16", ARGS, [7], nccl=False, env={"FAKE_CC": "80", "FAKE_LOAD_FAIL": "209"})
  assert got["status"] == 1000 + 209  # the own image itself: the driver's error


# ---- tuning ---------------------------------------------------------------------------------------------------------


def test_tuning_entries_for_sm_90a_serve_the_variant_and_plain_ones_the_own_kernels(tmp_path):
  from uopc.frontend import load_module
  from uopc.tune import db as tuning_db
  from uopc.tune.command import build_schedules
  from uopc.tune.kernels import kernel_key, program_kernels
  from uopc.tune.space import SPACE_VERSION
  (tmp_path / "g.uop").write_text(program([gemm_relu(2048, 256, 2048, "f16")]))
  module = load_module(str(tmp_path / "g.uop"))
  db = {}
  for arch, opts in (("sm_90", "TC(2,-1,2,7)"), ("sm_90a", "TC(2,-1,3,10)")):
    (k,) = program_kernels(module, "cuda", "g", arch, SPACE_VERSION)
    db[kernel_key(k.sink, "cuda", arch, SPACE_VERSION)] = tuning_db.Entry(k.name, "cuda", arch, SPACE_VERSION, opts, 1.0, "", 2.0, "H100")
  tuning_db.save(tmp_path / "db.json", db)
  report = io.StringIO()
  own, variants = build_schedules(str(tmp_path / "g.uop"), str(tmp_path / "db.json"), "cuda", "g", (), "portable", None, True, report)
  assert {k: ",".join(map(str, v)) for k, v in own.items()} == {KERNEL: "TC(2,-1,2,7)"}
  assert {g: {k: ",".join(map(str, v)) for k, v in s.items()} for g, s in variants.items()} == {("sm_90a",): {KERNEL: "TC(2,-1,3,10)"}}
  assert "sm_90a variant): 1 of 1 kernels from the database" in report.getvalue()
  out = _build(tmp_path / "b", emit=("ptx", "source"), schedule=own, variant_schedules=variants)
  source = out["g_cuda.c"]
  assert "block[3] = {INT64_C(32), INT64_C(8), INT64_C(1)}" in source  # tile 10 (two warpgroups) on sm_90a
  assert "block[3] = {INT64_C(32), INT64_C(4), INT64_C(2)}" in source  # tile 7 (2 x 4 warps) elsewhere


def _db(tmp_path, entries: dict[str, str]):
  """A tuning database with the gemm's entry `opts` for each arch of `entries`, and the build's schedules from it."""
  from uopc.frontend import load_module
  from uopc.tune import db as tuning_db
  from uopc.tune.command import build_schedules
  from uopc.tune.kernels import kernel_key, program_kernels
  from uopc.tune.space import SPACE_VERSION
  tmp_path.mkdir(parents=True, exist_ok=True)
  (tmp_path / "g.uop").write_text(program([gemm_relu(2048, 256, 2048, "f16")]))
  module, db = load_module(str(tmp_path / "g.uop")), {}
  for arch, opts in entries.items():
    (k,) = program_kernels(module, "cuda", "g", arch, SPACE_VERSION)
    db[kernel_key(k.sink, "cuda", arch, SPACE_VERSION)] = tuning_db.Entry(k.name, "cuda", arch, SPACE_VERSION, opts, 1.0, "", 2.0, "H100")
  tuning_db.save(tmp_path / "db.json", db)
  own, variants = build_schedules(str(tmp_path / "g.uop"), str(tmp_path / "db.json"), "cuda", "g", (), "portable", None, False, io.StringIO())
  return {k: ",".join(map(str, v)) for k, v in own.items()}, {",".join(g): {k: ",".join(map(str, v)) for k, v in s.items()} for g, s in variants.items()}


def test_sm_90a_entries_without_a_warpgroup_tile_serve_the_own_kernels_too(tmp_path):
  """What `uopc tune` finds on an H100 (for sm_90a, its default there) serves both images where it is the same kernel."""
  assert _db(tmp_path / "plain", {"sm_90a": "TC(2,-1,2,7)"}) == ({KERNEL: "TC(2,-1,2,7)"}, {"sm_90a": {KERNEL: "TC(2,-1,2,7)"}})
  assert _db(tmp_path / "wg", {"sm_90a": "TC(2,-1,3,10)"}) == ({}, {"sm_90a": {KERNEL: "TC(2,-1,3,10)"}})
  assert _db(tmp_path / "both", {"sm_90": "TC(2,-1,2,6)", "sm_90a": "TC(2,-1,2,7)"})[0] == {KERNEL: "TC(2,-1,2,6)"}  # sm_90's first


def test_uopc_tune_tunes_a_gpu_for_its_image_of_a_default_build():
  from uopc.tune.search import default_arch
  assert [default_arch("cuda", a) for a in ("sm_90", "sm_80", "sm_86", "sm_100")] == ["sm_90a", "sm_80", "sm_86", "sm_100"]


# ---- on a Hopper GPU --------------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(2048, 256, 2048), (4096, 512, 4096), (512, 4096, 4096)])
def test_the_default_build_is_right_on_the_gpu(gpu, tmp_path, shape):  # noqa: F811 (gpu is test_cuda_gpu's fixture)
  """The default build on this GPU (its sm_90a image on an H100: tile 9, or 10 for 4096 x 4096; the own one
  elsewhere) against numpy."""
  from uopc.frontend import load_module
  from uopc.pipeline import compile_module
  m, k, n = shape
  f = gemm_relu(m, k, n, "f16")
  _build(tmp_path, f)
  lib = ctypes.CDLL(str(tmp_path / "out" / "libg.so"))
  entry = next(e for e in compile_module(load_module(str(tmp_path / "g.uop")), "cuda", "g") if e.name == f.name)
  x = inputs(m, k, n, "f16", seed=3)
  assert_gemm_relu(gpu_call(gpu, lib, "g", entry, [x["a"], x["b"], x["bias"], np.zeros((m, n), np.float32)])[3], x)
