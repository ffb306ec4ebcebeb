"""Large-neighbourhood polish of the elastic re-plan: free the slots of a few live GPUs,
keep every other slot as it is, and solve that small subproblem exactly (CP-SAT): the
fewest moves on the freed GPUs such that every live GPU (freed or not) stays within the
target and every expert keeps a replica.

The freed GPUs' replicas may change counts: an expert held there gets any count from
``outside + k`` (k replicas on the freed GPUs), so a single move can put a hot orphan in
place of a cold expert's spare replica, or drop a replica whose siblings have room. A
count change makes the expert's replicas on the fixed GPUs heavier or lighter; those GPUs
are constrained too (their time is linear in the count's one-hot variables).

Times are integers in units of ``target / TIME_UNITS``, every coefficient rounded *up* and
the cap down, so a plan the model accepts meets the target in float64 too (it is re-checked
exactly anyway); the heuristic's layout is the hint. One neighbourhood is a few hundred
variables: CP-SAT solves it to optimality in a fraction of a second, and the polish takes
a neighbourhood only when it saves a move, so the moves never rise.

Per layer and in Python: the polish is optional, bounded by a time limit (the batched
heuristic is what runs by default).
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ..clock import clock
from .elastic_exact import layer_moves

# Model time units of the target (a GPU's time is resolved to target / TIME_UNITS).
TIME_UNITS = 1e6
# A time within this relative margin of its target meets it (as in elastic.TARGET_RTOL).
TARGET_RTOL = 1e-12
# Replicas an expert may gain on the freed GPUs beyond those it holds there now.
EXTRA_REPLICAS = 2
# Neighbourhoods in a row that save nothing before a layer's polish stops.
MAX_FAILS = 40
# Experts with the heaviest replicas offered to the freed GPUs besides those held or held before.
HOT_EXPERTS = 16


def gpu_times(w: np.ndarray, xg: np.ndarray, speed: np.ndarray) -> np.ndarray:
    """[Q] times of a placement xg [E, Q] under loads w [E] (even split over replicas)."""
    per = w / np.maximum(xg.sum(1), 1)
    return (per @ xg) / speed


def within(w: np.ndarray, xg: np.ndarray, speed: np.ndarray, target: float) -> bool:
    return bool((xg.sum(1) >= 1).all() and gpu_times(w, xg, speed).max() <= target * (1 + TARGET_RTOL))


def solve_neighbourhood(w: np.ndarray, slots: Sequence[int], speed: Sequence[float], old: np.ndarray,
                        xg: np.ndarray, target: float, free: Sequence[int], *, time_limit: float = 1.0,
                        seed: int = 0, extra: int = EXTRA_REPLICAS, hot: int = HOT_EXPERTS) -> np.ndarray | None:
    """The fewest moves with only the GPUs ``free`` changed from ``xg`` [E, Q]: the best
    placement [E, Q] CP-SAT finds in ``time_limit`` (within target in float64, every expert
    alive), or None (none found, or the model's plan fails the float64 check).

    w: [E] loads; slots, speed: [Q] of the live GPUs; old: [E, Q] bool, the pairs of the
    plan in force; target: the layer's max time allowed. The freed GPUs may take the
    experts they hold or held, the orphans and the ``hot`` experts with the heaviest
    replicas, each up to ``extra`` replicas more than it has there now; ``xg`` is the hint."""
    from ortools.sat.python import cp_model

    start = clock()
    w = np.asarray(w, dtype=np.float64)
    s = np.asarray(speed, dtype=np.float64)
    E, Q = xg.shape
    S = sorted(set(int(g) for g in free))
    fixed = [g for g in range(Q) if g not in set(S)]
    room = int(sum(slots[g] for g in S))
    out = xg[:, fixed].sum(1)                                                  # [E] replicas kept elsewhere
    inside = xg[:, S].sum(1)                                                   # [E] on the freed GPUs now
    per_now = w / np.maximum(xg.sum(1), 1)
    cand = (inside > 0) | old[:, S].any(1) | (out == 0)
    cand[np.argsort(-per_now)[:hot]] = True
    experts = np.nonzero(cand)[0].tolist()
    scale = TIME_UNITS / target
    cap = int(math.floor(scale * target))
    m = cp_model.CpModel()
    ks, y, z, p = {}, {}, {}, {}
    for e in experts:
        lo = 1 if out[e] == 0 else 0
        hi = min(room, int(inside[e]) + extra)
        ks[e] = list(range(lo, max(lo, hi) + 1))
        for k in ks[e]:
            y[e, k] = m.new_bool_var("")
        m.add_exactly_one(y[e, k] for k in ks[e])
        for g in S:
            p[e, g] = m.new_bool_var("")
            for k in ks[e]:
                if k == 0:
                    continue
                z[e, k, g] = m.new_int_var(0, min(k, slots[g]), "")
                m.add(z[e, k, g] <= min(k, slots[g]) * p[e, g])
        for k in ks[e]:
            if k:
                m.add(sum(z[e, k, g] for g in S) == k * y[e, k])
    for g in S:
        m.add(sum(v for (e, k, h), v in z.items() if h == g) == slots[g])
        m.add(sum(int(math.ceil(scale * w[e] / ((out[e] + k) * s[g]))) * v
                  for (e, k, h), v in z.items() if h == g) <= cap)
    # the fixed GPUs: their candidates' replicas grow or shrink with the count chosen
    for h in fixed:
        held = [e for e in experts if xg[e, h] > 0]
        if not held:
            continue
        rest = float(sum(xg[e, h] * per_now[e] for e in np.nonzero(xg[:, h] > 0)[0] if not cand[e]))
        terms = [int(math.ceil(scale * xg[e, h] * w[e] / ((out[e] + k) * s[h]))) * y[e, k]
                 for e in held for k in ks[e]]
        m.add(sum(terms) <= cap - int(math.ceil(scale * rest / s[h])))
    m.minimize(sum(p[e, g] for e in experts for g in S if not old[e, g]))
    for e in experts:
        for k in ks[e]:
            m.add_hint(y[e, k], int(k == inside[e]))
            for g in S:
                if k:
                    m.add_hint(z[e, k, g], int(xg[e, g]) if k == inside[e] else 0)
        for g in S:
            m.add_hint(p[e, g], int(xg[e, g] > 0))
    solver = cp_model.CpSolver()
    prm = solver.parameters
    prm.max_time_in_seconds = max(0.01, float(time_limit - (clock() - start)))
    prm.num_workers = 1
    prm.random_seed = int(seed)
    status = solver.solve(m)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    new = xg.copy()
    new[:, S] = 0
    for (e, k, g), v in z.items():
        new[e, g] += solver.value(v)
    return new if within(w, new, s, target) else None


def choose_free(xg: np.ndarray, old: np.ndarray, times: np.ndarray, size: int, rng: np.random.Generator
                ) -> list[int]:
    """Live GPUs to free: one or two holding moves (a new pair), then the GPUs with the most
    room (lowest time) and random others, ``size`` in all."""
    Q = xg.shape[1]
    moved = np.nonzero(((xg > 0) & ~old).any(0))[0]
    pick: list[int] = []
    if moved.size:
        pick += rng.choice(moved, size=min(2, moved.size), replace=False).tolist()
    low = [int(g) for g in np.argsort(times) if g not in pick]
    pick += low[:max(0, (size - len(pick)) // 2)]
    others = [g for g in range(Q) if g not in pick]
    pick += rng.choice(others, size=min(len(others), size - len(pick)), replace=False).tolist()
    return sorted(pick)


def polish_layer(w: np.ndarray, slots: Sequence[int], speed: Sequence[float], old: np.ndarray, xg: np.ndarray,
                 target: float, deadline: float, *, size: int = 6, step_limit: float = 0.5, seed: int = 0
                 ) -> np.ndarray:
    """Neighbourhoods of ``size`` GPUs, each solved exactly, until ``deadline`` (a
    :func:`clock` reading); returns the placement [E, Q] with the fewest moves found."""
    rng = np.random.default_rng(seed)
    s = np.asarray(speed, dtype=np.float64)
    fails = 0
    while clock() < deadline and fails < MAX_FAILS:
        if layer_moves(xg, old) <= int((~old.any(1)).sum()):
            break                           # as few as the orphans: optimal
        free = choose_free(xg, old, gpu_times(w, xg, s), min(size, xg.shape[1]), rng)
        limit = min(step_limit, deadline - clock())
        if limit <= 0:
            break
        new = solve_neighbourhood(w, slots, speed, old, xg, target, free, time_limit=limit,
                                  seed=int(rng.integers(1 << 30)))
        if new is None or layer_moves(new, old) >= layer_moves(xg, old):
            fails += 1
        else:
            xg, fails = new, 0
    return xg
