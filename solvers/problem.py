"""The placement problem: measured loads plus a cluster shape.

Vocabulary (docs/problem.md): E logical experts in G groups, N nodes,
P GPUs (P/N per node), R physical slots (S = R/P per GPU).
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .cluster import MAX_REPLICAS, Cluster
from .errors import ProblemError
from .plan import Plan

# Layers of one problem: every solver is batched over layers (memory grows with L * R).
MAX_LAYERS = 1 << 14


def as_weights(weights: Any, param: str = "weights") -> torch.Tensor:
    """Loads as a 2-D floating tensor ``[layers, experts]`` on their own device.

    Accepts torch tensors, numpy arrays and nested lists; integer loads become float64
    (exact for counts below 2**53), float loads keep their precision.
    """
    if isinstance(weights, torch.Tensor):
        t = weights.detach()
        if t.device.type == "meta":
            raise ProblemError(param, "must hold data: a meta-device tensor has no values")
    else:
        try:
            arr = np.asarray(weights)
        except (ValueError, TypeError) as exc:  # ragged nested lists
            raise ProblemError(param, f"must be a rectangular [layers, experts] array ({exc})") from None
        if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
            raise ProblemError(param, f"must hold numbers, got dtype {arr.dtype}")
        t = torch.from_numpy(np.ascontiguousarray(arr))
    if t.dtype == torch.bool or t.is_complex():
        raise ProblemError(param, f"must hold real numbers, got dtype {t.dtype}")
    if t.dim() != 2:
        raise ProblemError(param, f"must be 2-D [layers, experts], got shape {tuple(t.shape)}")
    if t.shape[0] == 0 or t.shape[1] == 0:
        raise ProblemError(param, f"must not be empty, got shape {tuple(t.shape)}")
    if t.shape[0] > MAX_LAYERS:
        raise ProblemError(param, f"at most {MAX_LAYERS} layers per problem, got {t.shape[0]}")
    if t.shape[1] > MAX_REPLICAS:
        raise ProblemError(param, f"at most {MAX_REPLICAS} experts (the largest size the solvers serve), "
                           f"got {t.shape[1]}")
    if not t.is_floating_point():
        t = t.to(torch.float64)
    # One reduction each, on the tensor's own device; a single .item() per check.
    if not bool(torch.isfinite(t).all()):
        bad = "NaN" if bool(torch.isnan(t).any()) else "infinite"
        raise ProblemError(param, f"loads must be finite, found {bad} values")
    if bool((t < 0).any()):
        raise ProblemError(param, f"loads must be >= 0, found minimum {float(t.min())}")
    # The heuristics sum loads in float32 (as DeepSeek's code does): a layer total that
    # overflows float32 would make an open pack look full.
    if not bool(torch.isfinite(t.float().sum(1)).all()):
        raise ProblemError(param, f"loads too large: each layer's total must stay below "
                           f"{torch.finfo(torch.float32).max:.3g} (float32)")
    return t


@dataclass(frozen=True, init=False)
class Problem:
    """Loads, the cluster they are planned on, and the expert groups; validated once, here.

    weights: [layers, experts] floating tensor of measured loads (tokens per expert).
    cluster: nodes, GPUs and slots (:class:`solvers.cluster.Cluster`). num_groups: G expert
    groups of E/G consecutive ids (1 = none).

    ``Problem(weights, cluster=Cluster(...), num_groups=G)``, or the flat form
    ``Problem(weights, num_replicas, num_groups, num_nodes, num_gpus, gpu_speed=...,
    gpu_slots=..., failed=...)`` (the keywords are :class:`Cluster`'s).
    """

    weights: torch.Tensor
    cluster: Cluster
    num_groups: int

    def __init__(self, weights: Any, num_replicas: Any = None, num_groups: Any = 1,
                 num_nodes: Any = 1, num_gpus: Any = 1, *, gpu_speed: Any = None, gpu_slots: Any = None,
                 failed: Any = None, cluster: Cluster | None = None):
        w = as_weights(weights)
        if cluster is None:
            if num_replicas is None and gpu_slots is None:
                raise ProblemError("num_replicas", "give the slots (num_replicas or gpu_slots) or a cluster")
            cluster = Cluster(num_nodes, num_gpus, num_replicas, gpu_speed=gpu_speed, gpu_slots=gpu_slots,
                              failed=failed)
        elif not isinstance(cluster, Cluster):
            raise ProblemError("cluster", f"must be a solvers.Cluster, got {type(cluster).__name__}")
        elif (num_replicas is not None or num_nodes != 1 or num_gpus != 1 or gpu_speed is not None
              or gpu_slots is not None or failed is not None):
            raise ProblemError("cluster", "give either a cluster or num_replicas/num_nodes/num_gpus/"
                               "gpu_speed/gpu_slots/failed, not both")
        G = cluster.check_experts(w.shape[1], num_groups)
        object.__setattr__(self, "weights", w)
        object.__setattr__(self, "cluster", cluster)
        object.__setattr__(self, "num_groups", G)

    @classmethod
    def _trusted(cls, weights: torch.Tensor, cluster: Cluster, num_groups: int) -> "Problem":
        """A problem from parts already validated (a layer or a device copy of one)."""
        p = object.__new__(cls)
        object.__setattr__(p, "weights", weights)
        object.__setattr__(p, "cluster", cluster)
        object.__setattr__(p, "num_groups", num_groups)
        return p

    # Derived sizes -------------------------------------------------------
    @property
    def num_replicas(self) -> int:
        return self.cluster.num_replicas

    @property
    def num_nodes(self) -> int:
        return self.cluster.num_nodes

    @property
    def num_gpus(self) -> int:
        return self.cluster.num_gpus

    @property
    def num_layers(self) -> int:
        return self.weights.shape[0]

    @property
    def num_experts(self) -> int:
        return self.weights.shape[1]

    @property
    def slots_per_gpu(self) -> int:
        return self.cluster.slots_per_gpu

    @property
    def gpus_per_node(self) -> int:
        return self.cluster.gpus_per_node

    @property
    def device(self) -> torch.device:
        return self.weights.device

    def resolve_policy(self, policy: str = "auto") -> str:
        return self.cluster.resolve_policy(policy, self.num_experts, self.num_groups)

    def shape_dict(self) -> dict[str, Any]:
        """The cluster shape as plain data (for JSON, reports and cache keys); per-GPU
        speeds and slot counts only where the cluster has them."""
        out: dict[str, Any] = {"num_layers": self.num_layers, "num_experts": self.num_experts,
                               "num_replicas": self.num_replicas, "num_groups": self.num_groups,
                               "num_nodes": self.num_nodes, "num_gpus": self.num_gpus}
        out.update({k: v for k, v in self.cluster.as_dict().items() if k.startswith("gpu_")})
        return out

    def validate_plan(self, plan: Plan, param: str = "plan") -> Plan:
        """Raise :class:`PlanError` unless ``plan`` is a well-formed plan of this problem."""
        plan.validate(self.num_layers, self.num_experts, self.num_replicas,
                      self.num_gpus if self.cluster.uniform_slots else None)
        return plan

    def slot_gpu(self) -> torch.Tensor:
        """[R] int64 GPU of every slot, on the problem's device."""
        c = self.cluster
        if c.uniform_slots:
            return torch.arange(c.num_replicas, device=self.device) // (c.num_replicas // c.num_gpus)
        return torch.tensor(c.slot_gpus(), dtype=torch.int64, device=self.device)

    def gpu_speed(self) -> torch.Tensor:
        """[P] float64 relative speed of every GPU, on the problem's device."""
        return torch.tensor(self.cluster.gpu_speed, dtype=torch.float64, device=self.device)

    def with_weights(self, weights: Any) -> "Problem":
        """The same cluster and groups on other loads (another window of steps)."""
        return Problem(weights, cluster=self.cluster, num_groups=self.num_groups)

    def layer(self, index: int) -> "Problem":
        """The single-layer problem of layer ``index`` (exact models work per layer)."""
        if isinstance(index, bool) or not isinstance(index, numbers.Integral):
            raise ProblemError("layer", f"must be an integer layer index, got {index!r}")
        index = int(index)
        if not -self.num_layers <= index < self.num_layers:
            raise ProblemError("layer", f"must be in [0, {self.num_layers}), got {index}")
        index %= self.num_layers
        return Problem._trusted(self.weights[index:index + 1], self.cluster, self.num_groups)

    def to(self, device: str | torch.device) -> "Problem":
        return Problem._trusted(self.weights.to(device), self.cluster, self.num_groups)

    def __repr__(self) -> str:
        return (f"Problem(layers={self.num_layers}, experts={self.num_experts}, "
                f"replicas={self.num_replicas}, groups={self.num_groups}, nodes={self.num_nodes}, "
                f"gpus={self.num_gpus}, device={self.device})")
