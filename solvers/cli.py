"""The ``eplb`` command line.

    eplb plan    --loads SPEC (--model NAME | --groups G) --replicas R --nodes N --gpus P
                 [--solver NAME] [--policy auto|hierarchical|global] [-O KEY=VALUE ...] --out plan.json
    eplb score   --loads SPEC --plan PLAN [--previous PLAN] [--expert-bytes B] [--per-gpu] [--json]
    eplb compare --loads SPEC (--model NAME | ...) [--solvers a,b] [--policy global,hierarchical]
                 [--holdout A:B] [--previous PLAN] [--out DIR]
    eplb solvers [--json]

Bad input prints one line on stderr and exits with status 2; never a traceback.
"""
from __future__ import annotations

import argparse
import importlib
import json
import shlex
import sys
from pathlib import Path
from typing import Any, Sequence

from .errors import EPLBError, OptionError
from .solve import SolverBug

EXIT_USAGE = 2
# The argv of the running main(), recorded in plan provenance.
_ARGV: list[str] = []


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are one readable line (no usage dump), exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise SystemExit(_fail(f"{self.prog}: {message}"))


def _fail(message: str) -> int:
    print(f"eplb: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def _option(text: str) -> tuple[str, Any]:
    """``key=value`` for -O (see :func:`solvers.options.parse_key_value`)."""
    from .options import parse_key_value

    try:
        return parse_key_value(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def read_loads_info(spec: str):
    """The loads of a ``--loads`` argument (MoE layers; see LOADS_HELP) as a LoadsInfo."""
    from .io import read_loads

    return read_loads(spec)


def loads_sha256(spec: str) -> str | None:
    """Checksum of the one file a ``--loads`` spec reads (None when it reads several)."""
    from .loadfiles import loads_source
    from .planfile import file_sha256

    source = loads_source(spec)
    return file_sha256(source) if source is not None else None


LOADS_HELP = ("loads: a file (.npz, .pt, .json, .csv, SGLang/vLLM/Megatron dumps), a directory or "
              "glob of per-rank dumps, a shipped dataset NAME (`eplb datasets`), optionally "
              "FORMAT:SPEC, and SPEC@A:B for steps A..B-1; leading all-zero (dense) layers are dropped")


def _format_metrics(metrics: dict[str, Any]) -> str:
    width = max(map(len, metrics))
    lines = []
    for key, value in metrics.items():
        text = f"{value:.6g}" if isinstance(value, float) else str(value)
        lines.append(f"{key:<{width}}  {text}")
    return "\n".join(lines)


# Cluster arguments shared by plan, compare and score -------------------------------------

def add_cluster_args(p: argparse.ArgumentParser, replicas_required: bool = True) -> None:
    from .workloads.presets import PRESETS

    p.add_argument("--model", default=None, choices=sorted(PRESETS), metavar="NAME",
                   help=f"model preset ({', '.join(sorted(PRESETS))}): fills experts, groups and dense layers")
    p.add_argument("--replicas", type=int, required=replicas_required, help="physical expert slots R")
    p.add_argument("--groups", type=int, default=None, help="expert groups G (default: the model's, else 1)")
    p.add_argument("--nodes", type=int, default=1, help="nodes N (default 1)")
    p.add_argument("--gpus", type=int, required=replicas_required, help="GPUs P")


def problem_from_args(args: argparse.Namespace, info: Any):
    """(Problem, dense layers for engine maps, expert bytes or None) from the cluster args
    and the loads read (a :class:`solvers.io.LoadsInfo`)."""
    from .problem import Problem
    from .workloads.presets import get_preset

    groups, dense, expert_bytes = args.groups, info.dense_layers, None
    if args.model is not None:
        preset = get_preset(args.model)
        if info.num_experts != preset.num_experts:
            raise OptionError("model", f"{args.model} has {preset.num_experts} routed experts, but the loads "
                              f"have {info.num_experts}")
        if groups is not None and groups != preset.num_groups:
            raise OptionError("groups", f"{groups} contradicts --model {args.model} ({preset.num_groups} groups)")
        groups = preset.num_groups
        expert_bytes = preset.expert_bytes or None
        if info.num_layers > preset.num_layers:
            raise OptionError("model", f"{args.model} has {preset.num_layers} MoE layers, but the loads have "
                              f"{info.num_layers} (after {info.dense_layers} leading all-zero layers)")
        if info.dense_layers and info.dense_layers != preset.dense_layers:
            raise OptionError("model", f"the loads start with {info.dense_layers} all-zero layers; "
                              f"{args.model} has {preset.dense_layers} dense layers")
        if info.num_layers == preset.num_layers:
            dense = preset.dense_layers           # a whole model: engines count its dense layers
    return Problem(info.weights, args.replicas, 1 if groups is None else groups, args.nodes, args.gpus), dense, \
        expert_bytes


def _parse_options(pairs: list[tuple[str, Any]] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs or []:
        if key in out:
            raise OptionError(key, "is given twice")
        out[key] = value
    return out


def _command_line() -> str:
    return "eplb " + " ".join(shlex.quote(a) for a in _ARGV)


# plan ------------------------------------------------------------------------------------

def cmd_plan(args: argparse.Namespace) -> int:
    from .planfile import plan_document, write_plan
    from .solve import solve

    info = read_loads_info(args.loads)
    problem, dense, preset_bytes = problem_from_args(args, info)
    options = _parse_options(args.option)
    if args.policy is not None:
        if "policy" in options:
            raise OptionError("policy", "given both as --policy and -O policy=")
        options["policy"] = args.policy
    previous = read_any_plan(args.previous, info, args, "previous")[0] if args.previous else None
    expert_bytes = args.expert_bytes if args.expert_bytes is not None else preset_bytes
    if previous is None and (args.migration_slack is not None or args.migration is not None
                             or args.migration_budget is not None):
        raise OptionError("previous", "--migration-slack, --migration and --migration-budget need --previous "
                                      "(the placement in force)")
    if args.migration_budget is not None and args.migration_slack is None:
        raise OptionError("migration_budget", "needs --migration-slack (the budget widens it layer by layer)")
    if previous is not None and args.migration_slack is not None:
        from .migration import plan_with_migration

        result = plan_with_migration(problem, args.solver, previous, slack=args.migration_slack,
                                     method=args.migration or "heuristic", budget=args.migration_budget,
                                     expert_bytes=expert_bytes, **options)
    else:
        result = solve(problem, args.solver, previous=previous, expert_bytes=expert_bytes, **options)
    if result.plan is None:
        return _fail(f"solver {args.solver!r} found no plan ({result.termination}): {result.message}")
    metrics = result.summary()
    doc = plan_document(result.plan, problem, policy=result.policy, solver=args.solver, options=result.options,
                        metrics=metrics, result=result, dense_layers=dense,
                        provenance={"loads": str(args.loads), "loads_sha256": loads_sha256(args.loads),
                                    "loads_format": info.format, "dense_layers_dropped": info.dense_layers,
                                    "model": args.model, "previous": args.previous,
                                    "expert_bytes": expert_bytes, "command": _command_line()})
    write_plan(args.out, doc)
    if args.json:
        print(json.dumps(metrics, indent=2))
    else:
        dropped = f" ({info.dense_layers} leading all-zero layers dropped)" if info.dense_layers else ""
        print(f"wrote {args.out}: {problem.num_layers} MoE layers{dropped}, policy {result.policy}, "
              f"solver {args.solver}, stopped {result.termination}, plan {result.status}")
        print(_format_metrics(metrics))
    return 0


# score -----------------------------------------------------------------------------------

def read_any_plan(path: str, info: Any, args: argparse.Namespace, param: str = "plan"):
    """(plan, shape dict or None, document) from an eplb plan file or an engine export
    (SGLang JSON, TensorRT-LLM YAML, CSV). Engine maps with more rows than the loads' MoE
    layers (SGLang's dense rows first, or a whole model) keep their last rows."""
    from .errors import LoadFileError
    from .workloads.exporters import detect_plan_format, read_exported_plan

    if not Path(path).is_file():
        raise LoadFileError(param, f"{path}: no such file")
    fmt = detect_plan_format(path)
    if fmt == "eplb":
        from .planfile import read_plan

        plan, doc = read_plan(path)
        return plan, doc["problem"], doc
    try:
        plan = read_exported_plan(path, fmt, num_experts=info.num_experts)
    except LoadFileError as exc:
        if fmt != "sglang":
            raise
        raise LoadFileError(param, f"{path}: not an eplb-plan file nor an SGLang map ({exc})") from None
    if plan.num_layers > info.num_layers:
        from .plan import Plan

        plan = Plan.from_phy2log(plan.phy2log[-info.num_layers:], info.num_experts)
    shape = None
    if fmt == "csv":
        shape = {"num_gpus": _csv_gpus(path)}
    return plan, shape, {"solver": f"{fmt} export", "policy": "?"}


def _csv_gpus(path: str) -> int:
    import numpy as np

    data = np.atleast_1d(np.genfromtxt(path, delimiter=",", names=True, dtype=np.int64))
    return int(data["gpu"].max()) + 1 if "gpu" in (data.dtype.names or ()) else 0


def cmd_score(args: argparse.Namespace) -> int:
    from .errors import LoadFileError
    from .problem import Problem
    from .scoring import score

    info = read_loads_info(args.loads)
    plan, shape, doc = read_any_plan(args.plan, info, args)
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
            from .workloads.presets import get_preset
            groups = groups or get_preset(args.model).num_groups
        if plan.num_layers != info.num_layers:
            raise LoadFileError("plan", f"{args.plan} has {plan.num_layers} layers, the loads {info.num_layers}")
        problem = Problem(info.weights, plan.num_replicas, groups or 1, args.nodes, gpus)
    previous = read_any_plan(args.previous, info, args, "previous")[0] if args.previous else None
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


# compare ---------------------------------------------------------------------------------

def _split_names(text: str | None, param: str) -> list[str] | None:
    if text is None:
        return None
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise OptionError(param, f"name at least one, got {text!r}")
    return names


def cmd_compare(args: argparse.Namespace) -> int:
    import dataclasses

    from .compare import DEFAULT_SOLVERS, compare_solvers, pick, planned_runs, table_rows
    from .io import read_loads
    from .problem import Problem

    info = read_loads_info(args.loads)
    problem, dense, preset_bytes = problem_from_args(args, info)
    holdout = None
    if args.holdout is not None:
        from .loadfiles import _split_range

        base = _split_range(args.loads)[0]                  # the same loads, another window of steps
        window = _split_range(f"{base}@{args.holdout}")[1]
        if window is None:
            raise OptionError("holdout", f"must be A:B step bounds, got {args.holdout!r}")
        h = read_loads(base, steps=window)
        if (h.num_layers, h.num_experts) != (info.num_layers, info.num_experts):
            raise OptionError("holdout", "the held-out window has another shape than the loads")
        holdout = Problem(h.weights, problem.num_replicas, problem.num_groups, problem.num_nodes, problem.num_gpus)
    previous = read_any_plan(args.previous, info, args, "previous")[0] if args.previous else None
    expert_bytes = args.expert_bytes if args.expert_bytes is not None else preset_bytes
    names = _split_names(args.solvers, "solvers") or list(DEFAULT_SOLVERS)
    policies = _split_names(args.policy, "policy") or ["auto"]
    progress = _progress(len(planned_runs(problem, names, policies)))
    rows = compare_solvers(problem, names, policies=policies, holdout=holdout, previous=previous,
                           expert_bytes=expert_bytes if previous is not None else None,
                           options=_parse_options(args.option), time_limit=args.time_limit, on_progress=progress)
    best, reason = pick(rows)
    plain = table_rows(rows)
    if args.out:
        _write_compare(Path(args.out), plain)
    if args.json:
        print(json.dumps({"rows": plain, "pick": None if best is None else
                          {"solver": best["solver"], "policy": best["policy"]}, "reason": reason}, indent=2,
                         default=str))
        return 0
    print(_compare_table(plain, holdout is not None, previous is not None))
    print()
    print(f"pick: {best['solver']} (policy {best['policy']}): {reason}" if best else f"pick: none: {reason}")
    if args.out:
        print(f"wrote {Path(args.out) / 'compare.csv'} and {Path(args.out) / 'compare.html'}")
    return 0


def _progress(total: int):
    """A bar on a terminal, a line per solver otherwise (both on stderr)."""
    state = {"done": 0}
    tty = sys.stderr.isatty()

    def report(name: str, policy: str, row: dict | None) -> None:
        if row is None:
            if tty:
                print(f"\r[{state['done']}/{total}] running {name} ({policy})...", end="", file=sys.stderr, flush=True)
            return
        state["done"] += 1
        text = f"[{state['done']}/{total}] {name} ({row['policy']}): {row['termination']}, {row['status']} in {row['wall_time_s']:.3g} s"
        print(("\r" + text.ljust(60)) if tty else text, end="\n", file=sys.stderr, flush=True)

    return report


def _fmt(v: Any, pct: bool = False) -> str:
    if v is None:
        return "-"
    if pct:
        return f"{100 * v:.3f}%"
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _compare_table(rows: list[dict], holdout: bool, moves: bool) -> str:
    cols = [("solver", "solver", False), ("policy", "policy", False), ("termination", "termination", False),
            ("status", "status", False), ("wall_time_s", "time s", False), ("imbalance_mean", "imb mean", False),
            ("imbalance_worst", "imb worst", False)]
    if holdout:
        cols += [("holdout_imbalance_mean", "holdout mean", False), ("holdout_imbalance_worst", "holdout worst", False)]
    cols += [("gap_mean", "gap to bound", True), ("gap_in_policy_mean", "gap in policy", True),
             ("off_node_share_mean", "off-node", True), ("duplicates", "dups", False)]
    if moves:
        cols += [("moves", "moves", False), ("moves_bytes", "bytes moved", False)]
    table = [[title for _, title, _ in cols]] + [[_fmt(r.get(k), pct) for k, _, pct in cols] for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(cols))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in table)


def _write_compare(out: Path, rows: list[dict]) -> None:
    import csv
    import io

    from .planfile import write_text_atomic

    if out.exists() and not out.is_dir():
        raise OptionError("out", f"{out}: exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]) if rows else ["solver"])
    writer.writeheader()
    writer.writerows(rows)
    write_text_atomic(out / "compare.csv", buf.getvalue())
    try:
        import plotly.graph_objects as go
        from plotly.subplots import make_subplots
    except ImportError:
        return
    labels = [f"{r['solver']} ({r['policy']})" for r in rows]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("mean imbalance (max / mean GPU load)", "wall time (s)"))
    fig.add_bar(x=labels, y=[r.get("imbalance_mean") for r in rows], name="in sample", row=1, col=1)
    if any(r.get("holdout_imbalance_mean") is not None for r in rows):
        fig.add_bar(x=labels, y=[r.get("holdout_imbalance_mean") for r in rows], name="held out", row=1, col=1)
    fig.add_bar(x=labels, y=[r.get("wall_time_s") for r in rows], name="time", row=1, col=2, showlegend=False)
    fig.update_yaxes(type="log", row=1, col=2)
    fig.update_layout(title="eplb compare", barmode="group", template="plotly_white")
    write_text_atomic(out / "compare.html", fig.to_html(include_plotlyjs=True, full_html=True))


# solvers ---------------------------------------------------------------------------------

def solver_catalogue_markdown() -> str:
    """The registered solvers and their option schemas as Markdown (docs/solvers.md embeds it)."""
    from .registry import get_solver, solver_names

    out = []
    for name in solver_names():
        spec = get_solver(name)
        need = "" if not spec.requires else f" Needs: `{spec.requires}`."
        out += [f"### `{name}` ({spec.kind})", "", spec.description + "." + need, ""]
        if not spec.schema:
            out += ["No options.", ""]
            continue
        out += ["| option | values | default | help |", "|---|---|---|---|"]
        for o in spec.schema:
            default = repr(o.default) if o.type is object else json.dumps(o.default)
            out.append(f"| `{o.name}` | {o.describe().replace('|', '&#124;')} | `{default}` | {o.help} |")
        out.append("")
    return "\n".join(out)


def cmd_solvers(args: argparse.Namespace) -> int:
    from .registry import get_solver, solver_names

    if args.markdown:
        print(solver_catalogue_markdown(), end="")
        return 0
    specs = [get_solver(n) for n in solver_names()]
    if args.json:
        print(json.dumps([{"name": s.name, "kind": s.kind, "available": s.is_available(), "requires": s.requires,
                           "description": s.description, "options": [o.as_dict() for o in s.schema]}
                          for s in specs], indent=2))
        return 0
    for spec in specs:
        avail = "available" if spec.is_available() else f"unavailable ({spec.requires})"
        print(f"{spec.name}  [{spec.kind}, {avail}]\n  {spec.description}")
        if not spec.schema:
            print("  (no options)\n")
            continue
        rows = [(o.name, o.describe(), repr(o.default) if o.type is object else json.dumps(o.default), o.help)
                for o in spec.schema]
        w = [max(len(r[i]) for r in rows + [("option", "values", "default", "")]) for i in range(3)]
        print(f"  {'option':<{w[0]}}  {'values':<{w[1]}}  {'default':<{w[2]}}  help")
        for r in rows:
            print(f"  {r[0]:<{w[0]}}  {r[1]:<{w[1]}}  {r[2]:<{w[2]}}  {r[3]}")
        print()
    return 0


# Packages that add their own sub-commands (each module has add_commands(subparsers)).
PLUGIN_MODULES = ("solvers.workloads.commands", "solvers.bench.commands", "solvers.dynamics.commands",
                  "solvers.dispatch.commands")

SOLVER_OPTIONS_HELP = ("solver options: every solver declares its options (type, default, allowed values); "
                       "`eplb solvers` prints them as a table. Pass them with -O KEY=VALUE.")


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = _Parser(prog="eplb", description="Expert-parallel load balancing workbench.")
    parser.add_argument("--version", action="version", version=f"eplb {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    p = sub.add_parser("plan", help="compute a placement plan and write it as JSON", epilog=SOLVER_OPTIONS_HELP)
    p.add_argument("--loads", required=True, help=LOADS_HELP)
    add_cluster_args(p)
    p.add_argument("--solver", default="deepseek", help="solver name (see `eplb solvers`)")
    p.add_argument("--policy", choices=("auto", "hierarchical", "global"), default=None,
                   help="placement policy, the same for every solver (default auto: hierarchical when groups "
                        "divide by nodes)")
    p.add_argument("--option", "-O", action="append", type=_option, metavar="KEY=VALUE",
                   help="solver option, repeatable (e.g. -O time_limit=10); see `eplb solvers`")
    p.add_argument("--previous", default=None, help="placement in force (eplb, SGLang, TensorRT-LLM or CSV map): "
                                                   "moves and bytes are recorded")
    p.add_argument("--migration-slack", type=float, default=None, metavar="EPS",
                   help="migration-aware: fewest moves from --previous with every layer's max load within "
                        "(1 + EPS) x a fresh plan's (docs/dynamics.md)")
    p.add_argument("--migration", choices=("heuristic", "exact"), default=None,
                   help="migration-aware method: batched repair heuristic (default) or CP-SAT per layer")
    p.add_argument("--migration-budget", type=float, default=None, metavar="F",
                   help="migration-aware: at most F x a fresh plan's moves; the layers saving most get wider "
                        "slacks until it fits (docs/dynamics.md)")
    p.add_argument("--expert-bytes", type=int, default=None, help="bytes per expert for moves (default: the model's)")
    p.add_argument("--out", required=True, help="plan JSON to write")
    p.add_argument("--json", action="store_true", help="print metrics as JSON")
    p.set_defaults(func=cmd_plan)

    s = sub.add_parser("score", help="score a plan on loads with the shared scorer")
    s.add_argument("--loads", required=True, help=LOADS_HELP)
    s.add_argument("--plan", required=True, help="plan: eplb JSON, or an exported SGLang JSON, TensorRT-LLM YAML "
                                                  "or CSV map")
    s.add_argument("--previous", help="previous plan (same formats), to count migration moves")
    s.add_argument("--expert-bytes", type=int, default=None, help="bytes per expert, for moves in bytes")
    s.add_argument("--model", default=None, help="engine maps: model preset for the expert groups")
    s.add_argument("--gpus", type=int, default=None, help="engine maps without GPUs (SGLang, TensorRT-LLM): GPUs P")
    s.add_argument("--nodes", type=int, default=1, help="engine maps: nodes N (default 1)")
    s.add_argument("--groups", type=int, default=None, help="engine maps: expert groups G (default 1)")
    s.add_argument("--per-gpu", action="store_true", help="also print every GPU's load")
    s.add_argument("--json", action="store_true", help="print metrics as JSON")
    s.set_defaults(func=cmd_score)

    c = sub.add_parser("compare", help="run several solvers on your loads and pick one", epilog=SOLVER_OPTIONS_HELP)
    c.add_argument("--loads", required=True, help=LOADS_HELP + " (the in-sample window)")
    add_cluster_args(c)
    c.add_argument("--solvers", default=None, help="comma-separated solver names (default deepseek,kk_swap,joint,best)")
    c.add_argument("--policy", default=None, help="comma-separated policies to run each solver with "
                                                  "(e.g. global,hierarchical; default auto)")
    c.add_argument("--holdout", default=None, metavar="A:B", help="held-out steps A..B-1 of the same loads "
                                                                 "(imbalance out of sample)")
    c.add_argument("--previous", default=None, help="plan in force (eplb, SGLang, TensorRT-LLM or CSV): moves")
    c.add_argument("--expert-bytes", type=int, default=None, help="bytes per expert (default: the model's)")
    c.add_argument("--time-limit", type=float, default=None, help="seconds for each solver with a time limit")
    c.add_argument("--option", "-O", action="append", type=_option, metavar="KEY=VALUE",
                   help="option for every solver that declares it, repeatable")
    c.add_argument("--out", default=None, metavar="DIR", help="write compare.csv and compare.html there")
    c.add_argument("--json", action="store_true", help="print the rows and the pick as JSON")
    c.set_defaults(func=cmd_compare)

    ls = sub.add_parser("solvers", help="list the registered solvers and their option schemas")
    ls.add_argument("--json", action="store_true", help="print the schemas as JSON")
    ls.add_argument("--markdown", action="store_true", help="print the catalogue as Markdown (docs/solvers.md)")
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
    global _ARGV
    _ARGV = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(_ARGV)
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
