"""``eplb`` sub-commands of the benchmark harness (added by solvers.cli when this module exists).

    eplb bench run --suite NAME --out DIR [...]     (the options of ``python -m solvers.bench.run``)
    eplb recommend --experts E --replicas R --gpus P --nodes N [--groups G] [--time-budget S]
                   [--results DIR] [--json]
"""
from __future__ import annotations

import argparse
import json


def cmd_recommend(args: argparse.Namespace) -> int:
    from solvers.errors import OptionError

    from .recommend import format_recommendation, recommend

    if args.model is not None:
        from solvers.workloads.presets import get_preset

        preset = get_preset(args.model)
        if args.experts is not None and args.experts != preset.num_experts:
            raise OptionError("experts", f"{args.experts} contradicts --model {args.model} ({preset.num_experts})")
        args.experts = preset.num_experts
        args.groups = preset.num_groups if args.groups is None else args.groups
        args.layers = preset.num_layers if args.layers is None else args.layers
    if args.experts is None:
        raise OptionError("experts", "pass --experts or --model")
    rec = recommend(args.results, experts=args.experts, replicas=args.replicas, gpus=args.gpus,
                    nodes=args.nodes, groups=args.groups, time_budget=args.time_budget,
                    layers=args.layers, policy=args.policy)
    if args.json:
        print(json.dumps(rec.as_dict(), indent=2, default=str))
    else:
        print(format_recommendation(rec))
    return 0


def cmd_bench_run(args: argparse.Namespace) -> int:
    from .run import main

    return main(args.bench_args, prog="eplb bench run")


def add_commands(subparsers) -> None:
    b = subparsers.add_parser("bench", help="run the benchmark harness (eplb bench run --help)")
    steps = b.add_subparsers(dest="bench_command", metavar="STEP", parser_class=type(b))
    steps.required = True
    # The runner parses its own options: with '+' as the only prefix here, every '-'/'--'
    # argument is handed to it untouched (argparse.REMAINDER alone drops a leading option).
    r = steps.add_parser("run", help="run a benchmark suite (tiny, ci, full, dynamics)", add_help=False, prefix_chars="+")
    r.add_argument("bench_args", nargs=argparse.REMAINDER, metavar="OPTIONS")
    r.set_defaults(func=cmd_bench_run)

    r = subparsers.add_parser("recommend", help="which solver to use for a cluster shape (from benchmark results)")
    r.add_argument("--model", default=None, help="model preset: fills experts, groups and layers")
    r.add_argument("--experts", type=int, default=None, help="logical experts E per layer")
    r.add_argument("--policy", choices=("auto", "hierarchical", "global"), default=None,
                   help="only runs of this placement policy (default: any; the answer names it)")
    r.add_argument("--replicas", type=int, required=True, help="physical expert slots R")
    r.add_argument("--gpus", type=int, required=True, help="GPUs P")
    r.add_argument("--nodes", type=int, default=1, help="nodes N (default 1)")
    r.add_argument("--groups", type=int, default=None, help="expert groups G (default: any)")
    r.add_argument("--layers", type=int, default=None, metavar="L",
                   help="MoE layers planned at once: benchmark timings are scaled linearly to L")
    r.add_argument("--time-budget", type=float, default=None, metavar="S",
                   help="seconds a solve may take (default: no limit)")
    r.add_argument("--results", default=None, metavar="DIR",
                   help="benchmark results directory (default: the shipped solvers/bench/results)")
    r.add_argument("--json", action="store_true", help="print the recommendation as JSON")
    r.set_defaults(func=cmd_recommend)
