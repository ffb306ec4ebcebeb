"""What a solve returns: why it stopped, kept apart from what it has.

Two kinds of bound, never mixed:

- ``lower_bound``: holds for *every* plan of the problem (any policy, counts or
  colocation rule). ``gap`` and ``proven_optimal`` are against it.
- ``model_bound``: proven by an exact solver for its restricted model only (a policy,
  fixed counts, forbidden colocation, a node budget), described by a typed
  :class:`ModelScope`. ``gap_in_model`` and ``optimal_in_model`` are against it.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

import torch

from .plan import Plan
from .scoring import Score
from .tolerances import ROUNDING_RTOL


class Termination(str, Enum):
    """Why the solver stopped (as Pyomo's ``TerminationCondition``); what it has is
    :class:`SolutionStatus`."""

    OPTIMAL = "optimal"          # the solver proved its plan optimal in its own model, every layer
    COMPLETED = "completed"      # it ran to its own end without proving an optimum: a heuristic
    #                              finished its passes or time budget, an exact backend stopped at
    #                              the requested gap (or its optimum failed the unscaled re-check)
    TIME_LIMIT = "time_limit"    # stopped by the time limit; the plan (if any) is the incumbent
    INFEASIBLE = "infeasible"    # proved that no plan of its model satisfies the constraints
    ERROR = "error"              # the backend failed or crashed; see ``message``

    def __str__(self) -> str:
        return self.value


class SolutionStatus(str, Enum):
    """What a solve has (as Pyomo's ``SolutionStatus``), graded by :func:`solvers.solve` from
    the shared scorer's objective against the bounds, whatever the solver claims."""

    PROVEN_OPTIMAL = "proven_optimal"      # every layer meets the lower bound valid for every plan
    OPTIMAL_IN_MODEL = "optimal_in_model"  # proven optimal only within the solver's restricted model
    FEASIBLE = "feasible"                  # a valid plan, optimality not proven
    NONE = "none"                          # no plan

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class ModelScope:
    """The plans a model bound covers.

    policy: "global" or "hierarchical" (whole groups on a node). counts: "free" or "fixed"
    (the replica counts were given). colocation: "allowed" or "forbidden". node_budget:
    hierarchical only: "fixed" (G/N groups per node) or "free".
    """

    policy: str = "global"
    counts: str = "free"
    colocation: str = "allowed"
    node_budget: str | None = None

    @property
    def universal(self) -> bool:
        """True when the scope is every plan of the problem (the bound is a lower bound)."""
        return self.policy == "global" and self.counts == "free" and self.colocation == "allowed"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        parts = [f"policy={self.policy}", f"counts={self.counts}", f"colocation={self.colocation}"]
        if self.node_budget is not None:
            parts.append(f"node_budget={self.node_budget}")
        return ", ".join(parts)


def ratio_gap(obj: torch.Tensor, bound: torch.Tensor) -> torch.Tensor:
    """[layers] obj / bound - 1 (0 where both are 0, inf where only the bound is 0)."""
    lb = bound.to(obj.device, torch.float64)
    obj = obj.to(torch.float64)
    gap = obj / lb.clamp_min(1e-300) - 1
    gap = torch.where(gap.abs() <= ROUNDING_RTOL, 0.0, gap)          # an objective equal to its bound up to rounding
    return torch.where(lb > 0, gap, torch.where(obj > 0, torch.inf, 0.0))


@dataclass(frozen=True)
class SolveResult:
    """Outcome of :func:`solvers.solve`.

    termination: why it stopped (:class:`Termination`). status: what it has
    (:class:`SolutionStatus`, graded from the shared scorer against the bounds). plan / score:
    the plan and its score (None when nothing was found); the score always comes from the
    shared scorer. lower_bound: [layers] the best bound
    valid for every plan of the problem. model_bound / model_scope: the solver's bound for
    its restricted model, if it proved one. proven_optimal / optimal_in_model: [layers] bool.
    options: every option in effect, defaults included.
    """

    solver: str
    termination: Termination
    status: SolutionStatus
    plan: Plan | None
    score: Score | None
    lower_bound: torch.Tensor
    wall_time: float
    policy: str
    options: dict[str, Any] = field(default_factory=dict)
    message: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    model_bound: torch.Tensor | None = None
    model_scope: ModelScope | None = None
    proven_optimal: torch.Tensor | None = None     # [layers] bool
    optimal_in_model: torch.Tensor | None = None   # [layers] bool
    policy_bound: torch.Tensor | None = None       # [layers] bound for every plan of this plan's node structure

    @property
    def objective(self) -> torch.Tensor | None:
        """[layers] the plan's objective from the shared scorer: the max GPU time (load over
        speed), which is the max GPU load on a cluster of speed-1 GPUs."""
        return None if self.score is None else self.score.max_time

    @property
    def gap(self) -> torch.Tensor | None:
        """[layers] objective / lower_bound - 1: against the bound valid for every plan."""
        return None if self.score is None else ratio_gap(self.score.max_time, self.lower_bound)

    @property
    def gap_in_model(self) -> torch.Tensor | None:
        """[layers] objective / model_bound - 1 (None without a model bound)."""
        if self.score is None or self.model_bound is None:
            return None
        return ratio_gap(self.score.max_time, self.model_bound)

    @property
    def gap_in_policy(self) -> torch.Tensor | None:
        """[layers] objective / policy_bound - 1: the gap within the plan's own node structure
        (for a strict hierarchical plan, against the node-level bound); the gap minus this is
        what the policy itself costs."""
        if self.score is None or self.policy_bound is None:
            return None
        return ratio_gap(self.score.max_time, self.policy_bound)

    @property
    def gap_mean(self) -> float | None:
        g = self.gap
        return None if g is None else float(g.mean())

    @property
    def gap_max(self) -> float | None:
        g = self.gap
        return None if g is None else float(g.max())

    def summary(self, holdout: Score | None = None) -> dict[str, Any]:
        """The one flat row of a result, for every table and JSON (the CLI, ``compare``, the
        app and the benchmark store use these names). holdout: the plan's score on loads it
        was not planned on (same cluster), reported as ``holdout_*``."""
        out: dict[str, Any] = {"solver": self.solver, "termination": str(self.termination),
                               "status": str(self.status), "policy": self.policy, "wall_time_s": self.wall_time,
                               "lower_bound_sum": float(self.lower_bound.sum())}
        if self.score is not None:
            out.update(self.score.metrics())
            out["gap_mean"], out["gap_max"] = self.gap_mean, self.gap_max
            gp = self.gap_in_policy
            if gp is not None:
                out["gap_in_policy_mean"] = float(gp.mean())
            if holdout is not None:
                out["holdout_imbalance_mean"] = holdout.imbalance_mean
                out["holdout_imbalance_worst"] = holdout.imbalance_worst
                if "time_imbalance_mean" in holdout.summary:     # GPUs of different speeds
                    out["holdout_time_imbalance_mean"] = holdout.summary["time_imbalance_mean"]
                    out["holdout_time_imbalance_worst"] = holdout.summary["time_imbalance_worst"]
            if self.proven_optimal is not None:
                out["layers_proven_optimal"] = int(self.proven_optimal.sum())
        if self.model_bound is not None:
            out["model_bound_sum"] = float(self.model_bound.sum())
            out["model_scope"] = str(self.model_scope)
            gm = self.gap_in_model
            if gm is not None:
                out["gap_in_model_max"] = float(gm.max())
            if self.optimal_in_model is not None:
                out["layers_optimal_in_model"] = int(self.optimal_in_model.sum())
        if self.message:
            out["message"] = self.message
        return out
