"""The clock every deadline decision of the solvers reads (heuristics, certify, migration,
exact): "is time spent?", "how much is left for this layer?", "keep the warm start for the
remaining layers". Backends' own time limits (CP-SAT's, HiGHS's, CBC's) run on their own
real clocks; what the project passes them is computed from this one.

:func:`clock` returns seconds on an arbitrary origin, like :func:`time.perf_counter` (which
it reads by default). Tests install a fake so that the deadline logic does not depend on the
machine's speed::

    from solvers.clock import FakeClock, fake_clock

    with fake_clock(FakeClock(step=0.1)) as c:   # every reading advances 0.1 s
        ...
        c.advance(5.0)                           # or move time by hand

or, with pytest, ``monkeypatch.setattr(solvers.clock, "CLOCK", fn)``. Callers must call
:func:`clock` (``from solvers.clock import clock``), never keep ``CLOCK`` themselves, so that
an installed fake is seen everywhere.

This module imports nothing from the project.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Callable, Iterator

# The time source: a function of no arguments returning seconds (a time.perf_counter value).
CLOCK: Callable[[], float] = time.perf_counter


class TimeUp(Exception):
    """Raised by a computation that was given a deadline and could not finish by it (the
    caller, which gave the deadline, catches it and goes on without that result)."""


def check_deadline(deadline: float | None) -> None:
    """Raise :class:`TimeUp` once :func:`clock` is past ``deadline`` (None: never)."""
    if deadline is not None and clock() > deadline:
        raise TimeUp


def clock() -> float:
    """Now, in seconds (:data:`CLOCK`; ``time.perf_counter`` unless a test installed a fake)."""
    return CLOCK()


@contextmanager
def fake_clock(fn: Callable[[], float]) -> Iterator[Callable[[], float]]:
    """Read time from ``fn`` inside the ``with`` block (restored afterwards, also on error)."""
    global CLOCK
    before = CLOCK
    CLOCK = fn
    try:
        yield fn
    finally:
        CLOCK = before


class FakeClock:
    """A deterministic time source: starts at ``start``, advances ``step`` seconds at every
    reading (0: only when :meth:`advance` is called)."""

    def __init__(self, step: float = 0.0, start: float = 0.0):
        self.now, self.step = float(start), float(step)

    def __call__(self) -> float:
        self.now += self.step
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += float(seconds)
