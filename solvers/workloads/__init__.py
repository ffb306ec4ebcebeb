"""Workloads: synthetic load generators, importers of engines' dumps, plan exporters."""
