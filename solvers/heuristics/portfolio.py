"""The portfolio ``best``: run the ladder of heuristics within a time budget, keep the best
plan per layer (never worse than DeepSeek's greedy, which runs after the first rung, in
the time it leaves: see FIRST_RUNG_SHARE for a machine too loaded for it).

With ``exact="cpsat"`` (or another registered exact solver) the ladder stops before half
the budget (leaving at least EXACT_MIN_SECONDS) and the time left goes to that solver,
warm-started from the best plan so far: its plan is kept where it is better and its
proven bound is returned (so ``solve`` reports the gap to it).
Its bound is a lower bound when its model covers every plan (global policy, duplicates
allowed); otherwise it is a model bound with its scope (the resolved policy;
duplicate-free under ``colocation="forbidden"``), the class the portfolio's plans belong to.
"""
from __future__ import annotations

from ..clock import TimeUp, clock
from ..errors import OptionError
from ..plan import Plan
from ..problem import Problem
from ..registry import SolverOutput, get_solver
from . import relaxed
from .pipeline import Effort, candidate_objective, check_common, greedy_phy2log, heuristic_phy2log, keep_best

# Rungs, cheapest first: (name, effort). Each later rung runs only while budget is left.
LADDER: tuple[tuple[str, Effort], ...] = (
    ("kk_swap", Effort()),
    ("joint", Effort(joint=True)),
    ("multi_start", Effort(steps=256, starts=("kk", "lpt"), partitions=8)),
    ("joint_deep", Effort(steps=128, starts=("kk", "lpt"), joint=True, joint_rounds=128,
                          joint_width=6, joint_steps=8, joint_pack=True, partitions=8)),
)


# Share of the budget kept back from the heuristic rungs (see run_portfolio).
BUDGET_RESERVE = 0.05

# What follows the rungs runs on the same clock as they do: keep-best, building the Plan
# and the caller's grading of it (validation, scoring, bounds). It stretches with the
# machine's load like everything else, so it is estimated from a sample of it timed now:
# building the first rung's Plan, times POST_FACTOR (64 x 512 / 640 slots / 128 GPUs: the
# sample ~6 ms, what follows ~22 ms quiet; benchmarks/time_limits.py), at least
# BUDGET_RESERVE of the budget.
POST_FACTOR = 4.0

# The first rung (kk_swap) runs first; its swap search stops at this share of the budget so
# that DeepSeek's greedy (the never-worse guarantee, ~2/3 of an uncut first rung's time)
# fits after it. The greedy stops at the rungs' deadline: on a machine too loaded for it,
# it is dropped (``info["greedy"] = "timed out"``) and the time limit wins over the guarantee.
FIRST_RUNG_SHARE = 0.5

# A later rung starts with at least this many first rungs' worth of time left (see climb).
RUNG_START_FACTOR = 3.0

# Below this many seconds left, the exact rung is not started (model building alone).
EXACT_MIN_SECONDS = 0.5

# With an exact rung, the heuristic rungs stop after this share of the budget (and early
# enough to leave EXACT_MIN_SECONDS, with a margin for the rung that ends past its
# deadline): the deep joint search alone can use any budget, and the exact solver's
# bound is what was asked for.
HEURISTIC_SHARE_WITH_EXACT = 0.5
EXACT_MARGIN = 1.1

# With ``relax``, the heuristic rungs leave this share of the budget to the relaxed pass
# that follows them (0.07-0.1 s on 8 DeepSeek-V3 layers, ~1 s on 58; it stops at the deadline).
RELAX_SHARE = 0.3


def check_exact(exact: str, relax: int, problem: Problem):
    """The exact solver's spec, or None; checks what the schema cannot (installed, no relax,
    identical GPUs: its warm-started joint model is one of load)."""
    if exact in (None, "none"):
        return None
    if not problem.cluster.homogeneous:
        raise OptionError("exact", "the exact rung of best plans identical GPUs only; use exact=none, or "
                          f"run the exact solver {exact!r} itself on this cluster")
    spec = get_solver(exact)
    if not spec.is_available():
        raise OptionError("exact", f"{exact!r} is not available here: {spec.requires}")
    if relax:
        raise OptionError("exact", "the exact models have no relaxed hierarchical mode; use relax=0")
    return spec


def run_portfolio(problem: Problem, *, policy: str, nodup: bool, relax: int,
                  time_limit: float, exact: str | None = None) -> SolverOutput:
    time_budget = time_limit
    resolved = check_common(problem, policy, nodup, relax)
    exact_spec = check_exact(exact, relax, problem)
    start = clock()
    end = start + time_budget
    cands: list = []                     # candidate phy2log [L, R], made by names[i]
    objs: list = []                      # their keep-best objectives [L]
    names: list[str] = []
    ran: list[str] = []
    rung_seconds: dict[str, float] = {}
    info: dict = {}
    todo = list(LADDER)
    last = [0.0]
    post = [time_budget * BUDGET_RESERVE]     # kept back for keep-best, the Plan and grading

    def add(name: str, p2l) -> None:
        if not cands:                    # a sample of what follows the rungs, timed now, under this load
            t0 = clock()
            Plan.from_phy2log(p2l, problem.num_experts)
            post[0] = max(post[0], POST_FACTOR * (clock() - t0))
        objs.append(candidate_objective(problem, p2l, nodup))
        cands.append(p2l)
        names.append(name)

    def rung(name: str, effort: Effort, deadline: float) -> None:
        t0 = clock()
        p2l, _ = heuristic_phy2log(problem, resolved, nodup, effort, deadline)
        rung_seconds[name] = last[0] = clock() - t0
        ran.append(name)
        add(name, p2l)

    def climb(deadline: float) -> None:
        """Run the rungs left in ``todo``, cheapest first, while ``deadline`` allows."""
        while todo:
            # A later rung stops at the deadline (a construction cut there falls back to the
            # round-robin layout, a worse start): it starts only if the time left covers the previous rung's time or, when
            # shorter, RUNG_START_FACTOR first rungs (a packing and a few swap steps: more
            # than a later rung's constructions).
            if clock() + min(last[0], RUNG_START_FACTOR * rung_seconds[ran[0]]) > deadline:
                return
            name, effort = todo.pop(0)
            rung(name, effort, deadline)

    # Rung 1 always runs (its counts cannot be cut; its differencing stops at its deadline,
    # round robin in its place: one GPU of 8192 slots has 8191 merges); its search stops at
    # FIRST_RUNG_SHARE of the budget. Then the greedy, cut where the ladder must end.
    name, effort = todo.pop(0)
    rung(name, effort, start + FIRST_RUNG_SHARE * (time_budget - post[0]))
    full = end - post[0] - (time_budget * RELAX_SHARE if relax else 0.0)     # the rungs' end
    ladder_end = full if exact_spec is None else \
        end - EXACT_MARGIN * max(time_budget * (1 - HEURISTIC_SHARE_WITH_EXACT), EXACT_MIN_SECONDS)
    try:
        t0 = clock()
        greedy = greedy_phy2log(problem, resolved, deadline=ladder_end)
        if greedy is not None:            # uneven slot counts: DeepSeek's greedy has no plan
            add("deepseek", greedy)
            rung_seconds["deepseek"] = clock() - t0
        info["greedy"] = "kept" if greedy is not None else "none"
    except TimeUp:
        info["greedy"] = "timed out"
    climb(ladder_end)
    bound = model_bound = model_scope = None
    left = end - clock()
    if exact_spec is not None and left >= EXACT_MIN_SECONDS:
        p2l, _ = keep_best(problem, cands, nodup, objs)       # the exact rung's warm start
        t0 = clock()
        opts = {"policy": resolved, "model": "joint", "colocation": "forbidden" if nodup else "allowed",
                "time_limit": left, "threads": 1, "warm_start": Plan.from_phy2log(p2l, problem.num_experts)}
        out = exact_spec.fn(problem, exact_spec.parse(opts))
        rung_seconds[exact_spec.name] = clock() - t0
        ran.append(exact_spec.name)
        if out.plan is not None:
            add(exact_spec.name, out.plan.phy2log.to(p2l.device))
        # A universal bound (global, duplicates allowed) is a lower bound; a restricted
        # model's bound (hierarchical, or duplicate-free) covers only that model's plans,
        # which the portfolio's own plans are.
        bound, model_bound, model_scope = out.bound, out.model_bound, out.model_scope
        climb(full)     # an exact solver that ended early leaves its time to the rungs not run yet
    p2l, chosen = keep_best(problem, cands, nodup, objs)
    info.update({"rungs_run": ran, "rung_seconds": rung_seconds, "reserved_seconds": post[0],
                 "layers_won": {n: int((chosen == i).sum()) for i, n in enumerate(names)}})
    if relax:        # the relaxed pass runs on the best strict plan, in the RELAX_SHARE left
        p2l, rinfo = relaxed.relax_plan(problem, p2l, relax, nodup=nodup, steps=64, deadline=end - post[0])
        info.update(rinfo)
    info["heuristic_seconds"] = clock() - start
    plan = Plan.from_phy2log(p2l, problem.num_experts)
    return SolverOutput(plan, resolved + ("+relaxed" if relax else ""), bound=bound, info=info,
                        model_bound=model_bound, model_scope=model_scope)
