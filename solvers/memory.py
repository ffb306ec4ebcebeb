"""The working-memory budget every computation sizes itself against before it allocates.

A computation whose memory follows its input's sizes (the traffic metric over layers, tokens
and a cluster's GPUs; a routing trace being generated; a solver's token sample) estimates what
it will build and either works in chunks that fit :func:`work_bytes` or refuses with one
line naming the parameter and the budget (:func:`check_bytes`). One budget for all of them,
so a user learns one number: :data:`WORK_BYTES` (1 GiB), or half the machine's physical memory
when that is less.
"""
from __future__ import annotations

import os

from .errors import EPLBError, OptionError

# One computation's working memory: about what a laptop spares beside a browser, and far
# below the few GB a hostile size would otherwise reach.
WORK_BYTES = 1 << 30


def work_bytes() -> int:
    """The budget in bytes: :data:`WORK_BYTES`, or half the physical memory when that is less."""
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):      # not a POSIX sysconf: the fixed budget
        return WORK_BYTES
    return min(WORK_BYTES, max(physical // 2, 64 << 20))


def size_text(nbytes: float) -> str:
    """``nbytes`` as a short human figure: 1.5 GiB, 640 MiB, 12 KiB."""
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):.3g} {unit}"
    return f"{int(nbytes)} B"


def check_bytes(param: str, nbytes: float, what: str, hint: str = "",
                error: type[EPLBError] = OptionError) -> None:
    """Refuse (``error(param, ...)``, one line) when ``what`` needs more than the budget.

    ``nbytes`` may be a Python int of any size or a float (estimates of hostile sizes overflow
    nothing here); ``hint`` says which input to make smaller."""
    budget = work_bytes()
    if nbytes > budget:
        raise error(param, f"{what} needs about {size_text(nbytes)}, over the {size_text(budget)} "
                           f"working-memory budget{'; ' + hint if hint else ''}")


def rows_per_chunk(row_bytes: float, rows: int, param: str, what: str, hint: str = "",
                   fixed_bytes: float = 0, error: type[EPLBError] = OptionError) -> int:
    """How many of ``rows`` rows of ``row_bytes`` each fit the budget beside ``fixed_bytes``
    (at least one, at most ``rows``); refuses when not even one row fits."""
    check_bytes(param, fixed_bytes + row_bytes, what, hint, error)
    free = work_bytes() - fixed_bytes
    return int(max(1, min(rows, free // max(row_bytes, 1))))


__all__ = ["WORK_BYTES", "work_bytes", "size_text", "check_bytes", "rows_per_chunk"]
