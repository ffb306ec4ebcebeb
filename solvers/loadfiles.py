"""Reading load files: ``[layers, experts]`` or ``[T, layers, experts]`` arrays.

Formats by extension: ``.npz`` (array ``loads``, ``weights`` or ``logical_count``, or the
only array), ``.pt`` (a tensor, or a dict holding one of those keys), ``.json`` (nested
lists, or an object with one of those keys), ``.csv`` (a layers x experts matrix, an
optional header row). A 3-D array is summed over its first axis (the planning window).
"""
from __future__ import annotations

import csv
import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .errors import LoadFileError

LOAD_KEYS = ("loads", "weights", "logical_count")
SUFFIXES = (".npz", ".pt", ".json", ".csv")


def _pick(mapping: dict, path: Path) -> Any:
    for key in LOAD_KEYS:
        if key in mapping:
            return mapping[key]
    if len(mapping) == 1:
        return next(iter(mapping.values()))
    raise LoadFileError("loads", f"{path}: no array named {', '.join(LOAD_KEYS)} "
                        f"(found {', '.join(map(str, mapping)) or 'nothing'})")


def _read_csv(path: Path) -> np.ndarray:
    with path.open(newline="") as fh:
        rows = [r for r in csv.reader(fh) if r and any(c.strip() for c in r)]
    if not rows:
        raise LoadFileError("loads", f"{path}: the CSV file is empty")
    try:
        [float(c) for c in rows[0]]
    except ValueError:
        rows = rows[1:]  # a header row
    try:
        data = [[float(c) for c in r] for r in rows]
    except ValueError as exc:
        raise LoadFileError("loads", f"{path}: non-numeric CSV cell ({exc})") from None
    widths = {len(r) for r in data}
    if len(widths) != 1:
        raise LoadFileError("loads", f"{path}: CSV rows have different lengths {sorted(widths)}")
    return np.asarray(data)


def read_array(path: str | Path) -> torch.Tensor:
    """The raw array in a loads file, as stored (2-D or 3-D, any numeric dtype)."""
    path = Path(path)
    if not path.is_file():
        raise LoadFileError("loads", f"{path}: no such file")
    suffix = path.suffix.lower()
    try:
        if suffix == ".npz":
            with np.load(path, allow_pickle=False) as npz:
                raw = _pick({k: npz[k] for k in npz.files}, path)
        elif suffix == ".pt":
            obj = torch.load(path, map_location="cpu", weights_only=True)
            raw = _pick(obj, path) if isinstance(obj, dict) else obj
        elif suffix == ".json":
            with path.open() as fh:
                obj = json.load(fh)
            raw = _pick(obj, path) if isinstance(obj, dict) else obj
        elif suffix == ".csv":
            raw = _read_csv(path)
        else:
            raise LoadFileError("loads", f"{path}: unknown format {suffix or '(no suffix)'}; "
                                f"use one of {', '.join(SUFFIXES)}")
    except LoadFileError:
        raise
    except (OSError, ValueError, EOFError, RuntimeError, zipfile.BadZipFile, json.JSONDecodeError,
            KeyError) as exc:
        raise LoadFileError("loads", f"{path}: cannot read {suffix} file ({type(exc).__name__}: {exc})") from None
    try:
        arr = raw if isinstance(raw, torch.Tensor) else torch.as_tensor(np.asarray(raw))
    except (ValueError, TypeError) as exc:
        raise LoadFileError("loads", f"{path}: not a rectangular numeric array ({exc})") from None
    if arr.dtype == torch.bool or arr.is_complex() or not (arr.is_floating_point() or arr.dtype in (
            torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)):
        raise LoadFileError("loads", f"{path}: loads must be real numbers, got {arr.dtype}")
    return arr


def read_weights(path: str | Path) -> torch.Tensor:
    """weights: [layers, experts] from a loads file (a 3-D ``[T, layers, experts]`` is summed over T).

    Values are checked later by :class:`solvers.Problem` (finite, non-negative).
    """
    arr = read_array(path)
    if arr.dim() == 3:
        arr = arr.sum(0)
    if arr.dim() != 2:
        raise LoadFileError("loads", f"{path}: expected [layers, experts] or [T, layers, experts], "
                            f"got shape {tuple(arr.shape)}")
    return arr
