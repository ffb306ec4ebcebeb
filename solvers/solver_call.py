"""The one way a front end calls a solver: what reaches it from the window, the routing
trace, the plan in force and the user's options.

    call = solver_call(problem, "risk_aware", steps=loads.trace, routing=trace, options={"risk": 0.5})
    result = call.run()           # solvers.solve with exactly these options

``eplb plan``, ``eplb compare`` (so a row of compare is what the ``eplb plan`` command it
prints computes), the app's pages and the benchmark runner build their calls here, so the
same window, history, routing and options reach a solver whichever of them calls it:

- history: the planning window's steps ``[T, layers, experts]`` go to every solver with a
  ``history`` option when the window has more than one step (a single step or a plain
  matrix carries no history: the solver's own default, e.g. ``traffic_aware``'s buckets of
  the routing trace, applies, as it does for ``eplb plan`` on that file);
- routing: the per-token trace to every solver with a ``routing`` option;
- the plan in force (``previous``): recorded for moves by every solver's score, and given as
  ``current`` to every solver that takes a plan in force (``migration``, ``elastic``,
  ``risk_aware``: they re-plan from it with few moves, as the app's pages do), with
  ``slack`` when one is given;
- policy and time limit: to the solvers that declare them (compare's ``--time-limit`` goes
  to each solver's time-limit option, whatever its name).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from .cluster import Cluster
from .entry import solve
from .errors import OptionError
from .options import option_by_role
from .plan import Plan
from .problem import Problem
from .registry import get_solver
from .result import SolveResult


def history_of(steps: Any) -> Any:
    """The window's steps as a history: ``steps`` [T, layers, experts] when T > 1, else None."""
    if steps is None:
        return None
    shape = getattr(steps, "shape", None)
    return steps if shape is not None and len(shape) == 3 and shape[0] > 1 else None


def is_replanner(name: str) -> bool:
    """A solver that takes a plan in force (a ``current`` option: ``migration``, ``elastic``,
    ``risk_aware``): it gets ``--previous`` as its ``current`` placement."""
    return "current" in get_solver(name).options


@dataclass
class SolverCall:
    """solver on problem with ``options`` (every option it is given, history and routing
    included); previous / previous_cluster / expert_bytes: the plan in force for moves."""

    problem: Problem
    solver: str
    options: dict[str, Any] = field(default_factory=dict)
    previous: Plan | None = None
    previous_cluster: Cluster | None = None
    expert_bytes: int | None = None

    def run(self) -> SolveResult:
        return solve(self.problem, self.solver, previous=self.previous, expert_bytes=self.expert_bytes,
                     previous_cluster=self.previous_cluster, **self.options)


def solver_call(problem: Problem, solver: str, *, steps: Any = None, routing: Any = None,
                options: dict[str, Any] | None = None, policy: str | None = None,
                time_limit: float | None = None, previous: Plan | None = None,
                previous_cluster: Cluster | None = None, slack: float | None = None,
                expert_bytes: int | None = None, strict: bool = True) -> SolverCall:
    """The call of ``solver`` on ``problem`` (module docstring: what reaches it).

    steps: the planning window's steps [T, layers, experts] (or None); options: the user's
    options, all of them for this solver (``strict``, as ``eplb plan -O``) or shared by
    several solvers, each taking those it declares (``strict=False``, as ``eplb compare -O``).
    An option the user gave wins over what the call would add (history, routing, current).
    """
    spec = get_solver(solver)
    declared = spec.options
    given = dict(options or {})
    if strict:
        spec.parse(given)                 # refuses what this solver does not declare, by name
    opts = {k: v for k, v in given.items() if k in declared}
    history = history_of(steps)
    if history is not None and "history" in declared:
        opts.setdefault("history", torch.as_tensor(history))
    if routing is not None and "routing" in declared:
        opts.setdefault("routing", routing)
    if policy is not None and "policy" in declared:
        if opts.get("policy", policy) != policy:
            raise OptionError("policy", f"{policy} contradicts -O policy={opts['policy']}")
        opts["policy"] = policy
    limit = option_by_role(spec.schema, "time_limit")
    if time_limit is not None and limit is not None:
        opts.setdefault(limit.name, time_limit)
    if previous is not None and is_replanner(solver):
        opts.setdefault("current", previous)
        if previous_cluster is not None and "current_cluster" in declared:
            opts.setdefault("current_cluster", previous_cluster)
        if slack is not None:
            opts.setdefault("slack", slack)
    return SolverCall(problem, solver, opts, previous, previous_cluster, expert_bytes)
