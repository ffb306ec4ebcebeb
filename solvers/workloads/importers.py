"""Importers of load dumps written by serving and training engines (docs/formats.md).

Every reader returns loads as a torch tensor, ``[steps, layers, experts]`` (or
``[layers, experts]`` for a plain matrix), and raises :class:`LoadFileError` naming the
file and what is wrong with it. :func:`read_trace` wraps any of them into a
:class:`solvers.workloads.trace.Loads` of integer counts (keeping dense layers:
:func:`solvers.io.read_loads` is the reader of the front ends).

Formats (``format=`` names, detected from the suffix and content when not given):

- ``sglang``: SGLang expert-distribution dump (``torch.save`` dict). Mode ``stat``:
  ``logical_count [steps, layers, experts]``. Mode ``per_pass``: ``records`` (one dict per
  forward pass and rank with ``forward_pass_id`` and ``global_physical_count [layers,
  physical]``) plus ``last_physical_to_logical_map [layers, physical]``; counts are
  summed over the ranks of one pass and mapped back to logical experts. Several per-rank
  files (a directory or a glob) are merged.
- ``vllm``: JSON ``{"load_history": [{"logical_expert_load": [[per expert] per layer]}, ...]}``,
  one entry per step (the ADRS / OpenEvolve EPLB benchmark's ``expert-load.json``). Streamed with ``ijson``: memory
  holds the result and one step, not the parsed document.
- ``trtllm``: TensorRT-LLM expert statistics (``EXPERT_STATISTIC_PATH``): ``meta_info.json``
  and ``rank<N>.safetensors`` of ``[experts]`` counts named ``{iteration}_{layer}``, summed
  over the ranks (:func:`read_trtllm`).
- ``vllm_eplb``: vLLM's saved EPLB load windows (``global_expert_load_window_i<N>.safetensors``),
  optionally over physical slots with a per-layer slot map (:func:`read_vllm_eplb`).
- ``megatron``: Megatron-core per-rank ``.npz`` with ``loads [local_layers, forwards,
  physical_experts]``, ``ep_rank``, ``ep_size``, ``layer_numbers [local_layers]`` (and
  optionally ``physical_to_logical_map [local_layers, physical_experts]``); summed over
  the EP ranks, layers ordered by their global number.
- ``csv``: long form with a header ``layer,expert,load[,step]`` (also ``count`` or
  ``tokens`` for the load column), or a layers x experts matrix (optional header row).
- ``npz``: array ``loads``, ``weights`` or ``logical_count`` (or the only array); a trace
  saved by :func:`save_trace` also carries its ``meta``.
- ``pt``: a tensor, or a dict holding one of those keys.
- ``json``: nested lists, or an object with one of those keys.
"""
from __future__ import annotations

import csv
import itertools
import json
import re
import zipfile
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import torch

from .. import filecheck, safejson
from . import safetensors_file
from ..filecheck import expand_paths
from ..errors import LoadFileError
from ..routing.trace import routing_from_arrays
from .trace import Loads

from .formats import FORMATS, SUFFIX_FORMAT  # noqa: F401  (FORMATS re-exported)

LOAD_KEYS = ("loads", "weights", "logical_count")
_LONG_LOAD_COLUMNS = ("load", "count", "tokens")
PARAM = "loads"


def _fail(path: Any, message: str) -> LoadFileError:
    """One-line error (parsers' messages may span lines) naming the file."""
    return LoadFileError(PARAM, " ".join(f"{path}: {message}".split()))


# ---------------------------------------------------------------------------------------
# Paths and detection

def _peek(path: Path, size: int = 1 << 16) -> bytes:
    with path.open("rb") as fh:
        return fh.read(size)


def _torch_load(path: Path, mmap: bool = True) -> Any:
    """A ``torch.save`` file (tensors, numbers, lists, dicts only), through the guarded
    boundary (:func:`solvers.filecheck.load_torch`: a zip archive whose records decompress
    within the caps, a pickle whose expanded size, nesting and globals are checked before
    torch reads it, and dense CPU tensors of allowed dtypes with no stride 0 and no overlap)."""
    return filecheck.load_torch(path, PARAM, mmap)


def detect_format(path: str | Path) -> str:
    """The format of one file, from its suffix and (for .pt, .npz, .json) its content."""
    path = Path(path)
    fmt = SUFFIX_FORMAT.get(path.suffix.lower())
    if fmt is None:
        raise _fail(path, f"unknown format {path.suffix or '(no suffix)'}; "
                    f"use one of {', '.join(sorted(SUFFIX_FORMAT))}")
    if fmt == "json" and re.search(rb'"load_history"\s*:', _peek(path)):
        return "vllm"
    if fmt == "safetensors":
        return _safetensors_kind(path)
    if fmt == "npz":
        try:
            with zipfile.ZipFile(path) as zf:
                names = {Path(n).stem for n in zf.namelist()}
        except (OSError, zipfile.BadZipFile) as exc:
            raise _fail(path, f"not a readable .npz file ({exc})") from None
        if {"loads", "ep_rank", "ep_size"} <= names:
            return "megatron"
    if fmt == "pt":
        obj = _torch_load(path, mmap=True)
        if isinstance(obj, dict) and ("records" in obj or "logical_count" in obj):
            return "sglang"
    return fmt


# ---------------------------------------------------------------------------------------
# Shared checks

def _as_tensor(raw: Any, path: Any, what: str = "loads") -> torch.Tensor:
    if isinstance(raw, torch.Tensor):
        arr = raw
    else:
        try:
            a = np.asarray(raw)
        except (ValueError, TypeError, OverflowError, RecursionError) as exc:
            raise _fail(path, f"{what} is not a rectangular numeric array ({exc})") from None
        why = filecheck.dtype_refusal(a.dtype)
        if why:
            raise _fail(path, f"{what}: {why}")
        if a.dtype.kind == "u" and a.itemsize == 8:
            if a.size and int(a.max()) >= 2**63:
                raise _fail(path, f"{what}: values reach {int(a.max())}, beyond a 64-bit signed count")
            a = a.astype(np.int64)
        arr = torch.from_numpy(np.ascontiguousarray(a))
    why = filecheck.dtype_refusal(arr.dtype)
    if why:
        raise _fail(path, f"{what}: {why}")
    if arr.dtype == getattr(torch, "uint64", None) and arr.numel() and int(arr.max()) >= 2**63:
        raise _fail(path, f"{what}: values reach {int(arr.max())}, beyond a 64-bit signed count")
    if arr.dtype in (torch.float16, torch.bfloat16):
        arr = arr.to(torch.float32)
    if arr.dtype not in (torch.int64, torch.float32, torch.float64) and not arr.is_floating_point():
        arr = arr.to(torch.int64)                  # unsigned and narrow counts: sums must not wrap
    return arr


# Integer token counts whose total reaches this are refused: every sum the project takes
# (over steps, ranks, experts, GPUs) stays exact in int64 and in float64 below it.
MAX_TOTAL_COUNT = 2**53


def _check_values(arr: torch.Tensor, path: Any, what: str = "loads") -> torch.Tensor:
    if arr.is_floating_point() and not bool(torch.isfinite(arr).all()):
        raise _fail(path, f"{what} must be finite, found NaN or infinite values")
    if arr.numel() and bool((arr < 0).any()):
        raise _fail(path, f"{what} must be >= 0, found {arr.min().item()}")
    if not arr.is_floating_point():
        _check_total(float(arr.sum(dtype=torch.float64)) if arr.numel() else 0.0, path, what)
    return arr


def _check_total(total: float, path: Any, what: str = "loads") -> None:
    """Refuse integer counts whose sum (taken in float64, which cannot wrap) reaches
    :data:`MAX_TOTAL_COUNT`."""
    if total >= MAX_TOTAL_COUNT:
        raise _fail(path, f"{what}: the token counts sum to {total:.3g}, at or above 2**53: sums over "
                    f"steps, ranks and experts would wrap or lose exactness")


def _pick(mapping: dict, path: Path) -> Any:
    for key in LOAD_KEYS:
        if key in mapping:
            return mapping[key]
    arrays = {k: v for k, v in mapping.items() if k != "meta"}
    if len(arrays) == 1:
        return next(iter(arrays.values()))
    raise _fail(path, f"no array named {', '.join(LOAD_KEYS)} (found {', '.join(map(str, mapping)) or 'nothing'})")


def _physical_to_logical(counts: torch.Tensor, p2l: torch.Tensor, num_experts: int | None,
                         path: Any) -> torch.Tensor:
    """counts [..., layers, physical] -> [..., layers, experts] by summing each expert's slots.

    p2l: [layers, physical] logical expert of each physical slot.
    """
    p2l = _as_tensor(p2l, path, "physical_to_logical_map")
    if p2l.is_floating_point() or p2l.dim() != 2:
        raise _fail(path, f"physical_to_logical_map must be an integer [layers, physical] array, "
                    f"got {p2l.dtype} {tuple(p2l.shape)}")
    if tuple(p2l.shape) != tuple(counts.shape[-2:]):
        raise _fail(path, f"physical_to_logical_map has shape {tuple(p2l.shape)} but the counts are "
                    f"[layers, physical] = {tuple(counts.shape[-2:])}")
    p2l = p2l.to(torch.int64)
    # Every logical expert holds at least one slot: ids beyond the slot count are not experts.
    E = min(int(p2l.max()) + 1, p2l.shape[1]) if num_experts is None else num_experts
    if bool((p2l < 0).any()) or int(p2l.max()) >= E:
        raise _fail(path, f"physical_to_logical_map holds ids outside [0, {E}) (experts <= the "
                    f"{p2l.shape[1]} physical slots)")
    lead = counts.shape[:-2]
    out = torch.zeros(*lead, p2l.shape[0], E, dtype=counts.dtype)
    out.scatter_add_(-1, p2l.expand(*lead, *p2l.shape), counts)
    return out


# ---------------------------------------------------------------------------------------
# SGLang

def read_sglang(spec: str | Path | Sequence[str | Path], num_experts: int | None = None) -> torch.Tensor:
    """loads: [steps, layers, experts] from SGLang expert-distribution dumps (one or per-rank files)."""
    paths = expand_paths(spec)
    objs = [(p, _torch_load(p)) for p in paths]
    for p, obj in objs:
        if not isinstance(obj, dict) or not ("logical_count" in obj or "records" in obj):
            raise _fail(p, "not an SGLang expert-distribution dump (no 'logical_count' or 'records')")
    stat = [(p, o) for p, o in objs if "logical_count" in o]
    if stat:
        if len(stat) != len(objs):
            raise _fail(paths[0], "mixes 'stat' dumps (logical_count) with 'per_pass' dumps (records)")
        parts = []
        for p, o in stat:
            t = _as_tensor(o["logical_count"], p, "logical_count")
            if t.dim() == 2:
                t = t.unsqueeze(0)
            if t.dim() != 3:
                raise _fail(p, f"logical_count must be [steps, layers, experts], got {tuple(t.shape)}")
            if parts and t.shape[1:] != parts[0].shape[1:]:
                raise _fail(p, f"logical_count is {tuple(t.shape)} but {paths[0]} has "
                            f"[*, {parts[0].shape[1]}, {parts[0].shape[2]}]")
            parts.append(t)
        # One file holds the all-reduced counts; several are consecutive dumps of one run.
        return _check_values(torch.cat(parts), paths[0])
    return _read_sglang_per_pass(objs, num_experts)


def _read_sglang_per_pass(objs: list[tuple[Path, dict]], num_experts: int | None) -> torch.Tensor:
    p2l = None
    passes: dict[int, torch.Tensor] = {}
    shape = None
    total = 0.0
    for path, obj in objs:
        records = obj["records"]
        if not isinstance(records, (list, tuple)) or not records:
            raise _fail(path, "'records' must be a non-empty list of per-pass dicts")
        if "last_physical_to_logical_map" not in obj:
            raise _fail(path, "per-pass dump without 'last_physical_to_logical_map'")
        m = _as_tensor(obj["last_physical_to_logical_map"], path, "last_physical_to_logical_map")
        if p2l is None:
            p2l = m
        elif not torch.equal(p2l.to(torch.int64), m.to(torch.int64)):
            raise _fail(path, "last_physical_to_logical_map differs from the other ranks' files")
        for i, rec in enumerate(records):
            if not isinstance(rec, dict) or "global_physical_count" not in rec:
                raise _fail(path, f"record {i} has no 'global_physical_count'")
            c = _as_tensor(rec["global_physical_count"], path, f"record {i} global_physical_count")
            if c.dim() != 2:
                raise _fail(path, f"record {i}: global_physical_count must be [layers, physical], "
                            f"got {tuple(c.shape)}")
            if shape is None:
                shape = tuple(c.shape)
            elif tuple(c.shape) != shape:
                raise _fail(path, f"record {i}: global_physical_count is {tuple(c.shape)}, expected {shape}")
            key = rec.get("forward_pass_id", i)
            if isinstance(key, torch.Tensor) and key.numel() == 1 and not key.is_floating_point() \
                    and key.dtype != torch.bool:
                key = int(key)
            if isinstance(key, bool) or not isinstance(key, int) or not 0 <= key < 2**63:
                raise _fail(path, f"record {i}: forward_pass_id must be an integer >= 0, got {type(key).__name__} "
                            f"{str(key)[:40]!r}")
            c = c.to(torch.float64) if c.is_floating_point() else c.to(torch.int64)
            _check_values(c, path, f"record {i} global_physical_count")
            total += float(c.sum(dtype=torch.float64))
            _check_total(total if not c.is_floating_point() else 0.0, path, "global_physical_count")
            if key in passes and passes[key].dtype != c.dtype:
                passes[key], c = passes[key].to(torch.float64), c.to(torch.float64)
            passes[key] = passes[key] + c if key in passes else c.clone()   # sum the ranks of one pass
    floating = any(t.is_floating_point() for t in passes.values())
    counts = torch.stack([passes[k].to(torch.float64) if floating else passes[k]
                          for k in sorted(passes)])                           # [steps, layers, physical]
    return _check_values(_physical_to_logical(counts, p2l, num_experts, objs[0][0]), objs[0][0])


# ---------------------------------------------------------------------------------------
# vLLM JSON history (streamed)

def _ijson():
    try:
        import ijson  # noqa: PLC0415  optional: without it the file is parsed whole
    except ImportError:
        return None
    return ijson


def iter_vllm_steps(path: str | Path) -> Iterator[np.ndarray]:
    """Each step's ``logical_expert_load`` as ``[layers, experts]`` (int64, or float64 when
    the file holds fractions), streamed from the file one step at a time."""
    path = Path(path)
    if not path.is_file():
        raise _fail(path, "no such file")
    ijson = _ijson()
    shape = None
    try:
        safejson.check_depth(path)            # a deep document would blow up the parser
    except safejson.JSONDepthError as exc:
        raise _fail(path, f"cannot read .json file ({exc})") from None
    with path.open("rb") as fh:
        if ijson is not None:
            items = ijson.items(fh, "load_history.item", use_float=True)
            errors: tuple[type[BaseException], ...] = (ijson.JSONError, ValueError)
        else:
            try:
                doc = json.load(fh)
            except ValueError as exc:
                raise _fail(path, f"cannot read .json file (not valid JSON: {exc})") from None
            hist = doc.get("load_history") if isinstance(doc, dict) else None
            if not isinstance(hist, list):
                raise _fail(path, "no 'load_history' list")
            items, errors = iter(hist), (ValueError,)
        step = -1
        total = 0.0
        try:
            for step, entry in enumerate(items):
                if not isinstance(entry, dict) or "logical_expert_load" not in entry:
                    raise _fail(path, f"load_history[{step}] has no 'logical_expert_load'")
                try:
                    arr = np.asarray(entry["logical_expert_load"])
                except ValueError as exc:
                    raise _fail(path, f"load_history[{step}] is not a rectangular [layers, experts] "
                                f"array ({exc})") from None
                if arr.dtype.kind not in "iuf" or arr.ndim != 2 or arr.size == 0:
                    raise _fail(path, f"load_history[{step}].logical_expert_load must be a non-empty numeric "
                                f"[layers, experts] array, got {arr.dtype} {arr.shape}")
                if arr.dtype.kind == "u" and int(arr.max()) >= 2**63:
                    raise _fail(path, f"load_history[{step}]: counts reach {int(arr.max())}, beyond a 64-bit "
                                f"signed count")
                if arr.dtype.kind in "iu":
                    total += float(arr.sum(dtype=np.float64))
                    _check_total(total, path, f"load_history[0:{step + 1}]")
                if shape is None:
                    shape = arr.shape
                elif arr.shape != shape:
                    raise _fail(path, f"load_history[{step}] has shape {arr.shape}, step 0 has {shape}")
                yield arr.astype(np.int64) if arr.dtype.kind in "iu" else arr.astype(np.float64)
        except LoadFileError:
            raise
        except errors as exc:
            # yajl quotes the text around the error: keep its kind only (never echo a file's text)
            raise _fail(path, f"malformed or truncated JSON after step {step + 1} "
                        f"({str(exc).split('.')[0].splitlines()[0][:120] if str(exc) else type(exc).__name__})") from None
    if shape is None:
        raise _fail(path, "'load_history' is missing or empty")


def read_vllm(path: str | Path) -> torch.Tensor:
    """loads: [steps, layers, experts] from a vLLM-style JSON history, streamed.

    Steps go into a buffer that doubles when full (at most the file's step count: every
    number takes at least 2 bytes of JSON), so the resident peak is about twice the result
    plus one parsed step, whatever the file claims.
    """
    path = Path(path)
    out: torch.Tensor | None = None
    n = 0
    for arr in iter_vllm_steps(path):
        if out is None:
            most = max(1, path.stat().st_size // (2 * arr.size))
            out = torch.empty((min(most, 64), *arr.shape), dtype=torch.int64)
        if n == out.shape[0]:
            grown = torch.empty((min(most, 2 * n), *arr.shape), dtype=out.dtype)
            grown[:n] = out
            out = grown
        if arr.dtype.kind == "f" and not out.is_floating_point():
            out = out.to(torch.float64)             # fractional loads: keep them
        out[n] = torch.from_numpy(arr)
        n += 1
    assert out is not None  # iter_vllm_steps raises on an empty history
    return _check_values(out[:n], path)


def sum_vllm(path: str | Path) -> torch.Tensor:
    """weights: [layers, experts], the sum over all steps, in O(layers x experts) memory."""
    total = None
    for arr in iter_vllm_steps(path):
        total = arr.copy() if total is None else total + arr
    return _check_values(torch.from_numpy(total), path)


# ---------------------------------------------------------------------------------------
# Megatron-core per-rank .npz

def _npz_arrays(path: Path) -> dict[str, np.ndarray]:
    filecheck.check_npz(path)          # sizes, dtypes and declared shapes, before numpy allocates
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError) as exc:
        raise _fail(path, f"cannot read .npz file ({type(exc).__name__}: {exc})") from None
    raw = next((k for k, v in arrays.items() if not isinstance(v, np.ndarray)), None)
    if raw is not None:            # numpy hands a member that is not .npy data back as bytes
        raise _fail(path, f"{raw}: is not an .npy array")
    return arrays


def _scalar_int(arrays: dict[str, np.ndarray], key: str, path: Path) -> int:
    v = arrays.get(key)
    if v is None or v.size != 1 or v.dtype.kind not in "iu":
        raise _fail(path, f"'{key}' must be one integer")
    return int(v.reshape(()))


def read_megatron(spec: str | Path | Sequence[str | Path]) -> tuple[torch.Tensor, list[int]]:
    """(loads [forwards, layers, experts], global layer numbers) from per-rank ``.npz`` files.

    Each EP rank counts the tokens it routes to every expert; the sum over ranks is the
    load. Files of other pipeline stages add their layers. Every layer needs exactly the
    ranks 0..ep_size-1, each once.
    """
    paths = expand_paths(spec)
    per_layer: dict[int, dict[int, tuple[Path, torch.Tensor]]] = {}
    ep_size = forwards = experts = None
    grand = 0.0
    for path in paths:
        a = _npz_arrays(path)
        missing = [k for k in ("loads", "ep_rank", "ep_size", "layer_numbers") if k not in a]
        if missing:
            raise _fail(path, f"not a Megatron per-rank load file: missing {', '.join(missing)}")
        rank, size = _scalar_int(a, "ep_rank", path), _scalar_int(a, "ep_size", path)
        if size < 1 or not 0 <= rank < size:
            raise _fail(path, f"ep_rank {rank} is outside [0, ep_size={size})")
        if ep_size is not None and size != ep_size:
            raise _fail(path, f"ep_size {size} differs from {ep_size} in {paths[0]}")
        ep_size = size
        loads = _check_values(_as_tensor(a["loads"], path, "loads"), path)
        if not loads.is_floating_point():
            grand += float(loads.sum(dtype=torch.float64))
            _check_total(grand, path, "loads of all ranks")
        if loads.dim() != 3 or 0 in loads.shape:
            raise _fail(path, "loads must be [local_layers, forwards, physical_experts], none of them empty, got "
                        f"{tuple(loads.shape)}")
        layers = a["layer_numbers"].reshape(-1)
        if layers.dtype.kind not in "iu" or layers.size != loads.shape[0]:
            raise _fail(path, f"layer_numbers must be {loads.shape[0]} integers (one per local layer)")
        if "physical_to_logical_map" in a:
            loads = _physical_to_logical(loads.transpose(0, 1), a["physical_to_logical_map"],
                                         None, path).transpose(0, 1)
        if forwards is not None and (loads.shape[1], loads.shape[2]) != (forwards, experts):
            raise _fail(path, f"loads are [*, {loads.shape[1]} forwards, {loads.shape[2]} experts], "
                        f"{paths[0]} has [*, {forwards}, {experts}]")
        forwards, experts = loads.shape[1], loads.shape[2]
        for i, layer in enumerate(layers.tolist()):
            ranks = per_layer.setdefault(int(layer), {})
            if rank in ranks:
                raise _fail(path, f"layer {layer} of ep_rank {rank} is also in {ranks[rank][0]}")
            ranks[rank] = (path, loads[i])
    numbers = sorted(per_layer)
    for layer in numbers:
        present = per_layer[layer]
        if len(present) != ep_size:      # the first few missing ranks (ep_size may be huge: no range set)
            missing_ranks = list(itertools.islice((r for r in range(ep_size) if r not in present), 8))
            more = ", ..." if ep_size - len(present) > len(missing_ranks) else ""
            raise _fail(paths[0], f"layer {layer} lacks ep_rank(s) {str(missing_ranks)[:-1]}{more}] of ep_size {ep_size}")
    out = torch.stack([torch.stack([t for _, t in per_layer[layer].values()]).sum(0) for layer in numbers], dim=1)
    return _check_values(out, paths[0]), numbers


# ---------------------------------------------------------------------------------------
# TensorRT-LLM expert statistics and vLLM saved EPLB load windows (.safetensors)

_TRTLLM_KEY = re.compile(r"^(\d{1,12})_(\d{1,6})$")            # "{iteration}_{layer}"
_TRTLLM_RANK_FILE = re.compile(r"^rank(\d+)\.safetensors$")
# Files TensorRT-LLM writes beside the counts, with the same key names but other contents.
_TRTLLM_OTHER = re.compile(r"(^cooccurrence_rank|^token_selected_experts_rank|_raw\.safetensors$)")
_META_FILE_BYTES = 1 << 20


def _safetensors_kind(path: Path) -> str:
    """"trtllm" when a ``.safetensors`` file's tensors are named ``{iteration}_{layer}``, else
    "vllm_eplb"."""
    names = list(safetensors_file.read_header(path)[0])
    return "trtllm" if names and all(_TRTLLM_KEY.match(n) for n in names) else "vllm_eplb"


def _trtllm_files(paths: list[Path]) -> tuple[list[Path], Path | None]:
    """(the per-rank count files, meta_info.json or None) among ``paths`` (a statistics
    directory holds more: co-occurrence and raw token files, which are not counts)."""
    counts = [p for p in paths if p.suffix.lower() == ".safetensors" and not _TRTLLM_OTHER.search(p.name)]
    ranked = [p for p in counts if _TRTLLM_RANK_FILE.match(p.name)]
    counts = ranked or counts
    meta = [p for p in paths if p.name == "meta_info.json"]
    if not counts:
        raise _fail(paths[0], "no TensorRT-LLM count file (rank<N>.safetensors) among the files given")
    return counts, (meta[0] if meta else None)


def read_trtllm(spec: str | Path | Sequence[str | Path]) -> tuple[torch.Tensor, dict[str, Any]]:
    """(loads [iterations, layers, experts], meta) from TensorRT-LLM's expert statistics: the
    directory ``EXPERT_STATISTIC_PATH`` (or its files) written when
    ``EXPERT_STATISTIC_ITER_RANGE`` is set: ``meta_info.json`` (``num_experts``,
    ``num_experts_per_token``) and one ``rank<N>.safetensors`` per rank whose tensors, named
    ``{iteration}_{layer}``, count the tokens routed to each expert ([experts] int32) by
    that rank. Counts are summed over the ranks (as TensorRT-LLM's own reader does); the
    iterations must be consecutive and every (iteration, layer) present. Layers keep their
    model numbers in ``meta["layer_numbers"]`` (only MoE layers are recorded)."""
    files, meta_path = _trtllm_files(expand_paths(spec))
    meta: dict[str, Any] = {}
    if meta_path is not None:
        if meta_path.stat().st_size > _META_FILE_BYTES:
            raise _fail(meta_path, f"is {meta_path.stat().st_size} bytes (limit {_META_FILE_BYTES})")
        meta = filecheck.parse_meta(meta_path.read_bytes(), meta_path, "meta_info")
    num_experts = meta.get("num_experts")
    if num_experts is not None and (isinstance(num_experts, bool) or not isinstance(num_experts, int)):
        raise _fail(meta_path, f"meta_info.num_experts must be an integer, got {num_experts!r:.40}")
    summed: dict[tuple[int, int], torch.Tensor] = {}
    grand = 0.0
    for path in files:
        header = safetensors_file.read_header(path)[0]
        bad = next((n for n in header if not _TRTLLM_KEY.match(n)), None)
        if bad is not None:
            raise _fail(path, f"tensor {bad[:60]!r} is not named {{iteration}}_{{layer}} (not a TensorRT-LLM "
                        f"expert statistic file)")
        for name, t in safetensors_file.read_tensors(path).items():
            t = _as_tensor(t, path, f"tensor {name!r}")
            if t.dim() != 1 or t.numel() == 0:
                raise _fail(path, f"tensor {name!r} must be a non-empty [experts] count vector, got shape "
                            f"{tuple(t.shape)}")
            E = num_experts if num_experts is not None else next(iter(summed.values()), t).numel()
            if t.numel() != E:
                raise _fail(path, f"tensor {name!r} counts {t.numel()} experts, expected {E}"
                            + (" (meta_info.num_experts)" if num_experts is not None else ""))
            _check_values(t, path, f"tensor {name!r}")
            if not t.is_floating_point():
                grand += float(t.sum(dtype=torch.float64))
                _check_total(grand, path, "counts of all ranks")
            it, layer = (int(x) for x in _TRTLLM_KEY.match(name).groups())
            key = (it, layer)
            t = t.to(torch.float64) if t.is_floating_point() else t.to(torch.int64)
            summed[key] = summed[key] + t if key in summed else t.clone()
    if not summed:
        raise _fail(files[0], "holds no counts")
    iters = sorted({i for i, _ in summed})
    layers = sorted({l for _, l in summed})
    if iters[-1] + 1 - iters[0] != len(iters):
        missing = sorted(set(range(iters[0], iters[-1] + 1)) - set(iters))[:5]
        raise _fail(files[0], f"iterations {iters[0]}..{iters[-1]} are not consecutive (missing {missing})")
    absent = next(((i, l) for i in iters for l in layers if (i, l) not in summed), None)
    if absent is not None:
        raise _fail(files[0], f"iteration {absent[0]} has no counts for layer {absent[1]} (every iteration "
                    f"must record every layer)")
    floating = any(t.is_floating_point() for t in summed.values())
    out = torch.stack([torch.stack([summed[(i, l)].to(torch.float64) if floating else summed[(i, l)]
                                    for l in layers]) for i in iters])
    extra = {"layer_numbers": layers, "iterations": [iters[0], iters[-1] + 1], "ranks": len(files)}
    if meta.get("num_experts_per_token") is not None:
        extra["top_k"] = meta["num_experts_per_token"]
    return _check_values(out, files[0]), extra


# vLLM saves the all-reduced logical load of its window (EPLBConfig(save_load_window=True,
# save_dir=...): global_expert_load_window_i<N>.safetensors); the tensor's name is not part of
# a documented layout, so these names are tried first, then the file's only tensor.
VLLM_EPLB_KEYS = ("global_expert_load_window", "expert_load_window", "logical_expert_load", "expert_load",
                  "loads", "weights")
_VLLM_EPLB_INDEX = re.compile(r"_i(\d+)\.safetensors$")
_MAP_KEY = "physical_to_logical_map"


def read_slot_map(path: str | Path, num_layers: int | None = None) -> torch.Tensor:
    """physical_to_logical_map [layers, physical] from a JSON slot map as vLLM's offline
    EPLB reads it: one list of logical ids shared by every MoE layer, a list per layer, or an
    object holding ``physical_to_logical_map``. ``num_layers`` expands a shared list."""
    path = Path(path)
    if path.stat().st_size > filecheck.MAX_META_BYTES * 64:
        raise _fail(path, f"slot map is {path.stat().st_size} bytes (limit {filecheck.MAX_META_BYTES * 64})")
    try:
        with path.open("rb") as fh:
            obj = safejson.load(fh, max_depth=4)
    except (OSError, ValueError) as exc:
        raise _fail(path, f"cannot read the slot map ({type(exc).__name__}: {str(exc)[:80]})") from None
    if isinstance(obj, dict):
        if _MAP_KEY not in obj:
            raise _fail(path, f"slot map object has no {_MAP_KEY!r}")
        obj = obj[_MAP_KEY]
    m = _as_tensor(obj, path, "slot map")
    if m.is_floating_point() or m.dim() not in (1, 2) or m.numel() == 0:
        raise _fail(path, f"slot map must be integer logical ids, one list or one per layer, got "
                    f"{m.dtype} {tuple(m.shape)}")
    if m.dim() == 1:
        m = m.unsqueeze(0).expand(num_layers or 1, -1)
    if num_layers is not None and m.shape[0] != num_layers:
        raise _fail(path, f"slot map has {m.shape[0]} layers, the loads {num_layers}")
    return m


def read_vllm_eplb(spec: str | Path | Sequence[str | Path]) -> tuple[torch.Tensor, dict[str, Any]]:
    """(loads [windows, layers, experts], meta) from vLLM's saved EPLB load windows:
    ``.safetensors`` files holding a ``[layers, experts]`` load (one saved window; a
    ``[steps, layers, experts]`` window is kept step by step). Several files
    (``global_expert_load_window_i0, _i1, ...``) are consecutive windows, ordered by their
    index. A load over physical slots is mapped to logical experts by a
    ``physical_to_logical_map [layers, physical]`` stored in the file or by one JSON slot map
    among the files given (:func:`read_slot_map`)."""
    paths = expand_paths(spec)
    files = [p for p in paths if p.suffix.lower() == ".safetensors"]
    maps = [p for p in paths if p.suffix.lower() == ".json"]
    if not files:
        raise _fail(paths[0], "no .safetensors load window among the files given")
    if len(maps) > 1:
        raise _fail(maps[0], f"{len(maps)} JSON files given: at most one slot map")
    files.sort(key=lambda p: (int(m[1]) if (m := _VLLM_EPLB_INDEX.search(p.name)) else -1, p.name))
    parts = []
    for path in files:
        header = safetensors_file.read_header(path)[0]
        key = next((k for k in VLLM_EPLB_KEYS if k in header), None)
        rest = [k for k in header if k != _MAP_KEY]
        if key is None and len(rest) == 1:
            key = rest[0]
        if key is None:
            raise _fail(path, f"no load tensor: expected one of {', '.join(VLLM_EPLB_KEYS)} or a single tensor, "
                        f"found {', '.join(n[:40] for n in header) or 'none'}")
        got = safetensors_file.read_tensors(path, [key] + ([_MAP_KEY] if _MAP_KEY in header else []))
        t = _check_values(_as_tensor(got[key], path, key), path, key)
        if t.dim() == 2:
            t = t.unsqueeze(0)
        if t.dim() != 3 or 0 in t.shape:
            raise _fail(path, f"{key} must be [layers, experts] (or [steps, layers, experts]), none empty, got "
                        f"{tuple(got[key].shape)}")
        p2l = got.get(_MAP_KEY)
        if p2l is None and maps:
            p2l = read_slot_map(maps[0], t.shape[1])
        if p2l is not None:
            t = _physical_to_logical(t, p2l, None, path)
        if parts and t.shape[1:] != parts[0].shape[1:]:
            raise _fail(path, f"{key} is [*, {t.shape[1]}, {t.shape[2]}], {files[0].name} has "
                        f"[*, {parts[0].shape[1]}, {parts[0].shape[2]}]")
        parts.append(t)
    if any(p.is_floating_point() for p in parts):
        parts = [p.to(torch.float64) for p in parts]
    out = torch.cat(parts)
    return _check_values(_integral(out), files[0]), {"windows": len(files)}


# ---------------------------------------------------------------------------------------
# CSV, npz, pt, json

# CSV files are parsed in blocks of about this many characters by numpy's C reader:
# memory holds the parsed numbers (8 bytes each) and one block of text, never a Python
# object per cell.
_CSV_BLOCK_CHARS = 1 << 22


def _csv_chunks(fh, first: list[str] | None = None) -> Iterator[list[str]]:
    """Non-empty lines of ``fh`` in lists of about ``_CSV_BLOCK_CHARS`` characters (``first`` leads)."""
    carry = "".join(first or [])
    while True:
        block = fh.read(_CSV_BLOCK_CHARS)
        if not block:
            break
        block = carry + block
        cut = block.rfind("\n") + 1
        carry = block[cut:]
        lines = [ln for ln in block[:cut].splitlines() if ln]
        if lines:
            yield lines
    lines = [ln for ln in carry.splitlines() if ln]
    if lines:
        yield lines


def _parse_chunk(lines: list[str], usecols: Sequence[int] | None, path: Path, what: str) -> np.ndarray:
    """[rows, columns] float64 of one chunk of CSV lines (blank lines and rows of empty cells skipped)."""
    def parse(rows):
        return np.loadtxt(rows, delimiter=",", usecols=usecols, dtype=np.float64, ndmin=2, quotechar='"',
                          comments=None)
    try:
        return parse(lines)
    except (ValueError, IndexError):
        lines = [ln for ln in lines if ln.strip(", \t\r")]
    try:
        return parse(lines) if lines else np.zeros((0, len(usecols) if usecols else 0))
    except (ValueError, IndexError) as exc:
        widths = sorted({len(next(csv.reader([ln]))) for ln in lines})
        if what == "matrix" and len(widths) > 1:
            raise _fail(path, f"CSV matrix: rows have different lengths {widths[:8]}") from None
        # numpy quotes the offending cell: keep its position, never the file's text (an error
        # must not echo a line of whatever file a path names).
        detail = re.sub(r"(string|value) '.*?' ", "", str(exc).splitlines()[0])[:200] if str(exc) else type(exc).__name__
        if what == "matrix":
            raise _fail(path, f"CSV matrix: non-numeric cell ({detail})") from None
        raise _fail(path, f"long-form CSV: short row or non-numeric cell ({detail})") from None


def _stack_freeing(parts: list[np.ndarray]) -> np.ndarray:
    """np.concatenate of ``parts`` (emptied on the way): each block is freed once copied,
    so the peak stays about one table, not two."""
    out = np.empty((sum(len(p) for p in parts), parts[0].shape[1]), dtype=parts[0].dtype)
    row = 0
    parts.reverse()
    while parts:
        block = parts.pop()
        out[row:row + len(block)] = block
        row += len(block)
    return out


def read_csv(path: str | Path) -> torch.Tensor:
    """[layers, experts] (matrix form) or [steps, layers, experts] (long form with a header
    ``layer,expert,load[,step]``); absent (layer, expert) pairs of the long form are 0.

    Read in blocks (:data:`_CSV_BLOCK_CHARS` characters) by numpy's C parser: the peak memory
    is the parsed numbers plus one chunk, whatever the file's size."""
    path = Path(path)
    try:
        # utf-8-sig: a byte-order mark (Excel writes one) is not part of the first cell.
        with path.open(newline=None, encoding="utf-8-sig") as fh:
            first = next((ln for ln in fh if ln.strip() and ln.strip(", \t\r\n")), None)
            if first is None:
                raise _fail(path, "the CSV file is empty")
            head_cells = next(csv.reader([first]))
            head = [c.strip().lower() for c in head_cells]
            if "layer" in head and "expert" in head:
                return _read_long_csv(path, head, fh)
            return _read_matrix_csv(path, first, head_cells, fh)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise _fail(path, f"cannot read CSV ({exc})") from None


def _read_matrix_csv(path: Path, first: str, head: list[str], fh) -> torch.Tensor:
    index_column = head[0].strip() == ""   # pandas' to_csv: an empty corner cell, then an index column
    # A header is recognised by its text: a row of numbers is data, whatever its position or
    # values (a first row 0,1,2,3 is loads, not expert ids).
    try:
        [float(c) for c in head]
        header = False
    except ValueError:
        header = True
    width = len(head)
    usecols = list(range(1, width)) if index_column else None
    parts = [_parse_chunk(chunk, usecols, path, "matrix") for chunk in _csv_chunks(fh, None if header else [first])]
    parts = [p for p in parts if len(p)]
    if not parts:
        raise _fail(path, "the CSV file has a header but no rows")
    widths = sorted({p.shape[1] for p in parts})
    if len(widths) > 1:
        raise _fail(path, f"CSV matrix: rows have different lengths {widths[:8]}")
    return _check_values(_integral(torch.from_numpy(_stack_freeing(parts))), path)


# A long CSV lists (layer, expert[, step]) ids; missing pairs are zero, but ids far beyond
# the rows given are a mistake (and would allocate a huge dense array): a trace of more
# cells than this (32 MB of float64) must list at least 1/64 of them. At 50M cells a
# 30-byte file (`49,999999,1`) grew the reader by 1.15 GB.
_LONG_CSV_MAX_CELLS = 1 << 22


def _read_long_csv(path: Path, head: list[str], fh) -> torch.Tensor:
    load_col = next((c for c in _LONG_LOAD_COLUMNS if c in head), None)
    if load_col is None:
        raise _fail(path, f"long-form CSV needs a load column named one of {', '.join(_LONG_LOAD_COLUMNS)}")
    cols = [head.index(c) for c in ("layer", "expert", load_col)] + ([head.index("step")] if "step" in head else [])
    parts = [p for p in (_parse_chunk(chunk, cols, path, "long") for chunk in _csv_chunks(fh)) if len(p)]
    if not parts:
        raise _fail(path, "the CSV file has a header but no rows")
    data = _stack_freeing(parts)
    # Column views, no copies: memory stays the parsed table plus one id per row.
    ids = [data[:, 0], data[:, 1]] + ([data[:, 3]] if len(cols) == 4 else [])
    for col in ids:
        if not np.isfinite(col).all() or (col < 0).any() or (col != np.floor(col)).any():
            raise _fail(path, "layer, expert and step must be integers >= 0")
    rows = len(data)
    T = int(ids[2].max()) + 1 if len(ids) == 3 else 1
    L, E = int(ids[0].max()) + 1, int(ids[1].max()) + 1
    if T * L * E > max(_LONG_CSV_MAX_CELLS, 64 * rows):
        raise _fail(path, f"ids imply a [{T}, {L}, {E}] trace from only {rows} rows: "
                    f"layer, expert and step ids must be dense 0-based indices")
    # exact in float64: the cell count is bounded above, far below 2**53
    flat = (ids[0] * E + ids[1]) if len(ids) == 2 else ((ids[2] * L + ids[0]) * E + ids[1])
    flat = flat.astype(np.int64)
    seen = np.zeros(T * L * E, dtype=bool)
    seen[flat] = True
    if int(seen.sum()) != rows:
        raise _fail(path, "a (step, layer, expert) appears twice")
    del seen
    out = torch.zeros(T * L * E, dtype=torch.float64)
    out[torch.from_numpy(flat)] = torch.from_numpy(np.ascontiguousarray(data[:, 2]))
    del data, flat
    out = _check_values(_integral(out.view(T, L, E)), path)
    return out if len(cols) == 4 else out[0]


def _integral(t: torch.Tensor) -> torch.Tensor:
    """Float counts that are whole numbers become int64 (CSV and JSON give floats)."""
    if t.is_floating_point() and bool(torch.isfinite(t).all()) and bool((t == t.round()).all()) \
            and (t.numel() == 0 or float(t.abs().max()) < 2**53):
        return t.to(torch.int64)
    return t


def read_npz(path: str | Path) -> tuple[torch.Tensor, dict[str, Any]]:
    """(loads, meta) from an ``.npz`` (meta is the trace's metadata when it has one)."""
    path = Path(path)
    a = _npz_arrays(path)
    if "topk_ids" in a:
        # A per-token routing trace (solvers.routing): its load counts, one step.
        trace = routing_from_arrays(a, path)
        return trace.loads().unsqueeze(0), {**trace.meta, "routing_tokens": trace.num_tokens}
    meta: dict[str, Any] = {}
    if "meta" in a:
        if a["meta"].dtype.kind not in "US" or a["meta"].size != 1:
            raise _fail(path, f"meta: must be one JSON string, got a {a['meta'].dtype} array of shape {a['meta'].shape}")
        meta = filecheck.parse_meta(a["meta"].reshape(()).item(), path)
    return _check_values(_as_tensor(_pick(a, path), path), path), meta


def read_pt(path: str | Path) -> tuple[torch.Tensor, dict[str, Any]]:
    """(loads, meta) from a ``.pt``: a tensor, or a dict holding ``loads``/``weights``/``logical_count``."""
    path = Path(path)
    obj = _torch_load(path)
    meta: dict[str, Any] = {}
    if isinstance(obj, dict):
        if obj.get("meta") is not None:
            raw = obj["meta"]
            meta = filecheck.parse_meta(raw, path) if isinstance(raw, str) else filecheck.check_meta(raw, path)
        obj = _pick(obj, path)
    # a copy: the file was memory-mapped (an upload's temporary file goes away; a view would
    # also keep a larger storage mapped)
    return _check_values(_as_tensor(obj, path).clone(), path), meta


def read_json(path: str | Path) -> torch.Tensor:
    """Nested lists, or an object holding ``loads``/``weights``/``logical_count``."""
    path = Path(path)
    try:
        obj = filecheck.read_json(path, PARAM)          # size, UTF-8, depth and build budget first
    except LoadFileError as exc:
        raise _fail(path, f"cannot read .json file ({str(exc).split(': ', 2)[-1]})") from None
    if isinstance(obj, dict):
        obj = _pick(obj, path)
    return _check_values(_integral(_as_tensor(obj, path)), path)


# ---------------------------------------------------------------------------------------
# Entry points

def _detect_files(paths: list[Path]) -> str:
    """The format of the files a spec names: a directory of TensorRT-LLM statistics or vLLM
    load windows holds other files beside the counts (meta_info.json, a slot map), so any
    ``.safetensors`` among several files decides; else the first file's format."""
    tensors = [p for p in paths if p.suffix.lower() == ".safetensors"]
    if len(paths) > 1 and tensors:
        counts = [p for p in tensors if not _TRTLLM_OTHER.search(p.name)] or tensors
        return _safetensors_kind(counts[0])
    return detect_format(paths[0])


def read_raw(spec: str | Path | Sequence[str | Path], format: str | None = None) -> tuple[torch.Tensor, dict[str, Any]]:
    """(loads as stored: [layers, experts] or [steps, layers, experts], meta) from any format
    (the format level under :func:`solvers.io.read_loads`, which drops dense layers and windows)."""
    paths = expand_paths(spec)
    if format is not None and format not in FORMATS:
        raise LoadFileError("format", f"must be one of {', '.join(FORMATS)}, got {format!r}")
    fmt = format or _detect_files(paths)
    multi = fmt in ("sglang", "megatron", "trtllm", "vllm_eplb")
    if len(paths) > 1 and not multi:
        raise _fail(spec, f"{len(paths)} files given; only sglang, megatron and trtllm per-rank dumps and "
                    f"vllm_eplb windows are merged from several files")
    meta: dict[str, Any] = {"source": ", ".join(map(str, paths)) if len(paths) <= 4 else f"{paths[0]} (+{len(paths) - 1} files)",
                            "format": fmt}
    if fmt == "megatron":
        loads, meta["layer_numbers"] = read_megatron(paths)
    elif fmt in ("trtllm", "vllm_eplb"):
        loads, extra = (read_trtllm if fmt == "trtllm" else read_vllm_eplb)(paths)
        meta = {**extra, **meta}
    elif fmt in ("npz", "pt"):
        loads, extra = (read_npz if fmt == "npz" else read_pt)(paths[0])
        meta = {**extra, **meta}
    else:
        loads = read_sglang(paths) if fmt == "sglang" else {"vllm": read_vllm, "csv": read_csv,
                                                            "json": read_json}[fmt](paths[0])
    if loads.dim() not in (2, 3) or 0 in loads.shape:
        raise _fail(paths[0], f"expected [layers, experts] or [steps, layers, experts], got shape {tuple(loads.shape)}")
    return loads, meta


def read_trace(spec: str | Path | Sequence[str | Path], format: str | None = None) -> Loads:
    """:class:`Loads` (integer counts ``[steps, layers, experts]``) from any format; a
    ``[layers, experts]`` matrix becomes one step."""
    return as_trace(*read_raw(spec, format))


def as_trace(loads: torch.Tensor, meta: dict[str, Any]) -> Loads:
    """:class:`Loads` of integer counts from loads as read (``[layers, experts]`` becomes one
    step); fractional loads are refused."""
    meta = dict(meta)
    loads = _integral(loads)
    if loads.is_floating_point():
        raise _fail(meta.get("source", "loads"), "a trace holds integer token counts; this file has fractional loads "
                    "(use it as --loads weights instead)")
    if loads.dim() == 2:
        loads = loads.unsqueeze(0)
    meta.setdefault("num_layers", loads.shape[1])
    meta.setdefault("num_experts", loads.shape[2])
    return Loads(loads, meta)


def read_weights(spec: str | Path | Sequence[str | Path], format: str | None = None) -> torch.Tensor:
    """weights: [layers, experts], a 3-D trace summed over steps (a vLLM history is summed
    while it streams, in O(layers x experts) memory)."""
    paths = expand_paths(spec)
    fmt = format or _detect_files(paths)
    if fmt == "vllm" and len(paths) == 1:
        return sum_vllm(paths[0])
    loads, _ = read_raw(paths, fmt)
    return loads.sum(0) if loads.dim() == 3 else loads
