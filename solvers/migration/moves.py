"""Moves per layer, counted as the shared scorer counts them (used to choose between plans)."""
from __future__ import annotations

import torch

from ..scoring import gpu_presence


def moves_per_layer(plan_p2l: torch.Tensor, previous_p2l: torch.Tensor, num_experts: int,
                    num_gpus: int, slot_gpu: torch.Tensor | None = None) -> torch.Tensor:
    """[L] int64 (GPU, expert) pairs ``plan_p2l`` [L, R] holds and ``previous_p2l`` [L, R] did not.
    slot_gpu: [R] the GPU of every slot of both plans on a cluster with uneven slots or failed
    GPUs (None: R/P consecutive slots each)."""
    new = gpu_presence(plan_p2l, num_experts, num_gpus, slot_gpu)
    old = gpu_presence(previous_p2l.to(plan_p2l.device), num_experts, num_gpus, slot_gpu)
    return (new & ~old).flatten(1).sum(1)
