"""Where the app's loads come from: a shipped dataset, a generated trace, or an upload.

Everything here is plain Python (no Streamlit), so tests can call it directly. A source
becomes a :class:`Loads`: a trace ``[steps, layers, experts]`` plus what is known about it
(model preset, expert groups, dense layers dropped), and a content hash that keys caches.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from solvers.errors import LoadFileError, OptionError
from solvers.io import read_loads
from solvers.workloads.catalog import list_datasets
from solvers.workloads.formats import SUFFIX_FORMAT
from solvers.workloads.generators import generate
from solvers.workloads.importers import as_trace

DEFAULT_DATASET = "deepseek-v3-skewed"
UPLOAD_SUFFIXES = tuple(s.lstrip(".") for s in SUFFIX_FORMAT)       # the importers' one suffix table
_TEMP_PATH = re.compile(r"\S*eplb-loads-[^/\s]+/upload\.\w+")


@dataclass(frozen=True)
class Loads:
    """trace: [steps, layers, experts] (integer counts, or float weights as one step).

    name: what the user picked; model: a preset key when known; num_groups: expert groups
    when known; dense_layers: leading all-zero (dense) layers dropped from the file.
    """

    trace: torch.Tensor
    name: str
    model: str | None = None
    num_groups: int | None = None
    dense_layers: int = 0
    format: str | None = None
    meta: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def num_steps(self) -> int:
        return self.trace.shape[0]

    @property
    def num_layers(self) -> int:
        return self.trace.shape[1]

    @property
    def num_experts(self) -> int:
        return self.trace.shape[2]

    def window(self, start: int, stop: int) -> torch.Tensor:
        """weights: [layers, experts], the sum of steps ``start .. stop-1`` (float64)."""
        if not 0 <= start < stop <= self.num_steps:
            raise OptionError("window", f"must select steps within [0, {self.num_steps}), got {start}:{stop}")
        return self.trace[start:stop].sum(0).to(torch.float64)


def content_hash(*tensors: torch.Tensor) -> str:
    """SHA-256 of the tensors' values, shapes and dtypes (cache keys: same content, same key)."""
    h = hashlib.sha256()
    for t in tensors:
        t = t.detach().cpu().contiguous()
        h.update(f"{t.dtype}{tuple(t.shape)}".encode())
        h.update(t.numpy().tobytes())
    return h.hexdigest()


def from_dataset(name: str) -> Loads:
    """A shipped dataset by name (``eplb datasets`` lists them), read like every ``--loads``
    (:func:`solvers.io.read_loads`: leading all-zero layers dropped and counted)."""

    entry = next((e for e in list_datasets() if e.get("name") == name), None)
    if entry is None:
        raise OptionError("dataset", f"unknown dataset {name!r}")

    info = read_loads(name)
    trace = as_trace(info.trace if info.trace is not None else info.weights, info.meta)    # integer counts
    meta = {**trace.meta, "dataset": name}
    return Loads(trace.loads, name, entry.get("model"), entry.get("num_groups"), info.dense_layers, "npz", meta)


def from_generator(model: str, scenario: str, steps: int, seed: int, tokens_per_step: int,
                   num_layers: int | None = None) -> Loads:
    """A seeded synthetic trace (:func:`solvers.workloads.generators.generate`)."""

    trace = generate(model, scenario, steps=steps, seed=seed, tokens_per_step=tokens_per_step,
                     num_layers=num_layers)
    name = f"{model} {scenario} ({steps} steps, seed {seed})"
    return Loads(trace.loads, name, model, trace.meta.get("num_groups"), 0, "generated", dict(trace.meta))


def from_upload(filename: str, data: bytes, format: str | None = None) -> Loads:
    """An uploaded loads file in any importer format (SGLang ``.pt``, vLLM JSON, Megatron
    ``.npz``, CSV, ``.npz``, ``.pt``, JSON), read by :func:`solvers.io.read_loads`; leading
    all-zero (dense) layers are dropped and counted."""

    suffix = Path(filename).suffix.lower()
    if suffix.lstrip(".") not in UPLOAD_SUFFIXES:
        raise LoadFileError("loads", f"{filename}: unsupported file type {suffix or '(none)'}; "
                            f"use one of {', '.join('.' + s for s in UPLOAD_SUFFIXES)}")
    try:
        info = read_loads(data, format, name=filename)
    except LoadFileError as exc:          # name the user's file, not the reader's temporary copy
        raise LoadFileError(exc.param, _TEMP_PATH.sub(filename, str(exc).split(": ", 1)[1])) from None
    trace = info.trace if info.trace is not None else info.weights.unsqueeze(0)     # [T, L, E]
    meta = dict(info.meta)
    model = meta.get("model") if isinstance(meta.get("model"), str) else None
    groups = meta.get("num_groups") if isinstance(meta.get("num_groups"), int) else None
    return Loads(trace, filename, model, groups, info.dense_layers, info.format, meta)
