"""The windows protocol of the ADRS / OpenEvolve EPLB benchmark, over a whole trace.

    table, per_window = rolling_compare(problem, trace, 100, ["deepseek", "kk_swap"])

The trace's steps are cut into windows of ``size`` steps (the benchmark's ``range(0, T,
size)``: the last window keeps the remaining steps); every solver plans on the sum of window
i and its plan is scored on the sum of window i+1, for every i. Each row reports, beside the
workbench's metrics (certified gap to the bound in sample, held-out imbalance, per-step
held-out imbalance), the benchmark's own score as its evaluator computes it:

- ``bench_balancedness_gpu``: sum over layers of the mean GPU load / sum over layers of the
  busiest GPU's load, on window i+1 (what the shared scorer reports as ``balancedness_sum``);
- ``bench_balancedness_expert``: the same over physical slots (each expert's load split
  evenly over its replicas);
- ``bench_speed_score``: ``0.002 / mean time per window``, the time being the planning time
  plus the simulation of the plan on window i+1 (the evaluator times both; the simulation
  here is vectorised, so a planner scores a higher speed here than under the evaluator's
  per-expert loop; compare speed scores within one run);
- ``bench_combined_score``: ``(bench_balancedness_expert + bench_speed_score) / 2``, the
  number evolved programs are ranked by.

Each is the mean over the window pairs, as the evaluator averages them. The rows of one
solver on every pair are aggregated by :func:`aggregate` (means, worst cases, counts).
"""
from __future__ import annotations

import math
import numbers
import time
from typing import Any, Callable, Iterable, Sequence

import torch

from .compare import compare_solvers
from .errors import OptionError
from .plan import Plan
from .problem import Problem
from .scoring import per_slot_loads, slots_to_gpus, uneven_slot_gpu

# The benchmark's speed term: 0.002 s of planning (and scoring) per window scores 1.
SPEED_SECONDS = 0.002

# Mean over the windows of these row columns.
MEAN_COLUMNS = ("imbalance_mean", "holdout_imbalance_mean", "holdout_step_imbalance_mean", "gap_mean",
                "gap_in_policy_mean", "wall_time_s", "bench_balancedness_gpu", "bench_balancedness_expert",
                "holdout_step_time_imbalance_mean", "holdout_time_imbalance_mean", "time_imbalance_mean")
# Worst over the windows.
MAX_COLUMNS = ("imbalance_worst", "holdout_imbalance_worst", "holdout_step_imbalance_worst", "gap_max")
COLUMNS = ("solver", "policy", "windows", "failed", "bench_balancedness_gpu", "bench_balancedness_expert",
           "bench_speed_score", "bench_combined_score", "wall_time_s", "holdout_step_imbalance_mean",
           "holdout_imbalance_mean", "holdout_imbalance_worst", "imbalance_mean", "gap_mean", "gap_max",
           "gap_in_policy_mean", "termination", "status", "message")


def benchmark_score(holdout: Problem, plan: Plan) -> dict[str, float]:
    """The benchmark's balancedness of ``plan`` on the loads of ``holdout`` (the next window),
    from the shared per-slot loads (each expert's load split evenly over its replicas): over
    GPUs (the sum over layers of the mean GPU load over the sum of the busiest GPU's, the
    shared scorer's ``balancedness_sum``; means over the live GPUs) and over physical slots."""
    slots = per_slot_loads(holdout.weights.to(torch.float64), plan.phy2log.to(holdout.device),
                           plan.logcnt.to(holdout.device))                     # [L, R]
    gpu = slots_to_gpus(slots, uneven_slot_gpu(holdout), holdout.num_gpus)    # [L, P]
    live = len(holdout.cluster.live_gpus)
    top_gpu, top_slot = float(gpu.max(-1).values.sum()), float(slots.max(-1).values.sum())
    return {"bench_balancedness_gpu": float(gpu.sum(-1).sum()) / live / top_gpu if top_gpu > 0 else 0.0,
            "bench_balancedness_expert": float(slots.mean(-1).sum()) / top_slot if top_slot > 0 else 0.0}


def speed_columns(balancedness_expert: float, seconds: float) -> dict[str, float]:
    """The benchmark's speed and combined scores from the mean balancedness over slots and the
    mean seconds per window (planning and scoring)."""
    speed = SPEED_SECONDS / seconds if seconds > 0 else math.inf
    return {"bench_speed_score": speed, "bench_combined_score": (balancedness_expert + speed) / 2}


def step_blocks(num_steps: int, size: int) -> list[tuple[int, int]]:
    """[(start, stop)] of consecutive blocks of ``size`` steps covering all ``num_steps``: the
    benchmark's windows (``range(0, T, size)``), whose last block keeps the remaining steps
    even when fewer than ``size`` (:func:`solvers.workloads.windows` drops them)."""
    if isinstance(size, bool) or not isinstance(size, numbers.Integral) or size < 1:
        raise OptionError("windows", f"must be an integer >= 1 (steps per window), got {size!r}")
    return [(start, min(start + size, num_steps)) for start in range(0, num_steps, size)]


def window_pairs(trace: torch.Tensor, size: int) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """[((start, stop) of window i, (start, stop) of window i+1)] over a [steps, layers,
    experts] trace; at least one pair (two windows) or :class:`OptionError` on ``windows``."""
    if not isinstance(trace, torch.Tensor) or trace.dim() != 3:
        raise OptionError("windows", "needs a trace of steps ([steps, layers, experts] loads), not one matrix")
    blocks = step_blocks(trace.shape[0], size)
    if len(blocks) < 2:
        raise OptionError("windows", f"windows of {size} steps leave one window of the trace's {trace.shape[0]} "
                          f"steps: plan on window i, score on window i+1 needs two")
    return list(zip(blocks, blocks[1:]))


def rolling_compare(problem: Problem, trace: torch.Tensor, size: int, solvers: Sequence[str], *,
                    policies: Iterable[str] = ("auto",), options: dict[str, Any] | None = None,
                    time_limit: float | None = None,
                    on_window: Callable[[int, int], None] | None = None,
                    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(one aggregated row per (solver, policy), the rows of every window pair).

    problem: the cluster (its weights are replaced by each window's); trace: [steps, layers,
    experts] loads; size: steps per window. Every pair is a :func:`solvers.compare.compare_solvers`
    run (window i's steps as history to the planners of them, window i+1 as the held-out
    window, scored step by step too) plus the benchmark's score of each plan
    (:func:`benchmark_score`). on_window(i, count) is called before each pair.
    """
    pairs = window_pairs(trace, size)
    steps = trace.to(torch.float64)
    policies = list(policies)
    per_window: list[dict[str, Any]] = []
    for i, ((a, b), (c, d)) in enumerate(pairs):
        if on_window is not None:
            on_window(i, len(pairs))
        plan_on, held = problem.with_weights(steps[a:b].sum(0)), problem.with_weights(steps[c:d].sum(0))
        rows = compare_solvers(plan_on, solvers, policies=policies, holdout=held, options=options,
                               time_limit=time_limit, history=steps[a:b], holdout_steps=steps[c:d])
        for row in rows:
            res = row.pop("_result", None)
            row.update(window=i, plan_steps=f"{a}:{b}", eval_steps=f"{c}:{d}")
            if res is not None and res.plan is not None:
                t0 = time.perf_counter()
                row.update(benchmark_score(held, res.plan))
                row["bench_seconds"] = (row["wall_time_s"] or 0.0) + time.perf_counter() - t0
            per_window.append(row)
    return aggregate(per_window), per_window


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def aggregate(per_window: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (solver, policy) from the rows of every window pair: means (the
    benchmark's averaging) and worst cases over the pairs with a plan, the benchmark's speed
    and combined scores, and how many pairs gave no plan (``failed``)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in per_window:
        groups.setdefault((row["solver"], row["policy"]), []).append(row)
    out = []
    for (solver, policy), rows in groups.items():
        planned = [r for r in rows if r.get("bench_balancedness_gpu") is not None]
        agg: dict[str, Any] = {"solver": solver, "policy": policy, "windows": len(rows),
                               "failed": len(rows) - len(planned)}
        for key in MEAN_COLUMNS:
            vals = [float(r[key]) for r in planned if r.get(key) is not None]
            if vals:
                agg[key] = _mean(vals)
        for key in MAX_COLUMNS:
            vals = [float(r[key]) for r in planned if r.get(key) is not None]
            if vals:
                agg[key] = max(vals)
        if planned:
            agg.update(speed_columns(agg["bench_balancedness_expert"],
                                     _mean([float(r["bench_seconds"]) for r in planned])))
        agg["termination"] = ",".join(sorted({str(r.get("termination")) for r in rows}))
        agg["status"] = ",".join(sorted({str(r.get("status")) for r in rows}))
        messages = [r["message"] for r in rows if r.get("message")]
        agg["message"] = messages[0] if messages else None
        out.append(agg)
    return out
