"""Migration-aware plans: keep replicas where they are when loads change.

- :func:`relabel`: rename a fresh plan's nodes, GPUs and slots to keep the most replicas
  in place (an assignment problem per layer; loads unchanged);
- :func:`plan_with_migration`: the fewest moves such that every layer's max GPU load is at
  most ``(1 + slack)`` x that of a fresh plan (batched repair heuristic, or an exact CP-SAT
  model per layer); registered as the solver ``migration``;
- :func:`pareto`: moves against max load over a sweep of slack values;
- :func:`replan_after_failure`: elastic re-planning when GPUs fail (fewest moves, every
  expert alive, each layer within ``(1 + slack)`` x a fresh plan on the survivors in
  time); registered as the solver ``elastic``.
- :func:`schedule_transfers`: the weight copies a re-plan needs, their sources and rounds
  (each GPU sends one and receives one copy per round), the makespan in seconds and its
  lower bound (:mod:`.transfers`).

Moves are always counted by the shared scorer: (layer, GPU, expert) pairs the GPU did not
hold before, one weight transfer each.
"""
from .api import METHODS, migrate, plan_with_migration
from .elastic import replan_after_failure
from .moves import moves_per_layer
from .pareto import pareto, pareto_figure, pareto_table
from .relabel import relabel
from .transfers import TransferSchedule, schedule_transfers

__all__ = ["replan_after_failure", "relabel", "plan_with_migration", "migrate", "moves_per_layer", "METHODS", "pareto",
           "pareto_table", "pareto_figure", "schedule_transfers", "TransferSchedule"]
