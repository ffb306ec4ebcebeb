"""Reading ``--loads``: a file in any importer's format, several per-rank files, or a dataset name.

A spec is, in order: an existing file, directory or glob pattern (read by
:mod:`solvers.workloads.importers`: SGLang dumps, vLLM JSON histories (streamed),
Megatron per-rank ``.npz``, CSV, ``.npz``, ``.pt``, JSON), else the name of a shipped
dataset (``datasets/catalog.json``). ``FORMAT:SPEC`` forces a format (``vllm:run.json``);
``SPEC@A:B`` keeps steps A..B-1 of a trace (Python slice bounds, either may be omitted), so
one can plan on ``NAME@0:12`` and score on ``NAME@12:24`` (out of sample).
A 3-D ``[T, layers, experts]`` array is summed over its first axis (the planning window).
"""
from __future__ import annotations

import glob
import re
from pathlib import Path

import torch

from .errors import LoadFileError

LOAD_KEYS = ("loads", "weights", "logical_count")
SUFFIXES = (".npz", ".pt", ".json", ".csv")


def _split_format(spec: str | Path) -> tuple[str | None, str]:
    """(forced format or None, the rest) for ``FORMAT:SPEC``."""
    from .workloads.importers import FORMATS

    text = str(spec)
    head, sep, rest = text.partition(":")
    if sep and head in FORMATS and not Path(text).exists():
        return head, rest
    return None, text


_RANGE = re.compile(r"^(?P<spec>.+)@(?P<start>-?\d*):(?P<stop>-?\d*)$")


def _split_range(spec: str | Path) -> tuple[str, slice | None]:
    """(spec, step slice or None) for ``SPEC@A:B`` (a real path containing '@' wins)."""
    text = str(spec)
    m = _RANGE.match(text)
    if m is None or Path(text).exists():
        return text, None
    to_int = lambda v: int(v) if v else None  # noqa: E731
    return m["spec"], slice(to_int(m["start"]), to_int(m["stop"]))


def _take_steps(arr: torch.Tensor, steps: slice, spec: str | Path) -> torch.Tensor:
    if arr.dim() != 3:
        raise LoadFileError("loads", f"{spec}: a step range needs [steps, layers, experts] loads, "
                            f"got shape {tuple(arr.shape)}")
    out = arr[steps]
    if out.shape[0] == 0:
        raise LoadFileError("loads", f"{spec}: the step range selects no step of {arr.shape[0]}")
    return out


def _is_files(text: str) -> bool:
    return Path(text).exists() or (any(c in text for c in "*?[") and bool(glob.glob(text)))


def resolve_loads(spec: str | Path) -> tuple[str | None, str | list[Path]]:
    """(format or None, what to read: the spec itself, or the dataset file for a name)."""
    from .workloads.catalog import dataset_names, dataset_path

    fmt, text = _split_format(spec)
    if _is_files(text):
        return fmt, text
    if text in dataset_names():
        return fmt, [dataset_path(text)]
    known = dataset_names()
    hint = f"; shipped datasets: {', '.join(known)}" if known else ""
    raise LoadFileError("loads", f"{text}: no such file or dataset{hint}")


def loads_source(spec: str | Path) -> Path | None:
    """The single file a ``--loads`` spec reads (for provenance checksums), or None when it
    reads several files."""
    _, target = resolve_loads(_split_range(spec)[0])
    if isinstance(target, list):
        return target[0] if len(target) == 1 else None
    path = Path(target)
    return path if path.is_file() else None


def read_array(path: str | Path) -> torch.Tensor:
    """The raw array a loads spec holds, as stored (2-D or 3-D, any real dtype)."""
    from .workloads.importers import read_loads

    text, steps = _split_range(path)
    fmt, target = resolve_loads(text)
    arr = read_loads(target, fmt)[0]
    return arr if steps is None else _take_steps(arr, steps, path)


def read_weights(path: str | Path) -> torch.Tensor:
    """weights: [layers, experts] from a loads spec (a 3-D ``[T, layers, experts]`` is summed over T).

    Values are checked later by :class:`solvers.Problem` (finite, non-negative).
    """
    from .workloads.importers import read_weights as _read_weights

    text, steps = _split_range(path)
    if steps is not None:
        arr = read_array(path).sum(0)
    else:
        fmt, target = resolve_loads(text)
        arr = _read_weights(target, fmt)
    if arr.dim() != 2:
        raise LoadFileError("loads", f"{path}: expected [layers, experts] or [T, layers, experts], "
                            f"got shape {tuple(arr.shape)}")
    return arr
