"""Run a foreign planner in a child process under a time limit: whatever it does, the parent
gets one answer, and a plain line when it failed.

The child loads the user's code (:func:`solvers.plugins.forms.load`), says "ready", calls it
and sends back plain arrays. The time limit counts from "ready": starting the process and
importing the user's module are bounded separately (:data:`STARTUP_SECONDS`). A hang is
killed at the limit; an exception, ``sys.exit``, ``os._exit`` or a signal of the child is
reported in one line. Children come from a fork server (torch imported once, never forked
from a process that runs torch's thread pools); each dies with the server
(``PR_SET_PDEATHSIG``) and with this process (a pipe whose end only this process holds: the
server outlives it while any child holds the server's own pipe), ``kill -9`` included.
"""
from __future__ import annotations

import contextlib
import importlib.machinery
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
import traceback
from multiprocessing.connection import wait
from typing import Any

import torch

from ..childproc import die_with_parent
from .forms import call, detect, load, normalise
from .target import Target

# Seconds to start the child and load the user's code (an import that hangs is killed then).
STARTUP_SECONDS = 120.0


def _context():
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    try:                                    # preload torch once, unless someone (the app) chose already
        from multiprocessing import forkserver
        server = forkserver._forkserver
        if server._forkserver_pid is None and server._preload_modules in ([], ["__main__"]):
            ctx.set_forkserver_preload(["torch", "numpy", "solvers.plugins.forms"])
    except AttributeError:
        pass
    return ctx


def warm_up() -> None:
    """Start the fork server now (it imports torch, seconds), not inside the first planner's
    timed run: what a front end does once it knows a plugin will run."""
    ctx = _context()
    if ctx.get_start_method() == "forkserver":
        proc = ctx.Process(target=_noop, name="eplb-plugin-warm-up")
        with _main_not_rerun(False), _may_have_children():
            proc.start()            # returns once the server, torch imported, forked it
        proc.join(STARTUP_SECONDS)


def _noop() -> None:
    pass


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if isinstance(exc, SystemExit):
        return f"called sys.exit({exc.code!r})"
    here = os.path.dirname(os.path.abspath(__file__))
    theirs = [f for f in traceback.extract_tb(exc.__traceback__) if os.path.dirname(f.filename) != here]
    at = f" (at {os.path.basename(theirs[-1].filename)}:{theirs[-1].lineno})" if theirs else ""
    return f"{type(exc).__name__}: {text}{at}"[:400]


def _exit_when_closed(lifeline) -> None:
    """Block until the parent's end of ``lifeline`` closes (it exited, was killed, or is done
    with us), then exit: the fork server, our real parent, outlives the command that asked."""
    try:
        lifeline.recv()
    except (EOFError, OSError):
        pass
    os._exit(1)


def child_main(conn, lifeline, target: Target, job: dict[str, Any]) -> None:
    """The child: load, say ready, call, send ("done", arrays, seconds) or ("error", line)."""
    die_with_parent()                   # with the fork server
    threading.Thread(target=_exit_when_closed, args=(lifeline,), daemon=True).start()   # with the command
    os.dup2(2, 1)                       # the user's prints go to stderr, never into a --json answer
    sys.stdout = sys.stderr
    torch.set_num_threads(1)
    try:
        form, fn = detect(load(target))
    except BaseException as exc:        # noqa: BLE001  whatever the user's code raises is its row's line
        conn.send(("error", f"could not load {target.describe()}: {_one_line(exc)}"))
        return
    conn.send(("ready", form))
    start = time.perf_counter()
    try:
        out = normalise(form, call(form, fn, job))
    except BaseException as exc:        # noqa: BLE001
        conn.send(("error", _one_line(exc)))
        return
    conn.send(("done", out, time.perf_counter() - start))


def _gone(proc) -> str:
    proc.join(5)
    code = proc.exitcode
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"the planner's process was killed by {name}"
    return f"the planner's process exited (code {code}) without an answer"


def _receive(conn, proc, seconds: float) -> tuple | None:
    """The child's next message, ("crashed", line) if it died first, None on timeout."""
    ready = wait([conn, proc.sentinel], timeout=seconds)
    if not ready:
        return None
    if conn in ready or conn.poll():
        try:
            return conn.recv()
        except (EOFError, OSError):
            pass
    return ("crashed", _gone(proc))


@contextlib.contextmanager
def _may_have_children():
    """Inside a daemonic process (the app's stoppable solves run in one) multiprocessing refuses
    to start children, lest they outlive it: ours cannot (they die with their fork server, which
    exits with this process), so the refusal is lifted while one starts."""
    config = getattr(mp.current_process(), "_config", {})
    daemon = config.get("daemon")
    if daemon:
        config["daemon"] = False
    try:
        yield
    finally:
        if daemon:
            config["daemon"] = daemon


@contextlib.contextmanager
def _main_not_rerun(needed: bool):
    """While a child starts: unless it needs the user's ``__main__`` (a function defined in
    the script that calls ``solve``), say ``__main__`` is a module named ``__main__``, which
    multiprocessing does not re-run in the child: a script without an ``if __name__ ==
    "__main__"`` guard is not executed again."""
    main = sys.modules.get("__main__")
    if needed or main is None:
        yield
        return
    old = getattr(main, "__spec__", None)
    main.__spec__ = importlib.machinery.ModuleSpec("__main__", None)
    try:
        yield
    finally:
        main.__spec__ = old


def run_isolated(target: Target, job: dict[str, Any], time_limit: float) -> dict[str, Any]:
    """Run ``target`` on ``job`` in a child; returns {"ok": True, "form", "out", "seconds"} or
    {"ok": False, "reason": one line, "seconds"}. Never raises for what the child does."""
    ctx = _context()
    parent, child = ctx.Pipe(duplex=False)
    lifeline, kept = ctx.Pipe(duplex=False)          # the child reads; our end closes when we go
    proc = ctx.Process(target=child_main, args=(child, lifeline, target, job), name="eplb-plugin")
    start = time.perf_counter()
    try:
        with _main_not_rerun(target.kind == "callable" and target.location.startswith("__main__.")), \
                _may_have_children():
            proc.start()
        child.close()
        lifeline.close()
        msg = _receive(parent, proc, STARTUP_SECONDS)
        if msg is None:
            return {"ok": False, "reason": f"loading took over {STARTUP_SECONDS:g} s (stopped)",
                    "seconds": time.perf_counter() - start}
        if msg[0] != "ready":
            return {"ok": False, "reason": msg[1], "seconds": time.perf_counter() - start}
        form, called = msg[1], time.perf_counter()
        msg = _receive(parent, proc, time_limit)
        if msg is None:
            return {"ok": False, "reason": f"no answer within the time limit of {time_limit:g} s (stopped)",
                    "seconds": time.perf_counter() - called, "form": form}
        if msg[0] != "done":
            return {"ok": False, "reason": msg[1], "seconds": time.perf_counter() - called, "form": form}
        return {"ok": True, "form": form, "out": msg[1], "seconds": msg[2]}
    finally:
        if proc.pid is not None:
            if proc.is_alive():
                proc.kill()
            proc.join(5)
        parent.close()
        kept.close()
