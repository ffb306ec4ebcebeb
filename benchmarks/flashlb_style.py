"""A FlashLB-style planner, written here from FlashLB v2's *public description* (no FlashLB code).

What that description says (vLLM-Ascend's FlashLB pull requests and feature notes) and how it
is read here:

- **Multi-shot statistics.** Each profiling interval is cut into consecutive shorter shots and
  the expert hotness of every shot is kept, so the plan sees how the loads oscillate and
  co-vary over the interval instead of one average. Here: the window's steps are summed into
  ``shots`` consecutive blocks (per-step means), and every device's load is a series over them.
- **A robust objective.** A device's load is judged by an upper quantile of its shot series:
  mean + z x std with z = 0.674 (the upper quartile of a normal load), for the replica counts
  and for the placement alike.
- **Joint allotment and placement.** Replica counts and placement are decided together rather
  than one after the other: here the counts are the min-max allotment of the experts' upper
  quartiles, the replicas are placed hottest first each on the device whose quantile load grows
  least (never two replicas of one expert on a device), and then an incremental adjustment
  moves load off the device with the highest quantile: the best swap between one of its
  replicas and any replica elsewhere (a stand-in for the description's tree search with
  pruning), until no swap lowers it or ``rounds`` ran.

Global policy, homogeneous clusters (the generalisation benchmark's setting); batched over
layers in torch. A reference for the benchmarks, not part of the package.
"""
from __future__ import annotations

import math

import torch

from solvers import Problem
from solvers.bounds import optimal_counts
from solvers.plan import Plan

Z = 0.674          # upper quartile of a normal variable
SHOTS = 8
ROUNDS = 32


def shot_series(hist: torch.Tensor, shots: int) -> torch.Tensor:
    """[K, L, E] per-step mean load of each of K <= shots consecutive blocks of hist [W, L, E]."""
    W = hist.shape[0]
    K = min(W, shots)
    edges = [round(W * i / K) for i in range(K + 1)]
    return torch.stack([hist[a:b].mean(0) for a, b in zip(edges[:-1], edges[1:])])


def quantile(series: torch.Tensor) -> torch.Tensor:
    """mean + Z x std over the last axis (the shots)."""
    return series.mean(-1) + Z * series.std(-1, unbiased=False)


def plan(problem: Problem, hist: torch.Tensor, shots: int = SHOTS, rounds: int = ROUNDS) -> Plan:
    """The FlashLB-style plan of the window ``hist [W, L, E]`` on ``problem``'s cluster."""
    hist = hist.to(torch.float64)
    _, L, E = hist.shape
    R, P = problem.num_replicas, problem.num_gpus
    S = R // P
    shot = shot_series(hist, shots).permute(1, 2, 0).contiguous()               # [L, E, K]
    K = shot.shape[-1]
    nodup = E >= S
    cnt = optimal_counts(quantile(shot), R, max_count=P if nodup else None)     # [L, E]
    per = shot / cnt.unsqueeze(-1).to(shot.dtype)                              # [L, E, K] per replica
    ends = torch.cumsum(cnt, 1)
    item = torch.searchsorted(ends, torch.arange(R).expand(L, R).contiguous(), right=True)   # [L, R]
    order = torch.sort(quantile(per).gather(1, item), dim=1, descending=True, stable=True).indices
    item = item.gather(1, order)
    rows = torch.arange(L)
    dev = torch.zeros(L, P, K, dtype=torch.float64)
    fill = torch.zeros(L, P, dtype=torch.int64)
    has = torch.zeros(L, P, E, dtype=torch.bool)
    p2l = torch.zeros(L, P, S, dtype=torch.int64)
    for i in range(R):                                   # hottest replica first
        e = item[:, i]
        s = per[rows, e]                                                        # [L, K]
        cost = quantile(dev + s.unsqueeze(1))                                   # [L, P]
        cost = cost.masked_fill(fill >= S, math.inf)
        free = cost.masked_fill(has[rows, :, e], math.inf) if nodup else cost
        free = torch.where(torch.isinf(free).all(1, keepdim=True), cost, free)
        g = free.argmin(1)
        dev[rows, g] += s
        p2l[rows, g, fill[rows, g]] = e
        fill[rows, g] += 1
        has[rows, g, e] = True
    p2l = p2l.view(L, R)
    slot_dev = torch.arange(R) // S
    for _ in range(rounds):                              # incremental adjustment of the peak device
        load = per.gather(1, p2l.unsqueeze(-1).expand(L, R, K))                 # [L, R, K]
        dev = load.view(L, P, S, K).sum(2)
        q = quantile(dev)                                                       # [L, P]
        cur, g = q.max(1)
        mine = g.unsqueeze(1) * S + torch.arange(S)                             # [L, S]
        a = load.gather(1, mine.unsqueeze(-1).expand(L, S, K))                  # [L, S, K]
        delta = load.unsqueeze(1) - a.unsqueeze(2)                              # [L, S, R, K]  b - a
        new_g = quantile(dev[rows, g].view(L, 1, 1, K) + delta)
        new_h = quantile(dev.index_select(1, slot_dev).unsqueeze(1) - delta)
        value = torch.maximum(new_g, new_h)                                     # [L, S, R]
        ea, eb = p2l.gather(1, mine), p2l
        ok = (slot_dev.view(1, 1, R) != g.view(L, 1, 1)) & (ea.unsqueeze(2) != eb.unsqueeze(1))
        if nodup:
            pres = torch.zeros(L, P, E, dtype=torch.bool).scatter_(2, p2l.view(L, P, S), True)
            ok &= ~pres[rows, g].gather(1, eb).unsqueeze(1)
            ok &= ~pres.transpose(1, 2).gather(1, ea.unsqueeze(2).expand(L, S, P)).index_select(2, slot_dev)
        value = value.masked_fill(~ok, math.inf).view(L, -1)
        best = value.argmin(1)
        better = value.gather(1, best.unsqueeze(1)).squeeze(1) < cur * (1 - 1e-12)
        if not bool(better.any()):
            break
        i = mine.gather(1, (best // R).unsqueeze(1)).squeeze(1)
        j = best % R
        r = rows[better]
        i, j = i[better], j[better]
        p2l[r, i], p2l[r, j] = p2l[r, j], p2l[r, i]
    return Plan.from_phy2log(p2l, E)
