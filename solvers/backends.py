"""Probes for the optional exact backends (imported lazily, never at ``import solvers``).

OR-Tools wheels bundle their own HiGHS (ortools 9.15 ships HiGHS 1.12.0) and export its
symbols. ``highspy`` of another version in the same process breaks whichever of the two
is imported second with an undefined-symbol ImportError (highspy 1.15 + ortools 9.15 was
verified to fail both ways). ``highspy==1.12.0`` (the bundled version) works beside
ortools 9.15 in one process, in either import order. To be safe with other versions we
always import OR-Tools first, so a mismatched highspy only disables "highs" (with the
reason in :func:`unavailable_reason`) and never breaks CP-SAT. (A program that imports a
mismatched highspy itself *before* ortools loses CP-SAT instead; pin highspy to the
bundled version: ``highspy>=1.12,<1.13`` for ``ortools>=9.15,<9.16``.)
"""
from __future__ import annotations

import functools
import importlib

from .childproc import tied_subprocess_module
from .clock import clock

_reasons: dict[str, str] = {}


def _try(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError as exc:
        _reasons.setdefault(module, f"{type(exc).__name__}: {exc}")
        return False
    return True


@functools.cache
def cpsat_available() -> bool:
    return _try("ortools.sat.python.cp_model")


@functools.cache
def highs_available() -> bool:
    if not _try("pulp"):
        return False
    cpsat_available()                 # load OR-Tools' HiGHS symbols first (see module doc)
    if not _try("highspy"):
        return False
    import pulp
    return bool(pulp.HiGHS(msg=False).available())


@functools.cache
def cbc_available() -> bool:
    if not _try("pulp"):
        return False
    return bool(cbc_command(msg=False).available())


def unavailable_reason(module: str) -> str | None:
    """The ImportError met when probing ``module`` (None if it imported or was not tried)."""
    return _reasons.get(module)


def cbc_command(deadline: float | None = None, **kwargs):
    """PuLP's bundled CBC, run as a child that dies with this process.

    ``deadline`` (a :func:`solvers.clock.clock` time): CBC's time limit is then read when its
    command line is made, after PuLP has written the model file (seconds on large models),
    as the seconds left less a margin for CBC's own overshoot (it checks its clock between
    nodes: 2-3 s over a 10 s limit on DeepSeek-sized models): 20 % of what is left, at most
    2.5 s. CBC counts wall time (``timeMode elapsed``; its default, CPU time, runs long on a
    busy machine).

    PuLP 3.3 deprecates PULP_CBC_CMD (4.0 drops the bundled binary, hence the pulp<4 pin);
    the warning would repeat on every layer, so it is silenced here."""
    import warnings

    from pulp.apis import coin_api

    if not getattr(coin_api.subprocess, "_eplb_tied", False):
        tied = tied_subprocess_module()
        tied._eplb_tied = True
        coin_api.subprocess = tied
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        solver = _deadline_cbc_class()(timeMode="elapsed", **kwargs)
    solver.deadline = deadline
    return solver


# Seconds of CBC's overshoot kept back: this share of the time left, at most CBC_MARGIN_MAX.
CBC_MARGIN_SHARE, CBC_MARGIN_MAX = 0.2, 2.5


@functools.cache
def _deadline_cbc_class():
    import pulp

    class DeadlineCBC(pulp.PULP_CBC_CMD):
        """PULP_CBC_CMD whose ``timeLimit`` is computed from ``deadline`` when read."""

        deadline: float | None = None

        @property
        def timeLimit(self):
            if self.deadline is None:
                return self._time_limit
            left = self.deadline - clock()
            return round(max(0.05, left - min(CBC_MARGIN_SHARE * max(left, 0.0), CBC_MARGIN_MAX)), 3)

        @timeLimit.setter
        def timeLimit(self, value):
            self._time_limit = value

    return DeadlineCBC


_SCHEDULER_THREADS: int | None = None


def prepare_highs_scheduler(threads: int) -> None:
    """Call before every HiGHS run of the process, with the run's thread count. HiGHS runs
    every solve on one global task scheduler, created with the first solve's thread count;
    a later solve asking for another count is refused (model status "Not Set" after
    0.01 s). The scheduler is reset whenever the count changes, and once before the first
    run seen here (another caller may have created it with any count)."""
    global _SCHEDULER_THREADS
    import highspy

    if threads != _SCHEDULER_THREADS:
        highspy.Highs.resetGlobalScheduler(True)
    _SCHEDULER_THREADS = threads


def cpsat_solver(time_limit: float, threads: int, seed: int = 0, gap: float = 0.0):
    """A CP-SAT solver with the parameters every model of the package runs under."""
    from ortools.sat.python import cp_model

    solver = cp_model.CpSolver()
    p = solver.parameters
    p.max_time_in_seconds = float(time_limit)
    p.num_workers = max(1, int(threads))
    p.random_seed = int(seed)
    p.relative_gap_limit = float(gap)
    p.log_search_progress = False
    return solver
