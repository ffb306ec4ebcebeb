"""Shared pieces of the heuristics: the GPU view, replica counts, replica items, slot layouts.

A batch of independent packing rows ("rows": layers, or (layer, node) pairs in the
hierarchical policy) is the unit of every routine here. A packing is held as a *slot
layout*: ``e_slots: [X, R]`` (local expert of every slot) and ``w_slots: [X, R]`` (the
load of that replica), slots GPU by GPU in the order of a :class:`LiveGPUs` view. Swapping
two slots' contents is a move of the local search; ``e_slots`` is directly a ``phy2log`` row.
"""
from __future__ import annotations

import torch

from ..bounds import optimal_counts
from ..errors import OptionError


class LiveGPUs:
    """The live GPUs a packing fills, as tensors: speed [Q] float64, caps [Q] int64 (slots),
    gpu_of [R] (live index of every slot), grid [Q, S] (slot ids of every GPU, S the most
    slots, padded with 0) and valid [Q, S]. A GPU of speed s holding load x takes x / s.

    Identical GPUs (speed 1, S slots each: a homogeneous cluster, or the GPUs of one node
    under the hierarchical policy) are its special case: ``uniform`` (every GPU S slots)
    keeps the reshape path (slot q on GPU q // S, loads by ``view(X, Q, S)``) and ``unit``
    (every speed 1) skips the division, so their arithmetic is exactly the load balancing one."""

    def __init__(self, speed: list[float], caps: list[int], device):
        self.Q, self.R, self.S = len(caps), int(sum(caps)), max(caps)
        self.speed = torch.tensor(speed, dtype=torch.float64, device=device)
        self.caps = torch.tensor(caps, dtype=torch.int64, device=device)
        self.uniform, self.unit = len(set(caps)) == 1, all(s == 1.0 for s in speed)
        self.gpu_of = torch.repeat_interleave(torch.arange(self.Q, device=device), self.caps)
        starts = torch.cumsum(self.caps, 0) - self.caps
        j = torch.arange(self.S, device=device)
        self.valid = j.unsqueeze(0) < self.caps.unsqueeze(1)                              # [Q, S]
        self.grid = torch.where(self.valid, starts.unsqueeze(1) + j, torch.zeros_like(j))  # [Q, S]

    @classmethod
    def of(cls, cluster, device) -> "LiveGPUs":
        live = cluster.live_gpus
        return cls([cluster.gpu_speed[g] for g in live], [cluster.gpu_slots[g] for g in live], device)

    @classmethod
    def identical(cls, num_gpus: int, num_slots: int, device) -> "LiveGPUs":
        """``num_gpus`` GPUs of speed 1 sharing ``num_slots`` slots evenly."""
        return cls([1.0] * num_gpus, [num_slots // num_gpus] * num_gpus, device)

    def cells(self, t: torch.Tensor) -> torch.Tensor:
        """[X, Q, S] the slots of every GPU of a slot layout t: [X, R] (padding: slot 0)."""
        return t.view(t.shape[0], self.Q, self.S) if self.uniform else t[:, self.grid]

    def loads(self, w: torch.Tensor) -> torch.Tensor:
        """[X, Q] load of every live GPU from a slot layout w: [X, R]."""
        if self.uniform:
            return w.view(w.shape[0], self.Q, self.S).sum(-1)
        return torch.zeros(w.shape[0], self.Q, dtype=w.dtype, device=w.device).index_add_(1, self.gpu_of, w)

    def scale(self, x: torch.Tensor, gpu: torch.Tensor) -> torch.Tensor:
        """Loads x to times on GPUs ``gpu`` (broadcast with x); x itself at speed 1."""
        return x if self.unit else x / self.speed.to(x.dtype)[gpu]

    def times(self, w: torch.Tensor) -> torch.Tensor:
        """[X, Q] time of every live GPU from a slot layout w: [X, R]."""
        return self.scale(self.loads(w), torch.arange(self.Q, device=w.device))


def as_gpus(packs, num_slots: int, device) -> LiveGPUs:
    """A GPU view from a view or a number of identical packs sharing ``num_slots`` slots."""
    return packs if isinstance(packs, LiveGPUs) else LiveGPUs.identical(packs, num_slots, device)


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


def presence_counts(e_slots: torch.Tensor, num_experts: int, packs) -> torch.Tensor:
    """[X, Q, E] int64: replicas of each expert on each GPU (packs: a view or a number of
    identical packs)."""
    X, R = e_slots.shape
    g = as_gpus(packs, R, e_slots.device)
    cnt = torch.zeros(X, g.Q * num_experts, dtype=torch.int64, device=e_slots.device)
    cnt.scatter_add_(1, g.gpu_of * num_experts + e_slots, torch.ones_like(e_slots))
    return cnt.view(X, g.Q, num_experts)


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
