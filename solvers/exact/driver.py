"""Run an exact backend layer by layer and assemble a plan, a bound and a termination.

Time limit: ``time_limit`` is for the *whole* solve, model building included, counted from
the call (the warm start's heuristic runs inside it). One deadline, read from
:func:`solvers.clock.clock`, governs every step:

1. every layer's model data and warm start are made (cheap); a layer whose warm start
   already meets its combinatorial bound is optimal without a model;
2. the other layers are ordered by their warm start's gap to the bound, widest first (where
   a model can gain most), and each model's build is estimated from its size
   (:mod:`.budget`) before it is built;
3. layers are taken in that order while their estimated builds, plus ``_MIN_SOLVE`` of
   search each, fit the time left; a layer whose model does not fit is passed over (a
   smaller one later in the order may fit). Each taken layer gets its build and an equal
   share of the search time left (layers that finish early pass their time on), and is
   built against the deadline: the builders read the clock between experts and give up
   past it;
4. every layer not solved keeps its warm start (DeepSeek's plan or kk_swap's, whichever is
   better and feasible; the given ``warm_start``; for the replication model the greedy
   counts) with status "time_limit" and the combinatorial bound, and the result says "model
   not built in time: N of L layers built".

So the solve returns within the limit plus one backend's overshoot past its own time limit
(CP-SAT and HiGHS without presolve stop within about 0.1 s of it; CBC is given a margin).
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import torch

from ..clock import clock
from ..plan import Plan
from ..problem import Problem
from ..registry import SolverOutput
from ..result import ModelScope, Termination
from ..tolerances import BOUND_RTOL
from .budget import NOT_BUILT, build_seconds
from .model import (ExactOptions, LayerModel, LayerResult, build_layer, exact_options,
                    default_warm_plan, fit_warm_to_counts, fixed_counts_for, layer_problem_bound, phy2log_from_matrix,
                    replication_plan)
from .scaling import with_counts

LayerSolver = Callable[..., LayerResult]

# Least search time worth one backend call (after its build); below it a layer is not started.
_MIN_SOLVE = 0.05
# A build may run this much over its estimate before the next layers' plans count it late
# (the deadline itself is never moved: a slow build only takes time from later layers).
_BUILD_SLACK = 1.5


def finish_seconds(problem: Problem) -> float:
    """Seconds kept back for assembling the plan and grading it after the last layer: 10 ms
    and 0.2 us per slot of every layer (measured under 5 ms on 58 x 288)."""
    return 0.01 + 2e-7 * problem.num_layers * problem.num_replicas


def run_exact(problem: Problem, backend: str, solve_layer: LayerSolver, options: Any) -> SolverOutput:
    """Solve every layer of ``problem`` with ``solve_layer`` (one backend's formulation);
    ``options``: the backend's typed options (see :func:`.model.exact_options`)."""
    opts = exact_options(problem, options)
    end = clock() + opts.time_limit
    explicit = isinstance(opts.warm_start, Plan)
    warm_plan, others = (opts.warm_start if explicit else None), ()
    if opts.warm_start == "auto" and opts.model != "replication":
        warm_plan, others = default_warm_plan(problem, opts, opts.time_limit)
    fixed = fixed_counts_for(problem, opts, warm_plan)
    warm_plan = fit_warm_to_counts(problem, opts, warm_plan, fixed)
    lbs = layer_problem_bound(problem, opts, fixed).cpu()
    L = problem.num_layers
    lms = [build_layer(problem, layer, opts, warm_plan, fixed, float(lbs[layer]), explicit, others)
           for layer in range(L)]
    results: list[LayerResult | None] = [None] * L
    for layer, lm in enumerate(lms):
        if lm.ub is not None and math.isfinite(lm.ub) and lm.ub <= lm.lb * (1 + BOUND_RTOL):
            results[layer] = LayerResult("optimal", xg=lm.warm, bound=lm.lb, objective=lm.ub,
                                         message="the warm start meets the bound", stats={"model": False})
    todo = solve_order(lms, [r is None for r in results])
    estimate = {layer: build_seconds(lms[layer], backend) for layer in todo}
    reserve = finish_seconds(problem)
    built, not_built = 0, []
    pace = 1.0          # measured / estimated build of the last model built (a busy machine builds slower)

    def build(o: int) -> float:
        return estimate[o] * pace * _BUILD_SLACK

    while todo:
        layer = todo.pop(0)
        left = end - reserve - clock()
        if build(layer) + _MIN_SOLVE > left:
            not_built.append(layer)            # this model does not fit; a smaller one may
            continue
        # the layers still planned after this one: those whose builds fit beside it, in order
        planned, need = [], build(layer) + _MIN_SOLVE
        for other in todo:
            if need + build(other) + _MIN_SOLVE <= left:
                planned.append(other)
                need += build(other) + _MIN_SOLVE
        builds_after = sum(build(o) for o in planned)
        share = (left - build(layer) - builds_after) / (len(planned) + 1)
        limit = build(layer) + max(_MIN_SOLVE, share)
        # the build may use the time the later layers' searches would get, never their builds
        build_by = end - reserve - builds_after - _MIN_SOLVE * (len(planned) + 1)
        res = solve_layer(lms[layer], time_limit=min(limit, left), threads=opts.threads, seed=opts.seed,
                          gap=opts.gap, deadline=build_by)
        if res.stats.get("not_built"):
            not_built.append(layer)
            pace = max(pace, res.stats.get("build_s", 0.0) / max(estimate[layer], 1e-3))
        else:
            built += 1
            if res.stats.get("build_s") is not None:
                pace = max(1.0, res.stats["build_s"] / max(estimate[layer], 1e-3))
        results[layer] = res
    for layer in not_built:                    # passed over, or its build stopped at the deadline
        tried = results[layer].stats if results[layer] is not None else {}
        results[layer] = with_counts(lms[layer], LayerResult(
            "time_limit", stats={**tried, "skipped": True, "not_built": True, "build_estimate_s": estimate[layer]},
            message=f"{NOT_BUILT}: the warm start is kept"))
    smallest = min((estimate[layer] for layer in not_built), default=0.0)
    return assemble(problem, opts, backend, lms, results, built, len(not_built), smallest)


def solve_order(lms: list[LayerModel], open_: list[bool]) -> list[int]:
    """The layers to model, widest warm-start gap first (layers without a warm start first:
    the model is their only plan; then by ub / lb, where a model can gain most)."""
    def key(layer: int) -> tuple[int, float]:
        lm = lms[layer]
        if lm.ub is None:
            return (0, 0.0)
        return (1, -(lm.ub / lm.lb if lm.lb > 0 else np.inf))
    return sorted((layer for layer, o in enumerate(open_) if o), key=key)


def assemble(problem: Problem, opts: ExactOptions, backend: str, lms: list[LayerModel],
             results: list[LayerResult], built: int, not_built: int, smallest: float = 0.0) -> SolverOutput:
    """The solve's plan, bounds, termination and message from every layer's result
    (``smallest``: the estimated build of the smallest model not built, seconds)."""
    L, R = problem.num_layers, problem.num_replicas
    phy2log = np.zeros((L, R), dtype=np.int64)
    bounds = torch.zeros(L, dtype=torch.float64)
    statuses, layers_info = [], []
    for layer, (lm, res) in enumerate(zip(lms, results)):
        row, used = _layer_plan(lm, res)
        # a layer without a plan (and not infeasible or failed) ran out of time
        status = res.status if row is not None or res.status in ("infeasible", "error") else "time_limit"
        if row is not None:
            phy2log[layer] = row
        bounds[layer] = max(float(lm.lb), -np.inf if res.bound is None else res.bound)
        statuses.append(status)
        layers_info.append({"status": status, "solution": used, "backend_status": res.message,
                            "backend_bound": res.bound, "model_objective": res.objective,
                            "warm_start_value": lm.ub, "notes": lm.notes,
                            "candidate_counts": sum(len(c) for c in lm.cand), **res.stats})
    policy = "hierarchical" if opts.hierarchical else "global"
    info = {"backend": backend, "model": opts.model, "counts": opts.counts, "colocation": opts.colocation,
            "node_budget": opts.node_budget if opts.hierarchical else None,
            "time_limit_per": "solve (shared over layers, model building included)",
            "layers_modelled": built, "layers_not_built": not_built,
            "layers_proven_by_warm_start": sum(not r.stats.get("model", True) for r in results),
            "layers": layers_info}
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
    if not_built:
        message = (f"{NOT_BUILT}: {built} of {L} layers built, {not_built} keep the warm start (the smallest "
                   f"model left needs about {smallest:.2g} s to build on 2 cores); {message}")
    if info["layers_proven_by_warm_start"]:
        message += f"; {info['layers_proven_by_warm_start']} layer(s) optimal by the warm start meeting the bound"
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
    if not res.stats.get("model", True):                     # the warm start, proven optimal
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
