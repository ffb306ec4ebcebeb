"""Exact optimum for two slots per GPU (S = 2): bisection on the max load T with an
exact feasibility model over replica counts.

With two replicas per GPU a target T splits replicas into *big* (load > T/2) and
*small* (<= T/2) ones. Two bigs never share a GPU and two smalls always fit, so a plan
with max load <= T exists iff every big replica u can be paired with its own small
replica s <= T - u. The partner sets are nested (a smaller requirement T - u admits
fewer smalls), so by Hall's theorem this is the *level* condition: for every
requirement level r,

    #small replicas of load <= r  >=  #big replicas with requirement T - u <= r.

Replica counts are free: each expert chooses one count c (its c replicas weigh w/c),
which makes it big or small and places it on the levels. Feasibility of T is a small
integer program with one choice per expert and one cumulative constraint per level
(CP-SAT, exact integer arithmetic: only counts enter the constraints; loads only decide
which level each choice counts at). Extra replicas of a small expert never break the
condition, so slots left over go to small experts.

Bisection between a lower bound (infeasible T) and the incumbent (a plan's value)
gives the optimum: a T proven infeasible is a lower bound for *every* plan (global
policy, free counts, duplicates allowed), and the plan for a feasible T is built by
pairing the largest replica with the smallest, which is optimal for fixed counts.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

# A load test "a <= b" in float64 for sums of two replicas is exact to ~1e-16; a T
# proven infeasible is reported rounded down by this much, so rounding never lifts it.
ROUND_DOWN = 1e-12


def pair_items(weights: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, float]:
    """(phy2log [R], max GPU load): replicas of counts [E] (w_e / c_e each) paired
    largest with smallest, GPU g holding slots 2g and 2g+1 (optimal for fixed counts)."""
    experts = np.repeat(np.arange(len(weights)), counts)                # [R]
    items = weights[experts] / counts[experts]                            # [R]
    order = np.argsort(-items, kind="stable")
    R = len(order)
    big, small = order[: R // 2], order[R // 2:][::-1]                    # [P] each
    phy2log = np.stack([experts[big], experts[small]], 1).reshape(-1)    # [R]
    load = items[big] + items[small]                                      # [P]
    return phy2log, float(load.max())


def _smallest_count(w: float, cap: float) -> int:
    """Smallest c >= 1 with w / c <= cap (float64 division, as the scorer computes it)."""
    if w <= cap:
        return 1
    if cap <= 0:
        return 10**18
    c = max(1, math.ceil(w / cap))
    while w / c > cap:
        c += 1
    while c > 1 and w / (c - 1) <= cap:
        c -= 1
    return c


@dataclass
class Options:
    """The count choices of one feasibility test at target T (one layer)."""

    expert: np.ndarray   # [K] expert of each choice
    count: np.ndarray    # [K] replica count
    sign: np.ndarray     # [K] +1 small (supplies partners), -1 big (needs one each)
    level: np.ndarray    # [K] index of the first level the choice counts at
    full: np.ndarray     # [K] bool: small and counted at every level
    num_levels: int


def count_options(weights: np.ndarray, num_replicas: int, target: float) -> Options | None:
    """Every count choice of every expert that could appear in a plan of max load <= target,
    with its level; None if some expert cannot fit at all.

    weights: [E]. Small choices stop at the count where a replica fits every level
    ("full"); more replicas than that only add partners everywhere, which a spare
    variable of the model stands for.
    """
    E = len(weights)
    cmax = num_replicas - E + 1
    half = target / 2
    rows = []                                   # (expert, count, sign, load-or-requirement)
    for e, w in enumerate(weights.tolist()):
        lo = _smallest_count(w, target)
        if lo > cmax:
            return None
        m = _smallest_count(w, half)
        for c in range(lo, min(m, cmax + 1)):
            rows.append((e, c, -1, target - w / c))
    reqs = np.array([r[3] for r in rows], dtype=np.float64)
    levels = np.unique(np.concatenate([reqs, [half]]))                   # [K] ascending
    r_min = float(levels[0])
    full_rows = []
    for e, w in enumerate(weights.tolist()):
        m = _smallest_count(w, half)
        if m > cmax:
            continue
        hi = min(cmax, max(m, _smallest_count(w, r_min)))
        for c in range(m, hi + 1):
            rows.append((e, c, 1, w / c))
            full_rows.append(c == hi and w / c <= r_min)
    n_big = len(rows) - len(full_rows)
    arr = np.array([(r[0], r[1], r[2]) for r in rows], dtype=np.int64).reshape(-1, 3)
    value = np.array([r[3] for r in rows], dtype=np.float64)
    # Big: counted from the level equal to its requirement; small: from the first level >= its load.
    level = np.searchsorted(levels, value, side="left")
    full = np.zeros(len(rows), dtype=bool)
    full[n_big:] = np.array(full_rows, dtype=bool)
    return Options(arr[:, 0], arr[:, 1], arr[:, 2], level, full, len(levels))


def decide(weights: np.ndarray, num_replicas: int, target: float, *, time_limit: float,
           threads: int = 1, hint: np.ndarray | None = None) -> tuple[str, np.ndarray | None]:
    """Is there a plan (S = 2) with max GPU load <= target? ("feasible", counts [E]) |
    ("infeasible", None) | ("unknown", None) when the time limit stops CP-SAT first."""
    from ortools.sat.python import cp_model

    E = len(weights)
    opts = count_options(weights, num_replicas, target)
    if opts is None:
        return "infeasible", None
    m = cp_model.CpModel()
    x = [m.NewBoolVar("") for _ in range(len(opts.count))]
    for e in range(E):
        mine = np.flatnonzero(opts.expert == e)
        if len(mine) == 0:
            return "infeasible", None
        m.AddExactlyOne([x[k] for k in mine])
    spare = m.NewIntVar(0, num_replicas, "spare")
    full = [x[k] for k in np.flatnonzero(opts.full)]
    if full:
        m.Add(spare <= num_replicas * sum(full))
    else:
        m.Add(spare == 0)
    m.Add(sum(int(c) * x[k] for k, c in enumerate(opts.count)) + spare <= num_replicas)
    # Cumulative supply minus demand over levels, one constraint per level.
    by_level: list[list[int]] = [[] for _ in range(opts.num_levels)]
    for k, lv in enumerate(opts.level.tolist()):
        by_level[lv].append(k)
    prev = None
    for lv in range(opts.num_levels):
        terms = sum(int(opts.sign[k] * opts.count[k]) * x[k] for k in by_level[lv])
        d = m.NewIntVar(-num_replicas, num_replicas, "")
        m.Add(d == (prev if prev is not None else 0) + terms)
        m.Add(d + spare >= 0)
        prev = d
    if hint is not None:
        for k, (e, c) in enumerate(zip(opts.expert.tolist(), opts.count.tolist())):
            m.AddHint(x[k], int(hint[e]) == c)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(time_limit, 0.01)
    solver.parameters.num_workers = threads
    status = solver.Solve(m)
    if status == cp_model.INFEASIBLE:
        return "infeasible", None
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return "unknown", None
    counts = np.zeros(E, dtype=np.int64)
    for k in range(len(x)):
        if solver.Value(x[k]):
            counts[opts.expert[k]] = opts.count[k]
    return "feasible", fill_spare(weights, counts, num_replicas, target)


def fill_spare(weights: np.ndarray, counts: np.ndarray, num_replicas: int, target: float) -> np.ndarray:
    """Counts [E] summing to R: spare slots go to the small expert with the heaviest replica
    (more replicas of a small expert keep every level condition)."""
    counts = counts.copy()
    for _ in range(num_replicas - int(counts.sum())):
        per = np.where(weights / counts <= target / 2, weights / counts, -1.0)
        counts[int(per.argmax())] += 1
    return counts


@dataclass
class S2Result:
    """Per-layer outcome of :func:`optimum`."""

    phy2log: np.ndarray   # [R] the best plan found
    value: float          # its max GPU load
    bound: float          # a lower bound valid for every plan
    steps: int            # feasibility tests run


def optimum(weights: np.ndarray, num_replicas: int, lower: float, incumbent_counts: np.ndarray,
            *, deadline: float, threads: int = 1, rtol: float = 1e-9) -> S2Result:
    """Bisection on T in [lower, incumbent] until the plan is within ``rtol`` of the
    bound (or the deadline). weights: [E]; incumbent_counts: [E] counts of a plan."""
    phy2log, hi = pair_items(weights, incumbent_counts)
    counts = incumbent_counts
    lo, steps = float(lower), 0
    target = lo                                  # first try the bound itself
    while hi > lo * (1 + rtol) and time.perf_counter() < deadline:
        steps += 1
        status, found = decide(weights, num_replicas, target, threads=threads, hint=counts,
                               time_limit=deadline - time.perf_counter())
        if status == "unknown":
            break
        if status == "infeasible":
            lo = max(lo, target * (1 - ROUND_DOWN))
        else:
            cand, value = pair_items(weights, found)
            if value < hi:
                phy2log, hi, counts = cand, value, found
            if value > target * (1 + 1e-9):   # never: the model is exact; stay safe
                break
        target = math.sqrt(lo * hi) if lo > 0 else hi / 2
    return S2Result(phy2log, hi, lo, steps)
