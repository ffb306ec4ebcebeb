"""Reading ``.safetensors`` files (TensorRT-LLM's expert statistics, vLLM's saved EPLB load
windows) behind the guarded boundary, without the ``safetensors`` package.

The format: 8 bytes (little-endian u64) giving the header's length N, N bytes of JSON
``{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}``,
then the data (offsets relative to its start). Everything a file declares is checked
before a byte of data is read: the header's length (at most :data:`MAX_HEADER_BYTES` and
the file's size), its JSON depth (:mod:`solvers.safejson`), each tensor's dtype (integer or
real float only), shape and byte range (inside the file, exactly ``prod(shape) x itemsize``
bytes, no two tensors overlapping), each tensor's bytes against
:data:`solvers.filecheck.MAX_ARRAY_BYTES` and their sum against ``MAX_UNPACKED_BYTES``.
Any defect is one :class:`~solvers.errors.LoadFileError` line naming the file and the tensor.
"""
from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .. import filecheck, safejson
from ..errors import LoadFileError

# A statistics file's header lists a few thousand tensors (TensorRT-LLM: iterations x layers
# names of ~60 bytes): 16 MB is far above any, and parsing it stays cheap.
MAX_HEADER_BYTES = 16 << 20
# TensorRT-LLM writes int32 counts; vLLM float32 or int64 windows. Unsigned counts become
# int64 (torch's unsigned types lack the reductions the checks use); BF16 has no numpy type.
DTYPES = {"I8": "<i1", "I16": "<i2", "I32": "<i4", "I64": "<i8", "U8": "|u1", "U16": "<u2", "U32": "<u4",
          "U64": "<u8", "F16": "<f2", "BF16": "<i2", "F32": "<f4", "F64": "<f8"}


def _fail(path: Any, message: str) -> LoadFileError:
    return LoadFileError("loads", " ".join(f"{path}: {message}".split()))


def read_header(path: str | Path) -> tuple[dict[str, dict[str, Any]], dict[str, str], int]:
    """(tensors {name: {"dtype", "shape", "begin", "end"}}, metadata, offset of the data) of a
    ``.safetensors`` file, every entry checked (see the module docstring); no data is read."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                raise _fail(path, "not a .safetensors file (shorter than its 8-byte header length)")
            (n,) = struct.unpack("<Q", head)
            if n > min(MAX_HEADER_BYTES, size - 8):
                raise _fail(path, f"not a .safetensors file: its header claims {n} bytes "
                            f"(the file has {size - 8} after the length, limit {MAX_HEADER_BYTES})")
            raw = fh.read(n)
    except OSError as exc:
        raise _fail(path, f"cannot read .safetensors file ({exc.strerror or exc})") from None
    try:
        doc = safejson.loads(raw, max_depth=4)
    except safejson.JSONDepthError as exc:
        raise _fail(path, f"not a .safetensors file: header {exc}") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise _fail(path, f"not a .safetensors file: its header is not JSON ({type(exc).__name__})") from None
    if not isinstance(doc, dict):
        raise _fail(path, "not a .safetensors file: its header is not a JSON object")
    meta = doc.pop("__metadata__", None) or {}
    if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
        raise _fail(path, "__metadata__ must map strings to strings")
    data_bytes = size - 8 - n
    max_member, max_total = filecheck.MAX_ARRAY_BYTES, filecheck.MAX_UNPACKED_BYTES   # read now: tests lower them
    tensors: dict[str, dict[str, Any]] = {}
    total = 0
    for name, entry in doc.items():
        field = f"tensor {str(name)[:60]!r}"
        if not isinstance(entry, dict) or not {"dtype", "shape", "data_offsets"} <= set(entry):
            raise _fail(path, f"{field}: needs dtype, shape and data_offsets")
        dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
        if not isinstance(dtype, str) or dtype not in DTYPES:
            raise _fail(path, f"{field}: dtype {str(dtype)[:20]!r} cannot hold loads "
                        f"(allowed: {', '.join(DTYPES)})")
        if not isinstance(shape, list) or len(shape) > 8 or not all(
                isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 2**40 for d in shape):
            raise _fail(path, f"{field}: shape must be a list of at most 8 sizes >= 0")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(
                isinstance(o, int) and not isinstance(o, bool) for o in offsets)):
            raise _fail(path, f"{field}: data_offsets must be two integers")
        begin, end = offsets
        itemsize = np.dtype(DTYPES[dtype]).itemsize
        nbytes = math.prod(shape) * itemsize
        if nbytes > max_member:
            raise _fail(path, f"{field}: declares {nbytes} bytes (limit {max_member})")
        if not 0 <= begin <= end <= data_bytes or end - begin != nbytes:
            raise _fail(path, f"{field}: data_offsets {begin}..{end} do not hold its {nbytes} bytes "
                        f"inside the file's {data_bytes} bytes of data")
        total += nbytes
        if total > max_total:
            raise _fail(path, f"its tensors declare {total} bytes or more (limit {max_total})")
        tensors[str(name)] = {"dtype": dtype, "shape": tuple(shape), "begin": begin, "end": end}
    spans = sorted((t["begin"], t["end"]) for t in tensors.values() if t["end"] > t["begin"])
    if any(b < prev_end for (_, prev_end), (b, _) in zip(spans, spans[1:])):
        raise _fail(path, "two tensors share bytes (overlapping data_offsets)")
    return tensors, meta, 8 + n


def read_tensors(path: str | Path, names: list[str] | None = None) -> dict[str, torch.Tensor]:
    """The tensors ``names`` (default: all) of a checked ``.safetensors`` file, as CPU tensors
    (little-endian data, as the format stores it)."""
    path = Path(path)
    header, _, base = read_header(path)
    wanted = list(header) if names is None else names
    out: dict[str, torch.Tensor] = {}
    try:
        with path.open("rb") as fh:
            for name in wanted:
                t = header[name]
                fh.seek(base + t["begin"])
                data = bytearray(fh.read(t["end"] - t["begin"]))
                if len(data) != t["end"] - t["begin"]:
                    raise _fail(path, f"tensor {name[:60]!r}: the file ends inside its data")
                arr = np.frombuffer(data, dtype=DTYPES[t["dtype"]]).reshape(t["shape"])
                if t["dtype"] == "BF16":
                    out[name] = torch.from_numpy(arr.copy()).view(torch.bfloat16)
                    continue
                if arr.dtype.kind == "u" and arr.itemsize > 1:
                    if arr.size and int(arr.max()) >= 2**63:
                        raise _fail(path, f"tensor {name[:60]!r}: values reach {int(arr.max())}, beyond a 64-bit "
                                    f"signed count")
                    arr = arr.astype(np.int64)
                out[name] = torch.from_numpy(arr.astype(arr.dtype.newbyteorder("="), copy=True))
    except OSError as exc:
        raise _fail(path, f"cannot read .safetensors file ({exc.strerror or exc})") from None
    return out
