"""Sweep rebalancing settings: the frontier of bytes moved against realised imbalance.

Every combination of a trigger (a period, or an imbalance threshold) and a migration
slack (None = plain re-planning) is simulated on the same trace; a setting is on the
frontier when no other setting moves fewer bytes at a lower-or-equal realised mean
imbalance. :func:`suggest` picks, within a byte budget, the setting with the lowest mean
imbalance (fewest bytes on ties).

With an expert size every row also has its stalls and net throughput (the simulator's
time model over the cluster's network); ``stall_aware`` adds a row per slack for the
stall-aware trigger (checked at the smallest period, rebalancing only when the predicted
gain exceeds the stall), and :func:`best_net` picks the setting with the highest net throughput.
"""
from __future__ import annotations

from typing import Any, Sequence

from ..errors import OptionError
from ..progress import Ticker, as_mode
from .replay import Settings, simulate


def sweep(loads: Any, settings: Settings | None = None, *, periods: Sequence[int] = (),
          thresholds: Sequence[float] = (), slacks: Sequence[float | None] = (None,), stall_aware: bool = False,
          progress: bool = False, **kw: Any) -> list[dict[str, Any]]:
    """One row per setting: trigger ("every N", "threshold X" or "stall-aware"), every,
    threshold, stall_aware, window, migration_slack, then the totals of
    :meth:`SimulationResult.totals`. ``settings`` and ``kw`` (settings by name, the cluster or
    num_replicas, num_nodes, num_gpus, and num_groups) go to every :func:`simulate`; each row
    sets its trigger and slack. A stall-aware row is checked at the smallest period."""
    triggers = ([("every", int(p)) for p in periods] + [("threshold", float(x)) for x in thresholds]
                + ([("stall-aware", None)] if stall_aware else []))
    if not triggers:
        raise OptionError("periods", "give at least one period or threshold to sweep")
    if stall_aware and not periods:
        raise OptionError("stall_aware", "stall-aware rows check at the smallest period: give periods too")
    rows = []
    with Ticker("sweep", None, as_mode(progress), total=len(triggers) * len(slacks), unit="settings") as bar:
        for kind, value in triggers:
            trigger = {"every": value if kind == "every" else min(periods) if kind == "stall-aware" else None,
                       "threshold": value if kind == "threshold" else None, "stall_aware": kind == "stall-aware"}
            for slack in slacks:
                res = simulate(loads, settings, **{**kw, **trigger, "migration_slack": slack})
                rows.append({"trigger": kind if value is None else f"{kind} {value:g}",
                             "every": trigger["every"], "threshold": trigger["threshold"],
                             "stall_aware": trigger["stall_aware"], "window": res.settings["window"],
                             "migration_slack": slack, **res.totals()})
                bar.update()
    return rows


def best_net(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The setting with the highest net throughput (serving and stalls; None without stalls)."""
    timed = [r for r in rows if r.get("stall_seconds") is not None]
    return max(timed, key=lambda r: (r["net_throughput"], -_cost(r))) if timed else None


def _cost(row: dict[str, Any]) -> float:
    return row["total_bytes"] if row["total_bytes"] is not None else row["total_moves"]


def frontier(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows no other row beats on both bytes (moves without a size) and mean imbalance,
    sorted by bytes."""
    ordered = sorted(rows, key=lambda r: (_cost(r), r["mean_imbalance"]))
    out, best = [], float("inf")
    for r in ordered:
        if r["mean_imbalance"] < best:
            out.append(r)
            best = r["mean_imbalance"]
    return out


def suggest(rows: list[dict[str, Any]], byte_budget: float) -> dict[str, Any] | None:
    """The setting with the lowest realised mean imbalance moving at most ``byte_budget``
    bytes (moves when rows have no bytes); None when none fits."""
    fits = [r for r in rows if _cost(r) <= byte_budget]
    return min(fits, key=lambda r: (r["mean_imbalance"], _cost(r))) if fits else None


def frontier_table(rows: list[dict[str, Any]]) -> str:
    """Markdown table of sweep rows (frontier rows marked). Background (async) copies stall
    nothing but slow serving down: their cost has its own column, so stall 0 is not mistaken
    for free."""
    front = {id(r) for r in frontier(rows)}
    best = best_net(rows)
    interference = any(r.get("interference_seconds") for r in rows)
    extra = " interference s |" if interference else ""
    out = ["| trigger | slack | rebalances | moves | GB moved | mean imbalance | p99 | stall s |" + extra
           + " net efficiency | frontier |", "|---|---|---|---|---|---|---|---|" + ("---|" if interference else "")
           + "---|---|"]
    for r in sorted(rows, key=_cost):
        gb = "-" if r["total_bytes"] is None else f"{r['total_bytes'] / 1e9:.1f}"
        slack = "plain" if r["migration_slack"] is None else f"{r['migration_slack']:g}"
        stall = "-" if r.get("stall_seconds") is None else f"{r['stall_seconds']:.3g}"
        inter = f" {r.get('interference_seconds') or 0:.3g} |" if interference else ""
        net = "-" if r.get("stall_seconds") is None else f"{r['net_efficiency']:.4f}{' (best)' if r is best else ''}"
        out.append(f"| {r['trigger']} | {slack} | {r['rebalances']} | {r['total_moves']} | {gb} | "
                   f"{r['mean_imbalance']:.4f} | {r['p99_imbalance']:.4f} | {stall} |{inter} {net} | "
                   f"{'*' if id(r) in front else ''} |")
    return "\n".join(out)
