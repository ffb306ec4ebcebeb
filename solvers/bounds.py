"""Certified lower bounds on the optimal max GPU load (even split; DESIGN section 3).

Each bound is a tensor ``[layers]`` in float64. They hold for every plan of the problem,
whatever the policy (a hierarchical plan is a global plan with extra constraints).
"""
from __future__ import annotations

import torch

from .problem import Problem


def average_bound(problem: Problem) -> torch.Tensor:
    """W / P: the busiest GPU carries at least the mean."""
    w = problem.weights.to(torch.float64)
    return w.sum(1) / problem.num_gpus


def hottest_expert_bound(problem: Problem) -> torch.Tensor:
    """max_e w_e / min(P, R - E + 1): the hottest expert spreads over at most that many GPUs."""
    w = problem.weights.to(torch.float64)
    spread = min(problem.num_gpus, problem.num_replicas - problem.num_experts + 1)
    return w.max(1).values / spread


def lower_bounds(problem: Problem) -> dict[str, torch.Tensor]:
    """Every combinatorial bound by name, each ``[layers]``."""
    return {"average": average_bound(problem), "hottest_expert": hottest_expert_bound(problem)}


def lower_bound(problem: Problem) -> torch.Tensor:
    """The best combinatorial bound per layer: ``[layers]`` float64."""
    return torch.stack(list(lower_bounds(problem).values())).max(0).values
