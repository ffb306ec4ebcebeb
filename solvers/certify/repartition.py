"""Plan polishing for fixed replicas: exact re-split of two GPUs.

The busiest GPU g and any other GPU h hold 2S replicas together; choosing which S of
them go back to g is a small subset problem, solved exactly by enumerating every split
(C(2S-1, S-1) of them, replica 0 kept on g's side to skip mirror images) for every
partner h at once: one matrix product ``[H, 2S] x [2S, M]``. The best split over all
partners replaces the pair when it lowers g's load; repeat until the busiest GPU cannot
be improved. Counts never change, so colocation and the expert-to-node structure are
kept when partners are restricted to g's node.
"""
from __future__ import annotations

import itertools
import math
from functools import lru_cache

import torch

from ..clock import clock

# Enumerating splits beyond this many (S = 10 has 92378) costs more than it gains.
MAX_SPLITS = 100_000


@lru_cache(maxsize=16)
def split_masks(slots: int) -> torch.Tensor:
    """[M, 2S] float64 0/1: the replicas of a two-GPU pool that go to the first GPU
    (exactly S of 2S, replica 0 always among them)."""
    rows = [(0,) + rest for rest in itertools.combinations(range(1, 2 * slots), slots - 1)]
    mask = torch.zeros(len(rows), 2 * slots, dtype=torch.float64)
    for i, r in enumerate(rows):
        mask[i, list(r)] = 1.0
    return mask


def can_split(slots: int) -> bool:
    return math.comb(2 * slots - 1, slots - 1) <= MAX_SPLITS


def busiest_and_others(loads: torch.Tensor, group: torch.Tensor | None = None) -> tuple[torch.Tensor, int, torch.Tensor]:
    """(gpu [P] loads, the busiest GPU g, [H] the GPUs g may trade with: every other one, or
    with ``group`` ([P] node of each GPU) the others on g's node). loads: [P, S]."""
    gpu = loads.sum(1)
    g = int(gpu.argmax())
    others = torch.arange(loads.shape[0], device=loads.device)
    keep = others != g
    if group is not None:
        keep &= group == group[g]
    return gpu, g, others[keep]


def polish(loads: torch.Tensor, experts: torch.Tensor, *, deadline: float,
           group: torch.Tensor | None = None, max_rounds: int = 10_000) -> tuple[torch.Tensor, torch.Tensor]:
    """Lower the max GPU load of one layer by exact two-GPU re-splits.

    loads: [P, S] float64 replica loads per GPU; experts: [P, S] expert of each replica;
    group: [P] optional label (e.g. node): partners only within g's label.
    Returns the new (loads, experts), same shapes, the same multiset of replicas.
    """
    P, S = loads.shape
    if P < 2 or not can_split(S):
        return loads, experts
    loads, experts = loads.clone(), experts.clone()
    mask = split_masks(S).to(loads.device)                                # [M, 2S]
    for _ in range(max_rounds):
        if clock() >= deadline:
            break
        gpu, g, partners = busiest_and_others(loads, group)               # [P], g, [H]
        if partners.numel() == 0:
            break
        pool = torch.cat([loads[g].expand(partners.shape[0], S), loads[partners]], 1)   # [H, 2S]
        side = pool @ mask.T                                               # [H, M] load of g's side
        total = pool.sum(1, keepdim=True)
        worst = torch.maximum(side, total - side)                          # [H, M]
        flat = int(worst.argmin())
        h_i, m_i = divmod(flat, worst.shape[1])
        if float(worst.view(-1)[flat]) >= float(gpu[g]) * (1 - 1e-12):
            break
        h = int(partners[h_i])
        pool_e = torch.cat([experts[g], experts[h]])
        pool_w = pool[h_i]
        pick = mask[m_i].bool()
        loads[g], loads[h] = pool_w[pick], pool_w[~pick]
        experts[g], experts[h] = pool_e[pick], pool_e[~pick]
    return loads, experts
