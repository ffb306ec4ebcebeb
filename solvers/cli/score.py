"""``eplb score``: score a plan (eplb file or engine map) on loads with the shared scorer."""
from __future__ import annotations

import argparse
import json
import math

import torch

from ..errors import EPLBError, LoadFileError, OptionError
from ..transfers import NoSourceError, exact_schedule, schedule_transfers, write_schedule
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
    """Every GPU's load / the layer's mean GPU load over the layers (mean, worst, the layer
    of its worst, how many layers it is the hottest GPU), then per layer its imbalance, its
    hottest GPUs and its coolest one. The full [layers, GPUs] loads are in ``--json``.
    gpu_load: [L, P] tokens (or seconds, for the same table in time)."""
    L, P = gpu_load.shape
    ratio = gpu_load / gpu_load.mean(1, keepdim=True).clamp_min(1e-300)           # [L, P]
    order = torch.argsort(ratio, dim=1, descending=True)                          # [L, P]
    per_node = P // num_nodes
    worst, worst_layer = ratio.max(0)                                             # [P], [P]
    hottest = torch.bincount(order[:, 0], minlength=P)                            # [P] layers where it is hottest

    def gpu(g: int) -> str:
        return f"n{g // per_node}/GPU {g}" if num_nodes > 1 else f"GPU {g}"

    name_w = max(len(gpu(g)) for g in range(P))
    lines = [f"every GPU: load / the layer's mean over {L} layers (hot layers: those where it is the hottest GPU)",
             f"{'GPU':<{name_w}}  {'mean':>6}  {'worst':>6}  "
             f"{'at layer':>8}  {'hot layers':>10}"]
    lines += [f"{gpu(g):<{name_w}}  {float(ratio[:, g].mean()):>6.3f}  {float(worst[g]):>6.3f}  "
              f"{int(worst_layer[g]):>8}  {int(hottest[g]):>10}" for g in range(P)]
    k = min(top, P)
    cell = lambda layer, g: f"{gpu(g)} {float(ratio[layer, g]):.3f}"  # noqa: E731
    hot = [", ".join(cell(layer, int(g)) for g in order[layer, :k]) for layer in range(L)]
    hot_w = max(len("hottest"), *map(len, hot))
    lines += ["", f"by layer: the hottest {k} GPUs and the coolest (load / mean)",
              f"{'layer':>5}  {'imbalance':>9}  {'hottest':<{hot_w}}  coolest"]
    lines += [f"{layer:>5}  {float(ratio[layer].max()):>9.4f}  {hot[layer]:<{hot_w}}  "
              f"{cell(layer, int(order[layer, -1]))}" for layer in range(L)]
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
    # Transfer schedules map each plan's slots to GPUs by its own cluster (the plan in force may
    # be of other slots: made before GPUs failed or came back, or for other slot counts).
    slot_gpu = None if problem.cluster.uniform_slots else problem.cluster.slot_gpus()       # [R]
    previous_slot_gpu = None if previous_cluster is None else previous_cluster.slot_gpus()  # [R']
    routing = routing_arg(args, problem)
    sc = score(problem, plan, previous=previous, expert_bytes=nbytes, previous_cluster=previous_cluster,
               routing=routing, token_bytes=None if routing is None else token_bytes_arg(args, routing))
    metrics = sc.metrics()
    if args.per_gpu:
        metrics["gpu_load"] = sc.gpu_load.tolist()
        if sc.gpu_time is not sc.gpu_load:
            metrics["gpu_time"] = sc.gpu_time.tolist()
    sched = no_schedule = None
    if previous is not None and nbytes is None:
        no_schedule = "the bytes of one expert are unknown (give --expert-bytes or --model)"
    elif previous is not None:
        try:
            sched = schedule_transfers(previous, plan, problem.num_gpus, problem.num_gpus // problem.num_nodes,
                                       nbytes, network, num_experts=problem.num_experts, model=args.transfer_model,
                                       slot_gpu=slot_gpu, previous_slot_gpu=previous_slot_gpu)
        except NoSourceError as exc:          # the failed GPUs held the only replicas: say so, once
            if args.out:
                raise OptionError("out", f"no transfer schedule: {exc.detail}; give --host-bw GBPS (host "
                                         "memory as a source)") from None
            no_schedule = f"{exc.detail}; give --host-bw GBPS (host memory as a source)"
        except EPLBError as exc:              # e.g. --expert-bytes 0: copies of no size
            if args.out:
                raise
            no_schedule = str(exc)
    if no_schedule:
        metrics["transfers_unavailable"] = no_schedule
    if sched is not None:
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
        print(format_metrics({k: v for k, v in metrics.items() if k not in ("gpu_load", "gpu_time", "transfers",
                                                                       "transfers_unavailable")}))
        if no_schedule:
            print(f"transfers: no schedule: {no_schedule}")
        if sched is not None:
            t = sched.summary()
            how = (f"in {t['rounds']} rounds" if t["model"] == "rounds"
                   else "all at once, sharing each GPU's links")
            print(f"transfers: {t['moves']} copies ({t['copies_intra']} intra-node, {t['copies_inter']} inter-node, "
                  f"{t['copies_host']} from host), {t['bytes'] / 1e9:.3f} GB {how}; makespan "
                  f"{t['makespan_seconds']:.4g} s, lower bound {t['bound_seconds']:.4g} s (gap "
                  f"{100 * t['gap']:.2f} %; any source {t['bound_any_source_seconds']:.4g} s); {network.describe()}")
            if args.schedule == "exact" and t.get("note"):     # not run or not built: the heuristic's
                print(f"exact schedule: {t['note']}" + (" (proven optimal: it meets the bound over every source "
                                                         "choice)" if t.get("proven") else ""))
            elif args.schedule == "exact" and t.get("proven"):
                print(f"exact schedule (CP-SAT {t['status']}): makespan {t['makespan_seconds']:.4g} s, proven optimal")
            elif args.schedule == "exact":             # the best bound over every source choice, its gap
                own = "optimal for its sources; " if t["gap"] == 0 else ""
                print(f"exact schedule (CP-SAT {t['status']}, not proven within the time limit): makespan "
                      f"{t['makespan_seconds']:.4g} s ({own}bound over every source choice "
                      f"{t['exact_bound_seconds']:.4g} s, gap {100 * t['exact_gap']:.2f} %)")
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
