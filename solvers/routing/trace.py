"""A routing trace: the top-k experts every token chose in every MoE layer.

Canonical file (``.npz``, docs/formats.md "Routing traces"):

| array | shape | dtype | meaning |
|---|---|---|---|
| ``topk_ids`` | ``[layers, tokens, top_k]`` | int16 or int32 | logical expert ids, each in ``[0, num_experts)`` |
| ``source_rank`` | ``[tokens]`` (optional) | int32 | the rank (GPU) the token came from, in ``[0, num_ranks)`` |
| ``meta`` | scalar string | JSON | ``num_experts`` (required), ``num_ranks`` (with ``source_rank``), model, provenance |

Everything is checked once, when a trace is built (:class:`RoutingTrace`), so the metric and
the solvers trust it. A file's ``.npy`` headers are checked before anything is allocated: a
header that declares more bytes than the archive holds is refused.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .. import filecheck
from ..cluster import MAX_REPLICAS
from ..errors import LoadFileError, ProblemError
from ..safewrite import write_atomic

# What one (layer, token, choice) entry costs while a trace is read and scored: the ids as
# read (up to 8 bytes), as stored (2), and the int64 copies of loads() and the metric
# (8 + 8), rounded up. A trace may hold filecheck.memory_budget() / ENTRY_BYTES entries (about
# 270 million on a machine with 16 GiB free), never 2**31 whatever the memory.
ENTRY_BYTES = 32
MAX_LAYERS = 1 << 14
MAX_TOP_K = 1 << 10


def max_entries() -> int:
    """The most (layer, token, choice) entries a trace may hold now: the build budget
    (:func:`solvers.filecheck.memory_budget`, bytes) over :data:`ENTRY_BYTES`."""
    return filecheck.memory_budget() // ENTRY_BYTES


def check_entries(count: int, path: Any, param: str = "routing", source_bytes: int | None = None) -> None:
    """Refuse (one :class:`LoadFileError` line) a file whose routing would hold ``count``
    entries beyond the build budget, or beyond what ``source_bytes`` of input may build
    (:func:`solvers.filecheck.check_build`): checked before the ids are built."""
    filecheck.check_build(path, count * ENTRY_BYTES, f"{count} routing entries", param, source_bytes)


def _as_int_tensor(x: Any, param: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        try:
            arr = np.asarray(x)
        except (TypeError, ValueError) as exc:
            raise ProblemError(param, f"must be a rectangular integer array ({exc})") from None
        if arr.dtype == object or arr.dtype.kind not in "iu":
            raise ProblemError(param, f"must hold integers, got dtype {arr.dtype}")
        if arr.dtype.kind == "u" and arr.dtype.itemsize >= 4:
            if arr.size and int(arr.max()) >= 1 << 62:      # an id no expert has: say it as it is stored
                raise ProblemError(param, f"ids must be below 2**62, found up to {int(arr.max())}")
            arr = arr.astype(np.int64)
        x = torch.from_numpy(np.ascontiguousarray(arr))
    if x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
        raise ProblemError(param, f"must hold integers, got dtype {x.dtype}")
    return x.detach().cpu()


def _count(value: Any, param: str) -> int:
    """A count of experts or ranks: an integer in ``[1, MAX_REPLICAS]``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ProblemError(param, f"must be an integer, got {value!r}")
    if not 1 <= int(value) <= MAX_REPLICAS:
        raise ProblemError(param, f"must be in [1, {MAX_REPLICAS}], got {int(value)}")
    return int(value)


@dataclass(frozen=True, init=False)
class RoutingTrace:
    """Per-token routing of T tokens through L MoE layers.

    topk_ids: [L, T, k] int16/int32, logical expert ids in ``[0, num_experts)``.
    source_rank: [T] int32 rank each token came from (None: not recorded), in
        ``[0, num_ranks)``.
    meta: JSON-serialisable provenance (model, generator parameters, source file).
    """

    topk_ids: torch.Tensor
    num_experts: int
    source_rank: torch.Tensor | None
    num_ranks: int | None
    meta: dict[str, Any] = field(default_factory=dict)

    def __init__(self, topk_ids: Any, num_experts: Any, source_rank: Any = None, num_ranks: Any = None,
                 meta: dict[str, Any] | None = None):
        ids = _as_int_tensor(topk_ids, "topk_ids")
        if ids.dim() != 3:
            raise ProblemError("topk_ids", f"must be 3-D [layers, tokens, top_k], got shape {tuple(ids.shape)}")
        L, T, k = ids.shape
        if min(L, T, k) == 0:
            raise ProblemError("topk_ids", f"must not be empty, got shape {tuple(ids.shape)}")
        limit = max_entries()
        if L > MAX_LAYERS or k > MAX_TOP_K or L * T * k > limit:
            raise ProblemError("topk_ids", f"shape {tuple(ids.shape)} is beyond the limits "
                               f"({MAX_LAYERS} layers, top-k {MAX_TOP_K}, {limit} entries: "
                               f"{ENTRY_BYTES} bytes each within half the memory available)")
        E = _count(num_experts, "num_experts")
        if k > E:
            raise ProblemError("topk_ids", f"top_k ({k}) exceeds the number of experts ({E})")
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= E:
            raise ProblemError("topk_ids", f"expert ids must be in [0, {E}), found {lo}..{hi}")
        ids = ids.to(torch.int16 if E <= (1 << 15) else torch.int32)          # the smallest that holds the ids
        if k > 1:
            # A token chooses k distinct experts: a repeated id counts one expert twice.
            ordered = ids.sort(dim=2).values
            same = (ordered[:, :, 1:] == ordered[:, :, :-1]).any(dim=2)          # [L, T]
            if bool(same.any()):
                layer, token = (int(v) for v in same.nonzero()[0])
                raise ProblemError("topk_ids", f"layer {layer}, token {token} chooses expert "
                                   f"{int(ids[layer, token].mode().values)} more than once (top-k ids of "
                                   "one token are distinct)")
            del ordered, same
        ranks = None
        R = None
        if source_rank is not None:
            ranks = _as_int_tensor(source_rank, "source_rank")
            if ranks.dim() != 1 or ranks.shape[0] != T:
                raise ProblemError("source_rank", f"must be [tokens] = [{T}], got shape {tuple(ranks.shape)}")
            if num_ranks is None:
                raise ProblemError("num_ranks", "must be given with source_rank")
            R = _count(num_ranks, "num_ranks")
            rlo, rhi = int(ranks.min()), int(ranks.max())
            if rlo < 0 or rhi >= R:
                raise ProblemError("source_rank", f"ranks must be in [0, {R}), found {rlo}..{rhi}")
            ranks = ranks.to(torch.int32)
        elif num_ranks is not None:
            raise ProblemError("num_ranks", "given without source_rank")
        object.__setattr__(self, "topk_ids", ids.contiguous())
        object.__setattr__(self, "num_experts", E)
        object.__setattr__(self, "source_rank", ranks)
        object.__setattr__(self, "num_ranks", R)
        object.__setattr__(self, "meta", dict(meta or {}))

    @property
    def num_layers(self) -> int:
        return self.topk_ids.shape[0]

    @property
    def num_tokens(self) -> int:
        return self.topk_ids.shape[1]

    @property
    def top_k(self) -> int:
        return self.topk_ids.shape[2]

    def loads(self) -> torch.Tensor:
        """[L, E] int64 tokens routed to each expert (one bincount over all layers)."""
        L, E = self.num_layers, self.num_experts
        offset = (torch.arange(L, dtype=torch.int64) * E).view(L, 1, 1)
        flat = (self.topk_ids.to(torch.int64) + offset).view(-1)
        return torch.bincount(flat, minlength=L * E).view(L, E)

    def source_gpus(self, num_gpus: int) -> torch.Tensor:
        """[T] int64 the GPU each token starts on, for a cluster of ``num_gpus`` GPUs.

        The rule (docs/formats.md): a recorded rank r of R ranks is GPU ``r * P // R`` (the
        rank itself when the trace was recorded on P ranks); without recorded ranks the
        tokens are cut into P equal consecutive blocks, token t on GPU ``t * P // T`` (how a
        batch is split over data-parallel attention ranks).
        """
        P, T = int(num_gpus), self.num_tokens
        if self.source_rank is not None:
            return self.source_rank.to(torch.int64) * P // self.num_ranks
        return torch.arange(T, dtype=torch.int64) * P // T

    def tokens(self, start: int, stop: int) -> "RoutingTrace":
        """The trace of tokens ``[start, stop)`` (a window)."""
        ids = self.topk_ids[:, start:stop]
        ranks = None if self.source_rank is None else self.source_rank[start:stop]
        return RoutingTrace(ids, self.num_experts, ranks, self.num_ranks if ranks is not None else None,
                            {**self.meta, "tokens": [int(start), int(stop)]})

    def __repr__(self) -> str:
        return f"RoutingTrace({self.describe()})"

    def describe(self) -> str:
        ranks = f", source ranks of {self.num_ranks}" if self.num_ranks else ""
        what = self.meta.get("model") or self.meta.get("source") or "routing"
        return (f"{what}: {self.num_layers} layers x {self.num_tokens} tokens x top-{self.top_k} "
                f"of {self.num_experts} experts{ranks}")


# Files -------------------------------------------------------------------------------------

def _narrow(a: np.ndarray, num_values: int) -> np.ndarray:
    return a.astype(np.uint8 if num_values <= 256 else np.int16 if num_values <= 1 << 15 else np.int32)


def save_routing(trace: RoutingTrace, path: str | Path) -> Path:
    """Write the canonical ``.npz`` (compressed), atomically (:func:`solvers.safewrite.write_atomic`)."""
    path = Path(path)
    if path.suffix.lower() != ".npz":
        raise LoadFileError("path", f"{path}: a routing trace is saved as .npz")
    meta = {**trace.meta, "num_experts": trace.num_experts}
    if trace.num_ranks is not None:
        meta["num_ranks"] = trace.num_ranks
    # The smallest dtype that holds the ids (uint8 up to 256 experts: a third of the file).
    arrays = {"topk_ids": _narrow(trace.topk_ids.numpy(), trace.num_experts),
              "meta": np.array(json.dumps(meta, sort_keys=True))}
    if trace.source_rank is not None:
        arrays["source_rank"] = _narrow(trace.source_rank.numpy(), trace.num_ranks)
    def write(tmp: Path) -> None:
        with tmp.open("wb") as fh:
            np.savez_compressed(fh, **arrays)

    return write_atomic(path, write)


def _routing_cells(headers: dict[str, tuple[tuple[int, ...], np.dtype]]) -> tuple[int, str]:
    """What reading a routing ``.npz`` builds: :data:`ENTRY_BYTES` per declared id, plus the
    other arrays' own bytes."""
    entries = sum(math.prod(shape) for key, (shape, _) in headers.items() if key != "meta")
    other = sum(math.prod(shape) * dt.itemsize for key, (shape, dt) in headers.items() if key == "meta")
    return entries * ENTRY_BYTES + other, f"{entries} routing entries"


def read_npz_arrays(path: Path) -> dict[str, np.ndarray]:
    """Every array of an ``.npz``, through the boundary (:func:`solvers.filecheck.load_npz`:
    sizes, dtypes and declared shapes before anything is allocated, no pickles, and what the
    ids will build within the budget)."""
    return filecheck.load_npz(path, "routing", _routing_cells)


def routing_from_arrays(arrays: dict[str, np.ndarray], path: Any) -> RoutingTrace:
    """A trace from the canonical arrays; a bad file raises one :class:`LoadFileError`."""
    if "topk_ids" not in arrays:
        raise LoadFileError("routing", f"{path}: no 'topk_ids' array (found {', '.join(arrays) or 'none'})")
    meta: dict[str, Any] = {}
    if "meta" in arrays:
        raw = arrays["meta"]
        if raw.dtype.kind not in "US" or raw.size != 1:
            raise LoadFileError("routing", f"{path}: 'meta' must be one JSON string, got a {raw.dtype} array "
                                f"of shape {raw.shape}")
        try:
            meta = filecheck.parse_meta(str(raw.reshape(())), path)
        except LoadFileError as exc:
            raise LoadFileError("routing", str(exc).split(": ", 1)[1]) from None
    if "num_experts" not in meta:
        raise LoadFileError("routing", f"{path}: meta has no 'num_experts'")
    try:
        return RoutingTrace(arrays["topk_ids"], meta["num_experts"], arrays.get("source_rank"),
                            meta.get("num_ranks") if "source_rank" in arrays else None,
                            {k: v for k, v in meta.items() if k not in ("num_experts", "num_ranks")})
    except ProblemError as exc:
        raise LoadFileError("routing", f"{path}: {exc}") from None


def load_routing(path: str | Path) -> RoutingTrace:
    """Read a canonical routing ``.npz``; any defect raises one :class:`LoadFileError`."""
    path = filecheck.input_file(path, "routing")
    return routing_from_arrays(read_npz_arrays(path), path)
