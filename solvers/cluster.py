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

import hashlib
import itertools
import math
import numbers
from dataclasses import dataclass
from typing import Any

from .errors import OptionError, ProblemError
from .network import DEFAULT_NETWORK, Network

POLICIES = ("auto", "hierarchical", "global")

# Largest cluster the algorithms serve: every solver loops over replication steps (R - E
# of them) and packs R slots; 65536 slots take seconds in DeepSeek's greedy, ten times
# more would take minutes, and 10**7 never returned. Experts, GPUs, nodes and groups are
# at most the slots (R >= E, R >= P >= N), so one cap bounds them all.
MAX_REPLICAS = 1 << 16
# GPU speeds are relative (1: the reference GPU). Within these bounds every derived figure
# stays finite and exact enough to compare: a load (< 2**63) over a speed, a sum of up to
# MAX_REPLICAS speeds, and the ratio of the slowest GPU's time to the ideal (docs/problem.md,
# "Real clusters").
MIN_SPEED = 1e-6
MAX_SPEED = 1e6
MAX_SPEED_RATIO = 1e6


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
    """N nodes, P GPUs (P/N per node) and R physical expert slots.

    A homogeneous cluster has S = R/P slots on every GPU, each of speed 1. A real one may
    give every GPU its own relative speed (``gpu_speed``, > 0; a GPU's time for a layer is
    its load over its speed) and its own slot count (``gpu_slots``, >= 0), and may have
    failed or drained GPUs (``failed``, or a slot count of 0), which hold no slot.

    Slots are numbered GPU by GPU: slot ``p`` lives on the GPU whose cumulative slot range
    holds ``p`` (``p // S`` on a homogeneous cluster), GPU ``g`` on node ``g // (P/N)``.
    ``num_replicas`` is the number of live slots: a failed GPU takes its slots with it.
    Construction checks everything once; every front end builds its cluster here.
    """

    num_nodes: int
    num_gpus: int
    num_replicas: int
    gpu_speed: tuple[float, ...] = ()
    gpu_slots: tuple[int, ...] = ()
    failed: tuple[int, ...] = ()
    network: Network = DEFAULT_NETWORK     # link bandwidths (solvers.network): what moves cost in seconds

    def __init__(self, num_nodes: Any = 1, num_gpus: Any = 1, num_replicas: Any = None, *,
                 gpu_speed: Any = None, gpu_slots: Any = None, failed: Any = None,
                 nodes_must_divide_gpus: bool = True, network: Network | None = None):
        N = as_count(num_nodes, "num_nodes", maximum=MAX_REPLICAS)
        P = as_count(num_gpus, "num_gpus", maximum=MAX_REPLICAS)
        if gpu_slots is None:
            R = as_count(1 if num_replicas is None else num_replicas, "num_replicas", maximum=MAX_REPLICAS)
            if R % P != 0:
                raise ProblemError("num_replicas", f"must be a multiple of num_gpus ({P}), got {R} "
                                   "(or give gpu_slots, one slot count per GPU)")
            slots = [R // P] * P
        else:
            slots = _per_gpu(gpu_slots, "gpu_slots", P, integer=True)
            if num_replicas is not None:
                R = as_count(num_replicas, "num_replicas", maximum=MAX_REPLICAS)
                if R != sum(slots):
                    raise ProblemError("num_replicas", f"must equal the sum of gpu_slots ({sum(slots)}), got {R}")
        speed = [1.0] * P if gpu_speed is None else _per_gpu(gpu_speed, "gpu_speed", P, integer=False)
        for g in _gpu_ids(failed, P):
            slots[g] = 0
        R = sum(slots)
        if R < 1:
            raise ProblemError("failed" if failed is not None else "gpu_slots", "no GPU has a slot left")
        if R > MAX_REPLICAS:
            raise ProblemError("gpu_slots", f"at most {MAX_REPLICAS} slots in all (the largest size the "
                               f"solvers serve), got {R}")
        # A Problem maps slots to nodes, so it needs whole GPUs per node; the drop-in global
        # policy (rebalance_experts with nodes that do not divide the GPUs) does not.
        if nodes_must_divide_gpus and P % N != 0:
            raise ProblemError("num_gpus", f"must be a multiple of num_nodes ({N}), got {P}")
        object.__setattr__(self, "num_nodes", N)
        object.__setattr__(self, "num_gpus", P)
        object.__setattr__(self, "num_replicas", R)
        if network is not None and not isinstance(network, Network):
            raise ProblemError("network", f"must be a solvers.network.Network, got {type(network).__name__}")
        object.__setattr__(self, "network", network or DEFAULT_NETWORK)

        object.__setattr__(self, "gpu_speed", tuple(speed))
        object.__setattr__(self, "gpu_slots", tuple(slots))
        object.__setattr__(self, "failed", tuple(g for g in range(P) if slots[g] == 0))

    # What is uniform: the solvers written for identical GPUs serve exactly the clusters
    # with ``homogeneous`` True, and their numbers there are the same as before speeds existed.
    @property
    def uniform_slots(self) -> bool:
        """Every GPU holds the same number of slots (so none has failed)."""
        return len(set(self.gpu_slots)) == 1

    @property
    def uniform_speed(self) -> bool:
        return all(s == 1.0 for s in self.gpu_speed)

    @property
    def homogeneous(self) -> bool:
        """P identical GPUs of speed 1 with R/P slots each."""
        return self.uniform_slots and self.uniform_speed

    @property
    def slots_per_gpu(self) -> int:
        """S = R/P; only defined when every GPU holds the same number of slots."""
        if not self.uniform_slots:
            raise ProblemError("gpu_slots", "GPUs hold different slot counts (or some failed): "
                               "there is no one slots-per-GPU figure")
        return self.num_replicas // self.num_gpus

    @property
    def gpus_per_node(self) -> int:
        return self.num_gpus // self.num_nodes

    @property
    def live_gpus(self) -> tuple[int, ...]:
        """GPUs holding at least one slot."""
        return tuple(g for g, c in enumerate(self.gpu_slots) if c > 0)

    @property
    def slot_starts(self) -> tuple[int, ...]:
        """First slot of every GPU, and R last: GPU g holds slots [starts[g], starts[g+1])."""
        return tuple(itertools.accumulate(self.gpu_slots, initial=0))

    def slot_gpus(self) -> list[int]:
        """The GPU of every slot (length R)."""
        return [g for g, c in enumerate(self.gpu_slots) for _ in range(c)]

    @property
    def total_speed(self) -> float:
        """Sum of the live GPUs' speeds: W / total_speed is the best possible time."""
        return math.fsum(self.gpu_speed[g] for g in self.live_gpus)

    def homogeneous_view(self) -> "Cluster":
        """The same nodes, GPUs and slots, every speed 1: what a token-balancing solver plans
        on. Only when every GPU holds the same number of slots."""
        if not self.uniform_slots:
            raise ProblemError("gpu_slots", "a cluster with uneven slot counts or failed GPUs has no "
                               "homogeneous view")
        return Cluster(self.num_nodes, self.num_gpus, self.num_replicas, network=self.network)

    def check_experts(self, num_experts: int, num_groups: Any = 1) -> int:
        """The groups, validated against ``num_experts`` experts on this cluster."""
        G = as_count(num_groups, "num_groups", maximum=MAX_REPLICAS)
        if self.num_replicas < num_experts:
            what = "live slots" if self.failed else "slots"
            raise ProblemError("num_replicas", f"must be >= the number of experts ({num_experts}), "
                               f"got {self.num_replicas} {what}")
        if G > num_experts:
            raise ProblemError("num_groups", f"must be <= the number of experts ({num_experts}), got {G}")
        return G

    def resolve_policy(self, policy: str, num_experts: int, num_groups: int) -> str:
        """The policy that will run: ``auto`` follows :func:`auto_policy`. Raises
        :class:`ProblemError` when a requested or auto-selected hierarchical policy cannot
        be built for this shape. A heterogeneous cluster plans globally (``auto``)."""
        if policy not in POLICIES:
            raise ProblemError("policy", f"must be one of {', '.join(POLICIES)}, got {policy!r}")
        N, P = self.num_nodes, self.num_gpus
        if policy == "auto":
            policy = auto_policy(num_groups, N) if self.homogeneous else "global"
        if policy == "hierarchical":
            if not self.homogeneous:
                raise ProblemError("policy", "the hierarchical policy needs identical GPUs (speed 1, "
                                   "the same slot count each); use the global policy")
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

    def as_dict(self) -> dict[str, Any]:
        """Plain data; the per-GPU lists only where they differ from the homogeneous default."""
        out: dict[str, Any] = {"num_replicas": self.num_replicas, "num_nodes": self.num_nodes,
                               "num_gpus": self.num_gpus}
        if not self.uniform_speed:
            out["gpu_speed"] = list(self.gpu_speed)
        if not self.uniform_slots:
            out["gpu_slots"] = list(self.gpu_slots)
        return out

    def describe(self) -> str:
        """One line for captions and reports."""
        N, P, R = self.num_nodes, self.num_gpus, self.num_replicas
        live = [c for c in self.gpu_slots if c > 0]
        each = f"{min(live)}" if min(live) == max(live) else f"{min(live)}-{max(live)}"
        per = "GPU" if self.uniform_slots else "live GPU"
        text = f"{N} node(s) x {P // N} GPUs = {P} GPUs, {R} slots ({each} per {per})"
        if self.failed:
            text += f", failed GPU(s) {','.join(map(str, self.failed))}"
        if not self.uniform_speed:
            live = [self.gpu_speed[g] for g in self.live_gpus]
            each = f"speed {min(live):g}" if min(live) == max(live) else f"speeds {min(live):g}-{max(live):g}"
            text += f", {each} (total {self.total_speed:g})"
        return text

    @property
    def id(self) -> str:
        base = cluster_id(self.num_nodes, self.num_gpus, self.num_replicas)
        if self.homogeneous:
            return base
        # per-GPU details in a short digest: ids stay readable and distinct
        digest = hashlib.sha1(repr((self.gpu_speed, self.gpu_slots)).encode()).hexdigest()[:8]
        return f"{base}-het{digest}"


def _per_gpu(value: Any, param: str, num_gpus: int, *, integer: bool) -> list:
    """One number per GPU: a sequence of ``num_gpus`` numbers (a scalar means the same for all)."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, (str, bytes, dict, set, frozenset)) or isinstance(value, bool):
        # a dict or set would be read as its keys, in no particular order
        raise ProblemError(param, f"must be {num_gpus} numbers, one per GPU, got {type(value).__name__} {value!r:.60}")
    if isinstance(value, numbers.Real):
        value = [value] * num_gpus
    try:
        items = list(value)
    except TypeError:
        raise ProblemError(param, f"must be {num_gpus} numbers, one per GPU, got {value!r}") from None
    if len(items) != num_gpus:
        raise ProblemError(param, f"must give one value per GPU ({num_gpus}), got {len(items)}")
    out = []
    for g, v in enumerate(items):
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise ProblemError(param, f"GPU {g}: must be a number, got {v!r}")
        if integer:
            if not (isinstance(v, numbers.Integral) or float(v).is_integer()):
                raise ProblemError(param, f"GPU {g}: slot counts must be whole numbers, got {v!r}")
            v = int(v)
            if v < 0:
                raise ProblemError(param, f"GPU {g}: must be >= 0 (0 = failed or drained), got {v}")
            if v > MAX_REPLICAS:
                raise ProblemError(param, f"GPU {g}: must be <= {MAX_REPLICAS}, got {v}")
        else:
            v = float(v)
            if not math.isfinite(v) or v <= 0:
                raise ProblemError(param, f"GPU {g}: speeds must be finite and > 0, got {v!r} "
                                   "(mark a dead GPU with failed instead)")
            if not MIN_SPEED <= v <= MAX_SPEED:
                raise ProblemError(param, f"GPU {g}: speeds must be in [{MIN_SPEED:g}, {MAX_SPEED:g}], got {v!r} "
                                   "(a relative figure: 1 for the reference GPU)")
        out.append(v)
    if not integer and max(out) > MAX_SPEED_RATIO * min(out):
        raise ProblemError(param, f"the fastest GPU ({max(out):g}) is more than {MAX_SPEED_RATIO:g} times the "
                           f"slowest ({min(out):g}); mark a GPU that barely works with failed instead")
    return out


def _gpu_ids(value: Any, num_gpus: int) -> list[int]:
    """Distinct GPU ids in [0, num_gpus) (None or empty: none)."""
    if value is None:
        return []
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, (str, bytes, bool)) or isinstance(value, numbers.Real):
        value = [value]
    out: list[int] = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise ProblemError("failed", f"GPU ids must be integers, got {v!r}")
        v = int(v)
        if not 0 <= v < num_gpus:
            raise ProblemError("failed", f"GPU ids must be in [0, {num_gpus}), got {v}")
        if v in out:
            raise ProblemError("failed", f"GPU {v} is listed twice")
        out.append(v)
    return out


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
    node_speeds: tuple[float, ...] = ()   # mixed pools: relative speed of each node's GPUs

    def replicas(self, num_experts: int) -> int:
        """Slots for ``num_experts`` experts: the smallest multiple of the GPUs holding every
        expert plus the spare slots."""
        return slots_for(num_experts, self.gpus, self.spare_per_gpu)

    def cluster(self, num_experts: int) -> Cluster:
        speed = None
        if self.node_speeds:
            per_node = self.gpus // self.nodes
            speed = [s for s in self.node_speeds for _ in range(per_node)]
        return Cluster(self.nodes, self.gpus, self.replicas(num_experts), gpu_speed=speed)


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
    # Mixed pools: H200 nodes beside H100 ones. Decode is memory-bound and H200's HBM3e
    # gives about 4.8 / 3.35 = 1.4x the bandwidth, hence speed 1.4 (a relative figure:
    # measure your own pool and give --gpu-speed).
    ClusterPreset("mixed-2x8", "Mixed pool: 1 H100 node + 1 H200 node (speed 1.4)", 2, 16,
                  node_speeds=(1.0, 1.4)),
    ClusterPreset("mixed-4x8", "Mixed pool: 2 H100 nodes + 2 H200 nodes (speed 1.4)", 4, 32,
                  node_speeds=(1.0, 1.0, 1.4, 1.4)),
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


def dense_rows(model: str | None, num_layers: int | None, dropped: int = 0) -> int:
    """Dense-layer rows before the MoE layers in an engine's per-layer map (SGLang's, TensorRT-LLM's
    keys) of a plan for ``num_layers`` MoE layers: the model preset's dense layers when the
    loads are the whole model's MoE layers (engines count them), else the leading all-zero
    layers ``dropped`` from the loads' file. The one dense-layer rule of the CLI's and the app's
    exports; a map read back for loads keeps its last rows, one per MoE layer
    (:func:`solvers.workloads.exporters.read_plan_for_loads`)."""
    preset = MODELS.get(model or "")
    return preset.dense_layers if preset is not None and num_layers == preset.num_layers else dropped


def get_cluster(name: str) -> ClusterPreset:
    """The cluster shape named ``name`` (a key of :data:`CLUSTERS`); unknown names raise OptionError."""
    if not isinstance(name, str) or name not in CLUSTERS:
        raise OptionError("shape", f"unknown cluster shape {name!r}; choose one of {', '.join(CLUSTERS)}")
    return CLUSTERS[name]


def shape_name(num_nodes: int, num_gpus: int) -> str:
    """The :data:`CLUSTERS` name of these nodes and GPUs, or ``N<n>xP<p>`` for an ad-hoc shape."""
    preset = next((c for c in CLUSTERS.values()
                   if (c.nodes, c.gpus) == (num_nodes, num_gpus) and not c.node_speeds), None)
    return preset.name if preset is not None else f"N{num_nodes}xP{num_gpus}"
