"""OR-Tools CP-SAT formulation of the exact models (one layer at a time).

CP-SAT needs integer coefficients. A replica of e with count c carries ``w_e / c``; we
use ``q[e, c] = floor(w_e * scale / c)``:

- integer loads with a small common multiple of the candidate counts: ``scale`` is that
  multiple and every coefficient is exact;
- otherwise ``scale`` makes a GPU load about 1e9 units; flooring makes every model load
  <= scale * true load, so the proven bound divided by scale (rounded down) is still a
  valid bound on the true optimum, and a model optimum is within S / 1e9 (relative) of it.

Float loads are first brought to well-conditioned units (:mod:`.scaling`: a power of two
per layer, exact), so ``scale`` never overflows on tiny or subnormal loads and the result
is the same at every scale. The returned plan is re-scored by the shared scorer in
float64; nothing here grades it, and "optimal" is re-checked against the unscaled loads.
"""
from __future__ import annotations

import math

import numpy as np

from ..clock import clock
from ..tolerances import CPSAT_EXACT_LIMIT, CPSAT_LOAD_UNITS
from .model import LayerModel, LayerResult, canonical_gpu_order
from .scaling import certified, solve_scaled, with_counts


def exact_multiplier(lm: LayerModel) -> int | None:
    """The lcm of the candidate counts when loads are integers it keeps exact, else None."""
    w = lm.w
    if not np.all(w == np.round(w)):
        return None
    mult = 1
    for c in sorted({c for cs in lm.cand for c in cs}):
        mult = math.lcm(mult, c)
        if mult * float(w.sum()) > CPSAT_EXACT_LIMIT:
            return None
    return mult


def choose_scale(lm: LayerModel) -> tuple[int, bool]:
    """(scale, exact): integer multiplier of loads, and whether coefficients are exact."""
    mult = exact_multiplier(lm)
    if mult is not None:
        return mult, True
    w = lm.w
    ref = max(float(w.sum()) / lm.num_gpus, float(w.max()))
    if not ref > 0:
        return 1, True                                   # unreachable: all-zero loads are integers
    # ref * 2**exp is about CPSAT_LOAD_UNITS. Loads reach here already scaled (reference
    # load near SCALED_LOAD_TARGET), so exp is small; the clamp keeps 2**exp a finite float.
    _, e_ref = math.frexp(ref)
    exp = max(-1000, min(1000, math.floor(math.log2(CPSAT_LOAD_UNITS)) - e_ref + 1))
    return 2 ** exp if exp >= 0 else 2.0 ** exp, False


def coefficients(lm: LayerModel, scale, exact: bool) -> list[dict[int, int]]:
    """q[e][c]: scaled load of one replica of e when e has c replicas (floored)."""
    if exact:
        wi = [int(round(x)) for x in lm.w]
        return [{c: wi[e] * scale // c for c in lm.cand[e]} for e in range(lm.num_experts)]
    return [{c: int(math.floor(lm.w[e] * scale / c)) for c in lm.cand[e]} for e in range(lm.num_experts)]


def _round_down(x: float) -> float:
    return math.nextafter(x, -math.inf) if x > 0 else x


# Measured model-building cost in Python (about 30 us per placement variable, 2 cores).
SECONDS_PER_VARIABLE = 4e-5


def solve_layer(lm: LayerModel, *, time_limit: float, threads: int, seed: int, gap: float,
                params: dict | None = None) -> LayerResult:
    """Solve one layer; ``params`` sets extra CP-SAT parameters (tests use it to check hints).

    Integer loads with exact coefficients are solved as given; any other layer in scaled
    units (:func:`.scaling.solve_scaled`)."""
    kwargs = dict(time_limit=time_limit, threads=threads, seed=seed, gap=gap, params=params)
    if exact_multiplier(lm) is not None:
        return with_counts(lm, certified(lm, _solve_units(lm, **kwargs)))
    return solve_scaled(_solve_units, lm, **kwargs)


def _solve_units(lm: LayerModel, *, time_limit: float, threads: int, seed: int, gap: float,
                 params: dict | None = None) -> LayerResult:
    from ortools.sat.python import cp_model

    start = clock()
    why = lm.too_big(SECONDS_PER_VARIABLE, time_limit)
    if why:
        return LayerResult("time_limit", message=why, stats={"variables": lm.placement_variables})

    scale, exact = choose_scale(lm)
    q = coefficients(lm, scale, exact)
    E, P, S, R = lm.num_experts, lm.num_gpus, lm.slots_per_gpu, lm.num_replicas
    m = cp_model.CpModel()
    y = [{c: (m.new_bool_var(f"y{e}_{c}") if len(lm.cand[e]) > 1 else 1) for c in lm.cand[e]}
         for e in range(E)]
    warm_perm_xg = None
    if lm.replication_only:
        return _solve_replication(m, cp_model, lm, q, y, scale, exact, time_limit, threads, seed, gap)

    # Largest possible GPU load (model units): the warm start's value, else S top items.
    top = sorted((v for qe in q for v in qe.values()), reverse=True)[:S]
    t_hi = S * max(top)
    if lm.warm is not None:
        per = np.array([q[e][int(lm.warm_counts[e])] for e in range(E)], dtype=np.int64)
        perm = canonical_gpu_order(lm.warm, per, lm)
        warm_perm_xg = lm.warm[:, perm]
        warm_loads = [int(v) for v in per @ warm_perm_xg]
        t_hi = max(warm_loads)
    t_lo = math.floor(lm.lb * scale * (1 - 1e-9)) - (0 if exact else S + 1)
    t_lo = max(0, min(t_lo, t_hi))
    T = m.new_int_var(t_lo, t_hi, "T")

    z = {}
    for e in range(E):
        for c in lm.cand[e]:
            for g in range(P):
                z[e, c, g] = m.new_int_var(0, lm.max_per_gpu(c), f"z{e}_{c}_{g}")
            m.add(sum(z[e, c, g] for g in range(P)) == c * y[e][c])
        if len(lm.cand[e]) > 1:
            m.add_exactly_one(y[e].values())
        if lm.forbid:
            for g in range(P):
                m.add(sum(z[e, c, g] for c in lm.cand[e]) <= 1)
    free = [e for e in range(E) if len(lm.cand[e]) > 1]
    for e in free:                                       # a GPU carries at least its heaviest replica
        m.add(T >= sum(q[e][c] * y[e][c] for c in lm.cand[e]))
    if free:                                             # implied by the GPU rows; helps the LP
        m.add(sum(c * y[e][c] for e in free for c in lm.cand[e])
              == R - sum(lm.cand[e][0] for e in range(E) if len(lm.cand[e]) == 1))
    load = []
    for g in range(P):
        m.add(sum(z[e, c, g] for e in range(E) for c in lm.cand[e]) == S)
        lg = m.new_int_var(0, t_hi, f"load{g}")
        m.add(lg == sum(q[e][c] * z[e, c, g] for e in range(E) for c in lm.cand[e]))
        m.add(lg <= T)
        load.append(lg)
    gpn, N = lm.gpus_per_node, lm.num_nodes
    for n in range(N):                                   # GPUs of a node are interchangeable
        for g in range(n * gpn, (n + 1) * gpn - 1):
            m.add(load[g] >= load[g + 1])
    a = {}
    node_load = []
    if lm.hierarchical:
        G = lm.num_groups
        for k in range(G):
            for n in range(N):
                a[k, n] = m.new_bool_var(f"a{k}_{n}")
            m.add_exactly_one(a[k, n] for n in range(N))
        if lm.node_budget == "fixed":
            for n in range(N):
                m.add(sum(a[k, n] for k in range(G)) == G // N)
        for (e, c, g), var in z.items():
            m.add(var <= lm.max_per_gpu(c) * a[lm.group_of(e), lm.node_of_gpu(g)])
        for n in range(N):                               # nodes are interchangeable too
            nl = m.new_int_var(0, gpn * t_hi, f"node{n}")
            m.add(nl == sum(load[n * gpn:(n + 1) * gpn]))
            node_load.append(nl)
        for n in range(N - 1):
            m.add(node_load[n] >= node_load[n + 1])
    m.minimize(T)

    if warm_perm_xg is not None:                         # complete hint, consistent with the order
        for e in range(E):
            ce = int(lm.warm_counts[e])
            if len(lm.cand[e]) > 1:
                for c in lm.cand[e]:
                    m.add_hint(y[e][c], int(c == ce))
            for c in lm.cand[e]:
                for g in range(P):
                    m.add_hint(z[e, c, g], int(warm_perm_xg[e, g]) if c == ce else 0)
        for g in range(P):
            m.add_hint(load[g], warm_loads[g])
        m.add_hint(T, max(warm_loads))
        if lm.hierarchical:
            for n in range(N):
                m.add_hint(node_load[n], sum(warm_loads[n * gpn:(n + 1) * gpn]))
                for k in range(lm.num_groups):
                    members = range(k * lm.group_size, (k + 1) * lm.group_size)
                    on = bool(warm_perm_xg[list(members), n * gpn:(n + 1) * gpn].sum() > 0)
                    m.add_hint(a[k, n], int(on))

    build = clock() - start
    solver = _solver(cp_model, max(0.05, time_limit - build), threads, seed, gap)
    for key, value in (params or {}).items():
        setattr(solver.parameters, key, value)
    status = solver.solve(m)
    stats = {"build_s": build, "scale": float(scale), "exact_coefficients": exact, "variables": len(m.proto.variables),
             "constraints": len(m.proto.constraints), "wall": solver.wall_time,
             "conflicts": solver.num_conflicts}
    st = _status(cp_model, status)
    if st in ("infeasible", "error") or status == cp_model.UNKNOWN:
        return LayerResult(st, bound=_bound(solver, scale, st), stats=stats,
                           message=solver.status_name(status))
    xg = np.zeros((E, P), dtype=np.int64)
    for (e, c, g), var in z.items():
        xg[e, g] += solver.value(var)
    return LayerResult(st, xg=xg, bound=_bound(solver, scale, st), objective=solver.objective_value / scale,
                       stats=stats, message=solver.status_name(status))


def _solver(cp_model, time_limit: float, threads: int, seed: int, gap: float):
    solver = cp_model.CpSolver()
    p = solver.parameters
    p.max_time_in_seconds = float(time_limit)
    p.num_workers = int(threads)
    p.random_seed = int(seed)
    p.relative_gap_limit = float(gap)
    p.log_search_progress = False
    return solver


def _status(cp_model, status) -> str:
    if status == cp_model.OPTIMAL:
        # relative_gap_limit > 0 also reports OPTIMAL; the caller's bound settles it.
        return "optimal"
    if status == cp_model.INFEASIBLE:
        return "infeasible"
    if status == cp_model.MODEL_INVALID:
        return "error"
    return "time_limit"          # FEASIBLE or UNKNOWN: stopped by the time limit


def _bound(solver, scale, st: str) -> float | None:
    if st in ("infeasible", "error"):
        return None
    b = solver.best_objective_bound
    if not math.isfinite(b):
        return None
    return _round_down(float(b) / float(scale))


def _solve_replication(m, cp_model, lm, q, y, scale, exact, time_limit, threads, seed, gap) -> LayerResult:
    """min T subject to T >= q[e, c] y[e, c] and sum c y[e, c] = R."""
    E, R = lm.num_experts, lm.num_replicas
    t_hi = max(max(qe.values()) for qe in q)
    t_lo = max(min(qe.values()) for qe in q)          # every expert at its largest count
    T = m.new_int_var(t_lo, t_hi, "T")
    for e in range(E):
        if len(lm.cand[e]) > 1:
            m.add_exactly_one(y[e].values())
        for c in lm.cand[e]:
            m.add(T >= q[e][c] * y[e][c])
    m.add(sum(c * y[e][c] for e in range(E) for c in lm.cand[e]) == R)
    m.minimize(T)
    if lm.warm_counts is not None:                       # complete hint: every y and T
        for e in range(E):
            if len(lm.cand[e]) > 1:
                for c in lm.cand[e]:
                    m.add_hint(y[e][c], int(c == int(lm.warm_counts[e])))
        m.add_hint(T, max(q[e][int(lm.warm_counts[e])] for e in range(E)))
    solver = _solver(cp_model, time_limit, threads, seed, gap)
    status = solver.solve(m)
    st = _status(cp_model, status)
    stats = {"scale": float(scale), "exact_coefficients": exact, "wall": solver.wall_time}
    if st in ("infeasible", "error") or status == cp_model.UNKNOWN:
        return LayerResult(st, bound=_bound(solver, scale, st), stats=stats, message=solver.status_name(status))
    counts = np.array([next(c for c in lm.cand[e] if len(lm.cand[e]) == 1 or solver.value(y[e][c]))
                       for e in range(E)], dtype=np.int64)
    return LayerResult(st, counts=counts, bound=_bound(solver, scale, st),
                       objective=solver.objective_value / scale, stats=stats, message=solver.status_name(status))
