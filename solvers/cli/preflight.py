"""Checks the command line runs before it loads torch and the solvers (a few seconds):
a misspelt ``--loads``, ``--plan`` or ``--previous`` is refused at once."""
from __future__ import annotations

import argparse
from ..errors import LoadFileError
from ..paths import input_kind
from ..workloads.specs import resolve, split_range


def check_inputs(args: argparse.Namespace) -> None:
    """Raise :class:`LoadFileError` naming the parameter if an input file does not exist
    (the readers check everything else once the command runs)."""
    loads = getattr(args, "loads", None)
    if isinstance(loads, str):
        resolve(split_range(loads)[0])
    for param in ("plan", "previous"):
        path = getattr(args, param, None)
        kind = input_kind(path) if isinstance(path, str) else None
        if kind == "missing":
            raise LoadFileError(param, f"{path}: no such file")
        if kind == "too_long":
            raise LoadFileError(param, f"{path[:60]}...({len(path)} characters): the name is too long for the "
                                "file system")


__all__ = ["check_inputs"]
