"""Benchmark scripts and the benchmark harness.

- ``python -m benchmarks.run --suite ci|full|tiny --out DIR``: run a suite (see run.py, suites.py);
- ``python -m benchmarks.report DIR``: re-render a stored run's summary.md and profile figure;
- ``eplb recommend ...``: which solver for a cluster shape, from ``benchmarks/results`` (recommend.py).
"""
