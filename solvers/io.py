"""Library I/O for front ends: read loads from anything a user has, in one call.

    info = read_loads("dump_dir/", format="sglang")        # a path, glob or dataset name
    info = read_loads(uploaded_bytes, name="run.json")     # bytes (the app's uploads)
    info = read_loads(open("x.npz", "rb"), format="npz")   # a binary file object
    info.weights   # [moe_layers, experts] summed over the window of steps
    info.trace     # [steps, moe_layers, experts] of the window (None for a plain matrix)

Engines count dense layers in their per-layer dumps (SGLang's recorder writes 61 rows for
DeepSeek-V3, the first 3 all zero). Leading all-zero layers are detected and dropped, so
only MoE layers are planned and scored (zero rows would flatter the mean imbalance); the
count is kept (``dense_layers``) so exported maps get the engine's row count back.
"""
from __future__ import annotations

import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import torch

from .errors import LoadFileError
from .loadfiles import LoadsSpec, resolve_spec
from .workloads.formats import FORMATS, suffix_of
from .workloads.importers import read_loads as read_raw


@dataclass(frozen=True)
class LoadsInfo:
    """What :func:`read_loads` found.

    weights: [layers, experts] float loads of the MoE layers, summed over the window.
    trace: [steps, layers, experts] of the window when the source has steps, else None.
    format: the detected (or given) format; source: what was read.
    file_layers: rows per step in the source (the engine's layer count, dense included).
    dense_layers: leading all-zero layers dropped (0 when none, or when every layer is zero).
    total_steps: steps in the source (None for a plain matrix); window: the steps kept.
    path: the one file read (for checksums; None for several files or bytes).
    """

    weights: torch.Tensor
    trace: torch.Tensor | None
    format: str
    source: str
    file_layers: int
    dense_layers: int
    total_steps: int | None
    window: tuple[int, int] | None
    meta: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None

    @property
    def num_layers(self) -> int:
        """MoE layers planned (rows of ``weights``)."""
        return self.weights.shape[0]

    @property
    def num_experts(self) -> int:
        return self.weights.shape[1]

    def summary(self) -> dict[str, Any]:
        return {"format": self.format, "source": self.source, "layers": self.num_layers,
                "experts": self.num_experts, "file_layers": self.file_layers, "dense_layers": self.dense_layers,
                "steps": self.total_steps, "window": list(self.window) if self.window else None}


def leading_zero_layers(loads: torch.Tensor) -> int:
    """Leading layers whose loads are all zero. loads: [..., layers, experts]. Every layer
    zero gives 0 (nothing to tell dense from MoE)."""
    per_layer = loads.reshape(-1, *loads.shape[-2:]).abs().sum(dim=(0, 2))        # [layers]
    nonzero = (per_layer > 0).nonzero()
    return int(nonzero[0]) if len(nonzero) else 0


# Float loads whose largest value lies outside [2**-100, 2**100] are multiplied by a power of
# two that brings it into [0.5, 1): exact (only the exponents change), and every ratio the
# project reports is scale-free. Far outside, sums underflow to denormals or overflow to inf.
_TINY, _HUGE = 2.0**-100, 2.0**100


def rescale_extreme(raw: torch.Tensor, source: str) -> tuple[torch.Tensor, int]:
    """(loads, k): loads x 2**k when their largest value is denormal-small or overflow-large
    (k = 0 otherwise). Refused (:class:`LoadFileError`) when the range is so wide that the
    scaling would lose a value (values below 2**-1074 of the largest)."""
    if not raw.is_floating_point() or raw.numel() == 0:
        return raw, 0
    top = float(raw.max())
    if top <= 0 or _TINY <= top <= _HUGE:
        return raw, 0
    k = -math.frexp(top)[1]                         # top * 2**k in [0.5, 1)
    arr = raw.detach().cpu().to(torch.float64).numpy()
    scaled = np.ldexp(arr, k)
    if not np.array_equal(np.ldexp(scaled, -k), arr):
        raise LoadFileError("loads", f"{source}: loads span more than float64's range (largest {top:.3g}, "
                            f"values below 2**-1074 of it would be lost by rescaling)")
    return torch.from_numpy(scaled), k


def _window(steps: Any) -> slice:
    if steps is None:
        return slice(None)
    if isinstance(steps, slice):
        return steps
    if isinstance(steps, (tuple, list)) and len(steps) == 2:
        return slice(steps[0], steps[1])
    raise LoadFileError("steps", f"must be a slice or (start, stop), got {steps!r}")


def read_loads(source: str | os.PathLike | LoadsSpec | bytes | BinaryIO, format: str | None = None, *,
               steps: Any = None, name: str | None = None, drop_dense: bool = True) -> LoadsInfo:
    """Loads from a path / spec (see ``--loads``: files, per-rank directories, globs, shipped
    dataset names, ``FORMAT:SPEC``, ``SPEC@A:B``), a spec already resolved
    (:func:`solvers.loadfiles.resolve_spec`), bytes, or a binary file object. The one loads
    reader of every front end: leading all-zero (dense) layers are dropped the same way.

    format: one of ``solvers.workloads.importers.FORMATS`` (default: detected from the name
    and content). steps: a slice or (start, stop) of steps to keep (the planning window).
    name: the original file name of bytes or a file object (its suffix helps detection).
    drop_dense: drop leading all-zero layers (engines' dense layers).
    """

    if format is not None and format not in FORMATS:
        raise LoadFileError("format", f"must be one of {', '.join(FORMATS)}, got {format!r}")
    if isinstance(source, (bytes, bytearray, memoryview)) or hasattr(source, "read"):
        data = bytes(source) if not hasattr(source, "read") else source.read()
        if not isinstance(data, (bytes, bytearray)):
            raise LoadFileError("source", "a file object must be opened in binary mode")
        if not data:
            raise LoadFileError("source", f"{name or 'upload'}: the file is empty")
        suffix = Path(name).suffix if name else suffix_of(format)
        if not suffix:
            raise LoadFileError("format", "bytes need a format or a file name with a suffix")
        with tempfile.TemporaryDirectory(prefix="eplb-loads-") as tmp:
            path = Path(tmp) / f"upload{suffix.lower()}"
            path.write_bytes(data)
            info = read_loads(path, format, steps=steps, drop_dense=drop_dense)
        return LoadsInfo(info.weights, info.trace, info.format, name or "upload", info.file_layers,
                         info.dense_layers, info.total_steps, info.window, info.meta)
    if not isinstance(source, (str, os.PathLike, LoadsSpec)):
        raise LoadFileError("source", f"must be a path, bytes or a binary file object, got {type(source).__name__}")
    spec = source if isinstance(source, LoadsSpec) else resolve_spec(source)
    spec_steps = spec.steps
    if spec_steps is not None and steps is not None:
        raise LoadFileError("steps", f"{spec.spec}: give the window either as SPEC@A:B or as steps=, not both")
    source = spec.spec
    param = "loads" if spec_steps is not None else "steps"       # the window's origin: SPEC@A:B or steps=
    raw, meta = read_raw(spec.target, format or spec.format)
    fmt_used = meta.get("format", format or spec.format or "?")
    raw, scale = rescale_extreme(raw, str(spec.spec))
    if scale:
        meta = {**meta, "rescaled_by_pow2": scale}
    dense = leading_zero_layers(raw) if drop_dense else 0
    file_layers = raw.shape[-2]
    if raw.dim() == 3:
        total = raw.shape[0]
        window = _window(spec_steps if spec_steps is not None else steps)
        start, stop, stride = window.indices(total)
        if stride != 1:
            raise LoadFileError(param, "a window of steps must be contiguous")
        trace = raw[start:stop, dense:]
        if trace.shape[0] == 0:
            asked = f"{'' if window.start is None else window.start}:{'' if window.stop is None else window.stop}"
            raise LoadFileError(param, f"{source}: the window {asked} selects no step: the trace has {total} "
                                f"steps (0..{total - 1})")
        weights = trace.sum(0)
        win = (start, stop)
    else:
        if spec_steps is not None or steps is not None:
            raise LoadFileError(param, f"{source}: a window of steps needs [steps, layers, experts] loads, "
                                f"got shape {tuple(raw.shape)}")
        trace, weights, total, win = None, raw[dense:], None, None
    if not weights.is_floating_point():
        weights = weights.to(torch.float64)
    return LoadsInfo(weights, trace, str(fmt_used), str(source), file_layers, dense, total, win, meta,
                     spec.single_file)


__all__ = ["LoadsInfo", "read_loads", "leading_zero_layers"]
