"""Progress of `uopc tune`: a bar on a TTY, plain lines in logs.

On a TTY the bar counts candidates measured, with the current kernel and the best speedup so far;
it is tqdm's when tqdm is installed, else a one-line bar redrawn with a carriage return. Whatever the
stream, each finished kernel gets one line (`line`), written above the bar, so a CI log shows the
same results as a terminal.
"""
from __future__ import annotations

import sys
from typing import TextIO


class Progress:
  def __init__(self, stream: TextIO | None = None, bar: bool | None = None):
    self.stream = stream or sys.stderr
    self.bar = _isatty(self.stream) if bar is None else bar
    self.count, self.text = 0, ""
    self.tqdm = _tqdm(self.stream) if self.bar else None

  def step(self, text: str) -> None:
    """One more candidate measured; `text` describes where the search is."""
    self.count += 1
    self.text = text
    if self.tqdm is not None:
      self.tqdm.set_description_str(text, refresh=False)
      self.tqdm.update(1)
    elif self.bar: self._draw()

  def line(self, text: str) -> None:
    if self.tqdm is not None: self.tqdm.write(text, file=self.stream)
    else:
      if self.bar: self.stream.write("\r\033[K")
      self.stream.write(text + "\n")
      if self.bar: self._draw()
    self.stream.flush()

  def _draw(self) -> None:
    self.stream.write(f"\r\033[K{self.count} candidates | {self.text}"[:200])
    self.stream.flush()

  def close(self) -> None:
    if self.tqdm is not None: self.tqdm.close()
    elif self.bar:
      self.stream.write("\r\033[K")
      self.stream.flush()


def _isatty(stream: TextIO) -> bool:
  try:
    return stream.isatty()
  except (AttributeError, ValueError):
    return False


def _tqdm(stream: TextIO):
  try:
    from tqdm import tqdm
  except ImportError:
    return None
  return tqdm(file=stream, unit="cand", dynamic_ncols=True, leave=False)
