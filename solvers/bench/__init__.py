"""The benchmark harness: suites of instances x solvers, result stores, gap analysis, reports and
the solver recommender.

- ``eplb bench run --suite ci|full|tiny --out DIR`` (or ``python -m solvers.bench.run``; from a
  checkout also ``python -m benchmarks.run``): run a suite (run.py, suites.py);
- from a checkout, ``python -m benchmarks.report DIR``: re-render a stored run's summary.md and profile figure;
- ``eplb recommend ...``: which solver for a cluster shape, from the shipped results in
  ``solvers/bench/results`` (recommend.py).
"""
