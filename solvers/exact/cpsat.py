"""OR-Tools CP-SAT formulation of the exact models (one layer at a time), and the one
count/placement block (:class:`Placement`) every CP-SAT model of the package is built on:
the joint, packing, hierarchical and in-time models here, the migration and elastic
fewest-moves models (:mod:`solvers.replan.exact`).

CP-SAT needs integer coefficients. A replica of e with count c on GPU g carries ``w_e /
(c s_g)``; we use ``q[e, c, g] = floor(w_e * scale / (c s_g))``:

- integer loads, speed 1 and a small common multiple of the candidate counts: ``scale`` is
  that multiple and every coefficient is exact;
- otherwise ``scale`` makes a GPU time about 1e9 units; flooring makes every model time
  <= scale * true time, so the proven bound divided by scale (rounded down) is still a
  valid bound on the true optimum, and a model optimum is within S / 1e9 (relative) of it.

Float loads are first brought to well-conditioned units (:mod:`.scaling`: a power of two
per layer, exact), so ``scale`` never overflows on tiny or subnormal loads and the result
is the same at every scale. The returned plan is re-scored by the shared scorer in
float64; nothing here grades it, and "optimal" is re-checked against the unscaled loads.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from ..backends import cpsat_solver
from ..clock import TimeUp, check_deadline, clock
from ..tolerances import CPSAT_EXACT_LIMIT, CPSAT_LOAD_UNITS
from .budget import NOT_BUILT, handover_seconds
from .model import LayerModel, LayerResult, canonical_gpu_order
from .scaling import certified, reference_load, solve_scaled, with_counts


class Placement:
    """The count/placement block of a CP-SAT model (data: candidate counts per expert).

    Variables: ``y[e][c]`` binary, expert e has c replicas (the constant 1 for a single
    candidate); ``z[e, c, g]`` integer replicas of e (count c) on GPU g. Constraints:
    ``sum_g z[e, c, g] = c y[e][c]``, one count per expert (:meth:`place`); GPU g holds
    exactly ``slots[g]`` replicas and its load ``sum coef z`` stays within a cap (:meth:`gpu_rows`).
    """

    def __init__(self, m, cand: Sequence[Sequence[int]], deadline: float | None = None):
        # deadline: a clock() time by which the model must be built (TimeUp past it; None: none)
        self.m, self.cand, self.deadline = m, cand, deadline
        self.y = [{c: (m.new_bool_var(f"y{e}_{c}") if len(cand[e]) > 1 else 1) for c in cand[e]}
                  for e in range(len(cand))]
        self.z: dict[tuple[int, int, int], object] = {}
        self.gpus: dict[int, Sequence[int]] = {}

    def place(self, e: int, gpus: Sequence[int], most: Callable[[int, int], int], forbid: bool = False) -> None:
        """Expert e's replicas over ``gpus`` (at most ``most(c, g)`` on GPU g; with
        ``forbid`` at most one whatever the count)."""
        check_deadline(self.deadline)
        m, z, cand = self.m, self.z, self.cand[e]
        self.gpus[e] = gpus
        for c in cand:
            for g in gpus:
                z[e, c, g] = m.new_int_var(0, most(c, g), f"z{e}_{c}_{g}")
            m.add(sum(z[e, c, g] for g in gpus) == c * self.y[e][c])
        if len(cand) > 1:
            m.add_exactly_one(self.y[e].values())
        if forbid:
            for g in gpus:
                m.add(sum(z[e, c, g] for c in cand) <= 1)

    def gpu_rows(self, slots: Sequence[int], coef: Callable[[int, int, int], int], hi: int, cap) -> list:
        """Per GPU g with slots: exactly ``slots[g]`` replicas, its load variable (0..hi) equal to
        ``sum coef(e, c, g) z[e, c, g]`` and at most ``cap`` (a number or the variable T)."""
        loads = []
        for g in range(len(slots)):
            if not slots[g]:
                continue
            check_deadline(self.deadline)
            pairs = [(e, c) for e in range(len(self.cand)) for c in self.cand[e] if (e, c, g) in self.z]
            self.m.add(sum(self.z[e, c, g] for e, c in pairs) == int(slots[g]))
            lg = self.m.new_int_var(0, hi, f"load{g}")
            self.m.add(lg == sum(coef(e, c, g) * self.z[e, c, g] for e, c in pairs))
            self.m.add(lg <= cap)
            loads.append(lg)
        return loads

    def hint(self, xg: np.ndarray) -> None:
        """A complete hint of the block from the placement xg [E, P] (written to the proto in
        one call per expert: ``add_hint`` per variable was a third of the model's build)."""
        counts = xg.sum(1)
        h = self.m.proto.solution_hint
        for e, cand in enumerate(self.cand):
            check_deadline(self.deadline)
            ce, gpus = int(counts[e]), self.gpus[e]
            if len(cand) > 1:
                h.vars.extend([self.y[e][c].index for c in cand])
                h.values.extend([int(c == ce) for c in cand])
            h.vars.extend([self.z[e, c, g].index for c in cand for g in gpus])
            h.values.extend([int(xg[e, g]) if c == ce else 0 for c in cand for g in gpus])

    def solution(self, solver, shape: tuple[int, int]) -> np.ndarray:
        """[E, P] replicas of e on GPU g in the solver's solution, read from its response in
        one array (``solver.value`` per variable took about 1 s on 200,000 of them)."""
        xg = np.zeros(shape, dtype=np.int64)
        if not self.z:
            return xg
        keys = np.array(list(self.z), dtype=np.int64)                              # [Z, 3] (e, c, g)
        index = np.array([v.index for v in self.z.values()], dtype=np.int64)      # [Z]
        values = np.asarray(solver.response_proto.solution, dtype=np.int64)[index]
        np.add.at(xg, (keys[:, 0], keys[:, 2]), values)
        return xg


def exact_multiplier(lm: LayerModel) -> int | None:
    """The lcm of the candidate counts when loads are integers it keeps exact (and every
    speed is 1), else None."""
    w = lm.w
    if not lm.unit_speed or not np.all(w == np.round(w)):
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
    ref = reference_load(lm)
    if not ref > 0:
        return 1, True                                   # unreachable: all-zero loads are integers
    # ref * 2**exp is about CPSAT_LOAD_UNITS. Loads reach here already scaled (reference
    # load near SCALED_LOAD_TARGET), so exp is small; the clamp keeps 2**exp a finite float.
    _, e_ref = math.frexp(ref)
    exp = max(-1000, min(1000, math.floor(math.log2(CPSAT_LOAD_UNITS)) - e_ref + 1))
    return 2 ** exp if exp >= 0 else 2.0 ** exp, False


def coefficient_cap(lm: LayerModel) -> int:
    """The largest coefficient CP-SAT can take in a GPU's load row: the row's terms times their
    variables' ranges must stay below 2**62 (its overflow check). Only extreme speed ratios
    (a GPU 1e12 times slower than another) reach it; a capped coefficient is below the true
    time, so the model's bound stays valid and its plan is re-timed in float64."""
    reach = sum(min(c, int(lm.slots.max())) for cs in lm.cand for c in cs) + 1
    return max(1, (1 << 60) // reach)


def coefficients(lm: LayerModel, scale, exact: bool) -> Callable[[int, int, int], int]:
    """q(e, c, g): scaled time of one replica of e on GPU g when e has c replicas (floored,
    at most :func:`coefficient_cap`)."""
    if exact:
        wi = [int(round(x)) for x in lm.w]
        q = [{c: wi[e] * scale // c for c in lm.cand[e]} for e in range(lm.num_experts)]
        return lambda e, c, g: q[e][c]
    cap = coefficient_cap(lm)

    def floor(x: float) -> int:
        return int(math.floor(x)) if x < cap else cap       # also inf, from a speed near 0
    if lm.unit_speed:
        q = [{c: floor(lm.w[e] * scale / c) for c in lm.cand[e]} for e in range(lm.num_experts)]
        return lambda e, c, g: q[e][c]
    s = lm.speed.tolist()
    return lambda e, c, g: floor(lm.w[e] * scale / (c * s[g]))


def solve_layer(lm: LayerModel, *, time_limit: float, threads: int, seed: int, gap: float,
                params: dict | None = None, deadline: float | None = None) -> LayerResult:
    """Solve one layer within ``time_limit`` seconds from now (model building included);
    ``params`` sets extra CP-SAT parameters (tests use it to check hints); the model must be
    built by ``deadline`` (a :func:`clock` time), else the layer has no solution and says so.

    Integer loads with exact coefficients are solved as given; any other layer in scaled
    units (:func:`.scaling.solve_scaled`)."""
    kwargs = dict(time_limit=time_limit, threads=threads, seed=seed, gap=gap, params=params, deadline=deadline)
    if exact_multiplier(lm) is not None:
        return with_counts(lm, certified(lm, _solve_units(lm, **kwargs)))
    return solve_scaled(_solve_units, lm, **kwargs)


def _solve_units(lm: LayerModel, *, time_limit: float, threads: int, seed: int, gap: float,
                 params: dict | None = None, deadline: float | None = None) -> LayerResult:
    from ortools.sat.python import cp_model

    start = clock()
    scale, exact = choose_scale(lm)
    q = coefficients(lm, scale, exact)
    m = cp_model.CpModel()
    # CP-SAT loads the model before it first reads its clock: that must fit too
    pl = Placement(m, lm.cand, None if deadline is None else deadline - handover_seconds(lm, "cpsat"))
    try:
        (_replication if lm.replication_only else _joint)(m, lm, q, pl, scale, exact)
    except TimeUp:
        return LayerResult("time_limit", message=NOT_BUILT, stats={"not_built": True, "build_s": clock() - start})
    build = clock() - start
    # CP-SAT runs past its limit by about the time it takes to load the model: kept back
    solver = cpsat_solver(max(0.05, time_limit - build - handover_seconds(lm, "cpsat")), threads, seed, gap)
    for key, value in (params or {}).items():
        setattr(solver.parameters, key, value)
    status = solver.solve(m)
    stats = {"build_s": build, "scale": float(scale), "exact_coefficients": exact, "variables": len(m.proto.variables),
             "constraints": len(m.proto.constraints), "wall": solver.wall_time,
             "conflicts": solver.num_conflicts}
    # OPTIMAL also at relative_gap_limit > 0 (the certified bound settles it); FEASIBLE or UNKNOWN: the time limit
    st = {cp_model.OPTIMAL: "optimal", cp_model.INFEASIBLE: "infeasible", cp_model.MODEL_INVALID: "error"}.get(
        status, "time_limit")
    out = dict(status=st, bound=_bound(solver, scale, st), stats=stats, message=solver.status_name(status))
    if st in ("infeasible", "error") or status == cp_model.UNKNOWN:
        return LayerResult(**out)
    out["objective"] = solver.objective_value / scale
    if lm.replication_only:
        return LayerResult(counts=np.array([next(c for c in cs if len(cs) == 1 or solver.value(pl.y[e][c]))
                                            for e, cs in enumerate(lm.cand)], dtype=np.int64), **out)
    return LayerResult(xg=pl.solution(solver, (lm.num_experts, lm.num_gpus)), **out)


def _joint(m, lm: LayerModel, q, pl: Placement, scale, exact: bool) -> None:
    """The joint / packing / hierarchical model in time (module doc of :mod:`.model`)."""
    # data
    E, P, R, cand = lm.num_experts, lm.num_gpus, lm.num_replicas, lm.cand
    gpus = range(P)
    # Largest possible GPU time (model units): the warm start's value, else a full GPU of its heaviest replica.
    view = [0] if lm.unit_speed else gpus                # the GPUs whose coefficients differ
    t_hi = max(int(lm.slots.max() if lm.unit_speed else lm.slots[g])
               * max(q(e, c, g) for e in range(E) for c in cand[e]) for g in view)
    if lm.warm is not None:
        qw = np.array([[q(e, int(lm.warm_counts[e]), g) for g in view] for e in range(E)], dtype=np.int64)
        warm_loads = (qw * lm.warm).sum(0)                                               # [P]
        perm = canonical_gpu_order(warm_loads, lm)
        warm_xg, warm_loads = lm.warm[:, perm], [int(v) for v in warm_loads[perm]]
        t_hi = max(warm_loads)
    t_lo = math.floor(lm.lb * scale * (1 - 1e-9)) - (0 if exact else int(lm.slots.max()) + 1)
    # variables (counts y: the block's): the objective T, placement z
    T = m.new_int_var(max(0, min(t_lo, t_hi)), t_hi, "T")
    for e in range(E):
        pl.place(e, gpus, lm.max_per_gpu, lm.forbid)
    # constraints: a GPU carries at least its heaviest replica (on the fastest GPU); the
    # counts fill the slots (implied by the GPU rows; both help the LP)
    free = [e for e in range(E) if len(cand[e]) > 1]
    fastest = int(np.argmax(lm.speed))
    for e in free:
        m.add(T >= sum(q(e, c, fastest) * pl.y[e][c] for c in cand[e]))
    if free:
        m.add(sum(c * pl.y[e][c] for e in free for c in cand[e])
              == R - sum(cand[e][0] for e in range(E) if len(cand[e]) == 1))
    load = pl.gpu_rows(lm.slots, q, t_hi, T)
    for members in lm.classes():                         # interchangeable GPUs: ordered times
        for a, b in zip(members, members[1:]):
            m.add(load[a] >= load[b])
    a, node_load, gpn, N = {}, [], lm.gpus_per_node, lm.num_nodes
    if lm.hierarchical:
        G = lm.num_groups
        for k in range(G):
            for n in range(N):
                a[k, n] = m.new_bool_var(f"a{k}_{n}")
            m.add_exactly_one(a[k, n] for n in range(N))
        if lm.node_budget == "fixed":
            for n in range(N):
                m.add(sum(a[k, n] for k in range(G)) == G // N)
        for (e, c, g), var in pl.z.items():
            m.add(var <= lm.max_per_gpu(c, g) * a[e // lm.group_size, g // gpn])
        for n in range(N):                               # nodes are interchangeable too
            nl = m.new_int_var(0, gpn * t_hi, f"node{n}")
            m.add(nl == sum(load[n * gpn:(n + 1) * gpn]))
            node_load.append(nl)
        for n in range(N - 1):
            m.add(node_load[n] >= node_load[n + 1])
    # objective
    m.minimize(T)
    if lm.warm is not None:                              # complete hint, consistent with the order
        pl.hint(warm_xg)
        for g in gpus:
            m.add_hint(load[g], warm_loads[g])
        m.add_hint(T, max(warm_loads))
        for n in range(len(node_load)):
            m.add_hint(node_load[n], sum(warm_loads[n * gpn:(n + 1) * gpn]))
            for k in range(lm.num_groups):
                members = range(k * lm.group_size, (k + 1) * lm.group_size)
                m.add_hint(a[k, n], int(bool(warm_xg[list(members), n * gpn:(n + 1) * gpn].sum() > 0)))


def _bound(solver, scale, st: str) -> float | None:
    """CP-SAT's proven bound in the caller's units, rounded down (None when it has none)."""
    if st in ("infeasible", "error") or not math.isfinite(solver.best_objective_bound):
        return None
    b = float(solver.best_objective_bound) / float(scale)
    return math.nextafter(b, -math.inf) if b > 0 else b


def _replication(m, lm: LayerModel, q, pl: Placement, scale, exact: bool) -> None:
    """min T subject to T >= q[e, c] y[e, c] and sum c y[e, c] = R."""
    E, R, y = lm.num_experts, lm.num_replicas, pl.y
    t_hi = max(max(q(e, c, 0) for c in lm.cand[e]) for e in range(E))
    t_lo = max(min(q(e, c, 0) for c in lm.cand[e]) for e in range(E))    # every expert at its largest count
    T = m.new_int_var(t_lo, t_hi, "T")
    for e in range(E):
        check_deadline(pl.deadline)
        if len(lm.cand[e]) > 1:
            m.add_exactly_one(y[e].values())
        for c in lm.cand[e]:
            m.add(T >= q(e, c, 0) * y[e][c])
    m.add(sum(c * y[e][c] for e in range(E) for c in lm.cand[e]) == R)
    m.minimize(T)
    if lm.warm_counts is not None:                       # complete hint: every y and T
        for e in range(E):
            if len(lm.cand[e]) > 1:
                for c in lm.cand[e]:
                    m.add_hint(y[e][c], int(c == int(lm.warm_counts[e])))
        m.add_hint(T, max(q(e, int(lm.warm_counts[e]), 0) for e in range(E)))
