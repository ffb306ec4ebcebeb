"""Workloads: synthetic load generators, importers of engines' dumps, plan exporters, datasets.

- :func:`generate` draws a seeded trace for a model preset (:data:`solvers.cluster.MODELS`) and a named
  scenario (:data:`SCENARIOS`); a :class:`Trace` holds loads ``[steps, layers, experts]``.
- :func:`windows` / :func:`out_of_sample_pairs` turn a trace into planning windows.
- :func:`read_trace` / :func:`read_weights` import SGLang, vLLM, Megatron, CSV, npz, pt and
  JSON dumps; :func:`write_trace` writes traces, :func:`export_plan` writes plans for
  engines (SGLang, TensorRT-LLM, CSV, ours) and :func:`read_exported_plan` reads them back.
- :func:`load_dataset` / :func:`list_datasets`: the catalog shipped in ``datasets/``.
"""
from .catalog import dataset_names, dataset_path, list_datasets, load_dataset
from .exporters import (PLAN_FORMATS, TRACE_FORMATS, export_plan, plan_to_sglang, plan_to_trtllm,
                        read_exported_plan, write_trace, write_vllm_json)
from .generators import LAWS, SCENARIOS, Scenario, generate, get_scenario
from .importers import FORMATS, detect_format, iter_vllm_steps, read_loads, read_trace, read_weights
from .trace import Trace, save_trace
from .windows import out_of_sample_pairs, windows

__all__ = [
    "SCENARIOS", "Scenario", "get_scenario", "LAWS",
    "generate", "Trace", "save_trace", "windows", "out_of_sample_pairs",
    "FORMATS", "detect_format", "read_loads", "read_trace", "read_weights", "iter_vllm_steps",
    "PLAN_FORMATS", "TRACE_FORMATS", "export_plan", "read_exported_plan", "plan_to_sglang",
    "plan_to_trtllm", "write_trace", "write_vllm_json",
    "load_dataset", "list_datasets", "dataset_names", "dataset_path",
]
