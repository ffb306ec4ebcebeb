"""What the engine adapters share: the engine's numbers as a problem, a registered solver's
plan (with its options), and the slots of the plan in force kept where they are.

Engines call their balancer with plain numbers: ``weight`` [layers, experts] (token counts,
any numeric dtype, on any device), the slot, group, node and GPU counts. A model without
expert groups is passed ``num_groups`` 0 (vLLM); a group count that does not divide the
experts plans as one group. The plan comes from :func:`solvers.solve`, so the shared checks
apply; a solver that finds no plan (an exact model out of time with no incumbent) falls back
to DeepSeek's greedy with a warning: an engine must get a plan.
"""
from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import torch

from ..entry import solve
from ..plan import Plan
from ..problem import Problem
from ..replan.relabel import relabel_phy2log

FALLBACK = "deepseek"


def engine_problem(weight: Any, num_replicas: int, num_groups: int | None, num_nodes: int, num_gpus: int) -> Problem:
    """The problem of an engine's call: weight [layers, experts] as float64 on the CPU."""
    w = torch.as_tensor(weight).detach().to("cpu", torch.float64)
    experts = w.shape[-1]
    groups = int(num_groups or 1)
    if groups <= 0 or experts % groups:
        groups = 1
    return Problem(w, int(num_replicas), groups, int(num_nodes), int(num_gpus))


def engine_plan(problem: Problem, solver: str, options: Mapping[str, Any] | None = None,
                old_phy2log: Any = None) -> Plan:
    """``solver``'s plan of ``problem`` (options parsed against its schema); with the plan in
    force ``old_phy2log`` [layers, slots], GPUs are renamed and slots aligned so the most
    replicas stay where they are (:func:`solvers.replan.relabel.relabel_phy2log`: every GPU
    load unchanged)."""
    result = solve(problem, solver, **dict(options or {}))
    plan = result.plan
    if plan is None:
        warnings.warn(f"EPLB solver {solver!r} found no plan ({result.termination}: {result.message}); "
                      f"using {FALLBACK!r}", RuntimeWarning, stacklevel=3)
        plan = solve(problem, FALLBACK).plan
    if old_phy2log is not None:
        old = torch.as_tensor(old_phy2log).detach().to("cpu", torch.int64)
        if tuple(old.shape) == tuple(plan.phy2log.shape) and bool((old >= 0).all()) \
                and bool((old < problem.num_experts).all()):
            kept = relabel_phy2log(plan.phy2log, old, problem.num_experts, problem.num_gpus, problem.num_nodes)
            plan = Plan.from_phy2log(kept, problem.num_experts)
    return plan
