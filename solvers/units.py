"""Numbers as people read them in tables: byte counts in units."""
from __future__ import annotations

from typing import Any


def format_bytes(v: Any) -> str:
    """``19.2 GB``: a byte count in decimal units (kB, MB, GB, TB), three significant
    figures; "-" for none."""
    if v is None:
        return "-"
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(v) >= size:
            return f"{v / size:.3g} {unit}"
    return f"{v:.0f} B"


__all__ = ["format_bytes"]
