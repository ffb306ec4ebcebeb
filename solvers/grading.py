"""Grading: one plan from one solver, scored by the shared scorer against the bounds.

:func:`grade` is what turns a :class:`~solvers.registry.SolverOutput` into a
:class:`~solvers.result.SolveResult`: it validates the plan, scores it with
:func:`solvers.scoring.score_validated`, combines the solver's bounds with the universal
one (computed once per solve by the caller), fails loudly when a plan beats a proven bound,
and says what the solve has. No solver grades itself.
"""
from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import torch

from .bounds import lower_bound, structure_bound
from .cluster import Cluster
from .errors import EPLBError, OptionError, PlanError
from .options import SolverOptions
from .plan import Plan
from .problem import Problem
from .registry import SolverOutput, get_solver
from .result import SolutionStatus, SolveResult, Termination
from .scoring import check_expert_bytes, check_finite, score_validated
from .threads import one_intra_op_thread
from .tolerances import BOUND_RTOL, VIOLATION_RTOL


class SolverBug(RuntimeError):
    """A solver broke its contract: the user's input is not to blame, so this is not a ValueError."""


class BoundViolation(SolverBug):
    """A plan scored below a proven lower bound: a solver (or a bound) is wrong."""


class InvalidSolverPlan(SolverBug):
    """A solver returned a malformed plan."""


def _check_above(solver: str, obj: torch.Tensor, bound: torch.Tensor, what: str) -> None:
    if bool((obj < bound * (1 - VIOLATION_RTOL)).any()):
        layer = int(torch.argmax(bound - obj))
        raise BoundViolation(f"solver {solver!r}: layer {layer} scores {float(obj[layer])!r}, "
                             f"below the proven {what} {float(bound[layer])!r}")


def graded_run(problem: Problem, solver: str, options: Mapping[str, Any] | SolverOptions, *,
               previous: Plan | None = None, expert_bytes: int | None = None,
               previous_cluster: Cluster | None = None) -> SolveResult:
    """Check the inputs at the edge (once), parse ``options`` against ``solver``'s schema,
    run it and grade its plan: what :func:`solvers.solve` and
    :func:`solvers.replan.plan_with_migration` do. The universal lower bound is computed
    once here; a backend crash becomes a result with termination ``error``."""
    if not isinstance(problem, Problem):
        raise OptionError("problem", f"must be a solvers.Problem, got {type(problem).__name__}")
    if previous is not None and not isinstance(previous, Plan):
        raise OptionError("previous", f"must be a solvers.Plan, got {type(previous).__name__}")
    expert_bytes = check_expert_bytes(expert_bytes)
    spec = get_solver(solver)
    options = spec.parse(options)
    if not spec.is_available():
        raise OptionError("solver", f"{solver!r} is not available here: {spec.requires}")
    spec.check_cluster(problem)
    spec.check_work(problem, options)  # the solver's work cap, before any work
    with one_intra_op_thread():        # small kernels: a team of threads only waits (solvers.threads)
        bound = lower_bound(problem)
        start = time.perf_counter()
        try:
            out = spec.fn(problem, options)
        except EPLBError:
            raise
        except Exception as exc:  # a backend crash is a result, not a traceback for the user
            wall = time.perf_counter() - start
            return SolveResult(spec.name, Termination.ERROR, SolutionStatus.NONE, None, None, bound, wall, "unknown",
                               options.as_dict(), f"{type(exc).__name__}: {exc}")
        wall = time.perf_counter() - start
        return grade(problem, spec.name, out, bound, wall, options.as_dict(), previous, expert_bytes,
                     previous_cluster)


def grade(problem: Problem, solver: str, out: SolverOutput, bound: torch.Tensor, wall: float,
           options: dict[str, Any], previous: Plan | None, expert_bytes: int | None,
           previous_cluster: Cluster | None = None) -> SolveResult:
    """Combine the solver's bounds with the universal one, score its plan, say why it stopped
    (the solver's word; a solver that says nothing ran to its end: COMPLETED) and what it has
    (graded here from the shared scorer's objective against the bounds)."""
    model_bound, scope = out.model_bound, out.model_scope
    if model_bound is not None:
        model_bound = model_bound.to(bound.device, torch.float64)
        if scope is not None and scope.universal:       # a model of every plan: a lower bound
            bound, model_bound, scope = torch.maximum(bound, model_bound), None, None
        else:
            model_bound = torch.maximum(model_bound, bound)   # a restricted model's optimum is >= any universal bound
    if out.bound is not None:
        bound = torch.maximum(bound, out.bound.to(bound.device, torch.float64))
    common = dict(options=options, message=out.message, info=out.info, model_bound=model_bound,
                  model_scope=scope)
    if out.plan is None:
        termination = out.termination or Termination.ERROR
        return SolveResult(solver, termination, SolutionStatus.NONE, None, None, bound, wall, out.policy, **common)
    try:
        problem.validate_plan(out.plan)
    except PlanError as exc:
        raise InvalidSolverPlan(f"solver {solver!r} returned an invalid plan: {exc}") from None
    sc = score_validated(problem, out.plan, previous=previous, expert_bytes=expert_bytes,
                         previous_cluster=previous_cluster)
    obj = sc.max_time.to(bound.device, torch.float64)
    # A bound that is nan or inf proves nothing; it is an error, never a status (the score's own
    # figures are checked by the scorer).
    check_finite({"lower bound": bound} if model_bound is None else {"lower bound": bound, "model bound": model_bound})
    _check_above(solver, obj, bound, "lower bound")
    if model_bound is not None:
        _check_above(solver, obj, model_bound, "model bound")
    proven = obj <= bound * (1 + BOUND_RTOL)
    in_model = proven.clone()
    if model_bound is not None:
        in_model |= obj <= model_bound * (1 + BOUND_RTOL)
    if out.model_optimal is not None:
        in_model |= out.model_optimal.to(in_model.device, torch.bool)
    termination = out.termination or Termination.COMPLETED
    if bool(proven.all()):
        status = SolutionStatus.PROVEN_OPTIMAL
    elif bool(in_model.all()) and model_bound is not None:
        status = SolutionStatus.OPTIMAL_IN_MODEL
    else:
        status = SolutionStatus.FEASIBLE
    return SolveResult(solver, termination, status, out.plan, sc, bound, wall, out.policy, proven_optimal=proven,
                       optimal_in_model=in_model, policy_bound=structure_bound(problem, out.plan, base=bound),
                       **common)
