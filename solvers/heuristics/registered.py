"""Registration of this package's heuristics in the solver registry.

Every one takes ``policy`` ("auto" | "hierarchical" | "global"), ``nodup`` (no two
replicas of one expert on one GPU) and ``relax`` (hierarchical only: how many redundant
replicas per layer may live outside their group's node; 0 = strict), and is never worse
than the greedy it starts from on any layer.
"""
from __future__ import annotations

from ..problem import Problem
from ..registry import SolverOutput, register
from .common import positive_int
from .pipeline import Effort, run_pipeline
from .portfolio import run_portfolio


@register("kk_swap", kind="heuristic",
          description="greedy counts; balanced Karmarkar-Karp packing + 1-1/2-2 swap local search")
def solve_kk_swap(problem: Problem, *, policy: str = "auto", nodup: bool = False, relax: int = 0,
                  steps: int = 8) -> SolverOutput:
    effort = Effort(steps=positive_int(steps, "steps"))
    return run_pipeline(problem, policy=policy, nodup=nodup, relax=relax, effort=effort)


@register("joint", kind="heuristic",
          description="replica counts searched with the packing in the loop, then KK + swaps")
def solve_joint(problem: Problem, *, policy: str = "auto", nodup: bool = False, relax: int = 0,
                steps: int = 8, rounds: int = 32, width: int = 4) -> SolverOutput:
    effort = Effort(steps=positive_int(steps, "steps"), joint=True,
                    joint_rounds=positive_int(rounds, "rounds"), joint_width=positive_int(width, "width", 1))
    return run_pipeline(problem, policy=policy, nodup=nodup, relax=relax, effort=effort)


@register("best", kind="heuristic",
          description="portfolio: the heuristic ladder within a time budget, best plan per layer")
def solve_best(problem: Problem, *, policy: str = "auto", nodup: bool = False, relax: int = 0,
               time_budget: float = 1.0) -> SolverOutput:
    return run_portfolio(problem, policy=policy, nodup=nodup, relax=relax, time_budget=time_budget)
