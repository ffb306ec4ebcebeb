"""Loads change: a rebalancing simulator, sweeps over rebalancing settings and time-robust planners.

- :func:`simulate`: replay a trace ``[T, L, E]`` under the plan in force, re-plan every N
  steps or past an imbalance threshold (optionally migration-aware), one :class:`Settings`;
  realised imbalance per step, moves and bytes per rebalance, totals;
- :func:`sweep`: many settings, the frontier of bytes moved against realised imbalance and
  a suggested setting for a byte budget;
- time-robust planners registered as solvers (``robust_sum``, ``robust_max``, ``ewma``,
  ``forecast``) that plan on a window's steps rather than its sum, ``risk_aware``, the
  out-of-sample planner, and ``scenario_cpsat`` (they register with :mod:`solvers.builtin`).

This package imports no torch until a name below is first used (PEP 562): the CLI builds
``eplb simulate``'s flags from :data:`SETTINGS` before it imports torch.
"""
from __future__ import annotations

import importlib
from typing import Any

from .settings import SETTINGS, Settings

_LAZY = {"simulate": "replay", "SimulationResult": "replay", "step_stats": "replay"}

__all__ = ["simulate", "Settings", "SETTINGS", "SimulationResult", "step_stats"]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
