"""Run an exact backend layer by layer and assemble a plan, a bound and a termination.

Time limit: ``time_limit`` is for the *whole* solve. Each layer gets an equal share of
the time still left (layers that finish early pass their time on), at least
``_MIN_SOLVE`` seconds. Once the time left cannot give the next layer that much (many
layers, a short limit), no further layer is solved: each remaining layer keeps its warm
start (DeepSeek's plan, the given ``warm_start``, or for the replication model the greedy
counts) with status "time_limit" and the combinatorial bound. So the solve returns within
the limit plus one backend's overshoot, whatever the number of layers.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

from ..clock import clock
from ..plan import Plan
from ..problem import Problem
from ..registry import SolverOutput
from ..result import ModelScope, Termination
from .model import (ExactOptions, LayerModel, LayerResult, build_layer, exact_options,
                    default_warm_plan, fit_warm_to_counts, fixed_counts_for, layer_problem_bound, phy2log_from_matrix,
                    replication_plan)
from .scaling import with_counts

LayerSolver = Callable[..., LayerResult]

# Seconds kept back from a layer's share for building the next model and assembling results.
_RESERVE = 0.25
# Least time worth one backend call (model building included); below it a layer is skipped.
_MIN_SOLVE = 0.05
# Time to finish one skipped layer (its data and warm start), seconds: measured 0.1 ms at 16
# experts, 0.5 ms at 256; the estimate 2e-4 + 4e-6 E doubles that.


def run_exact(problem: Problem, backend: str, solve_layer: LayerSolver, options: Any) -> SolverOutput:
    """Solve every layer of ``problem`` with ``solve_layer`` (one backend's formulation);
    ``options``: the backend's typed options (see :func:`.model.exact_options`)."""
    opts = exact_options(problem, options)
    end = clock() + opts.time_limit
    explicit = isinstance(opts.warm_start, Plan)
    warm_plan = opts.warm_start if explicit else None
    if opts.warm_start == "auto" and opts.model != "replication":
        warm_plan = default_warm_plan(problem, opts)
    fixed = fixed_counts_for(problem, opts, warm_plan)
    warm_plan = fit_warm_to_counts(problem, opts, warm_plan, fixed)
    lbs = layer_problem_bound(problem, opts, fixed).cpu()
    L, R = problem.num_layers, problem.num_replicas
    phy2log = np.zeros((L, R), dtype=np.int64)
    bounds = torch.zeros(L, dtype=torch.float64)
    statuses, layers_info = [], []
    skipping, skip_cost = False, 2e-4 + 4e-6 * problem.num_experts
    overhead = 0.0                       # seconds spent so far on the layers outside the backend
    for layer in range(L):
        began = clock()
        lm = build_layer(problem, layer, opts, warm_plan, fixed, float(lbs[layer]), explicit)
        # keep time to finish the rest: the estimate, or what a layer has cost here so far
        # beside its solve (a loaded machine makes every layer slower, not only the backend)
        per_layer = max(skip_cost, overhead / layer if layer else 0.0)
        left = end - clock() - per_layer * (L - layer - 1)
        skipping = skipping or left < _MIN_SOLVE
        solving = 0.0
        if skipping:
            res = with_counts(lm, LayerResult("time_limit", stats={"skipped": True},
                                              message="not solved: the time limit was spent on earlier layers"))
        else:
            limit = min(left, max(_MIN_SOLVE, max(0.05, (end - clock()) / (L - layer)) - _RESERVE))
            t = clock()
            res = solve_layer(lm, time_limit=limit, threads=opts.threads, seed=opts.seed, gap=opts.gap)
            solving = clock() - t
        row, used = _layer_plan(lm, res)
        overhead += clock() - began - solving
        # a layer without a plan (and not infeasible or failed) ran out of time
        status = res.status if row is not None or res.status in ("infeasible", "error") else "time_limit"
        if row is not None:
            phy2log[layer] = row
        bounds[layer] = max(float(lbs[layer]), -np.inf if res.bound is None else res.bound)
        statuses.append(status)
        layers_info.append({"status": status, "solution": used, "backend_status": res.message,
                            "backend_bound": res.bound, "model_objective": res.objective,
                            "warm_start_value": lm.ub, "notes": lm.notes,
                            "candidate_counts": sum(len(c) for c in lm.cand), **res.stats})
    policy = "hierarchical" if opts.hierarchical else "global"
    info = {"backend": backend, "model": opts.model, "counts": opts.counts, "colocation": opts.colocation,
            "node_budget": opts.node_budget if opts.hierarchical else None,
            "time_limit_per": "solve (shared over layers)", "layers": layers_info}
    scope = model_scope(opts, problem.num_nodes)
    dev_bounds = bounds.to(problem.device)
    # A bound of a restricted model goes to model_bound with its scope, never to bound.
    bound_kw = ({"bound": dev_bounds} if scope.universal else
                {"model_bound": dev_bounds, "model_scope": scope})
    for failed, term in (("infeasible", Termination.INFEASIBLE), ("error", Termination.ERROR)):
        if failed in statuses:
            bad = statuses.index(failed)
            why = (f"model {opts.model!r} is infeasible with these options" if failed == "infeasible" else
                   f"backend error: {layers_info[bad]['backend_status']}")
            return SolverOutput(None, policy, term, None, f"layer {bad}: {why}", info)
    if "time_limit" in statuses and any(i["solution"] is None for i in layers_info):
        bad = next(i for i, x in enumerate(layers_info) if x["solution"] is None)
        return SolverOutput(None, policy, Termination.TIME_LIMIT, message=f"layer {bad}: no plan found "
                            "within the time limit", info=info, **bound_kw)
    plan = Plan.from_phy2log(torch.from_numpy(phy2log).to(problem.device), problem.num_experts)
    # Why it stopped: a layer on the time limit; else every layer proved optimal in the model;
    # else it ran to its end (a layer stopped at the requested gap, or failed the re-check).
    term = (Termination.TIME_LIMIT if "time_limit" in statuses else
            Termination.OPTIMAL if all(st == "optimal" for st in statuses) else Termination.COMPLETED)
    if opts.model == "replication":
        info["replication_objective"] = [i["backend_bound"] if i["status"] == "optimal" else None
                                         for i in layers_info]
    optimal = torch.tensor([st == "optimal" for st in statuses], dtype=torch.bool, device=problem.device)
    message = ", ".join(f"{statuses.count(s)} layer(s) {s}" for s in dict.fromkeys(statuses))
    return SolverOutput(plan, policy, term, message=message, info=info, model_optimal=optimal, **bound_kw)


def _layer_plan(lm: LayerModel, res: LayerResult) -> tuple[np.ndarray | None, str | None]:
    """phy2log [R] of the layer and where it came from ("solver" or "warm_start")."""
    if lm.replication_only:
        if res.counts is None:
            return None, None
        used = "warm_start" if res.stats.get("skipped") else "solver"
        return replication_plan(lm.w, res.counts, lm.num_gpus, lm.forbid), used
    if res.xg is None:
        if lm.warm is None:
            return None, None
        return phy2log_from_matrix(lm.warm, lm.slots), "warm_start"
    if lm.warm is not None and lm.time(res.xg) > lm.ub:      # never hand back worse than the warm start
        return phy2log_from_matrix(lm.warm, lm.slots), "warm_start"
    return phy2log_from_matrix(res.xg, lm.slots), "solver"


def model_scope(opts: ExactOptions, num_nodes: int) -> ModelScope:
    """The plans the model's bound covers (the replication model's optimum bounds every
    plan with its colocation rule, whatever the policy; on one node the hierarchical
    model restricts nothing)."""
    if opts.model == "replication" or (opts.hierarchical and num_nodes == 1):
        return ModelScope("global", opts.counts, opts.colocation)
    return ModelScope("hierarchical" if opts.hierarchical else "global", opts.counts, opts.colocation,
                      opts.node_budget if opts.hierarchical else None)
