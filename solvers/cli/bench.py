"""``eplb bench run`` and ``eplb recommend``: the benchmark harness's commands.

    eplb bench run --suite NAME --out DIR [...]     (the options of ``python -m benchmarks.run``)
    eplb recommend --experts E --replicas R --gpus P --nodes N [--groups G] [--time-budget S]
                   [--results DIR] [--json]
"""
from __future__ import annotations

import argparse
import json

from ..bench import run as bench_run
from ..bench.recommend import format_recommendation, recommend
from ..errors import OptionError
from ..plugins import resolve_solvers
from ..cluster import get_model
from . import args as cli_args


def cmd_recommend(args: argparse.Namespace) -> int:
    if args.model is not None:
        preset = get_model(args.model)
        if args.experts is not None and args.experts != preset.num_experts:
            raise OptionError("experts", f"{args.experts} contradicts --model {args.model} ({preset.num_experts})")
        args.experts = preset.num_experts
        args.groups = preset.num_groups if args.groups is None else args.groups
        args.layers = preset.num_layers if args.layers is None else args.layers
    if args.experts is None:
        raise OptionError("experts", "pass --experts or --model")
    rec = recommend(args.results, experts=args.experts, replicas=args.replicas, gpus=args.gpus,
                    nodes=args.nodes, groups=args.groups, time_budget=args.time_budget,
                    layers=args.layers, policy=None if args.policy == "any" else args.policy)
    if args.json:
        print(json.dumps(rec.as_dict(), indent=2, default=str))
    else:
        print(format_recommendation(rec))
    return 0


def cmd_bench_run(args: argparse.Namespace) -> int:
    """The runner on the options parsed here (the runner's own argument definitions); its
    errors are one line prefixed ``eplb bench run:``. The command recorded is this one's."""
    resolve_solvers(s.strip() for s in (args.solvers or "").split(",") if s.strip())   # your planners too
    return bench_run.main(cli_args.ARGV[2:], prog="eplb bench run", args=args)
