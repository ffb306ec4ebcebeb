"""Writes that cannot hurt: every file the project writes goes through :func:`write_atomic`.

- Only a regular file or a new name is written: ``--out /dev/null``, a FIFO, a socket or a
  directory is refused (renaming over a device node would replace it with a regular file).
- The data goes to a temporary file in the same directory (short name: ``.eplb-XXXXXXXX``
  plus the suffix, so a valid 255-byte output name never makes the temporary name too long),
  is flushed to disk (a full disk fails here, not later when the file is read), then renamed
  over the target (``os.replace``): a reader sees the old file or the new one, never half.
- On any failure (a full disk, a writer's exception, Ctrl-C) the temporary file is removed
  and the target is untouched; an ``OSError`` becomes one :class:`LoadFileError` line naming
  the file.
"""
from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import Callable

from .errors import LoadFileError

# Suffixes longer than this are not copied onto the temporary name (writers that look at the
# suffix use short ones: .json, .npz, .parquet, .html, .png).
_MAX_SUFFIX = 16


def _umask() -> int:
    """The process umask, read without setting it (os.umask would race with other threads)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def check_target(path: str | Path, param: str = "out") -> Path:
    """``path`` as a Path when it names a regular file (or a symlink to one) or nothing yet;
    a directory, device, FIFO or socket is refused."""
    path = Path(path)
    if not str(path) or path.name == "":
        raise LoadFileError(param, "an output file name is needed, got an empty path")
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return path
    except OSError as exc:
        raise LoadFileError(param, f"{path}: cannot write ({exc.strerror or exc})") from None
    if stat.S_ISDIR(mode):
        raise LoadFileError(param, f"{path}: is a directory, not a file name")
    if not stat.S_ISREG(mode):
        raise LoadFileError(param, f"{path}: is not a regular file (a device, FIFO or socket); "
                            "refusing to replace it")
    return path


def write_atomic(path: str | Path, write: Callable[[Path], None], param: str = "out") -> Path:
    """``write(tmp)`` then rename ``tmp`` over ``path`` (see the module's rules); returns ``path``."""
    path = check_target(path, param)
    suffix = path.suffix if len(path.suffix) <= _MAX_SUFFIX else ""
    try:
        fd, name = tempfile.mkstemp(prefix=".eplb-", suffix=suffix, dir=path.parent if str(path.parent) else ".")
    except OSError as exc:
        raise LoadFileError(param, f"{path}: cannot write ({exc.strerror or exc})") from None
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        with open(tmp, "rb+") as fh:          # a full disk is found now, not when the file is read
            os.fsync(fh.fileno())
        if path.exists():                     # keep the target's permissions (mkstemp makes 0600)
            os.chmod(tmp, stat.S_IMODE(os.stat(path).st_mode))
        else:
            os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise LoadFileError(param, f"{path}: cannot write ({exc.strerror or exc})") from None
        if isinstance(exc, RuntimeError) and not isinstance(exc, NotImplementedError):
            # torch.save reports a failed write (a full disk) as a RuntimeError
            first = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
            hint = "is the disk full? " if "unexpected pos" in first or "write" in first.lower() else ""
            raise LoadFileError(param, f"{path}: cannot write ({hint}{first})") from None
        raise
    return path


def write_text_atomic(path: str | Path, text: str, param: str = "out") -> Path:
    """:func:`write_atomic` of a text (UTF-8)."""
    return write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"), param)
