"""Moves per layer, counted as the shared scorer counts them (used to choose between plans)."""
from __future__ import annotations

import torch

from ..scoring import new_pairs


def moves_per_layer(plan_p2l: torch.Tensor, previous_p2l: torch.Tensor, num_experts: int,
                    num_gpus: int, slot_gpu: torch.Tensor | None = None) -> torch.Tensor:
    """[L] int64 (GPU, expert) pairs ``plan_p2l`` [L, R] holds and ``previous_p2l`` [L, R] did not.
    slot_gpu: [R] the GPU of every slot of both plans on a cluster with uneven slots or failed
    GPUs (None: R/P consecutive slots each). The scorer's count (:func:`solvers.scoring.new_pairs`)."""
    return new_pairs(plan_p2l, previous_p2l, num_experts, num_gpus, slot_gpu, slot_gpu)
