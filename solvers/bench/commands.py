"""``eplb`` sub-commands of the benchmark harness (added by solvers.cli when this module exists).

    eplb recommend --experts E --replicas R --gpus P --nodes N [--groups G] [--time-budget S]
                   [--results DIR] [--json]
"""
from __future__ import annotations

import argparse
import json


def cmd_recommend(args: argparse.Namespace) -> int:
    from .recommend import format_recommendation, recommend

    rec = recommend(args.results, experts=args.experts, replicas=args.replicas, gpus=args.gpus,
                    nodes=args.nodes, groups=args.groups, time_budget=args.time_budget,
                    layers=args.layers)
    if args.json:
        print(json.dumps(rec.as_dict(), indent=2, default=str))
    else:
        print(format_recommendation(rec))
    return 0


def add_commands(subparsers) -> None:
    r = subparsers.add_parser("recommend", help="which solver to use for a cluster shape (from benchmark results)")
    r.add_argument("--experts", type=int, required=True, help="logical experts E per layer")
    r.add_argument("--replicas", type=int, required=True, help="physical expert slots R")
    r.add_argument("--gpus", type=int, required=True, help="GPUs P")
    r.add_argument("--nodes", type=int, default=1, help="nodes N (default 1)")
    r.add_argument("--groups", type=int, default=None, help="expert groups G (default: any)")
    r.add_argument("--layers", type=int, default=None, metavar="L",
                   help="MoE layers planned at once: benchmark timings are scaled linearly to L")
    r.add_argument("--time-budget", type=float, default=None, metavar="S",
                   help="seconds a solve may take (default: no limit)")
    r.add_argument("--results", default=None, metavar="DIR",
                   help="benchmark results directory (default: the shipped benchmarks/results)")
    r.add_argument("--json", action="store_true", help="print the recommendation as JSON")
    r.set_defaults(func=cmd_recommend)
