"""The ``eplb`` command line.

    eplb plan  --loads FILE --replicas R --groups G --nodes N --gpus P [--solver NAME] --out plan.json
    eplb score --loads FILE --plan plan.json [--previous old.json] [--json]
    eplb solvers

Bad input prints one line on stderr and exits with status 2; never a traceback.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
from typing import Any, Sequence

from .errors import EPLBError, OptionError
from .solve import SolverBug

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are one readable line (no usage dump), exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise SystemExit(_fail(f"{self.prog}: {message}"))


def _fail(message: str) -> int:
    print(f"eplb: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def _option(text: str) -> tuple[str, Any]:
    """``key=value`` with value parsed as JSON when it is JSON (numbers, true, lists), else a string."""
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    key, raw = text.split("=", 1)
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    return key.strip().replace("-", "_"), value


def read_loads_arg(spec: str):
    """weights [layers, experts] for a ``--loads`` argument (see LOADS_HELP)."""
    from .loadfiles import read_weights

    return read_weights(spec)


def loads_sha256(spec: str) -> str | None:
    """Checksum of the one file a ``--loads`` spec reads (None when it reads several)."""
    from .loadfiles import loads_source
    from .planfile import file_sha256

    source = loads_source(spec)
    return file_sha256(source) if source is not None else None


LOADS_HELP = ("loads: a file (.npz, .pt, .json, .csv, SGLang/vLLM/Megatron dumps), a directory or "
              "glob of per-rank dumps, a shipped dataset NAME (`eplb datasets`), optionally "
              "FORMAT:SPEC, and SPEC@A:B for steps A..B-1")


def _format_metrics(metrics: dict[str, Any]) -> str:
    width = max(map(len, metrics))
    lines = []
    for key, value in metrics.items():
        text = f"{value:.6g}" if isinstance(value, float) else str(value)
        lines.append(f"{key:<{width}}  {text}")
    return "\n".join(lines)


def cmd_plan(args: argparse.Namespace) -> int:
    from .planfile import plan_document, write_plan
    from .problem import Problem
    from .solve import solve

    weights = read_loads_arg(args.loads)
    problem = Problem(weights, args.replicas, args.groups, args.nodes, args.gpus)
    options = dict(args.option or [])
    if args.policy is not None:
        options["policy"] = args.policy
    result = solve(problem, args.solver, **options)
    if result.plan is None:
        return _fail(f"solver {args.solver!r} found no plan ({result.termination}): {result.message}")
    metrics = result.summary()
    doc = plan_document(result.plan, problem, policy=result.policy, solver=args.solver, options=options,
                        metrics=metrics,
                        provenance={"loads": str(args.loads), "loads_sha256": loads_sha256(args.loads),
                                    "command": "eplb " + " ".join(sys.argv[1:])})
    write_plan(args.out, doc)
    if args.json:
        print(json.dumps(metrics, indent=2))
    else:
        print(f"wrote {args.out}: {problem.num_layers} layers, policy {result.policy}, "
              f"solver {args.solver}, {result.termination}")
        print(_format_metrics(metrics))
    return 0


def cmd_score(args: argparse.Namespace) -> int:
    from .planfile import read_plan
    from .problem import Problem
    from .scoring import score

    plan, doc = read_plan(args.plan)
    shape = doc["problem"]
    weights = read_loads_arg(args.loads)
    if tuple(weights.shape) != (shape["num_layers"], shape["num_experts"]):
        raise OptionError("loads", f"{args.loads} has shape {tuple(weights.shape)} but the plan is for "
                          f"[{shape['num_layers']}, {shape['num_experts']}]")
    problem = Problem(weights, shape["num_replicas"], shape["num_groups"], shape["num_nodes"],
                      shape["num_gpus"])
    previous = read_plan(args.previous)[0] if args.previous else None
    sc = score(problem, plan, previous=previous, expert_bytes=args.expert_bytes)
    metrics = sc.metrics()
    if args.per_gpu:
        metrics["gpu_load"] = sc.gpu_load.tolist()
    if args.json:
        print(json.dumps(metrics, indent=2))
    else:
        print(f"plan {args.plan} ({doc.get('solver', '?')}, policy {doc.get('policy', '?')}) "
              f"on loads {args.loads}")
        print(_format_metrics({k: v for k, v in metrics.items() if k != "gpu_load"}))
        if args.per_gpu:
            for layer, row in enumerate(sc.gpu_load.tolist()):
                print(f"layer {layer}: " + " ".join(f"{x:.6g}" for x in row))
    return 0


def cmd_solvers(args: argparse.Namespace) -> int:
    from .registry import get_solver, solver_names

    for name in solver_names():
        spec = get_solver(name)
        avail = "available" if spec.is_available() else f"unavailable ({spec.requires})"
        opts = ", ".join(spec.options) or "-"
        print(f"{name:<16} {spec.kind:<9} {avail}\n    {spec.description}\n    options: {opts}")
    return 0


# Packages that add their own sub-commands (workloads: generate, convert; benchmarks: recommend).
PLUGIN_MODULES = ("solvers.workloads.commands", "solvers.bench.commands")


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = _Parser(prog="eplb", description="Expert-parallel load balancing workbench.")
    parser.add_argument("--version", action="version", version=f"eplb {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    p = sub.add_parser("plan", help="compute a placement plan and write it as JSON")
    p.add_argument("--loads", required=True, help=LOADS_HELP)
    p.add_argument("--replicas", type=int, required=True, help="physical expert slots R")
    p.add_argument("--groups", type=int, default=1, help="expert groups G (default 1)")
    p.add_argument("--nodes", type=int, default=1, help="nodes N (default 1)")
    p.add_argument("--gpus", type=int, required=True, help="GPUs P")
    p.add_argument("--solver", default="deepseek", help="solver name (see `eplb solvers`)")
    p.add_argument("--policy", choices=("auto", "hierarchical", "global"), default=None,
                   help="placement policy (default: the solver's, usually auto)")
    p.add_argument("--option", "-O", action="append", type=_option, metavar="KEY=VALUE",
                   help="solver option, repeatable (e.g. -O time_limit=10)")
    p.add_argument("--out", required=True, help="plan JSON to write")
    p.add_argument("--json", action="store_true", help="print metrics as JSON")
    p.set_defaults(func=cmd_plan)

    s = sub.add_parser("score", help="score a plan on loads with the shared scorer")
    s.add_argument("--loads", required=True, help=LOADS_HELP)
    s.add_argument("--plan", required=True, help="plan JSON written by `eplb plan`")
    s.add_argument("--previous", help="previous plan JSON, to count migration moves")
    s.add_argument("--expert-bytes", type=int, default=None, help="bytes per expert, for moves in bytes")
    s.add_argument("--per-gpu", action="store_true", help="also print every GPU's load")
    s.add_argument("--json", action="store_true", help="print metrics as JSON")
    s.set_defaults(func=cmd_score)

    ls = sub.add_parser("solvers", help="list the registered solvers and their options")
    ls.set_defaults(func=cmd_solvers)

    for name in PLUGIN_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        module.add_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return int(args.func(args) or 0)
    except SystemExit as exc:
        return int(exc.code or 0) if not isinstance(exc.code, str) else _fail(exc.code)
    except EPLBError as exc:
        return _fail(str(exc))
    except SolverBug as exc:  # not the user's fault: say so, exit 1
        print(f"eplb: internal error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return _fail("interrupted")
    except OSError as exc:
        return _fail(f"{exc.filename or ''}: {exc.strerror or exc}".strip(": "))


if __name__ == "__main__":
    sys.exit(main())
