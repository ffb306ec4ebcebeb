"""A foreign planner as a registered solver: run isolated, its answer checked, then graded.

The registered function runs the planner in a child (:func:`solvers.plugins.child.run_isolated`),
checks what came back (:func:`checked_plan`) and hands :func:`solvers.solve` a plan, which the
shared scorer grades like any other solver's (universal bound, gap, held-out score, moves,
traffic). A failure is a :class:`~solvers.registry.SolverOutput` without a plan, termination
``error``, whose message says in one line what went wrong ("error: ..." for an exception, a
crash or a hang; "invalid: ..." for a plan that is not one); nothing of it is scored. Bounds a
foreign planner claims are not taken: only what the workbench proves is.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..errors import PlanError
from ..options import Option, SolverOptions, time_limit_option
from ..plan import Plan
from ..problem import Problem
from ..registry import SolverOutput
from ..result import Termination
from ..work import WorkModel
from .child import run_isolated
from .target import Target

DEFAULT_TIME_LIMIT = 60.0

SCHEMA = (
    time_limit_option(DEFAULT_TIME_LIMIT, "seconds the planner may run (in its own process; stopped then)"),
    Option("history", object, None, "the window's steps [steps, layers, experts], given to a (problem, options) "
           "planner that takes them", nullable=True, advanced=True),
)

# The planner's work is its own; its time limit stops it (the child is killed), so nothing is refused up front.
PLUGIN_WORK = WorkModel.of({"1": 0.0}, time_limited=True)


def _invalid(reason: str) -> str:
    return f"invalid: {reason}"


def checked_plan(problem: Problem, out: dict[str, Any]) -> Plan | str:
    """The plan a planner returned, or the one-line reason it is not a plan of ``problem``:
    phy2log [layers, slots] of integers naming every expert of every layer at least once, and
    where it gave them log2phy [layers, experts, K] and logcnt [layers, experts] that agree
    with it (each slot listed once, each count its expert's slots)."""
    p2l = out.get("phy2log")
    if p2l is None:
        return "error: returned no plan" + (f": {out['message']}" if out.get("message") else "")
    L, E, R = problem.num_layers, problem.num_experts, problem.num_replicas
    arrays = {k: np.asarray(out[k]) for k in ("phy2log", "log2phy", "logcnt") if out.get(k) is not None}
    for name, a in arrays.items():
        if not (np.issubdtype(a.dtype, np.integer)):
            return _invalid(f"{name} has dtype {a.dtype}, expected integers")
    p2l = arrays["phy2log"]
    if p2l.shape != (L, R):
        return _invalid(f"phy2log has shape {tuple(p2l.shape)}, expected [layers, slots] = ({L}, {R})")
    if p2l.size and (p2l.min() < 0 or p2l.max() >= E):
        return _invalid(f"phy2log names expert {int(p2l.min() if p2l.min() < 0 else p2l.max())}, "
                        f"outside [0, {E})")
    t = torch.from_numpy(p2l.astype(np.int64))
    counts = torch.zeros(L, E, dtype=torch.int64).scatter_add_(1, t, torch.ones_like(t))
    missing = (counts == 0).nonzero()
    if len(missing):
        layer, expert = (int(v) for v in missing[0])
        return _invalid(f"layer {layer} has no slot for expert {expert} ({len(missing)} (layer, expert) "
                        f"pairs without a replica)")
    try:
        if "log2phy" in arrays and "logcnt" in arrays:
            Plan.from_tensors(*(torch.from_numpy(arrays[k].astype(np.int64))
                                for k in ("phy2log", "log2phy", "logcnt"))).validate(L, E, R)
        plan = Plan.from_phy2log(t, E)
        problem.validate_plan(plan)
    except PlanError as exc:
        return _invalid(str(exc))
    return plan.to(problem.device)


def plugin_function(target: Target):
    """The registered ``fn(problem, options)`` of ``target``."""

    def run(problem: Problem, options: SolverOptions) -> SolverOutput:
        job = {"weight": problem.weights.detach().to("cpu", torch.float32).clone(),
               "num_replicas": problem.num_replicas, "num_groups": problem.num_groups,
               "num_nodes": problem.num_nodes, "num_gpus": problem.num_gpus,
               "problem": problem.to("cpu") if hasattr(problem, "to") else problem,
               "options": {"time_limit": options.time_limit, "history": options.history}}
        got = run_isolated(target, job, options.time_limit)
        info = {"plugin": target.describe(), "form": got.get("form"), "call_seconds": got.get("seconds")}
        if not got["ok"]:
            return SolverOutput(None, "plugin", Termination.ERROR, message=f"error: {got['reason']}", info=info)
        plan = checked_plan(problem, got["out"])
        if isinstance(plan, str):
            return SolverOutput(None, "plugin", Termination.ERROR, message=plan, info=info)
        return SolverOutput(plan, "plugin", message=got["out"].get("message") or "", info=info)

    return run
