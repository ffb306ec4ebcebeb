"""Tasks: small pure functions (instance id, solver, options, seed) -> one result row.

A task rebuilds its instance from the id (deterministic in the seed), runs
:func:`solvers.solve` (which scores the plan with the shared scorer and combines the
combinatorial bounds with the solver's proven bound), and scores the plan out of sample
on the next window: its sum (``holdout_imbalance_*``) and each of its steps on its own
(``holdout_step_imbalance_mean``: the sum over steps of the busiest GPU over the sum of
the mean, what a plan served on those steps costs). A solver with a ``history`` option
(the time-robust planners) gets the planning window's steps. Any executor (process pool, Dask, Ray) runs the same function.
"""
from __future__ import annotations

import json
import platform
from dataclasses import dataclass, field
from typing import Any

import torch

from solvers import builtin  # noqa: F401  registers every solver a suite may name
from solvers.cluster import auto_policy
from solvers.errors import EPLBError, OptionError, PlanError
from solvers.options import option_by_role
from solvers.registry import get_solver, solver_names
from solvers.evaluate import score
from solvers.entry import solve
from solvers.grading import BoundViolation, InvalidSolverPlan

from .dynamics_tasks import is_trace_id, run_dynamics_task
from .instances import load_instance
from .store import BAD_INPUT, BOUND_VIOLATION, HARD_FAILURES, INVALID_PLAN, options_key  # noqa: F401
from .store import COLUMNS
from .suites import DynamicsGroup, Suite
from .windows_task import rolling_columns


@dataclass(frozen=True)
class Task:
    instance: str
    solver: str
    options: dict[str, Any] = field(default_factory=dict)
    seed: int = 0

    @property
    def key(self) -> tuple[str, str, str, int]:
        """What identifies a finished row (for --resume)."""
        return (self.instance, self.solver, options_key(self.options), int(self.seed))


def _layers(t: torch.Tensor | None) -> str:
    """A per-layer tensor as a compact JSON list (7 significant digits)."""
    return "" if t is None else json.dumps([float(f"{x:.7g}") for x in t.tolist()])


def run_task(task: Task, threads: int = 1) -> dict[str, Any]:
    """Run one task and return its row (plain numbers and strings only).

    threads: torch intra-op threads for this process (1 when timings matter: one job per core).
    """
    if is_trace_id(task.instance):   # a dynamics task: replay a trace under a rebalancing setting
        return run_dynamics_task(task, threads)
    if threads:
        torch.set_num_threads(threads)
    loaded = load_instance(task.instance, task.seed)
    spec = get_solver(task.solver)
    row: dict[str, Any] = loaded.instance.params()
    row.update(seed=int(task.seed), solver=task.solver, kind=spec.kind, options=options_key(task.options),
               threads=threads, host=platform.node())
    options = dict(task.options)
    if "history" in spec.options and "history" not in options:   # a planner of the window's steps gets them
        options["history"] = loaded.plan_steps
    try:
        result = solve(loaded.problem, task.solver, **options)
    except BoundViolation as exc:
        return {**row, "termination": BOUND_VIOLATION, "status": "none", "message": str(exc)}
    except (InvalidSolverPlan, PlanError) as exc:
        return {**row, "termination": INVALID_PLAN, "status": "none", "message": str(exc)}
    except OptionError:
        raise  # a mistake in the suite or the command line: stop the run
    except EPLBError as exc:
        return {**row, "termination": BAD_INPUT, "status": "none", "message": str(exc)}
    holdout = None
    if loaded.eval_problem is not None and result.plan is not None:   # out of sample: plan on window 0, score on 1
        holdout = score(loaded.eval_problem, result.plan)
    summary = result.summary(holdout=holdout)        # the one result vocabulary (solvers.result)
    if loaded.eval_steps is not None and result.plan is not None:   # each held-out step on its own
        summary["holdout_step_imbalance_mean"] = score(loaded.eval_problem, result.plan,
                                                       tokens=loaded.eval_steps).imbalance_mean
    # gap_mean / gap_max / gap_in_policy_mean are DERIVED here, against the best bound of every
    # solver on the instance: the solver's own gaps are kept as gap_own_*.
    row.update({k: v for k, v in summary.items() if k in COLUMNS},
               lower_bound=float(result.lower_bound.sum()), lower_bound_layers=_layers(result.lower_bound))
    if result.model_bound is not None:           # a restricted model's bound, with its typed scope
        scope = result.model_scope
        row.update(model_bound=float(result.model_bound.sum()), model_bound_layers=_layers(result.model_bound),
                   model_policy=scope.policy, model_counts=scope.counts, model_colocation=scope.colocation,
                   model_node_budget=scope.node_budget or "")
    if result.score is None:
        return row
    row.update(objective=float(result.objective.sum()), objective_layers=_layers(result.objective),
               gap_own_mean=summary["gap_mean"], gap_own_max=summary["gap_max"],
               structure_bound_layers=_layers(result.policy_bound))
    if loaded.instance.rolling:        # the EPLB benchmark's protocol over every window (id suffix R)
        row.update(rolling_columns(loaded, task.solver, options, result))
    if bool((loaded.problem.weights == loaded.problem.weights.round()).all()):   # token counts: schedulable
        row.update(scheduled_imbalance_mean=score(loaded.problem, result.plan, split="scheduled").imbalance_mean)
    return row


def suite_tasks(suite: Suite, *, solvers: list[str] | None = None, time_limit: float | None = None,
                seeds: list[int] | None = None, threads: int = 1) -> list[Task]:
    """Every task of ``suite``: instances x available solvers of each group's kinds x seeds.

    solvers: only these names (each must be known, available and used by some group).
    time_limit: overrides each group's limit. seeds: override the suite's seeds.
    """
    for n in solvers or ():        # each named solver is known and available here
        if n not in solver_names():
            raise OptionError("solvers", f"unknown solver {n!r}; known: {', '.join(solver_names())}")
        if not get_solver(n).is_available():
            raise OptionError("solvers", f"solver {n!r} is not available here: {get_solver(n).requires}")
    seeds = list(suite.seeds if seeds is None else seeds)
    tasks: list[Task] = []
    used: set[str] = set()
    for group in suite.groups:
        if isinstance(group, DynamicsGroup):
            tasks += _dynamics_tasks(group, solvers, seeds, used)
            continue
        limit = group.time_limit if time_limit is None else time_limit
        only = solvers if group.solvers is None else [n for n in group.solvers if solvers is None or n in solvers]
        # the available solvers of the group's kinds: those named, else every one suites run
        names = [n for n in solver_names(available_only=True) if get_solver(n).kind in group.kinds
                 and (get_solver(n).in_suites if only is None else n in only)]
        for name in names:
            used.add(name)
            # the solver's schema says which options set its time, threads and seed
            spec = get_solver(name)
            time_opt, thread_opt, seed_opt = (option_by_role(spec.schema, r) for r in ("time_limit", "threads", "seed"))
            opts = dict(group.options.get(name, {}))
            if limit is not None and time_opt is not None:
                opts.setdefault(time_opt.name, float(limit))
            if thread_opt is not None:
                opts.setdefault(thread_opt.name, threads)
            for inst in group.instances:
                variants = [opts]
                if "policy" in spec.options and "policy" not in opts:
                    auto = auto_policy(inst.params()["num_groups"], inst.nodes)
                    variants += [{**opts, "policy": p} for p in group.policies if p != auto]
                for variant in variants:
                    for seed in seeds:
                        o = dict(variant)
                        if seed_opt is not None:
                            o.setdefault(seed_opt.name, int(seed))
                        tasks.append(Task(inst.id, name, o, int(seed)))
    unused = [n for n in solvers or () if n not in used]
    if unused:
        kinds = sorted({k for g in suite.groups for k in getattr(g, "kinds", ("dynamics",))})
        raise OptionError("solvers", f"solver {unused[0]!r} ({get_solver(unused[0]).kind}) is not part of "
                          f"suite {suite.name!r} (its groups run kinds: {', '.join(kinds)})")
    return tasks


def _dynamics_tasks(group: DynamicsGroup, only: list[str] | None, seeds: list[int], used: set[str]) -> list[Task]:
    """Traces x solvers x settings; a shipped dataset with the first seed only (it has one trace)."""
    names = [n for n in group.solvers if (only is None or n in only) and get_solver(n).is_available()]
    used.update(names)
    out = []
    for trace in group.traces:
        for name in names:
            for setting in group.settings:
                for seed in (seeds[:1] if trace.dataset is not None else seeds):
                    out.append(Task(trace.id, name, dict(setting), int(seed)))
    return out
