"""Replica counts for two slots per GPU, searched with the packing that is optimal for them.

With S = 2 every GPU holds two replicas, and for a fixed multiset of replica loads the
pairing that minimises the largest pair sum is the largest with the smallest, the second
largest with the second smallest, and so on (exchange argument). So a count vector has an
exact value without any packing search: sort the R replica loads ``a_1 >= ... >= a_R`` and
take ``max_i a_i + a_{R+1-i}``. :func:`pair_counts` improves the greedy counts (optimal for
the max replica load, not for this value) by moving one replica at a time: to one of the
two experts of the bottleneck pair from any expert with a replica to spare, the best move per
round, every candidate valued exactly. The packing that follows (balanced differencing,
which for two items per pack pairs largest with smallest) realises the value.
"""
from __future__ import annotations

import torch

from ..clock import clock


def sorted_items(weight: torch.Tensor, counts: torch.Tensor, num_slots: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Replica loads in descending order and their experts: weight, counts [N, E] -> ([N, R], [N, R])."""
    N = weight.shape[0]
    v, order = (weight / counts).sort(1, descending=True)
    ends = counts.gather(1, order).cumsum(1)
    idx = torch.searchsorted(ends, torch.arange(num_slots, device=weight.device).expand(N, num_slots).contiguous(),
                             right=True)
    return v.gather(1, idx), order.gather(1, idx)


def pair_value(items: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Largest pair sum of the largest-with-smallest pairing: items [N, R] descending ->
    (value [N], index i [N] of the bottleneck pair (i, R-1-i))."""
    R = items.shape[1]
    return (items[:, :R // 2] + items.flip(1)[:, :R // 2]).max(1)


def pair_counts(weight: torch.Tensor, counts: torch.Tensor, *, cap: int | None = None, rounds: int = 64,
                deadline: float | None = None) -> tuple[torch.Tensor, int]:
    """Counts with a lower pairing value (never higher): weight [X, E] float64, counts [X, E]
    int64 (rows sum to R, R even). cap: at most this many replicas per expert (the start
    respects it). Each round
    values the 2E moves of every row still improving (one batched sort) and applies the best;
    the deadline is checked before every round. Returns (counts, rounds run)."""
    X, E = weight.shape
    R = int(counts[0].sum())
    dev = weight.device
    w = weight.to(torch.float64)
    c = counts.clone()
    active = torch.ones(X, dtype=torch.bool, device=dev)
    ran = 0
    donors = torch.arange(E, device=dev).repeat(2)                                   # [2E]
    for _ in range(rounds):
        if deadline is not None and clock() >= deadline:
            break
        rows = active.nonzero().squeeze(1)
        if rows.numel() == 0:
            break
        ran += 1
        n, cr, wr = rows.numel(), c[rows], w[rows]
        items, experts = sorted_items(wr, cr, R)
        value, i = pair_value(items)
        hi = experts.gather(1, i.unsqueeze(1))
        lo = experts.gather(1, (R - 1 - i).unsqueeze(1))
        receivers = torch.cat([hi.expand(n, E), lo.expand(n, E)], 1)                 # [n, 2E]
        cand = cr.unsqueeze(1).repeat(1, 2 * E, 1)                                   # [n, 2E, E]
        one = torch.ones(n, 2 * E, 1, dtype=c.dtype, device=dev)
        cand.scatter_add_(2, receivers.unsqueeze(2), one)
        cand.scatter_add_(2, donors.expand(n, 2 * E).unsqueeze(2), -one)
        ok = (cand.min(2).values >= 1) & (receivers != donors)
        if cap is not None:
            ok &= cand.max(2).values <= cap
        flat = cand.view(n * 2 * E, E)
        v2, _ = pair_value(sorted_items(wr.repeat_interleave(2 * E, 0), flat, R)[0])
        v2 = v2.view(n, 2 * E).masked_fill(~ok, float("inf"))
        best, j = v2.min(1)
        better = best < value * (1 - 1e-12)
        c[rows[better]] = cand[better, j[better]]
        active[rows[~better]] = False
    return c, ran


__all__ = ["pair_counts", "pair_value", "sorted_items"]
