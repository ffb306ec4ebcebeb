"""A rebalancing simulator: replay a trace under the plan in force, re-plan as an operator would.

A trace ``loads [T, L, E]`` is replayed step by step under one :class:`Settings` (its schema,
:data:`SETTINGS`, also makes the flags of ``eplb simulate`` / ``eplb sweep`` and the Over
time page's widgets). The first plan is made on the first ``window`` steps and is in force
from step ``window`` on (earlier steps are warm-up and not scored). A rebalance happens
every ``every`` steps, or after a step whose realised imbalance exceeds ``threshold``
(either rule, or both); it plans on the last ``window`` steps with ``solver`` (a
time-robust planner gets those steps one by one, its ``history`` option) and, with
``migration_slack``, keeps the fewest moves within that slack of the fresh plan's balance
(a solver with ``current`` and ``slack`` options, such as ``risk_aware``, does that itself
on identical GPUs when no move budget is given; otherwise the solver is wrapped in the
``migration`` solver). The new plan is in force from the next step.

Every step is scored under the plan in force with the shared scorer's arithmetic (even
split, float64), batched over all steps of a segment and all layers:
``imbalance[t] = mean over layers of max / mean GPU load``; tokens lost to imbalance are
``sum over layers of (max - mean) x GPUs``. Every rebalance's moves and bytes come from
the shared scorer (:func:`solvers.score` with the plan in force as ``previous``).

Time (docs/dynamics.md, "Does it pay?"). A step lasts ``step_seconds`` at perfect balance
and ``step_seconds x sum_l max_l / sum_l mean_l`` under the plan in force (each layer waits
for its busiest GPU). With an expert size, every rebalance's weight copies are scheduled
over the cluster's network (:func:`solvers.transfers.schedule_transfers`) and:

- ``stall="sync"``: serving stops for the schedule's makespan, then the new plan runs;
- ``stall="async"``: copies run in the background layer by layer (vLLM's async EPLB):
  no stall, but the old plan serves until they finish (``ceil(makespan / step_seconds)``
  steps later); a trigger while copies are in flight is ignored.

Totals add the stall seconds, the tokens lost to stalls (the load the idle cluster would
have served) beside those lost to imbalance, and the net throughput: routed load served per
second of serving plus stalls, and as a share of the balanced, stall-free ideal.

``transfer_model`` picks how copies share the links (``rounds``: one peer per GPU and
direction at a time; ``shared``: concurrent copies share each GPU's bandwidth). Async copies
are not free: serving loses ``async_interference`` (default 0.1) of its throughput while
they run, ``async_interference x makespan`` seconds per rebalance, counted like a stall.

Stall-aware trigger (``stall_aware=True``; :class:`Regret`): at each check the new plan is
made as usual and put in force only when its predicted gain, ``kappa x g_in x (age +
period) / 2`` balanced steps, exceeds its stall (its exact makespan; async: the
interference, and the horizon is ``(age + delay + period) / 2``: the new plan takes over
when the copies end). ``g_in`` is the plan in force's time ratio minus the new plan's over
the steps since the last check; ``kappa`` calibrates it by what earlier re-plans brought
on the steps that followed them (measured out of sample, whether they were put in force or
not); ``(age + period) / 2`` is the renewal horizon: with a gap growing linearly in the
plan's age, rebalancing at the first check where it pays over that many steps minimises the
average time per step of a plan's life.
"""
from __future__ import annotations

import dataclasses
import inspect
import math
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from ..cluster import Cluster
from ..errors import OptionError
from .. import builtin  # noqa: F401  every planner registers: a replay re-plans with any of them
from ..transfers import schedule_transfers
from ..plan import Plan
from ..problem import Problem
from ..progress import Ticker, as_mode
from ..registry import get_solver, run
from ..scoring import per_slot_loads, score, slots_to_gpus
from ..workloads.trace import Trace
from .settings import DEFAULT_WINDOW, SETTINGS, Settings

# Steps scored in one batch (bounds memory: steps x layers x slots float64).
CHUNK_STEPS = 64


@dataclass
class SimulationResult:
    """What a replay gives.

    imbalance: [T] realised imbalance per step (mean over layers of max / mean GPU load;
    NaN for warm-up steps); imbalance_worst: [T] the worst layer's; tokens_lost: [T] sum
    over layers of (max - mean) x GPUs; rebalance_steps: steps where a new plan took
    effect; rebalances: one dict per rebalance (step, reason, moves, bytes, plan seconds,
    imbalance of the planning window in sample, and with an expert size its transfer
    makespan, bound and stall); step_time: [T] seconds each step served (NaN for warm-up
    steps); step_load: [T] routed load of each step (sum over layers and experts); totals:
    see :meth:`totals`. skipped: the stall-aware trigger's declined rebalances (records
    like ``rebalances``).
    """

    imbalance: torch.Tensor
    imbalance_worst: torch.Tensor
    tokens_lost: torch.Tensor
    step_time: torch.Tensor
    step_load: torch.Tensor
    rebalances: list[dict[str, Any]]
    settings: dict[str, Any]
    wall_seconds: float
    first_step: int
    skipped: list[dict[str, Any]] = field(default_factory=list)

    @property
    def scored(self) -> torch.Tensor:
        """[T - first_step] realised imbalance of the scored steps."""
        return self.imbalance[self.first_step:]

    def totals(self) -> dict[str, Any]:
        """Over the scored steps: mean_imbalance, p99_imbalance, worst_imbalance, total_moves,
        total_bytes (None without an expert size), rebalances (after the first plan), tokens_lost,
        steps_scored, wall_seconds; stall_seconds (None without an expert size), serving_seconds,
        tokens_lost_stall (the load the stalled cluster would have served), net_throughput (routed
        load per second of serving and stalls), net_efficiency (the balanced, stall-free time over
        that time), skipped_rebalances (stall-aware trigger), interference_seconds (async copies:
        the serving time lost while they run, counted in the net figures like a stall)."""
        s, first, rebs = self.scored, self.first_step, self.rebalances
        n = self.step_time.shape[0] - first
        step = float(self.settings.get("step_seconds") or 1.0)
        stalls = [r.get("stall_seconds") for r in rebs]
        known = all(x is not None for x in stalls)
        stall, lost_stall = (float(sum(stalls)), 0.0) if known else (None, None)
        if known and rebs:
            at = torch.tensor([r["step"] for r in rebs], dtype=torch.int64)
            lost_stall = float((torch.tensor(stalls, dtype=torch.float64) * self.step_load[at] / step).sum())
        serving = float(self.step_time[first:].sum())
        interference = float(sum(r.get("interference_seconds") or 0.0 for r in rebs))
        busy = serving + (stall or 0.0) + interference
        return {"mean_imbalance": float(s.mean()) if s.numel() else math.nan,
                "p99_imbalance": float(torch.quantile(s, 0.99)) if s.numel() else math.nan,
                "worst_imbalance": float(self.imbalance_worst[first:].max()) if s.numel() else math.nan,
                "total_moves": int(sum(r["moves"] for r in rebs)),
                "total_bytes": sum(r["bytes"] for r in rebs) if all(r["bytes"] is not None for r in rebs) else None,
                "rebalances": len(rebs), "tokens_lost": float(self.tokens_lost[first:].sum()),
                "steps_scored": int(s.numel()), "wall_seconds": self.wall_seconds,
                "stall_seconds": stall, "serving_seconds": serving, "tokens_lost_stall": lost_stall,
                "net_throughput": float(self.step_load[first:].sum()) / busy if busy > 0 else math.nan,
                "net_efficiency": n * step / busy if busy > 0 and n > 0 else math.nan,
                "skipped_rebalances": len(self.skipped), "interference_seconds": interference if known else None}

    def step_rows(self) -> list[dict[str, Any]]:
        """One row per step: step, imbalance, worst layer's imbalance, tokens lost, rebalanced
        (this step runs a new plan), moves and bytes of that rebalance, cumulative bytes,
        stall_seconds (the rebalance's stall plus its async interference, charged to its step)."""
        by_step = {r["step"]: r for r in self.rebalances}
        step = float(self.settings.get("step_seconds") or 1.0)
        rows, cum_moves, cum_bytes, clock_s = [], 0, 0, 0.0
        for t in range(self.first_step, self.imbalance.shape[0]):
            r = by_step.get(t)
            moves = r["moves"] if r else 0
            nbytes = (r["bytes"] or 0) if r else 0
            cum_moves += moves
            cum_bytes += nbytes
            stall = float((r.get("stall_seconds") or 0.0) + (r.get("interference_seconds") or 0.0)) if r else 0.0
            seconds = float(self.step_time[t])
            clock_s += stall + seconds
            rows.append({"step": t, "imbalance": float(self.imbalance[t]),
                         "imbalance_worst": float(self.imbalance_worst[t]),
                         "tokens_lost": float(self.tokens_lost[t]), "rebalanced": r is not None,
                         "moves": moves, "bytes": nbytes, "cumulative_moves": cum_moves,
                         "cumulative_bytes": cum_bytes, "stall_seconds": stall, "step_seconds": seconds,
                         "efficiency": step / (seconds + stall) if seconds + stall > 0 else math.nan,
                         "cumulative_efficiency": (t - self.first_step + 1) * step / clock_s if clock_s else math.nan})
        return rows


def step_stats(loads: torch.Tensor, plan: Plan, num_gpus: int,
               cluster: Cluster | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Realised scores of ``plan`` on steps ``loads [n, L, E]``: (imbalance [n], worst layer's
    imbalance [n], tokens lost [n], time ratio [n] ``sum_l max_l / sum_l mean_l``: a step's
    time over its time at perfect balance, 1 for an empty step), the shared scorer's
    even-split arithmetic in float64.

    On a cluster that is not one of identical GPUs every GPU's load is divided by its speed
    and "mean" is the time at perfect balance, ``W / sum(live speeds)``: the imbalance is the
    scorer's ``time_imbalance`` and the tokens lost are ``(max - mean) x sum(speeds)`` (the load
    the cluster could have served while it waited; ``(max - mean) x GPUs`` on identical GPUs)."""
    n, L, E = loads.shape
    w = loads.to(torch.float64)
    p2l = plan.phy2log.to(w.device)
    cnt = plan.logcnt.to(w.device, torch.float64)
    per_slot = per_slot_loads(w, p2l, cnt)                                           # [n, L, R]
    homogeneous = cluster is None or cluster.homogeneous
    slot_gpu = None if homogeneous or cluster.uniform_slots else torch.tensor(cluster.slot_gpus())     # [R]
    gpu = slots_to_gpus(per_slot, slot_gpu, num_gpus)                                                 # [n, L, P]
    if homogeneous:
        mx, mean, capacity = gpu.max(-1).values, gpu.mean(-1), float(num_gpus)
    else:                                       # [n, L] times: each GPU's load over its speed
        capacity = float(cluster.total_speed)
        mx = (gpu / torch.tensor(cluster.gpu_speed, dtype=torch.float64, device=w.device)).max(-1).values
        mean = gpu.sum(-1) / capacity
    # a subnormal mean is divided by as it is (clamping it to the smallest normal gave imbalances
    # far below 1), and rounding never takes the ratio below its floor of 1
    imb = torch.where(mean > 0, mx / torch.where(mean > 0, mean, torch.ones_like(mean)),
                      torch.ones_like(mx)).clamp_min(1.0)
    lost = ((mx - mean) * capacity).sum(-1)
    total = mean.sum(-1)
    ratio = torch.where(total > 0, mx.sum(-1) / total.clamp_min(torch.finfo(torch.float64).tiny),
                        torch.ones_like(total))
    return imb.mean(-1), imb.max(-1).values, lost, ratio


def _check(loads: Any) -> torch.Tensor:
    if isinstance(loads, Trace):
        loads = loads.loads
    if not isinstance(loads, torch.Tensor) or loads.dim() != 3:
        shape = tuple(loads.shape) if isinstance(loads, torch.Tensor) else type(loads).__name__
        raise OptionError("loads", f"must be a [steps, layers, experts] tensor or a Trace, got {shape}")
    if loads.is_complex() or loads.dtype == torch.bool:
        raise OptionError("loads", f"must hold real token counts, got {loads.dtype}")
    return loads


def simulate(loads: Any, settings: Settings | None = None, *, cluster: Cluster | None = None, num_groups: int = 1,
             num_replicas: int | None = None, num_nodes: int = 1, num_gpus: int = 1, progress: bool = False,
             **values: Any) -> SimulationResult:
    """Replay ``loads`` ([T, L, E] token counts or a Trace) with rebalancing (module docstring).

    settings: a :class:`Settings`; ``values``: settings by name, over those (every, threshold,
    window, migration_slack, ...: :data:`SETTINGS`, the schema says what each does).
    The cluster: a :class:`solvers.Cluster` (or the flat num_replicas / num_nodes /
    num_gpus; its ``network`` times the weight copies), and the expert groups.
    """
    s = Settings.parse({**(settings or {}), **values})
    loads = _check(loads)
    T, L, E = loads.shape
    every, threshold, slack, budget, nbytes, stall, step_seconds = (
        s.every, s.threshold, s.migration_slack, s.migration_budget, s.expert_bytes, s.stall, s.step_seconds)
    if every is None and threshold is None:
        raise OptionError("every", "give a rebalance period (every) or an imbalance threshold (or both)")
    window = SETTINGS["window"].validate(s.window if s.window is not None else (every or DEFAULT_WINDOW))
    if window >= T:
        raise OptionError("window", f"the first plan needs {window} steps and the trace has {T}: nothing left to score")
    if budget is not None and slack is None:
        raise OptionError("migration_budget", "needs a migration slack (plain re-planning has no budget)")
    if s.stall_aware and not nbytes:
        raise OptionError("stall_aware", "the stall-aware trigger weighs gains against stalls: give expert_bytes")
    spec = get_solver(s.solver)
    opts = spec.parse(s.solver_options)                     # checked once for every re-plan
    takes_history = "history" in spec.options
    if cluster is None:
        if num_replicas is None:
            raise OptionError("num_replicas", "give the cluster (or num_replicas, num_nodes and num_gpus)")
        cluster = Cluster(num_nodes, num_gpus, num_replicas)
    problem0 = Problem(torch.ones(1, E), cluster=cluster, num_groups=num_groups)   # checked before any work
    num_gpus = cluster.num_gpus
    per_node = num_gpus // cluster.num_nodes
    # the transfer schedule maps slot r to GPU r // S on identical slot counts, else by the cluster's map
    slot_gpu = None if cluster.uniform_slots else cluster.slot_gpus()                    # [R]
    migration_opts = None
    # A solver that re-plans migration-aware itself (options current and slack: risk_aware)
    # gets the placement in force and the slack on identical GPUs; any other, any with a move
    # budget (the 'migration' solver's) and any on a real cluster is wrapped in 'migration'.
    native = slack is not None and budget is None and {"current", "slack"} <= set(spec.options) and cluster.homogeneous
    # Wrapped, the slack is judged on the forecast the planner trusts (the window's steps, weighted
    # by its halflife if it has one) where the re-plan minimises moves heuristically with no budget;
    # otherwise on the max load of the window's sum, the migration solver's other targets.
    on_forecast = (slack is not None and not native and budget is None and s.migration == "heuristic"
                   and s.migration_objective == "moves")
    if slack is not None and not native:
        if s.solver == "migration":
            raise OptionError("solver", "must be another solver than 'migration' (the simulator adds migration)")
        migration_opts = get_solver("migration").parse(
            {"base": s.solver, "slack": slack, "method": s.migration, "budget": budget,
             "objective": s.migration_objective, "transfer_model": s.transfer_model,
             "halflife": getattr(opts, "halflife", None) if on_forecast and "halflife" in spec.options else None})

    def plan_at(t: int, current: Plan | None) -> tuple[Plan, dict[str, Any]]:
        hist = loads[t - window:t]
        problem = problem0.with_weights(hist.sum(0))
        # the rule of every front end (solvers.solver_call.history_of): a one-step window is no
        # history, so `eplb plan` on the same step makes the same plan
        step_opts = dataclasses.replace(opts, history=hist) if takes_history and window > 1 else opts
        began = time.perf_counter()
        if current is not None and migration_opts is not None:
            out = run(problem, "migration", dataclasses.replace(migration_opts, current=current, base_options=step_opts,
                                                                history=hist if on_forecast else None))
        elif current is not None and native:
            out = run(problem, s.solver, dataclasses.replace(step_opts, current=current, slack=slack))
        else:
            out = run(problem, s.solver, step_opts)
        if out.plan is None:
            raise OptionError("solver", f"{s.solver!r} found no plan at step {t} ({out.termination}): {out.message}")
        sc = score(problem, out.plan, previous=current, expert_bytes=nbytes)
        record = {"step": t, "plan_seconds": time.perf_counter() - began,
                  "moves": sc.moves or 0, "bytes": sc.moves_bytes,
                  "in_sample_imbalance": sc.summary.get("time_imbalance_mean", sc.imbalance_mean),
                  "stall_seconds": None, "makespan_seconds": None, "bound_seconds": None,
                  "interference_seconds": None}
        if current is not None and nbytes:
            sched = schedule_transfers(current, out.plan, num_gpus, per_node, nbytes, cluster.network,
                                       num_experts=E, model=s.transfer_model, slot_gpu=slot_gpu)
            record.update(makespan_seconds=sched.makespan, bound_seconds=sched.bound,
                          stall_seconds=sched.makespan if stall == "sync" else 0.0,
                          interference_seconds=s.async_interference * sched.makespan if stall == "async" else 0.0)
        return out.plan, record

    period = every if every is not None else s.cooldown
    regret = Regret()
    imb = torch.full((T,), math.nan, dtype=torch.float64)
    worst = torch.full((T,), math.nan, dtype=torch.float64)
    lost = torch.zeros(T, dtype=torch.float64)
    ratio = torch.full((T,), math.nan, dtype=torch.float64)
    rebalances: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    began = time.perf_counter()
    # a line on stderr (solvers.progress) once the replay has run a second: the steps replayed
    with Ticker("simulate", None, as_mode(progress), total=T - window) as bar:
        plan, _ = plan_at(window, None)
        since = window                                     # the step the plan in force took effect
        pending: tuple[Plan, int] | None = None            # async: (plan, step it takes effect)
        t = last = window
        while t < T:
            if pending is not None and t >= pending[1]:
                plan, pending = pending[0], None
            end = T if every is None else min(T, last + every)
            chunk = min(end, t + CHUNK_STEPS)
            if pending is not None:
                chunk = min(chunk, pending[1])
            seg_imb, seg_worst, seg_lost, seg_ratio = step_stats(loads[t:chunk], plan, num_gpus, cluster)
            stop = chunk
            reason = "period"
            if threshold is not None and pending is None:
                over = (seg_imb > threshold).nonzero()
                over = over[over.squeeze(1) + t + 1 >= last + s.cooldown] if over.numel() else over
                if over.numel():
                    stop = t + int(over[0, 0]) + 1
                    reason = "threshold"
            n = stop - t
            imb[t:stop], worst[t:stop], lost[t:stop], ratio[t:stop] = seg_imb[:n], seg_worst[:n], seg_lost[:n], seg_ratio[:n]
            bar.update(n)
            t = stop
            if t >= T:
                break
            if reason != "threshold" and t < end:
                continue                       # the next chunk of steps (or the pending plan's switch)
            if pending is not None:            # copies in flight: this trigger is ignored
                last = t
                continue
            plan_new, record = plan_at(t, plan)
            record["reason"] = reason
            last = t
            if s.stall_aware:                  # the stall-aware rule (module docstring, Regret)
                delay = _delay(record["makespan_seconds"], step_seconds) if stall == "async" else 0
                gain = step_seconds * regret.decide(loads, t, window, plan, plan_new, num_gpus, t - since, period,
                                                    delay)
                record.update(predicted_gain_seconds=gain, gain_calibration=regret.calibration)
                if gain <= (record["stall_seconds"] or 0.0) + (record["interference_seconds"] or 0.0):
                    skipped.append(record)
                    continue
            rebalances.append(record)
            if stall == "async" and record["makespan_seconds"]:
                record["effective_step"] = t + _delay(record["makespan_seconds"], step_seconds)
                pending = (plan_new, record["effective_step"])
            else:
                record["effective_step"] = t
                plan = plan_new
            since = record["effective_step"]
    # the settings in force (in the schema's order), those that did not apply as None
    used = {k: s[k] for k in SETTINGS if k not in ("cooldown", "solver_options")}
    used.update(window=window, migration=s.migration if slack is not None else None,
                migration_objective=s.migration_objective if slack is not None else None,
                async_interference=s.async_interference if stall == "async" else None,
                network=cluster.network.as_dict(),
                solver_options={k: v for k, v in (s.solver_options or {}).items()
                                if isinstance(v, (int, float, str, bool))},
                **cluster.as_dict(), num_groups=problem0.num_groups)
    step_load = loads.to(torch.float64).sum((1, 2))                                      # [T]
    return SimulationResult(imb, worst, lost, ratio * step_seconds, step_load, rebalances, used,
                            time.perf_counter() - began, window, skipped)


# simulate's signature lists every setting (help(), and the benchmark scripts' call checker)
simulate.__signature__ = inspect.signature(simulate).replace(parameters=[
    *(p for p in inspect.signature(simulate).parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD),
    *(inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=o.default) for k, o in SETTINGS.items())])


class Regret:
    """The memory of the horizon-free stall-aware rule (``stall_aware``; docs/dynamics.md).

    At each check t the plan in force K and the fresh plan F are compared on the steps since
    the last check (the latest steps, where the gap is newest; out of sample for K, in sample
    for F, so optimistic): ``g_in`` = K's mean time ratio - F's. At the next check t' the same
    pair is compared on the steps [t, t') that followed, out of sample for both: ``g_out``,
    what re-planning at t brought (or would have brought; whichever was decided, the
    comparison is the same). The calibration
    ``kappa = max(sum g_out, 0) / sum g_in`` over the checks so far (1 before the first
    measurement) is the share of an in-sample gain that survives into the future; the gain
    predicted per step is ``kappa x g_in``.

    Horizon (renewal theory, no guess): if a plan's extra time per step over a fresh plan
    grows linearly with its age a (``alpha x a``), the average time per step of a cycle of
    length A is ``(S + alpha A^2 / 2) / A`` (S the stall); at checks every p steps, ending
    the cycle now (age A) beats ending it p steps later exactly when
    ``alpha A (A + p) / 2 >= S``, i.e. when the gain per step now, ``alpha A``, over
    ``(A + p) / 2`` steps pays the stall. Async copies: the new plan takes over ``delay``
    steps later, when the plan in force is ``A + delay`` steps old, whether the copies start
    now or at the next check: the horizon is ``(A + delay + p) / 2``.
    """

    def __init__(self) -> None:
        self.pending: tuple[int, Plan, Plan, float] | None = None     # (check step, K, F, g_in)
        self.sum_in = 0.0
        self.sum_out = 0.0

    @property
    def calibration(self) -> float:
        return 1.0 if self.sum_in <= 0 else max(self.sum_out, 0.0) / self.sum_in

    def decide(self, loads: torch.Tensor, t: int, window: int, keep: Plan, fresh: Plan, num_gpus: int, age: int,
               period: int, delay: int) -> float:
        """The predicted gain of putting ``fresh`` in force at ``t`` over the renewal horizon,
        in balanced steps (multiply by the step's seconds)."""
        if self.pending is not None and t > self.pending[0]:
            t0, k0, f0, g0 = self.pending
            seen = loads[t0:t]                                                          # [t - t0, L, E]
            self.sum_out += float((step_stats(seen, k0, num_gpus)[3] - step_stats(seen, f0, num_gpus)[3]).mean())
            self.sum_in += g0
        # the steps since the last check (those since the plan in force took effect, if fewer):
        # out of sample for that plan, in sample for the fresh one, the latest the gap is seen
        hist = loads[t - max(1, min(age, period, window)):t]                            # [n, L, E]
        g_in = float(step_stats(hist, keep, num_gpus)[3].mean() - step_stats(hist, fresh, num_gpus)[3].mean())
        self.pending = (t, keep, fresh, g_in)
        return max(self.calibration * g_in, 0.0) * (age + delay + period) / 2

def _delay(makespan: float | None, step_seconds: float) -> int:
    """Steps the old plan keeps serving while background copies run (async)."""
    return 0 if not makespan else max(1, math.ceil(makespan / step_seconds))
