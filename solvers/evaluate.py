"""``solvers.score``: the core scorer (:mod:`solvers.scoring`, which scores loads) composed
with the two features a score may ask for, each from its own module: the scheduled split
(:func:`solvers.dispatch.schedule_tokens`) and the dispatch traffic on a per-token routing
trace (:func:`solvers.traffic.with_traffic`). The dependencies point down: this front end
imports the features, the core imports neither.
"""
from __future__ import annotations

from .cluster import Cluster
from .dispatch.schedule import schedule_tokens
from .plan import Plan
from .problem import Problem
from .routing.trace import RoutingTrace
from .scoring import Score, score as score_loads
from .traffic import with_traffic


def score(problem: Problem, plan: Plan, previous: Plan | None = None,
          expert_bytes: int | None = None, *, split: str = "even", tokens=None,
          previous_cluster: Cluster | None = None, routing: RoutingTrace | None = None,
          token_bytes: int | None = None) -> Score:
    """:func:`solvers.scoring.score` (same arguments; ``split="scheduled"`` schedules every
    micro-batch with :func:`solvers.dispatch.schedule_tokens`) and, with ``routing`` (a
    per-token routing trace of the same layers and experts), the dispatch traffic: a
    :class:`solvers.traffic.TrafficScore` whose summary holds the traffic's headline numbers.
    token_bytes: bytes per token and destination (None: the trace's model preset's
    ``token_bytes`` when it names one, else 1, i.e. token copies)."""
    result = score_loads(problem, plan, previous, expert_bytes, split=split, tokens=tokens,
                         previous_cluster=previous_cluster, scheduler=schedule_tokens)
    return result if routing is None else with_traffic(result, plan, problem, routing, token_bytes)
