"""Where the app's loads come from: a shipped dataset, a generated trace, or an upload.

Everything here is plain Python (no Streamlit), so tests can call it directly. A source
becomes a :class:`Loads`: a trace ``[steps, layers, experts]`` plus what is known about it
(model preset, expert groups, dense layers dropped), and a content hash that keys caches.
"""
from __future__ import annotations

import hashlib
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from solvers.errors import LoadFileError, OptionError

DEFAULT_DATASET = "deepseek-v3-skewed"
UPLOAD_SUFFIXES = ("npz", "pt", "pth", "json", "csv")


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


def _drop_dense(trace: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(trace without its leading all-zero layers, how many were dropped). trace: [T, L, E]."""
    active = trace.abs().sum(dim=(0, 2)) > 0                     # [L]
    if not bool(active.any()):
        raise LoadFileError("loads", "every layer is all zeros: nothing to balance")
    first = int(torch.nonzero(active)[0])
    return trace[:, first:], first


def _as_trace(arr: torch.Tensor) -> torch.Tensor:
    return arr.unsqueeze(0) if arr.dim() == 2 else arr


def from_dataset(name: str) -> Loads:
    """A shipped dataset by name (``eplb datasets`` lists them)."""
    from solvers.workloads.catalog import list_datasets, load_dataset

    entry = next((e for e in list_datasets() if e.get("name") == name), None)
    if entry is None:
        raise OptionError("dataset", f"unknown dataset {name!r}")
    trace = load_dataset(name)
    return Loads(trace.loads, name, entry.get("model"), entry.get("num_groups"), 0, "npz", dict(trace.meta))


def from_generator(model: str, scenario: str, steps: int, seed: int, tokens_per_step: int,
                   num_layers: int | None = None) -> Loads:
    """A seeded synthetic trace (:func:`solvers.workloads.generators.generate`)."""
    from solvers.workloads.generators import generate

    trace = generate(model, scenario, steps=steps, seed=seed, tokens_per_step=tokens_per_step,
                     num_layers=num_layers)
    name = f"{model} {scenario} ({steps} steps, seed {seed})"
    return Loads(trace.loads, name, model, trace.meta.get("num_groups"), 0, "generated", dict(trace.meta))


def from_upload(filename: str, data: bytes, format: str | None = None) -> Loads:
    """An uploaded loads file in any importer format (SGLang ``.pt``, vLLM JSON, Megatron
    ``.npz``, CSV, ``.npz``, ``.pt``, JSON). Leading all-zero (dense) layers are dropped."""
    suffix = Path(filename).suffix.lower()
    if suffix.lstrip(".") not in UPLOAD_SUFFIXES:
        raise LoadFileError("loads", f"{filename}: unsupported file type {suffix or '(none)'}; "
                            f"use one of {', '.join('.' + s for s in UPLOAD_SUFFIXES)}")
    if not data:
        raise LoadFileError("loads", f"{filename}: the file is empty")
    arr, meta = _read_bytes(filename, data, format)
    trace = _as_trace(arr)
    if trace.dim() != 3:
        raise LoadFileError("loads", f"{filename}: expected [layers, experts] or [steps, layers, experts], "
                            f"got shape {tuple(arr.shape)}")
    trace, dense = _drop_dense(trace)
    model = meta.get("model") if isinstance(meta.get("model"), str) else None
    groups = meta.get("num_groups") if isinstance(meta.get("num_groups"), int) else None
    return Loads(trace, filename, model, groups, dense, meta.get("format"), meta)


def _read_bytes(filename: str, data: bytes, format: str | None) -> tuple[torch.Tensor, dict[str, Any]]:
    """The importers read files: the upload goes through a private temporary file of the
    same suffix (suffixes drive format detection)."""
    from solvers.workloads.importers import read_loads

    with tempfile.TemporaryDirectory(prefix="eplb-upload-") as tmp:
        path = Path(tmp) / ("upload" + Path(filename).suffix.lower())
        path.write_bytes(data)
        try:
            arr, meta = read_loads(path, format)
        except LoadFileError as exc:      # name the user's file, not the temporary one
            message = str(exc).split(": ", 1)[1].replace(str(path), filename)
            raise LoadFileError(exc.param, message) from None
    meta["source"] = filename
    return arr, meta
