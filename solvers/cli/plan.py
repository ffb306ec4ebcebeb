"""``eplb plan``: compute a placement plan and write it as JSON."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import torch

from ..errors import OptionError
from ..paths import input_kind
from ..elastic import replan_after_failure
from ..replan import plan_with_migration
from ..planfile import plan_document, write_plan
from ..progress import Ticker, progress_mode
from ..registry import get_solver
from ..result import SolveResult
from ..traffic import with_traffic
from ..entry import solve
from ..plan import Plan
from ..solver_call import solver_call
from .routing import routing_arg, token_bytes_arg
from ..io import read_loads
from .args import command_line, fail, flag_option, solver_options
from .inputs import dropped_note, format_metrics, loads_sha256, previous_plan, problem_from_args


# plan_with_migration's own keywords: set by --migration-slack, --migration, --migration-budget.
_MIGRATION_KEYWORDS = ("slack", "method", "budget")


def cmd_plan(args: argparse.Namespace) -> int:
    # the plan file is JSON; engines' maps come from convert (a device or directory is refused by the writer)
    if input_kind(args.out) in ("missing", "file") and not str(args.out).lower().endswith(".json"):
        raise OptionError("out", f"{str(args.out)[:80]}: eplb plan writes its plan file as .json; for an engine's "
                          "map, convert it: eplb convert plan.json --to sglang|trtllm|csv --out FILE")
    spec = get_solver(args.solver)
    options = solver_options(args)
    flag_option(options, "traffic_weight", args.traffic_weight, "--traffic-weight", solvers=[args.solver],
                declared="traffic_weight" in spec.options, owner="traffic_aware")
    # The schema refuses what is not an option of this solver (solve()'s own parameters
    # problem, solver, previous, expert_bytes included) before any file is read.
    spec.parse(options)
    if args.migration_slack is not None:
        clash = next((k for k in _MIGRATION_KEYWORDS if k in options), None)
        if clash:
            raise OptionError(clash, f"-O {clash}= clashes with the migration flags; use --migration-slack, "
                              f"--migration, --migration-budget")
    info = read_loads(args.loads)
    problem, dense, preset_bytes = problem_from_args(args, info)
    previous, previous_cluster, problem, speed_note = previous_plan(args, info, problem)
    expert_bytes = args.expert_bytes if args.expert_bytes is not None else preset_bytes
    routing = routing_arg(args, problem)
    migration = (args.migration_slack, args.migration, args.migration_budget, args.migration_objective)
    if previous is None and migration != (None,) * 4:
        raise OptionError("previous", "--migration-slack, --migration, --migration-budget and --migration-objective "
                                      "need --previous (the placement in force)")
    if args.migration_objective is not None and args.migration_slack is None:
        raise OptionError("migration_objective", "needs --migration-slack (it chooses a plan within the slack)")
    if args.transfer_model is not None and args.migration_objective != "makespan":
        raise OptionError("transfer_model", "times the makespan objective's schedules: give --migration-objective "
                                            "makespan")
    if args.migration_budget is not None and args.migration_slack is None:
        raise OptionError("migration_budget", "needs --migration-slack (the budget widens it layer by layer)")
    # the one call builder of every front end (`eplb compare` rows are built the same way): the
    # window's steps as history, the routing trace, the plan in force for the re-planners
    fresh = args.migration_slack is None
    call = solver_call(problem, args.solver, steps=None if info.matrix else info.trace, routing=routing,
                       options=options, previous=previous if fresh else None,
                       previous_cluster=previous_cluster if fresh else None, expert_bytes=expert_bytes)
    options = call.options
    # a one-line progress on a terminal (or with --progress): elapsed against the work model's seconds
    with Ticker(args.solver, spec.expected_seconds(problem, options), progress_mode(args.progress)):
        result = _plan(args, problem, previous, previous_cluster, expert_bytes, options)
    if result.plan is None:
        return fail(f"solver {args.solver!r} found no plan ({result.termination}): {result.message}")
    metrics = result.summary()
    if routing is not None:
        metrics.update(with_traffic(result.score, result.plan, problem, routing,
                                    token_bytes_arg(args, routing)).traffic.summary)
    doc = plan_file(result, problem, info, dense, metrics=metrics, loads=str(args.loads), model=args.model,
                    previous=args.previous, routing=args.routing, expert_bytes=expert_bytes, command=command_line(),
                    solver=args.solver)
    write_plan(args.out, doc)
    if speed_note:                  # the speeds the plan was made for came from the plan in force
        print(speed_note, file=sys.stderr if args.json else sys.stdout)
    if args.json:
        print(json.dumps(metrics, indent=2))
    else:
        print(f"wrote {args.out}: {problem.num_layers} MoE layers{dropped_note(info)}, policy {result.policy}, "
              f"solver {_solver_name(args.solver, result)}, stopped {result.termination}, plan {result.status}")
        print(format_metrics(metrics))
    return 0


def _solver_name(asked: str, result: SolveResult) -> str:
    """The solver asked for and, when a re-planner ran it (--migration-slack), which one: the
    metrics below name the one that ran."""
    return asked if result.solver == asked else f"{asked} (re-planned by {result.solver})"


def recorded_options(options: dict[str, Any]) -> dict[str, Any]:
    """The options as a plan file records them: a history tensor as its shape (the steps are
    the window's, named by the provenance's loads), a plan in force as such."""
    def text(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            return f"the window's {v.shape[0]} steps [{', '.join(map(str, v.shape))}]"
        if isinstance(v, Plan):
            return "the plan in force (--previous)"
        return v
    return {k: text(v) for k, v in options.items()}


def plan_file(result: SolveResult, problem, info, dense: int, *, metrics: dict[str, Any], loads: str,
              model: str | None, previous: str | None, routing: str | None, expert_bytes: int | None,
              command: str, solver: str | None = None) -> dict[str, Any]:
    """The plan document `eplb plan` writes (and `eplb compare --out` for each row): the plan,
    its metrics, the options in effect and the provenance, ``command`` the one that makes it."""
    return plan_document(result.plan, problem, policy=result.policy, solver=solver or result.solver,
                         options=recorded_options(result.options), metrics=metrics, result=result,
                         dense_layers=dense,
                         provenance={"loads": loads, "loads_sha256": loads_sha256(info), "loads_format": info.format,
                                     "dense_layers_dropped": info.dense_layers, "model": model,
                                     "previous": previous, "routing": routing, "expert_bytes": expert_bytes,
                                     "command": command})


def _plan(args: argparse.Namespace, problem, previous, previous_cluster, expert_bytes, options: dict) -> SolveResult:
    """The plan: the elastic re-plan after failures, a migration-aware plan, or a fresh solve."""
    tuned = (args.migration, args.migration_budget, args.migration_objective) != (None, None, None)
    if previous is not None and args.migration_slack is not None and previous_cluster is not None and not tuned:
        # GPUs failed since the plan in force was made (its recorded cluster had more slots): the
        # elastic re-plan. With --migration, --migration-budget or --migration-objective (and on a
        # plan of this same real cluster) plan_with_migration plans it, in time.
        return replan_after_failure(problem, previous, previous_cluster, solver=args.solver,
                                    slack=args.migration_slack, expert_bytes=expert_bytes, **options)
    if previous is not None and args.migration_slack is not None:
        return plan_with_migration(problem, args.solver, previous, slack=args.migration_slack,
                                   method=args.migration or "heuristic", budget=args.migration_budget,
                                   objective=args.migration_objective or "moves",
                                   transfer_model=args.transfer_model or "rounds", expert_bytes=expert_bytes,
                                   **options)
    return solve(problem, args.solver, previous=previous, expert_bytes=expert_bytes,
                 previous_cluster=previous_cluster, **options)

