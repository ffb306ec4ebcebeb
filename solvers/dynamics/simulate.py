"""A rebalancing simulator: replay a trace under the plan in force, re-plan as an operator would.

A trace ``loads [T, L, E]`` is replayed step by step. The first plan is made on the first
``window`` steps and is in force from step ``window`` on (earlier steps are warm-up and
not scored). A rebalance happens every ``every`` steps, or after a step whose realised
imbalance exceeds ``threshold`` (either rule, or both); it plans on the last ``window``
steps with ``solver`` (a time-robust planner gets those steps one by one, its
``history`` option) and, with ``migration_slack``, keeps the fewest moves within that
slack of the fresh plan's balance. The new plan is in force from the next step.

Every step is scored under the plan in force with the shared scorer's arithmetic (even
split, float64), batched over all steps of a segment and all layers:
``imbalance[t] = mean over layers of max / mean GPU load``; tokens lost to imbalance are
``sum over layers of (max - mean) x GPUs``. Every rebalance's moves and bytes come from
the shared scorer (:func:`solvers.score` with the plan in force as ``previous``).
"""
from __future__ import annotations

import dataclasses
import math
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from ..cluster import Cluster
from ..errors import OptionError
from ..options import Option
from ..plan import Plan
from ..problem import Problem
from ..registry import get_solver, run
from ..scoring import score

DEFAULT_WINDOW = 16
# Steps scored in one batch (bounds memory: steps x layers x slots float64).
CHUNK_STEPS = 64


@dataclass
class SimulationResult:
    """What a replay gives.

    imbalance: [T] realised imbalance per step (mean over layers of max / mean GPU load;
    NaN for warm-up steps); imbalance_worst: [T] the worst layer's; tokens_lost: [T] sum
    over layers of (max - mean) x GPUs; rebalance_steps: steps where a new plan took
    effect; rebalances: one dict per rebalance (step, reason, moves, bytes, plan seconds,
    imbalance of the planning window in sample); totals: see :meth:`totals`.
    """

    imbalance: torch.Tensor
    imbalance_worst: torch.Tensor
    tokens_lost: torch.Tensor
    rebalances: list[dict[str, Any]]
    settings: dict[str, Any]
    wall_seconds: float
    first_step: int
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def scored(self) -> torch.Tensor:
        """[T - first_step] realised imbalance of the scored steps."""
        return self.imbalance[self.first_step:]

    def totals(self) -> dict[str, Any]:
        """mean_imbalance, p99_imbalance (over scored steps), total_moves, total_bytes (None
        without an expert size), rebalances (after the first plan), tokens_lost, steps."""
        s = self.scored
        moves = sum(r["moves"] for r in self.rebalances)
        nbytes = None
        if all(r["bytes"] is not None for r in self.rebalances):
            nbytes = sum(r["bytes"] for r in self.rebalances)
        return {"mean_imbalance": float(s.mean()) if s.numel() else math.nan,
                "p99_imbalance": float(torch.quantile(s, 0.99)) if s.numel() else math.nan,
                "worst_imbalance": float(self.imbalance_worst[self.first_step:].max()) if s.numel() else math.nan,
                "total_moves": int(moves), "total_bytes": nbytes, "rebalances": len(self.rebalances),
                "tokens_lost": float(self.tokens_lost[self.first_step:].sum()),
                "steps_scored": int(s.numel()), "wall_seconds": self.wall_seconds}

    def step_rows(self) -> list[dict[str, Any]]:
        """One row per step: step, imbalance, worst layer's imbalance, tokens lost, rebalanced
        (this step runs a new plan), moves and bytes of that rebalance, cumulative bytes."""
        by_step = {r["step"]: r for r in self.rebalances}
        rows, cum_moves, cum_bytes = [], 0, 0
        for t in range(self.first_step, self.imbalance.shape[0]):
            r = by_step.get(t)
            moves = r["moves"] if r else 0
            nbytes = (r["bytes"] or 0) if r else 0
            cum_moves += moves
            cum_bytes += nbytes
            rows.append({"step": t, "imbalance": float(self.imbalance[t]),
                         "imbalance_worst": float(self.imbalance_worst[t]),
                         "tokens_lost": float(self.tokens_lost[t]), "rebalanced": r is not None,
                         "moves": moves, "bytes": nbytes, "cumulative_moves": cum_moves,
                         "cumulative_bytes": cum_bytes})
        return rows


def step_scores(loads: torch.Tensor, plan: Plan, num_gpus: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Realised scores of ``plan`` on steps ``loads [n, L, E]``: (imbalance [n], worst layer's
    imbalance [n], tokens lost [n]), the shared scorer's even-split arithmetic in float64."""
    n, L, E = loads.shape
    w = loads.to(torch.float64)
    p2l = plan.phy2log.to(w.device)
    cnt = plan.logcnt.to(w.device, torch.float64)
    R = p2l.shape[1]
    per_slot = w.gather(2, p2l.expand(n, L, R)) / cnt.gather(1, p2l).unsqueeze(0)    # [n, L, R]
    gpu = per_slot.view(n, L, num_gpus, R // num_gpus).sum(-1)                        # [n, L, P]
    mx, mean = gpu.max(-1).values, gpu.mean(-1)
    # a subnormal mean is divided by as it is (clamping it to the smallest normal gave imbalances
    # far below 1), and rounding never takes the ratio below its floor of 1
    imb = torch.where(mean > 0, mx / torch.where(mean > 0, mean, torch.ones_like(mean)),
                      torch.ones_like(mx)).clamp_min(1.0)
    lost = ((mx - mean) * num_gpus).sum(-1)
    return imb.mean(-1), imb.max(-1).values, lost


# The replay's own settings, checked once by the same schema type as solver options.
SETTINGS = {o.name: o for o in (
    Option("every", int, None, "rebalance every N steps", minimum=1, maximum=10**9, nullable=True),
    Option("threshold", float, None, "rebalance after a step whose imbalance exceeds X", minimum=1.0,
           maximum=1e12, nullable=True),
    Option("window", int, None, "steps a plan is made on", minimum=1, maximum=10**9, nullable=True),
    Option("cooldown", int, 1, "at most one threshold rebalance per this many steps", minimum=1, maximum=10**9),
    Option("migration_slack", float, None, "slack of a migration-aware plan", minimum=0.0, maximum=1e6,
           nullable=True),
    Option("migration_budget", float, None, "at most this fraction of a fresh plan's moves", minimum=0.0,
           exclusive_minimum=True, maximum=1.0, nullable=True),
    Option("expert_bytes", int, None, "bytes per expert", minimum=0, maximum=2**62, nullable=True),
)}


def _check(loads: Any) -> torch.Tensor:
    from ..workloads.trace import Trace

    if isinstance(loads, Trace):
        loads = loads.loads
    if not isinstance(loads, torch.Tensor) or loads.dim() != 3:
        shape = tuple(loads.shape) if isinstance(loads, torch.Tensor) else type(loads).__name__
        raise OptionError("loads", f"must be a [steps, layers, experts] tensor or a Trace, got {shape}")
    if loads.is_complex() or loads.dtype == torch.bool:
        raise OptionError("loads", f"must hold real token counts, got {loads.dtype}")
    return loads


class _Progress:
    """A progress bar on stderr (tqdm when installed) for long replays; silent otherwise."""

    def __init__(self, total: int, enabled: bool):
        self.bar = None
        if enabled:
            try:
                from tqdm import tqdm

                self.bar = tqdm(total=total, unit="step", file=sys.stderr, leave=False)
            except ImportError:
                self.bar = None

    def update(self, n: int) -> None:
        if self.bar is not None:
            self.bar.update(n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def simulate(loads: Any, *, cluster: Cluster | None = None, num_replicas: int | None = None, num_groups: int = 1,
             num_nodes: int = 1, num_gpus: int = 1, solver: str = "deepseek", every: int | None = None, threshold: float | None = None,
             window: int | None = None, migration_slack: float | None = None, migration: str = "heuristic",
             migration_budget: float | None = None, expert_bytes: int | None = None,
             solver_options: dict[str, Any] | None = None, cooldown: int = 1,
             progress: bool = False) -> SimulationResult:
    """Replay ``loads`` ([T, L, E] token counts or a Trace) with rebalancing (module docstring).

    The cluster: a :class:`solvers.Cluster` (or the flat num_replicas / num_nodes /
    num_gpus), and the expert groups.
    every: rebalance every N steps. threshold: rebalance after a step whose realised
    imbalance (mean over layers) exceeds X, at most once per ``cooldown`` steps. window:
    steps a plan is made on (default ``every``, else 16). migration_slack: None for plain
    re-planning, else the slack of a migration-aware plan (``migration``: heuristic | exact).
    migration_budget: with a slack, at most this fraction of a fresh plan's moves per layer
    (:func:`solvers.migration.plan_with_migration`'s ``budget``).
    expert_bytes: bytes per expert (moves in bytes). solver_options: options of ``solver``.
    """
    loads = _check(loads)
    T, L, E = loads.shape
    if every is None and threshold is None:
        raise OptionError("every", "give a rebalance period (every) or an imbalance threshold (or both)")
    every, threshold, cooldown, migration_slack, migration_budget, expert_bytes = (
        SETTINGS[k].validate(v) for k, v in (("every", every), ("threshold", threshold), ("cooldown", cooldown),
                                             ("migration_slack", migration_slack),
                                             ("migration_budget", migration_budget), ("expert_bytes", expert_bytes)))
    window = SETTINGS["window"].validate(window if window is not None else (every or DEFAULT_WINDOW))
    if window >= T:
        raise OptionError("window", f"the first plan needs {window} steps and the trace has {T}: nothing left to score")
    if migration_budget is not None and migration_slack is None:
        raise OptionError("migration_budget", "needs a migration slack (plain re-planning has no budget)")
    spec = get_solver(solver)
    opts = spec.parse(solver_options)                     # checked once for every re-plan
    takes_history = "history" in spec.options
    if cluster is None:
        if num_replicas is None:
            raise OptionError("num_replicas", "give the cluster (or num_replicas, num_nodes and num_gpus)")
        cluster = Cluster(num_nodes, num_gpus, num_replicas)
    problem0 = Problem(torch.ones(1, E), cluster=cluster, num_groups=num_groups)   # checked before any work
    num_gpus = cluster.num_gpus
    migration_opts = None
    if migration_slack is not None:
        if solver == "migration":
            raise OptionError("solver", "must be another solver than 'migration' (the simulator adds migration)")
        migration_opts = get_solver("migration").parse(
            {"base": solver, "slack": migration_slack, "method": migration, "budget": migration_budget})

    def plan_at(t: int, current: Plan | None) -> tuple[Plan, dict[str, Any]]:
        hist = loads[t - window:t]
        problem = problem0.with_weights(hist.sum(0))
        step_opts = dataclasses.replace(opts, history=hist) if takes_history else opts
        began = time.perf_counter()
        if current is not None and migration_opts is not None:
            out = run(problem, "migration", dataclasses.replace(migration_opts, current=current,
                                                                base_options=step_opts))
        else:
            out = run(problem, solver, step_opts)
        if out.plan is None:
            raise OptionError("solver", f"{solver!r} found no plan at step {t} ({out.termination}): {out.message}")
        sc = score(problem, out.plan, previous=current, expert_bytes=expert_bytes)
        record = {"step": t, "plan_seconds": time.perf_counter() - began,
                  "moves": sc.moves or 0, "bytes": sc.moves_bytes, "in_sample_imbalance": sc.imbalance_mean}
        if current is None:
            record["bytes"] = 0 if expert_bytes is not None else None
        return out.plan, record

    imb = torch.full((T,), math.nan, dtype=torch.float64)
    worst = torch.full((T,), math.nan, dtype=torch.float64)
    lost = torch.zeros(T, dtype=torch.float64)
    rebalances: list[dict[str, Any]] = []
    began = time.perf_counter()
    bar = _Progress(T - window, progress and T * L * E > 5_000_000)
    plan, first = plan_at(window, None)
    t = window
    last = window
    while t < T:
        end = T if every is None else min(T, last + every)
        chunk = min(end, t + CHUNK_STEPS)
        seg_imb, seg_worst, seg_lost = step_scores(loads[t:chunk], plan, num_gpus)
        stop = chunk
        reason = "period"
        if threshold is not None:
            over = (seg_imb > threshold).nonzero()
            over = over[over.squeeze(1) + t + 1 >= last + cooldown] if over.numel() else over
            if over.numel():
                stop = t + int(over[0, 0]) + 1
                reason = "threshold"
        n = stop - t
        imb[t:stop], worst[t:stop], lost[t:stop] = seg_imb[:n], seg_worst[:n], seg_lost[:n]
        bar.update(n)
        t = stop
        if t >= T:
            break
        if reason != "threshold" and t < end:
            continue                       # the next chunk of steps, same plan
        plan_new, record = plan_at(t, plan)
        record["reason"] = reason
        rebalances.append(record)
        plan, last = plan_new, t
    bar.close()
    settings = {"solver": solver, "every": every, "threshold": threshold, "window": window,
                "migration_slack": migration_slack, "migration": migration if migration_slack is not None else None,
                "migration_budget": migration_budget,
                "expert_bytes": expert_bytes, "solver_options": {k: v for k, v in (solver_options or {}).items()
                                                                 if isinstance(v, (int, float, str, bool))},
                **cluster.as_dict(), "num_groups": problem0.num_groups}
    return SimulationResult(imb, worst, lost, rebalances, settings, time.perf_counter() - began, window,
                            info={"first_plan": first})
