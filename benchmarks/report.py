"""What the measurement scripts print around their numbers: the machine's load, a markdown
table, and the verdict on the targets (their exit status)."""
from __future__ import annotations

import os


def load() -> str:
    """The one-minute load average (timings beside it are only as quiet as it)."""
    return f"{os.getloadavg()[0]:.2f}" if hasattr(os, "getloadavg") else "n/a"


def table(title: str, header: list[str], rows: list[list]) -> None:
    """A titled markdown table, cells as ``str`` gives them."""
    print(f"\n## {title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        print("| " + " | ".join(str(c) for c in r) + " |")


def verdict(failures: list[str], *, summary: bool = True) -> int:
    """Print each missed target as ``FAIL ...`` (and, with ``summary``, a closing line); the
    script's exit status: 1 when a target was missed."""
    for f in failures:
        print("FAIL", f)
    if summary:
        print("all targets met" if not failures else f"{len(failures)} target(s) missed")
    return 1 if failures else 0
