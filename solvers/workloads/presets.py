"""Model shapes of public MoE models (DESIGN section 5): what a generated trace looks like.

A preset fixes the routing shape only (MoE layers, routed experts, expert groups, top-k);
the cluster (replicas, GPUs, nodes) is chosen separately when a trace is planned.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import OptionError


@dataclass(frozen=True)
class ModelPreset:
    """Routing shape of one MoE model.

    name: display name; num_layers: MoE layers; num_experts: routed experts per layer;
    num_groups: expert groups for group-limited routing (1 = none); top_k: experts per token.
    """

    name: str
    num_layers: int
    num_experts: int
    num_groups: int
    top_k: int


PRESETS: dict[str, ModelPreset] = {
    "deepseek-v3": ModelPreset("DeepSeek-V3 / R1", 58, 256, 8, 8),
    "qwen3-235b": ModelPreset("Qwen3-235B-A22B", 94, 128, 1, 8),
    "mixtral-8x7b": ModelPreset("Mixtral-8x7B", 32, 8, 1, 2),
    "olmoe-1b-7b": ModelPreset("OLMoE-1B-7B", 16, 64, 1, 8),
    "kimi-k2": ModelPreset("Kimi-K2", 60, 384, 1, 8),
}


def get_preset(model: str) -> ModelPreset:
    """The preset named ``model`` (a key of :data:`PRESETS`); unknown names raise OptionError."""
    if not isinstance(model, str) or model not in PRESETS:
        raise OptionError("model", f"unknown model preset {model!r}; choose one of {', '.join(PRESETS)}")
    return PRESETS[model]
