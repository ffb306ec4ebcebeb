"""Hierarchical plans whose nodes drifted apart: move as few whole groups as possible.

When a node's share of the new loads exceeds what its GPUs may carry (node load / GPUs
per node > target), no repair inside the nodes can meet the target: some groups must
change node. Every balanced group-to-node assignment (G/N groups per node; 2,520 for 8
groups on 4 nodes) is scored for all such layers at once; the few with the fewest groups
moved (then the lowest node load) that leave every node within target become starts:

- replicas of staying groups keep their slots; slots of departing groups are freed;
- arriving experts get replica counts for the free slots (greedy, optimal for the max
  replica load); when there are fewer free slots than arriving experts, staying experts
  with spare replicas give slots (those whose replicas stay lightest);
- arriving replicas go heaviest first to the lightest GPU with a free slot.

The caller repairs every start inside its nodes (:func:`.repair.repair`) and keeps,
per layer, the start that meets the target with the fewest moves (with a copy-cost table,
planning for transfer time: the cheapest copies).
"""
from __future__ import annotations

import itertools
import math
from functools import lru_cache

import numpy as np
import torch

from ..heuristics.hierarchical import balanced_partitions
from ..scoring import gpu_presence, new_pairs
from .repair import repair


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
