"""Reading loads: the one reader of every front end (the CLI, the app, datasets, benchmarks).

    loads = read_loads("dump_dir/", format="sglang")        # a path, glob or dataset name
    loads = read_loads(uploaded_bytes, name="run.json")     # bytes (the app's uploads)
    loads = read_loads(open("x.npz", "rb"), format="npz")   # a binary file object
    loads.weights   # [moe_layers, experts] summed over the window of steps
    loads.trace     # [steps, moe_layers, experts] of the window (one step for a plain matrix)

A ``--loads`` spec is, in order: an existing file, directory or glob pattern (read by
:mod:`solvers.workloads.importers`: SGLang dumps, vLLM JSON histories (streamed), Megatron
per-rank ``.npz``, CSV, ``.npz``, ``.pt``, JSON), else the name of a shipped dataset
(``datasets/catalog.json``). ``FORMAT:SPEC`` forces a format (``vllm:run.json``); ``SPEC@A:B``
keeps steps A..B-1 of a trace (Python slice bounds, either may be omitted), so one can plan
on ``NAME@0:12`` and score on ``NAME@12:24`` (out of sample).

Engines count dense layers in their per-layer dumps (SGLang's recorder writes 61 rows for
DeepSeek-V3, the first 3 all zero). Leading all-zero layers are detected and dropped, so
only MoE layers are planned and scored (zero rows would flatter the mean imbalance); the
count is kept (``dense_layers``) so exported maps get the engine's row count back
(:func:`solvers.cluster.dense_rows`, the one rule).
"""
from __future__ import annotations

import glob
import math
import os
import re
import tempfile
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import torch

from .errors import LoadFileError
from .filecheck import input_kind
from .workloads.catalog import dataset_names, dataset_path, list_datasets
from .workloads.formats import FORMATS, suffix_of
from .workloads.importers import read_raw
from .workloads.trace import Loads


_TEMP_PATH = re.compile(r"\S*eplb-loads-[^/\s]+/upload\.\w+")     # the copy of bytes read


_RANGE = re.compile(r"^(?P<spec>.+)@(?P<start>-?\d*):(?P<stop>-?\d*)$")


def split_range(spec: str | Path) -> tuple[str, slice | None]:
    """(spec, step slice or None) for ``SPEC@A:B`` (a real path containing '@' wins)."""
    text = str(spec)
    m = _RANGE.match(text)
    if m is None or input_kind(text) not in ("missing", "too_long", "bad"):
        return text, None
    to_int = lambda v: int(v) if v else None  # noqa: E731
    return m["spec"], slice(to_int(m["start"]), to_int(m["stop"]))


def _resolve(text: str) -> tuple[str | None, str | list[Path], str | None]:
    """(forced format or None, what to read: the spec itself or [the dataset file], the
    dataset name or None)."""
    head, sep, rest = text.partition(":")                   # FORMAT:SPEC forces a format
    fmt, text = (head, rest) if sep and head in FORMATS and input_kind(text) == "missing" else (None, text)
    kind = input_kind(text)                                 # never raises (a name too long, a FIFO)
    if kind == "too_long":
        raise LoadFileError("loads", f"{text[:60]}...({len(text)} characters): the name is too long for the "
                            "file system")
    if kind not in ("missing", "bad") or (any(c in text for c in "*?[") and bool(glob.glob(text))):
        return fmt, text, None
    known = dataset_names()
    if text in known:
        return fmt, [dataset_path(text)], text
    hint = f"; shipped datasets: {', '.join(known)}" if known else ""
    raise LoadFileError("loads", f"{text}: no such file or dataset{hint}")


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


def read_loads(source: str | os.PathLike | bytes | BinaryIO, format: str | None = None, *,
               steps: Any = None, name: str | None = None, drop_dense: bool = True) -> Loads:
    """:class:`Loads` from a path or spec (see the module docstring: files, per-rank
    directories, globs, shipped dataset names, ``FORMAT:SPEC``, ``SPEC@A:B``), bytes, or a
    binary file object. The one loads reader of every front end: leading all-zero (dense)
    layers are dropped the same way; a dataset gets its catalog's model and groups.

    format: one of ``solvers.workloads.formats.FORMATS`` (default: detected from the name
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
            try:
                loads = read_loads(path, format, steps=steps, drop_dense=drop_dense)
            except LoadFileError as exc:          # name the user's file, not the temporary copy
                raise LoadFileError(exc.param, _TEMP_PATH.sub(name or "upload", str(exc).split(": ", 1)[1])) from None
        loads.source, loads.path = name or "upload", None
        return loads
    if not isinstance(source, (str, os.PathLike)):
        raise LoadFileError("source", f"must be a path, bytes or a binary file object, got {type(source).__name__}")
    spec = str(source)
    base, spec_steps = split_range(spec)
    if spec_steps is not None and steps is not None:
        raise LoadFileError("steps", f"{spec}: give the window either as SPEC@A:B or as steps=, not both")
    fmt, target, dataset = _resolve(base)
    param = "loads" if spec_steps is not None else "steps"       # the window's origin: SPEC@A:B or steps=
    raw, meta = read_raw(target, format or fmt)
    raw, scale = rescale_extreme(raw, spec)
    if scale:
        meta = {**meta, "rescaled_by_pow2": scale}
    dense = leading_zero_layers(raw) if drop_dense else 0
    if raw.dim() == 3:
        total = raw.shape[0]
        window = _window(spec_steps if spec_steps is not None else steps)
        start, stop, stride = window.indices(total)
        if stride != 1:
            raise LoadFileError(param, "a window of steps must be contiguous")
        trace = raw[start:stop, dense:]
        if trace.shape[0] == 0:
            asked = f"{'' if window.start is None else window.start}:{'' if window.stop is None else window.stop}"
            raise LoadFileError(param, f"{spec}: the window {asked} selects no step: the trace has {total} "
                                f"steps (0..{total - 1})")
    else:
        if spec_steps is not None or steps is not None:
            raise LoadFileError(param, f"{spec}: a window of steps needs [steps, layers, experts] loads, "
                                f"got shape {tuple(raw.shape)}")
        # a plain matrix is one step (its weights: float64, as a trace's sum)
        total, trace = None, raw[dense:].unsqueeze(0)
        trace = trace if trace.is_floating_point() else trace.to(torch.float64)
    entry: dict[str, Any] = {}
    if dataset is not None:
        meta = {**meta, "dataset": dataset}
        entry = next((e for e in list_datasets() if e.get("name") == dataset), {})
    files = target if isinstance(target, list) else [Path(target)]
    return Loads(trace, meta, spec, str(meta.get("format", format or fmt or "?")), entry.get("model"),
                 entry.get("num_groups"), dense, raw.shape[-2], total, total is None,
                 files[0] if len(files) == 1 and files[0].is_file() else None)


def load_dataset(name: str) -> Loads:
    """The shipped dataset ``name`` as :class:`Loads` (``[steps, layers, experts]``, with its
    catalog's model and groups), read as ``--loads NAME`` is; unknown names raise OptionError
    listing the known ones."""
    dataset_path(name)
    return read_loads(name)


__all__ = ["Loads", "read_loads", "load_dataset", "leading_zero_layers", "split_range"]
