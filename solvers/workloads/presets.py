"""TEMPORARY alias (removed when the CLI package lands): the presets live in solvers.cluster."""
from ..cluster import MODELS as PRESETS, ModelPreset, get_model as get_preset  # noqa: F401
