"""Which solver for my loads: run several solvers on the same problem and tabulate them.

    rows = compare_solvers(problem, ["deepseek", "kk_swap", "best"], holdout=problem_next)
    choice, reason = pick(rows)

Every row is graded by the shared scorer through :func:`solvers.solve`; the held-out
window (loads of later steps, same cluster) shows how each plan does out of sample.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Sequence

import torch

from . import builtin  # noqa: F401  registers every solver a comparison may name
from .bounds import structure_bound
from .errors import OptionError
from .plan import Plan
from .problem import Problem
from .registry import get_solver
from .result import ratio_gap
from .routing.trace import RoutingTrace
from .scoring import score, with_traffic
from .solve import solve

DEFAULT_SOLVERS = ("deepseek", "kk_swap", "joint", "best")
COLUMNS = ("solver", "policy", "termination", "status", "wall_time_s", "imbalance_mean", "imbalance_worst",
           "holdout_imbalance_mean", "holdout_imbalance_worst", "gap_mean", "gap_max", "gap_in_policy_mean",
           "off_node_share_mean", "duplicates", "moves", "moves_bytes", "remote_nodes_mean", "remote_nodes_p99",
           "inter_node_bytes", "intra_node_bytes", "message")


def solver_options(name: str, common: dict[str, Any], time_limit: float | None) -> dict[str, Any]:
    """The options of ``common`` that solver ``name`` declares, plus its time limit option."""
    spec = get_solver(name)
    opts = {k: v for k, v in common.items() if k in spec.options}
    if time_limit is not None:
        for o in spec.schema:
            if o.role == "time_limit":
                opts[o.name] = time_limit
    return opts


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
                    on_progress: Callable[[str, str, dict[str, Any] | None], None] | None = None,
                    routing: RoutingTrace | None = None, token_bytes: int | None = None,
                    ) -> list[dict[str, Any]]:
    """One row per (solver, policy): time, in-sample and held-out imbalance, gaps, moves.

    holdout: the same cluster on later loads ([layers, experts] of the held-out window).
    options: applied to each solver that declares them; time_limit: to each solver's
    time-limit option. on_progress(solver, policy, row or None) is called before (None)
    and after each run. routing: a per-token routing trace: every plan's dispatch traffic
    joins its row (remote nodes per token, inter- and intra-node bytes), and solvers that
    declare a ``routing`` option receive it.
    """
    if holdout is not None and (holdout.num_layers, holdout.num_experts) != (problem.num_layers, problem.num_experts):
        raise OptionError("holdout", f"has shape ({holdout.num_layers}, {holdout.num_experts}), the loads "
                          f"({problem.num_layers}, {problem.num_experts})")
    names = list(solvers)
    if not names:
        raise OptionError("solvers", "name at least one solver")
    for n in names:
        spec = get_solver(n)
        if not spec.is_available():
            raise OptionError("solvers", f"{n!r} is not available here: {spec.requires}")
    rows = []
    for name, policy in planned_runs(problem, names, policies):
        opts = solver_options(name, {**(options or {}), **({"routing": routing} if routing is not None else {})},
                              time_limit)
        if policy is not None:
            opts["policy"] = policy
        if on_progress:
            on_progress(name, policy or "-", None)
        res = solve(problem, name, previous=previous, expert_bytes=expert_bytes, **opts)
        row: dict[str, Any] = {"solver": name, "policy": res.policy, "termination": str(res.termination),
                               "status": str(res.status), "wall_time_s": res.wall_time, "message": res.message}
        if res.score is not None:
            m = res.score.metrics()
            within = torch.maximum(structure_bound(problem, res.plan), res.lower_bound)
            row.update(imbalance_mean=m["imbalance_mean"], imbalance_worst=m["imbalance_worst"],
                       gap_mean=res.gap_mean, gap_max=res.gap_max,
                       gap_in_policy_mean=float(ratio_gap(res.objective, within).mean()),
                       off_node_share_mean=m.get("off_node_share_mean"), duplicates=m["duplicates"],
                       moves=m.get("moves"), moves_bytes=m.get("moves_bytes"))
            if routing is not None:
                t = with_traffic(res.score, res.plan, problem, routing, token_bytes).summary
                row.update({k: t[k] for k in ("remote_nodes_mean", "remote_nodes_p99", "inter_node_bytes",
                                              "intra_node_bytes")})
            if holdout is not None:
                h = score(holdout, res.plan)
                row.update(holdout_imbalance_mean=h.imbalance_mean, holdout_imbalance_worst=h.imbalance_worst)
        row["_result"] = res
        rows.append(row)
        if on_progress:
            on_progress(name, policy or "-", row)
    return rows


def _num(v: Any) -> float:
    return math.inf if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def pick(rows: Sequence[dict[str, Any]]) -> tuple[dict[str, Any] | None, str]:
    """The row to use and why: the lowest held-out mean imbalance when there is a held-out
    window (what the plan will meet), else the lowest mean imbalance in sample; ties go to
    the faster solver."""
    planned = [r for r in rows if r.get("imbalance_mean") is not None]
    if not planned:
        return None, "no solver returned a plan"
    holdout = all(r.get("holdout_imbalance_mean") is not None for r in planned)
    key = "holdout_imbalance_mean" if holdout else "imbalance_mean"
    best = min(planned, key=lambda r: (_num(r[key]), _num(r["wall_time_s"])))
    others = sorted(_num(r[key]) for r in planned if r is not best)
    where = "on the held-out window" if holdout else "in sample (no held-out window given)"
    margin = f"; next best {others[0]:.4f}" if others else ""
    reason = (f"lowest mean imbalance {where}: {_num(best[key]):.4f}{margin}; {best['wall_time_s']:.3g} s, "
              f"policy {best['policy']}, gap to bound {100 * _num(best.get('gap_mean')):.3f}%")
    return best, reason


def table_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows with the plain columns only (for CSV and JSON)."""
    return [{c: r.get(c) for c in COLUMNS} for r in rows]
