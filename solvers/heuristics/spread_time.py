"""Forbidden colocation on real clusters: no GPU holds two replicas of one expert.

The speed pipeline (:mod:`.speeds`) packs replicas in time with duplicates allowed; with
``colocation="forbidden"`` its plan is then made duplicate-free, batched over layers:

1. **counts**: an expert cannot have more replicas than there are live GPUs; each replica
   above that goes to the expert with the heaviest replica among those with room;
2. **repair**: while a layer has a duplicate, its first duplicate slot swaps with the slot
   on another GPU that gives the two GPUs the lowest max *time* (load / speed) and creates
   no new duplicate (DeepSeek's ``repair_duplicates`` in time, over uneven slot ranges).

A duplicate-free plan exists whenever every live GPU has at most E slots (checked by the
caller), but not for every count vector: with slot counts 1, 3, 3 and three experts, each
expert needs a replica on both 3-slot GPUs. :func:`realisable_counts` first moves replicas
until the counts admit one (the Gale-Ryser condition), and a layer the swaps still cannot
clear is laid out by :func:`layout_without_duplicates` (Ryser's construction, which never
fails on realisable counts).
"""
from __future__ import annotations

import torch

from .speeds import LiveGPUs


def cap_counts(w: torch.Tensor, e: torch.Tensor, num_experts: int, most: int) -> torch.Tensor:
    """e: [X, R] expert of every live slot with every count at most ``most``: a replica of
    an expert above it becomes one of the expert with the heaviest replica among those with
    room (w: [X, E] loads)."""
    X, R = e.shape
    rows = torch.arange(X, device=e.device)
    e = e.clone()
    for _ in range(R):
        cnt = torch.zeros(X, num_experts, dtype=torch.int64, device=e.device).scatter_add_(
            1, e, torch.ones_like(e))
        over = cnt > most
        if not bool(over.any()):
            break
        x = over.any(1)
        src = over.to(torch.int8).argmax(1)                                            # [X] expert over
        slot = (e == src.unsqueeze(1)).to(torch.int8).argmax(1)                        # one of its slots
        per = (w / cnt.clamp_min(1)).masked_fill(cnt >= most, -1.0)
        dst = per.argmax(1)
        e[rows[x], slot[x]] = dst[x]
    return e


def realisable_counts(w: torch.Tensor, e: torch.Tensor, num_experts: int, caps: torch.Tensor) -> torch.Tensor:
    """e: [X, R] with counts that admit a duplicate-free layout on live GPUs of ``caps`` [Q]
    slots (every count at most Q already, :func:`cap_counts`).

    Gale-Ryser: such a layout exists iff for every k the k largest GPUs' slots sum to at most
    sum_e min(c_e, k). At a layer's first violated k, one replica of the expert with c_e > k
    whose replicas stay lightest becomes one of the expert with c_e < k and the heaviest
    replica: the sum at k rises by one and no other level's falls (w: [X, E] loads)."""
    X, R = e.shape
    Q = int(caps.numel())
    dev = e.device
    rows = torch.arange(X, device=dev)
    need = torch.sort(caps, descending=True).values.cumsum(0)                           # [Q] slots of the k largest
    k = torch.arange(1, Q + 1, device=dev)                                              # [Q]
    e = e.clone()
    for _ in range(R):
        cnt = torch.zeros(X, num_experts, dtype=torch.int64, device=dev).scatter_add_(1, e, torch.ones_like(e))
        have = torch.minimum(cnt.unsqueeze(2), k.view(1, 1, Q)).sum(1)                   # [X, Q]
        short = need.unsqueeze(0) > have                                                 # [X, Q]
        x = short.any(1)
        if not bool(x.any()):
            break
        level = k[short.to(torch.int8).argmax(1)]                                        # [X] first violated k
        per = w / cnt.clamp_min(1)
        after = (w / (cnt - 1).clamp_min(1)).masked_fill(cnt <= level.unsqueeze(1), float("inf"))
        src = after.argmin(1)                                                            # donor: c_e > k
        dst = per.masked_fill(cnt >= level.unsqueeze(1), -1.0).argmax(1)                 # recipient: c_e < k
        slot = (e == src.unsqueeze(1)).to(torch.int8).argmax(1)
        e[rows[x], slot[x]] = dst[x]
    return e


def layout_without_duplicates(w: torch.Tensor, e: torch.Tensor, gpus: LiveGPUs, num_experts: int) -> torch.Tensor:
    """e: [R] one layer's slots re-laid out with its counts kept and no expert twice on a GPU
    (Ryser's construction: GPUs by slot count, largest first, each takes the experts with the
    most replicas still to place, heavier replicas first on ties). Counts must be realisable
    (:func:`realisable_counts`); the caller's swap search then balances the layout. Runs
    for the rare layer the swap repair cannot clear, so one layer at a time (w: [E] loads)."""
    cnt = torch.zeros(num_experts, dtype=torch.int64, device=e.device).scatter_add_(0, e, torch.ones_like(e))
    per = w.to(torch.float64) / cnt.clamp_min(1)
    left = cnt.clone()
    out = e.clone()
    for g in torch.argsort(gpus.caps, descending=True, stable=True).tolist():
        c = int(gpus.caps[g])
        # most replicas left first; heavier replica on ties (the sort is stable on -per)
        by_per = torch.argsort(-per, stable=True)
        order = by_per[torch.argsort(-left[by_per], stable=True)]
        take = order[:c]
        if c and bool((left[take] <= 0).any()):
            raise ValueError("counts not realisable without duplicates")           # a bug: checked before
        left[take] -= 1
        out[gpus.grid[g, :c]] = take
    return out


def repair_in_time(w: torch.Tensor, e: torch.Tensor, gpus: LiveGPUs, num_experts: int) -> tuple[torch.Tensor, int]:
    """e: [X, R] duplicate-free where swaps allow (w: [X, E] loads; counts as in e). Returns
    (e, rows still holding a duplicate)."""
    X, R = e.shape
    cnt_e = torch.zeros(X, num_experts, dtype=torch.float64, device=e.device).scatter_add_(
        1, e, torch.ones(X, R, dtype=torch.float64, device=e.device))
    return repair_swaps(w.to(torch.float64) / cnt_e.clamp_min(1), e, gpus, num_experts)


def repair_swaps(per: torch.Tensor, e: torch.Tensor, gpus: LiveGPUs, num_experts: int) -> tuple[torch.Tensor, int]:
    """:func:`repair_in_time` from each expert's per-replica load per: [X, E] (counts fixed)."""
    X, R = e.shape
    E, Q = num_experts, gpus.Q
    dev = e.device
    rows = torch.arange(X, device=dev)
    gpu_of = gpus.gpu_of                                                               # [R]
    speed = gpus.speed.to(torch.float64)
    left = 0
    for _ in range(R):
        on = torch.zeros(X, Q * E, dtype=torch.int64, device=dev).scatter_add_(
            1, gpu_of * E + e, torch.ones_like(e))                                     # [X, Q*E]
        dup = on.gather(1, gpu_of * E + e) > 1                                         # [X, R]
        has = dup.any(1)
        left = int(has.sum())
        if not left:
            break
        q = dup.to(torch.int8).argmax(1)                                               # first duplicate slot
        h = gpu_of[q]
        eq = e[rows, q]
        ws = per.gather(1, e)                                                          # [X, R] slot loads
        wq = ws[rows, q]
        load = gpus.loads(ws)                                                          # [X, Q]
        lh, sh = load[rows, h], speed[h]
        lg, sg = load[:, gpu_of], speed[gpu_of]                                        # [X, R]
        cost = torch.maximum((lh.unsqueeze(1) - wq.unsqueeze(1) + ws) / sh.unsqueeze(1),
                             (lg - ws + wq.unsqueeze(1)) / sg.unsqueeze(0))
        bad = gpu_of.unsqueeze(0) == h.unsqueeze(1)
        bad |= on.gather(1, gpu_of.unsqueeze(0) * E + eq.unsqueeze(1)) > 0              # eq already on g
        bad |= on.view(X, Q, E)[rows, h].gather(1, e) > 0                              # e_j already on h
        best, j = cost.masked_fill(bad, float("inf")).min(1)
        ok = has & torch.isfinite(best)
        if not bool(ok.any()):
            break
        r = rows[ok]
        a, b = e[r, q[ok]], e[r, j[ok]]
        e[r, q[ok]], e[r, j[ok]] = b, a
    return e, left


def improve_in_time(w: torch.Tensor, e: torch.Tensor, gpus: LiveGPUs, num_experts: int,
                    steps: int = 64) -> torch.Tensor:
    """Swaps that keep e [X, R] duplicate-free and lower each layer's slowest GPU: per step
    and layer, the swap of one of its slots with a slot elsewhere that gives the pair the
    lowest max time, taken when that is below the slowest GPU's time (w: [X, E] loads)."""
    X, R = e.shape
    E, Q = num_experts, gpus.Q
    dev = e.device
    rows = torch.arange(X, device=dev)
    gpu_of, grid, valid = gpus.gpu_of, gpus.grid, gpus.valid                         # [R], [Q, S], [Q, S]
    speed = gpus.speed.to(torch.float64)
    cnt_e = torch.zeros(X, E, dtype=torch.float64, device=dev).scatter_add_(
        1, e, torch.ones(X, R, dtype=torch.float64, device=dev))
    per = w.to(torch.float64) / cnt_e.clamp_min(1)
    active = torch.ones(X, dtype=torch.bool, device=dev)
    for _ in range(steps):
        ws = per.gather(1, e)                                                          # [X, R]
        load = gpus.loads(ws)                                                          # [X, Q]
        t = load / speed
        g = t.argmax(1)                                                                # [X] slowest GPU
        mine = grid[g]                                                                 # [X, S] its slots
        ok_i = valid[g]
        wi, ei = ws.gather(1, mine), e.gather(1, mine)                                 # [X, S]
        on = torch.zeros(X, Q * E, dtype=torch.int64, device=dev).scatter_add_(
            1, gpu_of * E + e, torch.ones_like(e)).view(X, Q, E)
        lg, sg = load[rows, g], speed[g]
        lh, sh = load[:, gpu_of], speed[gpu_of]                                        # [X, R]
        d = wi.unsqueeze(2) - ws.unsqueeze(1)                                          # [X, S, R] load g sheds
        pair = torch.maximum((lg.view(X, 1, 1) - d) / sg.view(X, 1, 1), (lh.unsqueeze(1) + d) / sh.view(1, 1, R))
        bad = (gpu_of.unsqueeze(0) == g.unsqueeze(1)).unsqueeze(1) | ~ok_i.unsqueeze(2)
        # e_i already on h (unless h holds it only in slot j itself), e_j already on g
        ei_on_h = on.gather(2, ei.unsqueeze(1).expand(X, Q, ei.shape[1])).transpose(1, 2)   # [X, S, Q]
        ei_on_h = ei_on_h.gather(2, gpu_of.view(1, 1, R).expand(X, ei.shape[1], R))       # [X, S, R]
        same = ei.unsqueeze(2) == e.unsqueeze(1)
        bad |= (ei_on_h > 0) & ~same
        ej_on_g = on[rows, g].gather(1, e) > 0                                         # [X, R]
        bad |= ej_on_g.unsqueeze(1) & ~same
        bad |= same
        pair = pair.masked_fill(bad, float("inf")).view(X, -1)
        best, k = pair.min(1)
        better = active & (best < t[rows, g] * (1 - 1e-12))
        if not bool(better.any()):
            break
        i = mine.gather(1, (k // R).unsqueeze(1)).squeeze(1)
        j = k % R
        r = rows[better]
        a, b = e[r, i[better]], e[r, j[better]]
        e[r, i[better]], e[r, j[better]] = b, a
        active = better
    return e


def duplicated_rows(e: torch.Tensor, gpus: LiveGPUs, num_experts: int) -> torch.Tensor:
    """[X] bool: the layers of e [X, R] with an expert twice on one live GPU."""
    on = torch.zeros(e.shape[0], gpus.Q * num_experts, dtype=torch.int64, device=e.device).scatter_add_(
        1, gpus.gpu_of * num_experts + e, torch.ones_like(e))
    return (on > 1).any(1)


def lay_out_duplicates(w: torch.Tensor, e: torch.Tensor, gpus: LiveGPUs, num_experts: int) -> torch.Tensor:
    """e [X, R] with every layer that still holds a duplicate re-laid out by
    :func:`layout_without_duplicates` (counts kept; w: [X, E] loads)."""
    rows = duplicated_rows(e, gpus, num_experts).nonzero().squeeze(1).tolist()
    if not rows:
        return e
    e = e.clone()
    for x in rows:
        e[x] = layout_without_duplicates(w[x], e[x], gpus, num_experts)
    return e
