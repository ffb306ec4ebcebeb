"""Bring your own planner: any EPLB algorithm as a solver of the workbench.

    eplb compare --loads L.pt --model deepseek-v3 --solvers deepseek,./my_eplb.py:rebalance_experts
    solve(problem, my_function)                    # the library; graded like every solver
    register_plugin("mine", "mypkg.policies:MyPolicy")

Three ways in: a file (``FILE.py:NAME``, executed as the user's own code), an importable
module (``module:NAME``), and planners an installed package declares in the entry-point group
``eplb.solvers`` (listed beside the built-in solvers, loaded only when run). The planner's form
is told from its signature (:mod:`solvers.plugins.forms`); it runs in a child process under its
time limit (:mod:`solvers.plugins.child`), and what it returns is checked before the shared
scorer grades it (:mod:`solvers.plugins.solver`).

Front ends call :func:`resolve_solvers` on the names the user gave. A name of foreign code is
resolved only there (or by :func:`register_plugin` / ``solve``): the app, which only lists
solvers, never runs a file. Spawned workers (``bench run --jobs``) find the names the parent
resolved in :data:`ALLOWED_ENV`.
"""
from __future__ import annotations

import json
import os
import pickle
import warnings
from collections.abc import Callable, Iterable
from importlib.metadata import entry_points
from typing import Any

from ..errors import OptionError
from ..registry import _REGISTRY, add_resolver, register
from .child import warm_up
from .solver import PLUGIN_WORK, SCHEMA, plugin_function
from .target import ENTRY_POINT_GROUP, Target, looks_like_spec, parse_spec

__all__ = ["resolve_solvers", "register_plugin", "register_callable", "discover_entry_points",
           "is_plugin", "ENTRY_POINT_GROUP"]

# The FILE:NAME / module:NAME specs this process tree was asked to run (JSON list), so a spawned
# worker resolves the same names and no others.
ALLOWED_ENV = "EPLB_PLUGIN_SPECS"

_discovered = False


def is_plugin(name: str) -> bool:
    """Whether the registered solver ``name`` is foreign code (a plugin)."""
    spec = _REGISTRY.get(name)
    return spec is not None and getattr(spec.fn, "plugin_target", None) is not None


def _register(name: str, target: Target, description: str) -> str:
    existing = _REGISTRY.get(name)
    if existing is not None:
        if getattr(existing.fn, "plugin_target", None) == target:
            return name
        raise OptionError("solvers", f"{name!r} is already a solver ({existing.description})")
    fn = plugin_function(target)
    fn.plugin_target = target
    register(name, kind="heuristic", description=description, options=SCHEMA, in_suites=False,
                 work=PLUGIN_WORK)(fn)
    return name


def register_plugin(name: str, planner: str | Callable[..., Any]) -> str:
    """Register a foreign planner under ``name``: ``planner`` is a spec (``FILE.py:NAME``,
    ``module:NAME``) or a module-level function or class in one of the three forms. It runs
    isolated and is graded like any solver; returns ``name``."""
    if not isinstance(name, str) or not name or ":" in name:
        raise OptionError("name", f"must be a non-empty solver name without ':', got {name!r}")
    if isinstance(planner, str):
        target = parse_spec(planner, "planner")
        _allow(planner)
        return _register(name, target, f"your planner {planner} (run in its own process)")
    return _register(name, _callable_target(planner), f"your planner {_qualname(planner)} (run in its own process)")


def _qualname(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', type(obj).__name__)}"


def _callable_target(obj: Any) -> Target:
    if not callable(obj):
        raise OptionError("solver", f"must be a solver name or a function, got {type(obj).__name__}")
    try:
        payload = pickle.dumps(obj)
    except Exception as exc:  # noqa: BLE001  pickle raises several kinds
        raise OptionError("solver", f"{_qualname(obj)} runs in its own process, so it must be importable: "
                          f"define it at the top level of a module ({type(exc).__name__}: {exc})") from None
    return Target("callable", _qualname(obj), getattr(obj, "__qualname__", ""), payload)


def register_callable(obj: Callable[..., Any]) -> str:
    """The solver name of a function or class given to ``solve`` (registered on first use)."""
    target = _callable_target(obj)
    warm_up()
    return _register(f"<{target.location}>".replace(":", "."), target,
                     f"your planner {target.location} (run in its own process)")


def _allowed() -> list[str]:
    try:
        value = json.loads(os.environ.get(ALLOWED_ENV, "[]"))
    except ValueError:
        return []
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _allow(spec: str) -> None:
    allowed = _allowed()
    if spec not in allowed:
        os.environ[ALLOWED_ENV] = json.dumps(allowed + [spec])


def resolve_solvers(names: Iterable[str], param: str = "solvers") -> list[str]:
    """The solver names to run for the names a user gave: registered names pass through;
    ``FILE.py:NAME`` and ``module:NAME`` are registered as plugins under that text (the file
    must exist, the module be importable: nothing is imported here). What every front end
    (compare, bench run, simulate) calls on ``--solvers`` / ``--solver``."""
    discover_entry_points()
    out = []
    for name in names:
        if looks_like_spec(name):
            target = parse_spec(name, param)
            _allow(name)
            out.append(_register(name, target, f"your planner {name} (run in its own process)"))
        else:
            out.append(name)
    if any(is_plugin(n) for n in out):
        warm_up()                 # the child's torch import is not the first planner's time
    return out


def resolve_missing(name: str) -> bool:
    """Register ``name`` if this process tree was asked to run it (:data:`ALLOWED_ENV`), or
    it is an entry point; whether it is registered now. What ``get_solver`` tries for a name
    it does not know."""
    discover_entry_points()
    if name in _REGISTRY:
        return True
    if looks_like_spec(name) and name in _allowed():
        resolve_solvers([name])
        return True
    return False


def discover_entry_points() -> list[str]:
    """Register every planner of the ``eplb.solvers`` entry-point group (once; nothing is
    imported: an entry point is loaded in the child that runs it). A name taken by a built-in
    is skipped with a warning. Returns the names registered."""
    global _discovered
    if _discovered:
        return []
    _discovered = True
    names = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ":" in ep.name or ep.name in _REGISTRY:
            warnings.warn(f"entry point {ep.name!r} ({ep.value}) of group {ENTRY_POINT_GROUP} skipped: "
                          f"{'the name holds a colon' if ':' in ep.name else 'a solver of that name exists'}",
                          stacklevel=2)
            continue
        dist = getattr(getattr(ep, "dist", None), "name", None)
        names.append(_register(ep.name, Target("entry", ep.value, ep.name),
                               f"installed planner {ep.value}" + (f" (package {dist})" if dist else "")
                               + ", run in its own process"))
    return names


def _resolve(name: str | None) -> None:
    """The registry's resolver (:func:`solvers.registry.add_resolver`)."""
    if name is None:
        discover_entry_points()
    else:
        resolve_missing(name)


add_resolver(_resolve)
