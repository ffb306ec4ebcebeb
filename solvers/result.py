"""What a solve returns: why it stopped, kept apart from what it has."""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import torch

from .plan import Plan
from .scoring import Score


class Termination(str, Enum):
    """Why a solver stopped."""

    OPTIMAL = "optimal"        # plan proven optimal (objective meets the bound on every layer)
    FEASIBLE = "feasible"      # a valid plan, optimality not proven
    TIME_LIMIT = "time_limit"  # stopped by the time limit; plan (if any) is the incumbent
    INFEASIBLE = "infeasible"  # proven that no plan satisfies the constraints
    ERROR = "error"            # the backend failed; see ``message``

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class SolveResult:
    """Outcome of :func:`solvers.solve`.

    termination: why it stopped. plan / score: what it has (None when nothing was found);
    the score always comes from the shared scorer. lower_bound: [layers], the best bound
    known (combinatorial bounds and the solver's proven bound, whichever is larger).
    """

    solver: str
    termination: Termination
    plan: Plan | None
    score: Score | None
    lower_bound: torch.Tensor
    wall_time: float
    policy: str
    options: dict[str, Any] = field(default_factory=dict)
    message: str = ""
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def objective(self) -> torch.Tensor | None:
        """[layers] max GPU load of the plan, from the shared scorer."""
        return None if self.score is None else self.score.max_load

    @property
    def gap(self) -> torch.Tensor | None:
        """[layers] objective / lower_bound - 1 (0 where both are 0)."""
        if self.score is None:
            return None
        obj, lb = self.score.max_load, self.lower_bound.to(self.score.max_load.device)
        return torch.where(lb > 0, obj / lb.clamp_min(1e-300) - 1, torch.where(obj > 0, torch.inf, 0.0))

    @property
    def gap_mean(self) -> float | None:
        g = self.gap
        return None if g is None else float(g.mean())

    @property
    def gap_max(self) -> float | None:
        g = self.gap
        return None if g is None else float(g.max())

    def summary(self) -> dict[str, Any]:
        """Plain-number summary for tables and JSON."""
        out: dict[str, Any] = {"solver": self.solver, "termination": str(self.termination),
                               "policy": self.policy, "wall_time_s": self.wall_time,
                               "lower_bound_sum": float(self.lower_bound.sum())}
        if self.score is not None:
            out.update(self.score.metrics())
            out["gap_mean"], out["gap_max"] = self.gap_mean, self.gap_max
        if self.message:
            out["message"] = self.message
        return out
