"""Brute-force optima of tiny instances (references for tests of the exact and elastic models).

Plain enumeration, no solver: every count vector, every group-to-node assignment and
every placement of replicas (GPUs filled in non-increasing lexicographic order, since
GPUs of one node are interchangeable), with pruning by the best value found. Use it
for at most about 6 experts, 4 GPUs and 12 slots.
"""
from __future__ import annotations

import itertools
import math
from typing import Sequence

import numpy as np


def compositions(total: int, parts: int, caps: Sequence[int]) -> list[tuple[int, ...]]:
    """All (c_1..c_parts) with 1 <= c_i <= caps[i] and sum == total."""
    out: list[tuple[int, ...]] = []

    def rec(i: int, left: int, acc: tuple[int, ...]):
        if i == parts - 1:
            if 1 <= left <= caps[i]:
                out.append(acc + (left,))
            return
        for c in range(1, min(caps[i], left - (parts - i - 1)) + 1):
            rec(i + 1, left - c, acc + (c,))

    if parts > 0:
        rec(0, total, ())
    return out


def packing_optimum(items: Sequence[float], counts: Sequence[int], num_gpus: int, forbid: bool) -> float:
    """min over placements of max GPU load: counts[e] replicas of load items[e] on
    num_gpus GPUs with equal slots; inf if impossible."""
    R = sum(counts)
    if R % num_gpus:
        return math.inf
    S = R // num_gpus
    E = len(counts)
    best = [math.inf]

    def gpu_choices(left: tuple[int, ...], upper: tuple[int, ...] | None):
        """Vectors v <= left with sum S (v <= 1 if forbid), lexicographically <= upper."""
        def rec(e: int, room: int, acc: tuple[int, ...], tight: bool):
            if e == E:
                if room == 0:
                    yield acc
                return
            top = min(left[e], room, 1 if forbid else room)
            if tight and upper is not None:
                top = min(top, upper[e])
            for v in range(top, -1, -1):
                yield from rec(e + 1, room - v, acc + (v,), tight and upper is not None and v == upper[e])

        yield from rec(0, S, (), True)

    def place(g: int, left: tuple[int, ...], prev: tuple[int, ...] | None, worst: float):
        if worst >= best[0]:
            return
        if g == num_gpus:
            best[0] = worst
            return
        for v in gpu_choices(left, prev):
            load = sum(items[e] * v[e] for e in range(E))
            place(g + 1, tuple(left[e] - v[e] for e in range(E)), v, max(worst, load))

    place(0, tuple(counts), None, 0.0)
    return best[0]


def _node_value(w: Sequence[float], experts: Sequence[int], slots: int, gpus: int, forbid: bool,
                counts: Sequence[int] | None) -> float:
    """Best max GPU load of one node holding ``experts`` with ``slots`` slots on ``gpus`` GPUs."""
    sub = [w[e] for e in experts]
    if counts is not None:
        cs = [counts[e] for e in experts]
        return packing_optimum([x / c for x, c in zip(sub, cs)], cs, gpus, forbid) if sum(cs) == slots else math.inf
    caps = [gpus if forbid else slots] * len(experts)
    best = math.inf
    for cs in compositions(slots, len(experts), caps):
        best = min(best, packing_optimum([x / c for x, c in zip(sub, cs)], cs, gpus, forbid))
    return best


def brute_force(weights: Sequence[float], num_replicas: int, num_gpus: int, *, model: str = "joint",
                counts: Sequence[int] | None = None, colocation: str = "allowed", num_groups: int = 1,
                num_nodes: int = 1, node_budget: str = "fixed") -> float:
    """Optimal value of one layer for ``model`` (as :mod:`solvers.exact.api` defines it).

    replication: min over counts of max_e w_e / c_e; packing: fixed ``counts``; joint:
    free counts; hierarchical: free counts unless ``counts`` is given. inf = infeasible.
    """
    w = [float(x) for x in weights]
    E, R, P = len(w), num_replicas, num_gpus
    forbid = colocation == "forbidden"
    if model == "replication":
        caps = [min(P, R - E + 1) if forbid else R - E + 1] * E
        return min((max(x / c for x, c in zip(w, cs)) for cs in compositions(R, E, caps)), default=math.inf)
    if model == "packing":
        return packing_optimum([x / c for x, c in zip(w, counts)], counts, P, forbid)
    if model == "joint":
        return _node_value(w, range(E), R, P, forbid, None)
    if model != "hierarchical":
        raise ValueError(f"unknown model {model!r}")
    G, N = num_groups, num_nodes
    size = E // G
    best = math.inf
    for assign in itertools.product(range(N), repeat=G):
        if node_budget == "fixed" and any(assign.count(n) != G // N for n in range(N)):
            continue
        value = 0.0
        for n in range(N):
            experts = [e for e in range(E) if assign[e // size] == n]
            if not experts or len(experts) > R // N:
                value = math.inf
                break
            value = max(value, _node_value(w, experts, R // N, P // N, forbid, counts))
            if value >= best:
                break
        best = min(best, value)
    return best


def cluster_brute_force(weights: Sequence[float], gpu_slots: Sequence[int], gpu_speed: Sequence[float], *,
                        colocation: str = "allowed") -> float:
    """Optimal max GPU *time* of one layer on a heterogeneous cluster, by enumeration.

    GPU g holds ``gpu_slots[g]`` slots (0 = failed) and runs at ``gpu_speed[g]``; every
    expert needs a replica, replicas carry ``w_e / c_e`` (even split). Every GPU's
    multiset of experts is enumerated (GPUs of equal slots and speed in non-increasing
    order), with pruning by the best value found. For tests: at most about 5 experts and
    10 slots. inf = infeasible (fewer slots than experts, or colocation impossible).
    """
    w = [float(x) for x in weights]
    E = len(w)
    live = [(int(c), float(s)) for c, s in zip(gpu_slots, gpu_speed) if int(c) > 0]
    R = sum(c for c, _ in live)
    forbid = colocation == "forbidden"
    best = math.inf
    if R < E:
        return best
    for counts in compositions(R, E, [R - E + 1] * E):
        if forbid and max(counts) > len(live):
            continue
        per = [x / c for x, c in zip(w, counts)]
        best = min(best, _timed_packing(per, counts, live, forbid, best))
    return best


def _timed_packing(per: Sequence[float], counts: Sequence[int], live: Sequence[tuple[int, float]],
                   forbid: bool, cutoff: float) -> float:
    """min over placements of max_g load_g / speed_g for fixed counts, or >= cutoff."""
    E = len(per)
    best = [cutoff]

    def choices(left: tuple[int, ...], room: int):
        def rec(e: int, room: int, acc: tuple[int, ...]):
            if e == E:
                if room == 0:
                    yield acc
                return
            for v in range(min(left[e], room, 1 if forbid else room), -1, -1):
                yield from rec(e + 1, room - v, acc + (v,))
        yield from rec(0, room, ())

    def place(g: int, left: tuple[int, ...], prev: tuple[int, ...] | None, worst: float):
        if worst >= best[0]:
            return
        if g == len(live):
            best[0] = worst
            return
        slots, speed = live[g]
        same = g > 0 and live[g - 1] == live[g]      # interchangeable with the previous GPU
        for v in choices(left, slots):
            if same and prev is not None and v > prev:
                continue
            t = sum(per[e] * v[e] for e in range(E)) / speed
            place(g + 1, tuple(left[e] - v[e] for e in range(E)), v, max(worst, t))

    place(0, tuple(counts), None, 0.0)
    return best[0]


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
        mv = _moves(xg, old)
        if (best is None or mv < best) and _time(w, xg, speed) <= target * (1 + 1e-12):
            best = mv
    return best


def _moves(xg: np.ndarray, old: np.ndarray) -> int:
    return int(((xg > 0) & ~old).sum())


def _time(w: np.ndarray, xg: np.ndarray, speed: Sequence[float]) -> float:
    return float(((w / xg.sum(1)) @ xg / np.asarray(speed, dtype=np.float64)).max())
