"""Cluster and model presets the app offers (DESIGN's public shapes), as plain data.

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

# Dense (non-MoE) layers before the first MoE layer: engines index layers in the full
# model, so exports offset the MoE layers by this much (DeepSeek-V3: first_k_dense_replace=3).
DENSE_LAYERS = {"deepseek-v3": 3, "kimi-k2": 1, "qwen3-235b": 0, "mixtral-8x7b": 0, "olmoe-1b-7b": 0}

# Bytes of one expert's weights (three hidden x intermediate matrices) in the dtype the
# model is usually served in: FP8 for DeepSeek-V3 and Kimi-K2, BF16 otherwise.
EXPERT_BYTES = {
    "deepseek-v3": 3 * 7168 * 2048,
    "kimi-k2": 3 * 7168 * 2048,
    "qwen3-235b": 3 * 4096 * 1536 * 2,
    "mixtral-8x7b": 3 * 4096 * 14336 * 2,
    "olmoe-1b-7b": 3 * 2048 * 1024 * 2,
}


def model_label(key: str) -> str:
    return PRESETS[key].name if key in PRESETS else key


def matching_models(num_experts: int) -> list[str]:
    """Preset keys whose expert count equals ``num_experts``."""
    return [k for k, p in PRESETS.items() if p.num_experts == num_experts]


def expert_bytes(model: str | None) -> int | None:
    preset = PRESETS.get(model or "")
    size = getattr(preset, "expert_bytes", None)     # a preset may carry its own size
    return int(size) if size else EXPERT_BYTES.get(model or "")
