"""Moves against balance: a sweep of slack values, as a table and a figure.

Each point is a migration-aware plan graded by the shared scorer; the fresh plan and its
relabelled version are the two reference points (the most balanced, the most moves).
"""
from __future__ import annotations

from typing import Any, Sequence

from solvers.elastic.solver import check_elastic
from solvers.errors import OptionError
from solvers.plan import Plan
from solvers.problem import Problem
from solvers.registry import run
from solvers.replan import plan_with_migration, relabel
from solvers.scoring import score

DEFAULT_SLACKS = (0.0, 0.005, 0.01, 0.02, 0.03, 0.05, 0.1)


def _row(label: str, slack: float | None, sc, total_slots: int, expert_bytes: int | None) -> dict[str, Any]:
    return {"plan": label, "slack": slack, "moves": sc.moves, "moved_share": sc.moves / total_slots,
            "bytes": None if expert_bytes is None else sc.moves * int(expert_bytes),
            "max_load_sum": float(sc.max_load.sum()), "imbalance_mean": sc.imbalance_mean,
            "imbalance_worst": sc.imbalance_worst}


def pareto(problem: Problem, solver: str, previous: Plan, slacks: Sequence[float] = DEFAULT_SLACKS, *,
           method: str = "heuristic", time_limit: float = 10.0, expert_bytes: int | None = None,
           **solver_options: Any) -> list[dict[str, Any]]:
    """One row per plan: the fresh plan, its relabelling, then a migration-aware plan per slack.

    Row keys: plan, slack, moves, moved_share (of all layer x slot replicas), bytes (with
    ``expert_bytes``), max_load_sum, imbalance_mean, imbalance_worst (shared scorer).
    """
    previous, _ = check_elastic(problem, previous, problem.cluster)
    total = problem.num_layers * problem.num_replicas
    fresh = run(problem, solver, solver_options)
    if fresh.plan is None:
        raise OptionError("solver", f"{solver!r} found no plan ({fresh.termination}): {fresh.message}")
    rows = [_row("fresh", None, score(problem, fresh.plan, previous=previous), total, expert_bytes)]
    nodes = problem.num_nodes if fresh.policy == "hierarchical" else 1
    rel = relabel(fresh.plan, previous, problem.num_gpus, nodes)
    rows.append(_row("relabelled", None, score(problem, rel, previous=previous), total, expert_bytes))
    for slack in slacks:
        res = plan_with_migration(problem, solver, previous, slack=slack, method=method, time_limit=time_limit,
                                  **solver_options)
        rows.append(_row(f"migration {method}", float(slack), res.score, total, expert_bytes))
    return rows


def pareto_table(rows: list[dict[str, Any]]) -> str:
    """Markdown table of :func:`pareto` rows."""
    head = "| plan | slack | moves | moved | GB | sum of max loads | imbalance mean | worst |"
    out = [head, "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        gb = "-" if r["bytes"] is None else f"{r['bytes'] / 1e9:.1f}"
        slack = "-" if r["slack"] is None else f"{r['slack']:g}"
        out.append(f"| {r['plan']} | {slack} | {r['moves']} | {100 * r['moved_share']:.1f} % | {gb} | "
                   f"{r['max_load_sum']:.6g} | {r['imbalance_mean']:.4f} | {r['imbalance_worst']:.4f} |")
    return "\n".join(out)


def pareto_figure(rows: list[dict[str, Any]]):
    """A plotly figure: replicas moved (x) against mean imbalance (y), one marker per plan."""
    import plotly.graph_objects as go

    fig = go.Figure()
    sweep = [r for r in rows if r["slack"] is not None]
    fig.add_trace(go.Scatter(x=[100 * r["moved_share"] for r in sweep], y=[r["imbalance_mean"] for r in sweep],
                             mode="lines+markers+text", text=[f"slack {r['slack']:g}" for r in sweep],
                             textposition="top right", name="migration-aware"))
    for r in rows:
        if r["slack"] is None:
            fig.add_trace(go.Scatter(x=[100 * r["moved_share"]], y=[r["imbalance_mean"]], mode="markers",
                                     marker={"size": 11, "symbol": "diamond"}, name=r["plan"]))
    fig.update_layout(title="Replicas moved against balance", xaxis_title="replicas moved (% of all slots)",
                      yaxis_title="mean imbalance (max / mean GPU load)", template="plotly_white")
    return fig
