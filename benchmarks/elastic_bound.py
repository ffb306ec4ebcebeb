"""A lower bound on the elastic re-plan's moves of one layer, from a linear relaxation
(HiGHS), valid for every plan that meets the target; for proof beside the heuristic, where
the exact CP-SAT model (:mod:`benchmarks.elastic_exact`) is too large to raise its bound.

The LP relaxes the exact model's integer program (live GPUs g, experts e, replica counts c):

- ``y[e, c]`` in [0, 1], ``sum_c y[e, c] = 1`` (``c`` from ``ceil(w_e / (target x fastest
  speed))`` up to the most a plan can give it, as in the exact model);
- ``z[e, c, g] >= 0`` replicas of e on g when e has c replicas: ``sum_g z[e, c, g] = c
  y[e, c]``; GPU g holds ``slots[g]`` replicas; its time ``sum w_e / (c s_g) z[e, c, g] <=
  target``, in exact float64 (the LP needs no rounding; a small relative margin keeps it a
  relaxation under HiGHS's tolerances);
- a pair (e, g) the plan in force did not have is a move, ``p[e, g]`` in [0, 1]:
  ``sum_c z[e, c, g] / min(c, slots[g]) <= p[e, g]`` (one row per pair: in an integer plan
  only one count is used, and g holds at most ``min(c, slots[g])`` of e's c replicas, so the
  row holds; it implies the exact model's per-count rows ``z <= min(c, slots) p``), and
  every expert is on some GPU: ``sum_g p[e, g] >= 1`` over its new pairs, unless a GPU held
  it (so every orphan costs at least one);
- minimise ``sum p[e, g]``.

Every plan meeting the target gives a feasible point of the LP with objective its moves, so
``ceil(LP optimum)`` bounds the moves. The bound returned is the largest of that, the
orphans, and the *spread* bound: an expert must be on at least ``ceil(w_e / (target x
fastest speed))`` GPUs (one GPU holding ``n`` of its ``c`` replicas runs ``n w_e / c``), so
it needs that many minus the live GPUs that held it new pairs. When HiGHS stops before
optimality the LP's value is not a bound: the other two are returned alone.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from solvers import backends
from solvers.clock import clock
from benchmarks.elastic_exact import layer_inputs, least_counts

# Relative margin on the time target in the LP (keeps it a relaxation under HiGHS's
# feasibility tolerance of 1e-7 on rows scaled to the target).
TIME_MARGIN = 1e-6
# The LP optimum is floored to an integer after this tolerance (HiGHS's optimality tolerance).
OBJ_TOL = 1e-6


def spread_bound(w: np.ndarray, speed: Sequence[float], old: np.ndarray, target: float) -> int:
    """Moves every plan meeting ``target`` needs because an expert must be on at least
    ``ceil(w_e / (target x fastest speed))`` GPUs (>= 1): the GPUs beyond those that held it
    are new pairs. w: [E]; old: [E, Q] bool, the pairs of the plan in force."""
    return int(np.maximum(0, least_counts(w, speed, target) - np.asarray(old).sum(1)).sum())


def lp_move_bound(w: np.ndarray, slots: Sequence[int], speed: Sequence[float], old: np.ndarray, target: float, *,
                  time_limit: float = 60.0, threads: int = 1) -> dict:
    """One layer: {"bound" (int, valid lower bound on the moves), "lp" (the LP optimum, or
    None when HiGHS did not prove it), "status" ("optimal" | "infeasible" | "unknown"),
    "orphans", "spread", "seconds"}. w: [E] loads; slots, speed: [Q] of the live GPUs; old:
    [E, Q] bool; target: max time allowed. "infeasible": no plan meets the target (bound
    None)."""
    backends.highs_available()           # OR-Tools' HiGHS symbols first (see solvers.backends)
    import highspy

    start = clock()
    w = np.asarray(w, dtype=np.float64)
    old = np.asarray(old, dtype=bool)
    s = np.asarray(speed, dtype=np.float64)
    slots = np.asarray(slots, dtype=np.int64)
    E, Q, R = len(w), len(slots), int(slots.sum())
    orphans = int((~old.any(1)).sum())
    spread = spread_bound(w, s, old, target)
    out = {"bound": max(orphans, spread), "lp": None, "status": "unknown", "orphans": orphans, "spread": spread}
    lo = least_counts(w, s, target)
    extra = R - int(lo.sum())
    if extra < 0:
        out.update(bound=None, status="infeasible", seconds=clock() - start)
        return out
    cap = target * (1 + TIME_MARGIN)
    # columns: y (one per (e, c)), z (per (e, c, g) whose single replica fits in time), p
    # (per new pair); built as flat index arrays, the rows as CSR triplets
    ec_e = np.repeat(np.arange(E), extra + 1)                                      # [EC]
    ec_c = (lo[:, None] + np.arange(extra + 1)[None, :]).ravel()                   # [EC]
    EC = ec_e.size
    per = w[ec_e][:, None] / (ec_c[:, None] * s[None, :])                          # [EC, Q] time of one replica
    zk, zg = np.nonzero(per <= cap)                                                # z columns: (ec, g)
    Z = zk.size
    new_e, new_g = np.nonzero(~old)
    pid = np.full((E, Q), -1, dtype=np.int64)
    pid[new_e, new_g] = np.arange(new_e.size)
    Pn = new_e.size
    y0, z0, p0 = 0, EC, EC + Z
    ncol = EC + Z + Pn
    inf = highspy.kHighsInf
    cost = np.concatenate([np.zeros(EC + Z), np.ones(Pn)])
    upper = np.concatenate([np.ones(EC), np.minimum(ec_c[zk], slots[zg]).astype(np.float64), np.ones(Pn)])
    rows_lo, rows_hi, ri, ci, vv = [], [], [], [], []
    nrow = 0

    def block(n: int, lo_: np.ndarray | float, hi_: np.ndarray | float, r: np.ndarray, c: np.ndarray,
              v: np.ndarray) -> None:
        nonlocal nrow
        rows_lo.append(np.broadcast_to(np.asarray(lo_, np.float64), (n,)))
        rows_hi.append(np.broadcast_to(np.asarray(hi_, np.float64), (n,)))
        ri.append(r + nrow)
        ci.append(c)
        vv.append(np.asarray(v, np.float64))
        nrow += n

    # one count per expert
    block(E, 1.0, 1.0, ec_e, y0 + np.arange(EC), np.ones(EC))
    # sum_g z[e, c, g] - c y[e, c] = 0
    block(EC, 0.0, 0.0, np.concatenate([zk, np.arange(EC)]), np.concatenate([z0 + np.arange(Z), y0 + np.arange(EC)]),
          np.concatenate([np.ones(Z), -ec_c.astype(np.float64)]))
    # every GPU's slots filled, and its time within the target
    block(Q, slots.astype(np.float64), slots.astype(np.float64), zg, z0 + np.arange(Z), np.ones(Z))
    block(Q, -inf, cap, zg, z0 + np.arange(Z), per[zk, zg])
    # presence of a new pair: sum_c z[e, c, g] / min(c, slots[g]) - p[e, g] <= 0
    zp = pid[ec_e[zk], zg]
    m = zp >= 0
    block(Pn, -inf, 0.0, np.concatenate([zp[m], np.arange(Pn)]),
          np.concatenate([z0 + np.nonzero(m)[0], p0 + np.arange(Pn)]),
          np.concatenate([1.0 / np.minimum(ec_c[zk[m]], slots[zg[m]]), -np.ones(Pn)]))
    # an expert no live GPU held is on some GPU: sum_g p[e, g] >= 1
    orph = np.nonzero(~old.any(1))[0]
    if orph.size:
        sel = np.isin(new_e, orph)
        where = np.searchsorted(orph, new_e[sel])
        block(orph.size, 1.0, inf, where, p0 + np.nonzero(sel)[0], np.ones(int(sel.sum())))
    r = np.concatenate(ri)
    c = np.concatenate(ci)
    v = np.concatenate(vv)
    order = np.lexsort((c, r))
    r, c, v = r[order], c[order], v[order]
    starts = np.searchsorted(r, np.arange(nrow)).astype(np.int32)
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", float(max(time_limit - (clock() - start), 0.01)))
    h.setOptionValue("threads", int(threads))
    h.addCols(ncol, cost, np.zeros(ncol), upper, 0, np.array([], np.int32), np.array([], np.int32), np.array([]))
    h.addRows(nrow, np.concatenate(rows_lo), np.concatenate(rows_hi), v.size, starts, c.astype(np.int32), v)
    h.changeObjectiveSense(highspy.ObjSense.kMinimize)
    backends.prepare_highs_scheduler(int(threads))   # a shared scheduler: see there
    h.run()
    status = h.getModelStatus()
    if status == highspy.HighsModelStatus.kInfeasible:
        out.update(bound=None, status="infeasible")
    elif status == highspy.HighsModelStatus.kOptimal:
        lp = float(h.getInfo().objective_function_value)
        out.update(lp=lp, status="optimal", bound=max(out["bound"], int(math.ceil(lp - OBJ_TOL))))
    out["seconds"] = clock() - start
    return out


def bound_elastic(problem, previous, previous_cluster, target: Sequence[float], layers: Sequence[int], *,
                  time_limit: float = 60.0, threads: int = 1) -> list[dict]:
    """:func:`lp_move_bound` on ``layers`` of an elastic re-plan of ``previous`` (made for
    ``previous_cluster``) with the per-layer ``target`` (``info["target_max_time"]``). One
    dict per layer, with "layer"."""
    (_, slots, speed, _, _), rows = layer_inputs(problem, previous, previous_cluster, layers)
    out = []
    for layer, w, old in rows:
        res = lp_move_bound(w, slots, speed, old, float(target[layer]), time_limit=time_limit,
                            threads=threads)
        out.append({"layer": int(layer), **res})
    return out
