"""A load trace: integer token counts per step, layer and expert, plus where they came from."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import LoadFileError, OptionError
from ..safewrite import write_atomic


@dataclass
class Trace:
    """loads: [steps, layers, experts] int64 token counts (a step may also be a window).

    meta: provenance and shape facts (model, num_experts, num_groups, top_k, scenario, seed,
    the generator's parameters, or the source file of an import). JSON-serialisable.
    """

    loads: torch.Tensor
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.loads, torch.Tensor):
            try:
                self.loads = torch.as_tensor(np.asarray(self.loads))
            except (TypeError, ValueError) as exc:
                raise OptionError("loads", f"must be a rectangular [steps, layers, experts] array ({exc})") from None
        if self.loads.dim() != 3:
            raise OptionError("loads", f"must be 3-D [steps, layers, experts], got shape {tuple(self.loads.shape)}")
        if self.loads.is_floating_point() or self.loads.is_complex() or self.loads.dtype == torch.bool:
            raise OptionError("loads", f"must hold integer token counts, got {self.loads.dtype}")
        self.loads = self.loads.to(torch.int64)

    @property
    def num_steps(self) -> int:
        return self.loads.shape[0]

    @property
    def num_layers(self) -> int:
        return self.loads.shape[1]

    @property
    def num_experts(self) -> int:
        return self.loads.shape[2]

    def total(self) -> torch.Tensor:
        """weights: [layers, experts], the sum over all steps (one planning window)."""
        return self.loads.sum(0)

    def __repr__(self) -> str:
        what = self.meta.get("model") or self.meta.get("source") or "?"
        return (f"Trace(steps={self.num_steps}, layers={self.num_layers}, experts={self.num_experts}, "
                f"{what}, scenario={self.meta.get('scenario')})")


def save_trace(trace: Trace, path: str | Path) -> Path:
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
