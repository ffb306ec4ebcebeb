"""Shared pieces of the heuristics: replica counts, replica items, slot layouts, keep-best.

A batch of independent packing rows ("rows": layers, or (layer, node) pairs in the
hierarchical policy) is the unit of every routine here. A packing is held as a *slot
layout*: ``e_slots: [X, R]`` (local expert of every slot) and ``w_slots: [X, R]`` (the
load of that replica, float64), slot ``q`` on pack ``q // S``. Swapping two slots'
contents is a move of the local search; ``e_slots`` is directly a ``phy2log`` row.
"""
from __future__ import annotations

import torch

from ..bounds import optimal_counts
from ..errors import OptionError


def replicate_counts(weight: torch.Tensor, num_slots: int, cap: int | None = None) -> torch.Tensor:
    """Greedy replica counts (each extra slot to the highest load per replica, first on ties).

    weight: [X, E] loads. cap: at most this many replicas per expert (the no-duplicates
    variant needs ``c_e <= packs``). Returns logcnt: [X, E] int64 summing to ``num_slots``.
    Optimal for the max load per replica (DeepSeek's step 2), capped or not.
    """
    X, E = weight.shape
    if cap is not None and cap * E < num_slots:
        raise OptionError("colocation", f"forbidden: {num_slots} slots cannot hold {E} experts with at most "
                          f"{cap} replicas each")
    return optimal_counts(weight, num_slots, max_count=cap)


def expand_items(weight: torch.Tensor, logcnt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Replica items of a count vector, expert-major.

    weight: [X, E], logcnt: [X, E] (rows sum to R). Returns item_e: [X, R] expert of each
    replica, item_w: [X, R] float64 load of each replica (w_e / c_e).
    """
    X, E = weight.shape
    R = int(logcnt[0].sum()) if X else 0
    ends = torch.cumsum(logcnt, 1)                                          # [X, E]
    k = torch.arange(R, dtype=torch.int64, device=weight.device).expand(X, R).contiguous()
    item_e = torch.searchsorted(ends, k, right=True)
    per = weight.to(torch.float64) / logcnt.to(torch.float64)
    return item_e, per.gather(1, item_e)


def slots_from_packs(pack: torch.Tensor, *items: torch.Tensor) -> list[torch.Tensor]:
    """Reorder per-item tensors ``[X, n]`` into slot layout by their ``pack: [X, n]`` (stable)."""
    order = torch.sort(pack, dim=1, stable=True).indices
    return [t.gather(1, order) for t in items]


def pack_loads(w_slots: torch.Tensor, num_packs: int) -> torch.Tensor:
    """w_slots: [X, R] -> loads per pack [X, P]."""
    X, R = w_slots.shape
    return w_slots.view(X, num_packs, R // num_packs).sum(-1)


def presence_counts(e_slots: torch.Tensor, num_experts: int, num_packs: int) -> torch.Tensor:
    """[X, P, E] int64: replicas of each expert on each pack."""
    X, R = e_slots.shape
    S = R // num_packs
    cnt = torch.zeros(X, num_packs * num_experts, dtype=torch.int64, device=e_slots.device)
    gpu = torch.arange(R, device=e_slots.device) // S
    cnt.scatter_add_(1, gpu * num_experts + e_slots, torch.ones_like(e_slots))
    return cnt.view(X, num_packs, num_experts)


def pick_best(objs: torch.Tensor, *cands: torch.Tensor) -> list[torch.Tensor]:
    """Per row, the candidate with the smallest objective (first on ties).

    objs: [C, X]; each cand: [C, X, ...]. Returns each cand reduced to [X, ...] and the
    chosen index [X] last.
    """
    best = objs.argmin(0)                                                   # [X]
    out = []
    for c in cands:
        idx = best.view(1, -1, *([1] * (c.dim() - 2))).expand(1, *c.shape[1:])
        out.append(c.gather(0, idx).squeeze(0))
    out.append(best)
    return out
