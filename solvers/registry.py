"""One small registry of named solvers.

A solver is a function ``fn(problem, **options) -> SolverOutput``. It returns a plan and,
if it proves one, a lower bound; it never grades itself: :func:`solvers.solve` scores
every plan with the shared scorer and combines bounds.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from .errors import OptionError
from .plan import Plan
from .result import Termination


@dataclass
class SolverOutput:
    """What a solver hands back to :func:`solvers.solve`.

    plan: the plan found (None if none). status: why it stopped, when the solver knows
    better than "feasible" (time limit, proven optimal, infeasible, error). bound:
    [layers] lower bound the solver proved, if any. policy: the policy that ran.
    """

    plan: Plan | None
    policy: str
    status: Termination | None = None
    bound: torch.Tensor | None = None
    message: str = ""
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SolverSpec:
    name: str
    fn: Callable[..., SolverOutput]
    kind: str                      # "heuristic" or "exact"
    description: str
    is_available: Callable[[], bool]
    requires: str                  # what to install when it is not available

    @property
    def options(self) -> tuple[str, ...]:
        params = list(inspect.signature(self.fn).parameters.values())[1:]
        return tuple(p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY)

    def check_options(self, options: dict[str, Any]) -> None:
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            allowed = ", ".join(self.options) or "none"
            raise OptionError(unknown[0], f"is not an option of solver {self.name!r} (options: {allowed})")


_REGISTRY: dict[str, SolverSpec] = {}


def register(name: str, *, kind: str, description: str,
             is_available: Callable[[], bool] = lambda: True, requires: str = ""):
    """Decorator adding ``fn`` to the registry under ``name``."""
    if kind not in ("heuristic", "exact"):
        raise ValueError(f"kind must be 'heuristic' or 'exact', got {kind!r}")

    def deco(fn: Callable[..., SolverOutput]) -> Callable[..., SolverOutput]:
        if name in _REGISTRY:
            raise ValueError(f"solver {name!r} is registered twice")
        _REGISTRY[name] = SolverSpec(name, fn, kind, description, is_available, requires)
        return fn

    return deco


def get_solver(name: str) -> SolverSpec:
    spec = _REGISTRY.get(name)
    if spec is None:
        raise OptionError("solver", f"unknown solver {name!r}; known: {', '.join(sorted(_REGISTRY))}")
    return spec


def solver_names(kind: str | None = None, available_only: bool = False) -> list[str]:
    return sorted(n for n, s in _REGISTRY.items()
                  if (kind is None or s.kind == kind) and (not available_only or s.is_available()))
