"""Balancing a closed set of GPUs to a fraction of a token when loads are token counts.

With integer expert loads w, an expert with c replicas puts w / c = floor(w / c) +
(w mod c) / c on each GPU that holds one, so a GPU's load is an integer plus the
*residues* of its split replicas. The GPUs of a node share their load W_n, and their
mean B = W_n / n is rarely on the grid that the plan's counts allow: with every expert
at one or two replicas all loads are multiples of 1/2, so a node with B = X + 5/8
cannot get its busiest GPU below X + 1, whatever the packing. The re-splits of
:mod:`.resplit` stop there (0.002 - 0.004 % above the bound on
DeepSeek-V3 layers) because no exchange of replicas changes the residues.

Here the residues are designed first, then the integers packed around them, for a
target max load C:

1. **Design** (CP-SAT): which experts get c >= 2 replicas (c <= n, each replica on its own
   GPU), using exactly the set's spare slots, and where they go. GPU g then holds F_g of
   split load and its whole experts must fit in C - F_g; being integers they fit in
   floor(C - F_g), so a GPU *wastes* frac(C - F_g). The whole experts weigh W_n - sum F_g,
   which forces ``sum_g frac(C - F_g) <= n (C - B)``: a condition on residues only
   (``(w mod c) * D / c`` in units of 1/D, D = lcm(2..c_max), c_max = min(n, spare slots
   + 1, MAX_SPLIT)). Experts too heavy for the packing (not fitting whole beside the S - 1
   lightest ones) are placed by the design, whole or split.
2. **Packing** (a randomised walk of exact two-GPU re-splits): the whole experts go to the
   GPUs with exactly the slots the design left, each GPU within C - F_g; a pair of GPUs
   is re-split (every split enumerated) to lower the larger of their two overflows, ties
   broken at random, until no GPU overflows.

Either step can fail (the design is a necessary condition with restricted counts, the
walk a heuristic), so nothing here proves a bound; :func:`balance_gpus` tries C = B (a
plan there is optimal), then bisects C between B and the plan's max load, and keeps a
packing only when it is better. On the six
DeepSeek-V3 prefill layers of ``benchmarks.certify_targets`` (hierarchical, busiest node:
64 experts, 72 slots, 8 GPUs) a design at B + 0.2 tokens takes 2 - 7 s and the packing
under 0.2 s.
"""
from __future__ import annotations

import itertools
import math
from fractions import Fraction
from functools import lru_cache

import numpy as np

from .. import backends
from ..clock import clock
from . import shares

# Largest replica count a design gives one expert (D = lcm(2..16) = 720720 keeps the
# residue sums far inside int64).
MAX_SPLIT = 16
# Placement variables (experts x counts x GPUs) a design may have; a larger set considers
# a sample of its experts. CP-SAT needed about a minute for all 256 DeepSeek-V3 experts on
# 32 GPUs (57 000 at counts up to 8), 12 - 21 s for 36 of them, and a few seconds for a
# 64-expert, 8-GPU node (4 096).
MAX_DESIGN_VARS = 20_000
# Larger sets consider a sample of this many experts or more per design (the ones the plan
# already splits first); fewer would leave too few residues to choose from.
MIN_CANDIDATES = 32
# Tried only where the busiest GPU is within this many tokens of the mean: farther, the gap
# is in the packing of whole tokens, not in the residues (OLMoE prefill-4x8 at 80+ tokens:
# nothing found in 40 s, where the re-splits had stopped after 4 s).
MAX_EXCESS_TOKENS = 2.0
# The packing walk gives up after this many steps per pair of GPUs without a lower overflow.
STALL = 200


def integral(weights: np.ndarray) -> bool:
    """Whether every load is an integer that float64 represents exactly (token counts)."""
    return bool(np.all(weights == np.round(weights)) and np.all(np.abs(weights) < 2 ** 52))


def _top(num_experts: int, num_gpus: int, slots: int) -> int:
    """Largest replica count a design gives one expert."""
    return max(1, min(num_gpus, num_gpus * slots - num_experts + 1, MAX_SPLIT))


def design_room(num_experts: int, num_gpus: int, slots: int) -> int:
    """How many experts a design of this set may consider splitting (MAX_DESIGN_VARS)."""
    return min(num_experts, MAX_DESIGN_VARS // (_top(num_experts, num_gpus, slots) * num_gpus))


def fits(num_experts: int, num_gpus: int, slots: int) -> bool:
    """Whether a design of this set can consider at least MIN_CANDIDATES experts (or all)."""
    return design_room(num_experts, num_gpus, slots) >= min(num_experts, MIN_CANDIDATES)


@lru_cache(maxsize=256)
def _combos(pool: int, take: int) -> np.ndarray:
    """[M, take] every choice of ``take`` of ``pool`` items."""
    rows = list(itertools.combinations(range(pool), take))
    return np.array(rows, dtype=np.int64).reshape(len(rows), take)


def design(weights: np.ndarray, num_gpus: int, slots: int, target: float | Fraction, *, time_limit: float,
           threads: int = 1, seed: int = 0, candidates: np.ndarray | None = None,
           hint: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """Residue design for max load ``target``: (counts [I], placed [I, n] 0/1: the GPUs
    that hold a replica of each expert the design places: every split one, and whole ones
    too heavy for the packing), or None (infeasible or not found in time).

    weights: [I] integer loads of the set's experts; n = num_gpus GPUs of ``slots`` slots;
    candidates: [I] bool, the experts the design may split (default all, when the model
    stays within MAX_DESIGN_VARS; heavy ones always); hint: [n, S] a plan of the set (local
    expert ids), given to CP-SAT as a starting point: where its experts sit.
    """
    from ortools.sat.python import cp_model

    I, n, S = len(weights), num_gpus, slots
    extra = n * S - I
    if extra < 0:
        return None
    wi = [int(x) for x in weights]
    total = sum(wi)
    top = _top(I, n, S)
    D = math.lcm(*range(2, max(top, 2) + 1))
    cap_units = math.floor(Fraction(target) * D)             # C' = cap_units / D <= target, exactly
    budget = n * cap_units - total * D                       # n (C' - B) in units of 1/D
    if budget < 0:
        return None
    wmin = min(wi)
    # An expert whose replica cannot fit beside S - 1 of the lightest possible replicas
    # needs more replicas; one too heavy to sit whole beside S - 1 whole experts is placed
    # by the design even when whole (the packing could not fit it).
    light = wmin * D // top
    need, heavy = [], []
    for w in wi:
        c = 1
        while c <= top and w * D // c + (S - 1) * light > cap_units:
            c += 1
        if c > top:
            return None
        need.append(c)
        heavy.append(w * D + (S - 1) * wmin * D > cap_units)
    if candidates is None and I * top * n > MAX_DESIGN_VARS:
        return None
    free = np.ones(I, dtype=bool) if candidates is None else np.asarray(candidates, dtype=bool)
    free = free | np.array(heavy) | (np.array(need) > 1)
    counts = range(1, top + 1)
    m = cp_model.CpModel()
    pick = {(i, c): m.new_bool_var("") for i in range(I) for c in counts
            if free[i] and c >= need[i] and (c > 1 or heavy[i])}
    on = {(i, c, g): m.new_bool_var("") for (i, c) in pick for g in range(n)}
    for i in range(I):
        mine = [pick[i, c] for c in counts if (i, c) in pick]
        if need[i] > 1 or heavy[i]:
            m.add_exactly_one(mine)
        elif mine:
            m.add_at_most_one(mine)
    for (i, c), v in pick.items():
        m.add(sum(on[i, c, g] for g in range(n)) == c * v)
    m.add(sum((c - 1) * v for (i, c), v in pick.items()) == extra)
    frac_cap = cap_units % D
    waste = []
    here = list(pick)
    for g in range(n):
        held = sum(on[i, c, g] for i, c in here)
        m.add(held <= S)
        # The split load's integer part plus the whole experts still to come fit under C'.
        m.add(sum((wi[i] // c - wmin) * on[i, c, g] for i, c in here) + S * wmin <= cap_units // D)
        resid = sum((wi[i] % c) * (D // c) * on[i, c, g] for i, c in here)
        wrap = m.new_int_var(-S - 1, 1, "")
        wg = m.new_int_var(0, D - 1, "")
        m.add(frac_cap - resid - D * wrap == wg)               # wg = frac(C' - F_g) in units
        waste.append(wg)
    m.add(sum(waste) <= min(budget, n * D))                  # waste < n D anyway; keeps int64
    if hint is not None:
        per_gpu = np.zeros((I, n), dtype=np.int64)                       # [I, n] the hint's replicas per GPU
        np.add.at(per_gpu, (hint, np.arange(n)[:, None].repeat(hint.shape[1], 1)), 1)
        had = per_gpu.sum(1)
        for (i, c), v in pick.items():
            m.add_hint(v, int(had[i] == c))
            for g in range(n):
                m.add_hint(on[i, c, g], int(had[i] == c and per_gpu[i, g] > 0))
    solver = backends.cpsat_solver(max(float(time_limit), 0.01), threads, seed)
    status = solver.solve(m)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    cnt = np.ones(I, dtype=np.int64)
    placed = np.zeros((I, n), dtype=np.int64)
    for (i, c), v in pick.items():
        if solver.value(v):
            cnt[i] = c
            placed[i] = [solver.value(on[i, c, g]) for g in range(n)]
    return cnt, placed


def pack_whole(items: np.ndarray, caps: np.ndarray, room: np.ndarray, *, deadline: float,
               seed: int = 0) -> list[list[int]] | None:
    """Whole items into bins: bin g takes exactly ``room[g]`` items weighing <= caps[g].

    items: [J] loads; caps: [n]; room: [n] ints summing to J. Greedy (heaviest item to
    the bin with most room under its cap), then a randomised walk of exact two-bin
    re-splits, each lowering (or keeping, ties at random) the larger overflow of its
    pair. Returns the bins' item indices, or None if some bin still overflows at
    ``deadline`` or after ``STALL`` steps per pair of bins without progress.
    """
    rng = np.random.default_rng(seed)
    n = len(caps)
    bins: list[list[int]] = [[] for _ in range(n)]
    sums = np.zeros(n)
    for j in np.argsort(-items, kind="stable"):
        open_ = [g for g in range(n) if len(bins[g]) < room[g]]
        g = max(open_, key=lambda b: caps[b] - sums[b])
        bins[g].append(int(j))
        sums[g] += items[j]
    caps = caps + 4 * np.spacing(np.abs(caps))    # the float rounding of caps (1e-4 at 1e12 tokens), no more
    step, best, since = 0, np.inf, 0
    while True:
        over = sums - caps
        if over.max() <= 0:
            return bins
        if over.max() < best:
            best, since = over.max(), 0
        since += 1
        if clock() >= deadline or n < 2 or since > STALL * n * n:
            return None
        step += 1
        a = int(over.argmax()) if step % 2 else int(rng.integers(n))
        b = int(rng.integers(n - 1))
        b += b >= a
        pool = np.array(bins[a] + bins[b], dtype=np.int64)
        vals = items[pool]
        choice = _combos(len(pool), len(bins[a]))                                 # [M, |a|]
        side = vals[choice].sum(1) if choice.shape[1] else np.zeros(len(choice))
        worst = np.maximum(side - caps[a], vals.sum() - side - caps[b])          # [M]
        k = int((worst + 1e-9 * rng.random(len(worst))).argmin())
        if worst[k] <= max(over[a], over[b]):
            mine = np.zeros(len(pool), dtype=bool)
            mine[choice[k]] = True
            bins[a], bins[b] = pool[mine].tolist(), pool[~mine].tolist()
            sums[a], sums[b] = items[bins[a]].sum(), items[bins[b]].sum()


def balance_at(weights: np.ndarray, num_gpus: int, slots: int, target: float | Fraction, *, deadline: float,
               threads: int = 1, seed: int = 0, candidates: np.ndarray | None = None,
               hint: np.ndarray | None = None) -> np.ndarray | None:
    """A packing of the set with max GPU load <= ``target``: [n, S] local expert ids per
    GPU, or None. weights: [I] integer loads; candidates, hint: as in :func:`design`."""
    left = deadline - clock()
    found = design(weights, num_gpus, slots, target, time_limit=left, threads=threads, seed=seed,
                   candidates=candidates, hint=hint)
    if found is None:
        return None
    counts, placed = found
    w = weights.astype(np.float64)
    fixed = ((w / counts)[:, None] * placed).sum(0)                                    # [n]
    whole = np.flatnonzero(placed.sum(1) == 0)
    room = slots - placed.sum(0)
    bins = pack_whole(w[whole], float(target) - fixed, room, deadline=deadline, seed=seed)
    if bins is None:
        return None
    rows = [np.concatenate([np.flatnonzero(placed[:, g]), whole[bins[g]]]) for g in range(num_gpus)]
    return np.stack(rows)


def balance_gpus(weights: np.ndarray, experts: np.ndarray, *, deadline: float, threads: int = 1,
                 seed: int = 0) -> np.ndarray:
    """Lower the max load of a closed set of GPUs by residue design and packing.

    weights: [I] integer loads of the experts held there; experts: [n, S] local expert id
    of each slot (every replica of those experts is in the set). Tries the mean B itself
    (a plan there is optimal), then bisects the target between B and the current max
    load; returns the best [n, S] found (``experts`` itself when nothing better is, or when
    the max load is more than MAX_EXCESS_TOKENS above the mean). Sets
    too large for a design of every expert consider the experts the plan splits and a
    random sample of the others, a new sample each try, with the plan as CP-SAT's hint
    (it helped there, 9 s against nothing in 40 s on a Zipf DeepSeek-V3 layer; on whole
    8-GPU sets it cost proofs: 17 proven suite instances against 21).
    """
    n, S = experts.shape
    I = len(weights)
    w = weights.astype(np.float64)
    counts = np.bincount(experts.ravel(), minlength=I)

    def max_load(rows: np.ndarray) -> float:
        c = np.bincount(rows.ravel(), minlength=I)
        return float((w / c)[rows].sum(1).max())

    best, value = experts, max_load(experts)
    if not integral(weights) or counts.min() < 1 or not fits(I, n, S):
        return best
    room = design_room(I, n, S)
    rng = np.random.default_rng(seed)
    lo = float(w.sum()) / n
    if value - lo > MAX_EXCESS_TOKENS:
        return best
    attempt = 0
    while value > lo + 4 * np.spacing(lo) and clock() < deadline:
        # The mean itself exactly (float division may round it down, below every plan).
        target = Fraction(sum(int(x) for x in weights), n) if attempt == 0 else lo + (value - lo) * 0.5
        candidates = None
        if room < I:
            split = np.bincount(best.ravel(), minlength=I) > 1
            order = np.concatenate([rng.permutation(np.flatnonzero(split)), rng.permutation(np.flatnonzero(~split))])
            candidates = np.zeros(I, dtype=bool)
            candidates[order[:room]] = True
        now = clock()
        # a hard target must not take it all
        stop = min(deadline, now + max(shares.RESIDUE_ATTEMPT_MIN_S, shares.RESIDUE_ATTEMPT_SHARE * (deadline - now)))
        rows = balance_at(weights, n, S, target, deadline=stop, threads=threads, seed=seed + attempt,
                          candidates=candidates, hint=None if candidates is None else best)
        attempt += 1
        if rows is not None and max_load(rows) < value:
            best, value = rows, max_load(rows)
        elif attempt > 1:
            lo = target                      # not a bound: only where the search looks next
    return best
