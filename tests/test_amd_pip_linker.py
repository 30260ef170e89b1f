"""AMD builds from pip alone: where no ld.lld >= 16 is installed, the one in PyPI's ziglang wheel
(`pip install 'uopc[amd]'`, run as `zig ld.lld`) links the code objects, into the same kernels and
metadata as a system ld.lld; without either, the error says both ways to get one (and $LD_LLD)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from uopc.diagnostics import CompileError
from uopc.driver import BuildOptions, build
from uopc.targets.amd import codeobj

SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "gemm.uop"
SYSTEM_LLD = codeobj.find_tool("ld.lld", codeobj.LLD_MIN_VERSION)
needs_ziglang = pytest.mark.skipif(importlib.util.find_spec("ziglang") is None, reason="no ziglang wheel (pip install -e '.[amd]')")


@pytest.fixture
def no_installed_lld(monkeypatch):
  monkeypatch.setattr(codeobj, "find_tool", lambda *args, **kwargs: None)
  monkeypatch.delenv("LD_LLD", raising=False)


def hsaco_contents(path: Path) -> tuple:
  """What the HIP runtime reads: the machine, the symbols and the amdhsa metadata note."""
  with open(path, "rb") as f:
    elf = ELFFile(f)
    symbols = sorted((s.name, s["st_info"]["type"]) for s in elf.get_section_by_name(".symtab").iter_symbols() if s.name)
    notes = [bytes(n["n_descdata"]) for sec in elf.iter_sections() if sec["sh_type"] == "SHT_NOTE" for n in sec.iter_notes()]
    return elf["e_machine"], elf["e_type"], symbols, notes


@needs_ziglang
def test_the_ziglang_wheels_lld_links_when_none_is_installed(tmp_path, no_installed_lld):
  linker = codeobj.find_linker()
  assert linker is not None and Path(linker[0]).name.startswith("zig") and linker[1:] == ("ld.lld",)
  written = build(SAMPLE, BuildOptions(target="amd", out_dir=tmp_path / "zig", archs=("gfx90a", "gfx1100")))
  assert {p.name for p in written} >= {"gemm.gfx90a.hsaco", "gemm.gfx1100.hsaco", "libgemm.so", "gemm_hip.c"}
  machine, kind, symbols, notes = hsaco_contents(tmp_path / "zig" / "gemm.gfx90a.hsaco")
  assert machine in ("EM_AMDGPU", 224) and kind == "ET_DYN" and any(n.endswith(".kd") for n, _ in symbols) and notes
  if SYSTEM_LLD is None: return
  build(SAMPLE, BuildOptions(target="amd", out_dir=tmp_path / "lld", archs=("gfx90a",), env={"PATH": "", "LD_LLD": SYSTEM_LLD.path}))
  assert hsaco_contents(tmp_path / "lld" / "gemm.gfx90a.hsaco") == (machine, kind, symbols, notes)


def test_without_any_lld_the_error_says_both_ways_to_get_one(tmp_path, no_installed_lld, monkeypatch):
  monkeypatch.setattr(codeobj, "zig_linker", lambda: None)
  with pytest.raises(CompileError) as info:
    build(SAMPLE, BuildOptions(target="amd", out_dir=tmp_path))
  said = info.value.diagnostics[0].message
  assert "ld.lld >= 16 not found" in said and "lld-19" in said and "pip install 'uopc[amd]'" in said and "LD_LLD" in said
