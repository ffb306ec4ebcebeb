"""Child processes that die with their parent (Linux), so a killed run leaves no solver behind.

CBC runs as a subprocess of the Python process that solves; a benchmark runs solves in
pool workers. ``kill -9`` of the benchmark gives nobody a chance to clean up, so every
child asks the kernel for SIGKILL when its parent goes (``prctl(PR_SET_PDEATHSIG)``),
set between fork and exec. Elsewhere (macOS, Windows) these helpers do nothing.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import types

_PR_SET_PDEATHSIG = 1


def _libc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


_LIBC = _libc()


def die_with_parent(expected_parent: int | None = None) -> None:
    """Ask for SIGKILL when the parent exits; exit now if it already has.

    ``expected_parent``: the pid that started us; if our parent is no longer that process
    (it died before the request was made, and we were re-parented), exit at once.
    Safe to call between fork and exec (no allocation beyond a ctypes call).
    """
    if _LIBC is None:
        return
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if expected_parent is not None and os.getppid() != expected_parent:
        os._exit(1)


def _tied_popen(*args, **kwargs):
    if _LIBC is not None and kwargs.get("preexec_fn") is None and os.name == "posix":
        parent = os.getpid()
        kwargs["preexec_fn"] = lambda: die_with_parent(parent)
    return subprocess.Popen(*args, **kwargs)


def tied_subprocess_module() -> types.ModuleType:
    """A stand-in for the ``subprocess`` module whose ``Popen`` ties children to this process.

    Assign it to a third-party module's ``subprocess`` global (PuLP's CBC runner) so its
    children die with us, without patching ``subprocess`` for everyone else.
    """
    proxy = types.ModuleType("subprocess_tied")
    proxy.__dict__.update({k: v for k, v in vars(subprocess).items() if not k.startswith("__")})
    proxy.Popen = _tied_popen
    return proxy


# Scratch directories of solver backends (CBC's .mps/.mst/.sol files, up to 45 MB) carry
# the owner's pid in their name: a process killed by SIGKILL cannot clean up, so the next
# one removes the directories of owners that are gone.
_SCRATCH_PREFIX = "eplb-scratch-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale_scratch(root: str | None = None) -> int:
    """Remove scratch directories whose owning process is gone; returns how many."""
    root = root or tempfile.gettempdir()
    removed = 0
    try:
        names = os.listdir(root)
    except OSError:
        return 0
    for name in names:
        if not name.startswith(_SCRATCH_PREFIX):
            continue
        try:
            pid = int(name[len(_SCRATCH_PREFIX):].split("-", 1)[0])
        except ValueError:
            continue
        if pid != os.getpid() and not _alive(pid):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
            removed += 1
    return removed


def scratch_dir():
    """A ``tempfile.TemporaryDirectory`` named after this process (removed on exit from the
    ``with``, and by :func:`sweep_stale_scratch` in a later process if this one is killed)."""
    sweep_stale_scratch()
    return tempfile.TemporaryDirectory(prefix=f"{_SCRATCH_PREFIX}{os.getpid()}-")
