"""The `uopc` command line. Every user error is a located diagnostic and exit code 1; anything
unexpected is reported as an internal compiler error with exit code 2, never a bare traceback."""
from __future__ import annotations

import functools
import sys
import traceback
from pathlib import Path

import click

from uopc import __version__
from uopc.diagnostics import CompileError


def compiler_command(fn):
  """Turn CompileError into printed diagnostics (exit 1) and any other exception into an ICE (exit 2)."""
  @functools.wraps(fn)
  def wrapper(*args, **kwargs):
    try:
      return fn(*args, **kwargs)
    except CompileError as e:
      click.echo(e.format(), err=True)
      n = len(e.diagnostics)
      if n > 1: click.echo(f"{n} errors generated.", err=True)
      sys.exit(1)
    except (click.exceptions.Exit, click.ClickException, SystemExit, KeyboardInterrupt):
      raise
    except Exception as e:  # noqa: BLE001 - the last line of defence for the user
      click.echo(f"uopc: internal compiler error: {type(e).__name__}: {e}", err=True)
      if "--debug" in sys.argv or _debug_env(): traceback.print_exc()
      else: click.echo("(set UOPC_DEBUG=1 for the Python traceback, and please report it)", err=True)
      sys.exit(2)
  return wrapper


def _debug_env() -> bool:
  import os
  return os.environ.get("UOPC_DEBUG", "") not in ("", "0")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", "-V", prog_name="uopc")
def cli():
  """uopc: compile UOp IR programs (.uop files) ahead of time into C, PTX, AMD ISA or Metal, with a
  C header and a shared library that load and launch the kernels.

  \b
  Quick start:
    uopc check model.uop          parse and verify
    uopc fmt model.uop            print the canonical form
    uopc show model.uop           the IR with derived properties
    uopc build model.uop -t c     build model.c, libmodel.so, model.h

  See `uopc COMMAND --help` for each command.
  """


@cli.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@compiler_command
def check(files):
  """Parse and verify FILES; report every error found as file:line:col with the source line."""
  from uopc.frontend import load_module
  from uopc.verify import verify_module
  diags, sources = [], {}
  for f in files:
    try:
      m = load_module(f)
    except CompileError as e:
      diags += e.diagnostics; sources.update(e.sources); continue  # noqa: E702
    sources[m.path] = m.text
    diags += verify_module(m)
  if diags: raise CompileError(diags, sources)


@cli.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--check", "check_only", is_flag=True, help="Write nothing; exit 1 if FILE is not in canonical form (for CI).")
@click.option("-i", "--in-place", is_flag=True, help="Rewrite FILE in canonical form instead of printing it.")
@compiler_command
def fmt(file, check_only, in_place):
  """Print FILE in canonical form (the printer's output, which parses back to the same IR)."""
  from uopc.frontend import load_module, print_module
  m = load_module(file)
  text = print_module(m)
  if check_only:
    if text != m.text:
      click.echo(f"{file}: not in canonical form (run `uopc fmt -i {file}`)", err=True)
      sys.exit(1)
    return
  if in_place: _write_atomic(Path(file), text)
  else: click.echo(text, nl=False)


@cli.command()
@click.argument("file", type=click.Path(dir_okay=False))
@compiler_command
def show(file):
  """Show the IR of FILE one UOp a line, with its derived dtype, shape, device, addrspace and min_max."""
  from uopc.frontend import load_module, show_module
  click.echo(show_module(load_module(file)), nl=False)


def _write_atomic(path: Path, text: str) -> None:
  tmp = path.with_name(f".{path.name}.tmp")
  tmp.write_text(text)
  tmp.replace(path)


def main():
  cli(prog_name="uopc")
