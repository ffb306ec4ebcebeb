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
- :func:`check_meta`: metadata against a schema (types, depth, size, finite numbers).
- :func:`safe_yaml`: YAML with the depth bound of :mod:`solvers.safejson` and finite keys.
"""
from __future__ import annotations

import glob as _glob
import io
import math
import numbers
import zipfile
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import torch

from . import safejson
from .errors import LoadFileError

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
# fine at this size (a few million), a bomb of nested lists is not.
MAX_PICKLE_BYTES = 64 << 20
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


def check_npz(path: str | Path) -> None:
    """Refuse an ``.npz`` before numpy allocates anything: every member is size-checked
    (:func:`check_zip`); every member that is an ``.npy`` array (by its magic, whatever its
    name) must declare an allowed dtype (text for metadata) and no more bytes than the
    member holds."""
    infos = check_zip(path)
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
    except LoadFileError:
        raise
    except (OSError, ValueError, EOFError, IndexError, zipfile.BadZipFile, KeyError, SyntaxError) as exc:
        raise _fail(path, "", f"cannot read .npz file ({type(exc).__name__}: {exc})") from None


# ---------------------------------------------------------------------------------------
# Torch files and tensors

def check_torch_file(path: str | Path) -> None:
    """A ``.pt`` must be a zip archive (``torch.save`` since torch 1.6) whose records pass
    :func:`check_zip`: the legacy format allocates every storage its pickle declares before
    reading a byte, so it is refused."""
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
        check_zip(path, pickle_cap=True)
    except LoadFileError as exc:
        raise _fail(path, "", "cannot read .pt file: " + str(exc).split(f"{path}: ", 1)[-1]) from None


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
    bytes together under :data:`MAX_UNPACKED_BYTES` (rows sharing one storage count each time)."""
    total = 0
    try:
        for field, t in iter_tensors(obj):
            check_tensor(t, path, field)
            total += t.numel() * t.element_size()
            if total > MAX_UNPACKED_BYTES:
                raise _fail(path, field, f"the tensors declare {total} bytes together (limit {MAX_UNPACKED_BYTES})")
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
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
        if not files:
            raise _fail(path, "", "the directory holds no files", param)
        return files
    if any(c in text for c in "*?[") and not path.exists():
        files = sorted(Path(p) for p in _glob.glob(text) if Path(p).is_file())
        if not files:
            raise _fail(text, "", "no file matches this pattern", param)
        return files
    if not path.is_file():
        raise _fail(path, "", "no such file", param)
    return [path]
