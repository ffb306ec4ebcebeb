"""``solve`` (the package root's ``solvers.solve``): the front ends' one entry point, any
registered solver, its plan graded.

Importing this module registers every solver of the library (the imports below); the
solvers themselves never call :func:`solve`: they compose through
:func:`solvers.registry.run`.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import builtin  # noqa: F401  registers every solver (their modules call @register on import)
from .plugins import register_callable, resolve_solvers
from .grading import BoundViolation, InvalidSolverPlan, SolverBug, graded_run
from .cluster import Cluster
from .plan import Plan
from .problem import Problem
from .result import SolveResult

__all__ = ["solve", "BoundViolation", "InvalidSolverPlan", "SolverBug"]


def solve(problem: Problem, solver: str | Callable[..., Any] = "deepseek", *, previous: Plan | None = None,
          expert_bytes: int | None = None, previous_cluster: Cluster | None = None, **options: Any) -> SolveResult:
    """Run ``solver`` on ``problem`` and score its plan with the shared scorer.

    Options are parsed once against the solver's schema (``get_solver(name).schema``) into
    its typed options; the result's ``options`` holds every option in effect, defaults
    included. ``previous`` (a plan of the same layers and GPUs) adds migration moves to the
    score. Bad input raises a ``ValueError`` subclass; a backend failure gives
    ``termination == "error"``. ``previous_cluster``: the cluster ``previous`` was made for
    when it is another (before GPUs failed); moves map each plan's slots by its own cluster.
    ``solver`` may be your own function or class in DeepSeek's, vLLM's or the ``(problem,
    options)`` form (docs/own-algorithm.md): it runs in a child process under its time limit.
    """
    if not isinstance(solver, str) or ":" in solver:   # your own planner: isolated, graded the same
        solver = register_callable(solver) if not isinstance(solver, str) else resolve_solvers([solver], "solver")[0]
    return graded_run(problem, solver, options, previous=previous, expert_bytes=expert_bytes,
                      previous_cluster=previous_cluster)
