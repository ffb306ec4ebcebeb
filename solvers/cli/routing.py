"""``eplb routing``: per-token routing traces (generate, convert, info), and the ``--routing``
argument of plan, score and compare (docs/formats.md "Routing traces")."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..cluster import MODELS
from ..errors import OptionError
from ..problem import Problem
from ..routing import RoutingSpec, generate_routing, read_routing, save_routing
from ..routing.coactivation import coactivation_lift
from ..routing.trace import RoutingTrace
from ..traffic import trace_token_bytes
from ..workloads.catalog import ROUTING, dataset_path


def _dataset_or_file(spec: str) -> str | Path:
    """A shipped routing dataset by name (``--routing`` and ``eplb routing`` alike), else the file spec."""
    return dataset_path(spec) if spec in ROUTING and not Path(spec).exists() else spec


def routing_arg(args: argparse.Namespace, problem: Problem) -> RoutingTrace | None:
    """The trace of ``--routing`` (None without it), checked against the problem's shape."""
    if getattr(args, "routing", None) is None:
        return None
    trace = read_routing(_dataset_or_file(args.routing), num_experts=problem.num_experts)
    if trace.num_layers != problem.num_layers:
        raise OptionError("routing", f"{args.routing} has {trace.num_layers} MoE layers, the loads "
                          f"{problem.num_layers}")
    return trace


def token_bytes_arg(args: argparse.Namespace, trace: RoutingTrace) -> int:
    """Bytes per token and destination: the --model preset's, else the trace's model's, else 1."""
    model = getattr(args, "model", None)
    if model is not None and MODELS[model].token_bytes > 0:
        return MODELS[model].token_bytes
    return trace_token_bytes(trace)


def cmd_routing(args: argparse.Namespace) -> int:
    if args.action == "generate":
        if args.input not in MODELS:
            raise OptionError("model", f"unknown model preset {args.input!r}; choose one of {', '.join(MODELS)}")
        overrides = dict(args.set or [])
        trace = generate_routing(args.input, args.seed, RoutingSpec(num_tokens=args.tokens), **overrides)
    else:
        trace = read_routing(_dataset_or_file(args.input), args.format, args.num_experts)
    if args.action == "info":
        lift = coactivation_lift(trace)
        if args.json:
            print(json.dumps({"layers": trace.num_layers, "tokens": trace.num_tokens, "top_k": trace.top_k,
                              "num_experts": trace.num_experts, "num_ranks": trace.num_ranks,
                              "coactivation_lift": lift, "meta": trace.meta}, indent=2, default=str))
        else:
            print(trace.describe())
            print(f"co-activation lift {lift:.2f} (about 0.9 for independent top-k choices, 3.6 for the shipped "
                  f"deepseek-v3-routing; docs/traffic.md relates it to the traffic cut to expect)")
        return 0
    if args.out is None:
        raise OptionError("out", f"eplb routing {args.action} needs --out FILE.npz")
    path = save_routing(trace, args.out)
    print(f"wrote {path}: {trace.describe()}")
    return 0
