"""Workloads: synthetic load generators, importers of engines' dumps, plan exporters, datasets.

- :func:`generate` draws a seeded trace for a model preset (:data:`solvers.cluster.MODELS`) and a named
  scenario (:data:`SCENARIOS`); :class:`Loads` (the one loads type) holds ``[steps, layers, experts]``.
- :func:`windows` / :func:`out_of_sample_pairs` turn a trace into planning windows.
- :func:`read_trace` / :func:`read_weights` (format level, dense layers kept; the front ends'
  reader is :func:`solvers.io.read_loads`) import SGLang, vLLM, Megatron, CSV, npz, pt and
  JSON dumps; :func:`write_trace` writes traces, :func:`export_plan` writes plans for
  engines (SGLang, TensorRT-LLM, CSV, ours) and :func:`read_exported_plan` reads them back.
- :func:`load_dataset` / :func:`list_datasets`: the catalog shipped in ``datasets/``.

The names load on first use (PEP 562): the torch-free modules (:mod:`solvers.cluster`,
:mod:`.scenarios`, :mod:`.formats`) import without torch.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS: dict[str, str] = {
    "dataset_names": "catalog", "dataset_path": "catalog", "list_datasets": "catalog", "load_dataset": "..io",
    "export_plan": "exporters", "plan_to_sglang": "exporters", "plan_to_trtllm": "exporters",
    "read_exported_plan": "exporters", "write_trace": "exporters", "write_vllm_json": "exporters",
    "PLAN_FORMATS": "formats", "TRACE_FORMATS": "formats", "FORMATS": "formats",
    "generate": "generators",
    "LAWS": "scenarios", "SCENARIOS": "scenarios", "Scenario": "scenarios", "get_scenario": "scenarios",
    "detect_format": "importers", "iter_vllm_steps": "importers",
    "read_trace": "importers", "read_weights": "importers",
    "Loads": "trace", "Trace": "trace", "save_trace": "trace",
    "out_of_sample_pairs": "cuts", "windows": "cuts",
}

if TYPE_CHECKING:
    from .catalog import dataset_names, dataset_path, list_datasets
    from .exporters import (export_plan, plan_to_sglang, plan_to_trtllm, read_exported_plan, write_trace,
                            write_vllm_json)
    from .formats import FORMATS, PLAN_FORMATS, TRACE_FORMATS
    from .generators import generate
    from .importers import detect_format, iter_vllm_steps, read_trace, read_weights
    from .scenarios import LAWS, SCENARIOS, Scenario, get_scenario
    from .trace import Loads, Trace, save_trace
    from .cuts import out_of_sample_pairs, windows

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        where = _EXPORTS[name]                  # a module of this package, or "..io" (solvers.io)
        module = importlib.import_module(where if where.startswith(".") else f".{where}", __name__)
        value = globals()[name] = getattr(module, name)
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
