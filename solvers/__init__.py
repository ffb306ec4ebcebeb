"""EPLB workbench: expert-parallel load balancing plans, exact models, bounds and scoring.

Entry points:
- :class:`Problem` (loads + cluster shape) and :class:`Plan` (DeepSeek's tensors);
- :func:`solve` runs any registered solver and scores its plan with :func:`score`;
- :func:`rebalance_experts` is a drop-in for DeepSeek's function of the same name.

The names below load on first use (PEP 562), so ``import solvers.cli`` (``eplb --help``) does
not import torch. Every solver registers (:mod:`solvers.builtin`) when ``solve``, ``get_solver``,
``solver_names`` or ``register`` is first looked up here.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> the module that defines it
_EXPORTS: dict[str, str] = {
    "lower_bound": "bounds", "lower_bounds": "bounds",
    "rebalance_experts": "deepseek",
    "EPLBError": "errors", "LoadFileError": "errors", "OptionError": "errors", "PlanError": "errors",
    "ProblemError": "errors",
    "Plan": "plan",
    "POLICIES": "cluster", "Cluster": "cluster", "MODELS": "cluster", "CLUSTERS": "cluster",
    "Problem": "problem",
    "SolverOutput": "registry", "SolverSpec": "registry", "get_solver": "registry", "register": "registry",
    "solver_names": "registry",
    "SolveResult": "result", "Termination": "result", "SolutionStatus": "result",
    "Score": "scoring", "score": "evaluate",
    "BoundViolation": "grading", "InvalidSolverPlan": "grading", "SolverBug": "grading", "solve": "entry",
}

if TYPE_CHECKING:
    from .bounds import lower_bound, lower_bounds
    from .deepseek import rebalance_experts
    from .errors import EPLBError, LoadFileError, OptionError, PlanError, ProblemError
    from .plan import Plan
    from .cluster import CLUSTERS, MODELS, POLICIES, Cluster
    from .problem import Problem
    from .registry import SolverOutput, SolverSpec, get_solver, register, solver_names
    from .result import SolutionStatus, SolveResult, Termination
    from .evaluate import score
    from .scoring import Score
    from .entry import solve
    from .grading import BoundViolation, InvalidSolverPlan, SolverBug

__all__ = [
    "Problem", "Cluster", "MODELS", "CLUSTERS", "Plan", "Score", "score", "solve", "SolveResult", "SolutionStatus", "Termination", "rebalance_experts",
    "lower_bound", "lower_bounds", "register", "get_solver", "solver_names", "SolverSpec",
    "SolverOutput", "EPLBError", "ProblemError", "PlanError", "OptionError", "LoadFileError",
    "BoundViolation", "InvalidSolverPlan", "SolverBug", "POLICIES", "__version__",
]


def _export(name: str) -> Any:
    module = importlib.import_module(f".{_EXPORTS[name]}", __name__)
    if _EXPORTS[name] in ("registry", "entry"):
        importlib.import_module(".builtin", __name__)       # every solver registered
        importlib.import_module(".plugins", __name__)       # and the installed planners (entry points)
    return getattr(module, name)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = _export(name)
        globals()[name] = value                              # looked up once
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
