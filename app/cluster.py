"""The model presets as the app shows them (the presets themselves are :mod:`solvers.cluster`'s).

The sidebar offers the cluster shapes of :data:`solvers.cluster.CLUSTERS`; a shape fixes
nodes and GPUs, its slot count follows the shape's rule (every expert plus one spare slot
per GPU: DeepSeek-V3 prefill gets 256 + 32 = 288 slots on 32 GPUs).
"""
from __future__ import annotations

from solvers.cluster import MODELS, Cluster
from solvers.network import Network

DEFAULT_CLUSTER = "prefill-4x8"
CUSTOM = "Custom"


def with_network(cluster: Cluster, network: Network) -> Cluster:
    """The same GPUs, slots and speeds over ``network``."""
    return Cluster(cluster.num_nodes, cluster.num_gpus, gpu_speed=cluster.gpu_speed, gpu_slots=cluster.gpu_slots,
                   network=network)


def model_label(key: str) -> str:
    return MODELS[key].name if key in MODELS else key


def matching_models(num_experts: int) -> list[str]:
    """Preset keys whose expert count equals ``num_experts``."""
    return [k for k, p in MODELS.items() if p.num_experts == num_experts]


def expert_groups(file_groups: int | None, model: str | None) -> int:
    """Expert groups of some loads: what their file says, else the model preset's, else 1."""
    return int(file_groups or (MODELS[model].num_groups if model in MODELS else 1))


def expert_bytes(model: str | None) -> int | None:
    """Weight bytes of one routed expert of a model preset (None when unknown)."""
    preset = MODELS.get(model or "")
    return int(preset.expert_bytes) if preset is not None and preset.expert_bytes else None

