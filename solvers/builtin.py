"""Importing this module registers every built-in solver (optional backends load lazily).

Front ends import it (the ``eplb`` commands, the app, the benchmark tasks, the package root's
:func:`solvers.solve`), so :func:`solvers.registry.solver_names` lists every solver there.
:mod:`solvers.entry` imports it too: the solvers never call ``solve()`` (they compose
through :func:`solvers.registry.run`), so the one front-end entry can register them all.
"""
from __future__ import annotations

from . import exact, heuristics  # noqa: F401  isort: skip
from . import certify, dispatch, dynamics, elastic, replan  # noqa: F401  isort: skip
from .dynamics import backtest, risk_solver, robust, scenario  # noqa: F401  isort: skip
from .routing import placement  # noqa: F401  isort: skip

__all__: list[str] = []
