"""The exact joint model in *time*, for real clusters (per-GPU speeds, uneven slot counts,
failed GPUs): what ``cpsat`` solves when the cluster is not one of identical GPUs.

One layer at a time, CP-SAT, global policy, duplicates allowed (a model of every plan, so
its proven bound is a lower bound). Candidate counts ``c`` per expert, binary ``y[e, c]``,
integer ``z[e, c, g]`` replicas of e (count c) on live GPU g:

- ``sum_g z[e, c, g] = c * y[e, c]``, one count per expert; GPU g holds exactly its
  ``slots[g]`` replicas;
- GPU g's time ``sum q[e, c, g] z[e, c, g] <= T`` with ``q[e, c, g] = floor(scale * w_e /
  (c * s_g))``: floored, so every plan's model time is at most ``scale`` x its true time
  and the proven bound over ``scale`` (rounded down) is a valid lower bound on the true
  optimum; minimise T;
- GPUs of equal speed and slot count are interchangeable: their times are ordered.

Candidate counts are pruned with the warm start's value ``ub``: a replica heavier than
``ub x`` the fastest speed cannot be in a better plan. The warm start is ``kk_swap``'s
plan (the speed-aware heuristic) unless given; its layer is kept where the model finds
nothing better. The plan is re-scored by the shared scorer; nothing here grades it.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ..bounds import lower_bound
from ..clock import clock
from ..errors import OptionError, PlanError
from ..plan import Plan
from ..problem import Problem
from ..registry import SolverOutput, run
from ..result import Termination

# A GPU's time in model units (the best possible time, W / total speed, maps to this).
TIME_UNITS = 1e9


def check_timed_options(problem: Problem, o) -> Plan | None:
    """The warm start (a Plan or None for 'auto'), after the checks of what this model supports."""
    problem.resolve_policy(o.policy)                      # hierarchical raises on a real cluster
    if o.model != "joint":
        raise OptionError("model", "on a cluster with speeds, uneven slots or failed GPUs only the joint model "
                          f"is available, got {o.model!r}")
    if o.colocation != "allowed":
        raise OptionError("colocation", "on a cluster with speeds, uneven slots or failed GPUs the exact model "
                          "allows colocation only")
    warm = o.warm_start
    if warm not in (None, "auto") and not isinstance(warm, Plan):
        raise OptionError("warm_start", f"must be 'auto', None or a solvers.Plan, got {type(warm).__name__}")
    if isinstance(warm, Plan):
        try:
            problem.validate_plan(warm.to(problem.device))
        except PlanError as exc:
            raise OptionError("warm_start", f"does not fit the problem: {exc}") from None
        return warm.to("cpu")
    return None


def _xg(p2l: np.ndarray, slot_gpu: np.ndarray, num_experts: int, num_gpus: int) -> np.ndarray:
    """[E, P] replicas of e on GPU g of a phy2log row."""
    xg = np.zeros((num_experts, num_gpus), dtype=np.int64)
    np.add.at(xg, (p2l, slot_gpu), 1)
    return xg


def solve_layer(w: np.ndarray, slots: list[int], speed: list[float], warm: np.ndarray | None, lb: float, *,
                time_limit: float, threads: int, seed: int, gap: float) -> dict:
    """One layer on the live GPUs (slots, speed: [Q]); warm: [E, Q] or None; lb: a valid bound.
    Returns {"status", "xg" [E, Q] or None, "bound" (true units) or None}."""
    from ortools.sat.python import cp_model

    start = clock()
    E, Q, R = len(w), len(slots), int(sum(slots))
    s = np.asarray(speed, dtype=np.float64)
    ideal = float(w.sum()) / float(s.sum())
    scale = TIME_UNITS / ideal if ideal > 0 else 1.0
    ub = None
    wc = None
    if warm is not None:
        wc = warm.sum(1)
        ub = float(((w / wc) @ warm / s).max())
    cap = R - E + 1
    lo = np.ones(E, dtype=np.int64)
    if ub is not None and ub > 0:               # a replica of e must run under ub on the fastest GPU
        lo = np.maximum(1, np.ceil(w / (ub * s.max()) * (1 - 1e-12) - 1e-12).astype(np.int64))
    hi = np.maximum(np.minimum(cap, R - (lo.sum() - lo)), lo)
    cand = [list(range(int(lo[e]), int(hi[e]) + 1)) for e in range(E)]
    q = {(e, c, g): int(math.floor(scale * w[e] / (c * s[g]))) for e in range(E) for c in cand[e] for g in range(Q)}
    m = cp_model.CpModel()
    y = {(e, c): m.new_bool_var(f"y{e}_{c}") for e in range(E) for c in cand[e]}
    z = {(e, c, g): m.new_int_var(0, min(c, slots[g]), f"z{e}_{c}_{g}")
         for e in range(E) for c in cand[e] for g in range(Q)}
    for e in range(E):
        m.add_exactly_one(y[e, c] for c in cand[e])
        for c in cand[e]:
            m.add(sum(z[e, c, g] for g in range(Q)) == c * y[e, c])
    t_hi = max(sum(sorted((q[e, c, g] for e in range(E) for c in cand[e]), reverse=True)[:slots[g]])
               for g in range(Q))
    if warm is not None:
        warm_times = [sum(q[e, int(wc[e]), g] * int(warm[e, g]) for e in range(E)) for g in range(Q)]
        t_hi = min(t_hi, max(warm_times))
    t_lo = max(0, min(t_hi, math.floor(lb * scale * (1 - 1e-9)) - R))
    T = m.new_int_var(t_lo, t_hi, "T")
    times = []
    for g in range(Q):
        m.add(sum(z[e, c, g] for e in range(E) for c in cand[e]) == slots[g])
        tg = m.new_int_var(0, t_hi, f"t{g}")
        m.add(tg == sum(q[e, c, g] * z[e, c, g] for e in range(E) for c in cand[e]))
        m.add(tg <= T)
        times.append(tg)
    classes: dict[tuple, list[int]] = {}
    for g in range(Q):
        classes.setdefault((speed[g], slots[g]), []).append(g)
    perm = list(range(Q))      # model GPU g takes warm GPU perm[g] (the hint obeys the ordering)
    for members in classes.values():
        ranked = sorted(members, key=lambda g: -warm_times[g]) if warm is not None else members
        for g, src in zip(members, ranked):
            perm[g] = src
        for a, b in zip(members, members[1:]):
            m.add(times[a] >= times[b])
    m.minimize(T)
    if warm is not None:
        for e in range(E):
            for c in cand[e]:
                m.add_hint(y[e, c], int(c == int(wc[e])))
                for g in range(Q):
                    m.add_hint(z[e, c, g], int(warm[e, perm[g]]) if c == int(wc[e]) else 0)
        for g in range(Q):
            m.add_hint(times[g], warm_times[perm[g]])
        m.add_hint(T, max(warm_times))
    solver = cp_model.CpSolver()
    p = solver.parameters
    p.max_time_in_seconds = max(0.05, float(time_limit - (clock() - start)))
    p.num_workers = int(threads)
    p.random_seed = int(seed)
    p.relative_gap_limit = float(gap)
    status = solver.solve(m)
    bound = None
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE, cp_model.UNKNOWN) and math.isfinite(solver.best_objective_bound):
        bound = math.nextafter(float(solver.best_objective_bound) / scale, -math.inf)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        st = "infeasible" if status == cp_model.INFEASIBLE else "time_limit"
        return {"status": st, "xg": None, "bound": bound}
    xg = np.zeros((E, Q), dtype=np.int64)
    for (e, c, g), var in z.items():
        xg[e, g] += solver.value(var)
    st = "optimal" if status == cp_model.OPTIMAL and gap == 0 else ("completed" if status == cp_model.OPTIMAL
                                                                      else "time_limit")
    return {"status": st, "xg": xg, "bound": bound}


def _time(w: np.ndarray, xg: np.ndarray, speed: list[float]) -> float:
    """Max GPU time of a placement xg: [E, Q] (even split) in float64."""
    return float(((w / xg.sum(1)) @ xg / np.asarray(speed)).max())


def run_timed(problem: Problem, o) -> SolverOutput:
    """cpsat on a heterogeneous cluster: every layer, the time limit shared over them."""
    warm_plan = check_timed_options(problem, o)
    c = problem.cluster
    live = list(c.live_gpus)
    slots = [c.gpu_slots[g] for g in live]
    speed = [c.gpu_speed[g] for g in live]
    slot_live = np.repeat(np.arange(len(live)), slots)                       # [R] live index of every slot
    if o.warm_start == "auto":
        warm_plan = run(problem.to("cpu"), "kk_swap").plan
    lbs = lower_bound(problem).cpu()
    L, E = problem.num_layers, problem.num_experts
    w_all = problem.weights.detach().cpu().to(torch.float64).numpy()
    end = clock() + o.time_limit
    rows, bounds, statuses = [], [], []
    for layer in range(L):
        w = w_all[layer]
        warm = None if warm_plan is None else _xg(warm_plan.phy2log[layer].cpu().numpy(), slot_live, E, len(live))
        left = (end - clock()) / (L - layer)
        res = solve_layer(w, slots, speed, warm, float(lbs[layer]), time_limit=max(0.05, left), threads=o.threads,
                          seed=o.seed, gap=o.gap)
        xg = res["xg"]
        if xg is not None and warm is not None and _time(w, xg, speed) > _time(w, warm, speed):
            xg = warm                                       # never worse than the warm start
        if xg is None:
            xg = warm
        if xg is None:
            return SolverOutput(None, "global", Termination.TIME_LIMIT, message=f"layer {layer}: no plan found")
        rows.append(np.concatenate([np.repeat(np.arange(E), xg[:, g]) for g in range(len(live))]))
        bounds.append(res["bound"] if res["bound"] is not None else 0.0)
        statuses.append(res["status"])
    plan = Plan.from_phy2log(torch.from_numpy(np.stack(rows)).to(problem.device), E)
    term = (Termination.TIME_LIMIT if "time_limit" in statuses else
            Termination.OPTIMAL if all(s == "optimal" for s in statuses) else Termination.COMPLETED)
    optimal = torch.tensor([s == "optimal" for s in statuses], dtype=torch.bool, device=problem.device)
    msg = ", ".join(f"{statuses.count(s)} layer(s) {s}" for s in dict.fromkeys(statuses))
    return SolverOutput(plan, "global", term, bound=torch.tensor(bounds, dtype=torch.float64), message=msg,
                        model_optimal=optimal, info={"model": "joint (time)", "layer_status": statuses})
