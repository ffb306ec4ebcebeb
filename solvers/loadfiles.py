"""Resolving ``--loads``: a file in any importer's format, several per-rank files, or a dataset name.

A spec is, in order: an existing file, directory or glob pattern (read by
:mod:`solvers.workloads.importers`: SGLang dumps, vLLM JSON histories (streamed),
Megatron per-rank ``.npz``, CSV, ``.npz``, ``.pt``, JSON), else the name of a shipped
dataset (``datasets/catalog.json``). ``FORMAT:SPEC`` forces a format (``vllm:run.json``);
``SPEC@A:B`` keeps steps A..B-1 of a trace (Python slice bounds, either may be omitted), so
one can plan on ``NAME@0:12`` and score on ``NAME@12:24`` (out of sample).

:func:`resolve_spec` resolves a spec once; :func:`solvers.io.read_loads` (the one loads
reader) reads what it names.
"""
from __future__ import annotations

import glob
import re
from dataclasses import dataclass
from pathlib import Path

from .errors import LoadFileError
from .workloads.catalog import dataset_names, dataset_path
from .workloads.formats import FORMATS


def _split_format(spec: str | Path) -> tuple[str | None, str]:
    """(forced format or None, the rest) for ``FORMAT:SPEC``."""

    text = str(spec)
    head, sep, rest = text.partition(":")
    if sep and head in FORMATS and not Path(text).exists():
        return head, rest
    return None, text


_RANGE = re.compile(r"^(?P<spec>.+)@(?P<start>-?\d*):(?P<stop>-?\d*)$")


def split_range(spec: str | Path) -> tuple[str, slice | None]:
    """(spec, step slice or None) for ``SPEC@A:B`` (a real path containing '@' wins)."""
    text = str(spec)
    m = _RANGE.match(text)
    if m is None or Path(text).exists():
        return text, None
    to_int = lambda v: int(v) if v else None  # noqa: E731
    return m["spec"], slice(to_int(m["start"]), to_int(m["stop"]))


def _is_files(text: str) -> bool:
    return Path(text).exists() or (any(c in text for c in "*?[") and bool(glob.glob(text)))


@dataclass(frozen=True)
class LoadsSpec:
    """A resolved ``--loads`` spec: format (forced, else None: detected on reading), target
    (the path, directory or glob as given, or ``[dataset file]`` for a name), steps (the
    ``@A:B`` window or None), base (the spec without its window)."""

    spec: str
    base: str
    format: str | None
    target: str | list[Path]
    steps: slice | None

    @property
    def single_file(self) -> Path | None:
        """The one file read (for provenance checksums), None when it reads several."""
        if isinstance(self.target, list):
            return self.target[0] if len(self.target) == 1 else None
        path = Path(self.target)
        return path if path.is_file() else None


def resolve_loads(spec: str | Path) -> tuple[str | None, str | list[Path]]:
    """(format or None, what to read: the spec itself, or the dataset file for a name)."""

    fmt, text = _split_format(spec)
    if _is_files(text):
        return fmt, text
    known = dataset_names()
    if text in known:
        return fmt, [dataset_path(text)]
    hint = f"; shipped datasets: {', '.join(known)}" if known else ""
    raise LoadFileError("loads", f"{text}: no such file or dataset{hint}")


def resolve_spec(spec: str | Path) -> LoadsSpec:
    """Resolve a ``--loads`` spec once: its format, what to read, and its window of steps."""
    base, steps = split_range(spec)
    fmt, target = resolve_loads(base)
    return LoadsSpec(str(spec), base, fmt, target, steps)


def loads_source(spec: str | Path) -> Path | None:
    """The single file a ``--loads`` spec reads (for provenance checksums), or None when it
    reads several files."""
    return resolve_spec(spec).single_file
