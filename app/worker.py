"""Solves that Stop can end: a solver with a time limit runs in a child process, and a page
rerun (the Stop button, or any other widget) kills it, so no core stays busy for the rest of
its time limit.

A solve in the server's own thread cannot be interrupted: Streamlit stops a script run only
at its next ``st`` call, after the solver has returned. Here the page waits for the child
and makes an ``st`` call (a progress line) every quarter second; when Streamlit stops the
run at that call, the ``finally`` below kills the child.

Children come from a fork server that imports torch and the solvers once (its first start
takes a few seconds; ``python -m app.serve`` starts it before the server answers), so each
solve starts in milliseconds. Everything crossing the pipe is pickled: the problem and the
options in, the :class:`app.compute.Outcome` out (tensors and dataclasses), or the error as
its class name, parameter and message (the library's errors are rebuilt as they were).
"""
from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import time
from typing import Any, Callable

import torch

from solvers import Problem, get_solver
from solvers import errors

from .compute import Outcome, run_solver

POLL_S = 0.25
_CTX = mp.get_context("forkserver")
_CTX.set_forkserver_preload(["torch", "solvers.builtin", "solvers.dynamics", "app.compute"])


# A solve limited to this or less runs in the server: a child's start and pickles cost more
# than waiting for it (``best`` at its default 1 s).
IN_PROCESS_LIMIT_S = 2.0


def stoppable(solver: str, options: dict[str, Any] | None = None, problem: Problem | None = None) -> bool:
    """Whether ``solver`` with ``options`` runs in a child process: it has a time-limit
    option (the exact solvers, ``best``, ``certify``) set above IN_PROCESS_LIMIT_S, or, given
    the ``problem``, its work model expects more than that (:func:`expected_seconds`: a
    heuristic on many layers or slots). The rest answer in moments and stay in the server."""
    spec = get_solver(solver)
    limits = [(options or {}).get(o.name, o.default) for o in spec.schema if o.role == "time_limit"]
    if any(v is None or float(v) > IN_PROCESS_LIMIT_S for v in limits):
        return True
    return problem is not None and expected_seconds(problem, solver, options) > IN_PROCESS_LIMIT_S


def expected_seconds(problem: Problem, solver: str, options: dict[str, Any] | None = None) -> float:
    """The seconds a progress bar waits for: the work model's estimate plus the time limit
    (:meth:`solvers.registry.SolverSpec.expected_seconds`); 0 when the options do not parse
    (the solve then reports why)."""
    try:
        return get_solver(solver).expected_seconds(problem, options or {})
    except errors.EPLBError:
        return 0.0


def start_server() -> None:
    """Start the fork server (and its imports) now rather than at the first solve."""
    proc = _CTX.Process(target=_noop, daemon=True)
    proc.start()
    proc.join()


def _noop() -> None:
    pass


def _child(conn, request: bytes) -> None:
    torch.set_num_threads(int(os.environ.get("EPLB_APP_TORCH_THREADS", "1")))
    problem, solver, options = pickle.loads(request)
    try:
        answer = ("ok", run_solver(problem, solver, options))
    except Exception as exc:  # noqa: BLE001  sent to the page, which shows it
        answer = ("error", (type(exc).__name__, getattr(exc, "param", None), str(exc)))
    conn.send_bytes(pickle.dumps(answer))
    conn.close()


def _rebuild(name: str, param: str | None, text: str) -> Exception:
    """The child's error as the page would have caught it in-process."""
    cls = getattr(errors, name, None)
    if isinstance(cls, type) and issubclass(cls, errors.EPLBError) and param is not None:
        return cls(param, text[len(param) + 2:] if text.startswith(f"{param}: ") else text)
    if name == "ValueError":
        return ValueError(text)
    return RuntimeError(f"{name}: {text}")


def run_stoppable(problem: Problem, solver: str, options: dict[str, Any],
                  wait: Callable[[float, int], None]) -> Outcome:
    """:func:`app.compute.run_solver` in a child process. ``wait(elapsed_s, pid)`` is called
    about every POLL_S seconds while it runs; whatever it raises (Streamlit's stop of the
    script run) ends the wait, and the child is killed."""
    parent, child = _CTX.Pipe(duplex=False)
    # plain pickles, not multiprocessing's: torch would pass tensors as shared-memory handles
    # that die with the child
    request = pickle.dumps((problem, solver, options))
    proc = _CTX.Process(target=_child, args=(child, request), daemon=True)
    began = time.monotonic()
    proc.start()
    child.close()
    try:
        while not parent.poll(POLL_S):
            if not proc.is_alive() and not parent.poll():
                raise RuntimeError(f"{solver}: the solver's process ended without an answer "
                                   f"(exit status {proc.exitcode})")
            wait(time.monotonic() - began, proc.pid)
        try:
            kind, value = pickle.loads(parent.recv_bytes())
        except EOFError:                # the child died (killed, out of memory) before answering
            proc.join()
            raise RuntimeError(f"{solver}: the solver's process ended without an answer "
                               f"(exit status {proc.exitcode})") from None
    finally:
        if proc.is_alive():
            proc.kill()                 # Stop: free the core now, not at the time limit
        proc.join()
        parent.close()
    if kind == "error":
        raise _rebuild(*value)
    return value
