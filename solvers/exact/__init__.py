"""Exact models (OR-Tools CP-SAT, PuLP with HiGHS and CBC) with certified lower bounds."""
