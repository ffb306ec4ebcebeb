"""The scheduled split in *time*, for real clusters (per-GPU speeds, uneven slot counts,
failed GPUs): a replica on a slower GPU takes proportionally fewer tokens.

Per (micro-batch, layer), with integer token counts ``t_e``: integers ``x[e, g] >= 0`` on
the GPUs g holding a replica of e, ``sum_g x[e, g] = t_e``, minimising the max GPU time
``max_g (sum_e x[e, g]) / s_g``. For a time T such a split exists iff the max flow
source -> expert e (capacity t_e) -> GPU g holding e (unbounded) -> sink (capacity
``floor(T s_g)``) carries every token (integral capacities give an integral flow), and
that only gets easier as T grows: the optimum is the least feasible T, a value ``k / s_g``.

Search: bisection on T between ``W / sum(live speeds)`` (never above the optimum) and the
time of a trivial integer split (every expert on its first replica's GPU); then the flow
found at the feasible end has its own max time ``T_a <= hi``, and one more check just
below ``T_a`` (infeasible) proves it optimal; if that check is feasible, the search goes
on below. Each check is one ``scipy.sparse.csgraph.maximum_flow`` per instance on the CPU:
exact, but milliseconds per (micro-batch, layer), where the batched push-relabel of
:mod:`.schedule` (identical GPUs) takes microseconds. Within a GPU an expert's tokens are
spread over its slots there as evenly as integers allow.
"""
from __future__ import annotations

import math

import numpy as np
import torch
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import maximum_flow

from ..cluster import Cluster
from ..errors import ProblemError
from ..plan import Plan

# Bisection steps before the optimality check (each halves [lo, hi]; 64 reach float64's
# resolution on any interval met here).
MAX_STEPS = 64
# Relative step below a candidate optimum at which infeasibility proves it.
BELOW = 1e-12
# scipy's max flow takes int32 capacities.
MAX_TOKENS = 2**31 - 1


def _flow(t: np.ndarray, pairs_e: np.ndarray, pairs_g: np.ndarray, cap: np.ndarray, E: int, P: int):
    """(flow value, x over the pairs) of the network of one instance with GPU capacities ``cap``."""
    src, sink = 0, E + P + 1
    rows = np.concatenate([np.full(E, src), 1 + pairs_e, 1 + E + np.arange(P)])
    cols = np.concatenate([1 + np.arange(E), 1 + E + pairs_g, np.full(P, sink)])
    caps = np.concatenate([t, t[pairs_e], cap]).astype(np.int32)
    graph = csr_matrix((caps, (rows, cols)), shape=(E + P + 2, E + P + 2))
    res = maximum_flow(graph, src, sink)
    f = res.flow.tocsr()
    x = np.asarray(f[1 + pairs_e, 1 + E + pairs_g]).reshape(-1)
    return int(res.flow_value), x


def split_one(t: np.ndarray, p2l: np.ndarray, slot_gpu: np.ndarray, speed: np.ndarray) -> tuple[np.ndarray, float]:
    """The optimal split of one instance: (tokens per slot [R] int64, its max GPU time).
    t: [E] int64 tokens; p2l, slot_gpu: [R] expert and GPU of each slot; speed: [P]."""
    E, P, R = t.shape[0], speed.shape[0], p2l.shape[0]
    total = int(t.sum())
    x_slot = np.zeros(R, dtype=np.int64)
    if total == 0:
        return x_slot, 0.0
    key = np.unique(p2l * P + slot_gpu)
    pairs_e, pairs_g = key // P, key % P                                          # distinct (e, g)
    live = np.zeros(P, dtype=bool)
    live[slot_gpu] = True
    lo = total / float(speed[live].sum()) * (1 - BELOW)
    first = np.full(E, -1, dtype=np.int64)
    first[p2l[::-1]] = slot_gpu[::-1]                                              # GPU of e's first slot
    trivial = np.bincount(first, weights=t, minlength=P)
    hi = float((trivial / speed).max()) * (1 + 1e-9)      # above float rounding of k / s_g

    def feasible(T: float):
        cap = np.minimum(np.floor(T * speed), total).astype(np.int64)
        value, x = _flow(t, pairs_e, pairs_g, cap, E, P)
        return value == total, x

    ok, x = feasible(hi)
    if not ok:                             # cannot happen: the trivial split fits under hi
        raise RuntimeError("scheduled split in time: the trivial split does not fit its own time (a bug)")
    while True:
        for _ in range(MAX_STEPS):
            if hi - lo <= BELOW * hi:
                break
            mid = (lo + hi) / 2
            good, xm = feasible(mid)
            if good:
                hi, x = mid, xm
            else:
                lo = mid
        load = np.bincount(pairs_g, weights=x, minlength=P)
        value = float((load / speed).max())
        below = value * (1 - BELOW)
        good, xb = feasible(below)
        if not good:
            break
        hi, x, lo = below, xb, min(lo, below * (1 - BELOW))
    # each (e, g) pair's tokens over e's slots on g, as evenly as integers allow
    pair_of_slot = np.searchsorted(key, p2l * P + slot_gpu)                       # [R]
    per_pair = np.bincount(pair_of_slot, minlength=key.shape[0])
    order = np.argsort(pair_of_slot, kind="stable")
    start = np.concatenate([[0], np.cumsum(per_pair)[:-1]])
    rank = np.empty(R, dtype=np.int64)
    rank[order] = np.arange(R) - start[pair_of_slot[order]]
    share, extra = np.divmod(x[pair_of_slot], per_pair[pair_of_slot])
    x_slot = share + (rank < extra)
    return x_slot.astype(np.int64), value


def schedule_tokens_in_time(plan: Plan, tokens: torch.Tensor, cluster: Cluster) -> tuple[torch.Tensor, torch.Tensor]:
    """The optimal split in time of every (micro-batch, layer): ([B, L, R] int64 tokens per
    slot, [B, L] float64 optimal max GPU time). tokens: [B, L, E] int64 (checked)."""
    if tokens.numel() and int(tokens.sum(-1).max()) > MAX_TOKENS:
        raise ProblemError("tokens", f"the scheduled split in time takes at most {MAX_TOKENS} tokens per "
                           "micro-batch and layer")
    B, L, E = tokens.shape
    p2l = plan.phy2log.cpu().numpy()
    slot_gpu = np.asarray(cluster.slot_gpus(), dtype=np.int64)
    speed = np.asarray(cluster.gpu_speed, dtype=np.float64)
    t = tokens.cpu().numpy()
    out = np.zeros((B, L, p2l.shape[1]), dtype=np.int64)
    value = np.zeros((B, L), dtype=np.float64)
    for b in range(B):
        for layer in range(L):
            out[b, layer], value[b, layer] = split_one(t[b, layer], p2l[layer], slot_gpu, speed)
    return torch.from_numpy(out).to(tokens.device), torch.from_numpy(value)


def lp_time(t: np.ndarray, p2l: np.ndarray, slot_gpu: np.ndarray, speed: np.ndarray) -> float:
    """The continuous optimum (tokens divisible) of one instance by the same flow argument on
    a fine grid: a reference for tests; max over GPU sets U of the tokens of the experts
    living only on U over sum_U s_g, by enumeration (tiny instances only)."""
    P = speed.shape[0]
    gpus_of = {}
    for e, g in zip(p2l.tolist(), slot_gpu.tolist()):
        gpus_of.setdefault(e, set()).add(g)
    best = 0.0
    for mask in range(1, 2**P):
        U = {g for g in range(P) if mask >> g & 1}
        s = float(sum(speed[g] for g in U))
        inside = sum(int(t[e]) for e, gs in gpus_of.items() if gs <= U)
        if s > 0:
            best = max(best, inside / s)
    return best if math.isfinite(best) else 0.0
