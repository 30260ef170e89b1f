"""The progress bar of a long build (tqdm), on stderr, in the text format on a terminal only.

A build counts its work in steps as it learns of them (`expect`): an entry lowered, a kernel of a
tensor program, an arch's code object or cubin, a run of the C compiler; each done step is `step`.
The bar appears only once the work has taken DELAY_S seconds and is erased when it ends, so short
builds, piped output and the machine formats show nothing. Without an open bar, `expect` and
`step` do nothing.
"""
from __future__ import annotations

DELAY_S = 0.5
MININTERVAL_S = 0.1  # tqdm's: the least time between two redraws


class Progress:
  """A context manager: the bar of `what` while the block runs, if `shown`."""

  def __init__(self, reporter, what: str, shown: bool):
    self.reporter, self.what, self.shown, self.bar = reporter, what, shown, None

  def __enter__(self) -> Progress:
    if self.shown and self.reporter.progress_bar is None:
      from tqdm import tqdm
      self.bar = tqdm(total=0, desc=self.what, unit="step", delay=DELAY_S, leave=False, file=self.reporter.stream, dynamic_ncols=True,
                      miniters=1, mininterval=MININTERVAL_S)  # redrawn after every slow step, however fast the ones before
      self.reporter.progress_bar = self
    return self

  def __exit__(self, *exc) -> None:
    if self.bar is not None:
      self.bar.close()
      self.reporter.progress_bar, self.bar = None, None

  def expect(self, n: int) -> None:
    if self.bar is not None: self.bar.total += n  # drawn at the next step (tqdm's refresh would draw before DELAY_S)

  def step(self, label: str) -> None:
    if self.bar is not None:
      self.bar.set_postfix_str(label, refresh=False)
      self.bar.update(1)

  def write(self, text: str) -> None:
    """Write `text` above the bar (erased and drawn again if it is showing)."""
    bar, stream = self.bar, self.reporter.stream
    drawn = bar is not None and bar.last_print_t >= bar.start_t + bar.delay
    if drawn: bar.clear()
    stream.write(text)
    stream.flush()
    if drawn: bar.refresh()


def _open() -> Progress | None:
  from uopc.reporter import current
  return current().progress_bar


def expect(n: int) -> None:
  """`n` more steps of work lie ahead."""
  if (p := _open()) is not None: p.expect(n)


def step(label: str) -> None:
  """One step is done; `label` says which."""
  if (p := _open()) is not None: p.step(label)
