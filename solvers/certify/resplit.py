"""Plan polishing for fixed replicas: exact re-splits of the busiest GPU with one or two
partners, and count moves repaired by them.

**Two GPUs.** The busiest GPU g and any other GPU h hold 2S replicas together; choosing
which S of them go back to g is a small subset problem, solved exactly by enumerating every
split (C(2S-1, S-1) of them, replica 0 kept on g's side to skip mirror images) for every
partner h at once: one matrix product ``[H, 2S] x [2S, M]``.

**Three GPUs.** The two-GPU re-splits stop where no pair of GPUs can trade; at three slots
per GPU that local optimum can still be 1 % above W/P, because a better packing of the
busiest GPU often needs a replica from one GPU and a replica from another at once. Then g
and two partners pool their 3S replicas, and every split into three GPUs of S is
enumerated ((3S)! / (S!^3 3!) of them: 15 at S = 2, 280 at S = 3, 5775 at S = 4) for every
partner pair at once: one matrix product ``[H, 3S] x [3S, 3M]``. Partners are the
``width`` lightest GPUs (light GPUs have the room the busiest one needs).

Either way the best split over all partners replaces the GPUs when it lowers g's load;
repeat until it does not (:func:`polish`, ``ways`` 2 or 3). Counts never change (so a
two-GPU re-split is one of the three-GPU splits), so colocation and the expert-to-node
structure are kept when partners are restricted to g's node.
"""
from __future__ import annotations

import itertools
import math
from functools import lru_cache

import torch

from ..clock import clock

# Two-GPU splits enumerated at most (S = 10 has 92378): beyond, it costs more than it gains.
MAX_SPLITS = 100_000
# Three-GPU splits times partner pairs evaluated per round at most (memory and time of one round).
MAX_WORK = 1_000_000


@lru_cache(maxsize=16)
def split_masks(slots: int) -> torch.Tensor:
    """[M, 2S] float64 0/1: the replicas of a two-GPU pool that go to the first GPU
    (exactly S of 2S, replica 0 always among them)."""
    rows = [(0,) + rest for rest in itertools.combinations(range(1, 2 * slots), slots - 1)]
    mask = torch.zeros(len(rows), 2 * slots, dtype=torch.float64)
    for i, r in enumerate(rows):
        mask[i, list(r)] = 1.0
    return mask


def busiest_and_others(loads: torch.Tensor, group: torch.Tensor | None = None
                       ) -> tuple[torch.Tensor, int, torch.Tensor]:
    """(gpu [P] loads, the busiest GPU g, [H] the GPUs g may trade with: every other one, or
    with ``group`` ([P] node of each GPU) the others on g's node). loads: [P, S]."""
    gpu = loads.sum(1)
    g = int(gpu.argmax())
    others = torch.arange(loads.shape[0], device=loads.device)
    keep = others != g
    if group is not None:
        keep &= group == group[g]
    return gpu, g, others[keep]


def num_splits(slots: int) -> int:
    """Splits of 3S replicas into three unlabelled GPUs of S each."""
    return math.factorial(3 * slots) // (math.factorial(slots) ** 3 * 6)


@lru_cache(maxsize=8)
def three_way_masks(slots: int) -> torch.Tensor:
    """[3S, 3M] float64 0/1: column b * M + m is 1 on the replicas that split m puts on GPU
    b (replica 0 always on GPU 0, GPU 1 holds the first replica GPU 0 leaves)."""
    n = 3 * slots
    splits = []
    for first in itertools.combinations(range(1, n), slots - 1):
        a = (0,) + first
        rest = [i for i in range(n) if i not in a]
        for second in itertools.combinations(rest[1:], slots - 1):
            b = (rest[0],) + second
            splits.append((a, b))
    M = len(splits)
    mask = torch.zeros(n, 3 * M, dtype=torch.float64)
    for m, (a, b) in enumerate(splits):
        mask[list(a), m] = 1.0
        mask[list(b), M + m] = 1.0
    mask[:, 2 * M:] = 1.0 - mask[:, :M] - mask[:, M:2 * M]
    return mask


def polish(loads: torch.Tensor, experts: torch.Tensor, *, deadline: float, ways: int = 2, width: int = 48,
           group: torch.Tensor | None = None, max_rounds: int = 10_000) -> tuple[torch.Tensor, torch.Tensor]:
    """Lower the max GPU load of one layer by exact re-splits of ``ways`` (2 or 3) GPUs.

    loads: [P, S] float64 replica loads per GPU; experts: [P, S] expert of each replica;
    group: [P] optional label (e.g. node): partners only within g's label; width: the
    lightest GPUs three-GPU re-splits pair up as partners.
    Returns the new (loads, experts), same shapes, the same multiset of replicas.
    """
    P, S = loads.shape
    M = math.comb(2 * S - 1, S - 1) if ways == 2 else num_splits(S)
    if P < ways or M > (MAX_SPLITS if ways == 2 else MAX_WORK):
        return loads, experts
    # partner pairs per round: at most MAX_WORK / M, so at most this many partners
    width = max(2, min(width, int((2 * MAX_WORK / M) ** 0.5)))
    loads, experts = loads.clone(), experts.clone()
    # [2S, M] g's side of every two-GPU split, or [3S, 3M] every GPU's side of every three-GPU one
    mask = split_masks(S).to(loads.device).T if ways == 2 else three_way_masks(S).to(loads.device)
    for _ in range(max_rounds):
        if clock() >= deadline:
            break
        gpu, g, others = busiest_and_others(loads, group)                       # [P], g, [H]
        if others.numel() < ways - 1:
            break
        if ways == 2:
            sets = others.view(-1, 1)                                             # [H, 1] every other GPU
        else:
            partners = others[gpu[others].argsort(stable=True)[:width]]           # [w] lightest first
            i, j = torch.triu_indices(len(partners), len(partners), offset=1, device=loads.device)
            sets = torch.stack([partners[i], partners[j]], 1)                     # [H, 2]
        pool = torch.cat([loads[g].expand(sets.shape[0], S), *(loads[sets[:, k]] for k in range(ways - 1))], 1)
        side = pool @ mask                                                        # [H, M] or [H, 3M]
        if ways == 2:
            worst = torch.maximum(side, pool.sum(1, keepdim=True) - side)        # [H, M]
        else:
            worst = side.view(-1, 3, M).max(1).values                            # [H, M]
        flat = int(worst.argmin())
        h_i, m_i = divmod(flat, M)
        if float(worst.view(-1)[flat]) >= float(gpu[g]) * (1 - 1e-12):
            break
        gpus = [g, *sets[h_i].tolist()]
        pool_w, pool_e = pool[h_i], torch.cat([experts[x] for x in gpus])
        pick = mask[:, m_i].bool()
        picks = [pick, ~pick] if ways == 2 else [mask[:, b * M + m_i].bool() for b in range(3)]
        for gg, p in zip(gpus, picks):
            loads[gg], experts[gg] = pool_w[p], pool_e[p]
    return loads, experts


def _max_and_top(gpu: torch.Tensor, top: int = 4) -> tuple[float, float]:
    """(max, sum of the ``top`` largest) of GPU loads [P]: a move is better when it lowers
    the max, or keeps it and lowers the next busiest GPUs."""
    v = gpu.topk(min(top, gpu.shape[-1])).values
    return float(v[0]), float(v.sum())


def count_moves(weights: torch.Tensor, experts: torch.Tensor, *, deadline: float, candidates: int = 6,
                width: int = 48, group: torch.Tensor | None = None) -> torch.Tensor:
    """Local search over replica counts for any S, every step repaired by re-splits.

    experts: [P, S] the plan (counts follow from it). A move gives one more replica to an
    expert of the busiest GPU (its replicas get lighter everywhere) and takes one from a
    donor with two or more: the donor's replica on the lightest GPU that holds it becomes
    the receiver's. All moves are scored at once without repair; the ``candidates`` best
    are repaired by two- and three-GPU re-splits (:func:`polish`) and the best result
    is kept when it beats the plan (lower max load, or the same max and lighter next GPUs).
    group: [P] optional label (e.g. node): the donor's replica is taken on a GPU of the
    busiest GPU's label and re-splits stay within labels, so a plan whose experts each
    live on one node keeps that structure (the hierarchical policy).
    Returns the best experts [P, S] found before ``deadline``.
    """
    w = weights.to(torch.float64)
    E = w.shape[0]
    P, S = experts.shape
    best = experts.clone()

    def gpu_loads(ex: torch.Tensor) -> torch.Tensor:                    # [..., P, S] -> [..., P]
        cnt = torch.zeros(ex.shape[:-2] + (E,), dtype=torch.float64)
        cnt.scatter_add_(-1, ex.flatten(-2), torch.ones(ex.flatten(-2).shape, dtype=torch.float64))
        return (w / cnt.clamp(min=1)).gather(-1, ex.flatten(-2)).view(ex.shape).sum(-1)

    cur = _max_and_top(gpu_loads(best))
    while clock() < deadline:
        gpu = gpu_loads(best)                                                       # [P]
        g = int(gpu.argmax())
        flat = best.reshape(-1)                                                     # [R]
        cnt = torch.bincount(flat, minlength=E)
        receivers = best[g].unique()
        donors = torch.nonzero(cnt >= 2).flatten()
        # the donor's replica on its lightest GPU (slot index in flat order)
        slot_gpu = torch.arange(P * S) // S
        room = gpu[slot_gpu] if group is None else torch.where(group[slot_gpu] == group[g], gpu[slot_gpu], torch.inf)
        key = torch.where(flat[None, :] == donors[:, None], room[None, :], torch.inf)  # [D, R]
        give = key.argmin(1)                                                         # [D] slot
        there = torch.isfinite(key.min(1).values)                                    # a replica where it may give
        donors, give = donors[there], give[there]
        rr, dd = torch.meshgrid(receivers, torch.arange(len(donors)), indexing="ij")
        rr, dd = rr.reshape(-1), dd.reshape(-1)
        ok = donors[dd] != rr
        rr, dd = rr[ok], dd[ok]
        if rr.numel() == 0:
            break
        cand = flat.expand(rr.shape[0], -1).clone()                                  # [M, R]
        cand[torch.arange(rr.shape[0]), give[dd]] = rr
        cand = cand.view(-1, P, S)
        loads = gpu_loads(cand)                                                      # [M, P]
        score = loads.max(1).values + 1e-9 * loads.topk(min(4, P), 1).values.sum(1) / max(float(gpu.max()), 1e-300)
        found = None
        for i in score.argsort()[:candidates].tolist():
            if clock() >= deadline:
                break
            ex = cand[i]
            cnt_i = torch.bincount(ex.reshape(-1), minlength=E).to(torch.float64)
            ld = (w / cnt_i)[ex]
            ld, ex = polish(ld, ex, deadline=deadline, group=group)
            ld, ex = polish(ld, ex, deadline=deadline, ways=3, width=width, group=group)
            v = _max_and_top(ld.sum(1))
            if v[0] < cur[0] * (1 - 1e-12) or (v[0] <= cur[0] and v[1] < cur[1] * (1 - 1e-12)):
                if found is None or v < found[0]:
                    found = (v, ex)
        if found is None:
            break
        cur, best = found
    return best
