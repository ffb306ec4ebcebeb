"""Fewest moves under a balance budget, exactly: one CP-SAT model per layer.

For one layer with loads ``w [E]``, the placement in force ``old [R]`` and a load cap
``T``, on the count/placement block every CP-SAT model of the package shares
(:class:`solvers.exact.cpsat.Placement`):

- booleans ``y[e, c]`` choose expert e's count c from a candidate window; integer
  ``z[e, c, g]`` replicas of e (count c) on GPU g, ``sum_g z[e, c, g] = c y[e, c]``;
  GPU g holds exactly its slots and its time ``sum w_e / (c s_g) z[e, c, g] <= T``;
- ``p[e, g]`` is 1 when g holds e and the old plan did not (a move, as the shared scorer
  counts it); minimise ``sum p``;
- hierarchical: booleans ``a[k, n]`` put each group on one node (G/N per node, among the
  nodes the group had in the old plan or the warm start); replicas stay on their group's node.

On a real cluster (per-GPU speeds, uneven slot counts, failed GPUs) GPU g holds exactly its
own ``slots[g]`` replicas (a failed GPU none, so no replica is left on it) and ``s_g`` is its
speed; global policy only. The exact elastic re-plan (``benchmarks/elastic_exact.py``) is the same model.

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
from typing import Sequence

import numpy as np

from ..backends import cpsat_solver
from ..clock import clock
from ..exact.cpsat import Placement
from ..exact.model import plan_counts_matrix

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


def layer_time(w: np.ndarray, p2l: np.ndarray, slot_gpu: np.ndarray, speed: np.ndarray) -> float:
    """Max GPU time of one layer's phy2log [R] under loads w [E] (even split), float64;
    slot_gpu: [R] the GPU of every slot, speed: [P]."""
    cnt = np.bincount(p2l, minlength=len(w))
    return float((np.bincount(slot_gpu, weights=w[p2l] / cnt[p2l], minlength=len(speed)) / speed).max())


def moves_of(p2l: np.ndarray, old: np.ndarray, num_experts: int, num_gpus: int,
             slot_gpu: np.ndarray | None = None) -> int:
    """(GPU, expert) pairs p2l holds that old did not (the shared scorer's count)."""
    slots = np.bincount(np.arange(len(p2l)) // (len(p2l) // num_gpus) if slot_gpu is None else slot_gpu,
                        minlength=num_gpus)
    return int(((plan_counts_matrix(p2l, num_experts, slots) > 0) & (plan_counts_matrix(old, num_experts, slots) == 0))
               .sum())


def fewest_moves(w: np.ndarray, had: np.ndarray, cap: float, slots: np.ndarray, speed: np.ndarray,
                 cand: Sequence[Sequence[int]], *, group_nodes: np.ndarray | None = None,
                 hint: np.ndarray | None = None, time_limit: float = 10.0, threads: int = 2,
                 seed: int = 0) -> tuple[str, np.ndarray | None, int]:
    """The CP-SAT model of the module doc, on the shared count/placement block
    (:class:`solvers.exact.cpsat.Placement`). w: [E] loads; had: [E, P] bool, the pairs of
    the plan in force; cap: max GPU time; slots, speed: [P] (0 slots: a failed GPU);
    cand[e]: candidate counts; group_nodes: [G, N] bool (hierarchical) or None; hint: [E, P]
    replicas or None. Returns (CP-SAT's status name or BUILD_TIME_LIMIT, x [E, P] or None,
    proven lower bound on the moves: 0 when none is known, R + 1 when infeasible)."""
    from ortools.sat.python import cp_model

    began = clock()
    # data: coefficients floored, the cap in the same units
    E, P = had.shape
    scale = LOAD_UNITS / max(cap, 1e-300) if cap > 0 else 1.0
    cap_units = math.floor(cap * (1 + CAP_RTOL) * scale)
    s = [float(v) for v in speed]
    m = cp_model.CpModel()
    # variables and constraints: hierarchical homes a[k, n] (G/N groups per node), then the block
    home, gpus = {}, np.flatnonzero(slots).tolist()                       # failed GPUs hold nothing
    if group_nodes is not None:
        G, N = group_nodes.shape
        Q, size = P // N, E // G
        home = {(k, n): m.new_bool_var(f"a{k}_{n}") for k in range(G) for n in range(N) if group_nodes[k, n]}
        for k in range(G):
            m.add_exactly_one(v for (kk, _), v in home.items() if kk == k)
        for n in range(N):
            m.add(sum(v for (_, nn), v in home.items() if nn == n) == G // N)
    pl = Placement(m, cand)
    cost = []
    for e in range(E):
        # Building is Python, seconds on a big layer (4 s at 512 experts x 128 GPUs): past the
        # limit, stop and leave the layer to the caller's plan.
        if clock() - began > time_limit:
            return BUILD_TIME_LIMIT, None, 0
        on = gpus if not home else np.flatnonzero(np.repeat(group_nodes[e // size], Q)).tolist()
        pl.place(e, on, lambda c, g: min(c, int(slots[g])))
        for g in on:
            x = sum(pl.z[e, c, g] for c in cand[e])
            if home:
                m.add(x <= int(slots[g]) * home[e // size, g // Q])
            if not had[e, g]:                         # p = 1: g loads e, a move
                cost.append(m.new_bool_var(f"p{e}_{g}"))
                m.add(x <= int(slots[g]) * cost[-1])
                if hint is not None:
                    m.add_hint(cost[-1], bool(hint[e, g] > 0))
    pl.gpu_rows(slots, lambda e, c, g: math.floor(float(w[e]) / (c * s[g]) * scale), cap_units, cap_units)
    # objective
    m.minimize(sum(cost) if cost else 0)
    if hint is not None:
        pl.hint(hint)
        for (k, n), v in home.items():
            m.add_hint(v, bool(hint[k * size:(k + 1) * size, n * Q:(n + 1) * Q].sum() > 0))
    # the time limit covers building the model too (Python, seconds on a big layer)
    solver = cpsat_solver(max(0.05, float(time_limit) - (clock() - began)), threads, seed)
    status = solver.solve(m)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return solver.status_name(status), None, 0 if status != cp_model.INFEASIBLE else int(slots.sum()) + 1
    bound = int(math.ceil(solver.best_objective_bound - 1e-9)) if cost else 0
    return solver.status_name(status), pl.solution(solver, (E, P)), bound


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
    E, R, P = len(w), len(old), num_gpus
    if slots is not None and group_nodes is not None:
        raise ValueError("a real cluster's exact migration model is global (no group_nodes)")
    per_gpu = np.full(P, R // P, dtype=np.int64) if slots is None else np.asarray(slots, dtype=np.int64)   # [P]
    speed = np.ones(P) if speed is None else np.asarray(speed, dtype=np.float64)
    slot_gpu = np.repeat(np.arange(P), per_gpu)                                                           # [R]
    cand = [range(int(a), int(b) + 1) for a, b in zip(lo, hi)]
    status, x, bound = fewest_moves(w, plan_counts_matrix(old, E, per_gpu) > 0, cap, per_gpu, speed, cand,
                                    group_nodes=group_nodes, time_limit=time_limit, threads=threads, seed=seed,
                                    hint=None if hint is None else plan_counts_matrix(hint, E, per_gpu))
    if x is None:
        return ExactLayer(None, None, bound, status, full_window)
    p2l = place(x, old, per_gpu)
    # in float64 (the model's coefficients were floored)
    if layer_time(w, p2l, slot_gpu, speed) > cap * (1 + CAP_RTOL):
        return ExactLayer(None, None, bound, "CAP_ROUNDING", full_window)
    return ExactLayer(p2l, moves_of(p2l, old, E, P, slot_gpu), bound, status, full_window)


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
