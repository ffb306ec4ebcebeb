"""The exact elastic re-plan of one layer (for proof): the fewest moves from the plan in
force such that every expert keeps a live replica and every live GPU's time is at most the
target (``(1 + slack)`` x a fresh plan's max time). CP-SAT, with a brute force for tiny
instances to check it against.

Model (live GPUs g, experts e, candidate replica counts c of e):

- ``y[e, c]`` binary, one count per expert (``c >= 1``: every expert alive; ``c`` up to
  ``1 + R - E``, every count a plan can have, so the model holds every plan);
- ``z[e, c, g]`` integer replicas of e on g when e has c replicas: ``sum_g z[e, c, g] =
  c * y[e, c]``; GPU g holds exactly ``slots[g]`` replicas;
- time: ``sum q[e, c, g] z[e, c, g] <= cap_g`` with ``q = floor(scale * w_e / (c * s_g))``
  and ``cap_g = ceil(scale * target)``: every true time is at least its model time, so the
  model holds every plan that meets the target (a relaxation) and its proven bound on the
  moves is valid; a plan the model returns is re-timed in float64 and reported as
  ``target_met`` (rounding could only let one exceed the target by under ``R / scale``);
- presence ``p[e, g]`` binary: ``p <= sum_c z[e, c, g]`` and ``z[e, c, g] <= min(c,
  slots[g]) p[e, g]``, ``sum_g p[e, g] >= 1`` (so orphans count in the LP bound); minimise
  the moves ``sum p[e, g]`` over the pairs the plan in force did not have (the shared
  scorer's count: a (GPU, expert) pair to load).

A hint (the heuristic's layout) starts the search; CP-SAT's bound is floored to an integer.
"""
from __future__ import annotations

import itertools
import math
from typing import Sequence

import numpy as np

from ..clock import clock

# Model time units of the target: a GPU's time is resolved to target / TIME_UNITS.
TIME_UNITS = 1e7


def layer_moves(xg: np.ndarray, old: np.ndarray) -> int:
    """Moves of a placement xg [E, Q] (replicas of e on live GPU g) against old [E, Q] bool."""
    return int(((xg > 0) & ~old).sum())


def layer_time(w: np.ndarray, xg: np.ndarray, speed: Sequence[float]) -> float:
    """Max GPU time of xg [E, Q] under loads w [E] (even split), float64."""
    return float(((w / xg.sum(1)) @ xg / np.asarray(speed, dtype=np.float64)).max())


def least_counts(w: np.ndarray, speed: Sequence[float], target: float) -> np.ndarray:
    """[E] int64 the fewest replicas (and GPUs) each expert needs to meet ``target``: a
    replica of e runs at least w_e / (c x fastest speed), so fewer cannot. A zero target (a
    layer without load) allows only zero loads: a loaded expert then needs more replicas
    than any plan has."""
    w = np.asarray(w, np.float64)
    if target <= 0:
        return np.where(w > 0, np.iinfo(np.int32).max, 1).astype(np.int64)
    return np.maximum(1, np.ceil(w / (target * max(speed)) * (1 - 1e-12) - 1e-9)).astype(np.int64)


def solve_elastic_layer(w: np.ndarray, slots: Sequence[int], speed: Sequence[float], old: np.ndarray,
                        target: float, *, hint: np.ndarray | None = None, time_limit: float = 10.0,
                        threads: int = 1, seed: int = 0) -> dict:
    """One layer. w: [E] loads; slots, speed: [Q] of the live GPUs; old: [E, Q] bool, the
    pairs of the plan in force; target: max time allowed; hint: [E, Q] replicas or None.
    Returns {"status": optimal | feasible | infeasible | unknown, "xg" [E, Q] or None,
    "moves", "bound" (int, valid lower bound on the moves; None if unknown), "target_met",
    "seconds"}."""
    from ortools.sat.python import cp_model

    start = clock()
    w = np.asarray(w, dtype=np.float64)
    E, Q, R = len(w), len(slots), int(sum(slots))
    s = np.asarray(speed, dtype=np.float64)
    scale = TIME_UNITS / target if target > 0 else 1.0
    cap = int(math.ceil(scale * target))
    lo = least_counts(w, s, target)
    extra = R - int(lo.sum())
    if extra < 0:
        return {"status": "infeasible", "xg": None, "moves": None, "bound": None, "target_met": False,
                "seconds": clock() - start}
    cand = [list(range(int(lo[e]), int(lo[e]) + extra + 1)) for e in range(E)]
    m = cp_model.CpModel()
    y = {(e, c): m.new_bool_var(f"y{e}_{c}") for e in range(E) for c in cand[e]}
    z = {(e, c, g): m.new_int_var(0, min(c, slots[g]), f"z{e}_{c}_{g}")
         for e in range(E) for c in cand[e] for g in range(Q)}
    for e in range(E):
        m.add_exactly_one(y[e, c] for c in cand[e])
        for c in cand[e]:
            m.add(sum(z[e, c, g] for g in range(Q)) == c * y[e, c])
    for g in range(Q):
        m.add(sum(z[e, c, g] for e in range(E) for c in cand[e]) == slots[g])
        m.add(sum(int(math.floor(scale * w[e] / (c * s[g]))) * z[e, c, g] for e in range(E) for c in cand[e]) <= cap)
    # presence: pres[e, g] = 1 iff g holds e (each replica count bounded by it: the
    # disaggregated form keeps the LP bound close); every expert on some GPU
    pres = {(e, g): m.new_bool_var(f"p{e}_{g}") for e in range(E) for g in range(Q)}
    for e in range(E):
        for g in range(Q):
            m.add(sum(z[e, c, g] for c in cand[e]) >= pres[e, g])
            for c in cand[e]:
                m.add(z[e, c, g] <= min(c, slots[g]) * pres[e, g])
        m.add(sum(pres[e, g] for g in range(Q)) >= 1)
    m.minimize(sum(pres[e, g] for e in range(E) for g in range(Q) if not old[e, g]))
    if hint is not None:
        hc = hint.sum(1)
        for e in range(E):
            for c in cand[e]:
                m.add_hint(y[e, c], int(c == hc[e]))
                for g in range(Q):
                    m.add_hint(z[e, c, g], int(hint[e, g]) if c == hc[e] else 0)
    solver = cp_model.CpSolver()
    p = solver.parameters
    p.max_time_in_seconds = max(0.05, float(time_limit - (clock() - start)))
    p.num_workers = int(threads)
    p.random_seed = int(seed)
    status = solver.solve(m)
    out = {"status": {cp_model.OPTIMAL: "optimal", cp_model.FEASIBLE: "feasible",
                      cp_model.INFEASIBLE: "infeasible"}.get(status, "unknown"),
           "xg": None, "moves": None, "bound": None, "target_met": False}
    if status != cp_model.INFEASIBLE:
        # an expert no live GPU held must be copied somewhere: valid even before CP-SAT's
        # own bound passes it (the model's presence constraints imply it)
        orphans = int((~old.any(1)).sum())
        cp = solver.best_objective_bound
        out["bound"] = max(orphans, int(math.ceil(cp - 1e-6)) if math.isfinite(cp) else 0)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        xg = np.zeros((E, Q), dtype=np.int64)
        for (e, c, g), var in z.items():
            xg[e, g] += solver.value(var)
        out.update(xg=xg, moves=layer_moves(xg, old), target_met=layer_time(w, xg, s) <= target * (1 + 1e-12))
    out["seconds"] = clock() - start
    return out


def elastic_brute_force(w: Sequence[float], slots: Sequence[int], speed: Sequence[float], old: np.ndarray,
                        target: float) -> int | None:
    """The fewest moves over every placement of the live slots (E ** R of them: tiny
    instances only) with every expert alive and max time <= target; None when none."""
    w = np.asarray(w, dtype=np.float64)
    E, Q = len(w), len(slots)
    per_gpu = [list(itertools.combinations_with_replacement(range(E), k)) for k in slots]
    best = None
    for combo in itertools.product(*per_gpu):
        xg = np.zeros((E, Q), dtype=np.int64)
        for g, experts in enumerate(combo):
            for e in experts:
                xg[e, g] += 1
        if (xg.sum(1) == 0).any():
            continue
        mv = layer_moves(xg, old)
        if (best is None or mv < best) and layer_time(w, xg, speed) <= target * (1 + 1e-12):
            best = mv
    return best


def placement(p2l_row: np.ndarray, slot_gpu: np.ndarray, live: Sequence[int], num_experts: int) -> np.ndarray:
    """[E, Q] replicas of every expert on every live GPU of a phy2log row (slot_gpu: [R]
    cluster GPU of each slot; live: the live GPUs' cluster ids, in order)."""
    idx = {g: q for q, g in enumerate(live)}
    xg = np.zeros((num_experts, len(live)), dtype=np.int64)
    for e, g in zip(p2l_row.tolist(), slot_gpu.tolist()):
        if g in idx:
            xg[e, idx[g]] += 1
    return xg


def live_view(cluster, old_cluster) -> tuple[list[int], list[int], list[float], np.ndarray, np.ndarray]:
    """The per-layer models' view of a cluster after failures: its live GPUs, their slot
    counts and speeds, and the GPU of every slot of ``old_cluster`` (the plan in force's)
    and of ``cluster`` ([R_old], [R] numpy)."""
    live = list(cluster.live_gpus)
    return (live, [cluster.gpu_slots[g] for g in live], [cluster.gpu_speed[g] for g in live],
            np.asarray(old_cluster.slot_gpus()), np.asarray(cluster.slot_gpus()))


def layer_inputs(problem, previous, previous_cluster, layers: Sequence[int]):
    """What a per-layer model of an elastic re-plan of ``previous`` (made for
    ``previous_cluster``) needs: the :func:`live_view` and, for every layer of ``layers``,
    (layer, w [E] float64 its loads, old [Q, E] bool which live GPU held which expert)."""
    view = live, _, _, old_gpu, _ = live_view(problem.cluster, previous_cluster)
    w_all = problem.weights.detach().cpu().double().numpy()
    rows = [(int(layer), w_all[layer],
             placement(previous.phy2log[layer].cpu().numpy(), old_gpu, live, problem.num_experts) > 0)
            for layer in layers]
    return view, rows


def prove_elastic(problem, previous, previous_cluster, heuristic, target: Sequence[float], layers: Sequence[int], *,
                  time_limit: float = 10.0, threads: int = 1, seed: int = 0) -> list[dict]:
    """The exact model on ``layers`` of an elastic re-plan: ``heuristic`` (its Plan, the
    hint) and ``target`` [L] (its max times allowed, ``info["target_max_time"]``). One dict
    per layer: the solve_elastic_layer result plus "layer" and "heuristic_moves"."""
    (live, slots, speed, _, new_gpu), rows = layer_inputs(problem, previous, previous_cluster, layers)
    out = []
    for layer, w, old in rows:
        hint = placement(heuristic.phy2log[layer].cpu().numpy(), new_gpu, live, problem.num_experts)
        res = solve_elastic_layer(w, slots, speed, old, float(target[layer]), hint=hint,
                                  time_limit=time_limit, threads=threads, seed=seed)
        res.pop("xg")
        out.append({"layer": int(layer), "heuristic_moves": layer_moves(hint, old), **res})
    return out
