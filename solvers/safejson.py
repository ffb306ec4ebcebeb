"""JSON with bounded nesting: a hostile file never recurses the parser to death.

Python's ``json`` recurses once per nesting level (a 100,000-deep file raises
``RecursionError``), and streaming parsers that track a path (``ijson``'s prefixes) spend
memory quadratic in the depth. :func:`check_depth` scans the raw bytes first, in chunks
and vectorised (about 1 s per GB), honouring strings and escapes, so a file is refused
before any parser sees it; :func:`load` is ``json.load`` behind that check.
"""
from __future__ import annotations

import io
import json
from pathlib import Path
from typing import IO, Any

import numpy as np

# Our documents nest a handful of levels (a plan file: 4; a vLLM history: 5).
MAX_DEPTH = 64
_CHUNK = 1 << 22


class JSONDepthError(ValueError):
    """The document nests deeper than allowed (or its brackets do not balance)."""


def _chunk_depth(buf: np.ndarray, in_string: bool, escaped: bool, depth: int) -> tuple[int, bool, bool, int]:
    """(max depth reached, in_string, escaped, depth) after ``buf`` [n] uint8, given the state before it."""
    quote = buf == ord('"')
    backslash = buf == ord("\\")
    if backslash.any() or escaped:
        # A backslash escapes the next character when it sits at an even position of its
        # run of backslashes (counting a carried-in escape as position -1).
        idx = np.arange(len(buf))
        starts = backslash & ~np.concatenate(([False], backslash[:-1]))
        pos = idx - np.maximum.accumulate(np.where(starts, idx, 0))
        if escaped and backslash[0]:
            first_run = np.maximum.accumulate(np.where(starts, idx, 0)) == 0
            pos = pos + (first_run & backslash)
        escaping = backslash & (pos % 2 == 0)
        esc = np.concatenate(([escaped], escaping[:-1]))
        escaped = bool(escaping[-1])
        quote &= ~esc
    # Inside a string between an opening and a closing quote: parity of quotes so far.
    parity = (np.cumsum(quote) + int(in_string)) % 2 == 1           # True from an opening quote on
    outside = ~parity & ~quote
    step = np.zeros(len(buf), dtype=np.int64)
    step[outside & ((buf == ord("[")) | (buf == ord("{")))] = 1
    step[outside & ((buf == ord("]")) | (buf == ord("}")))] = -1
    levels = np.cumsum(step) + depth
    top = int(levels.max()) if len(levels) else depth
    if len(levels) and int(levels.min()) < 0:
        raise JSONDepthError("unbalanced brackets")
    new_in_string = bool(parity[-1]) if len(parity) else in_string
    return top, new_in_string, escaped, int(levels[-1]) if len(levels) else depth


def check_depth(source: str | Path | IO[bytes], max_depth: float = MAX_DEPTH) -> int:
    """The nesting depth of a JSON document (file path or binary file object, read to its
    end, then rewound when seekable); raises :class:`JSONDepthError` above ``max_depth``."""
    fh = open(source, "rb") if isinstance(source, (str, Path)) else source
    start = fh.tell() if fh.seekable() else None
    try:
        in_string = escaped = False
        depth = top = 0
        while True:
            chunk = fh.read(_CHUNK)
            if not chunk:
                break
            if isinstance(chunk, str):
                chunk = chunk.encode("utf-8", "surrogatepass")
            reached, in_string, escaped, depth = _chunk_depth(np.frombuffer(chunk, dtype=np.uint8),
                                                              in_string, escaped, depth)
            top = max(top, reached)
            if top > max_depth:
                raise JSONDepthError(f"nested deeper than {max_depth} levels")
        return top
    finally:
        if fh is not source:
            fh.close()
        elif start is not None:
            fh.seek(start)


def load(fh: IO, max_depth: int = MAX_DEPTH) -> Any:
    """``json.load`` of a seekable file object, refused (:class:`JSONDepthError`, a
    ``ValueError``) when it nests deeper than ``max_depth``."""
    check_depth(fh, max_depth)
    return json.load(fh)


def loads(text: str | bytes, max_depth: float = MAX_DEPTH) -> Any:
    """``json.loads`` with the same depth bound."""
    check_depth(io.BytesIO(text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text), max_depth)
    return json.loads(text)
