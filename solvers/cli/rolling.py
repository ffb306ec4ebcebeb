"""``eplb compare --windows K``: the ADRS / OpenEvolve EPLB benchmark's protocol over the whole
trace (plan on window i, score on window i+1), the benchmark's score beside the workbench's."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ..compare import pick
from ..errors import OptionError
from ..problem import Problem
from ..rolling import COLUMNS, rolling_compare
from ..workloads.trace import Loads
from .inputs import aligned, write_csv

WINDOW_COLUMNS = ("window", "plan_steps", "eval_steps", "solver", "policy", "termination", "status", "wall_time_s",
                  "bench_balancedness_gpu", "bench_balancedness_expert", "holdout_imbalance_mean",
                  "holdout_step_imbalance_mean", "imbalance_mean", "gap_mean", "message")


def refuse_window_flags(args: argparse.Namespace) -> None:
    """--windows scores every window on the next one: the flags of a single held-out or
    re-plan comparison are refused before anything is read."""
    for flag, value in (("holdout", args.holdout), ("previous", args.previous), ("routing", args.routing)):
        if value is not None:
            raise OptionError("windows", f"--windows scores every window on the next one; drop --{flag}")


def compare_windows(args: argparse.Namespace, info: Loads, problem: Problem, names: list[str],
                    options: dict[str, Any], policies: list[str]) -> int:
    """Run the windows protocol for ``eplb compare`` (its loads, cluster, solvers and options;
    :func:`refuse_window_flags` checked its flags)."""
    if info.matrix:
        raise OptionError("windows", f"{info.source}: needs a trace of steps ([steps, layers, experts]); "
                          f"this file holds one [layers, experts] matrix")

    def progress(i: int, count: int) -> None:
        print(f"window {i + 1}/{count}: plan on window {i}, score on window {i + 1}", file=sys.stderr, flush=True)

    table, per_window = rolling_compare(problem, info.trace, args.windows, names, policies=policies,
                                        options=options, time_limit=args.time_limit, on_window=progress)
    plain = [{c: r.get(c) for c in COLUMNS} for r in table]
    windows = [{c: r.get(c) for c in WINDOW_COLUMNS} for r in per_window]
    best, reason = pick(plain)
    pairs = plain[0]["windows"] if plain else 0
    protocol = {"steps": info.trace.shape[0], "window_steps": args.windows, "pairs": pairs}
    written = []
    if args.out:
        out = Path(args.out)
        if out.exists() and not out.is_dir():
            raise OptionError("out", f"{out}: exists and is not a directory")
        out.mkdir(parents=True, exist_ok=True)
        write_csv(out / "windows_summary.csv", plain, list(COLUMNS))
        write_csv(out / "windows.csv", windows, list(WINDOW_COLUMNS))
        written = [out / "windows_summary.csv", out / "windows.csv"]
    if args.json:
        print(json.dumps({"protocol": protocol, "rows": plain, "windows": windows,
                          "pick": None if best is None else {"solver": best["solver"], "policy": best["policy"]},
                          "reason": reason}, indent=2, default=str))
        return 0
    print(f"windows protocol: {protocol['steps']} steps in windows of {args.windows}; each plan made on "
          f"window i is scored on window i+1 ({pairs} pairs, means over them)")
    print(_table(plain))
    print()
    print(f"pick: {best['solver']} (policy {best['policy']}): {reason}" if best else f"pick: none: {reason}")
    if written:
        print("wrote " + " and ".join(str(p) for p in written))
    return 0


def _fmt(v: Any, pct: bool = False) -> str:
    if v is None:
        return "-"
    if pct:
        return f"{100 * v:.3f}%"
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _table(rows: list[dict]) -> str:
    cols = [("solver", "solver"), ("policy", "policy"), ("windows", "pairs"), ("failed", "failed"),
            ("bench_balancedness_gpu", "balancedness"), ("bench_balancedness_expert", "bal. slots"),
            ("bench_speed_score", "speed score"), ("bench_combined_score", "combined"),
            ("wall_time_s", "plan s"), ("holdout_step_imbalance_mean", "held-out per step"),
            ("holdout_imbalance_mean", "held-out imb"), ("holdout_imbalance_worst", "held-out worst"),
            ("imbalance_mean", "imb in sample"), ("gap_mean", "gap to bound"), ("gap_max", "gap max")]
    pct = ("gap_mean", "gap_max")
    return aligned([[t for _, t in cols]] + [[_fmt(r.get(k), k in pct) for k, _ in cols] for r in rows])
