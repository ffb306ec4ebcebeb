"""``solve``: the front ends' one entry point: any registered solver, its plan graded.

Importing this module registers every solver of the library (the imports below); the
solvers themselves never call :func:`solve`: they compose through
:func:`solvers.registry.run`.
"""
from __future__ import annotations

from typing import Any

from . import builtin  # noqa: F401  registers every solver (their modules call @register on import)
from .errors import OptionError
from .grading import BoundViolation, InvalidSolverPlan, SolverBug, graded_run
from .plan import Plan
from .problem import Problem
from .registry import get_solver
from .result import SolveResult
from .scoring import check_expert_bytes

__all__ = ["solve", "BoundViolation", "InvalidSolverPlan", "SolverBug"]


def solve(problem: Problem, solver: str = "deepseek", /, *, previous: Plan | None = None,
          expert_bytes: int | None = None, **options: Any) -> SolveResult:
    """Run ``solver`` on ``problem`` and score its plan with the shared scorer.

    Options are parsed once against the solver's schema (``get_solver(name).schema``) into
    its typed options; the result's ``options`` holds every option in effect, defaults
    included. ``previous`` (a plan of the same layers and GPUs) adds migration moves to the
    score. Bad input raises a ``ValueError`` subclass; a backend failure gives
    ``termination == "error"``.
    """
    if not isinstance(problem, Problem):
        raise OptionError("problem", f"must be a solvers.Problem, got {type(problem).__name__}")
    if previous is not None and not isinstance(previous, Plan):
        raise OptionError("previous", f"must be a solvers.Plan, got {type(previous).__name__}")
    expert_bytes = check_expert_bytes(expert_bytes)
    spec = get_solver(solver)
    opts = spec.parse(options)
    if not spec.is_available():
        raise OptionError("solver", f"{solver!r} is not available here: {spec.requires}")
    return graded_run(problem, spec, opts, previous=previous, expert_bytes=expert_bytes)
