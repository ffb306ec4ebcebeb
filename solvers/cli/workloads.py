"""``eplb generate``, ``eplb convert`` and ``eplb datasets``.

    eplb generate MODEL [--scenario S] [--steps T] [--seed N] [--tokens-per-step K]
                  [--layers L] [--set KEY=VALUE ...] --out trace.{npz,pt,json,csv}
    eplb convert INPUT --out OUTPUT [--to FORMAT] [...]   loads or plans between formats
    eplb datasets [--json] [--rebuild [NAME ...]]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..errors import OptionError
from ..io import read_loads
from ..planfile import read_plan, write_plan
from ..problem import Problem
from ..workloads.catalog import GENERATED, ROUTING, build_catalog, list_datasets
from ..workloads.exporters import (PLAN_FORMATS, TRACE_FORMATS, detect_plan_format, engine_flags, export_plan,
                                   read_exported_plan, write_trace)
from ..workloads.generators import generate
from ..workloads.importers import as_trace


def _describe(trace) -> str:
    w = trace.loads.sum(0).double()
    hot = (w.max(-1).values / w.mean(-1).clamp_min(1e-300))
    return (f"{trace.num_steps} steps x {trace.num_layers} layers x {trace.num_experts} experts, "
            f"{int(trace.loads.sum())} assignments; hottest expert / mean per layer: "
            f"median {float(hot.median()):.2f}, max {float(hot.max()):.2f}")


def cmd_generate(args: argparse.Namespace) -> int:
    overrides = dict(args.set or [])
    for key in ("steps", "seed", "tokens_per_step", "num_layers", "scenario", "model"):
        if key in overrides:
            raise OptionError("set", f"{key} has its own flag; do not pass it with --set")
    trace = generate(args.model, args.scenario, steps=args.steps, seed=args.seed,
                     tokens_per_step=args.tokens_per_step, num_layers=args.layers, **overrides)
    path = write_trace(trace, args.out, args.format)
    print(f"wrote {path}: {args.model}, scenario {args.scenario}, seed {args.seed}: {_describe(trace)}")
    return 0


def _plan_input(spec: str) -> bool:
    """Whether INPUT is a plan file (else loads)."""
    path = Path(spec)
    if not path.is_file():
        return False
    suffix = path.suffix.lower()
    if suffix in (".yaml", ".yml"):
        return True
    if suffix in (".json", ".csv"):
        with path.open("rb") as fh:
            head = fh.read(1 << 12)
        if suffix == ".json":
            return b"eplb-plan" in head or b"physical_to_logical_map" in head
        first = head.split(b"\n", 1)[0].lower()
        return b"slot" in first and b"layer" in first
    return False


# The suffix each plan format is written with (an --out that says otherwise is refused).
PLAN_SUFFIXES = {"eplb": (".json",), "sglang": (".json",), "trtllm": (".yaml", ".yml"), "csv": (".csv",)}


def _convert_plan(args: argparse.Namespace) -> int:
    if args.to is not None and args.to not in PLAN_FORMATS:
        raise OptionError("to", f"a plan converts to one of {', '.join(PLAN_FORMATS)}, got {args.to!r}")
    out = Path(args.out)
    suffix = out.suffix.lower()
    fmt = args.to
    if fmt is None:
        fmt = {".yaml": "trtllm", ".yml": "trtllm", ".csv": "csv"}.get(suffix)
        if suffix == ".json":               # eplb's plan file and SGLang's map are both JSON: never guess
            raise OptionError("to", f"{out.name}: a .json plan is an eplb plan or an SGLang map; pass --to eplb "
                              "or --to sglang")
        if fmt is None:
            raise OptionError("out", f"{out.name}: cannot tell the format from the suffix; pass --to "
                              f"({', '.join(PLAN_FORMATS)})")
    if suffix not in PLAN_SUFFIXES[fmt]:
        raise OptionError("out", f"{out.name}: a {fmt} plan is written as {' or '.join(PLAN_SUFFIXES[fmt])}, "
                          f"not {suffix or '(no suffix)'}")
    doc = None
    if detect_plan_format(args.input) == "eplb":
        plan, doc = read_plan(args.input)          # records its shape and dense layers
    else:
        plan = read_exported_plan(args.input, num_experts=args.num_experts, layer_offset=args.layer_offset or 0)
    shape = doc["problem"] if doc else {}
    recorded = int(((doc or {}).get("engine") or {}).get("dense_layers", 0) or 0)
    offset = args.layer_offset
    if offset is None:
        offset = recorded
    elif doc is not None and recorded and offset != recorded:
        raise OptionError("layer_offset", f"{offset} contradicts {args.input}, planned for a model with "
                          f"{recorded} dense layers first; leave --layer-offset out")
    gpus = args.gpus if args.gpus is not None else shape.get("num_gpus")
    problem = None
    if fmt == "eplb" and (doc is None or args.loads):      # an eplb file without --loads is copied as it is
        if not args.loads or gpus is None:
            raise OptionError("loads", "converting an engine map to the eplb plan format records the problem: "
                              "pass --loads and --gpus (and --groups, --nodes)")
        problem = Problem(read_loads(args.loads).weights, plan.num_replicas, args.groups, args.nodes, gpus)
    slot_gpus = gpu_slots = None
    if fmt == "eplb" and problem is None:
        write_plan(out, doc)
    else:
        if shape.get("gpu_slots"):          # a plan for uneven slot counts or failed GPUs
            gpu_slots = [int(c) for c in shape["gpu_slots"]]
            slot_gpus = [g for g, c in enumerate(gpu_slots) for _ in range(c)]
        export_plan(plan, out, fmt, problem=problem, num_gpus=gpus, layer_offset=offset,
                    solver="import", provenance={"converted_from": str(args.input)}, slot_gpus=slot_gpus,
                    gpu_slots=gpu_slots)
    rows = plan.num_layers + (offset if fmt in ("sglang",) else 0)
    failed = [g for g, c in enumerate(gpu_slots or ()) if c == 0]
    padded = (f" (padded to {max(gpu_slots) * len(gpu_slots)} for the failed ranks)"
              if fmt == "sglang" and failed and gpu_slots else "")
    print(f"wrote {out}: plan of {plan.num_layers} MoE layers ({rows} rows), {plan.num_replicas} slots{padded}, "
          f"{plan.num_experts} experts")
    print(engine_flags(fmt, str(out.resolve()), plan.num_replicas, plan.num_experts, failed=failed, num_gpus=gpus))
    return 0


def cmd_convert(args: argparse.Namespace) -> int:
    if _plan_input(args.input):
        return _convert_plan(args)
    if args.to is not None and args.to not in TRACE_FORMATS:
        raise OptionError("to", f"loads convert to one of {', '.join(TRACE_FORMATS)}, got {args.to!r}")
    # The one loads reader; a conversion keeps every row (an engine's dense rows included).
    info = read_loads(args.input, args.format, drop_dense=False)
    trace = as_trace(info.trace, info.meta)                # integer counts (a matrix is one step)
    path = write_trace(trace, args.out, args.to)
    print(f"wrote {path}: {_describe(trace)}")
    return 0


def cmd_datasets(args: argparse.Namespace) -> int:
    if args.rebuild is not None:
        names = args.rebuild or None
        unknown = sorted(set(names or []) - set(GENERATED) - set(ROUTING))
        if unknown:
            raise OptionError("rebuild", f"unknown generated dataset {unknown[0]!r}; known: "
                              f"{', '.join([*GENERATED, *ROUTING])}")
        entries = build_catalog(names)
    else:
        entries = list_datasets()
    if args.json:
        print(json.dumps(entries, indent=2))
        return 0
    print(f"{'name':<28} {'steps x layers x experts':<25} {'size':>8}  description")
    for e in entries:
        shape = f"{e.get('steps')} x {e.get('num_layers')} x {e.get('num_experts')}"
        print(f"{e['name']:<28} {shape:<25} {e.get('bytes', 0) / 1e6:5.2f} MB  {e.get('description', '')}")
    return 0
