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
from typing import Any, Callable

from . import __version__, safejson
from .cluster import Cluster, as_count
from .errors import LoadFileError, PlanError, ProblemError
from .plan import Plan
from .problem import Problem

FORMAT = "eplb-plan"
VERSION = 1
SHAPE_KEYS = ("num_layers", "num_experts", "num_replicas", "num_groups", "num_nodes", "num_gpus")


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
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


def write_atomic(path: str | Path, write: Callable[[Path], None], param: str = "out") -> Path:
    """``write(tmp)`` then rename ``tmp`` into place: a crash never leaves half a file, a
    failed write leaves no temporary file behind, and errors name the file. The temporary
    name keeps the suffix (some writers look at it)."""
    path = Path(path)
    if not str(path) or path.name == "":
        raise LoadFileError(param, "an output file name is needed, got an empty path")
    if path.is_dir():
        raise LoadFileError(param, f"{path}: is a directory, not a file name")
    tmp = path.with_name(path.name + ".tmp" + path.suffix)
    try:
        write(tmp)
        tmp.replace(path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise LoadFileError(param, f"{path}: cannot write ({exc.strerror or exc})") from None
    return path


def write_text_atomic(path: str | Path, text: str, param: str = "out") -> Path:
    """:func:`write_atomic` of a text."""
    return write_atomic(path, lambda tmp: tmp.write_text(text), param)


def write_plan(path: str | Path, document: dict[str, Any]) -> Path:
    """Write atomically (a temporary file renamed), so a crash never leaves half a plan."""
    return write_text_atomic(path, dumps_plan(document))


def read_plan(source: str | Path | bytes) -> tuple[Plan, dict[str, Any]]:
    """(plan, document) from a plan file's path or its bytes; the plan is validated against
    its recorded shape."""
    if isinstance(source, (bytes, bytearray)):
        path = Path("upload")
        try:
            doc = safejson.loads(bytes(source).decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise LoadFileError("plan", f"not a readable JSON plan ({type(exc).__name__}: {exc})") from None
        return _from_document(doc, path)
    path = Path(source)
    if not path.is_file():
        raise LoadFileError("plan", f"{path}: no such file")
    try:
        with path.open("rb") as fh:
            doc = safejson.load(fh)
    except (OSError, ValueError, RecursionError) as exc:
        raise LoadFileError("plan", f"{path}: not a readable JSON file ({type(exc).__name__})") from None
    return _from_document(doc, path)


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
    try:
        cluster = Cluster(shape["num_nodes"], shape["num_gpus"], shape["num_replicas"],
                          gpu_speed=shape.get("gpu_speed"), gpu_slots=shape.get("gpu_slots"))
        cluster.check_experts(as_count(shape["num_experts"], "problem.num_experts"), shape["num_groups"])
        as_count(shape["num_layers"], "problem.num_layers")
    except ProblemError as exc:
        raise LoadFileError("plan", f"{path}: invalid problem shape ({exc})") from None
    try:
        plan = Plan.from_tensors(doc["phy2log"], doc["log2phy"], doc["logcnt"])
        plan.validate(shape["num_layers"], shape["num_experts"], shape["num_replicas"],
                      shape["num_gpus"] if cluster.uniform_slots else None)
    except PlanError as exc:
        raise LoadFileError("plan", f"{path}: invalid plan ({exc})") from None
    return plan, doc
