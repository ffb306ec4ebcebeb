"""What a user's path names, torch-free: the command line asks before it loads torch
(:mod:`solvers.workloads.specs`), the readers ask before they open (:mod:`solvers.filecheck`)."""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path


def input_kind(text: str | Path) -> str:
    """What a user's path names, never raising: ``file``, ``dir``, ``missing``, ``other``
    (a FIFO, device or socket), ``too_long`` (a name the system refuses), ``bad`` (another
    error: a NUL byte, no permission on a parent)."""
    try:
        mode = os.stat(text).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return "missing"
    except OSError as exc:
        return "too_long" if exc.errno == errno.ENAMETOOLONG else "bad"
    except (ValueError, TypeError):
        return "bad"
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    return "other"


__all__ = ["input_kind"]
