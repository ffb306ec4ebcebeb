"""The ADRS / OpenEvolve EPLB benchmark's protocol in a benchmark task (instances whose id
ends in ``R``): besides window 0 -> 1 (every task's out-of-sample score), the solver plans on
every window i of the instance's trace and each plan is scored on window i+1; the row gets
the benchmark's own score (:mod:`solvers.rolling`) and the workbench's held-out imbalance,
both as means over the pairs."""
from __future__ import annotations

import time
from typing import Any

from solvers.entry import solve
from solvers.errors import EPLBError, OptionError
from solvers.evaluate import score
from solvers.result import SolveResult
from solvers.rolling import benchmark_score, speed_columns, window_pairs

from .instances import LoadedInstance

COLUMNS = ["windows_scored", "bench_balancedness_gpu", "bench_balancedness_expert", "bench_speed_score",
           "bench_combined_score", "rolling_holdout_imbalance_mean", "rolling_holdout_step_imbalance_mean"]


def rolling_columns(loaded: LoadedInstance, solver: str, options: dict[str, Any],
                    first: SolveResult) -> dict[str, Any]:
    """The protocol's columns for ``solver`` (with ``options``; ``history`` is replaced by each
    window's steps) on the instance's whole trace; ``first`` is its result on window 0. A
    window whose solve gives no plan or fails ends the row's protocol there
    (``windows_scored``; a failure's reason goes to ``message``)."""
    trace = loaded.trace
    pairs = window_pairs(trace, loaded.instance.window)
    stopped = None
    problem = loaded.problem
    rows = []
    for i, ((a, b), (c, d)) in enumerate(pairs):
        opts = dict(options)
        if "history" in opts:
            opts["history"] = trace[a:b]
        try:
            res = first if i == 0 else solve(problem.with_weights(trace[a:b].sum(0)), solver, **opts)
        except OptionError:
            raise                      # a mistake in the suite or the command line: stop the run
        except EPLBError as exc:       # a later window the solver fails on: the row says where
            stopped = f"windows protocol stopped at window {i}: {exc}"
            break
        if res.plan is None:
            break
        held = problem.with_weights(trace[c:d].sum(0))
        t0 = time.perf_counter()
        row = benchmark_score(held, res.plan)
        row["seconds"] = res.wall_time + time.perf_counter() - t0
        row["holdout"] = score(held, res.plan).imbalance_mean
        row["step"] = score(held, res.plan, tokens=trace[c:d]).imbalance_mean
        rows.append(row)
    extra = {} if stopped is None else {"message": stopped}
    if not rows:
        return {"windows_scored": 0, **extra}
    mean = lambda key: sum(r[key] for r in rows) / len(rows)  # noqa: E731
    return {**extra, "windows_scored": len(rows), "bench_balancedness_gpu": mean("bench_balancedness_gpu"),
            "bench_balancedness_expert": mean("bench_balancedness_expert"),
            **speed_columns(mean("bench_balancedness_expert"), mean("seconds")),
            "rolling_holdout_imbalance_mean": mean("holdout"), "rolling_holdout_step_imbalance_mean": mean("step")}


# The summary's table of the protocol: (column, heading, format of solvers.bench.report._fmt).
SECTION = (("windows_scored", "pairs", "g"), ("bench_balancedness_gpu", "balancedness (GPUs)", "x"),
           ("bench_balancedness_expert", "balancedness (slots)", "x"), ("bench_speed_score", "speed score", "x"),
           ("bench_combined_score", "combined score", "x"),
           ("rolling_holdout_imbalance_mean", "held-out imbalance", "x"),
           ("rolling_holdout_step_imbalance_mean", "held-out per step", "x"),
           ("gap_mean", "gap to bound (window 0)", "pct"))


def windows_frame(df):
    """The rows of windows-protocol instances, one per (instance, solver), means over seeds
    (an empty frame when the run has none)."""
    if "windows_scored" not in df.columns or df["windows_scored"].isna().all():
        return df.iloc[0:0]
    rows = df[df["windows_scored"].notna()]
    cols = [c for c, _, _ in SECTION if c in rows.columns]
    table = rows.groupby(["instance", "solver"], sort=True)[cols].mean().reset_index()
    table["windows_scored"] = table["windows_scored"].astype(int)
    return table.rename(columns={c: h for c, h, _ in SECTION})
