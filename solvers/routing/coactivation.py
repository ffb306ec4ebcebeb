"""Co-activation statistics of a routing trace: which experts the same tokens use together.

``coactivation(trace)[l, e, f]`` counts the tokens that chose both e and f in layer l
(e != f; the diagonal is 0). Experts with a large count are worth one node: a token that
needs both then crosses one node boundary fewer. One bincount over all (token, pair)
entries, layers in chunks (memory: tokens x k x (k-1) pairs per layer).
"""
from __future__ import annotations

import torch

from .trace import RoutingTrace

# (layer, token, pair) entries per bincount: 2**25 int64 indices are 256 MB.
PAIR_CHUNK = 1 << 25


def coactivation(trace: RoutingTrace) -> torch.Tensor:
    """[L, E, E] float32 tokens that routed to both experts (symmetric, zero diagonal)."""
    L, T, k = trace.topk_ids.shape
    E = trace.num_experts
    out = torch.zeros(L, E * E, dtype=torch.float32)
    if k < 2:
        return out.view(L, E, E)
    ii, jj = torch.triu_indices(k, k, offset=1)                              # k(k-1)/2 pairs
    per_layer = T * ii.numel()
    layers = max(1, PAIR_CHUNK // max(per_layer, 1))
    tokens = T if per_layer <= PAIR_CHUNK else max(1, PAIR_CHUNK // ii.numel())
    for a in range(0, L, layers):
        b = min(L, a + layers)
        for t0 in range(0, T, tokens):
            ids = trace.topk_ids[a:b, t0:t0 + tokens].to(torch.int64)          # [Lc, Tc, k]
            e, f = ids[..., ii], ids[..., jj]                                # [Lc, Tc, pairs]
            lo, hi = torch.minimum(e, f), torch.maximum(e, f)
            rows = torch.arange(b - a, dtype=torch.int64).view(-1, 1, 1) * (E * E)
            key = (lo * E + hi + rows).view(-1)
            out[a:b] += torch.bincount(key, minlength=(b - a) * E * E).view(b - a, E * E).to(torch.float32)
    out = out.view(L, E, E)
    return out + out.transpose(1, 2)


def coactivation_lift(trace: RoutingTrace) -> float:
    """How strongly the same tokens use the same experts together: 1 when a token's experts
    are independent of each other, larger with co-activation structure (the more, the more
    a traffic-aware placement can keep a token's experts on few nodes).

    The mean over a token's expert pairs of the pair's lift, tokens(e, f) / (n_e n_f / T)
    (observed co-activation over what independent choices give), with the Poisson bias of
    the square taken out: ``sum (A^2 - A) / (n_e n_f / T) / sum A`` per layer, the mean over
    layers. With too few tokens a rare pair's lift is noise: read it on thousands of tokens.
    """
    A = coactivation(trace).to(torch.float64)                                         # [L, E, E]
    n = trace.loads().to(torch.float64)                                               # [L, E]
    expect = n.unsqueeze(2) * n.unsqueeze(1) / trace.num_tokens                       # [L, E, E]
    num = torch.where(expect > 0, (A * A - A) / expect.clamp_min(1e-300), 0.0).sum((1, 2))
    den = A.sum((1, 2))
    per_layer = torch.where(den > 0, num / den.clamp_min(1e-300), torch.ones_like(den))
    return float(per_layer.mean())
