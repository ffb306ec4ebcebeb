"""Registration of this package's heuristics in the solver registry.

Every one takes ``policy`` ("auto" | "hierarchical" | "global"), ``nodup`` (no two
replicas of one expert on one GPU; "lpt" and "rr" starts are added) and ``relax``
(hierarchical only: how many redundant replicas per layer may live outside their group's
node; 0 = strict), and is never worse than the greedy it starts from on any layer.
``starts`` (kk_swap, joint): the constructions the swap search starts from, best kept:
"kk" (balanced differencing), "lpt" (largest first, DeepSeek's rule), "rr" (round robin).
"""
from __future__ import annotations

from ..problem import Problem
from ..registry import SolverOutput, register
from ..errors import OptionError
from .common import positive_int
from .pipeline import Effort, run_pipeline
from .portfolio import run_portfolio


START_NAMES = ("kk", "lpt", "rr")


def parse_starts(starts) -> tuple[str, ...]:
    """"kk,lpt" or ["kk", "lpt"] -> ("kk", "lpt"): the constructions the swap search starts from."""
    names = starts.split(",") if isinstance(starts, str) else starts
    try:
        names = tuple(str(n).strip() for n in names)
    except TypeError:
        raise OptionError("starts", f"must be a comma-separated string or a list, got {starts!r}") from None
    bad = [n for n in names if n not in START_NAMES]
    if not names or bad:
        raise OptionError("starts", f"must name constructions among {', '.join(START_NAMES)}, got {starts!r}")
    return names


@register("kk_swap", kind="heuristic",
          description="greedy counts; balanced Karmarkar-Karp packing + 1-1/2-2 swap local search")
def solve_kk_swap(problem: Problem, *, policy: str = "auto", nodup: bool = False, relax: int = 0,
                  steps: int = 8, starts: str = "kk") -> SolverOutput:
    effort = Effort(steps=positive_int(steps, "steps"), starts=parse_starts(starts))
    return run_pipeline(problem, policy=policy, nodup=nodup, relax=relax, effort=effort)


@register("joint", kind="heuristic",
          description="replica counts searched with the packing in the loop, then KK + swaps")
def solve_joint(problem: Problem, *, policy: str = "auto", nodup: bool = False, relax: int = 0,
                steps: int = 8, rounds: int = 32, width: int = 4, starts: str = "kk") -> SolverOutput:
    effort = Effort(steps=positive_int(steps, "steps"), starts=parse_starts(starts), joint=True,
                    joint_rounds=positive_int(rounds, "rounds"), joint_width=positive_int(width, "width", 1))
    return run_pipeline(problem, policy=policy, nodup=nodup, relax=relax, effort=effort)


@register("best", kind="heuristic",
          description="portfolio: the heuristic ladder within a time budget, best plan per layer")
def solve_best(problem: Problem, *, policy: str = "auto", nodup: bool = False, relax: int = 0,
               time_budget: float = 1.0, exact: str = "none") -> SolverOutput:
    """``exact``: "none" or an exact solver ("cpsat", "highs", "cbc") that gets the time left
    after the heuristic ladder, warm-started from the best plan (its proven bound is returned)."""
    return run_portfolio(problem, policy=policy, nodup=nodup, relax=relax, time_budget=time_budget,
                         exact=exact)
