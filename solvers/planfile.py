"""The project's plan file: JSON with the plan tensors, the problem shape, bounds, metrics
and provenance. One API for every front end (CLI and app): :func:`plan_document` builds
a document, :func:`dumps_plan` / :func:`write_plan` serialise it, :func:`read_plan` reads
one back from a path or bytes.

::

    {"format": "eplb-plan", "version": 1,
     "problem": {"num_layers", "num_experts", "num_replicas", "num_groups", "num_nodes", "num_gpus"},
     "engine": {"dense_layers": 3, "engine_layers": 61},       # rows engines count (dense + MoE)
     "policy": "hierarchical", "solver": "deepseek", "options": {... every option in effect},
     "phy2log": [[...]], "log2phy": [[[...]]], "logcnt": [[...]],
     "bounds": {"termination", "status", "lower_bound": [...], "proven_optimal": [...],
                "model_bound": [...] | null, "model_scope": {...} | null, "optimal_in_model": [...]},
     "metrics": {...}, "provenance": {"created", "version", "loads", "loads_sha256", "command", ...}}

``lower_bound`` holds for every plan of the problem; ``model_bound`` only for the plans of
the solver's restricted model described by ``model_scope``.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
from pathlib import Path
from typing import Any

from . import __version__, filecheck
from .cluster import Cluster, as_count
from .errors import LoadFileError, PlanError, ProblemError
from .plan import Plan
from .problem import MAX_LAYERS, Problem
from .safewrite import write_atomic, write_text_atomic  # noqa: F401  (re-exported: the write API)

FORMAT = "eplb-plan"
VERSION = 1
SHAPE_KEYS = ("num_layers", "num_experts", "num_replicas", "num_groups", "num_nodes", "num_gpus")


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(filecheck.input_file(path), "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def plan_document(plan: Plan, problem: Problem, *, policy: str, solver: str,
                  options: dict[str, Any] | None = None, metrics: dict[str, Any] | None = None,
                  provenance: dict[str, Any] | None = None, result: Any = None,
                  dense_layers: int = 0) -> dict[str, Any]:
    """The plan document. ``result``: the :class:`solvers.SolveResult` the plan came from
    (its bounds and termination are recorded). ``dense_layers``: leading dense layers of
    the model that engines count in their per-layer maps (exports write them back)."""

    prov = {"created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "version": __version__}
    prov.update(provenance or {})
    doc = {"format": FORMAT, "version": VERSION, "problem": problem.shape_dict(),
           "engine": {"dense_layers": int(dense_layers), "engine_layers": int(dense_layers) + problem.num_layers},
           "policy": policy, "solver": solver, "options": {k: _jsonable(v) for k, v in (options or {}).items()},
           **plan.to("cpu").to_dict()}
    if result is not None:
        doc["bounds"] = result_bounds(result)
    doc.update(metrics=metrics or {}, provenance=prov)
    return doc


def result_bounds(result: Any) -> dict[str, Any]:
    """The bounds, termination and solution status of a SolveResult as plain JSON values."""
    def vec(t):
        return None if t is None else [float(x) if t.is_floating_point() else bool(x) for x in t.cpu().tolist()]
    scope = result.model_scope
    return {"termination": str(result.termination), "status": str(result.status),
            "lower_bound": vec(result.lower_bound),
            "proven_optimal": vec(result.proven_optimal), "model_bound": vec(result.model_bound),
            "model_scope": None if scope is None else scope.as_dict(),
            "optimal_in_model": vec(result.optimal_in_model)}


def _jsonable(v: Any) -> Any:
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    return repr(v)


def dumps_plan(document: dict[str, Any]) -> str:
    """The document as compact JSON text (what :func:`write_plan` writes)."""
    return json.dumps(document, separators=(",", ":")) + "\n"


def write_plan(path: str | Path, document: dict[str, Any]) -> Path:
    """Write atomically (a temporary file renamed), so a crash never leaves half a plan."""
    return write_text_atomic(path, dumps_plan(document))


def recorded_cluster(shape: dict[str, Any]) -> Cluster:
    """The cluster a plan file's ``problem`` section records (slot counts, failed GPUs, speeds)."""
    return Cluster(shape["num_nodes"], shape["num_gpus"], shape["num_replicas"],
                   gpu_speed=shape.get("gpu_speed"), gpu_slots=shape.get("gpu_slots"))


def read_plan(source: str | Path | bytes) -> tuple[Plan, dict[str, Any]]:
    """(plan, document) from a plan file's path or its bytes; the plan is validated against
    its recorded shape."""
    if isinstance(source, (bytes, bytearray)):
        path = Path("upload")
        if len(source) > filecheck.MAX_TEXT_BYTES:
            raise LoadFileError("plan", f"upload: larger than {filecheck.MAX_TEXT_BYTES} bytes")
        text = filecheck.decode_text(bytes(source), path, "plan")
    else:
        path = filecheck.input_file(source, "plan")
        text = filecheck.read_text(path, "plan")
    try:
        doc = filecheck.parse_json(text, path, "plan")
    except LoadFileError as exc:
        raise LoadFileError("plan", str(exc).split(": ", 1)[1]) from None
    return _from_document(doc, path)


# The document's other sections and their types: readers (score, convert, the app) take them
# on trust once the document passed here. A section may be absent; when present it must be this.
_SECTIONS: dict[str, tuple[type, ...]] = {"engine": (dict,), "policy": (str,), "solver": (str,),
                                          "options": (dict,), "bounds": (dict,), "metrics": (dict,),
                                          "provenance": (dict,)}
_ENGINE_COUNTS = ("dense_layers", "engine_layers")


def _check_sections(doc: dict[str, Any], path: Path) -> None:
    """Types of the optional sections, depth and finite numbers of what they hold
    (:func:`solvers.filecheck.check_meta`), the engine row counts as bounded integers."""
    for key, types in _SECTIONS.items():
        if key in doc and not isinstance(doc[key], types):
            raise LoadFileError("plan", f"{path}: {key}: must be {'an object' if dict in types else 'a string'}, "
                                f"got {type(doc[key]).__name__}")
    for key in ("engine", "options", "bounds", "metrics", "provenance"):
        if key in doc:
            try:
                filecheck.check_meta(doc[key], path, key, finite=key not in ("metrics", "bounds"))
            except LoadFileError as exc:
                raise LoadFileError("plan", str(exc).removeprefix("loads: ")) from None
    engine = doc.get("engine") or {}
    for key in _ENGINE_COUNTS:
        v = engine.get(key, 0)
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_LAYERS + MAX_LAYERS:
            raise LoadFileError("plan", f"{path}: engine.{key}: must be an integer in [0, {2 * MAX_LAYERS}], "
                                f"got {str(v)[:40]!r}")


def _check_int_array(value: Any, path: Path, field: str, depth: int = 3) -> None:
    """A plan tensor in JSON: nested lists (at most ``depth`` levels) of integers; refused
    before anything converts it (a string, a float or a deeper nest names the field)."""
    if not isinstance(value, list):
        raise LoadFileError("plan", f"{path}: {field}: must be a nested list of integers, got {type(value).__name__}")
    stack = [(value, 1)]
    while stack:
        items, level = stack.pop()
        for v in items:
            if isinstance(v, list):
                if level >= depth:
                    raise LoadFileError("plan", f"{path}: {field}: nested deeper than {depth} levels")
                stack.append((v, level + 1))
            elif isinstance(v, bool) or not isinstance(v, int) or not -1 <= v < 2**31:
                raise LoadFileError("plan", f"{path}: {field}: holds {type(v).__name__} {str(v)[:40]!r}, "
                                    f"not an integer id in [-1, 2**31)")


def _from_document(doc: Any, path: Path) -> tuple[Plan, dict[str, Any]]:
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise LoadFileError("plan", f"{path}: not an {FORMAT} file (missing \"format\": \"{FORMAT}\")")
    if doc.get("version") != VERSION:
        raise LoadFileError("plan", f"{path}: unsupported version {doc.get('version')!r} (this is {VERSION})")
    missing = [k for k in ("problem", "phy2log", "log2phy", "logcnt") if k not in doc]
    shape = doc.get("problem") if isinstance(doc.get("problem"), dict) else {}
    missing += [f"problem.{k}" for k in SHAPE_KEYS if k not in shape]
    if missing:
        raise LoadFileError("plan", f"{path}: missing {', '.join(missing)}")
    _check_sections(doc, path)
    for key in ("gpu_speed", "gpu_slots"):
        if shape.get(key) is not None and not isinstance(shape[key], list):
            raise LoadFileError("plan", f"{path}: problem.{key}: must be a list of numbers, one per GPU, got "
                                f"{type(shape[key]).__name__}")
    try:
        cluster = recorded_cluster(shape)
        cluster.check_experts(as_count(shape["num_experts"], "problem.num_experts"), shape["num_groups"])
        as_count(shape["num_layers"], "problem.num_layers")
    except ProblemError as exc:
        raise LoadFileError("plan", f"{path}: invalid problem shape ({exc})") from None
    for key in ("phy2log", "log2phy", "logcnt"):
        _check_int_array(doc[key], path, key)
    try:
        plan = Plan.from_tensors(doc["phy2log"], doc["log2phy"], doc["logcnt"])
        plan.validate(shape["num_layers"], shape["num_experts"], shape["num_replicas"],
                      shape["num_gpus"] if cluster.uniform_slots else None)
    except PlanError as exc:
        raise LoadFileError("plan", f"{path}: invalid plan ({exc})") from None
    return plan, doc
