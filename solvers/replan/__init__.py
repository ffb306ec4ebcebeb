"""Re-planning near a plan in force: the fewest moves (or the shortest transfer schedule)
such that every layer's max GPU time is within ``(1 + slack)`` x a fresh plan's, on every
cluster kind. One entry, :func:`plan_with_migration`, also registered as the solver
``migration`` (:mod:`.solver`); :func:`relabel` renames a fresh plan's GPUs to keep the most
replicas in place.

Moves are always counted by the shared scorer: (layer, GPU, expert) pairs the GPU did not
hold before, one weight transfer each.
"""
from .relabel import relabel
from .solver import plan_with_migration

__all__ = ["plan_with_migration", "relabel"]
