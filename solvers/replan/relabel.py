"""Relabelling: permute a fresh plan's nodes, GPUs and slots to keep replicas where they are.

GPU loads only depend on which replicas share a GPU, so renaming GPUs (and the slots
inside a GPU) leaves every load unchanged while the moves against the placement in force
drop. Moves are counted per (layer, GPU, expert) as the shared scorer does, so the best
renaming maximises, over a permutation of GPUs, the experts that a new GPU shares with
the old GPU it takes the place of: an assignment problem per layer
(``scipy.optimize.linear_sum_assignment``).

With ``num_nodes > 1`` GPUs only move inside a node and whole nodes are renamed (a
two-level assignment: a GPU matching for every pair of nodes, then a node matching on
those values), so a hierarchical plan keeps its groups together and node loads keep
their values. Inside each GPU, a replica that the old GPU also held takes that old slot
(engines then leave the slot untouched).

Planning for transfer time, the renaming minimises what the copies cost instead
(:func:`copy_costs`: an inter-node copy weighs several intra-node ones), and
:func:`spread_receivers` renames the GPUs of each node again to spread the copies over the
receiving GPUs across layers (below).
"""
from __future__ import annotations

import numpy as np
import torch

from ..errors import OptionError
from ..plan import Plan
from ..scoring import gpu_presence


def shared_experts(new_p2l: torch.Tensor, old_p2l: torch.Tensor, num_experts: int,
                   num_gpus: int) -> torch.Tensor:
    """overlap: [L, P, P] experts held both by new GPU a and old GPU b (float32 counts)."""
    new = gpu_presence(new_p2l, num_experts, num_gpus).to(torch.float32)   # [L, P, E]
    old = gpu_presence(old_p2l, num_experts, num_gpus).to(torch.float32)
    return torch.bmm(new, old.transpose(1, 2))


def gpu_assignment(overlap: torch.Tensor, num_nodes: int = 1) -> torch.Tensor:
    """target: [L, P] old GPU position that each new GPU takes, maximising the shared experts.

    overlap: [L, P, P]. With ``num_nodes > 1`` a new GPU stays with the other GPUs of its
    node (nodes are matched as a whole, GPUs inside each matched pair of nodes).
    """
    # scipy (about 0.4 s to import) only when a plan is relabelled, not at `import solvers`
    from scipy.optimize import linear_sum_assignment

    ov = overlap.cpu().numpy().astype(np.float64)
    L, P, _ = ov.shape
    N = num_nodes
    Q = P // N
    target = np.empty((L, P), dtype=np.int64)
    for layer in range(L):
        if N == 1:
            rows, cols = linear_sum_assignment(ov[layer], maximize=True)
            target[layer, rows] = cols
            continue
        blocks = ov[layer].reshape(N, Q, N, Q)
        value = np.empty((N, N))
        inner = np.empty((N, N, Q), dtype=np.int64)
        for a in range(N):
            for b in range(N):
                r, c = linear_sum_assignment(blocks[a, :, b, :], maximize=True)
                value[a, b] = blocks[a, r, b, c].sum()
                inner[a, b, r] = c
        na, nb = linear_sum_assignment(value, maximize=True)
        for a, b in zip(na, nb):
            target[layer, a * Q:(a + 1) * Q] = b * Q + inner[a, b]
    return torch.from_numpy(target).to(overlap.device)


def _rank_in_row(x: torch.Tensor) -> torch.Tensor:
    """[X, S]: how many earlier entries of the same row equal each entry (replica rank on a GPU)."""
    X, S = x.shape
    # A stable sort puts equal entries in row order; the rank is the distance from the start
    # of its run (O(S log S): an [S, S] comparison took seconds at thousands of slots a GPU).
    vals, order = x.sort(dim=1, stable=True)                                    # [X, S]
    pos = torch.arange(S, device=x.device).expand(X, S)
    starts = torch.ones_like(vals, dtype=torch.bool)
    starts[:, 1:] = vals[:, 1:] != vals[:, :-1]
    run_start = torch.where(starts, pos, torch.zeros_like(pos)).cummax(1).values
    return torch.empty_like(x).scatter_(1, order, pos - run_start)


def align_slots(new_slots: torch.Tensor, old_slots: torch.Tensor) -> torch.Tensor:
    """Reorder each row of new_slots [X, S] so that an expert the old row [X, S] held keeps
    its old slot (the k-th replica of e takes the old k-th slot of e); the rest fill the
    free slots in order."""
    X, S = new_slots.shape
    key_new = new_slots * S + _rank_in_row(new_slots)
    key_old = old_slots * S + _rank_in_row(old_slots)
    # Keys are unique within a row, so matching is a sorted search: O(S log S) per row where
    # an [X, S, S] comparison took 1.6 s at one GPU of 8192 slots.
    sorted_old, order = key_old.sort(dim=1)                                     # [X, S]
    at = torch.searchsorted(sorted_old.contiguous(), key_new.contiguous()).clamp_max(S - 1)
    matched = sorted_old.gather(1, at) == key_new                               # [X, S(new)]
    pos = order.gather(1, at)                                                   # its old slot
    taken = torch.zeros(X, S + 1, dtype=torch.bool, device=new_slots.device)
    taken.scatter_(1, torch.where(matched, pos, S), True)
    free = ~taken[:, :S]                                                        # old slots nobody took
    idx = torch.arange(S, device=new_slots.device).expand(X, S)
    free_pos = torch.sort(torch.where(free, idx, idx + S), dim=1).values % S     # free slots first, in order
    k = (torch.cumsum((~matched).to(torch.int64), 1) - 1).clamp_min(0)
    pos = torch.where(matched, pos, free_pos.gather(1, k))
    return torch.empty_like(new_slots).scatter_(1, pos, new_slots)


def copy_savings(new_p2l: torch.Tensor, copy_cost: torch.Tensor, num_experts: int, num_gpus: int) -> torch.Tensor:
    """[L, P, P]: minus what new GPU a's experts cost to copy onto old GPU position b, with
    ``copy_cost`` [L, P, E] the cost of a copy of e onto GPU b (0 where b held e)."""
    new = gpu_presence(new_p2l, num_experts, num_gpus).to(torch.float64)      # [L, P, E]
    return -torch.bmm(new, copy_cost.to(torch.float64).transpose(1, 2))


def relabel_phy2log(new_p2l: torch.Tensor, old_p2l: torch.Tensor, num_experts: int, num_gpus: int,
                    num_nodes: int = 1, copy_cost: torch.Tensor | None = None) -> torch.Tensor:
    """phy2log [L, R] of ``new_p2l`` with GPUs (and nodes) renamed and slots aligned to ``old_p2l``.
    ``copy_cost`` [L, P, E]: minimise what the copies cost instead of their number."""
    value = (shared_experts(new_p2l, old_p2l, num_experts, num_gpus) if copy_cost is None
             else copy_savings(new_p2l, copy_cost, num_experts, num_gpus))
    return _renamed(new_p2l, gpu_assignment(value, num_nodes), old_p2l)


def _renamed(p2l: torch.Tensor, target: torch.Tensor, previous: torch.Tensor) -> torch.Tensor:
    """phy2log [L, R]: the slots of GPU a of ``p2l`` [L, R] moved to GPU target[l, a] ([L, P]),
    then aligned to ``previous`` [L, R] (:func:`align_slots`)."""
    L, R = p2l.shape
    P = target.shape[1]
    S = R // P
    placed = torch.empty_like(p2l).view(L, P, S)
    placed.scatter_(1, target.unsqueeze(2).expand(L, P, S), p2l.view(L, P, S))
    return align_slots(placed.view(L * P, S), previous.reshape(L * P, S)).view(L, R)


def relabel(plan: Plan, previous: Plan, num_gpus: int, num_nodes: int = 1,
            copy_cost: torch.Tensor | None = None) -> Plan:
    """``plan`` renamed to keep the most replicas of ``previous`` in place; loads unchanged.

    plan, previous: plans of the same layers, experts and slots. num_nodes: 1 lets GPUs move
    anywhere (global plans); N keeps every GPU inside its node and renames whole nodes
    (hierarchical plans keep their groups together). copy_cost: [L, P, E] what a copy of
    expert e onto GPU g costs (0 where g held e): the renaming minimises the copies' total
    cost instead of their number (planning for transfer time).
    """
    if not isinstance(plan, Plan) or not isinstance(previous, Plan):
        raise OptionError("previous", "relabelling needs two solvers.Plan objects")
    if tuple(previous.phy2log.shape) != tuple(plan.phy2log.shape) or previous.num_experts != plan.num_experts:
        raise OptionError("previous", f"has shape {tuple(previous.phy2log.shape)} with {previous.num_experts} "
                          f"experts, the plan {tuple(plan.phy2log.shape)} with {plan.num_experts}")
    if plan.num_replicas % num_gpus or num_gpus % num_nodes:
        raise OptionError("num_gpus", f"{plan.num_replicas} slots, {num_gpus} GPUs and {num_nodes} nodes "
                          "do not divide evenly")
    old = previous.phy2log.to(plan.device)
    return Plan.from_phy2log(relabel_phy2log(plan.phy2log, old, plan.num_experts, num_gpus, num_nodes, copy_cost),
                             plan.num_experts)


def copy_costs(previous: torch.Tensor, num_experts: int, num_gpus: int, num_nodes: int, network) -> torch.Tensor:
    """[L, P, E] float64: what a copy of expert e onto GPU g costs in units of an intra-node
    copy: 0 where g held e in ``previous`` ([L, R] phy2log), 1 where another GPU of g's node
    held it, else the inter-node (or host, when faster) copy's time over the intra-node one."""
    old = gpu_presence(previous, num_experts, num_gpus)                                # [L, P, E]
    L, P, E = old.shape
    on_node = old.view(L, num_nodes, P // num_nodes, E).any(2).repeat_interleave(P // num_nodes, dim=1)
    far = network.intra_node_bw / network.inter_node_bw
    if network.host_bw is not None:
        far = min(far, network.intra_node_bw / network.host_bw)
    one = torch.ones((), dtype=torch.float64, device=old.device)
    return torch.where(old, 0 * one, torch.where(on_node, one, far * one))


# Spreading the receivers -----------------------------------------------------------------------
# Spread a plan's copies over the receiving GPUs of each node, across layers.
#
# A transfer schedule lasts at least as long as its busiest GPU receives
# (:mod:`solvers.transfers`). Relabelling (above) renames the GPUs of each layer on its own, for the cheapest
# copies of that layer; when whole groups change node (hierarchical plans whose node loads
# drifted), every such layer sends its arriving replicas to the same GPU positions, and
# those GPUs pile up the inter-node copies of all layers. Renaming the GPUs of a node within
# a layer leaves every load of that layer (and every node's experts) unchanged, so it keeps
# the plan's balance; it only changes which physical GPU receives which copies (and may turn
# replicas that stayed into intra-node copies). This pass renames, layer by layer, the GPUs
# of each node to minimise the sum over GPUs of the squared receive time of all layers (an
# assignment problem per (layer, node); the square spreads the load, as a min-max would).

# Passes over the layers (each layer re-placed against the others' receive times).
SWEEPS = 2


def spread_receivers(p2l: torch.Tensor, previous: torch.Tensor, copy_cost: torch.Tensor, num_experts: int,
                     num_gpus: int, num_nodes: int) -> torch.Tensor:
    """phy2log [L, R]: ``p2l`` with the GPUs of each node renamed per layer to spread the
    receive time over GPUs. previous: [L, R] the plan in force; copy_cost: [L, P, E] what a
    copy of e onto GPU b costs (0 where b held e; :func:`copy_costs`)."""
    from scipy.optimize import linear_sum_assignment   # not at `import solvers` (above)

    L = p2l.shape[0]
    P, Q = num_gpus, num_gpus // num_nodes
    # cost[l, a, b]: what new GPU a's copies cost when a's replicas sit on GPU b
    cost = -copy_savings(p2l.cpu(), copy_cost.cpu(), num_experts, P).numpy()           # [L, P, P]
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
    return _renamed(p2l.cpu(), torch.as_tensor(perm, dtype=torch.int64), previous.cpu()).to(p2l.device)
