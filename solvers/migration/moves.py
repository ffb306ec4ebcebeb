"""Moves per layer, counted as the shared scorer counts them (used to choose between plans)."""
from __future__ import annotations

import torch


def _pair_keys(phy2log: torch.Tensor, num_experts: int, num_gpus: int,
               slot_gpu: torch.Tensor | None) -> torch.Tensor:
    """[L, R] int64 sorted keys gpu x E + expert of every slot (a GPU's pair once per replica)."""
    L, R = phy2log.shape
    gpu = (torch.arange(R, device=phy2log.device) // (R // num_gpus) if slot_gpu is None
           else slot_gpu.to(phy2log.device))
    return (gpu * num_experts + phy2log).sort(1).values


def moves_per_layer(plan_p2l: torch.Tensor, previous_p2l: torch.Tensor, num_experts: int,
                    num_gpus: int, slot_gpu: torch.Tensor | None = None) -> torch.Tensor:
    """[L] int64 (GPU, expert) pairs ``plan_p2l`` [L, R] holds and ``previous_p2l`` [L, R] did not.
    slot_gpu: [R] the GPU of every slot of both plans on a cluster with uneven slots or failed
    GPUs (None: R/P consecutive slots each).

    The pairs are compared as sorted keys per layer (O(R log R)), not as [L, P, E] presence
    tables: at 64 x 512 experts x 128 GPUs a table is 4 M cells, which a migration's time
    limit cannot afford several times over."""
    new = _pair_keys(plan_p2l, num_experts, num_gpus, slot_gpu)                        # [L, R]
    old = _pair_keys(previous_p2l.to(plan_p2l.device), num_experts, num_gpus, slot_gpu)
    distinct = torch.ones_like(new, dtype=torch.bool)
    distinct[:, 1:] = new[:, 1:] != new[:, :-1]                                      # each pair once
    at = torch.searchsorted(old, new).clamp_max(old.shape[1] - 1)
    held = old.gather(1, at) == new                                                  # the plan in force had it
    return (distinct & ~held).sum(1)
