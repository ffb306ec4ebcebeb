"""Model shapes of public MoE models : what a generated trace looks like.

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
    dense_layers: leading dense (non-MoE) layers of the model, which engines still count in
    their per-layer maps (SGLang's recorder writes dense + MoE rows). expert_bytes: weight
    bytes of one routed expert (3 matrices hidden x expert-intermediate, in the dtype the
    model is usually served in), what one migration move transfers.
    """

    name: str
    num_layers: int
    num_experts: int
    num_groups: int
    top_k: int
    dense_layers: int = 0
    expert_bytes: int = 0

    @property
    def engine_layers(self) -> int:
        """Rows of an engine's per-layer map: dense + MoE layers."""
        return self.dense_layers + self.num_layers


# expert_bytes: DeepSeek-V3 and Kimi-K2 3 x 7168 x 2048 in FP8; Qwen3-235B 3 x 4096 x 1536,
# Mixtral 3 x 4096 x 14336 and OLMoE 3 x 2048 x 1024 in BF16.
PRESETS: dict[str, ModelPreset] = {
    "deepseek-v3": ModelPreset("DeepSeek-V3 / R1", 58, 256, 8, 8, dense_layers=3, expert_bytes=3 * 7168 * 2048),
    "qwen3-235b": ModelPreset("Qwen3-235B-A22B", 94, 128, 1, 8, expert_bytes=2 * 3 * 4096 * 1536),
    "mixtral-8x7b": ModelPreset("Mixtral-8x7B", 32, 8, 1, 2, expert_bytes=2 * 3 * 4096 * 14336),
    "olmoe-1b-7b": ModelPreset("OLMoE-1B-7B", 16, 64, 1, 8, expert_bytes=2 * 3 * 2048 * 1024),
    "kimi-k2": ModelPreset("Kimi-K2", 60, 384, 1, 8, dense_layers=1, expert_bytes=3 * 7168 * 2048),
}


def get_preset(model: str) -> ModelPreset:
    """The preset named ``model`` (a key of :data:`PRESETS`); unknown names raise OptionError."""
    if not isinstance(model, str) or model not in PRESETS:
        raise OptionError("model", f"unknown model preset {model!r}; choose one of {', '.join(PRESETS)}")
    return PRESETS[model]
