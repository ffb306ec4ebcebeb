"""``solve``: the one entry point that runs any registered solver and grades its plan."""
from __future__ import annotations

import time
from typing import Any

import torch

from .bounds import lower_bound
from .errors import EPLBError, OptionError, PlanError
from .plan import Plan
from .problem import Problem
from .registry import get_solver
from .result import SolveResult, Termination
from .scoring import score_validated

# Relative slack when comparing an objective with a bound: the solver bound may come
# from a MIP with its own feasibility tolerance.
BOUND_RTOL = 1e-6


class SolverBug(RuntimeError):
    """A solver broke its contract: the user's input is not to blame, so this is not a ValueError."""


class BoundViolation(SolverBug):
    """A plan scored below a proven lower bound: a solver (or a bound) is wrong."""


class InvalidSolverPlan(SolverBug):
    """A solver returned a malformed plan."""


def solve(problem: Problem, solver: str = "deepseek", *, previous: Plan | None = None,
          expert_bytes: int | None = None, **options: Any) -> SolveResult:
    """Run ``solver`` on ``problem`` and score its plan with the shared scorer.

    ``previous`` (a plan of the same layers and GPUs) adds migration moves to the score.
    Bad input raises a ``ValueError`` subclass; a backend failure gives
    ``termination == "error"`` with a message.
    """
    if not isinstance(problem, Problem):
        raise OptionError("problem", f"must be a solvers.Problem, got {type(problem).__name__}")
    spec = get_solver(solver)
    spec.check_options(options)
    if not spec.is_available():
        raise OptionError("solver", f"{solver!r} is not available here: {spec.requires}")
    bound = lower_bound(problem)
    start = time.perf_counter()
    try:
        out = spec.fn(problem, **options)
    except EPLBError:
        raise
    except Exception as exc:  # a backend crash is a result, not a traceback for the user
        wall = time.perf_counter() - start
        return SolveResult(solver, Termination.ERROR, None, None, bound, wall, "unknown", options,
                           f"{type(exc).__name__}: {exc}")
    wall = time.perf_counter() - start
    if out.bound is not None:
        bound = torch.maximum(bound, out.bound.to(bound.device, torch.float64))
    if out.plan is None:
        status = out.status or Termination.ERROR
        return SolveResult(solver, status, None, None, bound, wall, out.policy, options,
                           out.message, out.info)
    try:
        out.plan.validate(problem.num_layers, problem.num_experts, problem.num_replicas, problem.num_gpus)
    except PlanError as exc:
        raise InvalidSolverPlan(f"solver {solver!r} returned an invalid plan: {exc}") from None
    sc = score_validated(problem, out.plan, previous=previous, expert_bytes=expert_bytes)
    obj = sc.max_load.to(bound.device)
    if bool((obj < bound * (1 - BOUND_RTOL) - 1e-9).any()):
        layer = int(torch.argmax(bound - obj))
        raise BoundViolation(f"solver {solver!r}: layer {layer} scores {float(obj[layer])!r}, "
                             f"below the proven lower bound {float(bound[layer])!r}")
    status = out.status
    if status is None or status is Termination.FEASIBLE:
        proven = bool((obj <= bound * (1 + BOUND_RTOL) + 1e-9).all())
        status = Termination.OPTIMAL if proven else Termination.FEASIBLE
    return SolveResult(solver, status, out.plan, sc, bound, wall, out.policy, options,
                       out.message, out.info)
