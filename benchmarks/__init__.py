"""Measurement scripts, run from a checkout (not installed with the package):
``python -m benchmarks.speed``, ``python -m benchmarks.heuristic_targets``,
``python -m benchmarks.exact_targets``, ... The harness they share lives in
:mod:`solvers.bench`; ``python -m benchmarks.run`` is a shortcut to its runner.
"""
