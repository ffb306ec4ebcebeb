"""Plans written in the formats engines read, and read back (for round trips and conversion).

Formats (``format=`` names, detected from the suffix and content when not given):

- ``eplb``:   our plan JSON (:mod:`solvers.planfile`: plan tensors, problem, metrics, provenance).
- ``sglang``: SGLang's ``--init-expert-location`` JSON, ``{"physical_to_logical_map": [[...] per layer]}``.
- ``trtllm``: TensorRT-LLM's MoE load-balancer YAML: ``num_slots`` (total slots R),
  ``initial_global_assignments`` (MoE layer index -> the expert of every slot, slot order
  = rank-major as in phy2log) and ``layer_updates_per_iter: 0`` (a static placement).
- ``csv``:    one row per slot: ``layer,slot,gpu,expert,replica`` (gpu needs the GPU count).

Only ``phy2log`` travels in the engine formats; ``log2phy`` and ``logcnt`` are rebuilt
from it (replicas ranked in slot order, as the engines do).
"""
from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .. import filecheck, safejson
from ..errors import LoadFileError, OptionError
from ..plan import Plan, replica_ranks
from ..planfile import FORMAT as EPLB_FORMAT
from ..planfile import plan_document, read_plan, write_plan
from ..problem import MAX_LAYERS, Problem
from ..safewrite import write_atomic, write_text_atomic
from .formats import PLAN_FORMATS, TRACE_FORMATS, trace_format_of
from .trace import save_trace

_SUFFIX = {".json": "json", ".yaml": "trtllm", ".yml": "trtllm", ".csv": "csv"}
PARAM = "plan"


def _fail(path: Any, message: str) -> LoadFileError:
    """One-line error (parsers' messages may span lines) naming the file."""
    return LoadFileError(PARAM, " ".join(f"{path}: {message}".split()))


def _csv_text(header: str, table: np.ndarray) -> str:
    """``header`` and one line of comma-separated integers per row of ``table``."""
    buf = io.StringIO()
    buf.write(header + "\n")
    np.savetxt(buf, table, fmt="%d", delimiter=",")
    return buf.getvalue()


# ---------------------------------------------------------------------------------------
# Documents

def plan_to_sglang(plan: Plan, layer_offset: int = 0) -> dict[str, Any]:
    """SGLang ``--init-expert-location`` document: ``physical_to_logical_map [layers, slots]``.

    SGLang sizes the map by the model's hidden layers, dense ones included (61 for
    DeepSeek-V3, whose first 3 layers are dense): ``layer_offset`` leading rows are written
    for them with the valid round-robin map ``slot % experts``."""
    if not 0 <= layer_offset <= MAX_LAYERS:
        raise OptionError("layer_offset", f"must be in [0, {MAX_LAYERS}] (dense rows of a model), got {layer_offset}")
    dense = [[slot % plan.num_experts for slot in range(plan.num_replicas)]] * layer_offset
    return {"physical_to_logical_map": dense + plan.phy2log.cpu().tolist()}


def plan_to_trtllm(plan: Plan, layer_offset: int = 0) -> dict[str, Any]:
    """TensorRT-LLM load-balancer config; keys of ``initial_global_assignments`` are MoE layer
    indices in the model (``layer_offset`` = index of the first MoE layer, e.g. 3 for
    DeepSeek-V3 whose first 3 layers are dense)."""
    rows = plan.phy2log.cpu().tolist()
    return {"num_slots": plan.num_replicas,
            "initial_global_assignments": {layer_offset + i: row for i, row in enumerate(rows)},
            "layer_updates_per_iter": 0}


def plan_to_csv(plan: Plan, num_gpus: int, slot_gpus: list[int] | None = None) -> str:
    """``layer,slot,gpu,expert,replica`` rows, one per physical slot. slot_gpus: the GPU of
    every slot on a cluster with uneven slot counts or failed GPUs (Cluster.slot_gpus())."""
    L, R = plan.phy2log.shape
    if slot_gpus is None and (num_gpus < 1 or R % num_gpus):
        raise OptionError("num_gpus", f"must divide the {R} slots, got {num_gpus}")
    if slot_gpus is not None and len(slot_gpus) != R:
        raise OptionError("slot_gpus", f"must give the GPU of each of the {R} slots, got {len(slot_gpus)}")
    rank, _ = replica_ranks(plan.phy2log.cpu(), plan.num_experts)
    slot = np.arange(R)
    gpu = slot // (R // num_gpus) if slot_gpus is None else np.asarray(slot_gpus, dtype=np.int64)
    table = np.stack([np.repeat(np.arange(L), R), np.tile(slot, L), np.tile(gpu, L),
                      plan.phy2log.cpu().numpy().reshape(-1), rank.numpy().reshape(-1)], axis=1)
    return _csv_text("layer,slot,gpu,expert,replica", table)


# ---------------------------------------------------------------------------------------
# Writing

def export_plan(plan: Plan, path: str | Path, format: str | None = None, *, problem: Problem | None = None,
                num_gpus: int | None = None, layer_offset: int = 0, policy: str = "unknown",
                solver: str = "unknown", options: dict | None = None, metrics: dict | None = None,
                provenance: dict | None = None, slot_gpus: list[int] | None = None,
                gpu_slots: list[int] | None = None) -> Path:
    """Write ``plan`` to ``path`` as ``format`` (default from the suffix: .json -> eplb when a
    problem is given, else sglang; .yaml -> trtllm; .csv -> csv). slot_gpus: the GPU of every
    slot, gpu_slots: the slots of every GPU (0: failed), of a plan for uneven slot counts or
    failed GPUs (both from ``problem`` when given; see :func:`engine_text`)."""
    path = Path(path)
    if format is None:
        kind = _SUFFIX.get(path.suffix.lower())
        if kind is None:
            raise OptionError("format", f"cannot tell the format of {path.name}; pass one of {', '.join(PLAN_FORMATS)}")
        format = ("eplb" if problem is not None else "sglang") if kind == "json" else kind
    if format not in PLAN_FORMATS:
        raise OptionError("format", f"must be one of {', '.join(PLAN_FORMATS)}, got {format!r}")
    if format == "eplb":
        if problem is None:
            raise OptionError("problem", "the eplb plan format records the problem; pass problem=")
        problem.validate_plan(plan)
        write_plan(path, plan_document(plan, problem, policy=policy, solver=solver, options=options,
                                       metrics=metrics, provenance=provenance))
    else:
        gpus = num_gpus if num_gpus is not None else (problem.num_gpus if problem is not None else None)
        if problem is not None and not problem.cluster.uniform_slots:
            slot_gpus = problem.cluster.slot_gpus()
            gpu_slots = list(problem.cluster.gpu_slots)
        write_text_atomic(path, engine_text(plan, format, layer_offset=layer_offset, num_gpus=gpus,
                                            slot_gpus=slot_gpus, gpu_slots=gpu_slots))
    return path


def padded_map(plan: Plan, gpu_slots: list[int]) -> Plan:
    """The plan of a cluster with failed GPUs as an engine map: every rank ``S`` slots (the
    live GPUs' common count), a failed rank's slots filled with expert 0 (every expert is
    alive elsewhere; SGLang's own ``elasticity_aware`` algorithm fills them the same way).
    The engine must mask the failed ranks (SGLang elastic EP's ``active_ranks``; vLLM RFC
    #39942): a map has no field that says a slot receives no tokens. Refused
    (``OptionError`` on ``format``) when live GPUs hold different slot counts: engines put
    ``R / P`` consecutive slots on every rank. gpu_slots: [P] slots per GPU (0: failed)."""
    live = sorted({int(c) for c in gpu_slots if c > 0})
    if len(live) != 1:
        raise OptionError("format", f"engine maps give every rank the same number of slots; this plan's live GPUs "
                          f"hold {', '.join(map(str, live))}: export it as eplb or csv")
    S, P = live[0], len(gpu_slots)
    L = plan.num_layers
    out = torch.zeros(L, P, S, dtype=torch.int64)
    alive = torch.tensor([c > 0 for c in gpu_slots])
    out[:, alive, :] = plan.phy2log.cpu().view(L, -1, S)
    return Plan.from_phy2log(out.view(L, P * S), plan.num_experts)


def live_map(plan: Plan, num_gpus: int, failed: list[int]) -> Plan:
    """The inverse of :func:`padded_map`: an engine map of ``num_gpus`` equal ranks without
    the ``failed`` ranks' slots (the plan the cluster with those GPUs failed serves)."""
    L, R = plan.phy2log.shape
    if num_gpus < 1 or R % num_gpus:
        raise OptionError("num_gpus", f"must divide the map's {R} slots, got {num_gpus}")
    bad = [g for g in failed if not 0 <= g < num_gpus]
    if bad:
        raise OptionError("failed", f"GPU ids must be in [0, {num_gpus}), got {bad}")
    alive = torch.ones(num_gpus, dtype=torch.bool)
    alive[list(failed)] = False
    kept = Plan.from_phy2log(plan.phy2log.cpu().view(L, num_gpus, R // num_gpus)[:, alive, :].reshape(L, -1),
                             plan.num_experts)
    lost = (kept.logcnt == 0).nonzero()
    if lost.numel():
        layer, expert = lost[0].tolist()
        raise OptionError("failed", f"the map's live ranks hold no replica of expert {expert} in layer {layer} "
                          f"({lost.shape[0]} such (layer, expert) pairs): not a plan for these failed GPUs")
    return kept


def engine_text(plan: Plan, format: str, *, layer_offset: int = 0, num_gpus: int | None = None,
                slot_gpus: list[int] | None = None, gpu_slots: list[int] | None = None) -> str:
    """The text of an engine map: "sglang" (JSON), "trtllm" (YAML) or "csv" (needs num_gpus).

    slot_gpus: the GPU of every slot when GPUs hold different slot counts or some failed
    (the CSV table writes it). gpu_slots: [P] slots per GPU of such a plan (docs/formats.md):
    SGLang maps put R/P consecutive slots on every rank, so a plan with failed GPUs and the
    same count on every live one is written padded (:func:`padded_map`; the engine masks
    the failed ranks); other uneven plans, and TensorRT-LLM maps of any of them (its
    load-balancer config has no field that marks a rank dead, docs/formats.md), are refused
    rather than written wrong."""
    if (slot_gpus is not None or gpu_slots is not None) and format in ("sglang", "trtllm"):
        counts = {int(c) for c in gpu_slots or ()}
        if format == "trtllm":
            raise OptionError("format", "trtllm maps give every rank num_slots / ep_size slots and route tokens to "
                              "every slot, and TensorRT-LLM's load-balancer config has no field that marks a rank "
                              "dead; this plan's GPUs hold different counts (or some failed): export it as eplb or "
                              "csv (or sglang, padded, for failed GPUs)")
        if gpu_slots is None:
            raise OptionError("format", f"{format} maps give every rank the same number of slots and send tokens to "
                              "every slot; this plan's GPUs hold different counts (or some failed): export it as "
                              "eplb or csv")
        if len(counts) > 1 or 0 in counts:
            plan = padded_map(plan, gpu_slots)
    if format == "sglang":
        return json.dumps(plan_to_sglang(plan, layer_offset), separators=(",", ":")) + "\n"
    if format == "trtllm":
        import yaml

        return yaml.safe_dump(plan_to_trtllm(plan, layer_offset), default_flow_style=None, sort_keys=False,
                              width=1 << 20)
    if format == "csv":
        if num_gpus is None:
            raise OptionError("num_gpus", "the csv plan format lists each slot's GPU; pass num_gpus= or problem=")
        return plan_to_csv(plan, num_gpus, slot_gpus)
    raise OptionError("format", f"engine maps are sglang, trtllm or csv, got {format!r}")


def engine_flags(format: str, where: str, num_replicas: int, num_experts: int, *, failed: list[int] | None = None,
                 num_gpus: int | None = None) -> str:
    """How the engine reads a map written to ``where`` (printed after every export).
    failed: the failed GPUs of a padded SGLang map (num_replicas: the live slots; num_gpus
    then gives the padded count)."""
    if format == "sglang":
        slots = num_replicas if not failed or num_gpus is None else num_replicas // (num_gpus - len(failed)) * num_gpus
        text = (f"SGLang: python -m sglang.launch_server ... --init-expert-location {where} "
                f"--ep-num-redundant-experts {slots - num_experts}")
        return text + (f"; ranks {','.join(map(str, failed))} failed: their slots hold expert 0 and must receive "
                       "no tokens (SGLang elastic EP masks them with active_ranks; without that mask do not load "
                       "this map)" if failed else "")
    if format == "trtllm":
        return f"TensorRT-LLM: in the --config (extra LLM API options) YAML: moe_config: {{load_balancer: {where}}}"
    if format == "csv":
        return "CSV: layer,slot,gpu,expert,replica rows (for your own tooling)"
    return f"eplb: eplb score --loads LOADS --plan {where}"


# ---------------------------------------------------------------------------------------
# Reading back

def detect_plan_format(path: str | Path) -> str:
    path = Path(path)
    kind = _SUFFIX.get(path.suffix.lower())
    if kind is None:
        raise _fail(path, f"unknown plan format {path.suffix or '(no suffix)'}; use .json, .yaml or .csv")
    if kind != "json":
        return kind
    with path.open("rb") as fh:
        head = fh.read(1 << 12)
    return "eplb" if EPLB_FORMAT.encode() in head else "sglang"


# Largest engine map read (text): a [1000, 65536] map of 5-digit ids is about 400 MB.
MAX_PLAN_TEXT_BYTES = 512 << 20


def _read_capped_text(path: Path) -> str:
    size = path.stat().st_size
    if size > MAX_PLAN_TEXT_BYTES:
        raise _fail(path, f"is {size} bytes (limit {MAX_PLAN_TEXT_BYTES} for a plan file)")
    try:
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise _fail(path, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _p2l_plan(rows: Any, num_experts: int | None, path: Path) -> Plan:
    try:
        arr = np.asarray(rows)
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        raise _fail(path, f"the slot map is not a rectangular integer array ({str(exc)[:200]})") from None
    if arr.dtype.kind not in "iu" or arr.ndim != 2 or arr.size == 0:
        raise _fail(path, f"the slot map must be a non-empty integer [layers, slots] array, "
                    f"got {arr.dtype} {arr.shape}")
    if arr.dtype.kind == "u" and int(arr.max()) >= 2**63:
        raise _fail(path, f"the slot map holds id {int(arr.max())}, beyond any expert count")
    p2l = torch.from_numpy(arr.astype(np.int64))
    # Every expert needs a slot: ids beyond the slot count (or the loads' experts) are not experts.
    if num_experts is not None and not 1 <= num_experts <= p2l.shape[1]:
        raise OptionError("num_experts", f"must be in [1, {p2l.shape[1]}] (the slots of {path}), got {num_experts}")
    E = min(int(p2l.max()) + 1, p2l.shape[1]) if num_experts is None else num_experts
    if int(p2l.min()) < 0 or int(p2l.max()) >= E:
        raise _fail(path, f"invalid plan: the slot map holds expert ids outside [0, {E}) "
                    f"({'the slots' if num_experts is None else 'the experts of the loads'})")
    try:
        plan = Plan.from_phy2log(p2l, E)
        plan.validate(num_experts=E)
    except (LoadFileError, ValueError) as exc:
        raise _fail(path, f"invalid plan ({exc})") from None
    return plan


def _plan_csv(path: Path) -> np.ndarray:
    """The rows of a plan CSV (a structured array with at least layer, slot and expert)."""
    try:
        data = np.genfromtxt(io.StringIO(_read_capped_text(path)), delimiter=",", names=True, dtype=np.int64)
    except (OSError, ValueError, OverflowError) as exc:
        raise _fail(path, f"cannot read plan CSV ({type(exc).__name__}: ids must be integers below 2**63)"
                    if isinstance(exc, OverflowError) else f"cannot read plan CSV ({exc})") from None
    if not {"layer", "slot", "expert"} <= set(data.dtype.names or ()) or data.size == 0:
        raise _fail(path, "plan CSV needs a header with layer, slot, expert and at least one row")
    return np.atleast_1d(data)


def read_exported_plan(path: str | Path, format: str | None = None, num_experts: int | None = None,
                       layer_offset: int = 0) -> Plan:
    """The plan in a file of any :data:`PLAN_FORMATS` (``num_experts`` defaults to the largest
    id + 1 in engine formats, which record no expert count). ``layer_offset``: SGLang maps
    start with that many dense-layer rows, which are dropped (TensorRT-LLM keys the MoE
    layers by model index, so its layers are simply taken in order)."""
    path = Path(path)
    if not path.is_file():
        raise _fail(path, "no such file")
    fmt = format or detect_plan_format(path)
    if fmt not in PLAN_FORMATS:
        raise OptionError("format", f"must be one of {', '.join(PLAN_FORMATS)}, got {fmt!r}")
    if fmt == "eplb":
        return read_plan(path)[0]
    if fmt == "sglang":
        try:
            doc = safejson.loads(_read_capped_text(path))
        except (OSError, ValueError, RecursionError) as exc:
            raise _fail(path, f"not valid JSON ({str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__})") from None
        if not isinstance(doc, dict) or "physical_to_logical_map" not in doc:
            raise _fail(path, "no 'physical_to_logical_map' (not an SGLang expert-location file)")
        rows = doc["physical_to_logical_map"]
        if not isinstance(rows, list) or not 0 <= layer_offset < len(rows):
            raise _fail(path, f"layer_offset {layer_offset} leaves no MoE layers in the map")
        return _p2l_plan(rows[layer_offset:], num_experts, path)
    if fmt == "trtllm":
        try:
            text = _read_capped_text(path)
            doc = filecheck.safe_yaml(text, path)
        except OSError as exc:
            raise _fail(path, f"cannot read ({exc.strerror or exc})") from None
        except LoadFileError as exc:
            raise LoadFileError(PARAM, str(exc).removeprefix("loads: ")) from None
        if not isinstance(doc, dict) or not isinstance(doc.get("initial_global_assignments"), dict):
            raise _fail(path, "no 'initial_global_assignments' mapping (not a TensorRT-LLM load-balancer config)")
        assign = doc["initial_global_assignments"]
        if not all(isinstance(k, int) and not isinstance(k, bool) and 0 <= k < 2**31 for k in assign):
            raise _fail(path, "initial_global_assignments keys must be layer indices (integers in [0, 2**31))")
        layers = sorted(assign)
        bad = next((k for k in layers if not isinstance(assign[k], list)), None)
        if bad is not None:
            raise _fail(path, f"initial_global_assignments.{bad}: must be a list of expert ids, "
                        f"got {type(assign[bad]).__name__}")
        if "num_slots" in doc and (isinstance(doc["num_slots"], bool) or not isinstance(doc["num_slots"], int)):
            raise _fail(path, f"num_slots: must be an integer, got {type(doc['num_slots']).__name__}")
        plan = _p2l_plan([assign[k] for k in layers], num_experts, path)
        if "num_slots" in doc and doc["num_slots"] != plan.num_replicas:
            raise _fail(path, f"num_slots is {doc['num_slots']} but layers list {plan.num_replicas} slots")
        return plan
    data = _plan_csv(path)
    L, R = int(data["layer"].max()) + 1, int(data["slot"].max()) + 1
    if data.size != L * R or (data["layer"] < 0).any() or (data["slot"] < 0).any():
        raise _fail(path, f"plan CSV must list every (layer, slot) once: {data.size} rows for {L} x {R}")
    p2l = np.full((L, R), -1, dtype=np.int64)
    p2l[data["layer"], data["slot"]] = data["expert"]
    if (p2l < 0).any():
        raise _fail(path, "plan CSV lists some (layer, slot) twice and misses others")
    return _p2l_plan(p2l, num_experts, path)


def read_plan_for_loads(path: str | Path, num_layers: int, num_experts: int,
                        param: str = "plan") -> tuple[Plan, dict[str, Any] | None, dict[str, Any], int]:
    """(plan, shape dict or None, document, engine rows dropped) from an eplb plan file or an
    engine map (SGLang JSON, TensorRT-LLM YAML, CSV), for loads of ``num_layers`` MoE layers
    and ``num_experts`` experts. The one dense-row rule of the CLI and the app: an engine map
    with more rows than the loads' MoE layers (SGLang's dense rows first, or a whole model)
    keeps its last ``num_layers`` rows. shape: the eplb file's problem, ``{"num_gpus": P}``
    for CSV, None for maps that record no shape."""
    path = Path(path)
    if not path.is_file():
        raise LoadFileError(param, f"{path}: no such file")
    fmt = detect_plan_format(path)
    if fmt == "eplb":
        plan, doc = read_plan(path)
        return plan, doc["problem"], doc, 0
    try:
        plan = read_exported_plan(path, fmt, num_experts=num_experts)
    except LoadFileError as exc:
        if fmt != "sglang":
            raise
        raise LoadFileError(param, f"{path}: not an eplb-plan file nor an SGLang map ({exc})") from None
    dropped = max(plan.num_layers - num_layers, 0)
    if dropped:
        plan = Plan.from_phy2log(plan.phy2log[-num_layers:], num_experts)
    shape = _csv_shape(path) if fmt == "csv" else None
    return plan, shape, {"solver": f"{fmt} export"}, dropped      # an engine map records no policy


def _csv_shape(path: Path) -> dict[str, Any]:
    """``{"num_gpus": P}`` of a plan CSV's ``gpu`` column (0 without one), with ``gpu_slots``
    (the slots of every GPU, 0: failed) when GPUs hold different slot counts: the column is
    the cluster's slot map, so a plan scored back is scored on the GPUs it was made for."""
    data = _plan_csv(path)
    if "gpu" not in (data.dtype.names or ()):
        return {"num_gpus": 0}
    gpus = int(data["gpu"].max()) + 1
    if not 1 <= gpus <= data.size or int(data["gpu"].min()) < 0:   # every GPU holds one of the rows' slots
        raise _fail(path, f"gpu ids must be in [0, {data.size}) (one per slot at most), got "
                    f"{int(data['gpu'].min())}..{gpus - 1}")
    L, R = int(data["layer"].max()) + 1, int(data["slot"].max()) + 1
    slot_gpu = np.full((L, R), -1, dtype=np.int64)
    slot_gpu[data["layer"], data["slot"]] = data["gpu"]                 # [L, R]; the rows were checked
    if (slot_gpu != slot_gpu[:1]).any() or (np.diff(slot_gpu[0]) < 0).any():
        raise _fail(path, "the gpu column must give every layer the same slot map, each GPU's slots in a row")
    counts = np.bincount(slot_gpu[0], minlength=gpus)
    uniform = (counts == counts[0]).all()
    return {"num_gpus": gpus} if uniform else {"num_gpus": gpus, "gpu_slots": counts.tolist()}


# ---------------------------------------------------------------------------------------
# Traces (loads) in the engines' formats: for conversion and for fixtures of the importers

def write_vllm_json(loads: torch.Tensor, path: str | Path, chunk_steps: int = 64) -> Path:
    """loads [steps, layers, experts] as ``{"load_history": [{"logical_expert_load": ...}]}``,
    written a few steps at a time (the text is never built whole)."""
    def write(tmp: Path) -> None:
        with tmp.open("w") as fh:
            fh.write('{"load_history": [')
            for t0 in range(0, loads.shape[0], chunk_steps):
                block = loads[t0:t0 + chunk_steps].tolist()
                text = ",".join(json.dumps({"logical_expert_load": step}, separators=(",", ":")) for step in block)
                fh.write(("," if t0 else "") + text)
            fh.write("]}\n")

    return write_atomic(path, write)


def write_trace(trace: Any, path: str | Path, format: str | None = None) -> Path:
    """Write a :class:`Trace` as ``npz``/``pt`` (ours, with meta), ``vllm`` JSON history,
    ``sglang`` stat dump (``.pt`` with ``logical_count``) or long ``csv`` (step,layer,expert,load)."""

    path = Path(path)
    if format is None:
        format = trace_format_of(path.suffix)
        if format is None:
            raise OptionError("format", f"cannot tell the format of {path.name}; pass one of {', '.join(TRACE_FORMATS)}")
    if format not in TRACE_FORMATS:
        raise OptionError("format", f"must be one of {', '.join(TRACE_FORMATS)}, got {format!r}")
    if format in ("npz", "pt"):
        return save_trace(trace, path.with_suffix("." + format) if path.suffix.lower() != "." + format else path)
    if format == "vllm":
        return write_vllm_json(trace.loads, path)
    if format == "sglang":
        counts = trace.loads.to(torch.int32)
        return write_atomic(path, lambda tmp: torch.save({"rank": 0, "logical_count": counts,
                                                           "average_utilization_rate_over_window": None}, tmp))
    T, L, E = trace.loads.shape
    idx = np.indices((T, L, E)).reshape(3, -1).T
    table = np.concatenate([idx, trace.loads.numpy().reshape(-1, 1)], axis=1)
    return write_text_atomic(path, _csv_text("step,layer,expert,load", table))
