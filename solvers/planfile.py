"""The project's plan file: JSON with the plan tensors, the problem shape, metrics and provenance.

::

    {"format": "eplb-plan", "version": 1,
     "problem": {"num_layers", "num_experts", "num_replicas", "num_groups", "num_nodes", "num_gpus"},
     "policy": "hierarchical", "solver": "deepseek", "options": {...},
     "phy2log": [[...]], "log2phy": [[[...]]], "logcnt": [[...]],
     "metrics": {...}, "provenance": {"created", "version", "loads", "loads_sha256", ...}}
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
from pathlib import Path
from typing import Any

from .errors import LoadFileError, PlanError
from .plan import Plan
from .errors import ProblemError
from .problem import Problem, as_count, check_cluster

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
                  provenance: dict[str, Any] | None = None) -> dict[str, Any]:
    from . import __version__

    prov = {"created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "version": __version__}
    prov.update(provenance or {})
    return {"format": FORMAT, "version": VERSION, "problem": problem.shape_dict(), "policy": policy,
            "solver": solver, "options": {k: _jsonable(v) for k, v in (options or {}).items()},
            **plan.to("cpu").to_dict(), "metrics": metrics or {}, "provenance": prov}


def _jsonable(v: Any) -> Any:
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    return repr(v)


def write_plan(path: str | Path, document: dict[str, Any]) -> None:
    """Write atomically (a temporary file renamed), so a crash never leaves half a plan."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w") as fh:
        json.dump(document, fh, separators=(",", ":"))
        fh.write("\n")
    tmp.replace(path)


def read_plan(path: str | Path) -> tuple[Plan, dict[str, Any]]:
    """(plan, document) from a plan file; the plan is validated against its recorded shape."""
    path = Path(path)
    if not path.is_file():
        raise LoadFileError("plan", f"{path}: no such file")
    try:
        with path.open() as fh:
            doc = json.load(fh)
    except (OSError, ValueError) as exc:
        raise LoadFileError("plan", f"{path}: not a readable JSON file ({exc})") from None
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
        R, _, _, P = check_cluster(as_count(shape["num_experts"], "problem.num_experts"), shape["num_replicas"],
                                   shape["num_groups"], shape["num_nodes"], shape["num_gpus"])
        as_count(shape["num_layers"], "problem.num_layers")
    except ProblemError as exc:
        raise LoadFileError("plan", f"{path}: invalid problem shape ({exc})") from None
    try:
        plan = Plan.from_tensors(doc["phy2log"], doc["log2phy"], doc["logcnt"])
        plan.validate(shape["num_layers"], shape["num_experts"], shape["num_replicas"], shape["num_gpus"])
    except PlanError as exc:
        raise LoadFileError("plan", f"{path}: invalid plan ({exc})") from None
    return plan, doc
