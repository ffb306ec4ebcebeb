"""Exact models (OR-Tools CP-SAT, PuLP with HiGHS and CBC) with certified lower bounds.

Importing this package registers the solvers "cpsat", "highs" and "cbc" (see
:mod:`solvers.exact.api` for their options); the backends themselves load lazily.
"""
from . import api  # noqa: F401  (registers the solvers)
from .brute import brute_force  # noqa: F401
