"""Fewest moves under a balance budget: a fast repair heuristic, batched over layers.

Start from the placement in force and repair it on the new loads until every layer's max
GPU load is at most its target (``(1 + slack)`` x a fresh plan's). Each round, in every
layer still above target, the heaviest GPU ``g`` sheds load by one of:

- a *swap* of one of its replicas with a lighter replica on another GPU (counts kept):
  among the swaps that bring both GPUs within target the one adding the fewest moves
  (then the most balanced); when none does, the swap that lowers the pair's max most;
- a *count change* when no swap helps (a replica heavier than any swap can absorb): one
  slot of an expert with spare replicas (the one whose replicas stay lightest, on the
  lightest GPU) is given to g's heaviest expert, so all of that expert's replicas get lighter.

Moves are counted as the shared scorer counts them, per (GPU, expert) the old plan did not
hold; a swap's cost is its change of that count (undoing an earlier move is a gain). With
``copy_cost`` (planning for transfer time) each such pair weighs what its copy costs
instead (an inter-node copy several intra-node ones, :func:`.relabel.copy_costs`),
and swap partners are searched on every GPU of the zone (a near one is worth the search).
Under the hierarchical policy replicas never leave their node (``num_zones`` = nodes),
so whole groups stay together. Layers the repair cannot bring within target are reported
(the caller falls back to the relabelled fresh plan there); :func:`recount` (the fresh
plan's counts) and, under the hierarchical policy, :func:`regroup` (whole groups moved to
other nodes) give those a second start.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import torch

from ..elastic.search import counts as replica_counts, swapped
from ..heuristics.common import presence_counts
from ..heuristics.hierarchical import balanced_partitions
from ..scoring import gpu_presence, new_pairs, per_slot_loads

# A load within this relative margin of its target meets it (float64 sums of a few
# hundred terms are exact to far better; the shared scorer does the same arithmetic).
TARGET_RTOL = 1e-12
# Planning for time, while no swap meets the target yet: a swap's copy cost (units of an
# intra-node copy) weighs this much against how far it brings the pair's max load (relative
# to the target). Measured on DeepSeek-V3 drifting re-plans (global policy, slack 0.01):
# 0.05 and 0.3 give the same stalls, 0 gives 1.25x longer ones.
COST_WEIGHT = 0.1


@dataclass
class RepairOutcome:
    """phy2log: [L, R] repaired placement; met: [L] bool, within target; rounds: loop rounds;
    swaps / count_changes: [L] operations applied per layer."""

    phy2log: torch.Tensor
    met: torch.Tensor
    rounds: int
    swaps: torch.Tensor
    count_changes: torch.Tensor
    info: dict = field(default_factory=dict)


def _loads(w: torch.Tensor, p2l: torch.Tensor, num_gpus: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(replica counts [X, E], load of every slot [X, R], of every GPU [X, P]) of p2l: [X, R]."""
    cnt = replica_counts(p2l, w.shape[1])
    per = per_slot_loads(w, p2l, cnt)
    return cnt, per, per.view(len(p2l), num_gpus, -1).sum(-1)


def _holds(p2l: torch.Tensor, experts: torch.Tensor, gpus: torch.Tensor, num_gpus: int) -> torch.Tensor:
    """[X, A, B] bool: GPU gpus[x, b] holds a replica of experts[x, a] now. p2l: [X, R]."""
    X, R = p2l.shape
    S = R // num_gpus
    B = gpus.shape[1]
    on = p2l.view(X, num_gpus, S).gather(1, gpus.unsqueeze(2).expand(X, B, S))      # [X, B, S]
    return (on.unsqueeze(1) == experts.view(X, -1, 1, 1)).any(-1)


def _held_before(old: torch.Tensor, experts: torch.Tensor, gpus: torch.Tensor) -> torch.Tensor:
    """[X, A, B]: old[x, gpus[x, b], experts[x, a]] (the old plan had the expert there, or with a
    float [X, P, E] cost table, what a copy there costs)."""
    X, P, E = old.shape
    idx = gpus.unsqueeze(1) * E + experts.unsqueeze(2)                              # [X, A, B]
    return old.view(X, P * E).gather(1, idx.view(X, -1)).view(idx.shape)


def _best_swaps(w_slot: torch.Tensor, p2l: torch.Tensor, load: torch.Tensor, old: torch.Tensor,
                target: torch.Tensor, num_gpus: int, num_zones: int, width: int,
                max_cost: float | None = None, copy_cost: torch.Tensor | None = None):
    """For each row, the best swap between its heaviest GPU and one of the ``width`` lightest
    GPUs of its zone.

    w_slot: [X, R] load of every replica, p2l: [X, R], load: [X, P], old: [X, P, E] bool,
    target: [X]. max_cost: only swaps adding at most this many moves. copy_cost: [X, P, E]
    float, what a new (GPU, expert) pair costs (None: 1, the move count). Returns (found [X]
    bool, slot on g [X], other slot [X], heaviest GPU g [X]).
    """
    X, R = p2l.shape
    P = num_gpus
    S = R // P
    dev = p2l.device
    mx, g = load.max(1)
    zone_size = P // num_zones
    gpu_ids = torch.arange(P, device=dev)
    other_zone = (gpu_ids // zone_size).view(1, P) != (g // zone_size).view(X, 1)
    free = load.masked_fill(other_zone | (gpu_ids.view(1, P) == g.view(X, 1)), float("inf"))
    K = min(width, zone_size - 1)
    if K <= 0:                        # one GPU per zone (one GPU in all): nothing to swap with
        none = torch.zeros(X, dtype=torch.long, device=dev)
        return torch.zeros(X, dtype=torch.bool, device=dev), none, none, g
    hs = free.topk(K, dim=1, largest=False).indices                                  # [X, K]
    slot_range = torch.arange(S, device=dev)
    mine = g.unsqueeze(1) * S + slot_range                                           # [X, S] slots on g
    theirs = (hs.unsqueeze(2) * S + slot_range).view(X, K * S)                       # [X, C] candidate slots
    a, ea = w_slot.gather(1, mine), p2l.gather(1, mine)                              # [X, S]
    b, eb = w_slot.gather(1, theirs), p2l.gather(1, theirs)                          # [X, C]
    hload = load.gather(1, hs).repeat_interleave(S, dim=1)                           # [X, C]
    d = a.unsqueeze(2) - b.unsqueeze(1)                                              # [X, S, C]
    pair_max = torch.maximum(mx.view(X, 1, 1) - d, hload.unsqueeze(1) + d)
    ok = (d > 0) & (pair_max < mx.view(X, 1, 1) * (1 - TARGET_RTOL))
    ok &= torch.isfinite(hload).unsqueeze(1)
    # Moves added, counted as the scorer does: (GPU, expert) pairs absent from the old plan.
    gset = g.unsqueeze(1)
    gain_b = ~(_holds(p2l, eb, gset, P).squeeze(2) | _held_before(old, eb, gset).squeeze(2))   # [X, C]
    gain_a = ~(_holds(p2l, ea, hs, P) | _held_before(old, ea, hs))                  # [X, S, K]
    gain_a = gain_a.repeat_interleave(S, dim=2)                                      # [X, S, C]
    same_a = (ea.unsqueeze(2) == ea.unsqueeze(1)).sum(2) == 1                        # last copy of ea on g
    lose_a = same_a & ~_held_before(old, ea, gset).squeeze(2)                        # [X, S]
    on_h = p2l.view(X, P, S).gather(1, hs.unsqueeze(2).expand(X, K, S))              # [X, K, S]
    same_b = (on_h.unsqueeze(3) == on_h.unsqueeze(2)).sum(3) == 1                   # last copy of eb on h
    old_b = old.view(X, -1).gather(1, hs.repeat_interleave(S, dim=1) * old.shape[2] + eb)    # [X, C]
    lose_b = same_b.view(X, K * S) & ~old_b
    c_a_h = c_b_g = c_a_g = c_b_h = 1.0          # every new pair weighs one move (exact in float)
    if copy_cost is not None:        # each pair weighs its copy's cost (same signs, other weights)
        c_a_h = _held_before(copy_cost, ea, hs).repeat_interleave(S, dim=2)                # [X, S, C]
        c_b_g = _held_before(copy_cost, eb, gset).squeeze(2)                             # [X, C]
        c_a_g = _held_before(copy_cost, ea, gset).squeeze(2)                             # [X, S]
        c_b_h = copy_cost.view(X, -1).gather(1, hs.repeat_interleave(S, dim=1) * copy_cost.shape[2] + eb)  # [X, C]
    cost = (gain_a.to(d.dtype) * c_a_h + (gain_b.to(d.dtype) * c_b_g).unsqueeze(1)
            - (lose_a.to(d.dtype) * c_a_g).unsqueeze(2) - (lose_b.to(d.dtype) * c_b_h).unsqueeze(1))
    if max_cost is not None:
        ok &= cost <= max_cost
    t = target.view(X, 1, 1)
    rel = pair_max / t
    far = 10.0 + rel
    if copy_cost is not None:        # no swap meets the target yet: among those that help, cheap copies first
        far = far + COST_WEIGHT * cost.clamp_min(0)
    key = torch.where(pair_max <= t * (1 + TARGET_RTOL), cost + 0.5 * rel, far)
    key = key.masked_fill(~ok, float("inf")).view(X, -1)
    best = key.argmin(1, keepdim=True)
    found = torch.isfinite(key.gather(1, best)).squeeze(1)
    slot_g = mine.gather(1, best // (K * S)).squeeze(1)
    slot_h = theirs.gather(1, best % (K * S)).squeeze(1)
    return found, slot_g, slot_h, g


def _donor(w: torch.Tensor, p2l: torch.Tensor, cnt: torch.Tensor, x: torch.Tensor, allowed: torch.Tensor,
           slot_load: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The slot that gives a replica to expert x [X]: among ``allowed`` [X, R] slots of experts
    other than x with another replica, one whose expert's replicas stay lightest after, on the
    lightest GPU (``slot_load`` [X, R]: the load of each slot's GPU). Returns (slot [X], that
    expert's load per replica after [X], inf where no slot qualifies)."""
    c_slot = cnt.gather(1, p2l)
    allowed = allowed & (c_slot >= 2) & (p2l != x.unsqueeze(1))
    key = (w.gather(1, p2l) / (c_slot - 1).clamp_min(1).to(w.dtype)).masked_fill(~allowed, float("inf"))
    lowest = key.min(1, keepdim=True).values
    tie = allowed & (key <= lowest * (1 + TARGET_RTOL))
    return slot_load.masked_fill(~tie, float("inf")).argmin(1), lowest.squeeze(1)


def _count_change(w: torch.Tensor, p2l: torch.Tensor, cnt: torch.Tensor, load: torch.Tensor,
                  per: torch.Tensor, g: torch.Tensor, num_gpus: int, num_zones: int):
    """One slot given to the heaviest expert of GPU g by an expert with spare replicas.

    Returns (ok [X], donor slot [X], receiver expert [X]); ok only when the new max load
    of the layer is below the old one.
    """
    X, R = p2l.shape
    P = num_gpus
    S = R // P
    dev = p2l.device
    mine = g.unsqueeze(1) * S + torch.arange(S, device=dev)
    x = p2l.gather(1, mine).gather(1, per.gather(1, mine).argmax(1, keepdim=True)).squeeze(1)   # [X]
    h = torch.arange(R, device=dev) // S
    allowed = h.view(1, R) != g.view(X, 1)
    if num_zones > 1:
        zone = h // (P // num_zones)
        allowed &= zone.view(1, R) == (g // (P // num_zones)).view(X, 1)
    j, lowest = _donor(w, p2l, cnt, x, allowed, load.gather(1, h.expand(X, R)))
    have = torch.isfinite(lowest)
    # Exact new max load of the layer after the change.
    trial = p2l.clone()
    trial.scatter_(1, j.unsqueeze(1), x.unsqueeze(1))
    new_load = _loads(w, trial, P)[2]
    ok = have & (new_load.max(1).values < load.max(1).values * (1 - TARGET_RTOL))
    return ok, j, x


def _spread_hot_experts(w: torch.Tensor, p2l: torch.Tensor, item_cap: torch.Tensor, num_gpus: int,
                        num_zones: int, limit: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Give the heaviest replica's expert one more slot (from the expert whose replicas stay
    lightest, on the lightest GPU, in the same zone) until no replica exceeds ``item_cap``
    [L]. Returns (phy2log, count changes per layer [L])."""
    L = w.shape[0]
    R = p2l.shape[1]
    P, S = num_gpus, R // num_gpus
    p2l = p2l.clone()
    n = torch.zeros(L, dtype=torch.int64, device=p2l.device)
    slot_gpu = torch.arange(R, device=p2l.device) // S
    zone = slot_gpu // (P // num_zones)
    for _ in range(limit):
        cnt, per, load = _loads(w, p2l, P)                                          # per: [L, R]
        top, heavy = per.max(1)
        x = p2l.gather(1, heavy.unsqueeze(1)).squeeze(1)
        j, lowest = _donor(w, p2l, cnt, x, zone.view(1, R) == zone[heavy].view(L, 1),
                           load.gather(1, slot_gpu.expand(L, R)))
        go = (top > item_cap * (1 + TARGET_RTOL)) & (lowest < top)
        if not bool(go.any()):
            break
        rows = go.nonzero().squeeze(1)
        p2l[rows, j[rows]] = x[rows]
        n[rows] += 1
    return p2l, n


def repair(weights: torch.Tensor, previous: torch.Tensor, target: torch.Tensor, num_gpus: int,
           num_zones: int = 1, max_rounds: int | None = None, width: int = 8,
           polish_rounds: int = 64, item_cap: torch.Tensor | None = None,
           copy_cost: torch.Tensor | None = None) -> RepairOutcome:
    """Repair ``previous`` (phy2log [L, R]) on ``weights`` [L, E] until every layer's max GPU
    load is <= ``target`` [L], with few moves. ``num_zones``: replicas never leave their
    zone of ``P / num_zones`` consecutive GPUs (nodes, under the hierarchical policy).
    ``width``: swap partners are searched on this many of the lightest GPUs.
    ``polish_rounds``: afterwards, rounds of swaps that add no move and lower the max.
    ``item_cap``: [L] first, count changes until no replica carries more than this (the
    fresh plan's heaviest replica: counts follow the new loads where it matters).
    ``copy_cost``: [L, P, E] float, what a copy of e onto GPU g costs (None: every move 1)."""
    w = weights.to(torch.float64)
    L, E = w.shape
    P = num_gpus
    p2l = previous.clone()
    old = presence_counts(previous, E, P) > 0                                            # [L, P, E]
    if copy_cost is not None:
        width = max(width, P)
    target = target.to(w.device, torch.float64)
    swaps = torch.zeros(L, dtype=torch.int64, device=w.device)
    changes = torch.zeros_like(swaps)
    stuck = torch.zeros(L, dtype=torch.bool, device=w.device)
    rounds = 0
    limit = max_rounds if max_rounds is not None else 4 * previous.shape[1]
    if item_cap is not None:
        p2l, n = _spread_hot_experts(w, p2l, item_cap.to(w.device, torch.float64), P, num_zones, limit)
        changes += n
    live = torch.arange(L, device=w.device)          # rows still above target (layers are independent:
    while rounds < limit:                            # a row within target never changes again)
        sp = p2l[live]
        cnt, sper, sload = _loads(w[live], sp, P)                                  # sper: [X, R]
        over = (sload.max(1).values > target[live] * (1 + TARGET_RTOL)) & ~stuck[live]
        keep = over.nonzero().squeeze(1)
        live = live[keep]
        if live.numel() == 0:
            break
        rounds += 1
        rows = live
        sp, sper, sload, cnt = sp[keep], sper[keep], sload[keep], cnt[keep]
        found, slot_g, slot_h, g = _best_swaps(sper, sp, sload, old[rows], target[rows], P, num_zones, width,
                                               copy_cost=None if copy_cost is None else copy_cost[rows])
        new = torch.where(found.unsqueeze(1), swapped(sp, slot_g, slot_h), sp)
        need = ~found                      # no swap helps: give g's heaviest expert a replica
        if bool(need.any()):
            ok, j, x = _count_change(w[rows], sp, cnt, sload, sper, g, P, num_zones)
            ok &= need
            changed = sp.clone()
            changed.scatter_(1, j.unsqueeze(1), x.unsqueeze(1))
            new = torch.where(ok.unsqueeze(1), changed, new)
            changes[rows] += ok.to(torch.int64)
            stuck[rows[need & ~ok]] = True
        swaps[rows] += found.to(torch.int64)
        p2l[rows] = new
    load = _loads(w, p2l, P)[2]
    met = load.max(1).values <= target * (1 + TARGET_RTOL)
    # Polish: swaps that add no move and still lower the max (a plan whose top GPUs all sit
    # at the target is fragile on the next steps' loads).
    done = ~met
    polish = 0
    while polish < polish_rounds:
        rows = (~done).nonzero().squeeze(1)
        if rows.numel() == 0:
            break
        polish += 1
        sp = p2l[rows]
        _, per, sload = _loads(w[rows], sp, P)
        found, slot_g, slot_h, _ = _best_swaps(per, sp, sload, old[rows], sload.max(1).values, P, num_zones,
                                               width, max_cost=0,
                                               copy_cost=None if copy_cost is None else copy_cost[rows])
        p2l[rows] = torch.where(found.unsqueeze(1), swapped(sp, slot_g, slot_h), sp)
        swaps[rows] += found.to(torch.int64)
        done[rows[~found]] = True
    return RepairOutcome(p2l, met, rounds, swaps, changes, {"polish_rounds": polish})


# A second start ----------------------------------------------------------------------------
# A second start for layers the repair could not bring within target: the placement in
# force with the fresh plan's replica counts.
#
# The repair keeps replica counts unless one expert is too hot, so a layer whose counts
# drifted far (a regime shift on a small model) may get stuck where no single swap or count
# change helps; it then fell back to the relabelled fresh plan, which moves most replicas.
# Here only the replicas whose counts changed move: an expert with more replicas than the
# fresh plan gives up its replicas on the heaviest GPUs, and an expert with fewer gets those
# slots (its heaviest replicas to the lightest GPUs). The repair then runs from this start.


def recount_layer(w: np.ndarray, p2l: np.ndarray, counts: np.ndarray, num_gpus: int) -> np.ndarray:
    """phy2log [R] of ``p2l`` [R] with replica counts ``counts`` [E]; w: [E] loads."""
    R, E = len(p2l), len(w)
    S = R // num_gpus
    out = p2l.copy()
    cnt = np.bincount(out, minlength=E)
    per = w[out] / cnt[out]                                                     # [R] load per replica
    gpu_load = np.bincount(np.arange(R) // S, weights=per, minlength=num_gpus)
    free = []
    for e in np.flatnonzero(cnt > counts):                                       # surplus replicas
        slots = np.flatnonzero(out == e)
        free += list(slots[np.argsort(-gpu_load[slots // S], kind="stable")][: cnt[e] - counts[e]])
    if not free:
        return out
    free = np.asarray(free)
    np.subtract.at(gpu_load, free // S, per[free])
    need = np.repeat(np.flatnonzero(counts > cnt), (counts - cnt).clip(min=0)[counts > cnt])
    need = need[np.argsort(-(w[need] / counts[need]), kind="stable")]          # heaviest replica first
    for e in need:
        k = int(np.argmin(gpu_load[free // S]))
        out[free[k]] = e
        gpu_load[free[k] // S] += w[e] / counts[e]
        free = np.delete(free, k)
    return out


def recount(weights: torch.Tensor, p2l: torch.Tensor, counts: torch.Tensor, num_gpus: int) -> torch.Tensor:
    """phy2log [X, R] of ``p2l`` [X, R] with replica counts ``counts`` [X, E] (rows sum to R);
    weights: [X, E]."""
    w = weights.to(torch.float64).cpu().numpy()
    old = p2l.cpu().numpy()
    c = counts.cpu().numpy()
    rows = [recount_layer(w[i], old[i], c[i], num_gpus) for i in range(len(old))]
    return torch.as_tensor(np.stack(rows), device=p2l.device) if rows else p2l.clone()


# Hierarchical plans whose nodes drifted apart ----------------------------------------------
# Hierarchical plans whose nodes drifted apart: move as few whole groups as possible.
#
# When a node's share of the new loads exceeds what its GPUs may carry (node load / GPUs
# per node > target), no repair inside the nodes can meet the target: some groups must
# change node. Every balanced group-to-node assignment (G/N groups per node; 2,520 for 8
# groups on 4 nodes) is scored for all such layers at once; the few with the fewest groups
# moved (then the lowest node load) that leave every node within target become starts:
#
# - replicas of staying groups keep their slots; slots of departing groups are freed;
# - arriving experts get replica counts for the free slots (greedy, optimal for the max
#   replica load); when there are fewer free slots than arriving experts, staying experts
#   with spare replicas give slots (those whose replicas stay lightest);
# - arriving replicas go heaviest first to the lightest GPU with a free slot.
#
# The caller repairs every start inside its nodes (:func:`repair`) and keeps,
# per layer, the start that meets the target with the fewest moves (with a copy-cost table,
# planning for transfer time: the cheapest copies).


@lru_cache(maxsize=16)
def labelled_assignments(num_groups: int, num_nodes: int) -> np.ndarray | None:
    """[M, G] node of every group, G/N groups per node, every labelling (None when too many)."""
    parts = balanced_partitions(num_groups, num_nodes)
    if parts is None or len(parts) * math.factorial(num_nodes) > 200_000:
        return None
    table = np.asarray(parts, dtype=np.int64)                                     # [M0, G]
    perms = np.asarray(list(itertools.permutations(range(num_nodes))), dtype=np.int64)  # [N!, N]
    return perms[:, table].reshape(-1, num_groups)


@lru_cache(maxsize=16)
def _one_hot(num_groups: int, num_nodes: int) -> np.ndarray:
    """[M, G, N] one-hot of :func:`labelled_assignments` (node loads by one product)."""
    return np.eye(num_nodes)[labelled_assignments(num_groups, num_nodes)]


def home_nodes(p2l: np.ndarray, num_groups: int, num_experts: int, num_nodes: int) -> np.ndarray:
    """[G] node holding most replicas of each group. p2l: [R]."""
    R = len(p2l)
    node = np.arange(R) // (R // num_nodes)
    votes = np.zeros((num_groups, num_nodes), dtype=np.int64)
    np.add.at(votes, (p2l // (num_experts // num_groups), node), 1)
    return votes.argmax(1)


def candidate_assignments(w: np.ndarray, home: np.ndarray, replicas: np.ndarray, cap: float, num_groups: int,
                          num_nodes: int, num_gpus: int, top: int) -> list[np.ndarray]:
    """Up to ``top`` group-to-node assignments [G] meeting ``cap`` per GPU on average,
    fewest replicas moved first (``replicas``: [G] of each group in the old plan), then
    lowest node load. w: [E] new loads; home: [G]."""
    table = labelled_assignments(num_groups, num_nodes)
    if table is None:
        return []
    gl = w.reshape(num_groups, -1).sum(1)                                          # [G]
    node_load = gl @ _one_hot(num_groups, num_nodes)                               # [M, N]
    worst = node_load.max(1) / (num_gpus // num_nodes)
    moved = ((table != home[None, :]) * replicas[None, :]).sum(1)
    ok = np.flatnonzero(worst <= cap)
    order = ok[np.lexsort((worst[ok], moved[ok]))]
    return [table[i] for i in order[:top]]


def _greedy_counts(w: np.ndarray, num_slots: int) -> np.ndarray:
    """[E'] replica counts for ``num_slots`` slots, each extra slot to the highest load per
    replica (optimal for the max replica load; a few slots, so a short loop)."""
    c = np.ones(len(w), dtype=np.int64)
    for _ in range(num_slots - len(w)):
        c[np.argmax(w / c)] += 1
    return c


def start_from_assignment(w: np.ndarray, p2l: np.ndarray, assign: np.ndarray, num_groups: int,
                          num_nodes: int, num_gpus: int) -> np.ndarray:
    """phy2log [R] keeping staying groups' replicas, placing arriving groups in freed slots."""
    R, E = len(p2l), len(w)
    S = R // num_gpus
    per_node = R // num_nodes
    gsize = E // num_groups
    out = p2l.copy()
    for n in range(num_nodes):
        slots = np.arange(n * per_node, (n + 1) * per_node)
        mine = out[slots]
        stays = assign[mine // gsize] == n
        if stays.all():                              # no group leaves: none arrives
            continue
        experts = np.flatnonzero(assign[np.arange(E) // gsize] == n)
        present = np.zeros(E, dtype=bool)
        present[mine[stays]] = True
        arriving = experts[~present[experts]]
        free = list(slots[~stays])
        cnt = np.bincount(mine[stays], minlength=E)
        gpu_load = np.zeros(num_gpus)
        np.add.at(gpu_load, slots[stays] // S, (w[mine[stays]] / np.maximum(cnt[mine[stays]], 1)))
        while len(free) < len(arriving):            # staying experts give spare replicas
            spare = np.flatnonzero(cnt >= 2)
            d = spare[np.argmin(w[spare] / (cnt[spare] - 1))]
            held = slots[stays & (mine == d) & ~np.isin(slots, free)]
            free.append(int(held[np.argmax(gpu_load[held // S])]))
            cnt[d] -= 1
        if len(arriving) == 0:
            continue
        acnt = _greedy_counts(w[arriving], len(free))
        reps = np.repeat(arriving, acnt)
        reps = reps[np.argsort(-np.repeat(w[arriving] / acnt, acnt), kind="stable")]   # heaviest first
        free = np.asarray(sorted(free))
        keep = np.ones(per_node, dtype=bool)
        keep[free - n * per_node] = False
        kept = slots[keep]
        gpu_load[:] = 0
        np.add.at(gpu_load, kept // S, w[out[kept]] / cnt[out[kept]])
        # Free slots in order of their GPU's load plus what earlier free slots there add:
        # the heaviest replicas land on the lightest GPUs (the repair then balances).
        gpu = free // S
        rank = np.arange(len(free)) - np.searchsorted(gpu, gpu)
        key = gpu_load[gpu] + rank * (w[arriving].sum() / len(free))
        out[free[np.argsort(key, kind="stable")]] = reps
    return out


def regroup(weights: torch.Tensor, previous: torch.Tensor, target: torch.Tensor, layers: list[int],
            num_groups: int, num_nodes: int, num_gpus: int, top: int = 6,
            item_cap: torch.Tensor | None = None, copy_cost: torch.Tensor | None = None) -> dict[int, torch.Tensor]:
    """{layer: phy2log [R]} for the ``layers`` whose best start (moved groups, then repaired
    inside the nodes) meets ``target``; weights: [L, E], previous: [L, R], target: [L].
    item_cap: [L] per-replica load the repair first brings hot experts under (as for the
    other layers: counts follow the new loads where it matters). copy_cost: [L, P, E] what a
    copy of e onto GPU g costs (None: every move 1)."""

    if not layers:
        return {}
    w = weights.to(torch.float64).cpu().numpy()
    old = previous.cpu().numpy()
    E = w.shape[1]
    rows, owner = [], []
    for layer in layers:
        home = home_nodes(old[layer], num_groups, E, num_nodes)
        reps = np.bincount(old[layer] // (E // num_groups), minlength=num_groups)
        for assign in candidate_assignments(w[layer], home, reps, float(target[layer]), num_groups, num_nodes,
                                            num_gpus, top):
            rows.append(start_from_assignment(w[layer], old[layer], assign, num_groups, num_nodes, num_gpus))
            owner.append(layer)
    if not rows:
        return {}
    idx = torch.tensor(owner, device=previous.device)
    starts = torch.as_tensor(np.stack(rows), device=previous.device)
    cost = None if copy_cost is None else copy_cost[idx]
    fixed = repair(weights[idx], starts, target[idx], num_gpus, num_nodes,
                   item_cap=None if item_cap is None else item_cap[idx], copy_cost=cost)
    if cost is None:
        moves = new_pairs(fixed.phy2log, previous[idx], E, num_gpus).to(torch.float64)
    else:
        moves = (gpu_presence(fixed.phy2log, E, num_gpus).to(cost.dtype) * cost).flatten(1).sum(1)
    best: dict[int, tuple[float, torch.Tensor]] = {}
    for k, layer in enumerate(owner):
        if bool(fixed.met[k]) and (layer not in best or float(moves[k]) < best[layer][0]):
            best[layer] = (float(moves[k]), fixed.phy2log[k])
    return {layer: p2l for layer, (_, p2l) in best.items()}
