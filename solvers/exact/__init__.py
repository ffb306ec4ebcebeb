"""Exact models (OR-Tools CP-SAT, PuLP with HiGHS and CBC) with certified lower bounds.

Importing this package registers the solvers "cpsat", "highs" and "cbc"; the backends
themselves load lazily (``import solvers`` never imports ortools, pulp or highspy)::

    from solvers import Problem, solve
    p = Problem([[600, 560, 120, 120, 20, 10, 10, 10]], num_replicas=16, num_gpus=8)
    r = solve(p, "cpsat", model="joint", time_limit=10)
    r.termination, r.status, r.objective, r.gap_max   # optimal, proven_optimal, 196.67, 0

Models and options: :mod:`solvers.exact.api`; formulation: :mod:`solvers.exact.model`;
backend probes: :mod:`solvers.backends`.
"""
from . import api  # noqa: F401  (registers the solvers)
