"""Weight-transfer schedules over the network: the copies a re-plan needs (one per (layer,
GPU, expert) the new plan holds and the plan in force did not), their sources, and how long
they take, under one-peer rounds (vLLM's rule, :mod:`.schedule`) or bandwidth sharing
(:mod:`.sharing`). One entry: :func:`schedule_transfers`; :func:`exact_schedule` proves the
rounds model's optimum on small instances, :func:`write_schedule` writes a schedule file.
"""
from .schedule import TRANSFER_MODELS, TransferSchedule, exact_schedule, schedule_transfers, write_schedule

__all__ = ["schedule_transfers", "TransferSchedule", "TRANSFER_MODELS", "exact_schedule", "write_schedule"]
