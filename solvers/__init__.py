"""EPLB workbench: expert-parallel load balancing plans, exact models, bounds and scoring.

Entry points:
- :class:`Problem` (loads + cluster shape) and :class:`Plan` (DeepSeek's tensors);
- :func:`solve` runs any registered solver and scores its plan with :func:`score`;
- :func:`rebalance_experts` is a drop-in for DeepSeek's function of the same name.
"""
from .bounds import lower_bound, lower_bounds
from .deepseek import rebalance_experts
from .errors import EPLBError, LoadFileError, OptionError, PlanError, ProblemError
from .plan import Plan
from .problem import POLICIES, Problem
from .registry import SolverOutput, SolverSpec, get_solver, register, solver_names
from .result import SolutionStatus, SolveResult, Termination
from .scoring import Score, score
from .solve import BoundViolation, InvalidSolverPlan, SolverBug, solve

# Importing these packages registers their solvers (optional backends load lazily).
from . import exact, heuristics  # noqa: E402,F401  isort: skip
from . import certify, dispatch, dynamics, migration  # noqa: E402,F401  isort: skip

__version__ = "0.1.0"

__all__ = [
    "Problem", "Plan", "Score", "score", "solve", "SolveResult", "SolutionStatus", "Termination", "rebalance_experts",
    "lower_bound", "lower_bounds", "register", "get_solver", "solver_names", "SolverSpec",
    "SolverOutput", "EPLBError", "ProblemError", "PlanError", "OptionError", "LoadFileError",
    "BoundViolation", "InvalidSolverPlan", "SolverBug", "POLICIES", "__version__",
]
