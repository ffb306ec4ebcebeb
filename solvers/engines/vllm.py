"""The workbench's solvers as a vLLM EPLB policy.

vLLM plans expert placement through a policy class (``AbstractEplbPolicy``): its classmethod
``rebalance_experts(weight, num_replicas, num_groups, num_nodes, num_ranks,
old_global_expert_indices=None)`` returns ``phy2log`` [layers, num_replicas] (int64, the
logical expert of every physical slot, as vLLM 0.33 documents it; earlier releases expected
``(phy2log, log2phy, logcnt)``: set ``returns = "tuple"``). ``old_global_expert_indices`` is the placement in force
[layers, num_replicas]; replicas it already holds keep their GPU and slot where the plan allows.

    from solvers.engines.vllm import policy_class
    KkSwapPolicy = policy_class("kk_swap")                      # any registered solver
    ExactPolicy = policy_class("cpsat", time_limit=5.0)         # with its options

Where vLLM is installed the class derives from its ``AbstractEplbPolicy``; elsewhere from
``object`` (the interface is the classmethod).
"""
from __future__ import annotations

from typing import Any

import torch

from ..registry import get_solver
from .plan_for_engine import engine_plan, engine_problem

try:  # vLLM's base class where vLLM is installed; the interface is the classmethod either way
    from vllm.distributed.eplb.policy.abstract import AbstractEplbPolicy as _Base
except Exception:  # noqa: BLE001  not installed, or installed without what it imports
    _Base = object


class WorkbenchEplbPolicy(_Base):
    """A vLLM EPLB policy planning with the workbench's ``solver`` (class attributes:
    ``solver``, ``options``, ``returns``)."""

    solver: str = "kk_swap"
    options: dict[str, Any] = {}
    returns: str = "phy2log"          # or "tuple": (phy2log, log2phy, logcnt), earlier vLLM releases

    @classmethod
    def rebalance_experts(cls, weight: torch.Tensor, num_replicas: int, num_groups: int, num_nodes: int,
                          num_ranks: int, old_global_expert_indices: torch.Tensor | None = None):
        """phy2log [layers, num_replicas] int64 on ``weight``'s device (or the three tensors)."""
        problem = engine_problem(weight, num_replicas, num_groups, num_nodes, num_ranks)
        plan = engine_plan(problem, cls.solver, cls.options, old_global_expert_indices).to(
            torch.as_tensor(weight).device)
        return plan.as_tuple() if cls.returns == "tuple" else plan.phy2log


def policy_class(solver: str = "kk_swap", *, returns: str = "phy2log", **options: Any) -> type:
    """A vLLM policy class planning with ``solver`` and ``options`` (checked now against the
    solver's schema, so a typo fails at start-up, not at the first rebalance)."""
    spec = get_solver(solver)
    spec.parse(options)
    if returns not in ("phy2log", "tuple"):
        raise ValueError(f"returns must be 'phy2log' or 'tuple', got {returns!r}")
    name = "".join(p.capitalize() for p in solver.split("_")) + "EplbPolicy"
    return type(name, (WorkbenchEplbPolicy,), {"solver": solver, "options": dict(options), "returns": returns,
                                               "__doc__": f"vLLM EPLB policy: the workbench's {solver!r}."})
