"""Spread a plan's copies over the receiving GPUs of each node, across layers.

A transfer schedule lasts at least as long as its busiest GPU receives (:mod:`.transfers`).
Relabelling (:mod:`.relabel`) renames the GPUs of each layer on its own, for the cheapest
copies of that layer; when whole groups change node (hierarchical plans whose node loads
drifted), every such layer sends its arriving replicas to the same GPU positions, and
those GPUs pile up the inter-node copies of all layers. Renaming the GPUs of a node within
a layer leaves every load of that layer (and every node's experts) unchanged, so it keeps
the plan's balance; it only changes which physical GPU receives which copies (and may turn
replicas that stayed into intra-node copies). This pass renames, layer by layer, the GPUs
of each node to minimise the sum over GPUs of the squared receive time of all layers (an
assignment problem per (layer, node); the square spreads the load, as a min-max would).
"""
from __future__ import annotations

import numpy as np
import torch

from ..scoring import gpu_presence
from .relabel import align_slots

# Passes over the layers (each layer re-placed against the others' receive times).
SWEEPS = 2


def spread_receivers(p2l: torch.Tensor, previous: torch.Tensor, copy_cost: torch.Tensor, num_experts: int,
                     num_gpus: int, num_nodes: int) -> torch.Tensor:
    """phy2log [L, R]: ``p2l`` with the GPUs of each node renamed per layer to spread the
    receive time over GPUs. previous: [L, R] the plan in force; copy_cost: [L, P, E] what a
    copy of e onto GPU b costs (0 where b held e; :func:`solvers.migration.api.copy_costs`)."""
    from scipy.optimize import linear_sum_assignment

    L, R = p2l.shape
    P, S, Q = num_gpus, R // num_gpus, num_gpus // num_nodes
    new = gpu_presence(p2l.cpu(), num_experts, P).to(torch.float64)                    # [L, P, E]
    # cost[l, a, b]: what new GPU a's copies cost when a's replicas sit on GPU b
    cost = torch.bmm(new, copy_cost.cpu().to(torch.float64).transpose(1, 2)).numpy()   # [L, P, P]
    perm = np.tile(np.arange(P), (L, 1))                                                 # [L, P] a -> b
    part = cost[:, np.arange(P), np.arange(P)].copy()                                   # [L, P] receive of b
    total = part.sum(0)                                                                  # [P]
    order = np.argsort(-part.sum(1), kind="stable")                                     # busiest layers first
    for _ in range(SWEEPS):
        for layer in order:
            if not cost[layer].any():
                continue
            total -= part[layer]
            for n in range(num_nodes):
                idx = np.arange(n * Q, (n + 1) * Q)
                block = cost[layer][np.ix_(idx, idx)]                                   # [Q a, Q b]
                rows, cols = linear_sum_assignment((total[idx][None, :] + block) ** 2)
                perm[layer, idx[rows]] = idx[cols]
                part[layer, idx[cols]] = block[rows, cols]
            total += part[layer]
    target = torch.as_tensor(perm, dtype=torch.int64)
    placed = torch.empty_like(p2l.cpu()).view(L, P, S)
    placed.scatter_(1, target.unsqueeze(2).expand(L, P, S), p2l.cpu().view(L, P, S))
    aligned = align_slots(placed.view(L * P, S), previous.cpu().reshape(L * P, S))
    return aligned.view(L, R).to(p2l.device)
