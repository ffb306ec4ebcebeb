"""The portfolio ``best``: run the ladder of heuristics within a time budget, keep the best
plan per layer (never worse than DeepSeek's greedy, which is rung 0)."""
from __future__ import annotations

import time

from ..plan import Plan
from ..problem import Problem
from ..registry import SolverOutput
from .common import positive_float
from .pipeline import Effort, check_common, greedy_phy2log, heuristic_phy2log, keep_best

# Rungs, cheapest first: (name, effort). Each later rung runs only while budget is left.
LADDER: tuple[tuple[str, Effort], ...] = (
    ("kk_swap", Effort()),
    ("joint", Effort(joint=True)),
    ("multi_start", Effort(steps=256, starts=("kk", "lpt"), partitions=8)),
    ("joint_deep", Effort(steps=128, starts=("kk", "lpt"), joint=True, joint_rounds=128,
                          joint_width=6, joint_steps=8, joint_pack=True, partitions=8)),
)


def run_portfolio(problem: Problem, *, policy: str, nodup: bool, relax: int,
                  time_budget: float) -> SolverOutput:
    time_budget = positive_float(time_budget, "time_budget")
    resolved = check_common(problem, policy, nodup, relax)
    start = time.perf_counter()
    deadline = start + time_budget
    cands = [greedy_phy2log(problem, resolved)]
    names = ["deepseek"]
    rung_seconds = {}
    for name, effort in LADDER:
        if names[1:] and time.perf_counter() >= deadline:     # the first rung always runs
            break
        t0 = time.perf_counter()
        p2l, _ = heuristic_phy2log(problem, resolved, nodup, effort, deadline)
        rung_seconds[name] = time.perf_counter() - t0
        cands.append(p2l)
        names.append(name)
    p2l, chosen = keep_best(problem, cands, nodup)
    info = {"rungs_run": names[1:], "rung_seconds": rung_seconds,
            "layers_won": {n: int((chosen == i).sum()) for i, n in enumerate(names)}}
    if relax:
        from .relaxed import relax_plan
        p2l, rinfo = relax_plan(problem, p2l, relax, nodup=nodup, steps=256)
        info.update(rinfo)
    info["heuristic_seconds"] = time.perf_counter() - start
    plan = Plan.from_phy2log(p2l, problem.num_experts)
    return SolverOutput(plan, resolved + ("+relaxed" if relax else ""), info=info)
