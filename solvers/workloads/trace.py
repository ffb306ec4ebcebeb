"""Expert loads: the one loads type (:class:`Loads`) of the CLI, the app, the datasets and the
benchmarks, and how a trace of them is saved."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import LoadFileError, OptionError
from ..safewrite import write_atomic


@dataclass(eq=False)
class Loads:
    """Expert loads of the MoE layers, from a file, a shipped dataset, an upload or a generator.

    trace: [steps, layers, experts] (the window of steps kept): int64 token counts, or float
    weights; a plain ``[layers, experts]`` matrix is one step and ``matrix`` is True.
    weights: [layers, experts], the trace summed over its steps (float64 for counts).
    meta: provenance and shape facts of the file or generator (JSON-serialisable).
    source: what was read (a path, dataset name, upload name) or generated; format: the
    format read. model / num_groups: the model preset key and expert groups when known.
    dense_layers: leading all-zero (dense) layers dropped from the source (engines count
    them, :func:`solvers.cluster.dense_rows`); file_layers: rows per step in the source.
    total_steps: steps in the source; path: the one file read (checksums; None for several
    files, bytes or generated loads).
    """

    trace: torch.Tensor
    meta: dict[str, Any] = field(default_factory=dict)
    source: str = ""
    format: str | None = None
    model: str | None = None
    num_groups: int | None = None
    dense_layers: int = 0
    file_layers: int | None = None
    total_steps: int | None = None
    matrix: bool = False
    path: Path | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.trace, torch.Tensor):
            try:
                self.trace = torch.as_tensor(np.asarray(self.trace))
            except (TypeError, ValueError) as exc:
                raise OptionError("loads", f"must be a rectangular [steps, layers, experts] array ({exc})") from None
        if self.trace.dim() != 3:
            raise OptionError("loads", f"must be 3-D [steps, layers, experts], got shape {tuple(self.trace.shape)}")
        if self.trace.is_complex() or self.trace.dtype == torch.bool:
            raise OptionError("loads", f"must hold token counts or weights, got {self.trace.dtype}")
        if not self.trace.is_floating_point():
            self.trace = self.trace.to(torch.int64)
        if self.model is None and isinstance(self.meta.get("model"), str):
            self.model = self.meta["model"]
        if self.num_groups is None and isinstance(self.meta.get("num_groups"), int):
            self.num_groups = self.meta["num_groups"]
        self.file_layers = self.file_layers or self.trace.shape[1]
        self.total_steps = self.total_steps or self.trace.shape[0]

    @property
    def loads(self) -> torch.Tensor:
        """The trace (the name of the former ``Trace.loads``)."""
        return self.trace

    @property
    def name(self) -> str:
        return self.source

    @property
    def num_steps(self) -> int:
        return self.trace.shape[0]

    @property
    def num_layers(self) -> int:
        return self.trace.shape[1]

    @property
    def num_experts(self) -> int:
        return self.trace.shape[2]

    @cached_property
    def weights(self) -> torch.Tensor:
        """[layers, experts]: the trace summed over its steps (float64 for counts)."""
        w = self.trace.sum(0)
        return w if w.is_floating_point() else w.to(torch.float64)

    def window(self, start: int, stop: int) -> torch.Tensor:
        """weights: [layers, experts], the sum of steps ``start .. stop-1`` (float64)."""
        if not 0 <= start < stop <= self.num_steps:
            raise OptionError("window", f"must select steps within [0, {self.num_steps}), got {start}:{stop}")
        return self.trace[start:stop].sum(0).to(torch.float64)

    def __repr__(self) -> str:
        what = self.model or self.source or self.meta.get("source") or "?"
        return (f"Loads(steps={self.num_steps}, layers={self.num_layers}, experts={self.num_experts}, "
                f"{what}, scenario={self.meta.get('scenario')})")


Trace = Loads       # the former name of generated and imported traces


def save_trace(trace: Loads, path: str | Path) -> Path:
    """Write ``.npz`` (compressed: ``loads`` + ``meta`` as a JSON string) or ``.pt`` (a dict).

    The file is written to a temporary name and renamed, so a crash never leaves half a file.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    meta_json = json.dumps(trace.meta, sort_keys=True)
    if suffix not in (".npz", ".pt"):
        raise LoadFileError("path", f"{path}: a trace is saved as .npz or .pt, not {suffix or '(no suffix)'}")

    def write(tmp: Path) -> None:
        if suffix == ".npz":
            # Smallest integer dtype that holds the counts: traces compress several times better.
            peak = int(trace.loads.abs().max()) if trace.loads.numel() else 0
            dtype = np.int32 if peak < 2**31 else np.int64
            with tmp.open("wb") as fh:
                np.savez_compressed(fh, loads=trace.loads.numpy().astype(dtype), meta=np.array(meta_json))
        else:
            torch.save({"loads": trace.loads, "meta": meta_json}, tmp)

    return write_atomic(path, write)
