"""Which solver for my loads: run several solvers on the same problem and tabulate them.

    rows = compare_solvers(problem, ["deepseek", "kk_swap", "best"], holdout=problem_next)
    rows = compare_solvers(problem, ["deepseek", "risk_aware"], holdout=problem_next,
                           history=window_steps, holdout_steps=next_steps)
    choice, reason = pick(rows)

Every row is graded by the shared scorer through :func:`solvers.solve`; the held-out
window (loads of later steps, same cluster) shows how each plan does out of sample. With
the held-out steps one by one (``holdout_steps``) each plan is also scored per step (sum over
steps of the busiest GPU / sum of the mean, what a served plan meets): that column comes
first and :func:`pick` ranks by it. ``history`` (the in-sample window's steps) goes to every
solver that takes it (the time-robust and out-of-sample planners).
"""
from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Sequence

import torch

from . import builtin  # noqa: F401  registers every solver a comparison may name
from .errors import EPLBError, OptionError
from .plan import Plan
from .problem import Problem
from .registry import get_solver
from .routing.trace import RoutingTrace
from .evaluate import score
from .scoring import Score
from .traffic import with_traffic
from .cluster import Cluster
from .solver_call import solver_call
from .units import format_bytes

DEFAULT_SOLVERS = ("deepseek", "kk_swap", "joint", "best")
# Judged on held-out steps, the planner of the window's steps is the one to beat: the
# in-sample winners (kk_swap, best) balance the past and hold worst on drifting loads.
HOLDOUT_SOLVERS = ("risk_aware",)


def default_solvers(*, holdout: bool = False, routing: bool = False, previous: bool = False) -> list[str]:
    """The solvers a comparison runs when the user names none: the planner of the window's
    steps joins when there are held-out steps, the traffic-aware one when there is a trace,
    the migration-aware re-planner when there is a plan in force."""
    return (list(DEFAULT_SOLVERS) + (list(HOLDOUT_SOLVERS) if holdout else []) + (["traffic_aware"] if routing else [])
            + (["migration"] if previous else []))


COLUMNS = ("solver", "policy", "holdout_step_imbalance_mean", "holdout_step_imbalance_worst", "termination", "status",
           "wall_time_s", "imbalance_mean", "imbalance_worst", "holdout_imbalance_mean", "holdout_imbalance_worst",
           "gap_mean", "gap_max", "gap_in_policy_mean",
           "off_node_share_mean", "duplicates", "moves", "moves_bytes", "remote_nodes_mean", "remote_nodes_p99",
           "inter_node_bytes", "intra_node_bytes", "message")
# On a cluster with per-GPU speeds the rows also carry the imbalance in time (max time over
# W / total speed), and the pick goes by it: time is what the cluster pays.
TIME_COLUMNS = ("holdout_step_time_imbalance_mean", "holdout_step_time_imbalance_worst", "time_imbalance_mean",
                "time_imbalance_worst", "holdout_time_imbalance_mean", "holdout_time_imbalance_worst")


def planned_runs(problem: Problem, solvers: Sequence[str], policies: Iterable[str]) -> list[tuple[str, str | None]]:
    """The (solver, resolved policy) pairs to run: "auto" may equal an explicit policy, and
    a solver without a policy option runs once (None). A policy the shape cannot take
    raises up front."""
    resolved = list(dict.fromkeys(problem.resolve_policy(p) for p in policies))
    return [(n, p) for n in solvers for p in (resolved if "policy" in get_solver(n).options else [None])]


def compare_solvers(problem: Problem, solvers: Sequence[str] = DEFAULT_SOLVERS, *,
                    policies: Iterable[str] = ("auto",), holdout: Problem | None = None,
                    previous: Plan | None = None, expert_bytes: int | None = None,
                    options: dict[str, Any] | None = None, time_limit: float | None = None,
                    history: Any = None, holdout_steps: Any = None,
                    on_progress: Callable[[str, str, dict[str, Any] | None], None] | None = None,
                    routing: RoutingTrace | None = None, token_bytes: int | None = None,
                    previous_cluster: Cluster | None = None, slack: float | None = None,
                    ) -> list[dict[str, Any]]:
    """One row per (solver, policy): time, in-sample and held-out imbalance, gaps, moves.

    holdout: the same cluster on later loads ([layers, experts] of the held-out window).
    holdout_steps: those loads step by step [steps, layers, experts] (needs ``holdout``): adds
    the per-step held-out imbalance. history: the in-sample window's steps [steps, layers,
    experts], given to every solver with a ``history`` option when it has more than one step
    (:func:`solvers.solver_call.solver_call`, the call ``eplb plan`` builds too).
    previous / previous_cluster: the plan in force (and the cluster it was made for, when GPUs
    failed since): moves in every row; the re-planners (``migration``) plan from it, within
    ``slack`` (their own default when None).
    options: applied to each solver that declares them; time_limit: to each solver's
    time-limit option. on_progress(solver, policy, row or None) is called before (None)
    and after each run. routing: a per-token routing trace: every plan's dispatch traffic
    joins its row (remote nodes per token, inter- and intra-node bytes), and solvers that
    declare a ``routing`` option receive it.
    """
    if holdout is not None and (holdout.num_layers, holdout.num_experts) != (problem.num_layers, problem.num_experts):
        raise OptionError("holdout", f"has shape ({holdout.num_layers}, {holdout.num_experts}), the loads "
                          f"({problem.num_layers}, {problem.num_experts})")
    if holdout_steps is not None:
        if holdout is None:
            raise OptionError("holdout_steps", "needs the held-out problem (holdout) too")
        holdout_steps = torch.as_tensor(holdout_steps)
        if holdout_steps.dim() != 3 or tuple(holdout_steps.shape[1:]) != (holdout.num_layers, holdout.num_experts):
            raise OptionError("holdout_steps", f"must have shape [steps, {holdout.num_layers}, "
                              f"{holdout.num_experts}], got {tuple(holdout_steps.shape)}")
    names = list(solvers)
    if not names:
        raise OptionError("solvers", "name at least one solver")
    for n in names:
        spec = get_solver(n)
        if not spec.is_available():
            raise OptionError("solvers", f"{n!r} is not available here: {spec.requires}")
    declared = {k for n in names for k in get_solver(n).options}
    unknown = sorted(set(options or {}) - declared)
    if unknown:
        raise OptionError(unknown[0], f"is not an option of any solver compared ({', '.join(names)})")
    runs = []
    for name, policy in planned_runs(problem, names, policies):
        # the one call builder of every front end (solvers.solver_call): `eplb plan` gets the same
        call = solver_call(problem, name, steps=history, routing=routing, options=options, policy=policy,
                           time_limit=time_limit, previous=previous, previous_cluster=previous_cluster,
                           slack=slack, expert_bytes=expert_bytes, strict=False)
        spec = get_solver(name)
        if "routing" in spec.options and call.options.get("routing") is None:     # not after the others ran
            raise OptionError("routing", f"{name} plans on a per-token routing trace: give one (eplb compare "
                              f"--routing FILE)")
        # every run's options and work cap checked before the first one runs
        spec.check_work(problem, spec.parse(call.options))
        runs.append((name, policy, call))
    report = on_progress or (lambda *args: None)
    rows = []
    for name, policy, call in runs:
        report(name, policy or "-", None)
        try:
            res = call.run()
        except EPLBError as exc:
            # a solver for identical GPUs on a real cluster: a row saying so, not an abort
            if problem.cluster.homogeneous or exc.param not in ("solver", "gpu_slots"):
                raise
            row = {"solver": name, "policy": policy or "-", "termination": "refused", "status": "none",
                   "wall_time_s": None, "message": str(exc)}
            rows.append(row)
            report(name, policy or "-", row)
            continue
        row = res.summary(holdout=None if holdout is None or res.plan is None else score(holdout, res.plan))
        row["solver"] = name                      # the name compared (a re-planner's row says so too)
        if holdout_steps is not None and res.plan is not None:
            row.update(holdout_step_columns(score(holdout, res.plan, tokens=holdout_steps)))
        if routing is not None and res.plan is not None:
            t = with_traffic(res.score, res.plan, problem, routing, token_bytes).summary
            row.update({k: t[k] for k in ("remote_nodes_mean", "remote_nodes_p99", "inter_node_bytes",
                                          "intra_node_bytes")})
        row["_result"] = res
        row["_call"] = call
        rows.append(row)
        report(name, policy or "-", row)
    return rows


def holdout_step_columns(per_step: Score) -> dict[str, float]:
    """The row's per-step held-out columns from a plan scored on the held-out steps one by one
    (``score(holdout, plan, tokens=steps)``): imbalance in tokens and, on GPUs of different
    speeds, in time (each step's max GPU time over its ideal), what the pick goes by there."""
    cols = {"holdout_step_imbalance_mean": per_step.imbalance_mean,
            "holdout_step_imbalance_worst": per_step.imbalance_worst}
    if "time_imbalance_mean" in per_step.summary:
        cols.update(holdout_step_time_imbalance_mean=per_step.summary["time_imbalance_mean"],
                    holdout_step_time_imbalance_worst=per_step.summary["time_imbalance_worst"])
    return cols


def _num(v: Any) -> float:
    return math.inf if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


# With a plan in force, moves cost: a plan is picked for less imbalance only when it beats the
# fewest-moves plan within this slack by more than the slack (the migration solver's own rule:
# max load within (1 + slack) x the fresh plan's). `eplb compare --migration-slack` sets it.
DEFAULT_MOVE_SLACK = 0.01


def _label(r: dict[str, Any]) -> str:
    """``kk_swap (global)``; a row already named so (the app's table) keeps its name."""
    if r.get("policy") in (None, "-") or str(r["solver"]).endswith(f" ({r['policy']})"):
        return r["solver"]
    return f"{r['solver']} ({r['policy']})"


def _cost(r: dict[str, Any]) -> str:
    moves = "no moves" if r.get("moves") is None else f"{int(r['moves']):,} moves"
    return moves if r.get("moves_bytes") is None else f"{moves} ({format_bytes(r['moves_bytes'])})"


def pick(rows: Sequence[dict[str, Any]], *, slack: float | None = None) -> tuple[dict[str, Any] | None, str]:
    """The row to use and why: the lowest per-step held-out imbalance when the held-out
    steps were scored one by one (what a served plan meets), else the lowest held-out
    imbalance of the window's sum, else the lowest mean imbalance in sample; ties go to the
    faster solver.

    With moves (a plan in force was given) the figure is weighed against what the move costs:
    among the rows within ``(1 + slack)`` x the lowest figure (``slack`` default
    :data:`DEFAULT_MOVE_SLACK`), the one moving the fewest bytes (moves without an expert
    size), then the lower figure. The reason names the trade-off: what the lowest-figure row
    would move, and how much better it is."""
    planned = [r for r in rows if r.get("imbalance_mean") is not None]
    if not planned:
        return None, "no solver returned a plan"
    # Time is what a cluster of GPUs of different speeds pays: there the pick goes by it.
    timed = all(r.get("time_imbalance_mean") is not None for r in planned)
    t = "time_" if timed else ""
    for key, where in ((f"holdout_step_{t}imbalance_mean", "per step on the held-out steps"),
                       (f"holdout_{t}imbalance_mean", "on the held-out window"),
                       (f"{t}imbalance_mean", "in sample (no held-out window given)")):
        if all(r.get(key) is not None for r in planned):
            break
    lowest = min(planned, key=lambda r: (_num(r[key]), _num(r["wall_time_s"])))
    best, trade = lowest, ""
    if all(r.get("moves") is not None for r in planned):
        slack = DEFAULT_MOVE_SLACK if slack is None else slack
        size = "moves_bytes" if all(r.get("moves_bytes") is not None for r in planned) else "moves"
        near = [r for r in planned if _num(r[key]) <= _num(lowest[key]) * (1 + slack)]
        best = min(near, key=lambda r: (_num(r[size]), _num(r[key]), _num(r["wall_time_s"])))
        trade = f"; {_cost(best)}, the fewest of the plans within {100 * slack:g}% of the lowest"
        if best is not lowest:
            lower = 100 * (1 - _num(lowest[key]) / _num(best[key]))
            trade += (f"; the lowest, {_label(lowest)} {_num(lowest[key]):.4f}, is {lower:.2g}% lower but "
                      f"moves {_cost(lowest)} (the slack is --migration-slack)")
        cheapest = min(planned, key=lambda r: (_num(r[size]), _num(r[key])))
        if _num(cheapest[size]) < _num(best[size]):
            higher = 100 * (_num(cheapest[key]) / _num(best[key]) - 1)
            trade += (f"; {_label(cheapest)} moves least, {_cost(cheapest)}, at {_num(cheapest[key]):.4f} "
                      f"({higher:.2g}% higher: outside the slack)")
    others = sorted((r for r in planned if r is not best), key=lambda r: (_num(r[key]), _num(r["wall_time_s"])))
    margin = f"; next best {_label(others[0])} {_num(others[0][key]):.4f}" if others and best is lowest else ""
    what = "lowest mean imbalance in time" if timed else "lowest mean imbalance"
    if best is not lowest:
        what = "mean imbalance in time" if timed else "mean imbalance"
    reason = (f"{what} {where}: {_num(best[key]):.4f}{trade}{margin}; {best['wall_time_s']:.3g} s, "
              f"gap to bound {100 * _num(best.get('gap_mean')):.3f}%")
    return best, reason


def table_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows with the plain columns only (for CSV and JSON); the time columns where any row has them."""
    cols = COLUMNS + tuple(c for c in TIME_COLUMNS if any(r.get(c) is not None for r in rows))
    return [{c: r.get(c) for c in cols} for r in rows]
