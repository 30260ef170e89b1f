"""A plain (non-editable) `pip install .` must give a working uopc: the grammar ships in the wheel
and every package under uopc/ is listed in pyproject.toml."""
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_is_listed():
  listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
  found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "uopc").rglob("__init__.py")}
  assert found <= listed, f"add to pyproject.toml [tool.setuptools] packages: {sorted(found - listed)}"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
  # build from a copy: setuptools writes build/ into the source tree, which parallel runs would share
  src, out = tmp_path_factory.mktemp("src") / "uopc", tmp_path_factory.mktemp("wheel")
  shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", ".venv", ".whl", "build", "*.egg-info", "__pycache__", ".*cache*"))
  subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(src)],
                 check=True, capture_output=True)
  return next(out.glob("uopc-*.whl"))


def test_wheel_ships_the_grammar(wheel):
  names = zipfile.ZipFile(wheel).namelist()
  assert "uopc/grammar/uop.lark" in names


def test_wheel_ships_the_cmake_package(wheel):
  names = zipfile.ZipFile(wheel).namelist()
  assert {"uopc/cmake/uopcConfig.cmake", "uopc/cmake/uopcConfigVersion.cmake"} <= set(names)


def test_installed_wheel_checks_a_sample(wheel, tmp_path):
  target = tmp_path / "site"
  subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
                 check=True, capture_output=True)
  env = {**os.environ, "PYTHONPATH": str(target)}
  where = subprocess.run([sys.executable, "-c", "import uopc; print(uopc.__file__)"], env=env, cwd=tmp_path,
                         capture_output=True, text=True, check=True).stdout
  assert where.startswith(str(target)), "the test must exercise the installed copy, not the source tree"
  sample = ROOT / "samples" / "seed002_add1.uop"
  r = subprocess.run([sys.executable, "-m", "uopc", "check", str(sample)], env=env, cwd=tmp_path, capture_output=True, text=True)
  assert r.returncode == 0, r.stderr
