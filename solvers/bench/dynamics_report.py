"""The dynamics table of ``summary.md``: moves, bytes and realised imbalance per rebalancing setting.

Rows of the ``dynamics`` suite (``store.is_dynamics``) replay a trace under a setting; for
each trace, solver and trigger (period or threshold, planning window) the migration-aware
settings are compared with plain re-planning: how many times fewer bytes they move and how
much higher their realised mean imbalance is.
"""
from __future__ import annotations

import math
from typing import Any

import pandas as pd

from .store import is_dynamics

DEFINITION = (
    "Each run replays a trace step by step (`solvers.dynamics.simulate`): the plan in force is scored "
    "on every step's loads (even split, shared scorer); a rebalance re-plans on the last `window` steps, "
    "every N steps or after a step whose realised imbalance passes a threshold, plainly or keeping the "
    "fewest moves within a migration slack of a fresh plan's balance (`slack X, budget F`: layers that save "
    "the most moves take wider slacks until a rebalance moves at most F x a fresh plan's moves). **Realised imbalance**: mean over "
    "layers of max / mean GPU load per step; mean and p99 over the scored steps. **Moves**: (layer, GPU, "
    "expert) pairs a GPU did not hold before, summed over rebalances; **GB moved** = moves x the model's "
    "expert size. **Tokens lost**: sum over steps and layers of (max - mean) x GPUs. **Fewer bytes** and "
    "**vs plain**: against plain re-planning with the same trace, solver, trigger and window.")


def split_dynamics(df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(solver rows, dynamics rows) of a results table."""
    mask = is_dynamics(df)
    return df[~mask], df[mask]


def _trace_label(r: Any) -> str:
    if r.trace and r.trace != "generated":
        return str(r.trace)
    return f"{r.model} {r.scenario} (generated, {int(r.num_layers)} layers, seed {int(r.seed)})"


def _trigger(r: Any) -> str:
    if pd.notna(r.every):
        return f"every {int(r.every)}"
    return f"threshold {float(r.threshold):g}"


def _num(v: Any, fmt: str) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return format(v, fmt)


def dynamics_rows(df: pd.DataFrame) -> list[dict[str, Any]]:
    """One record per dynamics run with the comparison against plain re-planning."""
    dyn = df[is_dynamics(df)]
    out = []
    for r in dyn.itertuples(index=False):
        rec = {"trace": _trace_label(r), "cluster": f"{int(r.num_gpus)} GPUs, {int(r.num_replicas)} slots",
               "solver": r.solver, "trigger": _trigger(r), "window": int(r.window),
               "slack": "plain" if pd.isna(r.migration_slack) else f"{r.migration_slack:g}"
               + ("" if pd.isna(getattr(r, "migration_budget", math.nan)) else f", budget {r.migration_budget:g}"),
               "status": r.termination, "rebalances": r.rebalances, "moves": r.total_moves,
               "gb": r.total_bytes / 1e9 if pd.notna(r.total_bytes) else math.nan,
               "mean": r.realised_imbalance_mean, "p99": r.realised_imbalance_p99,
               "tokens_lost": r.tokens_lost, "wall": r.wall_time_s, "_key": (r.instance, int(r.seed), r.solver,
                                                                            _trigger(r), int(r.window)),
               "_bytes": r.total_bytes if pd.notna(r.total_bytes) else r.total_moves}
        out.append(rec)
    plain = {rec["_key"]: rec for rec in out if rec["slack"] == "plain" and rec["status"] == "simulated"}
    for rec in out:
        base = plain.get(rec["_key"])
        rec["fewer_bytes"] = rec["vs_plain"] = math.nan
        if base is not None and rec["status"] == "simulated":
            rec["fewer_bytes"] = base["_bytes"] / rec["_bytes"] if rec["_bytes"] else math.inf
            rec["vs_plain"] = rec["mean"] / base["mean"] - 1
    out.sort(key=lambda x: (x["trace"], x["cluster"], x["solver"], x["trigger"], x["window"],
                            x["slack"] != "plain", x["slack"]))
    return out


def dynamics_section(df: pd.DataFrame) -> str:
    """The ``## Dynamics`` section of summary.md ("" when the table has no dynamics rows)."""
    rows = dynamics_rows(df)
    if not rows:
        return ""
    lines = ["## Dynamics: moves, bytes and realised imbalance per rebalancing setting", "", DEFINITION, "",
             "| trace | cluster | solver | trigger | window | migration | rebalances | moves | GB moved | fewer bytes "
             "| realised mean | vs plain | p99 | tokens lost | wall s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cells = [r["trace"], r["cluster"], r["solver"], r["trigger"], r["window"], r["slack"]]
        if r["status"] != "simulated":      # a failed replay: its status, no numbers
            cells += [r["status"]] + ["-"] * 8
        else:
            cells += [int(r["rebalances"]), int(r["moves"]), _num(r["gb"], ".1f"),
                      _num(r["fewer_bytes"], ".2f") + ("x" if math.isfinite(r["fewer_bytes"]) else ""),
                      f"{r['mean']:.4f}",
                      _num(100 * r["vs_plain"], "+.2f") + (" %" if math.isfinite(r["vs_plain"]) else ""),
                      f"{r['p99']:.4f}", f"{r['tokens_lost']:.3g}", f"{r['wall']:.2f}"]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def summary_head(meta: dict[str, Any], what: str) -> list[str]:
    """The title and first line of summary.md: ``what`` ran, on which executor, machine and commit."""
    s = meta.get("settings", {})
    load = meta.get("machine", {}).get("load_average_at_start")
    load_text = f" (load average {load[0]:.2f} at start)" if load else ""
    return [f"# Benchmark summary: suite `{s.get('suite', '?')}`", "",
            f"{what}; executor {s.get('executor')}, {s.get('jobs')} job(s), {s.get('threads')} thread(s) per job; "
            f"machine {meta.get('machine', {}).get('summary', '?')}{load_text}; commit "
            f"{meta.get('git', {}).get('commit', '?')[:12]}."]


def dynamics_summary(df: pd.DataFrame, meta: dict[str, Any]) -> str:
    """summary.md of a run with dynamics rows only."""
    dyn = df[is_dynamics(df)]
    lines = summary_head(meta, f"{len(dyn)} replays of {dyn['instance'].nunique()} traces") + [""]
    return "\n".join(lines) + "\n" + dynamics_section(df)
