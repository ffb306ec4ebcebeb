"""One entry point for both transfer models: one-peer rounds or bandwidth sharing.

``rounds`` (:mod:`.transfers`): vLLM's rule, every GPU sends to at most one and receives
from at most one peer at a time. ``shared`` (:mod:`.sharing`): concurrent copies share each
GPU's links per direction and class; the makespan is the largest port load.
"""
from __future__ import annotations

from typing import Any

from ..errors import OptionError
from ..network import DEFAULT_NETWORK, Network
from .sharing import schedule_shared
from .transfers import TransferSchedule, _check_bytes, needed_copies, schedule_copies

TRANSFER_MODELS = ("rounds", "shared")


def check_model(model: Any) -> str:
    if model not in TRANSFER_MODELS:
        raise OptionError("transfer_model", f"must be one of {', '.join(TRANSFER_MODELS)}, got {model!r}")
    return model


def schedule_with(previous: Any, plan: Any, num_gpus: int, gpus_per_node: int, expert_bytes: int,
                  network: Network | None = None, num_experts: int | None = None,
                  model: str = "rounds", slot_gpu: Any = None) -> TransferSchedule:
    """The schedule of the copies from ``previous`` to ``plan`` (Plans or phy2log [L, R]) under
    ``model`` (module docstring). slot_gpu: [R] the GPU of every slot on a cluster with uneven
    slots or failed GPUs (``Cluster.slot_gpus()``; None: identical slot counts)."""
    model = check_model(model)
    network = network or DEFAULT_NETWORK
    expert_bytes = _check_bytes(expert_bytes)
    copies = needed_copies(previous, plan, num_gpus, gpus_per_node, num_experts, slot_gpu)
    if model == "shared":
        return schedule_shared(copies, network, expert_bytes)
    return schedule_copies(copies, network, expert_bytes)
