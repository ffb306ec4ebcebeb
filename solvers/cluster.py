"""The cluster: nodes, GPUs and expert slots, the presets of public shapes, and the policy rule.

One type for every front end (the CLI, the app, the benchmark, the simulator): a
:class:`Cluster` is what a :class:`solvers.Problem` is planned on; the loads and the expert
groups come with the model. Everything a later feature adds to the cluster (per-GPU
speeds or slot counts, failed ranks, link bandwidths) belongs here, so it is written once.

Presets, one table each, plain data (this module imports no torch, so ``eplb --help`` can
list them without loading it):

- :data:`MODELS`: routing shapes of public MoE models (MoE layers, routed experts, expert
  groups, top-k, dense layers, bytes of one expert) and the cluster each is usually
  served on when a command is given only ``--model``;
- :data:`CLUSTERS`: public cluster shapes (one node, DeepSeek prefill, decode EP). A shape
  fixes nodes and GPUs; its slot count for E experts is the smallest multiple of the GPU
  count holding every expert plus ``spare_per_gpu`` redundant slots per GPU (DeepSeek-V3
  prefill: 256 + 32 = 288 slots on 32 GPUs).
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

from .errors import OptionError, ProblemError

POLICIES = ("auto", "hierarchical", "global")

# Largest cluster the algorithms serve: every solver loops over replication steps (R - E
# of them) and packs R slots; 65536 slots take seconds in DeepSeek's greedy, ten times
# more would take minutes, and 10**7 never returned. Experts, GPUs, nodes and groups are
# at most the slots (R >= E, R >= P >= N), so one cap bounds them all.
MAX_REPLICAS = 1 << 16


def as_count(value: Any, param: str, minimum: int = 1, maximum: int | None = None) -> int:
    """An integer parameter in ``[minimum, maximum]``; anything else raises :class:`ProblemError`.

    Integer-valued scalars of any library (numpy, a one-element integer torch tensor) are
    taken through ``__index__``; floats and bools are refused."""
    if isinstance(value, bool):
        raise ProblemError(param, f"must be an integer, got {value!r}")
    if not isinstance(value, numbers.Integral):
        index = getattr(value, "__index__", None)
        if index is None or getattr(value, "dtype", None) is not None and "bool" in str(value.dtype):
            raise ProblemError(param, f"must be an integer, got {value!r}")
        try:
            value = index()
        except (TypeError, ValueError, RuntimeError, NotImplementedError):
            raise ProblemError(param, f"must be an integer, got {value!r}") from None
    value = int(value)
    if value < minimum:
        raise ProblemError(param, f"must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ProblemError(param, f"must be <= {maximum} (the largest size the solvers serve), got {value}")
    return value


def auto_policy(num_groups: int, num_nodes: int) -> str:
    """DeepSeek's rule: hierarchical when the expert groups divide evenly over the nodes."""
    return "hierarchical" if num_groups % num_nodes == 0 else "global"


@dataclass(frozen=True)
class Cluster:
    """N nodes, P GPUs (P/N per node) and R physical expert slots (S = R/P per GPU).

    Slot ``p`` lives on GPU ``p // S``, GPU ``g`` on node ``g // (P/N)``. Construction
    checks the shape once; every front end builds its cluster here.
    """

    num_nodes: int
    num_gpus: int
    num_replicas: int

    def __init__(self, num_nodes: Any = 1, num_gpus: Any = 1, num_replicas: Any = 1, *,
                 nodes_must_divide_gpus: bool = True):
        N = as_count(num_nodes, "num_nodes", maximum=MAX_REPLICAS)
        P = as_count(num_gpus, "num_gpus", maximum=MAX_REPLICAS)
        R = as_count(num_replicas, "num_replicas", maximum=MAX_REPLICAS)
        if R % P != 0:
            raise ProblemError("num_replicas", f"must be a multiple of num_gpus ({P}), got {R}")
        # A Problem maps slots to nodes, so it needs whole GPUs per node; the drop-in global
        # policy (rebalance_experts with nodes that do not divide the GPUs) does not.
        if nodes_must_divide_gpus and P % N != 0:
            raise ProblemError("num_gpus", f"must be a multiple of num_nodes ({N}), got {P}")
        object.__setattr__(self, "num_nodes", N)
        object.__setattr__(self, "num_gpus", P)
        object.__setattr__(self, "num_replicas", R)

    @property
    def slots_per_gpu(self) -> int:
        return self.num_replicas // self.num_gpus

    @property
    def gpus_per_node(self) -> int:
        return self.num_gpus // self.num_nodes

    def check_experts(self, num_experts: int, num_groups: Any = 1) -> int:
        """The groups, validated against ``num_experts`` experts on this cluster."""
        G = as_count(num_groups, "num_groups", maximum=MAX_REPLICAS)
        if self.num_replicas < num_experts:
            raise ProblemError("num_replicas", f"must be >= the number of experts ({num_experts}), "
                               f"got {self.num_replicas}")
        if G > num_experts:
            raise ProblemError("num_groups", f"must be <= the number of experts ({num_experts}), got {G}")
        return G

    def resolve_policy(self, policy: str, num_experts: int, num_groups: int) -> str:
        """The policy that will run: ``auto`` follows :func:`auto_policy`. Raises
        :class:`ProblemError` when a requested or auto-selected hierarchical policy cannot
        be built for this shape."""
        if policy not in POLICIES:
            raise ProblemError("policy", f"must be one of {', '.join(POLICIES)}, got {policy!r}")
        N, P = self.num_nodes, self.num_gpus
        if policy == "auto":
            policy = auto_policy(num_groups, N)
        if policy == "hierarchical":
            if num_groups % N != 0:
                raise ProblemError("num_groups", f"hierarchical policy needs num_groups ({num_groups}) "
                                   f"to be a multiple of num_nodes ({N})")
            if num_experts % num_groups != 0:
                raise ProblemError("num_groups", f"hierarchical policy needs the number of experts "
                                   f"({num_experts}) to be a multiple of num_groups ({num_groups})")
            if P % N != 0:
                raise ProblemError("num_gpus", f"hierarchical policy needs num_gpus ({P}) "
                                   f"to be a multiple of num_nodes ({N})")
        return policy

    def as_dict(self) -> dict[str, int]:
        return {"num_replicas": self.num_replicas, "num_nodes": self.num_nodes, "num_gpus": self.num_gpus}

    def describe(self) -> str:
        """One line for captions and reports."""
        N, P, R = self.num_nodes, self.num_gpus, self.num_replicas
        return f"{N} node(s) x {P // N} GPUs = {P} GPUs, {R} slots ({R // P} per GPU)"

    @property
    def id(self) -> str:
        return cluster_id(self.num_nodes, self.num_gpus, self.num_replicas)


def cluster_id(nodes: int, gpus: int, replicas: int) -> str:
    """``N<nodes>xP<gpus>xR<replicas>``: the cluster part of a benchmark instance id (ids
    are parsed before they are checked, so this formats without building a Cluster)."""
    return f"N{nodes}xP{gpus}xR{replicas}"


# Presets ---------------------------------------------------------------------------------

def slots_for(num_experts: int, num_gpus: int, spare_per_gpu: int = 1) -> int:
    """The slot rule of the presets: the smallest multiple of the GPUs holding every expert
    plus ``spare_per_gpu`` redundant slots per GPU."""
    return num_gpus * math.ceil((num_experts + spare_per_gpu * num_gpus) / num_gpus)


@dataclass(frozen=True)
class ClusterPreset:
    """A public cluster shape: ``nodes`` nodes, ``gpus`` GPUs in all, ``spare_per_gpu``
    redundant slots per GPU beyond what the experts need. ``name`` is the key the benchmark
    ids and the CLI use, ``label`` what the app shows."""

    name: str
    label: str
    nodes: int
    gpus: int
    spare_per_gpu: int = 1

    def replicas(self, num_experts: int) -> int:
        """Slots for ``num_experts`` experts: the smallest multiple of the GPUs holding every
        expert plus the spare slots."""
        return slots_for(num_experts, self.gpus, self.spare_per_gpu)

    def cluster(self, num_experts: int) -> Cluster:
        return Cluster(self.nodes, self.gpus, self.replicas(num_experts))


# Single node, DeepSeek prefill (4 nodes x 8 GPUs), decode-like EP; and two small
# expert-parallel groups (Mixtral-sized models on 2-4 GPUs) that the exact solvers still
# prove optimal within seconds, so heuristics can be measured against optima.
CLUSTERS: dict[str, ClusterPreset] = {c.name: c for c in (
    ClusterPreset("node-2", "One node of 2 GPUs", 1, 2),
    ClusterPreset("nodes-2x2-nospare", "2 nodes x 2 GPUs, no spare slot", 2, 4, spare_per_gpu=0),
    ClusterPreset("node-8", "One node of 8 GPUs", 1, 8),
    ClusterPreset("nodes-2x4", "2 nodes x 4 GPUs", 2, 8),
    ClusterPreset("nodes-2x8", "2 nodes x 8 GPUs", 2, 16),
    ClusterPreset("prefill-4x8", "DeepSeek-V3 prefill: 4 nodes x 8 GPUs", 4, 32),
    ClusterPreset("decode-ep64", "Decode EP64: 8 nodes x 8 GPUs", 8, 64),
    ClusterPreset("decode-ep144", "Decode EP144: 18 nodes x 8 GPUs", 18, 144),
)}


@dataclass(frozen=True)
class ModelPreset:
    """Routing shape of one MoE model.

    name: display name; num_layers: MoE layers; num_experts: routed experts per layer;
    num_groups: expert groups for group-limited routing (1 = none); top_k: experts per token.
    dense_layers: leading dense (non-MoE) layers of the model, which engines still count in
    their per-layer maps (SGLang's recorder writes dense + MoE rows). expert_bytes: weight
    bytes of one routed expert (3 matrices hidden x expert-intermediate, in the dtype the
    model is usually served in), what one migration move transfers. cluster: the
    :data:`CLUSTERS` shape it is served on when a command names only the model.
    hidden_size: the model dimension (one token's activation vector), activation_bytes:
    bytes per element of it on the wire (2: BF16); their product is what a dispatch sends
    per token and destination (the traffic metric, :mod:`solvers.traffic`).
    """

    name: str
    num_layers: int
    num_experts: int
    num_groups: int
    top_k: int
    dense_layers: int = 0
    expert_bytes: int = 0
    cluster: str = "node-8"
    hidden_size: int = 0
    activation_bytes: int = 2

    @property
    def token_bytes(self) -> int:
        """Bytes of one token's activations (hidden_size x activation_bytes)."""
        return self.hidden_size * self.activation_bytes

    @property
    def engine_layers(self) -> int:
        """Rows of an engine's per-layer map: dense + MoE layers."""
        return self.dense_layers + self.num_layers

    def default_cluster(self) -> Cluster:
        return CLUSTERS[self.cluster].cluster(self.num_experts)


# expert_bytes: DeepSeek-V3 and Kimi-K2 3 x 7168 x 2048 in FP8; Qwen3-235B 3 x 4096 x 1536,
# Mixtral 3 x 4096 x 14336 and OLMoE 3 x 2048 x 1024 in BF16. Default clusters: DeepSeek's
# prefill shape for the 256/384-expert models, one spare slot per GPU. hidden_size from each
# model's config.json (DeepSeek-V3 and Kimi-K2 7168, Qwen3-235B and Mixtral 4096, OLMoE 2048).
MODELS: dict[str, ModelPreset] = {
    "deepseek-v3": ModelPreset("DeepSeek-V3 / R1", 58, 256, 8, 8, dense_layers=3, expert_bytes=3 * 7168 * 2048,
                               cluster="prefill-4x8", hidden_size=7168),
    "qwen3-235b": ModelPreset("Qwen3-235B-A22B", 94, 128, 1, 8, expert_bytes=2 * 3 * 4096 * 1536,
                              cluster="nodes-2x8", hidden_size=4096),
    "mixtral-8x7b": ModelPreset("Mixtral-8x7B", 32, 8, 1, 2, expert_bytes=2 * 3 * 4096 * 14336,
                                 hidden_size=4096),
    "olmoe-1b-7b": ModelPreset("OLMoE-1B-7B", 16, 64, 1, 8, expert_bytes=2 * 3 * 2048 * 1024,
                                hidden_size=2048),
    "kimi-k2": ModelPreset("Kimi-K2", 60, 384, 1, 8, dense_layers=1, expert_bytes=3 * 7168 * 2048,
                           cluster="prefill-4x8", hidden_size=7168),
}


def get_model(model: str) -> ModelPreset:
    """The preset named ``model`` (a key of :data:`MODELS`); unknown names raise OptionError."""
    if not isinstance(model, str) or model not in MODELS:
        raise OptionError("model", f"unknown model preset {model!r}; choose one of {', '.join(MODELS)}")
    return MODELS[model]


def get_cluster(name: str) -> ClusterPreset:
    """The cluster shape named ``name`` (a key of :data:`CLUSTERS`); unknown names raise OptionError."""
    if not isinstance(name, str) or name not in CLUSTERS:
        raise OptionError("shape", f"unknown cluster shape {name!r}; choose one of {', '.join(CLUSTERS)}")
    return CLUSTERS[name]


def shape_name(num_nodes: int, num_gpus: int) -> str:
    """The :data:`CLUSTERS` name of these nodes and GPUs, or ``N<n>xP<p>`` for an ad-hoc shape."""
    preset = next((c for c in CLUSTERS.values() if (c.nodes, c.gpus) == (num_nodes, num_gpus)), None)
    return preset.name if preset is not None else f"N{num_nodes}xP{num_gpus}"
