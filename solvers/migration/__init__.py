"""The exact models of the re-plans (CP-SAT per layer), used by :mod:`solvers.replan` and,
for proof, by the elastic benchmarks. The re-plans themselves live in :mod:`solvers.replan`
(near a plan in force), :mod:`solvers.elastic` (after GPU failures) and the transfer
schedules in :mod:`solvers.transfers`.
"""
