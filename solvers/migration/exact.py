"""Fewest moves under a balance budget, exactly: one CP-SAT model per layer.

For one layer with loads ``w [E]``, the placement in force ``old [R]`` and a load cap
``T``, choose integer replicas ``x[e, g]`` of expert e on GPU g:

- exactly S replicas per GPU; expert e has ``c_e = sum_g x[e, g]`` replicas, one value of
  a candidate window chosen by booleans ``y[e, c]``; ``z[e, c, g]`` carries x under count
  c so that the GPU load ``sum w_e / c * z[e, c, g] <= T`` stays linear;
- ``p[e, g]`` is 1 when g holds e and the old plan did not (a move, as the shared scorer
  counts it); minimise ``sum p``;
- hierarchical: booleans ``a[k, n]`` put each group on one node (G/N per node, among the
  nodes the group had in the old plan or the warm start); replicas stay on their group's node.

On a real cluster (per-GPU speeds, uneven slot counts, failed GPUs) the model is the same
in *time*: GPU g holds exactly its own ``slots[g]`` replicas (a failed GPU none, so no
replica is left on it) and its load over its speed ``s_g`` stays within the time cap ``T``
(coefficients ``w_e / (c s_g)``); global policy only.

Loads are scaled to integers with coefficients rounded *down*, so the model is a
relaxation (its bound on the moves is valid, and a plan exactly at the cap, such as the
fresh plan itself at slack 0, stays feasible); a solution is re-checked in float64 and
dropped in the rare case rounding let it past the cap. The candidate count
window (from the old, warm-start and fresh counts; every count when few are possible) is part
of the model: ``optimal`` means optimal within that window, which ``info`` states. CP-SAT
is warm-started (hinted) from the best feasible plan the caller has; its objective bound
is a proven lower bound on the moves of any plan in the model.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..clock import clock

# Scaled GPU capacity: coefficients are about this / S; large enough that rounding costs
# a relative 1e-11 of a GPU's load, small enough that sums stay far inside int64.
LOAD_UNITS = 10 ** 12
# A load within this relative margin of the cap meets it (the repair heuristic's rule).
CAP_RTOL = 1e-12
# Every count 1..R-E+1 is a candidate when there are at most this many.
FULL_WINDOW = 6


# Status of a layer whose model building ran out of its time limit (no solver call made).
BUILD_TIME_LIMIT = "BUILD_TIME_LIMIT"


# Least time worth one layer's CP-SAT call in an exact pass (as the exact solvers' driver).
MIN_LAYER_SECONDS = 0.05


class LayerShares:
    """A time limit shared over the per-layer calls of an exact pass.

    Each layer gets an even share of the time left, at least MIN_LAYER_SECONDS. The calls run
    past their limit by the model building (~0.2 s a layer at 512 experts x 128 GPUs,
    uninterruptible), so a layer starts only if the time left covers its share plus the
    largest overrun seen: the pass ends within about one layer's building of the limit."""

    def __init__(self, layers: int, time_limit: float):
        self.layers = layers
        self.deadline = clock() + time_limit
        self.overshoot = 0.0

    def share(self, layer: int) -> float | None:
        """Seconds for ``layer``'s call, or None when too little time is left to start it."""
        left = self.deadline - clock() - self.overshoot
        if left < MIN_LAYER_SECONDS:
            return None
        return min(left, max(MIN_LAYER_SECONDS, left / (self.layers - layer)))

    def ran(self, began: float, share: float) -> None:
        """Record a call that began at ``began`` with ``share`` seconds."""
        self.overshoot = max(self.overshoot, clock() - began - share)

    @staticmethod
    def not_run(layer: int) -> dict:
        return {"layer": layer, "status": "NOT_RUN", "moves": None, "bound": 0, "proven": False,
                "full_window": False}


@dataclass
class ExactLayer:
    """One layer's result. phy2log: [R] placement (None if none found); moves: its moves;
    bound: proven lower bound on the moves within the model; status: CP-SAT's status name;
    full_window: every replica count was a candidate (optimal = optimal for the problem)."""

    phy2log: np.ndarray | None
    moves: int | None
    bound: int
    status: str
    full_window: bool

    @property
    def proven(self) -> bool:
        return self.moves is not None and self.moves <= self.bound


def count_window(num_replicas: int, num_experts: int, *counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:
    """(lo [E], hi [E], full): candidate replica counts spanning ``counts`` (an expert whose
    counts agree keeps that count: a model small enough to solve on 256 x 32 layers), or
    every count when R - E + 1 <= FULL_WINDOW."""
    top = num_replicas - num_experts + 1
    if top <= FULL_WINDOW:
        return np.ones(num_experts, dtype=np.int64), np.full(num_experts, top, dtype=np.int64), True
    stack = np.stack(counts)
    lo = np.clip(stack.min(0), 1, top)
    hi = np.clip(stack.max(0), 1, top)
    return lo, hi, False


def _presence(p2l: np.ndarray, num_experts: int, num_gpus: int, slot_gpu: np.ndarray | None = None) -> np.ndarray:
    """[E, P] int replicas of e on GPU g. slot_gpu: [R] the GPU of every slot (None: R/P each)."""
    if slot_gpu is None:
        slot_gpu = np.arange(len(p2l)) // (len(p2l) // num_gpus)
    x = np.zeros((num_experts, num_gpus), dtype=np.int64)
    np.add.at(x, (p2l, slot_gpu), 1)
    return x


def layer_time(w: np.ndarray, p2l: np.ndarray, slot_gpu: np.ndarray, speed: np.ndarray) -> float:
    """Max GPU time of one layer's phy2log [R] under loads w [E] (even split), float64;
    slot_gpu: [R] the GPU of every slot, speed: [P]."""
    cnt = np.bincount(p2l, minlength=len(w))
    return float((np.bincount(slot_gpu, weights=w[p2l] / cnt[p2l], minlength=len(speed)) / speed).max())


def moves_of(p2l: np.ndarray, old: np.ndarray, num_experts: int, num_gpus: int,
             slot_gpu: np.ndarray | None = None) -> int:
    """(GPU, expert) pairs p2l holds that old did not (the shared scorer's count)."""
    return int(((_presence(p2l, num_experts, num_gpus, slot_gpu) > 0)
                & (_presence(old, num_experts, num_gpus, slot_gpu) == 0)).sum())


def solve_layer(w: np.ndarray, old: np.ndarray, cap: float, num_gpus: int, *, group_nodes: np.ndarray | None = None,
                lo: np.ndarray, hi: np.ndarray, full_window: bool = False, hint: np.ndarray | None = None,
                time_limit: float = 10.0, threads: int = 2, seed: int = 0,
                slots: np.ndarray | None = None, speed: np.ndarray | None = None) -> ExactLayer:
    """Fewest moves from ``old`` [R] such that every GPU's load under ``w`` [E] is <= ``cap``.

    slots, speed: [P] a real cluster's per-GPU slot counts (0: failed) and speeds (global
    policy only): then every GPU's *time* (load / speed) is <= ``cap``; None: R/P slots of
    speed 1 each.
    group_nodes: [G, N] bool, hierarchical only: the nodes each group of E/G consecutive
    experts may live on (whole groups, G/N per node); None = global. lo, hi: [E] candidate
    counts. hint: [R] a placement to warm-start from (used when it fits the model).
    time_limit: seconds for building and solving.
    """
    from ortools.sat.python import cp_model

    began = clock()
    E, R, P = len(w), len(old), num_gpus
    if slots is None:
        S = R // P
        per_gpu = np.full(P, S, dtype=np.int64)                               # [P] slots
        slot_gpu = None
    else:
        if group_nodes is not None:
            raise ValueError("a real cluster's exact migration model is global (no group_nodes)")
        per_gpu = np.asarray(slots, dtype=np.int64)
        slot_gpu = np.repeat(np.arange(P), per_gpu)                            # [R]
    had = _presence(old, E, P, slot_gpu) > 0
    scale = LOAD_UNITS / max(cap, 1e-300) if cap > 0 else 1.0
    cap_units = math.floor(cap * (1 + CAP_RTOL) * scale)
    m = cp_model.CpModel()
    load_terms: list[list[tuple]] = [[] for _ in range(P)]
    slot_terms: list[list] = [[] for _ in range(P)]
    cost = []
    xvars: list[tuple[int, int, object]] = []
    hint_x = _presence(hint, E, P, slot_gpu) if hint is not None else None
    hint_c = hint_x.sum(1) if hint_x is not None else None
    home = None
    if group_nodes is not None:                     # hierarchical: a[k, n] puts group k on node n
        G, N = group_nodes.shape
        Q, size = P // N, E // G
        home = {(k, n): m.NewBoolVar(f"a{k}_{n}") for k in range(G) for n in range(N) if group_nodes[k, n]}
        for k in range(G):
            m.AddExactlyOne(v for (kk, _), v in home.items() if kk == k)
        for n in range(N):
            m.Add(sum(v for (_, nn), v in home.items() if nn == n) == G // N)
        if hint is not None:
            hint_node = (np.arange(R) // S // Q)
            for (k, n), v in home.items():
                m.AddHint(v, bool(np.any(hint_node[(hint // size) == k] == n)))
    for e in range(E):
        # Building is Python, seconds on a big layer (4 s at 512 experts x 128 GPUs, one
        # expert's P variables a step): past the limit, stop and leave the layer to the caller's
        # plan (no placement, status BUILD_TIME_LIMIT).
        if clock() - began > time_limit:
            return ExactLayer(None, None, 0, BUILD_TIME_LIMIT, full_window)
        if home is None:
            gpus = np.flatnonzero(per_gpu)                                    # failed GPUs hold nothing
        else:
            k = e // size
            gpus = np.flatnonzero(np.repeat(group_nodes[k], Q))
        cands = list(range(int(lo[e]), int(hi[e]) + 1))
        ys = {c: m.NewBoolVar(f"y{e}_{c}") for c in cands}
        m.AddExactlyOne(ys.values())
        total = []
        for g in gpus:
            S = int(per_gpu[g])
            xs = m.NewIntVar(0, S, f"x{e}_{g}")
            total.append(xs)
            xvars.append((e, int(g), xs))
            if home is not None:
                m.Add(xs <= S * home[(k, int(g) // Q)])
            parts = []
            for c in cands:
                coef = math.floor(float(w[e]) / c * scale if speed is None
                                  else float(w[e]) / (c * float(speed[g])) * scale)
                if len(cands) == 1:
                    z = xs
                else:
                    z = m.NewIntVar(0, min(c, S), f"z{e}_{c}_{g}")
                    m.Add(z <= min(c, S) * ys[c])
                    parts.append(z)
                load_terms[g].append((coef, z))
                if hint_x is not None and len(cands) > 1:
                    m.AddHint(z, int(hint_x[e, g]) if hint_c[e] == c else 0)
            if parts:
                m.Add(sum(parts) == xs)
            slot_terms[g].append(xs)
            if not had[e, g]:
                p = m.NewBoolVar(f"p{e}_{g}")
                m.Add(xs <= S * p)
                cost.append(p)
                if hint_x is not None:
                    m.AddHint(p, bool(hint_x[e, g] > 0))
            if hint_x is not None:
                m.AddHint(xs, int(hint_x[e, g]))
        m.Add(sum(total) == sum(c * y for c, y in ys.items()))
        if hint_x is not None:
            for c, y in ys.items():
                m.AddHint(y, bool(hint_c[e] == c))
    for g in np.flatnonzero(per_gpu):
        m.Add(sum(slot_terms[g]) == int(per_gpu[g]))
        m.Add(sum(coef * z for coef, z in load_terms[g]) <= cap_units)
    objective = sum(cost) if cost else 0
    m.Minimize(objective)
    solver = cp_model.CpSolver()
    # the time limit covers building the model too (Python, seconds on a big layer)
    solver.parameters.max_time_in_seconds = max(0.05, float(time_limit) - (clock() - began))
    solver.parameters.num_workers = int(threads)
    solver.parameters.random_seed = int(seed)
    status = solver.Solve(m)
    name = solver.StatusName(status)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        bound = 0 if status != cp_model.INFEASIBLE else R + 1
        return ExactLayer(None, None, bound, name, full_window)
    x = np.zeros((E, P), dtype=np.int64)
    for e, g, var in xvars:
        x[e, g] = solver.Value(var)
    p2l = place(x, old, R // P if slots is None else per_gpu)
    if slot_gpu is None:
        cnt = np.bincount(p2l, minlength=E)
        worst = (w[p2l] / cnt[p2l]).reshape(P, R // P).sum(1).max()
    else:                                   # in time, float64 (the model's coefficients were floored)
        worst = layer_time(w, p2l, slot_gpu, np.asarray(speed, dtype=np.float64))
    if worst > cap * (1 + CAP_RTOL):
        return ExactLayer(None, None, int(math.ceil(solver.BestObjectiveBound() - 1e-9)), "CAP_ROUNDING",
                          full_window)
    bound = int(math.ceil(solver.BestObjectiveBound() - 1e-9)) if cost else 0
    return ExactLayer(p2l, moves_of(p2l, old, E, P, slot_gpu), bound, name, full_window)


def place(x: np.ndarray, old: np.ndarray, slots_per_gpu: int | np.ndarray) -> np.ndarray:
    """phy2log [R] from replicas x [E, P]: on every GPU, an expert the old plan had there
    keeps its old slot; the others fill the free slots. slots_per_gpu: S, or [P] per GPU
    (a real cluster: slots numbered GPU by GPU)."""
    E, P = x.shape
    per_gpu = np.broadcast_to(np.asarray(slots_per_gpu, dtype=np.int64), (P,))
    starts = np.concatenate([[0], np.cumsum(per_gpu)])
    out = np.empty(int(starts[-1]), dtype=np.int64)
    for g in range(P):
        left = x[:, g].copy()
        free = []
        for j in range(starts[g], starts[g + 1]):
            e = old[j]
            if left[e] > 0:
                out[j] = e
                left[e] -= 1
            else:
                free.append(j)
        rest = np.repeat(np.arange(E), left)
        if len(rest) != len(free):
            raise RuntimeError(f"GPU {g} gets {int(x[:, g].sum())} replicas for {int(per_gpu[g])} slots")
        out[free] = rest
    return out
