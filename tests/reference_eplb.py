"""A deliberately plain, per-layer, scalar implementation of DeepSeek's EPLB algorithm.

Written from the algorithm's description (not from the batched code) to cross-check
solvers.deepseek: Python lists and one float32 numpy scalar per arithmetic step, so the
arithmetic is the same float32 as the public code.
"""
from __future__ import annotations

import numpy as np

f32 = np.float32


def pack(weights: list, num_packs: int) -> tuple[list[int], list[int]]:
    """Heaviest first into the lightest pack with room (lowest index on ties)."""
    n = len(weights)
    per = n // num_packs
    if per == 1:
        return list(range(n)), [0] * n
    order = sorted(range(n), key=lambda i: -weights[i])  # Python's sort is stable
    load, cnt = [f32(0)] * num_packs, [0] * num_packs
    pack_of, rank_of = [0] * n, [0] * n
    for i in order:
        best = min((p for p in range(num_packs) if cnt[p] < per), key=lambda p: load[p])
        pack_of[i], rank_of[i] = best, cnt[best]
        load[best] = f32(load[best] + weights[i])
        cnt[best] += 1
    return pack_of, rank_of


def replicate(weights: list, num_phy: int) -> tuple[list[int], list[int], list[int]]:
    """Each redundant slot to the expert with the highest load per replica (first on ties)."""
    cnt = [1] * len(weights)
    phy2log = list(range(len(weights)))
    rank = [0] * len(weights)
    for _ in range(num_phy - len(weights)):
        ratios = [f32(w / f32(c)) for w, c in zip(weights, cnt)]
        best = max(range(len(weights)), key=lambda e: (ratios[e], -e))
        phy2log.append(best)
        rank.append(cnt[best])
        cnt[best] += 1
    return phy2log, rank, cnt


def layer_plan(w: list, R: int, G: int, N: int, P: int) -> tuple[list[int], list[int], list[int]]:
    """phy2log, replica rank of each slot, logcnt for one layer (hierarchical; G=N=1 is global)."""
    w = [f32(x) for x in w]
    E = len(w)
    gsize, gpn, S = E // G, G // N, R // P
    group_w = [f32(sum(w[g * gsize:(g + 1) * gsize], f32(0))) for g in range(G)]
    gnode, grank = pack(group_w, N)
    # experts of node n, in the order (rank of group on node, offset in group)
    node_experts = [[] for _ in range(N)]
    for g in sorted(range(G), key=lambda g: (gnode[g], grank[g])):
        node_experts[gnode[g]].extend(range(g * gsize, (g + 1) * gsize))
    phy2log, ranks, logcnt = [], [], [0] * E
    for n in range(N):
        experts = node_experts[n]
        nw = [w[e] for e in experts]
        p2m, rk, cnt = replicate(nw, R // N)
        replica_w = [f32(nw[m] / f32(cnt[m])) for m in p2m]
        gpu, pos = pack(replica_w, P // N)
        slots = [None] * (R // N)
        for i in range(R // N):
            slots[gpu[i] * S + pos[i]] = i
        phy2log += [experts[p2m[i]] for i in slots]
        ranks += [rk[i] for i in slots]
        for m, e in enumerate(experts):
            logcnt[e] = cnt[m]
    return phy2log, ranks, logcnt


def rebalance(weight, R: int, G: int, N: int, P: int):
    """(phy2log, rank, logcnt) as nested lists, DeepSeek's policy choice (G % N decides)."""
    if G % N != 0:
        G, N = 1, 1
    out = [layer_plan(list(np.asarray(row, dtype=np.float32)), R, G, N, P) for row in weight]
    return [o[0] for o in out], [o[1] for o in out], [o[2] for o in out]
