"""Workloads: synthetic load generators, importers of engines' dumps, plan exporters, datasets.

- :func:`generate` draws a seeded trace for a model preset (:data:`PRESETS`) and a named
  scenario (:data:`SCENARIOS`); a :class:`Trace` holds loads ``[steps, layers, experts]``.
- :func:`windows` / :func:`out_of_sample_pairs` turn a trace into planning windows.
"""
from .generators import LAWS, SCENARIOS, Scenario, generate, get_scenario
from .presets import PRESETS, ModelPreset, get_preset
from .trace import Trace, save_trace
from .windows import out_of_sample_pairs, windows

__all__ = [
    "PRESETS", "ModelPreset", "get_preset", "SCENARIOS", "Scenario", "get_scenario", "LAWS",
    "generate", "Trace", "save_trace", "windows", "out_of_sample_pairs",
]
