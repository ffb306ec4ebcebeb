"""Where the app's loads come from: a shipped dataset, a generated trace, or an upload.

Everything here is plain Python (no Streamlit), so tests can call it directly. Every source
becomes :class:`solvers.io.Loads`, the one loads type (a trace ``[steps, layers, experts]``
plus what is known about it: model preset, expert groups, dense layers dropped), read as the
CLI reads it (:func:`solvers.io.read_loads`; datasets by
:func:`solvers.io.load_dataset`); a content hash keys caches.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import torch

from solvers.errors import LoadFileError
from solvers.io import Loads, read_loads
from solvers.workloads.formats import SUFFIX_FORMAT

DEFAULT_DATASET = "deepseek-v3-skewed"
UPLOAD_SUFFIXES = tuple(s.lstrip(".") for s in SUFFIX_FORMAT)       # the importers' one suffix table


def content_hash(*tensors: torch.Tensor) -> str:
    """SHA-256 of the tensors' values, shapes and dtypes (cache keys: same content, same key)."""
    h = hashlib.sha256()
    for t in tensors:
        t = t.detach().cpu().contiguous()
        h.update(f"{t.dtype}{tuple(t.shape)}".encode())
        h.update(t.numpy().tobytes())
    return h.hexdigest()


def from_upload(filename: str, data: bytes, format: str | None = None) -> Loads:
    """An uploaded loads file in any importer format (SGLang ``.pt``, vLLM JSON, Megatron
    ``.npz``, CSV, ``.npz``, ``.pt``, JSON), read as ``--loads`` is."""

    suffix = Path(filename).suffix.lower()
    if suffix.lstrip(".") not in UPLOAD_SUFFIXES:
        raise LoadFileError("loads", f"{filename}: unsupported file type {suffix or '(none)'}; "
                            f"use one of {', '.join('.' + s for s in UPLOAD_SUFFIXES)}")
    return read_loads(data, format, name=filename)
