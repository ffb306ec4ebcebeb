"""Loads change: a rebalancing simulator, sweeps over rebalancing settings and time-robust planners.

- :func:`simulate`: replay a trace ``[T, L, E]`` under the plan in force, re-plan every N
  steps or past an imbalance threshold (optionally migration-aware); realised imbalance
  per step, moves and bytes per rebalance, totals;
- :func:`sweep`: many settings, the frontier of bytes moved against realised imbalance and
  a suggested setting for a byte budget;
- time-robust planners registered as solvers (``robust_sum``, ``robust_max``, ``ewma``,
  ``forecast``) that plan on a window's steps rather than its sum, and ``risk_aware``,
  the out-of-sample planner (risk-aware counts and placement from the steps' covariances).
"""
from .simulate import SimulationResult, simulate, step_scores

__all__ = ["simulate", "SimulationResult", "step_scores"]

from . import robust  # noqa: E402,F401  registers the time-robust planners
from . import risk_solver  # noqa: E402,F401  registers the out-of-sample planner 'risk_aware'
from . import scenario  # noqa: E402,F401  registers the exact scenario model 'scenario_cpsat'
from .. import replan  # noqa: E402,F401  registers 'migration' (the simulator's migration-aware re-plans)
