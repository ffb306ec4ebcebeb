"""Sets of GPUs as int64 bit masks, batched in torch.

A set of P GPUs is ``[..., W]`` int64 with W = ceil(P / 64) words; GPU g is bit ``g % 64``
of word ``g // 64``. Breadth-first searches over the GPU graph then cost a few small
kernels per step instead of dense ``[..., P, P]`` boolean products.
"""
from __future__ import annotations

import torch

BITS = 64


def words(num_gpus: int) -> int:
    return (num_gpus + BITS - 1) // BITS


def pack(members: torch.Tensor) -> torch.Tensor:
    """members: [..., P] bool -> [..., W] int64 masks. Bits are disjoint, so a sum is an OR."""
    P = members.shape[-1]
    W = words(P)
    padded = torch.nn.functional.pad(members.to(torch.int64), (0, W * BITS - P))
    shifts = torch.arange(BITS, device=members.device, dtype=torch.int64)
    return (padded.view(*members.shape[:-1], W, BITS) << shifts).sum(-1)


def unpack(masks: torch.Tensor, num_gpus: int) -> torch.Tensor:
    """masks: [..., W] int64 -> [..., P] bool."""
    shifts = torch.arange(BITS, device=masks.device, dtype=torch.int64)
    bits = (masks.unsqueeze(-1) >> shifts) & 1
    return bits.flatten(-2)[..., :num_gpus].bool()


def or_reduce(masks: torch.Tensor, dim: int) -> torch.Tensor:
    """Bitwise OR of ``masks`` along ``dim`` (a tree of halvings; torch has no OR reduction)."""
    dim = dim % masks.dim()
    while masks.shape[dim] > 1:
        n = masks.shape[dim]
        if n % 2:
            pad = torch.zeros_like(masks.narrow(dim, 0, 1))
            masks = torch.cat([masks, pad], dim)
            n += 1
        masks = masks.narrow(dim, 0, n // 2) | masks.narrow(dim, n // 2, n // 2)
    return masks.squeeze(dim)


def intersects(rows: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """rows: [..., P, W], target: [..., W] -> [..., P] bool: row g shares a member with target."""
    hit = rows & target.unsqueeze(-2)
    return hit.ne(0).any(-1) if hit.shape[-1] > 1 else hit.squeeze(-1).ne(0)
