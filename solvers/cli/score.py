"""``eplb score``: score a plan (eplb file or engine map) on loads with the shared scorer."""
from __future__ import annotations

import argparse
import json

import torch

from ..errors import LoadFileError, OptionError
from ..problem import Problem
from ..scoring import score
from ..cluster import get_model
from .inputs import dropped_note, format_metrics, read_any_plan, read_loads_arg


def per_gpu_summary(gpu_load: torch.Tensor, num_nodes: int, top: int = 3) -> str:
    """Per layer: its imbalance, its hottest GPUs and its coolest GPU with load / mean (the
    full [layers, GPUs] loads are in ``--json``). gpu_load: [L, P] tokens."""
    L, P = gpu_load.shape
    ratio = gpu_load / gpu_load.mean(1, keepdim=True).clamp_min(1e-300)           # [L, P]
    order = torch.argsort(ratio, dim=1, descending=True)                          # [L, P]
    per_node = P // num_nodes

    def gpu(layer: int, g: int) -> str:
        node = f"n{g // per_node}/" if num_nodes > 1 else ""
        return f"{node}GPU {g} {float(ratio[layer, g]):.3f}"

    lines = [f"per-GPU load / mean, by layer (hottest {min(top, P)} and the coolest GPU; --json for all "
             f"{L} x {P} loads)", f"{'layer':>5}  {'imbalance':>9}  hottest" + " " * 40 + "coolest"]
    for layer in range(L):
        hot = ", ".join(gpu(layer, int(g)) for g in order[layer, :top])
        lines.append(f"{layer:>5}  {float(ratio[layer].max()):>9.4f}  {hot:<47}{gpu(layer, int(order[layer, -1]))}")
    return "\n".join(lines)


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
    sc = score(problem, plan, previous=previous, expert_bytes=args.expert_bytes)
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
            print()
            print(per_gpu_summary(sc.gpu_load, problem.num_nodes))
    return 0
