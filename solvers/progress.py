"""A one-line progress report of a long call, on stderr: elapsed seconds against the seconds
the work model expects (:meth:`solvers.registry.SolverSpec.estimate`, plus the time limit).

The solvers are batched over layers, so there is no per-layer count to show; what a user
waiting on a terminal needs is that it runs, for how long already, and about how long it
should take. :class:`Ticker` prints that from a background thread (torch releases the GIL in
its kernels) every ``every`` seconds once ``after`` seconds have passed (short calls print
nothing): on a terminal one line rewritten in place (``\\r``) and cleared at the end; with
``--progress`` on a pipe or file, a line every few seconds and a last one when the call
ends; on a pipe without it, a line a minute once a call has run 30 s (a long replay is
never silent in a log, a short command prints nothing). Time is read from :func:`solvers.clock.clock` (tests install a fake one), and
:meth:`Ticker.tick` is what the thread calls, so tests drive it without waiting.

This module imports only :mod:`solvers.clock` from the project.
"""
from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import TextIO

from . import clock as _clock

BAR_WIDTH = 20


SPARSE_AFTER_S = 30.0     # a pipe without --progress: silent this long ...
SPARSE_EVERY_S = 60.0     # ... then a line this often


def progress_mode(requested: bool, stream: TextIO | None = None) -> str | None:
    """"tty" (one line rewritten), "lines" (a line per report) or "sparse" (a line a minute
    once past 30 s): a terminal gets the line, a pipe or file the lines with ``--progress``
    and the sparse lines without."""
    stream = sys.stderr if stream is None else stream
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    return "tty" if tty else ("lines" if requested else "sparse")


def as_mode(progress: bool | str | None, stream: TextIO | None = None) -> str | None:
    """A library's ``progress=`` argument as a mode: True -> a line on a terminal, a line per
    report otherwise; False/None -> silent; "tty"/"lines" as given."""
    if progress in (None, False):
        return None
    if progress is True:
        return progress_mode(True, stream)
    if progress in ("tty", "lines", "sparse"):
        return progress
    raise ValueError(f"progress must be a bool, 'tty', 'lines' or 'sparse', got {progress!r}")


def _bar(frac: float) -> str:
    n = int(min(max(frac, 0.0), 1.0) * BAR_WIDTH)
    return "[" + "#" * n + "." * (BAR_WIDTH - n) + "]"


def progress_line(label: str, elapsed: float, expected: float | None, done: int | None = None,
                  total: int | None = None, unit: str = "steps") -> str:
    """``kk_swap: 12 s of about 40 s [####................]`` (time against the estimate),
    or ``simulate: 120/400 steps [######..............] 31 s`` (a count); past the
    estimate it says so."""
    if total:
        return f"{label}: {done or 0}/{total} {unit} {_bar((done or 0) / total)} {elapsed:.0f} s"
    if expected is None or not expected > 0:
        return f"{label}: {elapsed:.0f} s"
    over = " (longer than estimated)" if elapsed > expected else ""
    return f"{label}: {elapsed:.0f} s of about {max(expected, 1.0):.0f} s {_bar(elapsed / expected)}{over}"


class Ticker:
    """``with Ticker("kk_swap", 40.0, mode): ...``: progress on ``stream`` while the block runs;
    with ``total``, a count the block advances (:meth:`update`) instead of the estimate."""

    def __init__(self, label: str, expected: float | None, mode: str | None, *, stream: TextIO | None = None,
                 every: float = 0.5, after: float = 1.0, clock: Callable[[], float] | None = None,
                 total: int | None = None, unit: str = "steps"):
        if mode not in (None, "tty", "lines", "sparse"):
            raise ValueError(f"mode must be 'tty', 'lines', 'sparse' or None, got {mode!r}")
        if mode == "sparse":
            after, every = max(after, SPARSE_AFTER_S), max(every, 1.0)
        self.label, self.expected, self.mode = label, expected, mode
        self.total, self.unit, self.done = total, unit, 0
        self.stream = sys.stderr if stream is None else stream
        self.every, self.after = every, after
        self.clock = clock if clock is not None else _clock.clock    # read at every call: a fake is seen
        self.start = self.clock()
        self.shown = 0                 # width of the tty line on screen (to clear at the end)
        self.last = -float("inf")      # when the last line was written ("lines" mode)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def tick(self, final: bool = False) -> None:
        """Write the current line if it is time to (``final``: the last one, "lines" mode)."""
        if self.mode is None:
            return
        now = self.clock()
        elapsed = now - self.start
        if elapsed < self.after:
            return
        text = progress_line(self.label, elapsed, self.expected, self.done, self.total, self.unit)
        if self.mode == "tty":
            self.stream.write("\r" + text.ljust(self.shown))    # padded over a longer previous line
            self.shown = max(self.shown, len(text))
        else:                                                   # a pipe or a log: a line every 5 s at most
            rate = SPARSE_EVERY_S if self.mode == "sparse" else max(self.every, 5.0)
            if not (final or now - self.last >= rate):
                return
            self.stream.write(text + "\n")
            self.last = now
        self.stream.flush()

    def update(self, n: int = 1) -> None:
        """Count ``n`` more of ``total`` done (the thread shows it at its next report)."""
        self.done += n

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.tick()

    def __enter__(self) -> Ticker:
        self.start = self.clock()
        if self.mode is not None:
            self._thread = threading.Thread(target=self._run, name="eplb-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
            # where a log ends: the last count and the time it took (sparse: only after earlier lines)
            if self.mode == "lines" or (self.mode == "sparse" and self.last > -float("inf")):
                self.tick(final=True)
        if self.shown:                   # the terminal line is cleared: the result follows
            self.stream.write("\r" + " " * self.shown + "\r")
            self.stream.flush()
            self.shown = 0
