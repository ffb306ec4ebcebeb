"""Weight-transfer schedules over the network: the copies a re-plan needs (one per (layer,
GPU, expert) the new plan holds and the plan in force did not), their sources, and how long
they take, under one-peer rounds (vLLM's rule, :mod:`.schedule`) or bandwidth sharing
(:mod:`.sharing`). One entry: :func:`schedule_transfers`; :func:`exact_schedule` proves the
rounds model's optimum on small instances, :func:`write_schedule` writes a schedule file.
"""
from __future__ import annotations

from typing import Any

# How a schedule is timed, one-peer rounds or bandwidth sharing: named once, in the replay's
# torch-free settings (the CLI builds its flags before it imports torch).
from ..dynamics.settings import TRANSFER_MODELS
from ..errors import OptionError
from ..network import DEFAULT_NETWORK, Network
from .schedule import (NoSourceError, TransferSchedule, _check_bytes, exact_schedule, needed_copies, schedule_copies,
                       write_schedule)
from .sharing import schedule_shared


def schedule_transfers(previous: Any, plan: Any, num_gpus: int, gpus_per_node: int, expert_bytes: int,
                       network: Network | None = None, num_experts: int | None = None, model: str = "rounds",
                       slot_gpu: Any = None, previous_slot_gpu: Any = None,
                       skip_unsourced: bool = False) -> TransferSchedule:
    """The schedule of the copies from ``previous`` to ``plan`` (Plans or phy2log [L, R]) on
    ``num_gpus`` GPUs, ``gpus_per_node`` per node, under ``model``: ``rounds`` (:mod:`.schedule`:
    one peer per GPU and direction at a time, vLLM's rule) or ``shared``
    (:mod:`.sharing`: concurrent copies share each GPU's links). slot_gpu: [R] the GPU of
    every slot of ``plan`` on a cluster with uneven slots or failed GPUs
    (``Cluster.slot_gpus()``; None: R/P slots per GPU); previous_slot_gpu: [R'] the plan in
    force's, when it was made for other slots (before GPUs failed or came back, or other slot
    counts; default slot_gpu). The copies are the shared scorer's moves for the pair; a GPU
    with no slot in ``plan`` (failed) is no source. Raises :class:`NoSourceError` (param
    ``host_bw``) when a copy's only holders failed and the network has no host memory;
    ``skip_unsourced``: leave those copies out instead (a planner timing the network's part of
    a re-plan: every plan must re-create the lost experts from outside the network), counted
    in ``info["copies_unsourced"]``."""
    if model not in TRANSFER_MODELS:
        raise OptionError("transfer_model", f"must be one of {', '.join(TRANSFER_MODELS)}, got {model!r}")
    network = network or DEFAULT_NETWORK
    expert_bytes = _check_bytes(expert_bytes)
    copies = needed_copies(previous, plan, num_gpus, gpus_per_node, num_experts, slot_gpu, previous_slot_gpu)
    unsourced = 0
    if skip_unsourced and network.host_bw is None:
        sourced = copies.candidates.any(1)                                          # [M]
        unsourced = int((~sourced).sum())
        copies = copies.take(sourced)
    sched = (schedule_shared if model == "shared" else schedule_copies)(copies, network, expert_bytes)
    if unsourced:
        sched.info["copies_unsourced"] = unsourced
    return sched


__all__ = ["schedule_transfers", "TransferSchedule", "NoSourceError", "TRANSFER_MODELS", "exact_schedule",
           "write_schedule"]
