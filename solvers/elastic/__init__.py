"""Re-planning after GPU failures: the fewest moves from the plan in force such that nothing
is left on a failed GPU, every expert keeps a live replica and every layer's max GPU time is
within ``(1 + slack)`` x a fresh plan's on the survivors. One entry,
:func:`replan_after_failure`, also registered as the solver ``elastic`` (:mod:`.solver`).
"""
from .solver import replan_after_failure

__all__ = ["replan_after_failure"]
