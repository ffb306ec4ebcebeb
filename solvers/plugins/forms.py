"""The three forms a foreign planner may take, told apart by its signature, and how each is called.

- ``deepseek``: DeepSeek's ``rebalance_experts(weight, num_replicas, num_groups, num_nodes,
  num_gpus) -> (phy2log, log2phy, logcnt)`` (SGLang's, FlashLB's and the evolved programs of
  the OpenEvolve / ShinkaEvolve EPLB benchmark have it too);
- ``vllm``: a class with ``rebalance_experts(weight, num_replicas, num_groups, num_nodes,
  num_ranks, old_global_expert_indices=None)`` (vLLM's ``AbstractEplbPolicy``; a classmethod,
  or a method of an instance made with no arguments) returning ``phy2log`` or a tuple
  starting with it;
- ``own``: the workbench's ``fn(problem, options)`` (:class:`solvers.registry.SolverOutput`,
  a :class:`~solvers.plan.Plan` or ``phy2log``), which may take ``history`` (the window's
  steps [steps, layers, experts]) as a third parameter.

This module runs in the child (:mod:`solvers.plugins.child`): it loads the user's code.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import itertools
import os
import pickle
import sys
from importlib.metadata import EntryPoint
from types import SimpleNamespace
from typing import Any

import numpy as np

import torch

from ..plan import Plan
from ..registry import SolverOutput
from .target import ENTRY_POINT_GROUP, Target

_counter = itertools.count()


def load(target: Target) -> Any:
    """The object a target names (imports the user's module or executes the user's file)."""
    if target.kind == "callable":
        return pickle.loads(target.payload)
    if target.kind == "entry":
        return EntryPoint(name=target.attr, value=target.location, group=ENTRY_POINT_GROUP).load()
    if target.kind == "file":
        folder = os.path.dirname(target.location)
        if folder not in sys.path:
            sys.path.insert(0, folder)        # the file's own siblings import as they do for its author
        name = f"eplb_plugin_{next(_counter)}_{os.path.splitext(os.path.basename(target.location))[0]}"
        spec = importlib.util.spec_from_file_location(name, target.location)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(target.location)
    obj = module
    for part in target.attr.split("."):
        if not hasattr(obj, part):
            raise AttributeError(f"{target.describe()}: no attribute {part!r}")
        obj = getattr(obj, part)
    return obj


def _positional(fn: Any) -> list[inspect.Parameter]:
    return [p for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def _takes(fn: Any, name: str) -> bool:
    params = inspect.signature(fn).parameters
    return name in params or any(p.kind == p.VAR_KEYWORD for p in params.values())


def detect(obj: Any) -> tuple[str, Any]:
    """(form, the callable to call): raises TypeError naming the three forms when ``obj``
    has none of them."""
    expected = ("expected DeepSeek's rebalance_experts(weight, num_replicas, num_groups, num_nodes, num_gpus), "
                "a vLLM policy class with rebalance_experts(weight, num_replicas, num_groups, num_nodes, "
                "num_ranks, old_global_expert_indices=None), or fn(problem, options)")
    if inspect.isclass(obj):
        method = inspect.getattr_static(obj, "rebalance_experts", None)
        if method is None:
            raise TypeError(f"class {obj.__name__} has no rebalance_experts; {expected}")
        fn = getattr(obj, "rebalance_experts") if isinstance(method, (classmethod, staticmethod)) \
            else getattr(obj(), "rebalance_experts")
        if len(_positional(fn)) < 5:
            raise TypeError(f"{obj.__name__}.rebalance_experts{inspect.signature(fn)}: {expected}")
        return "vllm", fn
    if not callable(obj):
        raise TypeError(f"{type(obj).__name__} object is not callable; {expected}")
    try:
        params = _positional(obj)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"cannot read the signature of {obj!r} ({exc}); {expected}") from None
    required = [p for p in params if p.default is p.empty]
    if len(params) >= 5 and len(required) >= 5:
        return "deepseek", obj
    if len(required) == 2 or (params and params[0].name == "problem"):
        return "own", obj
    if len(params) >= 5:
        return "deepseek", obj
    raise TypeError(f"signature {getattr(obj, '__name__', obj)}{inspect.signature(obj)}: {expected}")


def call(form: str, fn: Any, job: dict[str, Any]) -> Any:
    """Call ``fn`` in its form with the problem's numbers: ``job`` holds weight [layers,
    experts] (float32 tensor, as vLLM and SGLang pass their statistics), num_replicas,
    num_groups, num_nodes, num_gpus, and for the own form problem, options and history."""
    if form == "own":
        options = SimpleNamespace(**job["options"])
        if len(_positional(fn)) >= 3 or _takes(fn, "history"):
            return fn(job["problem"], options, history=job["options"].get("history"))
        return fn(job["problem"], options)
    args = (job["weight"], job["num_replicas"], job["num_groups"], job["num_nodes"], job["num_gpus"])
    if form == "vllm" and _takes(fn, "old_global_expert_indices"):
        return fn(*args, old_global_expert_indices=job.get("old_phy2log"))
    return fn(*args)


def _array(x: Any, what: str) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    if isinstance(x, np.ndarray):
        return x
    if isinstance(x, (list, tuple)):
        try:
            return np.asarray(x)
        except ValueError as exc:
            raise TypeError(f"{what} is not a rectangular array ({exc})") from None
    raise TypeError(f"{what} is a {type(x).__name__}, expected a tensor or array")


def normalise(form: str, out: Any) -> dict[str, Any]:
    """What the planner returned, as plain arrays for the parent to check: phy2log, and
    log2phy and logcnt where it gave them; message: the own form's message."""
    message = ""
    if isinstance(out, SolverOutput):
        if out.plan is None:
            return {"phy2log": None, "message": out.message or f"returned no plan ({out.termination})"}
        out, message = out.plan, out.message
    if isinstance(out, Plan):
        out = out.as_tuple()
    if isinstance(out, tuple):                 # (phy2log, ...); a list is phy2log itself
        if form == "deepseek" and len(out) != 3:
            raise TypeError(f"returned a tuple of {len(out)}, expected (phy2log, log2phy, logcnt)")
        if not out:
            raise TypeError("returned an empty tuple, expected (phy2log, log2phy, logcnt)")
        got = {"phy2log": _array(out[0], "phy2log")}
        if len(out) == 3 and out[1] is not None and out[2] is not None:     # checked against phy2log
            got["log2phy"], got["logcnt"] = _array(out[1], "log2phy"), _array(out[2], "logcnt")
        return {**got, "message": message}
    if form == "deepseek":
        raise TypeError(f"returned a {type(out).__name__}, expected (phy2log, log2phy, logcnt)")
    return {"phy2log": _array(out, "phy2log"), "message": message}
