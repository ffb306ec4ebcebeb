"""A rebalancing simulator: replay a trace under the plan in force, re-plan as an operator would.

A trace ``loads [T, L, E]`` is replayed step by step. The first plan is made on the first
``window`` steps and is in force from step ``window`` on (earlier steps are warm-up and
not scored). A rebalance happens every ``every`` steps, or after a step whose realised
imbalance exceeds ``threshold`` (either rule, or both); it plans on the last ``window``
steps with ``solver`` (a time-robust planner gets those steps one by one, its
``history`` option) and, with ``migration_slack``, keeps the fewest moves within that
slack of the fresh plan's balance (a solver with ``current`` and ``slack`` options, such as
``risk_aware``, does that itself when no move budget is given; otherwise the solver is
wrapped in the ``migration`` solver). The new plan is in force from the next step.

Every step is scored under the plan in force with the shared scorer's arithmetic (even
split, float64), batched over all steps of a segment and all layers:
``imbalance[t] = mean over layers of max / mean GPU load``; tokens lost to imbalance are
``sum over layers of (max - mean) x GPUs``. Every rebalance's moves and bytes come from
the shared scorer (:func:`solvers.score` with the plan in force as ``previous``).

Time (docs/dynamics.md, "Does it pay?"). A step lasts ``step_seconds`` at perfect balance
and ``step_seconds x sum_l max_l / sum_l mean_l`` under the plan in force (each layer waits
for its busiest GPU). With an expert size, every rebalance's weight copies are scheduled
over the cluster's network (:func:`solvers.migration.transfers.schedule_transfers`) and:

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

Stall-aware trigger, horizon-free (``stall_aware=True``; :class:`Regret`): at each check
the new plan is made as usual and put in force only when its predicted gain, ``kappa x
g_in x (age + period) / 2`` balanced steps, exceeds its stall (its exact makespan; async:
the interference, and the horizon is ``(age + delay + period) / 2``: the new plan takes over
when the copies end). ``g_in`` is the plan in force's time ratio minus the new plan's over
the steps since the last check; ``kappa`` calibrates it by what earlier re-plans brought
on the steps that followed them (measured out of sample, whether they were put in force or
not); ``(age + period) / 2`` is the renewal horizon: with a gap growing linearly in the
plan's age, rebalancing at the first check where it pays over that many steps minimises the
average time per step of a plan's life.

Stall-aware trigger with a horizon (``gain_horizon=H``, the first version): at each period
or threshold trigger the new plan is made as usual, but it is put in force only when its
predicted gain exceeds its stall: ``H x step_seconds x (r_keep - r_new)``, with ``r`` the mean time ratio ``sum_l max_l / sum_l mean_l``
over the next H steps predicted from how this run's plans aged so far (the mean ratio of plans
by age since they took effect): the plan in force continues along that curve from its age
(shifted by how it ran lately against the curve), a new plan starts it at age 0 (shifted by
its in-sample ratio against the earlier plans'). Nothing is known in advance: the curve is
learnt on the steps already served.
"""
from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from ..cluster import Cluster
from ..errors import OptionError
from ..transfers import TRANSFER_MODELS, schedule_transfers
from ..options import Option
from ..plan import Plan
from ..problem import Problem
from ..progress import Ticker, as_mode
from ..registry import get_solver, run
from ..scoring import per_slot_loads, score, slots_to_gpus
from ..workloads.trace import Trace

DEFAULT_WINDOW = 16
# Async copies share NVLink / the NIC with the MoE all-to-all and take SMs for their copy kernels:
# serving is taken to lose this fraction of its throughput while they run (an assumption, not a
# measurement; docs/dynamics.md, "Async interference").
DEFAULT_ASYNC_INTERFERENCE = 0.1
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
    see :meth:`totals`. info["skipped"]: the stall-aware trigger's declined rebalances.
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
                "steps_scored": int(s.numel()), "wall_seconds": self.wall_seconds, **self.time_totals()}

    def time_totals(self) -> dict[str, Any]:
        """stall_seconds (None without an expert size), serving_seconds, tokens_lost_stall (the
        load the stalled cluster would have served), net_throughput (routed load per second of
        serving and stalls), net_efficiency (the balanced, stall-free time over that time),
        skipped_rebalances (stall-aware trigger), interference_seconds (async copies: the serving
        time lost while they run, counted in the net figures like a stall)."""
        first = self.first_step
        step = float(self.settings.get("step_seconds") or 1.0)
        stalls = [r.get("stall_seconds") for r in self.rebalances]
        known = all(x is not None for x in stalls)
        stall = float(sum(stalls)) if known else None
        serving = float(self.step_time[first:].sum())
        load = float(self.step_load[first:].sum())
        rate = self.step_load[first:] / step                                  # [n] balanced load per second
        lost_stall = None
        if known:
            at = torch.tensor([r["step"] for r in self.rebalances], dtype=torch.int64)
            secs = torch.tensor(stalls, dtype=torch.float64)
            lost_stall = float((secs * self.step_load[at] / step).sum()) if len(at) else 0.0
        interference = float(sum(r.get("interference_seconds") or 0.0 for r in self.rebalances))
        busy = serving + (stall or 0.0) + interference
        n = self.step_time.shape[0] - first
        return {"stall_seconds": stall, "serving_seconds": serving, "tokens_lost_stall": lost_stall,
                "net_throughput": load / busy if busy > 0 else math.nan,
                "net_efficiency": n * step / busy if busy > 0 and rate.numel() else math.nan,
                "skipped_rebalances": len(self.info.get("skipped", [])),
                "interference_seconds": interference if known else None}

    def step_rows(self) -> list[dict[str, Any]]:
        """One row per step: step, imbalance, worst layer's imbalance, tokens lost, rebalanced
        (this step runs a new plan), moves and bytes of that rebalance, cumulative bytes,
        stall_seconds (the rebalance's stall plus its async interference, charged to its step)."""
        by_step = {r["step"]: r for r in self.rebalances}
        step = float(self.settings.get("step_seconds") or 1.0)
        rows, cum_moves, cum_bytes, clock_s, served = [], 0, 0, 0.0, 0.0
        for t in range(self.first_step, self.imbalance.shape[0]):
            r = by_step.get(t)
            moves = r["moves"] if r else 0
            nbytes = (r["bytes"] or 0) if r else 0
            cum_moves += moves
            cum_bytes += nbytes
            stall = float((r.get("stall_seconds") or 0.0) + (r.get("interference_seconds") or 0.0)) if r else 0.0
            seconds = float(self.step_time[t])
            clock_s += stall + seconds
            served += float(self.step_load[t])
            rows.append({"step": t, "imbalance": float(self.imbalance[t]),
                         "imbalance_worst": float(self.imbalance_worst[t]),
                         "tokens_lost": float(self.tokens_lost[t]), "rebalanced": r is not None,
                         "moves": moves, "bytes": nbytes, "cumulative_moves": cum_moves,
                         "cumulative_bytes": cum_bytes, "stall_seconds": stall, "step_seconds": seconds,
                         "efficiency": step / (seconds + stall) if seconds + stall > 0 else math.nan,
                         "cumulative_efficiency": (t - self.first_step + 1) * step / clock_s if clock_s else math.nan})
        return rows


def step_scores(loads: torch.Tensor, plan: Plan, num_gpus: int,
                cluster: Cluster | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Realised scores of ``plan`` on steps ``loads [n, L, E]``: (imbalance [n], worst layer's
    imbalance [n], tokens lost [n]), the shared scorer's even-split arithmetic in float64.
    On a real ``cluster`` (speeds, uneven slots, failed GPUs) they are in time (see step_stats)."""
    return step_stats(loads, plan, num_gpus, cluster)[:3]


def step_stats(loads: torch.Tensor, plan: Plan, num_gpus: int,
               cluster: Cluster | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`step_scores` and the time ratio [n] ``sum_l max_l / sum_l mean_l`` (a step's
    time over its time at perfect balance; 1 for an empty step).

    On a cluster that is not one of identical GPUs every GPU's load is divided by its speed
    and "mean" is the time at perfect balance, ``W / sum(live speeds)``: the imbalance is the
    scorer's ``time_imbalance`` and the tokens lost are ``(max - mean) x sum(speeds)`` (the load
    the cluster could have served while it waited; ``(max - mean) x GPUs`` on identical GPUs)."""
    n, L, E = loads.shape
    w = loads.to(torch.float64)
    p2l = plan.phy2log.to(w.device)
    cnt = plan.logcnt.to(w.device, torch.float64)
    per_slot = per_slot_loads(w, p2l, cnt)                                           # [n, L, R]
    if cluster is None or cluster.homogeneous:
        gpu = slots_to_gpus(per_slot, None, num_gpus)                                 # [n, L, P]
        mx, mean = gpu.max(-1).values, gpu.mean(-1)
        capacity = float(num_gpus)
    else:
        slot_gpu = None if cluster.uniform_slots else torch.tensor(cluster.slot_gpus(), dtype=torch.int64)  # [R]
        speed = torch.tensor(cluster.gpu_speed, dtype=torch.float64, device=w.device)             # [P]
        gpu = slots_to_gpus(per_slot, slot_gpu, num_gpus)                                         # [n, L, P]
        capacity = float(cluster.total_speed)
        mx, mean = (gpu / speed).max(-1).values, gpu.sum(-1) / capacity                         # [n, L] time
    # a subnormal mean is divided by as it is (clamping it to the smallest normal gave imbalances
    # far below 1), and rounding never takes the ratio below its floor of 1
    imb = torch.where(mean > 0, mx / torch.where(mean > 0, mean, torch.ones_like(mean)),
                      torch.ones_like(mx)).clamp_min(1.0)
    lost = ((mx - mean) * capacity).sum(-1)
    total = mean.sum(-1)
    ratio = torch.where(total > 0, mx.sum(-1) / total.clamp_min(torch.finfo(torch.float64).tiny),
                        torch.ones_like(total))
    return imb.mean(-1), imb.max(-1).values, lost, ratio


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
    Option("stall", str, "sync", "how a rebalance's weight copies meet serving: sync (serving stops for the "
           "makespan) or async (background copies; the new plan runs when they finish)", choices=("sync", "async")),
    Option("step_seconds", float, 1.0, "seconds one step takes at perfect balance", minimum=0.0,
           exclusive_minimum=True, maximum=1e9),
    Option("gain_horizon", int, None, "stall-aware trigger: put a new plan in force only when its predicted "
           "gain over this many steps exceeds its stall", minimum=1, maximum=10**9, nullable=True),
    Option("migration_objective", str, "moves", "what a migration-aware plan minimises within its slack",
           choices=("moves", "makespan")),
    Option("stall_aware", bool, False, "stall-aware trigger without a horizon: put a new plan in force only when "
           "its calibrated gain over the renewal horizon (age + period) / 2 exceeds its stall"),
    Option("transfer_model", str, "rounds", "how copies share the links: rounds (one peer per GPU and "
           "direction at a time, vLLM's rule) or shared (concurrent copies share each GPU's bandwidth)",
           choices=TRANSFER_MODELS),
    Option("async_interference", float, DEFAULT_ASYNC_INTERFERENCE, "async copies: fraction of serving "
           "throughput lost while background copies run", minimum=0.0, maximum=1.0),
)}


def _check(loads: Any) -> torch.Tensor:

    if isinstance(loads, Trace):
        loads = loads.loads
    if not isinstance(loads, torch.Tensor) or loads.dim() != 3:
        shape = tuple(loads.shape) if isinstance(loads, torch.Tensor) else type(loads).__name__
        raise OptionError("loads", f"must be a [steps, layers, experts] tensor or a Trace, got {shape}")
    if loads.is_complex() or loads.dtype == torch.bool:
        raise OptionError("loads", f"must hold real token counts, got {loads.dtype}")
    return loads


def simulate(loads: Any, *, cluster: Cluster | None = None, num_replicas: int | None = None, num_groups: int = 1,
             num_nodes: int = 1, num_gpus: int = 1, solver: str = "deepseek", every: int | None = None, threshold: float | None = None,
             window: int | None = None, migration_slack: float | None = None, migration: str = "heuristic",
             migration_budget: float | None = None, expert_bytes: int | None = None,
             solver_options: dict[str, Any] | None = None, cooldown: int = 1,
             progress: bool = False, stall: str = "sync", step_seconds: float = 1.0, gain_horizon: int | None = None,
             migration_objective: str = "moves", stall_aware: bool = False,
             async_interference: float = DEFAULT_ASYNC_INTERFERENCE, transfer_model: str = "rounds") -> SimulationResult:
    """Replay ``loads`` ([T, L, E] token counts or a Trace) with rebalancing (module docstring).

    The cluster: a :class:`solvers.Cluster` (or the flat num_replicas / num_nodes /
    num_gpus; its ``network`` times the weight copies), and the expert groups.
    every: rebalance every N steps. threshold: rebalance after a step whose realised
    imbalance (mean over layers) exceeds X, at most once per ``cooldown`` steps. window:
    steps a plan is made on (default ``every``, else 16). migration_slack: None for plain
    re-planning, else the slack of a migration-aware plan (``migration``: heuristic | exact;
    ``migration_objective``: moves | makespan).
    migration_budget: with a slack, at most this fraction of a fresh plan's moves per layer
    (:func:`solvers.migration.plan_with_migration`'s ``budget``).
    expert_bytes: bytes per expert (moves in bytes, and the transfer schedule of every
    rebalance: its makespan is the stall). stall: sync | async. step_seconds: seconds of one
    step at perfect balance. stall_aware: the horizon-free stall-aware trigger (module
    docstring; needs expert_bytes). gain_horizon: the older stall-aware trigger with a horizon
    in steps (needs expert_bytes; not with stall_aware). async_interference: with async copies,
    the fraction of serving throughput lost while they run. transfer_model: rounds | shared
    (how copies share the links). solver_options: options of ``solver``.
    """
    loads = _check(loads)
    T, L, E = loads.shape
    if every is None and threshold is None:
        raise OptionError("every", "give a rebalance period (every) or an imbalance threshold (or both)")
    every, threshold, cooldown, migration_slack, migration_budget, expert_bytes = (
        SETTINGS[k].validate(v) for k, v in (("every", every), ("threshold", threshold), ("cooldown", cooldown),
                                             ("migration_slack", migration_slack),
                                             ("migration_budget", migration_budget), ("expert_bytes", expert_bytes)))
    stall, step_seconds, gain_horizon, migration_objective, stall_aware, async_interference = (
        SETTINGS[k].validate(v) for k, v in (("stall", stall), ("step_seconds", step_seconds),
                                             ("gain_horizon", gain_horizon),
                                             ("migration_objective", migration_objective),
                                             ("stall_aware", stall_aware),
                                             ("async_interference", async_interference)))
    transfer_model = SETTINGS["transfer_model"].validate(transfer_model)
    window = SETTINGS["window"].validate(window if window is not None else (every or DEFAULT_WINDOW))
    if window >= T:
        raise OptionError("window", f"the first plan needs {window} steps and the trace has {T}: nothing left to score")
    if migration_budget is not None and migration_slack is None:
        raise OptionError("migration_budget", "needs a migration slack (plain re-planning has no budget)")
    if gain_horizon is not None and not expert_bytes:
        raise OptionError("gain_horizon", "the stall-aware trigger weighs gains against stalls: give expert_bytes")
    if stall_aware and not expert_bytes:
        raise OptionError("stall_aware", "the stall-aware trigger weighs gains against stalls: give expert_bytes")
    if stall_aware and gain_horizon is not None:
        raise OptionError("gain_horizon", "is the other stall-aware rule: give stall_aware or gain_horizon, not both")
    spec = get_solver(solver)
    opts = spec.parse(solver_options)                     # checked once for every re-plan
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
    native = (migration_slack is not None and migration_budget is None and {"current", "slack"} <= set(spec.options)
              and cluster.homogeneous)
    if migration_slack is not None and not native:
        if solver == "migration":
            raise OptionError("solver", "must be another solver than 'migration' (the simulator adds migration)")
        migration_opts = get_solver("migration").parse(
            {"base": solver, "slack": migration_slack, "method": migration, "budget": migration_budget,
             "objective": migration_objective, "transfer_model": transfer_model})

    def plan_at(t: int, current: Plan | None) -> tuple[Plan, dict[str, Any]]:
        hist = loads[t - window:t]
        problem = problem0.with_weights(hist.sum(0))
        step_opts = dataclasses.replace(opts, history=hist) if takes_history else opts
        began = time.perf_counter()
        if current is not None and migration_opts is not None:
            out = run(problem, "migration", dataclasses.replace(migration_opts, current=current,
                                                                base_options=step_opts))
        elif current is not None and native:
            out = run(problem, solver, dataclasses.replace(step_opts, current=current, slack=migration_slack))
        else:
            out = run(problem, solver, step_opts)
        if out.plan is None:
            raise OptionError("solver", f"{solver!r} found no plan at step {t} ({out.termination}): {out.message}")
        sc = score(problem, out.plan, previous=current, expert_bytes=expert_bytes)
        record = {"step": t, "plan_seconds": time.perf_counter() - began,
                  "moves": sc.moves or 0, "bytes": sc.moves_bytes,
                  "in_sample_imbalance": sc.summary.get("time_imbalance_mean", sc.imbalance_mean),
                  "stall_seconds": None, "makespan_seconds": None, "bound_seconds": None,
                  "interference_seconds": None}
        if current is None:
            record["bytes"] = 0 if expert_bytes is not None else None
            record["stall_seconds"] = 0.0 if expert_bytes else None
            record["interference_seconds"] = 0.0 if expert_bytes else None
        elif expert_bytes:
            sched = schedule_transfers(current, out.plan, num_gpus, per_node, expert_bytes, cluster.network,
                                       num_experts=E, model=transfer_model, slot_gpu=slot_gpu)
            record.update(makespan_seconds=sched.makespan, bound_seconds=sched.bound,
                          stall_seconds=sched.makespan if stall == "sync" else 0.0,
                          interference_seconds=async_interference * sched.makespan if stall == "async" else 0.0)
        return out.plan, record

    in_force: list[tuple[int, float]] = []           # (step a plan took effect, its in-sample time ratio)

    def in_sample(t: int, p: Plan) -> float:
        return float(step_stats(loads[t - window:t], p, num_gpus, cluster)[3].mean())

    def pays(t: int, current: Plan, new: Plan, record: dict[str, Any]) -> bool:
        """The stall-aware rule (module docstring): the predicted time ratios of keeping the
        plan in force and of the new plan over the next ``gain_horizon`` steps, from how plans
        aged on this run so far (:func:`predicted_ratios`); the gain against the stall (async:
        no stall, but no gain while the copies run)."""
        keep, fresh = predicted_ratios(ratio, [s for s, _ in in_force], t, gain_horizon, window,
                                       in_sample(t, current), in_sample(t, new), [r for _, r in in_force])
        delay = _delay(record["makespan_seconds"], step_seconds) if stall == "async" else 0
        gain = max(gain_horizon - delay, 0) * step_seconds * (keep - fresh)
        record["predicted_gain_seconds"] = gain
        return gain > (record["stall_seconds"] or 0.0) + (record["interference_seconds"] or 0.0)

    period = every if every is not None else cooldown
    regret = Regret()

    def renews(t: int, current: Plan, new: Plan, record: dict[str, Any]) -> bool:
        """The horizon-free rule (module docstring, :class:`Regret`)."""
        age = t - in_force[-1][0]
        delay = _delay(record["makespan_seconds"], step_seconds) if stall == "async" else 0
        gain = regret.decide(loads, t, window, current, new, num_gpus, age, period, delay) * step_seconds
        record["predicted_gain_seconds"] = gain
        record["gain_calibration"] = regret.calibration
        return gain > (record["stall_seconds"] or 0.0) + (record["interference_seconds"] or 0.0)

    imb = torch.full((T,), math.nan, dtype=torch.float64)
    worst = torch.full((T,), math.nan, dtype=torch.float64)
    lost = torch.zeros(T, dtype=torch.float64)
    ratio = torch.full((T,), math.nan, dtype=torch.float64)
    rebalances: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    began = time.perf_counter()
    # a line on stderr (solvers.progress) once the replay has run a second: the steps replayed
    bar = Ticker("simulate", None, as_mode(progress), total=T - window)
    bar.__enter__()
    try:
        plan, first = plan_at(window, None)
        in_force.append((window, in_sample(window, plan)))
        pending: tuple[Plan, int] | None = None            # async: (plan, step it takes effect)
        t = window
        last = window
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
                over = over[over.squeeze(1) + t + 1 >= last + cooldown] if over.numel() else over
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
            if (gain_horizon is not None and not pays(t, plan, plan_new, record)) or (
                    stall_aware and not renews(t, plan, plan_new, record)):
                skipped.append(record)
                continue
            rebalances.append(record)
            if stall == "async" and record["makespan_seconds"]:
                record["effective_step"] = t + _delay(record["makespan_seconds"], step_seconds)
                pending = (plan_new, record["effective_step"])
            else:
                record["effective_step"] = t
                plan = plan_new
            in_force.append((record["effective_step"], in_sample(t, plan_new)))
    finally:
        bar.close()
    settings = {"solver": solver, "every": every, "threshold": threshold, "window": window,
                "migration_slack": migration_slack, "migration": migration if migration_slack is not None else None,
                "migration_budget": migration_budget,
                "migration_objective": migration_objective if migration_slack is not None else None,
                "expert_bytes": expert_bytes, "stall": stall, "step_seconds": step_seconds,
                "gain_horizon": gain_horizon, "stall_aware": stall_aware, "transfer_model": transfer_model,
                "async_interference": async_interference if stall == "async" else None,
                "network": cluster.network.as_dict(),
                "solver_options": {k: v for k, v in (solver_options or {}).items()
                                   if isinstance(v, (int, float, str, bool))},
                **cluster.as_dict(), "num_groups": problem0.num_groups}
    step_load = loads.to(torch.float64).sum((1, 2))                                      # [T]
    return SimulationResult(imb, worst, lost, ratio * step_seconds, step_load, rebalances, settings,
                            time.perf_counter() - began, window, info={"first_plan": first, "skipped": skipped})


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


def age_curve(ratio: torch.Tensor, starts: list[int], t: int) -> torch.Tensor:
    """[A] the mean realised time ratio of plans by age (steps since they took effect), over
    the plans that took effect at ``starts`` (ascending) and the steps before ``t`` each served.
    ratio: [T] per-step time ratio. Empty when no plan served a step yet."""
    ends = starts[1:] + [t]
    ages = max((min(e, t) - s for s, e in zip(starts, ends)), default=0)
    total = torch.zeros(max(ages, 0), dtype=torch.float64)
    count = torch.zeros_like(total)
    for s, e in zip(starts, ends):
        n = min(e, t) - s
        if n > 0:
            total[:n] += ratio[s:s + n]
            count[:n] += 1
    return total / count.clamp_min(1)


def predicted_ratios(ratio: torch.Tensor, starts: list[int], t: int, horizon: int, window: int,
                     now_in_sample: float, new_in_sample: float, past_in_sample: list[float]) -> tuple[float, float]:
    """(keep, fresh): the mean time ratio over the next ``horizon`` steps of the plan in force
    (took effect at ``starts[-1]``) and of a new plan, from the age curve of this run's plans
    (:func:`age_curve`; ages past the oldest seen keep its value):

    - keep: the curve over the plan's next ages, shifted by how the plan ran against the
      curve over its last ``window`` steps;
    - fresh: the curve over ages 0..horizon-1, shifted by the new plan's in-sample ratio
      against the mean in-sample ratio of the plans so far.

    Before any plan served a step, the in-sample ratios themselves."""
    curve = age_curve(ratio, starts, t)
    if curve.numel() == 0:
        return now_in_sample, new_in_sample
    last = curve.numel() - 1

    def mean_at(a0: int, a1: int) -> float:
        return float(curve[torch.arange(a0, a1).clamp_max(last)].mean())

    age = t - starts[-1]
    if age > 0:
        seen = max(0, age - window)
        keep = mean_at(age, age + horizon) + float(ratio[starts[-1] + seen:t].mean()) - mean_at(seen, age)
    else:
        keep = mean_at(0, horizon) + now_in_sample - sum(past_in_sample) / len(past_in_sample)
    fresh = mean_at(0, horizon) + new_in_sample - sum(past_in_sample) / len(past_in_sample)
    return keep, fresh


def _delay(makespan: float | None, step_seconds: float) -> int:
    """Steps the old plan keeps serving while background copies run (async)."""
    return 0 if not makespan else max(1, math.ceil(makespan / step_seconds))
