"""Registration of this package's heuristics in the solver registry.

Every one takes ``policy`` ("auto" | "hierarchical" | "global"), ``colocation``
("forbidden": no two replicas of one expert on one GPU; "lpt" and "rr" starts are added) and ``relax``
(hierarchical only: how many redundant replicas per layer may live outside their group's
node; 0 = strict), and is never worse than the greedy it starts from on any layer.
``starts`` (kk_swap, joint): the constructions the swap search starts from, best kept:
"kk" (balanced differencing), "lpt" (largest first, DeepSeek's rule), "rr" (round robin).

On clusters with per-GPU speeds, uneven slot counts or failed GPUs the same pipeline
balances time (load / speed) over the live GPUs (:mod:`.pipeline`; global policy: the
hierarchical one needs identical GPUs; "kk" and "lpt" are then largest first where a
replica finishes first, "rr" Ryser's duplicate-free layout).
"""
from __future__ import annotations

from ..problem import Problem
from ..options import Option, SolverOptions, colocation_option, policy_option, time_limit_option
from ..registry import SolverOutput, register
from .pipeline import Effort, run_pipeline
from .portfolio import run_portfolio
from ..work import WorkModel


START_NAMES = ("kk", "lpt", "rr")


def parse_starts(starts: str) -> tuple[str, ...]:
    """"kk,lpt" -> ("kk", "lpt"): the constructions the swap search starts from (the schema
    has checked the names)."""
    return tuple(n.strip() for n in starts.split(","))


def _nodup(colocation: str) -> bool:
    return colocation == "forbidden"


_RELAX = Option("relax", int, 0, "hierarchical only: redundant replicas per layer allowed off their "
                "group's node (0 = strict)", minimum=0, maximum=1_000_000, advanced=True)
_STEPS = Option("steps", int, 8, "swap local-search rounds", minimum=0, maximum=100_000, advanced=True)
_STARTS = Option("starts", str, "kk", "constructions the swap search starts from, comma-separated: "
                 "kk (balanced differencing), lpt (largest first), rr (round robin)", advanced=True,
                 items=START_NAMES)
_COMMON = (policy_option(), colocation_option(), _RELAX)


# Work model (solvers.work): seconds on 2 cores, coefficients measured by
# `python -m benchmarks.work_model --fit`.
KK_SWAP_WORK = WorkModel.of({"1": 0.0296, "S": 0.000349, "R": 0, "L*R": 1.5e-05, "L*E*R": 0, "L*S^2": 7e-08, "L*R*S": 0, "L*R*C*steps": 9.92e-08})

# Work model (solvers.work): seconds on 2 cores, coefficients measured by
# `python -m benchmarks.work_model --fit`.
JOINT_WORK = WorkModel.of({"1": 0.00144, "S": 0, "R": 0, "L*R": 1.73e-05, "L*E*R": 1.72e-07, "L*S^2": 0, "L*R*S": 0, "L*R*C*steps": 1.26e-07, "L*R*C*rounds*width": 0}, includes=("kk_swap",))

# Work model (solvers.work): seconds on 2 cores, coefficients measured by
# `python -m benchmarks.work_model --fit`.
BEST_WORK = WorkModel.of({"1": 0, "S": 0, "R": 0, "L*R": 0, "L*E*R": 0, "L*S^2": 0, "L*R*S": 0}, time_limited=True, includes=("kk_swap",))


@register("kk_swap", kind="heuristic", options=_COMMON + (_STEPS, _STARTS), heterogeneous=True, work=KK_SWAP_WORK,
          description="greedy counts; balanced Karmarkar-Karp packing + 1-1/2-2 swap local search")
def solve_kk_swap(problem: Problem, o: SolverOptions) -> SolverOutput:
    effort = Effort(steps=o.steps, starts=parse_starts(o.starts))
    return run_pipeline(problem, policy=o.policy, nodup=_nodup(o.colocation), relax=o.relax, effort=effort)


@register("joint", kind="heuristic", work=JOINT_WORK,
          options=_COMMON + (_STEPS,
                             Option("rounds", int, 32, "count-search rounds", minimum=1, maximum=100_000,
                                    advanced=True),
                             Option("width", int, 4, "count-search beam width", minimum=1, maximum=1000,
                                    advanced=True),
                             _STARTS), heterogeneous=True,
          description="replica counts searched with the packing in the loop, then KK + swaps")
def solve_joint(problem: Problem, o: SolverOptions) -> SolverOutput:
    effort = Effort(steps=o.steps, starts=parse_starts(o.starts), joint=True, joint_rounds=o.rounds,
                    joint_width=o.width)
    return run_pipeline(problem, policy=o.policy, nodup=_nodup(o.colocation), relax=o.relax, effort=effort)


@register("best", kind="heuristic", work=BEST_WORK,
          options=_COMMON + (time_limit_option(1.0, "seconds for the whole portfolio (the exact rung "
                                               "included)"),
                             Option("exact", str, "none", "exact solver warm-started from the best plan: the ladder "
                                    "stops before half the time limit (at least 0.5 s left to it), and the "
                                    "time it leaves goes to rungs not run yet", choices=("none", "cpsat", "highs", "cbc"))),
          heterogeneous=True,
          description="portfolio: the heuristic ladder within a time limit, best plan per layer")
def solve_best(problem: Problem, o: SolverOptions) -> SolverOutput:
    """``exact``: "none" or an exact solver ("cpsat", "highs", "cbc") that gets the time left
    after the heuristic ladder, warm-started from the best plan (its proven bound is returned)."""
    return run_portfolio(problem, policy=o.policy, nodup=_nodup(o.colocation), relax=o.relax,
                         time_limit=o.time_limit, exact=o.exact)
