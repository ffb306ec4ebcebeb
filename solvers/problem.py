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

from .errors import ProblemError

POLICIES = ("auto", "hierarchical", "global")

# Largest cluster the algorithms serve: every solver loops over replication steps (R - E
# of them) and packs R slots; 65536 slots take seconds in DeepSeek's greedy, ten times
# more would take minutes, and 10**7 never returned. Experts, GPUs, nodes and groups are
# at most the slots (R >= E, R >= P >= N), so one cap bounds them all.
MAX_REPLICAS = 1 << 16
# Layers of one problem: every solver is batched over layers (memory grows with L * R).
MAX_LAYERS = 1 << 14


def as_count(value: Any, param: str, minimum: int = 1, maximum: int | None = None) -> int:
    """An integer parameter in ``[minimum, maximum]``; anything else raises :class:`ProblemError`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        if (isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_floating_point()
                and value.dtype != torch.bool and value.device.type != "meta"):
            value = int(value.item())
        else:
            raise ProblemError(param, f"must be an integer, got {value!r}")
    value = int(value)
    if value < minimum:
        raise ProblemError(param, f"must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ProblemError(param, f"must be <= {maximum} (the largest size the solvers serve), got {value}")
    return value


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


def resolve_policy(policy: str, num_experts: int, num_groups: int, num_nodes: int,
                   num_gpus: int) -> str:
    """The policy that will run: ``auto`` picks hierarchical iff ``G % N == 0`` (DeepSeek's rule).

    Raises :class:`ProblemError` when an explicitly requested or auto-selected
    hierarchical policy cannot be built for this shape.
    """
    if policy not in POLICIES:
        raise ProblemError("policy", f"must be one of {', '.join(POLICIES)}, got {policy!r}")
    if policy == "auto":
        policy = "hierarchical" if num_groups % num_nodes == 0 else "global"
    if policy == "hierarchical":
        if num_groups % num_nodes != 0:
            raise ProblemError("num_groups", f"hierarchical policy needs num_groups ({num_groups}) "
                               f"to be a multiple of num_nodes ({num_nodes})")
        if num_experts % num_groups != 0:
            raise ProblemError("num_groups", f"hierarchical policy needs the number of experts "
                               f"({num_experts}) to be a multiple of num_groups ({num_groups})")
        if num_gpus % num_nodes != 0:
            raise ProblemError("num_gpus", f"hierarchical policy needs num_gpus ({num_gpus}) "
                               f"to be a multiple of num_nodes ({num_nodes})")
    return policy


def check_cluster(num_experts: int, num_replicas: Any, num_groups: Any, num_nodes: Any,
                  num_gpus: Any, nodes_must_divide_gpus: bool = True) -> tuple[int, int, int, int]:
    """Validated (R, G, N, P) for ``num_experts`` experts; the policy-specific rules are in
    :func:`resolve_policy`.

    ``nodes_must_divide_gpus``: a :class:`Problem` always needs whole GPUs per node (its
    node metrics map slots to nodes); the drop-in global policy does not.
    """
    R = as_count(num_replicas, "num_replicas", maximum=MAX_REPLICAS)
    G = as_count(num_groups, "num_groups", maximum=MAX_REPLICAS)
    N = as_count(num_nodes, "num_nodes", maximum=MAX_REPLICAS)
    P = as_count(num_gpus, "num_gpus", maximum=MAX_REPLICAS)
    if R < num_experts:
        raise ProblemError("num_replicas", f"must be >= the number of experts ({num_experts}), got {R}")
    if R % P != 0:
        raise ProblemError("num_replicas", f"must be a multiple of num_gpus ({P}), got {R}")
    if nodes_must_divide_gpus and P % N != 0:
        raise ProblemError("num_gpus", f"must be a multiple of num_nodes ({N}), got {P}")
    if G > num_experts:
        raise ProblemError("num_groups", f"must be <= the number of experts ({num_experts}), got {G}")
    return R, G, N, P


@dataclass(frozen=True)
class Problem:
    """Loads and cluster shape of one placement problem, validated on construction.

    weights: [layers, experts] floating tensor of measured loads (tokens per expert).
    """

    weights: torch.Tensor
    num_replicas: int
    num_groups: int
    num_nodes: int
    num_gpus: int

    def __init__(self, weights: Any, num_replicas: int, num_groups: int = 1,
                 num_nodes: int = 1, num_gpus: int = 1):
        w = as_weights(weights)
        R, G, N, P = check_cluster(w.shape[1], num_replicas, num_groups, num_nodes, num_gpus)
        object.__setattr__(self, "weights", w)
        object.__setattr__(self, "num_replicas", R)
        object.__setattr__(self, "num_groups", G)
        object.__setattr__(self, "num_nodes", N)
        object.__setattr__(self, "num_gpus", P)

    # Derived sizes -------------------------------------------------------
    @property
    def num_layers(self) -> int:
        return self.weights.shape[0]

    @property
    def num_experts(self) -> int:
        return self.weights.shape[1]

    @property
    def slots_per_gpu(self) -> int:
        return self.num_replicas // self.num_gpus

    @property
    def gpus_per_node(self) -> int:
        return self.num_gpus // self.num_nodes

    @property
    def device(self) -> torch.device:
        return self.weights.device

    def resolve_policy(self, policy: str = "auto") -> str:
        return resolve_policy(policy, self.num_experts, self.num_groups, self.num_nodes, self.num_gpus)

    def shape_dict(self) -> dict[str, int]:
        """The cluster shape as plain ints (for JSON, reports and cache keys)."""
        return {"num_layers": self.num_layers, "num_experts": self.num_experts,
                "num_replicas": self.num_replicas, "num_groups": self.num_groups,
                "num_nodes": self.num_nodes, "num_gpus": self.num_gpus}

    def layer(self, index: int) -> "Problem":
        """The single-layer problem of layer ``index`` (exact models work per layer)."""
        if isinstance(index, bool) or not isinstance(index, numbers.Integral):
            raise ProblemError("layer", f"must be an integer layer index, got {index!r}")
        index = int(index)
        if not -self.num_layers <= index < self.num_layers:
            raise ProblemError("layer", f"must be in [0, {self.num_layers}), got {index}")
        return Problem(self.weights[index:index + 1], self.num_replicas, self.num_groups,
                       self.num_nodes, self.num_gpus)

    def to(self, device: str | torch.device) -> "Problem":
        return Problem(self.weights.to(device), self.num_replicas, self.num_groups,
                       self.num_nodes, self.num_gpus)

    def __repr__(self) -> str:
        return (f"Problem(layers={self.num_layers}, experts={self.num_experts}, "
                f"replicas={self.num_replicas}, groups={self.num_groups}, nodes={self.num_nodes}, "
                f"gpus={self.num_gpus}, device={self.device})")
