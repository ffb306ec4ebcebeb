"""Importing this module registers every built-in solver (optional backends load lazily).

Front ends import it (the ``eplb`` commands, the app, the benchmark tasks, the package root's
:func:`solvers.solve`), so :func:`solvers.registry.solver_names` lists every solver there.
It is not imported by :mod:`solvers.solve` itself: the solver packages reach beyond the core
modules (tests/test_docs_and_layers.py), and several still call ``solve()``.
"""
from __future__ import annotations

from . import exact, heuristics  # noqa: F401  isort: skip
from . import certify, dispatch, dynamics, migration  # noqa: F401  isort: skip

__all__: list[str] = []
