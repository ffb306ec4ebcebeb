"""Benchmark scripts and the benchmark harness (python -m benchmarks.run)."""
