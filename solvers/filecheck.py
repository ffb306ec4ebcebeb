"""The guarded boundary: checks on untrusted files made before anything they declare is allocated.

A loads or plan file states its own sizes (``.npy`` headers, zip records, tensor shapes and
strides, nested metadata). Each reader asks this module first, so a file of a few MB that
declares gigabytes, a tensor type the arithmetic cannot handle, or metadata of the wrong
type ends in one :class:`~solvers.errors.LoadFileError` line naming the file and the field,
never in an allocation, a recursion or a traceback.

- :func:`check_zip`: every member's decompressed size (``.npz`` arrays, ``.pt`` records)
  against :data:`MAX_ARRAY_BYTES` and their sum against :data:`MAX_UNPACKED_BYTES`.
- :func:`check_npz`: every member that is an ``.npy`` array (whatever its name: numpy reads a
  member without the suffix too), from its header: dtype allow-list, declared bytes against
  the member's real size and the cap.
- :func:`check_torch_file` / :func:`check_tensors`: a ``.pt`` must be a zip archive (the
  legacy format allocates what its pickle declares before reading); every tensor in the
  loaded object must be a dense, strided CPU tensor of an allowed dtype whose elements do not
  overlap and whose declared bytes stay under the cap.
- :func:`check_pickle`: a ``.pt``'s pickle simulated on sizes before torch unpickles it
  (shared references expanded, nesting, cycles, globals outside torch's rebuilders).
- :func:`check_meta`: metadata against a schema (types, depth, size, finite numbers).
- :func:`safe_yaml`: YAML with the depth bound of :mod:`solvers.safejson` and finite keys.
- :func:`memory_budget` / :func:`check_build`: budgets in bytes of what a read will build
  (half the memory available, and at most :data:`BUILD_RATIO` times the input's size).

Every reader of a user's bytes goes through the reader family at the end of this module
(:func:`input_file`, :func:`read_text`, :func:`read_json`, :func:`iter_lines`,
:func:`load_npz`, :func:`load_npy`, :func:`load_torch`); ``tests/test_robust_boundary_scan.py``
fails on a reader elsewhere.
"""
from __future__ import annotations

import glob as _glob
import io
import json
import math
import numbers
import os
import pickle
import pickletools
import stat
import warnings
import zipfile
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch

from . import safejson
from .errors import LoadFileError
from .paths import input_kind

# Largest array a loads or plan file may declare (a [10000, 61, 256] int64 trace is 1.2 GiB).
MAX_ARRAY_BYTES = 4 << 30
# Largest sum of a zip archive's members once decompressed (an .npz, a .pt): a 1.5 MB bomb
# declaring 3.7 GB is refused from the zip directory, before a byte is inflated.
MAX_UNPACKED_BYTES = 6 << 30
# Real loads compress a few times (savez_compressed of counts: 2-10x); a member that
# inflates more than BOMB_RATIO times to more than BOMB_MIN_BYTES is a bomb.
BOMB_RATIO = 200
BOMB_MIN_BYTES = 64 << 20
# A .pt's pickle (data.pkl) becomes Python objects about 10x its size: numbers in lists are
# fine at this size (a million), a bomb of nested lists is not. Every opcode is scanned
# before torch unpickles it (about 1 s per MB of small numbers), so the cap also bounds the
# scan. A dump's tensors are stored beside the pickle: its pickle is a few KB.
MAX_PICKLE_BYTES = 4 << 20
# What a pickle builds, counted with every shared reference expanded (a list referenced
# 20,000 times becomes 20,000 rows once converted): at most this many objects per pickle
# byte, above a floor (a tree without sharing builds about one object per byte).
PICKLE_EXPANSION = 4
PICKLE_NODES_FLOOR = 1 << 20
# Nesting of containers in a pickle: a dump is a dict of lists of dicts of tensors.
MAX_PICKLE_DEPTH = 32
# Modules whose globals a torch.save file may name (tensor rebuilders, storages, OrderedDict):
# anything else is a pickled Python object, refused before torch sees it.
_PICKLE_MODULES = ("torch", "collections", "_codecs")

# Bytes a reader may build from one input (arrays, tensors and the Python objects of a
# parsed text): half the memory available when the read starts, at most MAX_BUILD_BYTES.
MAX_BUILD_BYTES = 16 << 30
# An input may build at most BUILD_RATIO times its own size once past BUILD_FLOOR bytes: a
# file of 1 MB never builds more than a few hundred MB, whatever it declares.
BUILD_RATIO = 256
BUILD_FLOOR = 256 << 20
# Text inputs read whole (JSON documents, --gpu-speed files): their size, before parsing.
MAX_TEXT_BYTES = 256 << 20
# One line of a JSON Lines file.
MAX_LINE_BYTES = 64 << 20
# Metadata (a trace's meta, a plan's provenance) is small; deeper or larger is hostile.
MAX_META_DEPTH = 8
MAX_META_BYTES = 1 << 20

_NPY_MAGIC = b"\x93NUMPY"

# Integer and real floating types only: the scorer sums and divides loads.
_TORCH_ALLOWED = {torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8,
                  torch.float16, torch.bfloat16, torch.float32, torch.float64}
for _name in ("uint16", "uint32", "uint64"):
    if hasattr(torch, _name):
        _TORCH_ALLOWED.add(getattr(torch, _name))
_NUMPY_KINDS = "iuf"
# Text members an .npz may hold beside its arrays (a trace's meta is a JSON string).
_NUMPY_TEXT_KINDS = "US"


def _fail(path: Any, field: str, message: str, param: str = "loads") -> LoadFileError:
    text = f"{path}: {field}: {message}" if field else f"{path}: {message}"
    return LoadFileError(param, " ".join(text.split()))


def dtype_refusal(dtype: Any) -> str | None:
    """Why a dtype (torch or numpy) cannot hold loads, or None when it can."""
    if isinstance(dtype, torch.dtype):
        if dtype in _TORCH_ALLOWED:
            return None
        name = str(dtype).replace("torch.", "")
    else:
        dt = np.dtype(dtype)
        if dt.kind in _NUMPY_KINDS and dt.itemsize <= 8:
            return None
        name = "object" if dt.hasobject else str(dt)
    if name.startswith("float8"):
        kind = "a float8 type (too few bits for token counts)"
    elif "complex" in name:
        kind = "complex"
    elif name == "bool":
        kind = "boolean"
    elif name == "object":
        kind = "Python objects (refused: loads are numbers)"
    else:
        kind = "not an integer or real floating type"
    return f"dtype {name} is {kind}; loads must be real numbers (an integer or real floating type)"


# ---------------------------------------------------------------------------------------
# Zip archives (.npz, .pt)

def check_zip(path: str | Path, max_member: int | None = None, max_total: int | None = None,
              pickle_cap: bool = False) -> list[zipfile.ZipInfo]:
    """The members of a zip archive, refused when one declares more than ``max_member``
    bytes decompressed or all together more than ``max_total`` (from the central directory:
    nothing is inflated). ``pickle_cap``: a torch file's ``*.pkl`` record is held to
    :data:`MAX_PICKLE_BYTES`."""
    try:
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
    except (OSError, zipfile.BadZipFile, ValueError, EOFError) as exc:
        raise _fail(path, "", f"not a readable zip archive ({type(exc).__name__}: {exc})") from None
    max_member = MAX_ARRAY_BYTES if max_member is None else max_member      # read now: tests lower the caps
    max_total = MAX_UNPACKED_BYTES if max_total is None else max_total
    total = 0
    for info in infos:
        cap = MAX_PICKLE_BYTES if pickle_cap and info.filename.endswith(".pkl") else max_member
        if info.file_size > cap:
            raise _fail(path, info.filename, f"decompresses to {info.file_size} bytes "
                        f"(limit {cap}; {info.compress_size} bytes stored)")
        if info.file_size > BOMB_MIN_BYTES and info.file_size > BOMB_RATIO * max(info.compress_size, 1):
            raise _fail(path, info.filename, f"decompresses {info.compress_size} bytes to {info.file_size} "
                        f"(ratio above {BOMB_RATIO}: a decompression bomb, not loads)")
        total += info.file_size
    if total > max_total:
        raise _fail(path, "", f"its members decompress to {total} bytes (limit {max_total})")
    return infos


_NPY_HEADERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0,
                (3, 0): getattr(np.lib.format, "read_array_header_2_0")}


def check_npz(path: str | Path) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Refuse an ``.npz`` before numpy allocates anything: every member is size-checked
    (:func:`check_zip`); every member that is an ``.npy`` array (by its magic, whatever its
    name) must declare an allowed dtype (text for metadata) and no more bytes than the
    member holds. Returns each array's declared (shape, dtype), by numpy's key."""
    infos = check_zip(path)
    headers: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
    try:
        with zipfile.ZipFile(path) as zf:
            for info in infos:
                with zf.open(info) as fh:
                    if fh.read(len(_NPY_MAGIC)) != _NPY_MAGIC:
                        continue                 # numpy returns such a member as bytes (size checked)
                    version = (fh.read(1)[0], fh.read(1)[0])
                    reader = _NPY_HEADERS.get(version)
                    if reader is None:
                        raise _fail(path, info.filename, f"unsupported .npy format version {version}")
                    shape, _, dtype = reader(fh)
                    header = fh.tell()
                if dtype.hasobject or (dtype.kind not in _NUMPY_KINDS + _NUMPY_TEXT_KINDS):
                    raise _fail(path, info.filename, dtype_refusal(dtype) or f"dtype {dtype} refused")
                nbytes = math.prod(int(d) for d in shape) * dtype.itemsize
                if nbytes > info.file_size - header or nbytes > MAX_ARRAY_BYTES:
                    raise _fail(path, info.filename, f"the header declares a {tuple(shape)} {dtype} array "
                                f"({nbytes} bytes) but the archive holds {max(0, info.file_size - header)} "
                                f"bytes for it (limit {MAX_ARRAY_BYTES})")
                key = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
                headers[key] = (tuple(int(d) for d in shape), dtype)
        return headers
    except LoadFileError:
        raise
    except (OSError, ValueError, EOFError, IndexError, zipfile.BadZipFile, KeyError, SyntaxError) as exc:
        raise _fail(path, "", f"cannot read .npz file ({type(exc).__name__}: {exc})") from None


# ---------------------------------------------------------------------------------------
# Torch files and tensors

def check_torch_file(path: str | Path) -> None:
    """A ``.pt`` must be a zip archive (``torch.save`` since torch 1.6) whose records pass
    :func:`check_zip` and whose pickle passes :func:`check_pickle` (what it builds, shared
    references expanded; its nesting; the globals it names): the legacy format allocates
    every storage its pickle declares before reading a byte, so it is refused."""
    with open(path, "rb") as fh:
        head = fh.read(4)
    if head[:1] == b"\x80":
        raise _fail(path, "", "cannot read .pt file: a raw pickle or a legacy (pre-1.6) torch file; pickled "
                    "Python objects are not read (loading them could run code, and legacy files allocate what "
                    "they declare): re-save it with torch.save")
    if head[:2] != b"PK":
        raise _fail(path, "", "cannot read .pt file: it is not a torch file (torch.save writes a zip archive; another "
                    "format with a .pt suffix?)")
    try:
        infos = check_zip(path, pickle_cap=True)
        pickles = [i for i in infos if i.filename.endswith("data.pkl")]
        if len(pickles) != 1:
            raise _fail(path, "", f"holds {len(pickles)} data.pkl records (a torch file holds one)")
        with zipfile.ZipFile(path) as zf:
            data = zf.read(pickles[0])
        check_pickle(data, path, pickles[0].filename)
    except LoadFileError as exc:
        raise _fail(path, "", "cannot read .pt file: " + str(exc).split(f"{path}: ", 1)[-1]) from None
    except (OSError, zipfile.BadZipFile, ValueError, EOFError) as exc:
        raise _fail(path, "", f"cannot read .pt file ({type(exc).__name__}: {exc})") from None


class _Node:
    """An object a pickle builds: its size with shared references expanded, its nesting,
    and whether a container already holds it (a later change would escape the count)."""

    __slots__ = ("size", "depth", "held")

    def __init__(self, size: int = 1, depth: int = 0):
        self.size, self.depth, self.held = size, depth, False


# Opcodes that change the object below their arguments in place (lists, dicts, set-state).
_MUTATORS = {"APPEND", "APPENDS", "SETITEM", "SETITEMS", "BUILD", "ADDITEMS"}
_MEMO_PUT = {"PUT", "BINPUT", "LONG_BINPUT"}
_MEMO_GET = {"GET", "BINGET", "LONG_BINGET"}


def _opcode_table() -> dict[str, tuple[int, bool, int, int]]:
    """name -> (kind, pops to a mark, items popped below the mark or from the top, items pushed);
    kind 0: generic, 1: mutator, 2: memo put, 3: memo get, 4: mark, 5: dup, 6: stop, 7: global."""
    table = {}
    mark = pickletools.markobject
    for op in pickletools.opcodes:
        before = op.stack_before
        has_mark = mark in before
        pre = before.index(mark) if has_mark else len(before)
        kind = (1 if op.name in _MUTATORS else 2 if op.name in _MEMO_PUT or op.name == "MEMOIZE"
                else 3 if op.name in _MEMO_GET else 4 if op.name == "MARK" else 5 if op.name == "DUP"
                else 6 if op.name == "STOP" else 7 if op.name in ("GLOBAL", "INST") else 0)
        table[op.name] = (kind, has_mark, pre, len(op.stack_after))
    return table


_OPCODES = _opcode_table()


def check_pickle(data: bytes, path: Any, field: str = "data.pkl") -> None:
    """Refuse a pickle before it is unpickled when what it builds, every shared reference
    (memo gets, ``DUP``) expanded as a later conversion to arrays expands it, exceeds
    :data:`PICKLE_EXPANSION` objects per byte (above :data:`PICKLE_NODES_FLOOR`); when it
    nests deeper than :data:`MAX_PICKLE_DEPTH`; when it names a global outside torch's
    rebuilders; or when a container holds itself or changes after another one holds it.

    The opcodes are simulated on sizes only (nothing is built): an 81 KB file whose one
    list is referenced 20,000 times is refused after about 5,000 opcodes."""
    limit = max(PICKLE_NODES_FLOOR, PICKLE_EXPANSION * len(data))
    stack: list[Any] = []
    marks: list[int] = []
    memo: dict[Any, _Node] = {}
    table = _OPCODES
    try:
        for op, arg, _pos in pickletools.genops(data):
            name = op.name
            kind, has_mark, pre, pushed = table[name]
            if kind == 4:
                marks.append(len(stack))
                continue
            if kind == 2:
                memo[len(memo) if name == "MEMOIZE" else arg] = stack[-1]
                continue
            if kind == 3:
                stack.append(memo[arg])
                continue
            if kind == 5:
                stack.append(stack[-1])
                continue
            if kind == 6:
                break
            if kind == 7:
                module = str(arg).split(" ", 1)[0]
                if module.split(".", 1)[0] not in _PICKLE_MODULES:
                    raise _fail(path, field, f"names the global {str(arg).replace(' ', '.')[:80]}: it holds pickled "
                                "Python objects beyond tensors, numbers, lists and dicts (refused: loading them "
                                "could run code)")
            if not has_mark and pre == 0:
                stack.extend([_Node()] * pushed) if pushed == 1 else stack.extend(_Node() for _ in range(pushed))
                continue                                  # a leaf: a number, a string, an empty container
            if has_mark:
                at = marks.pop()
                items = stack[at:]
                del stack[at:]
            else:
                items = []
            if pre:
                if len(stack) < pre:
                    raise ValueError("stack underflow")
                args = stack[-pre:]
                del stack[-pre:]
            else:
                args = []
            if kind == 1:
                node, children = args[0], args[1:] + items
                if node.held:
                    raise _fail(path, field, "a container changes after another one holds it (a cycle or a "
                                "hand-made pickle)")
            else:
                node, children = _Node(), args + items
            for child in children:
                if child is node:
                    raise _fail(path, field, "a container holds itself (a cycle)")
                child.held = True
                node.size += child.size
                if child.depth >= node.depth:
                    node.depth = child.depth + 1
            if node.size > limit:
                raise _fail(path, field, f"builds more than {limit} objects once its shared references are "
                            f"expanded ({len(data)} bytes of pickle; the limit is {PICKLE_EXPANSION} per byte): "
                            "one list referenced many times, not a dump")
            if node.depth > MAX_PICKLE_DEPTH:
                raise _fail(path, field, f"nests containers deeper than {MAX_PICKLE_DEPTH} levels")
            if pushed:
                stack.append(node)
    except LoadFileError:
        raise
    except (ValueError, IndexError, KeyError, TypeError) as exc:
        raise _fail(path, field, f"is not a valid pickle ({type(exc).__name__}: {str(exc)[:120]})") from None


def _non_overlapping(sizes: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether a strided view addresses every element at a distinct offset (dims of size 1
    ignored): sorted by stride, each stride exceeds the span of the smaller dims."""
    dims = sorted((st, sz) for sz, st in zip(sizes, strides) if sz > 1)
    span = 0
    for st, sz in dims:
        if st <= span:
            return False
        span += (sz - 1) * st
    return True


# A view may use at most twice its own bytes of storage (a strided half), plus this slack.
_VIEW_SLACK = 1 << 20


def check_tensor(t: torch.Tensor, path: Any, field: str) -> None:
    """A tensor read from a file: dense, strided, on the CPU (not meta), of an allowed dtype,
    with no stride 0 over a dimension, no overlapping elements, and at most
    :data:`MAX_ARRAY_BYTES` declared."""
    if t.layout != torch.strided:
        raise _fail(path, field, f"is a {str(t.layout).replace('torch.', '')} tensor; loads must be dense")
    if t.is_meta or t.device.type != "cpu":
        raise _fail(path, field, f"is a tensor on device {t.device.type!r} holding no data")
    if t.is_quantized:
        raise _fail(path, field, f"is a quantized tensor ({t.dtype}); loads need plain numbers")
    why = dtype_refusal(t.dtype)
    if why:
        raise _fail(path, field, why)
    sizes, strides = tuple(t.shape), tuple(t.stride())
    nbytes = math.prod(sizes) * t.element_size()
    if nbytes > MAX_ARRAY_BYTES:
        raise _fail(path, field, f"declares a {sizes} {t.dtype} tensor ({nbytes} bytes, limit {MAX_ARRAY_BYTES})")
    if any(sz > 1 and st == 0 for sz, st in zip(sizes, strides)):
        raise _fail(path, field, f"has a stride of 0 (shape {sizes}, strides {strides}): one stored value "
                    "posing as many")
    if not _non_overlapping(sizes, strides):
        raise _fail(path, field, f"has overlapping elements (shape {sizes}, strides {strides})")
    storage = t.untyped_storage().nbytes()
    if storage > 2 * nbytes + _VIEW_SLACK:
        raise _fail(path, field, f"is a view of {nbytes} bytes into a storage of {storage} bytes (save "
                    "tensor.clone() rather than a slice of a larger buffer)")


def iter_tensors(obj: Any, field: str = "", depth: int = 0) -> Iterator[tuple[str, torch.Tensor]]:
    """(field path, tensor) of every tensor in a loaded object (dicts, lists, tuples),
    refusing nesting deeper than :data:`MAX_META_DEPTH` + 2."""
    if depth > MAX_META_DEPTH + 2:
        raise LoadFileError("loads", f"{field or 'object'}: nested deeper than {MAX_META_DEPTH + 2} levels")
    if isinstance(obj, torch.Tensor):
        yield field or "tensor", obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from iter_tensors(v, f"{field}.{k}" if field else str(k), depth + 1)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from iter_tensors(v, f"{field}[{i}]", depth + 1)


def check_tensors(obj: Any, path: Any) -> None:
    """:func:`check_tensor` on every tensor of a loaded ``.pt`` object, and their declared
    bytes together under :data:`MAX_UNPACKED_BYTES` and :func:`memory_budget` (rows sharing
    one storage count each time)."""
    total = 0
    limit = min(MAX_UNPACKED_BYTES, memory_budget())
    try:
        for field, t in iter_tensors(obj):
            check_tensor(t, path, field)
            total += t.numel() * t.element_size()
            if total > limit:
                raise _fail(path, field, f"the tensors declare {total} bytes together (limit {limit}: "
                            "rows sharing one storage count each time)")
    except LoadFileError as exc:
        if str(path) in str(exc):
            raise
        raise _fail(path, "", str(exc).removeprefix("loads: ")) from None


# ---------------------------------------------------------------------------------------
# Metadata

# Known metadata fields and their types: a file that gives another type for one of these is
# refused naming it (readers take them on trust afterwards).
META_SCHEMA: dict[str, tuple[type, ...]] = {
    "model": (str,), "model_name": (str,), "scenario": (str,), "source": (str,), "dataset": (str,),
    "format": (str,), "num_layers": (int,), "num_experts": (int,), "num_groups": (int,), "top_k": (int,),
    "seed": (int,), "num_steps": (int,), "dense_layers": (int,),
}
_COUNT_FIELDS = {"num_layers", "num_experts", "num_groups", "top_k", "num_steps"}
META_INT_MAX = 1 << 31


def _check_tree(value: Any, path: Any, field: str, depth: int, max_depth: int, finite: bool = True,
                budget: list[int] | None = None) -> None:
    """Walk a parsed document: nesting at most ``max_depth``, finite numbers (``finite``).
    ``budget`` [nodes left]: a YAML document, whose aliases may repeat nodes without end and
    whose keys and leaves may be any scalar; None: JSON metadata (string keys, JSON values)."""
    if budget is not None:
        budget[0] -= 1
        if budget[0] < 0:
            raise _fail(path, field, "expands to more nodes than the text holds (aliases repeated)")
    if depth > max_depth:
        raise _fail(path, field, f"nested deeper than {max_depth} levels")
    if finite and isinstance(value, float) and not math.isfinite(value):
        raise _fail(path, field, f"must be a finite number, got {value}")
    if isinstance(value, dict):
        for k, v in value.items():
            if budget is None and not isinstance(k, str):
                raise _fail(path, field, f"keys must be strings, got {type(k).__name__} {k!r:.40}")
            if isinstance(k, float) and not math.isfinite(k):
                raise _fail(path, field, f"has a non-finite key {k}")
            if isinstance(k, (dict, list, tuple)):
                raise _fail(path, field, "has a key that is not a scalar")
            _check_tree(v, path, f"{field}.{k}", depth + 1, max_depth, finite, budget)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_tree(v, path, f"{field}[{i}]", depth + 1, max_depth, finite, budget)
    elif budget is None and not (value is None or isinstance(value, (str, bool, numbers.Real))):
        raise _fail(path, field, f"must be a JSON value, got {type(value).__name__}")


def check_meta(meta: Any, path: Any, field: str = "meta", finite: bool = True) -> dict[str, Any]:
    """Metadata as a dict that passed :data:`META_SCHEMA`: an object of JSON values nested at
    most :data:`MAX_META_DEPTH` levels, finite numbers (unless ``finite`` is False: a plan's
    metrics may record an infinite gap), known fields of their type (counts >= 1 and below 2**31)."""
    if not isinstance(meta, dict):
        raise _fail(path, field, f"must be a JSON object, got {type(meta).__name__}")
    _check_tree(meta, path, field, 0, MAX_META_DEPTH, finite)
    for key, types in META_SCHEMA.items():
        if key not in meta or meta[key] is None:
            continue
        v = meta[key]
        if isinstance(v, bool) or not isinstance(v, types):
            raise _fail(path, f"{field}.{key}", f"must be {'an integer' if int in types else 'a string'}, "
                        f"got {type(v).__name__} {v!r:.40}")
        if int in types and not (1 if key in _COUNT_FIELDS else -META_INT_MAX) <= v < META_INT_MAX:
            raise _fail(path, f"{field}.{key}", f"must be in [{1 if key in _COUNT_FIELDS else -META_INT_MAX}, "
                        f"{META_INT_MAX}), got {v}")
    return meta


def parse_meta(text: Any, path: Any, field: str = "meta") -> dict[str, Any]:
    """Metadata stored as JSON text (a trace's ``meta``), parsed with a depth bound and checked
    by :func:`check_meta`."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if not isinstance(text, str):
        raise _fail(path, field, f"must be JSON text, got {type(text).__name__}")
    if len(text) > MAX_META_BYTES:
        raise _fail(path, field, f"is {len(text)} characters (limit {MAX_META_BYTES})")
    try:
        meta = safejson.loads(text, max_depth=MAX_META_DEPTH)
    except safejson.JSONDepthError as exc:
        raise _fail(path, field, str(exc)) from None
    except (ValueError, RecursionError) as exc:
        raise _fail(path, field, f"is not valid JSON ({type(exc).__name__})") from None
    return check_meta(meta, path, field)


# ---------------------------------------------------------------------------------------
# YAML

def safe_yaml(text: str, path: Any, field: str = "") -> Any:
    """``yaml.safe_load`` behind the JSON depth bound (brackets and indentation both nest),
    with non-finite numbers refused anywhere (keys included)."""
    import yaml  # optional dependency (the workloads extra): only YAML plan files need it

    depth = _yaml_depth(text)
    if depth > safejson.MAX_DEPTH:
        raise _fail(path, field, f"nested deeper than {safejson.MAX_DEPTH} levels")
    try:
        doc = yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError, ValueError) as exc:
        raise _fail(path, field, f"not valid YAML ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})") from None
    budget = [len(text) + 16]       # every node takes a character, unless it is an alias
    _check_tree(doc, path, field or "document", 0, safejson.MAX_DEPTH, budget=budget)
    return doc


def _yaml_depth(text: str) -> int:
    """An upper bound on a YAML text's nesting: flow brackets (counted as JSON's) plus the
    deepest indentation, in columns (each block level indents at least one column)."""
    try:
        flow = safejson.check_depth(io.BytesIO(text.encode("utf-8", "surrogatepass")), math.inf)
    except safejson.JSONDepthError:
        flow = 0                               # unbalanced brackets: the YAML parser says so
    indent = max((len(ln) - len(ln.lstrip(" -")) for ln in text.splitlines() if ln.strip()), default=0)
    return flow + indent


def expand_paths(spec: str | Path | Sequence[str | Path], param: str = "loads") -> list[Path]:
    """Files named by a path, a directory (its files, sorted), a glob pattern or a list;
    a spec naming no file raises :class:`LoadFileError` on ``param`` (every reader of files
    of a spec, loads and routing traces alike, expands it here)."""

    if isinstance(spec, (list, tuple)):
        out = [p for s in spec for p in expand_paths(s, param)]
        if not out:
            raise _fail(spec, "", "no files given", param)
        return out
    text = str(spec)
    path = Path(text)
    kind = input_kind(text)
    if kind == "dir":
        files = sorted(p for p in path.iterdir() if input_kind(p) == "file" and not p.name.startswith("."))
        if not files:
            raise _fail(path, "", "the directory holds no files", param)
        return files
    if kind == "missing" and any(c in text for c in "*?["):
        files = sorted(Path(p) for p in _glob.glob(text) if input_kind(p) == "file")
        if not files:
            raise _fail(_shown(text), "", "no file matches this pattern", param)
        return files
    return [input_file(path, param)]


# ---------------------------------------------------------------------------------------
# Budgets: bytes of what a read will build

def memory_budget() -> int:
    """Bytes one read may build: half the memory available now (``MemAvailable``), at most
    :data:`MAX_BUILD_BYTES` (read at each call: tests lower it)."""
    avail = None
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    if avail is None:
        try:
            avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            avail = MAX_BUILD_BYTES * 2
    return int(min(MAX_BUILD_BYTES, avail // 2))


def check_build(path: Any, nbytes: int, what: str, param: str = "loads", source_bytes: int | None = None) -> None:
    """Refuse a read that would build ``nbytes`` (``what``: the thing built, for the message)
    when that exceeds :func:`memory_budget`, or, given the input's ``source_bytes``, more
    than :data:`BUILD_RATIO` times them past :data:`BUILD_FLOOR` (a small file that declares
    gigabytes: a bomb, whatever the compression)."""
    budget = memory_budget()
    if nbytes > budget:
        raise _fail(path, "", f"{what} would take {_human(nbytes)} (limit {_human(budget)}: half the memory "
                    f"available, at most {_human(MAX_BUILD_BYTES)})", param)
    if source_bytes is not None and nbytes > BUILD_FLOOR and nbytes > BUILD_RATIO * max(source_bytes, 1):
        raise _fail(path, "", f"{what} would take {_human(nbytes)} from {_human(source_bytes)} of input (more "
                    f"than {BUILD_RATIO}x: a decompression bomb or a file that declares what it does not hold)",
                    param)


def _human(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} bytes"


# ---------------------------------------------------------------------------------------
# Reading: the one family every reader of a user's bytes goes through
#
# tests/test_robust_readers.py scans the package: torch.load, np.load, json.load(s) and
# open() for reading appear only here and in safejson (and in the few readers of the
# package's own files it lists).

def _shown(text: Any) -> str:
    """A path as an error shows it: at most 120 characters."""
    text = str(text)
    return text if len(text) <= 120 else f"{text[:60]}...({len(text)} characters)"


def input_file(path: str | Path, param: str = "loads") -> Path:
    """``path`` when it names a regular file; else one :class:`LoadFileError` on ``param``
    saying what it names instead (nothing, a directory, a FIFO or device, a name too long)."""
    kind = input_kind(path)
    if kind == "file":
        return Path(path)
    why = {"missing": "no such file", "dir": "is a directory, not a file",
           "other": "is not a regular file (a FIFO, device or socket): give a file",
           "too_long": "the name is too long for the file system",
           "bad": "cannot be read (not a valid path, or no permission)"}[kind]
    raise _fail(_shown(path), "", why, param)


def read_bytes(path: str | Path, param: str = "loads", max_bytes: int | None = None) -> bytes:
    """The bytes of a regular file of at most ``max_bytes`` (default :data:`MAX_TEXT_BYTES`)."""
    path = input_file(path, param)
    cap = MAX_TEXT_BYTES if max_bytes is None else max_bytes
    try:
        with open(path, "rb") as fh:
            data = fh.read(cap + 1)
    except OSError as exc:
        raise _fail(path, "", f"cannot read ({exc.strerror or exc})", param) from None
    if len(data) > cap:
        raise _fail(path, "", f"is larger than {_human(cap)} (the limit for this input)", param)
    return data


def decode_text(data: bytes, path: Any, param: str = "loads") -> str:
    """UTF-8 text (a BOM dropped); a byte that is not UTF-8 is named by its offset, never echoed."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise _fail(path, "", f"is not UTF-8 text (byte {exc.start}: binary data?)", param) from None


def read_text(path: str | Path, param: str = "loads", max_bytes: int | None = None) -> str:
    """A regular file's UTF-8 text (:func:`read_bytes`, :func:`decode_text`)."""
    return decode_text(read_bytes(path, param, max_bytes), path, param)


# A parsed JSON document takes about this many bytes of Python objects per byte of text
# (a list of small ints: 2 bytes of text, 8 of pointer and 28 of int when not cached).
JSON_BUILD_RATIO = 20


def parse_json(text: str | bytes, path: Any, param: str = "loads", max_depth: int = safejson.MAX_DEPTH) -> Any:
    """A JSON document behind the depth bound (:mod:`solvers.safejson`) and the build budget
    (:func:`check_build`); any defect is one line naming ``path``."""
    check_build(path, JSON_BUILD_RATIO * len(text), "the parsed JSON", param)
    try:
        return safejson.loads(text, max_depth=max_depth)
    except safejson.JSONDepthError as exc:
        raise _fail(path, "", f"JSON {exc}", param) from None
    except UnicodeDecodeError as exc:
        raise _fail(path, "", f"is not UTF-8 text (byte {exc.start})", param) from None
    except RecursionError:
        raise _fail(path, "", "JSON nested too deeply", param) from None
    except ValueError as exc:
        raise _fail(path, "", f"is not valid JSON ({str(exc)[:120]})", param) from None


def read_json(path: str | Path, param: str = "loads", max_bytes: int | None = None,
              max_depth: int = safejson.MAX_DEPTH) -> Any:
    """A regular file's JSON document (:func:`read_text`, :func:`parse_json`)."""
    return parse_json(read_text(path, param, max_bytes), path, param, max_depth)


def iter_lines(path: str | Path, param: str = "loads", max_line: int | None = None) -> Iterator[tuple[int, str]]:
    """(line number, text) of a regular file's non-blank lines, each UTF-8 and at most
    ``max_line`` bytes (default :data:`MAX_LINE_BYTES`): a line is read whole only once its
    size is known to be under the cap."""
    path = input_file(path, param)
    cap = MAX_LINE_BYTES if max_line is None else max_line
    try:
        fh = open(path, "rb")
    except OSError as exc:
        raise _fail(path, "", f"cannot read ({exc.strerror or exc})", param) from None
    with fh:
        n = 0
        while True:
            try:
                raw = fh.readline(cap + 1)
            except OSError as exc:
                raise _fail(path, "", f"cannot read ({exc.strerror or exc})", param) from None
            if not raw:
                return
            n += 1
            if len(raw) > cap and not raw.endswith(b"\n"):
                raise _fail(path, "", f"line {n}: longer than {_human(cap)}", param)
            try:
                text = raw.decode("utf-8-sig" if n == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                raise _fail(path, "", f"line {n}: not UTF-8 text (byte {exc.start} of the line: binary "
                            "data?)", param) from None
            if text.strip():
                yield n, text


def load_npz(path: str | Path, param: str = "loads",
             built: Callable[[dict[str, tuple[tuple[int, ...], np.dtype]]], tuple[int, str]] | None = None
             ) -> dict[str, np.ndarray]:
    """Every member of an ``.npz`` as an array, after :func:`check_npz` (sizes, dtypes and
    declared shapes before anything is allocated; no pickles) and :func:`check_build` of
    what the caller will build: ``built(headers)`` gives (bytes, what) from the declared
    (shape, dtype) of each array (default: the arrays' own bytes)."""
    path = input_file(path, param)
    try:
        headers = check_npz(path)
        if built is None:
            nbytes = sum(math.prod(sh) * dt.itemsize for sh, dt in headers.values())
            what = "the arrays"
        else:
            nbytes, what = built(headers)
        check_build(path, int(nbytes), what, param, path.stat().st_size)
        with np.load(path, allow_pickle=False) as npz:
            return {k: npz[k] for k in npz.files}
    except LoadFileError as exc:
        if exc.param == param:
            raise
        raise LoadFileError(param, str(exc).split(": ", 1)[1]) from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError) as exc:
        raise _fail(path, "", f"cannot read .npz ({type(exc).__name__}: {str(exc)[:160]})", param) from None


def load_npy(path: str | Path, param: str = "loads", bytes_per_cell: float = 1.0) -> np.ndarray:
    """An ``.npy`` array, its header checked first (dtype allow-list, declared bytes against
    the file's and :func:`check_build`)."""
    path = input_file(path, param)
    try:
        with open(path, "rb") as fh:
            version = np.lib.format.read_magic(fh)
            reader = _NPY_HEADERS.get(version)
            if reader is None:
                raise _fail(path, "", f"unsupported .npy format version {version}", param)
            shape, _, dtype = reader(fh)
            size = path.stat().st_size - fh.tell()
        if dtype.hasobject or dtype.kind not in _NUMPY_KINDS:
            raise _fail(path, "", dtype_refusal(dtype) or f"dtype {dtype} refused", param)
        nbytes = math.prod(int(d) for d in shape) * dtype.itemsize
        if nbytes > size:
            raise _fail(path, "", f"the header declares a {tuple(shape)} {dtype} array ({nbytes} bytes) the file "
                        f"does not hold ({size} bytes)", param)
        check_build(path, int(nbytes * bytes_per_cell), "the array", param, path.stat().st_size)
        return np.load(path, allow_pickle=False)
    except LoadFileError:
        raise
    except (OSError, ValueError, EOFError, SyntaxError) as exc:
        raise _fail(path, "", f"cannot read .npy ({type(exc).__name__}: {str(exc)[:160]})", param) from None


def load_torch(path: str | Path, param: str = "loads", mmap: bool = True) -> Any:
    """A ``torch.save`` file (tensors, numbers, lists, dicts only) through every check:
    :func:`check_torch_file` (a zip archive; records within the caps; the pickle's
    expanded size, nesting and globals) before torch reads it, :func:`check_tensors` after
    (dense CPU tensors of allowed dtypes, no stride 0, no overlap, no view of a larger
    storage). ``mmap`` maps tensor data lazily (pages are read when used; the checks read
    none). Torch's own messages (their advice to load untrusted files with
    ``weights_only=False`` included) never reach the user."""
    path = input_file(path, param)
    try:
        check_torch_file(path)
    except LoadFileError as exc:
        if exc.param == param:
            raise
        raise LoadFileError(param, str(exc).split(": ", 1)[1]) from None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                obj = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
            except RuntimeError:
                if not mmap:
                    raise
                obj = torch.load(path, map_location="cpu", weights_only=True)    # records that cannot be mapped
    except (OSError, RuntimeError, EOFError, ValueError, zipfile.BadZipFile, KeyError, IndexError,
            TypeError, AttributeError, RecursionError, MemoryError, pickle.UnpicklingError) as exc:
        text = str(exc)
        if "weights_only" in text or "weights only" in text.lower():
            raise _fail(path, "", "cannot read .pt file: it holds pickled Python objects beyond tensors, numbers, "
                        "lists and dicts (refused: loading them could run code)", param) from None
        first = text.splitlines()[0][:200] if text else ""
        raise _fail(path, "", f"cannot read .pt file ({type(exc).__name__}: {first})", param) from None
    try:
        check_tensors(obj, path)
    except LoadFileError as exc:
        if exc.param == param:
            raise
        raise LoadFileError(param, str(exc).split(": ", 1)[1]) from None
    return obj

