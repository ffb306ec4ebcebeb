"""The workbench's solvers as an SGLang EPLB algorithm.

SGLang's algorithms (``sglang.srt.eplb.eplb_algorithms``) take DeepSeek's signature:
``rebalance_experts(weight, num_replicas, num_groups, num_nodes, num_gpus) -> (phy2log,
log2phy, logcnt)`` with phy2log [layers, num_replicas], log2phy [layers, experts, K] padded
with -1 and logcnt [layers, experts], int64.

    from solvers.engines.sglang import algorithm
    rebalance_experts = algorithm("kk_swap")                   # any registered solver, with options
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..registry import get_solver
from .plan_for_engine import engine_plan, engine_problem


def algorithm(solver: str = "kk_swap", **options: Any) -> Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """``rebalance_experts(weight, num_replicas, num_groups, num_nodes, num_gpus)`` planning
    with ``solver`` and ``options`` (checked now against the solver's schema)."""
    get_solver(solver).parse(options)

    def rebalance_experts(weight: torch.Tensor, num_replicas: int, num_groups: int, num_nodes: int,
                          num_gpus: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        problem = engine_problem(weight, num_replicas, num_groups, num_nodes, num_gpus)
        return engine_plan(problem, solver, options).to(torch.as_tensor(weight).device).as_tuple()

    rebalance_experts.__doc__ = f"SGLang EPLB algorithm: the workbench's {solver!r} (DeepSeek's signature)."
    rebalance_experts.__qualname__ = rebalance_experts.__name__ = "rebalance_experts"
    return rebalance_experts


# The greedy's drop-in under DeepSeek's name (hierarchical iff the groups divide by the nodes).
rebalance_experts = algorithm("deepseek")
