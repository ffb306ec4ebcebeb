"""The names of the loads and plan formats, and the one table of loads-file suffixes
(plain Python, no torch: the ``eplb`` parser and the app's upload widget read them).
"""
from __future__ import annotations

# Loads formats read by solvers.workloads.importers (docs/formats.md).
FORMATS = ("sglang", "vllm", "megatron", "trtllm", "vllm_eplb", "csv", "npz", "pt", "json")

# A loads file's suffix -> the container format it holds; the engines' dumps are told apart by
# content (SGLang: a .pt dict, vLLM: a .json history, Megatron: per-rank .npz).
# A .safetensors file is TensorRT-LLM's expert statistics or vLLM's saved EPLB load window,
# told apart by its tensor names.
SUFFIX_FORMAT = {".npz": "npz", ".pt": "pt", ".pth": "pt", ".json": "json", ".csv": "csv",
                 ".safetensors": "safetensors"}
_CONTAINER = {"sglang": "pt", "vllm": "json", "megatron": "npz", "trtllm": "safetensors",
              "vllm_eplb": "safetensors"}

# Formats traces are written in (solvers.workloads.exporters.write_trace) and plans exported in.
TRACE_FORMATS = ("npz", "pt", "vllm", "sglang", "csv")
PLAN_FORMATS = ("eplb", "sglang", "trtllm", "csv")


def suffix_of(format: str | None) -> str:
    """The file suffix a loads format is read from ('' for None or an unknown name)."""
    container = _CONTAINER.get(format or "", format)
    return next((s for s, f in SUFFIX_FORMAT.items() if f == container), "")


def trace_format_of(suffix: str) -> str | None:
    """The format a trace written to a file with this suffix gets (.json: a vLLM history)."""
    fmt = SUFFIX_FORMAT.get(suffix.lower())
    return "vllm" if fmt == "json" else fmt
