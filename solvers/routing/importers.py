"""Importers of engines' per-token routing records (docs/formats.md "Routing traces").

- ``sglang``: SGLang's expert-distribution recorder in ``per_token`` mode
  (``--expert-distribution-recorder-mode per_token``): one ``torch.save`` dict per rank,
  ``records`` (one dict per forward pass with ``topk_ids_of_layer [engine layers, tokens,
  top_k]`` int32 *physical* expert ids, -1 where nothing was recorded, and ``rank``) and
  ``last_physical_to_logical_map [engine layers, physical experts]``. Physical ids are mapped
  to logical ones through the map; layers never recorded (dense layers: all -1) are dropped.
- ``vllm``: vLLM's routed-experts replay (``routed_experts [tokens, layers, top_k]`` per
  response, logical ids): a JSON response (or a list of them, or ``choices``) holding
  ``routed_experts``, or an ``.npz``/``.npy`` with that array. Responses are concatenated.
- ``megatron``: a routing trace in JSON Lines, one object per (step, layer, rank):
  ``{"step": s, "layer": l, "rank": r, "top_indices": [[top_k ids] per token]}``. Tokens of
  one (step, rank) are the same tokens in every layer; they are concatenated in (step, rank)
  order and keep their rank as source rank.
- ``npz``: the canonical file (:mod:`.trace`).

Every defect (wrong keys, dtype, shape, ids out of range, sizes beyond the limits) raises one
:class:`solvers.errors.LoadFileError` naming the file.
"""
from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import torch

from .. import filecheck
from ..errors import LoadFileError, ProblemError
from ..filecheck import expand_paths
from .trace import ENTRY_BYTES, RoutingTrace, check_entries, read_npz_arrays, routing_from_arrays

# Step, layer and rank numbers of a Megatron line, and SGLang ranks: below 2**31.
MAX_INDEX = 1 << 31
# A Megatron line nests 3 levels (object, tokens, top-k); anything deeper is refused unparsed.
_LINE_DEPTH = 4

ROUTING_FORMATS = ("npz", "sglang", "vllm", "megatron")


def _fail(path: Any, message: str) -> LoadFileError:
    return LoadFileError("routing", f"{path}: {message}")


def _int_array(raw: Any, path: Any, what: str) -> np.ndarray:
    """An integer array (a tensor, array or nested list); floats, bools and ragged lists refused."""
    if isinstance(raw, torch.Tensor):
        if raw.is_floating_point() or raw.is_complex() or raw.dtype == torch.bool:
            raise _fail(path, f"{what} must hold integer expert ids, got dtype {raw.dtype}")
        return _signed(raw.detach().cpu().numpy(), path, what)
    try:
        arr = np.asarray(raw)
    except (TypeError, ValueError) as exc:
        raise _fail(path, f"{what} must be a rectangular integer array ({exc})") from None
    if arr.dtype == object or arr.dtype.kind not in "iu":
        if arr.dtype.kind == "f" and arr.size and np.all(np.abs(arr) < 2**53) and np.all(arr == np.round(arr)):
            return arr.astype(np.int64)          # JSON numbers that are whole
        raise _fail(path, f"{what} must hold integer expert ids, got dtype {arr.dtype}")
    return _signed(arr, path, what)


def _signed(arr: np.ndarray, path: Any, what: str) -> np.ndarray:
    """Unsigned ids wider than a byte as int64 (torch holds no uint16/32/64 it can index
    with), refused with their stored value when they do not fit."""
    if arr.dtype.kind == "u" and arr.dtype.itemsize > 1:
        if arr.size and int(arr.max()) >= 1 << 62:
            raise _fail(path, f"{what}: ids must be below 2**62, found up to {int(arr.max())}")
        return arr.astype(np.int64)
    return arr


def _build(ids: np.ndarray | torch.Tensor, num_experts: int | None, path: Any, ranks=None, num_ranks=None,
           meta: dict | None = None) -> RoutingTrace:
    """The trace, with ``num_experts`` inferred (max id + 1) when the file does not say."""
    meta = dict(meta or {})
    if num_experts is None:
        n = ids.size if isinstance(ids, np.ndarray) else ids.numel()
        num_experts = max(1, int(ids.max()) + 1) if n else 1
        meta["num_experts_inferred"] = True
    try:
        return RoutingTrace(ids, num_experts, ranks, num_ranks, meta)
    except ProblemError as exc:
        raise _fail(path, str(exc)) from None


def _source_bytes(paths: Sequence[Path]) -> int:
    return sum(p.stat().st_size for p in paths)


def _torch_load(path: Path) -> Any:
    """A ``torch.save`` dump through the boundary (:func:`solvers.filecheck.load_torch`)."""
    return filecheck.load_torch(path, "routing")


def read_sglang_per_token(spec: str | Path | Sequence[str | Path], num_experts: int | None = None) -> RoutingTrace:
    """A trace from SGLang ``per_token`` dumps (one file per rank, or one file)."""
    paths = expand_paths(spec, "routing")
    parts, ranks = [], []
    p2l: torch.Tensor | None = None
    shape = None
    total = 0
    source = _source_bytes(paths)
    for file_index, path in enumerate(paths):
        obj = _torch_load(path)
        if not isinstance(obj, dict) or "records" not in obj:
            raise _fail(path, "not an SGLang expert-distribution dump (no 'records')")
        records = obj["records"]
        if not isinstance(records, (list, tuple)):
            raise _fail(path, "'records' must be a list of per-pass dicts")
        if "last_physical_to_logical_map" in obj:
            m = torch.as_tensor(_int_array(obj["last_physical_to_logical_map"], path, "last_physical_to_logical_map"))
            if m.dim() != 2:
                raise _fail(path, f"last_physical_to_logical_map must be [layers, physical], got {tuple(m.shape)}")
            if p2l is not None and not torch.equal(p2l, m.to(torch.int64)):
                raise _fail(path, "last_physical_to_logical_map differs from the other ranks' files")
            p2l = m.to(torch.int64)
        for i, rec in enumerate(records):
            if not isinstance(rec, dict) or "topk_ids_of_layer" not in rec:
                raise _fail(path, f"record {i} has no 'topk_ids_of_layer' (a per_token dump is needed; "
                            "stat and per_pass dumps carry counts, read them with --loads)")
            t = torch.as_tensor(_int_array(rec["topk_ids_of_layer"], path, f"record {i} topk_ids_of_layer"))
            if t.dim() != 3:
                raise _fail(path, f"record {i}: topk_ids_of_layer must be [layers, tokens, top_k], "
                            f"got {tuple(t.shape)}")
            if shape is None:
                shape = (t.shape[0], t.shape[2])
            elif (t.shape[0], t.shape[2]) != shape:
                raise _fail(path, f"record {i}: topk_ids_of_layer is {tuple(t.shape)}, expected "
                            f"[{shape[0]}, tokens, {shape[1]}]")
            if t.shape[1] == 0:
                continue
            rank = rec.get("rank", file_index)
            if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < MAX_INDEX:
                raise _fail(path, f"record {i}: rank must be an integer in [0, 2**31), got {str(rank)[:40]}")
            total += t.numel()
            check_entries(total, path, source_bytes=source)        # before the record is copied
            parts.append(t.to(torch.int64))
            ranks.append(torch.full((t.shape[1],), rank, dtype=torch.int64))
    if not parts:
        raise _fail(paths[0], "no record holds any token")
    ids = torch.cat(parts, 1)                                                   # [engine layers, T, k]
    src = torch.cat(ranks)
    recorded = ~((ids == -1).all(dim=(1, 2)) | ((ids == 0).all(dim=(1, 2)) & (ids.shape[2] > 1)))
    if not bool(recorded.any()):
        raise _fail(paths[0], "no layer was recorded (every row is -1)")
    layers = recorded.nonzero().flatten()
    ids = ids[layers]
    if bool((ids < 0).any()):
        raise _fail(paths[0], "a recorded layer holds -1 ids for some tokens (padding inside a record)")
    if p2l is not None:
        if p2l.shape[0] != recorded.shape[0]:
            raise _fail(paths[0], f"last_physical_to_logical_map has {p2l.shape[0]} layers, the records "
                        f"{recorded.shape[0]}")
        R = p2l.shape[1]
        if int(ids.max()) >= R:
            raise _fail(paths[0], f"physical expert ids must be in [0, {R}), found up to {int(ids.max())}")
        m = p2l[layers]
        if num_experts is None:
            num_experts = int(m.max()) + 1
        ids = m.gather(1, ids.flatten(1)).view_as(ids)
    num_ranks = int(src.max()) + 1
    meta = {"source": str(paths[0]) if len(paths) == 1 else f"{len(paths)} files from {paths[0].parent}",
            "format": "sglang", "engine_layers": int(recorded.shape[0]),
            "dense_layers": int((~recorded[:int(layers[0])]).sum())}
    return _build(ids, num_experts, paths[0], src, num_ranks, meta)


# vLLM routed-experts replay ------------------------------------------------------------------

def _responses(doc: Any) -> Iterable[Any]:
    """The ``routed_experts`` arrays of a response, a list of responses, or ``choices``."""
    if isinstance(doc, dict):
        if "routed_experts" in doc:
            yield doc["routed_experts"]
            return
        for key in ("choices", "outputs", "responses"):
            if isinstance(doc.get(key), list):
                for item in doc[key]:
                    yield from _responses(item)
                return
        raise ValueError("no 'routed_experts' key")
    if isinstance(doc, list):
        for item in doc:
            yield from _responses(item)
        return
    raise ValueError(f"expected an object or a list, got {type(doc).__name__}")


def read_vllm_routed(spec: str | Path | Sequence[str | Path], num_experts: int | None = None) -> RoutingTrace:
    """A trace from vLLM routed-experts replay (``routed_experts [tokens, layers, top_k]``)."""
    paths = expand_paths(spec, "routing")
    parts: list[np.ndarray] = []
    total = 0
    source = _source_bytes(paths)
    for path in paths:
        if path.suffix.lower() in (".npz", ".npy"):
            arrays = read_npz_arrays(path) if path.suffix.lower() == ".npz" else {"routed_experts": _npy(path)}
            keys = [k for k in arrays if k == "routed_experts" or k.startswith("routed_experts_")]
            if not keys:
                raise _fail(path, f"no 'routed_experts' array (found {', '.join(arrays) or 'none'})")
            raws = [arrays[k] for k in sorted(keys, key=lambda k: (len(k), k))]
        else:
            doc = filecheck.read_json(path, "routing")
            try:
                raws = list(_responses(doc))
            except (ValueError, RecursionError) as exc:
                raise _fail(path, f"not a vLLM response with routed_experts ({str(exc)[:120]})") from None
        for j, raw in enumerate(raws):
            a = _int_array(raw, path, f"routed_experts[{j}]")
            if a.ndim != 3:
                raise _fail(path, f"routed_experts must be [tokens, layers, top_k], got shape {a.shape}")
            if parts and a.shape[1:] != parts[0].shape[1:]:
                raise _fail(path, f"routed_experts is {a.shape}, expected [tokens, {parts[0].shape[1]}, "
                            f"{parts[0].shape[2]}] like the first response")
            total += a.size
            check_entries(total, path, source_bytes=source)
            parts.append(a)
    if not parts:
        raise _fail(paths[0], "no response holds routed_experts")
    ids = np.ascontiguousarray(np.concatenate(parts, 0).transpose(1, 0, 2))    # [layers, tokens, top_k]
    meta = {"source": str(paths[0]), "format": "vllm", "responses": len(parts)}
    return _build(ids, num_experts, paths[0], meta=meta)


def _npy(path: Path) -> np.ndarray:
    """A routed-experts ``.npy`` through the boundary (header first, then the build budget)."""
    return filecheck.load_npy(path, "routing", bytes_per_cell=ENTRY_BYTES)


# Megatron routing trace (JSON Lines) ----------------------------------------------------------

def read_megatron_routing(spec: str | Path | Sequence[str | Path], num_experts: int | None = None) -> RoutingTrace:
    """A trace from Megatron routing-trace JSONL lines ``{step, layer, rank, top_indices}``."""
    paths = expand_paths(spec, "routing")
    groups: dict[tuple[int, int], dict[int, np.ndarray]] = {}
    total = 0
    source = _source_bytes(paths)
    for path in paths:
        for n, line in filecheck.iter_lines(path, "routing"):
            try:
                rec = filecheck.parse_json(line, f"{path}: line {n}", "routing", max_depth=_LINE_DEPTH)
            except LoadFileError as exc:
                raise LoadFileError("routing", str(exc).split(": ", 1)[1]) from None
            if not isinstance(rec, dict) or not {"step", "layer", "rank", "top_indices"} <= set(rec):
                raise _fail(path, f"line {n}: needs keys step, layer, rank, top_indices")
            key = []
            for name in ("step", "layer", "rank"):
                v = rec[name]
                if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < MAX_INDEX:
                    raise _fail(path, f"line {n}: {name} must be an integer in [0, 2**31), got {str(v)[:40]}")
                key.append(v)
            step, layer, rank = key
            a = _int_array(rec["top_indices"], path, f"line {n} top_indices")
            if a.ndim != 2 or a.shape[0] == 0:
                raise _fail(path, f"line {n}: top_indices must be [tokens, top_k], got shape {a.shape}")
            group = groups.setdefault((step, rank), {})
            if layer in group:
                raise _fail(path, f"line {n}: step {step}, rank {rank}, layer {layer} appears twice")
            total += a.size
            check_entries(total, path, source_bytes=source)
            group[layer] = a
    if not groups:
        raise _fail(paths[0], "no routing lines")
    keys = sorted(groups)
    layers = sorted(groups[keys[0]])
    k = groups[keys[0]][layers[0]].shape[1]
    blocks = []
    for key in keys:
        g = groups[key]
        if sorted(g) != layers:
            raise _fail(paths[0], f"step {key[0]}, rank {key[1]} has layers {sorted(g)}, step {keys[0][0]} "
                        f"rank {keys[0][1]} has {layers}")
        tokens = {a.shape[0] for a in g.values()}
        if len(tokens) != 1 or any(a.shape[1] != k for a in g.values()):
            raise _fail(paths[0], f"step {key[0]}, rank {key[1]}: every layer must route the same tokens with "
                        f"top_k {k}, got shapes {sorted({a.shape for a in g.values()})}")
        blocks.append(np.stack([g[layer] for layer in layers]))               # [L, tokens, k]
    ids = np.concatenate(blocks, 1)
    src = np.concatenate([np.full(b.shape[1], key[1], dtype=np.int64) for b, key in zip(blocks, keys)])
    meta = {"source": str(paths[0]), "format": "megatron", "layer_numbers": layers,
            "steps": len({key[0] for key in keys})}
    return _build(ids, num_experts, paths[0], src, int(src.max()) + 1, meta)


# Any format --------------------------------------------------------------------------------

def detect_routing_format(path: Path) -> str:
    """The routing format of one file, from its suffix and (for .npz/.json) its content."""
    suffix = path.suffix.lower()
    if suffix in (".pt", ".pth"):
        return "sglang"
    if suffix == ".jsonl":
        return "megatron"
    if suffix == ".npy":
        return "vllm"
    if suffix == ".npz":
        try:
            with zipfile.ZipFile(path) as zf:
                names = {n[:-4] for n in zf.namelist() if n.endswith(".npy")}
        except (OSError, zipfile.BadZipFile) as exc:
            raise _fail(path, f"not a readable .npz file ({exc})") from None
        return "npz" if "topk_ids" in names else "vllm"
    if suffix == ".json":
        return "vllm"
    raise _fail(path, f"unknown routing file type {suffix or '(no suffix)'}; formats: {', '.join(ROUTING_FORMATS)}")


def read_routing(spec: str | Path | Sequence[str | Path], format: str | None = None,
                 num_experts: int | None = None) -> RoutingTrace:
    """A routing trace from any supported file (format detected from the first file)."""
    paths = expand_paths(spec, "routing")
    fmt = format or detect_routing_format(paths[0])
    if fmt not in ROUTING_FORMATS:
        raise LoadFileError("format", f"must be one of {', '.join(ROUTING_FORMATS)}, got {fmt!r}")
    if fmt == "npz":
        if len(paths) != 1:
            raise _fail(paths[0], "a canonical routing .npz is one file")
        trace = routing_from_arrays(read_npz_arrays(paths[0]), paths[0])     # no 'topk_ids': refused there
        if num_experts is not None and trace.num_experts != num_experts:
            raise _fail(paths[0], f"holds {trace.num_experts} experts, {num_experts} expected")
        return trace
    reader = {"sglang": read_sglang_per_token, "vllm": read_vllm_routed, "megatron": read_megatron_routing}[fmt]
    return reader(paths, num_experts)
