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


# Donors valued together in a round (see pair_counts): on 16 x 64 / 288 slots / 144 GPUs
# (lognormal, seeds 0-2) chunks of 8 end at 1.0197 / 1.0178 / 1.0167 in 0.05 s of CPU,
# every donor at once (one chunk of 64) at 1.0217 / 1.0181 / 1.0179 in 0.19 s: the moves
# tie often and the tie order decides, not the width.
PAIR_DONORS = 8


def counts_pair_value(weight: torch.Tensor, counts: torch.Tensor,
                      num_slots: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The largest pair sum of the largest-with-smallest pairing of the replicas of
    ``counts``, without listing the R replicas:
    weight, counts [N, E] -> (value [N], hi [N], lo [N] the experts of the bottleneck pair).

    Sorted by load, expert k's replicas fill positions [start_k, end_k) (0-based). In the
    pairs (p, R-1-p), p < R/2, a run's largest partner is the one of its last position in
    the upper half, p = min(end_k, R/2) - 1, so the value is the max over the runs that
    start in the upper half of v_k + the load of the run holding R-1-p: E lookups in E
    run ends instead of R replicas expanded and scanned."""
    N, E = weight.shape
    R = num_slots
    v, order = (weight / counts).sort(1, descending=True)                          # [N, E]
    ends = counts.gather(1, order).cumsum(1)                                       # [N, E]
    p = ends.clamp_max(R // 2) - 1                                                 # [N, E]
    run = torch.searchsorted(ends, (R - 1 - p).contiguous(), right=True).clamp_max(E - 1)
    sums = (v + v.gather(1, run)).masked_fill(ends - counts.gather(1, order) > R // 2 - 1, -float("inf"))
    value, k = sums.max(1)
    return value, order.gather(1, k.unsqueeze(1)).squeeze(1), order.gather(1, run.gather(1, k.unsqueeze(1))).squeeze(1)


def _best_moves(wr: torch.Tensor, cr: torch.Tensor, hi: torch.Tensor, lo: torch.Tensor, donors: torch.Tensor,
                cap: int | None, R: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The best of the moves of one replica from each of ``donors`` [n, D] to hi or lo [n]:
    (value [n], counts [n, E]) of the best (value +inf where none is allowed)."""
    n, E = cr.shape
    D = donors.shape[1]
    give = donors.repeat(1, 2)                                                       # [n, 2D]
    receivers = torch.cat([hi.unsqueeze(1).expand(n, D), lo.unsqueeze(1).expand(n, D)], 1)
    cand = cr.unsqueeze(1).repeat(1, 2 * D, 1)                                       # [n, 2D, E]
    one = torch.ones(n, 2 * D, 1, dtype=cr.dtype, device=cr.device)
    cand.scatter_add_(2, receivers.unsqueeze(2), one)
    cand.scatter_add_(2, give.unsqueeze(2), -one)
    ok = (cand.min(2).values >= 1) & (receivers != give)
    if cap is not None:
        ok &= cand.max(2).values <= cap
    flat = cand.view(n * 2 * D, E).clamp_min(1)                                      # invalid ones masked below
    v2 = counts_pair_value(wr.repeat_interleave(2 * D, 0), flat, R)[0].view(n, 2 * D).masked_fill(~ok, float("inf"))
    best, j = v2.min(1)                  # ties: the donor first in the chunk (the cheapest)
    return best, cand[torch.arange(n, device=cr.device), j]


def pair_counts(weight: torch.Tensor, counts: torch.Tensor, *, cap: int | None = None, rounds: int = 64,
                deadline: float | None = None, chunk: int = PAIR_DONORS) -> tuple[torch.Tensor, int]:
    """Counts with a lower pairing value (never higher): weight [X, E] float64, counts [X, E]
    int64 (rows sum to R, R even). cap: at most this many replicas per expert (the start
    respects it). Each round moves one replica to an expert of the bottleneck pair from
    the donor that lowers the value most among the first ``chunk`` donors (those whose
    replicas grow least by giving one up) that lower it at all: the next chunk is valued
    only where a chunk had none, so a round ends with no improving move from any expert
    (the same local optimum test as valuing all 2E moves, at a fraction of the work).
    The deadline is checked before every round. Returns (counts, rounds run)."""
    X, E = weight.shape
    R = int(counts[0].sum())
    dev = weight.device
    w = weight.to(torch.float64)
    c = counts.clone()
    active = torch.ones(X, dtype=torch.bool, device=dev)
    ran = 0
    for _ in range(rounds):
        if deadline is not None and clock() >= deadline:
            break
        rows = active.nonzero().squeeze(1)
        if rows.numel() == 0:
            break
        ran += 1
        cr, wr = c[rows], w[rows]
        value, hi, lo = counts_pair_value(wr, cr, R)
        # donors, cheapest first: the smallest rise of their replicas' load (+inf: one replica)
        rise = (wr / (cr - 1).clamp_min(1) - wr / cr).masked_fill(cr < 2, float("inf"))
        order = rise.argsort(1)                                                      # [n, E]
        pending = torch.arange(rows.numel(), device=dev)                             # rows without a move yet
        for k in range(0, E, chunk):
            best, moved = _best_moves(wr[pending], cr[pending], hi[pending], lo[pending],
                                      order[pending, k:k + chunk], cap, R)
            better = best < value[pending] * (1 - 1e-12)
            c[rows[pending[better]]] = moved[better]
            pending = pending[~better]
            if pending.numel() == 0:
                break
        active[rows[pending]] = False
    return c, ran


__all__ = ["counts_pair_value", "pair_counts"]
