"""`-t amd` without a GPU: for every sample and arch, the AMD ISA text assembles back with LLVM's
assembler to the very machine code llvmlite emitted, and the .hsaco is a linked AMDGPU ELF with one
kernel descriptor per kernel and the amdhsa metadata naming each kernel's arguments (read by
pyelftools and a small MessagePack reader written here); `uopc build -t amd` writes it all.

The assembler is the newest `llvm-mc` of at least LLVM_MC_MIN_VERSION found (uopc.tools: on PATH, plain
or -N suffixed, or under /usr/lib/llvm-N/bin; CI installs Debian's `llvm-19`). LLVM 14 and 16 refuse
the code object v5 directives; without a new enough one the assembler tests skip and say why. It may
be older than llvmlite's LLVM (22): directives that LLVM added after the assembler's version
(`NEWER_DIRECTIVES`) are dropped before assembling, which leaves the machine code untouched; they
only set kernel-descriptor hints.
"""
from __future__ import annotations

import re
import struct
import subprocess
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from install_tools import REQUIREMENTS
from uopc.frontend import load_module
from uopc.pipeline import compile_module
from uopc.targets.amd.codeobj import build_code_objects, find_linker, missing_linker, tag_metadata_names
from uopc.targets.llvm.render import AMD_ARCHS
from uopc.tools import describe_missing, find_tool

ROOT = Path(__file__).resolve().parents[1]
EM_AMDGPU = 224
NT_AMDGPU_METADATA = 32
NEWER_DIRECTIVES = {20: (".amdhsa_inst_pref_size",)}  # the LLVM version that introduced each


LLVM_MC_MIN_VERSION, LLVM_MC_PACKAGE, _ = REQUIREMENTS["llvm-mc"]
LLVM_MC = find_tool("llvm-mc", LLVM_MC_MIN_VERSION)
needs_llvm_mc = pytest.mark.skipif(LLVM_MC is None, reason=describe_missing("llvm-mc", LLVM_MC_MIN_VERSION, LLVM_MC_PACKAGE))
LINKER = find_linker()
needs_linker = pytest.mark.skipif(LINKER is None, reason=missing_linker())


def sample_kernels() -> list[tuple[str, list]]:
  """(sample, rendered AmdKernels) for every sample."""
  out = []
  for path in sorted((ROOT / "samples").glob("*.uop")):
    module = load_module(str(path))
    try:
      entries = compile_module(module, "amd", path.stem)
    except Exception as e:  # a sample the shared stages cannot lower yet is the -t c tests' business
      print(f"skipping {path.name}: {e}")
      continue
    out.append((path.stem, [k for e in entries for k in e.kernels]))
  return out


SAMPLES = sample_kernels()


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[tuple[str, str], dict[str, Path]]:
  """Every sample's code objects for every arch, built once."""
  out = {}
  for name, kernels in SAMPLES:
    d = tmp_path_factory.mktemp(name)
    paths = build_code_objects(d, name, kernels, AMD_ARCHS)
    for arch in AMD_ARCHS: out[(name, arch)] = {k.split(".")[0]: p for k, p in paths.items() if k.endswith(arch)}
  return out


def test_samples_are_covered():
  assert {"seed002_add2", "seed002_cast", "seed001_loop", "gemm", "gather", "softmax", "attention"} <= {n for n, _ in SAMPLES}


def text_section(obj: bytes) -> bytes:
  import io
  return ELFFile(io.BytesIO(obj)).get_section_by_name(".text").data()


@needs_llvm_mc
@pytest.mark.parametrize("arch", AMD_ARCHS)
@pytest.mark.parametrize("sample", [n for n, _ in SAMPLES])
def test_isa_assembles_back_to_the_same_machine_code(built, sample, arch, tmp_path):
  mc, version = LLVM_MC.path, LLVM_MC.version
  paths = built[(sample, arch)]
  dropped = tuple(d for since, names in NEWER_DIRECTIVES.items() if version < since for d in names)
  asm = "\n".join(line for line in paths["asm"].read_text().splitlines() if not line.strip().startswith(dropped))
  src, obj = tmp_path / "k.s", tmp_path / "k.o"
  src.write_text(asm + "\n")
  done = subprocess.run([mc, "-triple=amdgcn-amd-amdhsa", f"-mcpu={arch}", "-filetype=obj", "-o", str(obj), str(src)],
                        capture_output=True, text=True)
  if "invalid CPU" in done.stderr or "not a recognized processor" in done.stderr:
    pytest.skip(f"llvm-mc {version} does not know {arch}")
  assert done.returncode == 0, done.stderr
  assert text_section(obj.read_bytes()) == text_section(paths["object"].read_bytes())


# ---- the code object ---------------------------------------------------------------------------------------
def msgpack(data: bytes, pos: int = 0):
  """Decode one MessagePack value at `pos`; returns (value, next position). Enough for amdhsa metadata."""
  b = data[pos]
  pos += 1
  def take(n): return data[pos:pos + n], pos + n
  def seq(n, is_map):
    nonlocal pos
    items = []
    for _ in range(n * (2 if is_map else 1)):
      v, pos = msgpack(data, pos)
      items.append(v)
    return (dict(zip(items[::2], items[1::2])) if is_map else items), pos
  if b <= 0x7F: return b, pos
  if b >= 0xE0: return b - 0x100, pos
  if 0x80 <= b <= 0x8F: return seq(b & 0x0F, True)
  if 0x90 <= b <= 0x9F: return seq(b & 0x0F, False)
  if 0xA0 <= b <= 0xBF:
    raw, pos = take(b & 0x1F)
    return raw.decode(), pos
  if b in (0xC0, 0xC2, 0xC3): return {0xC0: None, 0xC2: False, 0xC3: True}[b], pos
  sizes = {0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q", 0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q", 0xCA: ">f", 0xCB: ">d"}
  if b in sizes:
    raw, pos = take(struct.calcsize(sizes[b]))
    return struct.unpack(sizes[b], raw)[0], pos
  lengths = {0xD9: ">B", 0xDA: ">H", 0xDB: ">I", 0xC4: ">B", 0xC5: ">H", 0xC6: ">I", 0xDC: ">H", 0xDD: ">I", 0xDE: ">H", 0xDF: ">I"}
  raw, pos = take(struct.calcsize(lengths[b]))
  n = struct.unpack(lengths[b], raw)[0]
  if b in (0xDC, 0xDD, 0xDE, 0xDF): return seq(n, b in (0xDE, 0xDF))
  raw, pos = take(n)
  return (raw.decode() if b in (0xD9, 0xDA, 0xDB) else raw), pos


def test_msgpack_reader_on_hand_encoded_values():
  assert msgpack(bytes([0x82, 0xA1, 0x61, 0x01, 0xA1, 0x62, 0x92, 0xC3, 0xD0, 0xFE]))[0] == {"a": 1, "b": [True, -2]}
  assert msgpack(bytes([0xDA, 0x00, 0x02]) + b"hi")[0] == "hi"


def amdhsa_metadata(elf: ELFFile) -> dict:
  for section in elf.iter_sections():
    if section["sh_type"] != "SHT_NOTE": continue
    for note in section.iter_notes():
      if note["n_name"] == "AMDGPU" and note["n_type"] == NT_AMDGPU_METADATA: return msgpack(note["n_descdata"])[0]
  raise AssertionError("no amdhsa metadata note")


@needs_linker
@pytest.mark.parametrize("arch", AMD_ARCHS)
@pytest.mark.parametrize("sample", [n for n, _ in SAMPLES])
def test_hsaco_has_descriptors_and_argument_metadata(built, sample, arch):
  kernels = dict(SAMPLES)[sample]
  with open(built[(sample, arch)]["hsaco"], "rb") as f:
    elf = ELFFile(f)
    assert elf["e_machine"] in ("EM_AMDGPU", EM_AMDGPU) and elf["e_type"] == "ET_DYN"
    symbols = {s.name: s["st_info"]["type"] for s in elf.get_section_by_name(".symtab").iter_symbols()}
    meta = amdhsa_metadata(elf)
  assert meta["amdhsa.target"].endswith(arch)
  assert sorted(n for n in symbols if n.endswith(".kd")) == sorted(f"{k.name}.kd" for k in kernels)
  by_name = {k[".name"]: k for k in meta["amdhsa.kernels"]}
  for k in kernels:
    assert symbols[k.name] == "STT_FUNC" and symbols[f"{k.name}.kd"] == "STT_OBJECT"
    entry = by_name[k.name]
    assert entry[".symbol"] == f"{k.name}.kd"
    explicit = [a for a in entry[".args"] if not a[".value_kind"].startswith("hidden_")]
    assert [a[".name"] for a in explicit] == [p.name for p in k.params]
    assert [a[".value_kind"] for a in explicit] == ["global_buffer" if p.kind == "buffer" else "by_value" for p in k.params]
    assert all(a[".size"] == 8 for a in explicit)
    assert entry[".max_flat_workgroup_size"] == k.geometry.max_flat_size


@needs_linker
def test_uopc_build_amd_writes_every_artifact_reproducibly(tmp_path):
  sample = ROOT / "samples" / "seed002_add2.uop"
  outs = []
  for run in ("a", "b"):
    done = subprocess.run([str(ROOT / ".venv/bin/uopc"), "build", str(sample), "-t", "amd", "-o", str(tmp_path / run)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    outs.append(sorted(p.name for p in (tmp_path / run).iterdir()))
  expected = sorted([f"seed002_add2.{a}.{e}" for a in AMD_ARCHS for e in ("s", "o", "hsaco")] +
                    ["seed002_add2.h", "seed002_add2_hip.c", "libseed002_add2.so"])
  assert outs[0] == outs[1] == expected
  for name in expected: assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_every_per_op_case_renders_for_amdgpu():
  """The C target's per-op x per-dtype kernels, through Instruction Selection with the AMD capabilities:
  all render and LLVM verifies them; a spread of them (every op, 16-bit floats, casts, THREEFRY) is
  compiled to gfx90a machine code (all of them take half a minute: the GPU tests run them all)."""
  from test_c_ops import CASES
  from uopc.stages.isel import isel
  from uopc.targets import get_target
  from uopc.stages.linearize import linearize
  from uopc.targets.amd.codeobj import code_object
  from uopc.targets.amd.render import render_kernel
  from uopc.targets.llvm.compile import parse_and_verify
  from uopc.targets.llvm.render import render_module
  kernels = {c.name: render_kernel(linearize(isel(c.sink, get_target("amd").ops)), c.name) for c in CASES.values()}
  parse_and_verify(render_module(list(kernels.values()), "amdgcn", "gfx90a"))
  spread = [k for name, k in kernels.items() if name.endswith(("_float32", "_bfloat16", "_float16", "_int64", "_to_bfloat16", "_uint64"))]
  assert len(spread) > 80
  asm, obj = code_object(spread, "gfx90a", "spread")
  assert all(f"{k.name}:" in asm for k in spread) and obj.startswith(b"\x7fELF")


def test_without_a_linker_the_build_says_so_and_still_writes_isa_and_objects(tmp_path, monkeypatch, capsys):
  from uopc.diagnostics import CompileError
  from uopc.driver import BuildOptions, build
  from uopc.targets.amd import codeobj
  monkeypatch.setattr(codeobj, "find_linker", lambda env=None: None)
  sample = ROOT / "samples" / "seed002_add2.uop"
  with pytest.raises(CompileError, match=r"ld.lld >= 16 not found.*, or set LD_LLD: cannot link hsaco.gfx1100") as info:
    build(sample, BuildOptions(target="amd", out_dir=tmp_path / "all"))
  assert "--emit asm.gfx1100,object.gfx1100" in info.value.diagnostics[0].notes[0]
  assert not (tmp_path / "all").exists() or not any((tmp_path / "all").iterdir())
  kinds = ("asm.gfx90a", "object.gfx90a", "header")
  build(sample, BuildOptions(target="amd", out_dir=tmp_path / "some", emit=kinds, archs=("gfx90a",)))
  assert sorted(p.name for p in (tmp_path / "some").iterdir()) == ["seed002_add2.gfx90a.o", "seed002_add2.gfx90a.s", "seed002_add2.h"]
  assert "ld.lld >= 16 not found" in capsys.readouterr().err


@needs_linker
def test_arch_selects_the_per_arch_artifacts(tmp_path):
  from uopc.driver import BuildOptions, build
  build(ROOT / "samples" / "seed002_add2.uop", BuildOptions(target="amd", out_dir=tmp_path, archs=("gfx90a",)))
  assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
    ["seed002_add2.gfx90a.s", "seed002_add2.gfx90a.o", "seed002_add2.gfx90a.hsaco", "seed002_add2_hip.c", "libseed002_add2.so",
     "seed002_add2.h"])


def test_metadata_names_that_yaml_reads_as_other_types_get_a_str_tag():
  asm = "\t.text\n\t.amdgpu_metadata\n---\namdhsa.kernels:\n  - .args:\n" + "".join(
    f"      - .name:           {n}\n        .offset:         0\n" for n in ("y", "N", "Off", "null", "1", ".5", "x", "out", "nanny")) + \
    "    .name:           k\n...\n\t.end_amdgpu_metadata\n\t.name: y\n"
  tagged = tag_metadata_names(asm)
  names = re.findall(r"\.name:\s+(.*)", tagged)
  assert names == ["!str y", "!str N", "!str Off", "!str null", "!str 1", "!str .5", "x", "out", "nanny", "k", "y"]  # the last: outside the metadata


def test_the_linker_is_the_newest_lld_of_a_usable_version(tmp_path, monkeypatch):
  """By version, not by name: a plain `ld.lld` of LLVM 14 first on PATH (as Debian's default release
  may be) is passed over for a newer one; $LD_LLD still has the last word."""
  from uopc import tools
  for name, version in (("ld.lld", "14.0.6"), ("ld.lld-98", "98.1.0")):
    script = tmp_path / name
    script.write_text(f"#!/bin/sh\necho 'Debian LLD {version} (compatible with GNU linkers)'\n")
    script.chmod(0o755)
  env = {"PATH": str(tmp_path)}
  found = tools.found_tools("ld.lld", env)
  assert found[0] == tools.Tool(str(tmp_path / "ld.lld-98"), 98) and tools.Tool(str(tmp_path / "ld.lld"), 14) in found
  assert find_linker(env) == (str(tmp_path / "ld.lld-98"),)
  (tmp_path / "ld.lld-98").unlink()
  assert find_linker(env) != (str(tmp_path / "ld.lld"),)         # 14 is too old: another one, or none
  assert "14 at " + str(tmp_path / "ld.lld") in missing_linker(env)
  assert find_linker(dict(env, LD_LLD="/opt/my/ld.lld")) == ("/opt/my/ld.lld",)
