"""Cluster and model presets the app offers (public model and cluster shapes), as plain data.

A cluster preset fixes nodes and GPUs; its slot count follows the benchmark's rule (the
smallest multiple of the GPU count holding every expert plus one spare slot per GPU:
DeepSeek-V3 prefill gets 256 + 32 = 288 slots on 32 GPUs).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from solvers.workloads.presets import PRESETS


@dataclass(frozen=True)
class ClusterPreset:
    label: str
    nodes: int
    gpus: int
    spare_per_gpu: int = 1

    def slots_per_gpu(self, num_experts: int) -> int:
        return math.ceil((num_experts + self.spare_per_gpu * self.gpus) / self.gpus)


CLUSTER_PRESETS: dict[str, ClusterPreset] = {p.label: p for p in (
    ClusterPreset("DeepSeek-V3 prefill: 4 nodes x 8 GPUs", 4, 32),
    ClusterPreset("Decode EP64: 8 nodes x 8 GPUs", 8, 64),
    ClusterPreset("Decode EP144: 18 nodes x 8 GPUs", 18, 144),
    ClusterPreset("One node of 8 GPUs", 1, 8),
)}
DEFAULT_CLUSTER = "DeepSeek-V3 prefill: 4 nodes x 8 GPUs"
CUSTOM = "Custom"

def model_label(key: str) -> str:
    return PRESETS[key].name if key in PRESETS else key


def matching_models(num_experts: int) -> list[str]:
    """Preset keys whose expert count equals ``num_experts``."""
    return [k for k, p in PRESETS.items() if p.num_experts == num_experts]


def expert_groups(file_groups: int | None, model: str | None) -> int:
    """Expert groups of some loads: what their file says, else the model preset's, else 1."""
    return int(file_groups or (PRESETS[model].num_groups if model in PRESETS else 1))


def expert_bytes(model: str | None) -> int | None:
    """Weight bytes of one routed expert of a model preset (None when unknown)."""
    preset = PRESETS.get(model or "")
    return int(preset.expert_bytes) if preset is not None and preset.expert_bytes else None


def dense_layers(model: str | None) -> int:
    """Dense layers before the first MoE layer (engines count them in per-layer maps)."""
    preset = PRESETS.get(model or "")
    return int(preset.dense_layers) if preset is not None else 0
