"""Where a foreign planner lives: a file, an importable module, an entry point or a callable.

A *spec* is the text a user names a planner by:

    ./my_eplb.py:rebalance_experts     a Python file and the name of a function or class in it
    mypkg.policies:MyPolicy            an importable module and an attribute (``module:attr``)
    name                               an entry point of the ``eplb.solvers`` group (installed)

Parsing a spec imports nothing: the code is loaded in the child process that runs it
(:mod:`solvers.plugins.child`), so a module that crashes on import breaks only its own row.
"""
from __future__ import annotations

import importlib.util
import os
import re
from dataclasses import dataclass

from ..errors import OptionError

ENTRY_POINT_GROUP = "eplb.solvers"

_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


@dataclass(frozen=True)
class Target:
    """kind: "file" (location: absolute path), "module" (location: dotted module name),
    "entry" (location: the entry point's ``module:attr`` value) or "callable" (``payload``:
    the pickled object, location its qualified name). attr: the attribute path in the module."""

    kind: str
    location: str
    attr: str
    payload: bytes | None = None

    def describe(self) -> str:
        if self.kind == "file":
            return f"file {self.location}, {self.attr}"
        if self.kind == "entry":
            return f"entry point {self.location}"
        if self.kind == "callable":
            return f"function {self.location}"
        return f"{self.location}:{self.attr}"


def looks_like_spec(name: str) -> bool:
    """Whether ``name`` names foreign code (``FILE:attr`` or ``module:attr``) rather than a
    registered solver: registered names never hold a colon."""
    return ":" in name


def parse_spec(spec: str, param: str = "solvers") -> Target:
    """The :class:`Target` of ``FILE:attr`` or ``module:attr``; raises :class:`OptionError`
    naming ``param`` when the text is malformed, the file is missing or the module is not
    importable (it is not imported: that happens in the child)."""
    if not isinstance(spec, str) or ":" not in spec:
        raise OptionError(param, f"{spec!r} is not FILE.py:NAME or module:NAME")
    location, attr = spec.rsplit(":", 1)
    location, attr = location.strip(), attr.strip()
    if not _DOTTED.match(attr):
        raise OptionError(param, f"{spec!r}: {attr!r} is not a Python name (FILE.py:NAME or module:NAME)")
    if location.endswith(".py") or os.sep in location or location.startswith("."):
        path = os.path.abspath(os.path.expanduser(location))
        if not os.path.isfile(path):
            raise OptionError(param, f"{spec!r}: no such file {location!r}")
        return Target("file", path, attr)
    if not _DOTTED.match(location):
        raise OptionError(param, f"{spec!r}: {location!r} is neither a .py file nor a module name")
    try:
        found = importlib.util.find_spec(location.split(".")[0])
    except (ImportError, ValueError):
        found = None
    if found is None:
        raise OptionError(param, f"{spec!r}: no module named {location.split('.')[0]!r} on the Python path")
    return Target("module", location, attr)
