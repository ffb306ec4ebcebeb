"""``eplb score``: score a plan (eplb file or engine map) on loads with the shared scorer."""
from __future__ import annotations

import argparse
import json
import math

import torch

from ..errors import LoadFileError, OptionError
from ..transfers import exact_schedule, schedule_transfers, write_schedule
from ..problem import Problem
from ..evaluate import score
from ..workloads.exporters import live_map
from ..cluster import get_model
from ..cluster_text import cluster_from_args
from .routing import routing_arg, token_bytes_arg
from .args import check_against_plan, network_from_args, real_cluster_kwargs
from ..io import read_loads
from .inputs import dropped_note, format_metrics, read_any_plan, read_previous


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
    info = read_loads(args.loads)
    plan, shape, doc = read_any_plan(args.plan, info)
    check_against_plan(args, shape, args.plan)
    if shape is not None and "num_replicas" in shape:
        if (shape["num_layers"], shape["num_experts"]) != (info.num_layers, info.num_experts):
            raise OptionError("loads", f"{args.loads} has shape ({info.num_layers}, {info.num_experts}) (MoE layers, "
                              f"experts) but the plan is for [{shape['num_layers']}, {shape['num_experts']}]")
        real = {k: shape.get(k) for k in ("gpu_speed", "gpu_slots")}
        # the cluster the plan was made for, unless the command names another (speeds, slots)
        real.update({k: v for k, v in real_cluster_kwargs(args).items() if v is not None})
        problem = Problem(info.weights, None if real["gpu_slots"] is not None else shape["num_replicas"],
                          shape["num_groups"], shape["num_nodes"], shape["num_gpus"], **real)
    else:
        gpus = args.gpus or (shape or {}).get("num_gpus")
        if not gpus:
            raise OptionError("gpus", f"{args.plan} is an engine map that does not record GPUs; pass --gpus")
        if plan.num_layers != info.num_layers:
            raise LoadFileError("plan", f"{args.plan} has {plan.num_layers} layers, the loads {info.num_layers}")
        real = real_cluster_kwargs(args)
        if real["gpu_slots"] is None and (shape or {}).get("gpu_slots") is not None:
            real["gpu_slots"] = shape["gpu_slots"]          # a CSV's gpu column: the slot map it was made for
        slots = plan.num_replicas
        if real.get("failed") and real["gpu_slots"] is None and slots % gpus == 0:
            # an engine map padded for failed ranks (docs/formats.md): their slots serve nothing
            plan = live_map(plan, gpus, real["failed"])
        c = cluster_from_args(info.num_experts, model=args.model, groups=args.groups, nodes=args.nodes or 1, gpus=gpus,
                              replicas=None if real["gpu_slots"] is not None else slots, **real)
        problem = Problem(info.weights, cluster=c.cluster, num_groups=c.num_groups)
    network = network_from_args(args)                       # checked before any work
    if args.schedule == "exact":
        if not args.previous:
            raise OptionError("schedule", "the exact transfer schedule needs --previous (the plan in force)")
        if args.transfer_model != "rounds":
            raise OptionError("schedule", "the exact model schedules rounds; the shared model's optimum over sources "
                                          "is its LP, printed as the any-source bound")
        if not math.isfinite(args.time_limit) or args.time_limit <= 0:
            raise OptionError("time_limit", f"must be a positive number of seconds, got {args.time_limit!r}")
    if args.out and not args.previous:
        raise OptionError("out", "writes the transfer schedule: give --previous (the plan in force)")
    previous, previous_cluster = read_previous(args, info, problem)
    nbytes = args.expert_bytes
    if nbytes is None and args.model is not None:
        nbytes = get_model(args.model).expert_bytes or None
    if args.out and nbytes is None:
        raise OptionError("expert_bytes", "the transfer schedule needs the bytes of one expert (--expert-bytes "
                                          "or --model)")
    # Transfer schedules map slots to GPUs by the cluster's slot map when both plans are of this
    # cluster; a plan in force made before GPUs failed (other slots) is not scheduled, and asking
    # for the file says so.
    uniform = previous_cluster is None
    if args.out and not uniform:
        raise OptionError("out", "transfer schedules need both plans made for the same slots (the plan in force "
                                 "was made before GPUs failed)")
    slot_gpu = None if problem.cluster.uniform_slots else problem.cluster.slot_gpus()       # [R]
    routing = routing_arg(args, problem)
    sc = score(problem, plan, previous=previous, expert_bytes=nbytes, previous_cluster=previous_cluster,
               routing=routing, token_bytes=None if routing is None else token_bytes_arg(args, routing))
    metrics = sc.metrics()
    if args.per_gpu:
        metrics["gpu_load"] = sc.gpu_load.tolist()
        if sc.gpu_time is not sc.gpu_load:
            metrics["gpu_time"] = sc.gpu_time.tolist()
    sched = None
    if previous is not None and nbytes and uniform:
        sched = schedule_transfers(previous, plan, problem.num_gpus, problem.num_gpus // problem.num_nodes, nbytes,
                                   network, num_experts=problem.num_experts, model=args.transfer_model,
                                   slot_gpu=slot_gpu)
        if args.schedule == "exact":
            sched = exact_schedule(sched.copies, network, nbytes, time_limit=args.time_limit, hint=sched)
        metrics["transfers"] = sched.summary()
        if args.out:
            write_schedule(args.out, sched)
    if args.json:
        print(json.dumps(metrics, indent=2))
    else:
        # An engine map records neither solver nor policy: say only what the file says.
        about = ", ".join(x for x in (doc.get("solver"), doc.get("policy") and f"policy {doc['policy']}") if x)
        print(f"plan {args.plan}{f' ({about})' if about else ''} on loads {args.loads}{dropped_note(info)}")
        print(format_metrics({k: v for k, v in metrics.items() if k not in ("gpu_load", "gpu_time", "transfers")}))
        if sched is not None:
            t = sched.summary()
            how = (f"in {t['rounds']} rounds" if t["model"] == "rounds"
                   else "all at once, sharing each GPU's links")
            print(f"transfers: {t['moves']} copies ({t['copies_intra']} intra-node, {t['copies_inter']} inter-node, "
                  f"{t['copies_host']} from host), {t['bytes'] / 1e9:.3f} GB {how}; makespan "
                  f"{t['makespan_seconds']:.4g} s, lower bound {t['bound_seconds']:.4g} s (gap "
                  f"{100 * t['gap']:.2f} %; any source {t['bound_any_source_seconds']:.4g} s); {network.describe()}")
            if args.schedule == "exact" and t.get("proven"):
                print(f"exact schedule (CP-SAT {t['status']}): makespan {t['makespan_seconds']:.4g} s, proven optimal")
            elif args.schedule == "exact":             # CP-SAT's bound and the gap to it
                bound = t.get("bound_seconds")
                gap = t["makespan_seconds"] / bound - 1 if bound else math.inf
                print(f"exact schedule (CP-SAT {t['status']}, not proven within the time limit): makespan "
                      f"{t['makespan_seconds']:.4g} s, CP-SAT bound {bound:.4g} s (gap {100 * gap:.2f} %)")
            if args.out:
                print(f"wrote {args.out}")
        if args.per_gpu:
            print()
            print(per_gpu_summary(sc.gpu_load, problem.num_nodes))
            if sc.gpu_time is not sc.gpu_load:      # GPUs of different speeds: the same in time
                print()
                print("in time (load / speed):")
                print(per_gpu_summary(sc.gpu_time, problem.num_nodes))
    return 0
