"""Per-GPU lists as text, for the CLI flags and the app's fields (torch-free).

``1,1,1.4,1.4`` or with repeats ``1*2,1.4*2``; or the path of a file holding such numbers
(separated by commas, spaces or lines). The values themselves are checked by
:class:`solvers.cluster.Cluster`, once.
"""
from __future__ import annotations

from pathlib import Path

from .errors import OptionError


def per_gpu_values(text: str | None, param: str, files: bool = True) -> list[float] | None:
    """The numbers of a --gpu-speed / --gpu-slots argument: a comma list with optional
    ``VALUE*COUNT`` repeats, or (``files``: the CLI, never the app, which must not read
    the server's files) the path of a file holding such numbers. Raises
    :class:`OptionError` naming ``param`` on anything else (the values are checked by
    :class:`solvers.Cluster`)."""
    if text is None:
        return None
    source = text
    if files and Path(text).is_file():
        try:
            source = Path(text).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise OptionError(param, f"{text}: cannot read ({exc})") from None
    out: list[float] = []
    for item in source.replace("\n", ",").replace(" ", ",").replace("\t", ",").split(","):
        item = item.strip()
        if not item:
            continue
        value, _, count = item.partition("*")
        try:
            number = float(value)
            times = int(count) if count else 1
        except ValueError:
            raise OptionError(param, f"expected numbers (VALUE or VALUE*COUNT), got {item!r}") from None
        if times < 0 or times > 1 << 16:
            raise OptionError(param, f"repeat count out of range in {item!r}")
        out.extend([int(number) if number.is_integer() else number] * times)
    if not out:
        raise OptionError(param, f"no numbers in {text!r}")
    return out


def gpu_ids(text: str | None, param: str = "failed") -> list[int] | None:
    """The GPU ids of --failed (comma-separated integers)."""
    if text is None:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise OptionError(param, f"expected comma-separated GPU ids, got {text!r}") from None
