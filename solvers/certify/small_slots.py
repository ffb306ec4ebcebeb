"""Two slots per GPU (S = 2): plans by a search over replica counts with the optimal
pairing, and a lower bound from a count-choice LP.

With two replicas per GPU and fixed counts, pairing the largest replica with the
smallest is optimal, so a plan is fully described by its counts and a count vector can
be evaluated exactly in one sort (:func:`pair_values`, batched over many count vectors).

A target T splits replicas into *big* (load > T/2) and *small* (<= T/2). Two bigs never
share a GPU and two smalls always fit, so a plan with max load <= T exists iff every big
replica u gets its own small partner s <= T - u. The partner sets are nested, so by
Hall's theorem this is a *level* condition: for every requirement level r,

    #small replicas of load <= r  >=  #big replicas with requirement T - u <= r.

Each expert chooses one count c (its c replicas weigh w/c), which makes it big or small
and places it on the levels. The choice model (:func:`count_options`) is exact; its LP
relaxation (:func:`lp_feasible`, HiGHS) is fast, and a T at which the LP is infeasible
is a lower bound valid for *every* plan (global policy, free counts, duplicates
allowed), found by bisection (:func:`lp_bound`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..bounds import replica_items
from ..clock import clock
from .. import backends
from . import shares

# A T proven infeasible in float64 is reported rounded down by this much (load tests
# "w/c + w'/c' <= T" are exact to ~1e-16), so rounding never lifts a bound.
ROUND_DOWN = 1e-12


# Plans from counts ---------------------------------------------------------------------

def pair_values(weights: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """weights: [E], counts: [X, E] (rows summing to R) -> [X, R/2] GPU loads of the
    optimal pairing (largest with smallest), sorted descending."""
    X, E = counts.shape
    items = replica_items(weights.expand(X, E), counts).sort(1, descending=True).values   # [X, R]
    half = items.shape[1] // 2
    return (items[:, :half] + items[:, half:].flip(1)).sort(1, descending=True).values


def pair_phy2log(weights: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """phy2log [R] of the optimal pairing for counts [E]: GPU g holds slots 2g, 2g+1."""
    E = weights.shape[0]
    experts = torch.repeat_interleave(torch.arange(E, device=counts.device), counts)      # [R]
    order = (weights.to(torch.float64)[experts] / counts[experts]).argsort(descending=True, stable=True)
    half = order.shape[0] // 2
    return torch.stack([experts[order[:half]], experts[order[half:].flip(0)]], 1).reshape(-1)


def count_search(weights: torch.Tensor, counts: torch.Tensor, *, deadline: float,
                 top: int = 4) -> torch.Tensor:
    """Local search over counts [E] (steepest descent on single-replica moves).

    Every move takes one replica from a donor (count > 1) and gives it to another expert;
    a receiver need not sit on the busiest GPU, since a smaller replica anywhere can
    become the heaviest replica's new partner. Moves are scored by the exact optimal
    pairing: the max GPU load, ties broken by the sum of the ``top`` heaviest GPUs.
    Returns the best counts [E] found before ``deadline``.
    """
    w = weights.to(torch.float64)
    c = counts.clone()
    E = w.shape[0]
    recv_all, donor_all = torch.meshgrid(torch.arange(E), torch.arange(E), indexing="ij")
    distinct = recv_all != donor_all
    recv_all, donor_all = recv_all[distinct], donor_all[distinct]          # [E(E-1)]
    cur = pair_values(w, c[None])[0, :top]
    while clock() < deadline:
        ok = c[donor_all] > 1
        recv, donor = recv_all[ok], donor_all[ok]                           # [M]
        if recv.numel() == 0:
            break
        cand = c.expand(recv.shape[0], E).clone()                           # [M, E]
        rows = torch.arange(recv.shape[0])
        cand[rows, donor] -= 1
        cand[rows, recv] += 1
        v = pair_values(w, cand)[:, :top]                                   # [M, top]
        best = v[:, 0].min()
        tied = torch.nonzero(v[:, 0] <= best).flatten()
        i = int(tied[v[tied].sum(1).argmin()])                             # max first, then the rest
        better = float(v[i, 0]) < float(cur[0]) * (1 - 1e-12) or (
            float(v[i, 0]) <= float(cur[0]) and float(v[i].sum()) < float(cur.sum()) * (1 - 1e-12))
        if not better:
            break
        c, cur = cand[i].clone(), v[i]
    return c


def iterated_count_search(weights: torch.Tensor, counts: torch.Tensor, *, deadline: float,
                          seed: int = 0, kick: int = 3) -> torch.Tensor:
    """:func:`count_search`, then random kicks (``kick`` random single-replica moves)
    followed by descent again until ``deadline``; the best counts [E] seen."""
    gen = torch.Generator().manual_seed(seed)
    w = weights.to(torch.float64)
    best = cur = count_search(w, counts, deadline=deadline)
    best_v = float(pair_values(w, best[None])[0, 0])
    E = w.shape[0]
    while clock() < deadline and bool((cur > 1).any()):
        c = cur.clone()
        for _ in range(kick):
            donors = torch.nonzero(c > 1).flatten()
            d = int(donors[torch.randint(len(donors), (1,), generator=gen)])
            r = int(torch.randint(E, (1,), generator=gen))
            c[d] -= 1
            c[r] += 1
        c = count_search(w, c, deadline=deadline)
        v = float(pair_values(w, c[None])[0, 0])
        if v <= best_v:                       # accept equal: drift along plateaus
            cur = c
            if v < best_v:
                best, best_v = c, v
        else:
            cur = best
    return best


# The count-choice model and its LP bound -------------------------------------------------

def _smallest_count(w: float, cap: float) -> int:
    """Smallest c >= 1 with w / c <= cap (float64 division, as the scorer computes it)."""
    if w <= cap:
        return 1
    if cap <= 0:
        return 1 << 60
    c = max(1, math.ceil(w / cap))
    while w / c > cap:
        c += 1
    while c > 1 and w / (c - 1) <= cap:
        c -= 1
    return c


@dataclass
class CountOptions:
    """The count choices of one feasibility test at target T (one layer); K choices."""

    expert: np.ndarray   # [K] expert of each choice
    count: np.ndarray    # [K] replica count
    sign: np.ndarray     # [K] +1 small (supplies partners), -1 big (needs one partner each)
    level: np.ndarray    # [K] index of the first level at which the choice counts
    full: np.ndarray     # [K] bool: small and counted at every level
    num_levels: int

    def subset(self, keep: np.ndarray) -> "CountOptions":
        """The choices ``keep`` ([K] bool) only, on the same levels."""
        return CountOptions(self.expert[keep], self.count[keep], self.sign[keep], self.level[keep], self.full[keep],
                            self.num_levels)

    def matching(self, counts: np.ndarray) -> np.ndarray:
        """[K] bool: the choices that stand for ``counts`` [E]: its count, or a full choice
        below it (the replicas beyond a full choice are the model's spare ones)."""
        mine = counts[self.expert]
        return (self.count == mine) | (self.full & (self.count < mine))


def count_options(weights: np.ndarray, num_replicas: int, target: float) -> CountOptions | None:
    """Every count choice that a plan of max load <= target could make, with its level;
    None when some expert fits in no choice (T is then below the optimum).

    weights: [E] float64. Small choices stop at the count whose replica counts at every
    level ("full"); more replicas than that only add partners at every level, which the
    model's spare variable stands for, so nothing is lost.
    """
    E = len(weights)
    cmax = num_replicas - E + 1
    half = target / 2
    big, small = [], []                  # (expert, count, requirement) / (expert, count, load)
    for e, w in enumerate(weights.tolist()):
        lo = _smallest_count(w, target)
        if lo > cmax:
            return None
        for c in range(lo, min(_smallest_count(w, half), cmax + 1)):
            big.append((e, c, target - w / c))
    levels = np.unique(np.array([b[2] for b in big] + [half], dtype=np.float64))   # [L] ascending
    r_min = float(levels[0])
    full = []
    for e, w in enumerate(weights.tolist()):
        m = _smallest_count(w, half)
        if m > cmax:
            continue
        hi = min(cmax, max(m, _smallest_count(w, r_min)))
        for c in range(m, hi + 1):
            small.append((e, c, w / c))
            full.append(c == hi and w / c <= r_min)
    rows = big + small
    arr = np.array([(r[0], r[1]) for r in rows], dtype=np.int64).reshape(-1, 2)
    value = np.array([r[2] for r in rows], dtype=np.float64)
    sign = np.concatenate([-np.ones(len(big), np.int64), np.ones(len(small), np.int64)])
    # a big counts from the level equal to its requirement, a small from the first level >= its load
    level = np.searchsorted(levels, value, side="left")
    return CountOptions(arr[:, 0], arr[:, 1], sign, level, np.array([False] * len(big) + full),
                        len(levels))


def _solve_lp(o: CountOptions, num_experts: int, num_replicas: int, *, time_limit: float, threads: int,
              presolve: bool = True) -> str:
    """Build and run the LP relaxation of the count-choice model with HiGHS: its status,
    "infeasible", "feasible" or "unknown".

    Columns: one [0, 1] variable per choice, the spare replicas y, the running balance
    D_l per level. Rows: one choice per expert; slots <= R; y only beside a full choice;
    D_l = D_{l-1} + supply - demand at level l; D_l + y >= 0.
    """
    backends.highs_available()           # OR-Tools' HiGHS symbols first (see solvers.backends)
    import highspy

    E, K, L, R = num_experts, len(o.count), o.num_levels, num_replicas
    inf = highspy.kHighsInf
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", float(max(time_limit, 0.01)))
    h.setOptionValue("threads", int(threads))
    if not presolve:
        h.setOptionValue("presolve", "off")
    n = K + 1 + L
    lower = np.concatenate([np.zeros(K + 1), np.full(L, -inf)])
    upper = np.concatenate([np.ones(K), [R], np.full(L, inf)])
    h.addCols(n, np.zeros(n), lower, upper, 0, np.array([], np.int32), np.array([], np.int32), np.array([]))
    lo_, hi_, starts, idx, val = [], [], [], [], []

    def row(lo: float, hi: float, cols, coefs) -> None:
        starts.append(len(idx))
        idx.extend(cols)
        val.extend(coefs)
        lo_.append(lo)
        hi_.append(hi)

    for e in range(E):
        mine = np.flatnonzero(o.expert == e).tolist()
        row(1, 1, mine, [1.0] * len(mine))
    row(-inf, R, list(range(K)) + [K], o.count.astype(float).tolist() + [1.0])
    fulls = np.flatnonzero(o.full).tolist()
    row(-inf, 0, [K] + fulls, [1.0] + [-float(R)] * len(fulls))
    order = np.argsort(o.level, kind="stable")
    cuts = np.searchsorted(o.level[order], np.arange(L + 1))
    for lv in range(L):
        ks = order[cuts[lv]:cuts[lv + 1]]
        prev = [K + lv] if lv else []
        row(0, 0, [K + 1 + lv] + prev + ks.tolist(),
            [1.0] + [-1.0] * len(prev) + (-(o.sign[ks] * o.count[ks])).astype(float).tolist())
        row(0, inf, [K + 1 + lv, K], [1.0, 1.0])
    h.addRows(len(lo_), np.array(lo_, float), np.array(hi_, float), len(idx), np.array(starts, np.int32),
              np.array(idx, np.int32), np.array(val, float))
    backends.prepare_highs_scheduler(int(threads))   # a shared scheduler: see there
    h.run()
    status = h.getModelStatus()
    if status == highspy.HighsModelStatus.kInfeasible:
        return "infeasible"
    if status == highspy.HighsModelStatus.kOptimal:
        return "feasible"
    return "unknown"


def lp_feasible(weights: np.ndarray, num_replicas: int, target: float, *, time_limit: float,
                threads: int = 1, presolve: bool = False) -> bool | None:
    """LP relaxation of the count-choice model at ``target``: False = proven infeasible
    (so every plan has max load > target), True = LP feasible, None = not decided.
    Presolve is off by default: HiGHS 1.12's presolve once declared a tiny feasible MIP of
    this model infeasible, and an infeasible answer here is a bound."""
    o = count_options(weights, num_replicas, target)
    if o is None or any(not (o.expert == e).any() for e in range(len(weights))):
        return False
    status = _solve_lp(o, len(weights), num_replicas, time_limit=time_limit, threads=threads, presolve=presolve)
    return {"infeasible": False, "feasible": True}.get(status)


def fill_spare(weights: np.ndarray, counts: np.ndarray, num_replicas: int, target: float,
               full: np.ndarray | None = None) -> np.ndarray:
    """Counts [E] summing to R. The model's spare replicas count at every level, which is
    true of replicas of an expert at its *full* choice (load at most every requirement):
    with ``full`` ([E] bool, the experts the model put at a full choice) they all go to
    one of those. Otherwise (none given) to the small expert with the heaviest replica,
    which keeps every level condition but may not meet the model's."""
    counts = counts.copy()
    spare = num_replicas - int(counts.sum())
    if spare > 0 and full is not None and full.any():
        counts[int(np.flatnonzero(full)[0])] += spare
        return counts
    for _ in range(spare):
        per = np.where(weights / counts <= target / 2, weights / counts, -1.0)
        counts[int(per.argmax())] += 1
    return counts


def lns_counts(weights: torch.Tensor, counts: torch.Tensor, *, deadline: float, free_size: int = 12,
               step: float = 1e-3, seed: int = 0, threads: int = 1) -> torch.Tensor:
    """Large-neighbourhood search with the exact model: free the experts of the heaviest
    GPUs plus random others (``free_size`` in all), ask for a plan ``step`` (relative)
    below the incumbent, keep it when found; halve the step after a miss, and when it
    gets below 1e-7 start again from ``step`` with a neighbourhood half as large again (at
    most 3 x ``free_size``), until ``deadline``. Each neighbourhood is decided by CP-SAT
    (:func:`exact_decide` with the other experts' counts fixed)."""
    gen = np.random.default_rng(seed)
    w = weights.to(torch.float64)
    wn = w.numpy()
    best = counts.clone()
    value = float(pair_values(w, best[None])[0, 0])
    E, R = len(wn), int(counts.sum())
    first_step, first_size = step, free_size
    while clock() < deadline:
        if step < 1e-7:
            if free_size >= min(E, 3 * first_size):
                break
            step, free_size = first_step, min(E, 3 * first_size, free_size + (free_size + 1) // 2)
        heavy = pair_phy2log(w, best)[: max(2, free_size // 2)].unique().numpy()
        free = np.zeros(E, dtype=bool)
        free[heavy] = True
        rest = np.flatnonzero(~free)
        free[gen.choice(rest, size=min(len(rest), max(0, free_size - int(free.sum()))), replace=False)] = True
        limit = min(shares.LNS_CALL_MAX_S, deadline - clock())
        found = exact_decide(wn, R, value * (1 - step), time_limit=limit, threads=threads,
                             counts=best.numpy(), free=free)[1]
        if found is None:
            step /= 2
            continue
        cand = torch.as_tensor(found)
        v = float(pair_values(w, cand[None])[0, 0])
        if v < value:
            best, value = cand, v
    return best


def window_search(weights: torch.Tensor, counts: torch.Tensor, *, deadline: float, window: int = 2,
                  max_window: int = 4, step: float = 4e-3, call_limit: float = 5.0,
                  threads: int = 1) -> torch.Tensor:
    """Descent with the exact model on a count window: CP-SAT looks for a plan ``step``
    (relative) below the incumbent among the plans whose every count is within ``window``
    of the incumbent's (:func:`exact_decide` with ``window``); a plan found becomes the
    incumbent (at its own value, often well below the target), a miss or an undecided call
    (``call_limit`` seconds) halves the step. Below a step of 1e-6 the window widens by one,
    up to ``max_window``. Every expert may move at once, which is what lets it beat the
    single-replica moves of :func:`count_search` and the few-experts neighbourhoods of
    :func:`lns_counts`: a better pairing usually shifts replicas along a chain of experts.
    Returns the best counts [E] found before ``deadline``."""
    w = weights.to(torch.float64)
    wn = w.numpy()
    R = int(counts.sum())
    best = counts.clone()
    value = float(pair_values(w, best[None])[0, 0])
    first = step
    while clock() < deadline:
        if step < 1e-6:
            if window >= max_window:
                break
            window, step = window + 1, first / 4
        limit = min(call_limit, deadline - clock())
        ok, found = exact_decide(wn, R, value * (1 - step), time_limit=limit, threads=threads,
                                 counts=best.numpy(), window=window)
        if ok:
            cand = torch.as_tensor(found)
            v = float(pair_values(w, cand[None])[0, 0])
            if v < value:
                best, value = cand, v
                continue
        step /= 2                                # a miss, an undecided call, or no gain
    return best


def lp_bound(weights: np.ndarray, num_replicas: int, lower: float, upper: float, *, deadline: float,
             threads: int = 1, rtol: float = 1e-6) -> float:
    """Bisection on T in [lower, upper] with :func:`lp_feasible` (presolve off): the
    largest T proven infeasible (rounded down), a lower bound for every plan; ``lower``
    if none."""
    lo, hi = float(lower), float(upper)
    while hi > lo * (1 + rtol) and clock() < deadline:
        t = (lo + hi) / 2
        ok = lp_feasible(weights, num_replicas, t, time_limit=deadline - clock(), threads=threads,
                         presolve=False)
        if ok is None:
            break
        if ok:
            hi = t
        else:
            lo = max(lo, t * (1 - ROUND_DOWN))
    return lo


# Proofs by the exact model ------------------------------------------------------------

def candidate_below(weights: np.ndarray, num_replicas: int, value: float) -> float:
    """The largest GPU load below ``value * (1 - ROUND_DOWN)`` that any plan with two
    slots per GPU could have: a sum w_a / c_a + w_b / c_b over replica loads (a = b
    included), computed as the scorer computes it; 0 when there is none. Every plan's max
    load is such a sum, so a plan of max load below ``value`` has max load <= this."""
    E = len(weights)
    loads = np.unique((weights[:, None] / np.arange(1, num_replicas - E + 2)[None, :]).ravel())   # [n] ascending
    cap = value * (1 - ROUND_DOWN)
    j = np.searchsorted(loads, cap - loads, side="left")                                          # [n]
    best = 0.0
    for shift in (-2, -1, 0):                       # the float subtraction may miss by one either way
        k = np.clip(j + shift, 0, len(loads) - 1)
        sums = loads + loads[k]
        ok = sums < cap
        if ok.any():
            best = max(best, float(sums[ok].max()))
    return best


def exact_decide(weights: np.ndarray, num_replicas: int, target: float, *, time_limit: float, threads: int = 1,
                 counts: np.ndarray | None = None, free: np.ndarray | None = None,
                 window: int | None = None) -> tuple[bool | None, np.ndarray | None]:
    """The exact count-choice model at ``target``, decided by CP-SAT (a pure 0/1 model with
    integer coefficients, the replica counts): (False, None) = no plan has max load <=
    target (a certificate, since the model is exact); (True, counts [E]) = this plan has;
    (None, None) = not decided in ``time_limit``. ``counts``: [E] a known plan, given as
    a hint. CP-SAT rather than HiGHS: HiGHS 1.12's MIP presolve declared a tiny feasible
    instance of this model infeasible, and a proof must not rest on that. ``free``: [E]
    bool, a neighbourhood: the other experts keep their count in ``counts`` (or any count
    when theirs is no choice at ``target``); a "no" then proves nothing about all plans.
    ``window``: another neighbourhood, every expert within ``window`` of its count in
    ``counts`` (a "no" proves nothing either)."""
    o = count_options(weights, num_replicas, target)
    if o is None or np.unique(o.expert).size < len(weights):
        return False, None
    if window is not None:
        o = o.subset(np.abs(o.count - counts[o.expert]) <= window)
        if np.unique(o.expert).size < len(weights):
            return False, None
    if free is not None:
        match = o.matching(counts)
        has = np.zeros(len(weights), dtype=bool)
        has[o.expert[match]] = True
        o = o.subset((free | ~has)[o.expert] | match)
    from ortools.sat.python import cp_model

    E, K, L, R = len(weights), len(o.count), o.num_levels, num_replicas
    m = cp_model.CpModel()
    pick = [m.new_bool_var(f"x{k}") for k in range(K)]                 # [K] one choice per expert
    spare = m.new_int_var(0, R, "spare")
    order = np.argsort(o.expert, kind="stable")
    cuts = np.searchsorted(o.expert[order], np.arange(E + 1))
    for e in range(E):
        m.add_exactly_one(pick[k] for k in order[cuts[e]:cuts[e + 1]].tolist())
    m.add(sum(int(c) * x for c, x in zip(o.count.tolist(), pick)) + spare <= R)
    m.add(spare <= R * sum(pick[k] for k in np.flatnonzero(o.full).tolist()))
    order = np.argsort(o.level, kind="stable")
    cuts = np.searchsorted(o.level[order], np.arange(L + 1))
    balance = 0                                                          # running supply - demand
    for lv in range(L):
        ks = order[cuts[lv]:cuts[lv + 1]].tolist()
        if not ks:
            continue
        level = m.new_int_var(-R, R, f"d{lv}")
        m.add(level == balance + sum(int(o.sign[k] * o.count[k]) * pick[k] for k in ks))
        m.add(level + spare >= 0)
        balance = level
    if counts is not None:
        hint = o.matching(counts)
        for k in range(K):
            m.add_hint(pick[k], bool(hint[k]))
    solver = backends.cpsat_solver(max(time_limit, 0.01), threads, seed=1)     # CP-SAT's default seed
    status = solver.solve(m)
    if status == cp_model.INFEASIBLE:
        return False, None
    if status not in (cp_model.FEASIBLE, cp_model.OPTIMAL):
        return None, None
    chosen = np.array([solver.boolean_value(x) for x in pick])
    out = np.zeros(E, dtype=np.int64)
    out[o.expert[chosen]] = o.count[chosen]
    full = np.zeros(E, dtype=bool)
    full[o.expert[chosen & o.full]] = True
    return True, fill_spare(weights, out, num_replicas, target, full)


def decision_below(weights: np.ndarray, num_replicas: int, value: float) -> tuple[float, float]:
    """(target, bound): no plan with max load <= target means every plan has max load >=
    bound, where bound is ``value`` (rounded down) when the target is the largest possible
    GPU load below ``value`` (:func:`candidate_below`). The decision is taken a little above
    that candidate, so a plan of exactly that max load stays feasible despite the rounding
    of T - u in the model's levels."""
    below = candidate_below(weights, num_replicas, value)
    target, bound = below * (1 + ROUND_DOWN), value * (1 - ROUND_DOWN)
    if target >= value * (1 - 2 * ROUND_DOWN):        # candidates this close: decide just below value
        target = value * (1 - 2 * ROUND_DOWN)
        bound = target * (1 - ROUND_DOWN)
    return target, bound


def exact_search(weights: torch.Tensor, counts: torch.Tensor, lower: float, *, deadline: float,
                 threads: int = 1) -> tuple[torch.Tensor, float, bool]:
    """Bisection on the max load with the exact model as decision oracle (CP-SAT).

    Probes x between ``lower`` (a bound for every plan) and the incumbent's value v ask
    whether some plan has max load below x (the decision at the largest possible load below
    x). Yes: its counts become the incumbent (its own value, which may be well below x)
    and the next probe goes twice as deep; no: every plan has max load >= x, the bound
    rises to x and the next probe is just below v, whose "no" proves v optimal.
    Returns (counts [E], bound, proven): ``bound`` holds for every plan (global policy,
    free counts, duplicates allowed); proven: the bound meets the plan's value.
    """
    w = weights.to(torch.float64)
    wn = w.numpy()
    R = int(counts.sum())
    best = counts.clone()
    value = float(pair_values(w, best[None])[0, 0])
    lo, step = float(lower), 0.0
    while clock() < deadline:
        x = value - step * (value - lo)
        target, bound = decision_below(wn, R, x)
        if target < lo * (1 - 2 * ROUND_DOWN):           # no possible load in [lo, x): every plan >= x
            lo, step = max(lo, bound), 0.0
        else:
            left = deadline - clock()       # a deep probe gets half the time, the proof all of it
            ok, found = exact_decide(wn, R, target, time_limit=left if step == 0 else left * shares.DEEP_PROBE_SHARE,
                                     threads=threads, counts=best.numpy())
            if ok is None:
                if step == 0:
                    break
                step = 0.0
                continue
            if ok:
                cand = torch.as_tensor(found)
                v = float(pair_values(w, cand[None])[0, 0])
                if v >= value:                           # the model's plan must beat the target
                    break
                best, value = cand, v
                step = min(0.5, max(2 * step, 1 / 16))
            else:
                lo, step = max(lo, bound), 0.0
        if lo >= value * (1 - 1e-9):
            return best, lo, True
    return best, lo, False
