"""What a ``--loads`` spec names, torch-free: ``[FORMAT:]PATH|GLOB|DATASET[@A:B]``.

The command line resolves a spec here before it imports torch, so a misspelt file is
refused at once; :func:`solvers.io.read_loads` resolves it the same way before reading.
The catalog of shipped datasets (``datasets/catalog.json``) is read here too.
"""
from __future__ import annotations

import functools
import glob
import json
import os
import re
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import LoadFileError
from ..paths import input_kind
from .formats import FORMATS

CATALOG_FILE = "catalog.json"
PACKAGE_DATA = "data"   # solvers/workloads/data -> ../../datasets in the repository

_RANGE = re.compile(r"^(?P<spec>.+)@(?P<start>-?\d*):(?P<stop>-?\d*)$")


def datasets_dir() -> Path:
    """The datasets directory: ``$EPLB_DATASETS``, else the package's shipped data."""
    env = os.environ.get("EPLB_DATASETS")
    if env:
        return Path(env)
    # A package installed on disk (checkout, editable or wheel) yields a real path; only a
    # zipped install would not, and it cannot be read by path.
    return Path(str(resources.files(__package__).joinpath(PACKAGE_DATA)))


def read_catalog() -> list[dict[str, Any]]:
    """The catalog's entries (do not modify them), parsed once per process and catalog file:
    the cache is keyed on the file's path, modification time and size."""
    path = datasets_dir() / CATALOG_FILE
    if not path.is_file():
        raise LoadFileError("dataset", f"no dataset catalog at {path} (set EPLB_DATASETS to the datasets directory)")
    stat = path.stat()
    return _parse_catalog(str(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=8)
def _parse_catalog(name: str, mtime_ns: int, size: int) -> list[dict[str, Any]]:  # noqa: ARG001  (cache key)
    path = Path(name)
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise LoadFileError("dataset", f"{path}: unreadable catalog ({exc})") from None
    entries = doc.get("datasets") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise LoadFileError("dataset", f"{path}: no 'datasets' list")
    return entries


def dataset_names() -> list[str]:
    try:
        return [e["name"] for e in read_catalog()]
    except LoadFileError:
        return []


def split_range(spec: str | Path) -> tuple[str, slice | None]:
    """(spec, step slice or None) for ``SPEC@A:B`` (a real path containing '@' wins)."""
    text = str(spec)
    m = _RANGE.match(text)
    if m is None or input_kind(text) not in ("missing", "too_long", "bad"):
        return text, None
    to_int = lambda v: int(v) if v else None  # noqa: E731
    return m["spec"], slice(to_int(m["start"]), to_int(m["stop"]))


def resolve(text: str) -> tuple[str | None, str, str | None]:
    """(forced format or None, the path or glob to read, the dataset name or None) of a spec
    without its ``@A:B``; a name that is neither a file, a matching glob nor a shipped
    dataset raises :class:`LoadFileError` listing the datasets."""
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
        return fmt, text, text
    hint = f"; shipped datasets: {', '.join(known)}" if known else ""
    raise LoadFileError("loads", f"{text}: no such file or dataset{hint}")


__all__ = ["CATALOG_FILE", "PACKAGE_DATA", "datasets_dir", "read_catalog", "dataset_names", "split_range", "resolve"]
