"""``eplb score``: score a plan (eplb file or engine map) on loads with the shared scorer."""
from __future__ import annotations

import argparse
import json

from ..errors import LoadFileError, OptionError
from ..problem import Problem
from ..scoring import score
from ..cluster import get_model
from .routing import routing_arg, token_bytes_arg
from .inputs import dropped_note, format_metrics, read_any_plan, read_loads_arg


def cmd_score(args: argparse.Namespace) -> int:
    info, _ = read_loads_arg(args.loads)
    plan, shape, doc = read_any_plan(args.plan, info)
    if shape is not None and "num_replicas" in shape:
        if (shape["num_layers"], shape["num_experts"]) != (info.num_layers, info.num_experts):
            raise OptionError("loads", f"{args.loads} has shape ({info.num_layers}, {info.num_experts}) (MoE layers, "
                              f"experts) but the plan is for [{shape['num_layers']}, {shape['num_experts']}]")
        problem = Problem(info.weights, shape["num_replicas"], shape["num_groups"], shape["num_nodes"],
                          shape["num_gpus"])
    else:
        gpus = args.gpus or (shape or {}).get("num_gpus")
        if not gpus:
            raise OptionError("gpus", f"{args.plan} is an engine map that does not record GPUs; pass --gpus")
        groups = args.groups
        if args.model is not None:
            groups = groups or get_model(args.model).num_groups
        if plan.num_layers != info.num_layers:
            raise LoadFileError("plan", f"{args.plan} has {plan.num_layers} layers, the loads {info.num_layers}")
        problem = Problem(info.weights, plan.num_replicas, groups or 1, args.nodes, gpus)
    previous = read_any_plan(args.previous, info, "previous")[0] if args.previous else None
    routing = routing_arg(args, problem)
    sc = score(problem, plan, previous=previous, expert_bytes=args.expert_bytes, routing=routing,
               token_bytes=None if routing is None else token_bytes_arg(args, routing))
    metrics = sc.metrics()
    if args.per_gpu:
        metrics["gpu_load"] = sc.gpu_load.tolist()
    if args.json:
        print(json.dumps(metrics, indent=2))
    else:
        print(f"plan {args.plan} ({doc.get('solver', '?')}, policy {doc.get('policy', '?')}) "
              f"on loads {args.loads}{dropped_note(info)}")
        print(format_metrics({k: v for k, v in metrics.items() if k != "gpu_load"}))
        if args.per_gpu:
            for layer, row in enumerate(sc.gpu_load.tolist()):
                print(f"layer {layer}: " + " ".join(f"{x:.6g}" for x in row))
    return 0
