"""Per-token routing traces: the canonical format, engine importers, a generator, placement.

A :class:`RoutingTrace` holds the top-k expert ids of every token in every MoE layer
(``topk_ids [layers, tokens, top_k]``) and, when the engine recorded it, the rank each
token came from. It is what the traffic metric (:mod:`solvers.traffic`) and the
communication-aware placement (:mod:`solvers.routing.placement`, registered as
``traffic_aware``) need; load counts are derived from it (:meth:`RoutingTrace.loads`).

- :mod:`.trace`: the type, its ``.npz`` file format (docs/formats.md), load counts;
- :mod:`.importers`: SGLang ``per_token`` recorder dumps, vLLM routed-experts replay,
  Megatron routing-trace JSONL; :func:`read_routing` detects which;
- :mod:`.generator`: seeded traces with co-activation structure (topics favouring expert
  sets, a topic mix drifting over time);
- :mod:`.coactivation`: co-activation statistics for the placement;
- :mod:`.placement`: the ``traffic_aware`` solver (imported by :mod:`solvers.builtin`, not
  here: importing :mod:`.trace` must not register solvers).

A CP-SAT lower bound on inter-node traffic for small instances is research code:
``benchmarks/traffic_bound.py``.
"""
from __future__ import annotations

from .generator import RoutingSpec, generate_routing
from .importers import ROUTING_FORMATS, detect_routing_format, read_routing
from .trace import RoutingTrace, load_routing, save_routing

__all__ = ["RoutingTrace", "load_routing", "save_routing", "read_routing", "detect_routing_format",
           "ROUTING_FORMATS", "RoutingSpec", "generate_routing"]
