"""``eplb compare``: run several solvers on the user's loads and pick one.

Every row is the call ``eplb plan`` builds (:func:`solvers.solver_call.solver_call`): the
command printed under the table (for the pick; ``--verbose``: every row) reproduces it, and
``--out DIR`` writes each row's plan file. A held-out range is never planned on: a planning
window that overlaps it is refused; without one the window is cut before it (said so).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from ..compare import (DEFAULT_MOVE_SLACK, compare_solvers, default_solvers, format_bytes, pick, planned_runs,
                       table_rows)
from ..errors import OptionError
from ..io import read_loads, split_range
from ..planfile import write_plan, write_text_atomic
from ..plugins import resolve_solvers
from ..registry import get_solver
from ..options import option_by_role
from ..solver_call import is_replanner
from ..workloads.cuts import planning_window, step_range
from .plan import plan_file
from .inputs import aligned, previous_plan, problem_from_args, write_csv
from .rolling import compare_windows, refuse_window_flags
from .routing import routing_arg, token_bytes_arg
from .args import flag_option, options_dict

# The table fits this many columns; --wide shows every column whatever its width.
TABLE_WIDTH = 120


def _split_names(text: str | None, param: str) -> list[str] | None:
    if text is None:
        return None
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise OptionError(param, f"name at least one, got {text!r}")
    return names


def read_windows(args: argparse.Namespace):
    """(loads of the planning window, held-out steps [T, layers, experts] or None, the
    planning window's --loads spec, a note or ""): the held-out range never overlaps the
    planning window (:func:`solvers.workloads.cuts.planning_window`), every window is
    within the trace (:func:`solvers.workloads.cuts.step_range`), nothing is clamped."""
    if args.holdout is None:
        return read_loads(args.loads), None, args.loads, ""
    base, asked = split_range(args.loads)
    held = split_range(f"{base}@{args.holdout}")[1]       # the same loads, another window of steps
    if held is None:
        raise OptionError("holdout", f"must be A:B step bounds, got {args.holdout!r}")
    full = read_loads(base)
    if full.matrix:
        raise OptionError("holdout", f"{base}: held-out steps need [steps, layers, experts] loads, got one matrix")
    total = full.num_steps
    h = step_range(held, total, "holdout", f"--holdout {args.holdout}")
    window = None if asked is None else step_range(asked, total, "loads", args.loads)
    (a, b), note = planning_window(total, window, h)
    info = dataclasses.replace(full, trace=full.trace[a:b])
    spec = args.loads if asked is not None else f"{base}@{a}:{b}"
    return info, full.trace[h[0]:h[1]], spec, note


def cmd_compare(args: argparse.Namespace) -> int:
    if args.windows is not None:
        refuse_window_flags(args)
    info, held, plan_spec, note = read_windows(args)
    problem, dense, preset_bytes = problem_from_args(args, info)
    previous, previous_cluster, problem, speed_note = previous_plan(args, info, problem)
    if speed_note and not args.json:
        print(speed_note)
    holdout = holdout_steps = None
    if held is not None:
        w = held.sum(0)
        holdout = problem.with_weights(w if w.is_floating_point() else w.to(problem.weights.dtype))
        holdout_steps = held                                  # scored step by step
    if args.migration_slack is not None and previous is None:
        raise OptionError("migration_slack", "needs --previous (the placement in force)")
    expert_bytes = args.expert_bytes if args.expert_bytes is not None else preset_bytes
    routing = routing_arg(args, problem)
    names = (resolve_solvers(_split_names(args.solvers, "solvers") or ())    # FILE.py:NAME, module:NAME too
             or default_solvers(holdout=holdout is not None, routing=routing is not None,
                                previous=previous is not None))
    options = options_dict(args.option)
    policies = _split_names(args.policy, "policy")
    if "policy" in options:                 # -O policy= is --policy (one rule: args.solver_options)
        given = options.pop("policy")
        if policies not in (None, [given]):
            raise OptionError("policy", f"--policy {args.policy} contradicts -O policy={given}")
        policies = [given]
    policies = policies or ["auto"]
    flag_option(options, "traffic_weight", args.traffic_weight, "--traffic-weight", solvers=names,
                declared=any("traffic_weight" in get_solver(n).options for n in names), owner="traffic_aware")
    if args.windows is not None:            # the ADRS / OpenEvolve benchmark's protocol (solvers.rolling)
        return compare_windows(args, info, problem, names if args.solvers else default_solvers(holdout=True),
                               options, policies)
    if note and not args.json:
        print(note)
    progress = _progress(len(planned_runs(problem, names, policies)))
    rows = compare_solvers(problem, names, policies=policies, holdout=holdout, previous=previous,
                           previous_cluster=previous_cluster, slack=args.migration_slack,
                           expert_bytes=expert_bytes if previous is not None else None,
                           options=options, time_limit=args.time_limit, on_progress=progress,
                           history=None if info.matrix else info.trace, holdout_steps=holdout_steps,
                           routing=routing, token_bytes=None if routing is None else token_bytes_arg(args, routing))
    slack = DEFAULT_MOVE_SLACK if args.migration_slack is None else args.migration_slack
    best, reason = pick(rows, slack=slack)
    out = Path(args.out) if args.out else None
    for r in rows:
        if r.get("_result") is not None and r["_result"].plan is not None:
            r["plan_command"] = plan_command(args, r, plan_spec, options, _plan_path(out, r))
    plain = table_rows(rows)
    for p, r in zip(plain, rows):
        p["plan_command"] = r.get("plan_command")
    written = _write_compare(out, plain) if out else []
    if out:
        written += _write_plans(out, rows, problem, info, dense, args, plan_spec, expert_bytes)
    if args.json:
        print(json.dumps({"rows": plain, "pick": None if best is None else
                          {"solver": best["solver"], "policy": best["policy"],
                           "plan_command": best.get("plan_command")},
                          "reason": reason, "planning_window": plan_spec, "holdout": args.holdout,
                          "window_note": note or None}, indent=2, default=str))
        return 0
    table, hidden = compare_table(plain, wide=args.wide)
    print(table)
    if hidden:
        print(f"({hidden} more columns with --wide; every column is in --json and compare.csv)")
    print()
    print(f"pick: {best['solver']} (policy {best['policy']}): {reason}" if best else f"pick: none: {reason}")
    commands = [r for r in rows if r.get("plan_command")] if args.verbose else ([best] if best else [])
    for r in commands:
        what = "reproduce the pick" if r is best else f"reproduce {r['solver']} ({r['policy']})"
        print(f"{what}: {r['plan_command']}")
    if written:
        plans = [p for p in written if p.parent.name == "plans"]
        files = [p for p in written if p not in plans]
        print("wrote " + " and ".join(str(p) for p in files)
              + ("" if any(p.name == "compare.html" for p in files) else " (no compare.html: plotly is not installed)")
              + (f" and {len(plans)} plan files in {out / 'plans'}" if plans else ""))
    return 0


def _plan_path(out: Path | None, row: dict) -> str:
    """The plan file of a row: DIR/plans/SOLVER[-POLICY].json with --out, else plan.json."""
    name = row["solver"] + ("" if row["policy"] in (None, "-") else f"-{row['policy']}") + ".json"
    return str(out / "plans" / name) if out is not None else name


def _option_text(key: str, value: Any) -> str:
    # -O parses JSON where the value is JSON (numbers, true, lists), else keeps the text
    return f"{key}={value if isinstance(value, str) else json.dumps(value)}"


def plan_command(args: argparse.Namespace, row: dict, loads: str, options: dict[str, Any], out: str) -> str:
    """The ``eplb plan`` command that makes the plan of ``row``: the same planning window,
    cluster, routing, plan in force, policy and the options the solver takes (what
    :func:`solvers.solver_call.solver_call` gives it from them)."""
    name = row["solver"]
    spec = get_solver(name)
    argv = ["eplb", "plan", "--loads", loads]
    for flag in ("model", "replicas", "groups", "nodes", "gpus", "gpu_speed", "gpu_slots", "failed"):
        value = getattr(args, flag, None)
        if value is not None:
            argv += [f"--{flag.replace('_', '-')}", str(value)]
    argv += ["--solver", name]
    policy = row["_call"].options.get("policy")            # the policy the solver was given (it may report another)
    if policy is not None:
        argv += ["--policy", policy]
    for key, value in options.items():
        if key in spec.options and key not in ("traffic_weight", "policy"):
            argv += ["-O", _option_text(key, value)]
    if "traffic_weight" in options and "traffic_weight" in spec.options:
        argv += ["--traffic-weight", str(options["traffic_weight"])]
    limit = option_by_role(spec.schema, "time_limit")
    if args.time_limit is not None and limit is not None and limit.name not in options:
        argv += ["-O", _option_text(limit.name, args.time_limit)]
    if args.routing is not None:
        argv += ["--routing", args.routing]
    if args.previous is not None:
        argv += ["--previous", args.previous]
        if args.migration_slack is not None and is_replanner(name) and "slack" not in options:
            argv += ["-O", _option_text("slack", args.migration_slack)]
    if args.expert_bytes is not None:
        argv += ["--expert-bytes", str(args.expert_bytes)]
    argv += ["--out", out]
    return " ".join(shlex.quote(a) for a in argv)


def _write_plans(out: Path, rows: list[dict], problem, info, dense: int, args, plan_spec: str,
                 expert_bytes) -> list[Path]:
    """Each row's plan file (what its `eplb plan` command writes) under DIR/plans."""
    written = []
    for r in rows:
        res = r.get("_result")
        if res is None or res.plan is None:
            continue
        metrics = res.summary()
        metrics.update({k: r[k] for k in ("remote_nodes_mean", "remote_nodes_p99", "inter_node_bytes",
                                          "intra_node_bytes") if r.get(k) is not None})
        doc = plan_file(res, problem, info, dense, metrics=metrics, loads=plan_spec, model=args.model,
                        previous=args.previous, routing=args.routing, expert_bytes=expert_bytes,
                        command=r["plan_command"], solver=r["solver"])
        path = Path(_plan_path(out, r))
        path.parent.mkdir(parents=True, exist_ok=True)
        write_plan(path, doc)
        written.append(path)
    return written


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
        took = "" if row["wall_time_s"] is None else f" in {row['wall_time_s']:.3g} s"
        text = f"[{state['done']}/{total}] {name} ({row['policy']}): {row['termination']}, {row['status']}{took}"
        print(("\r" + text.ljust(60)) if tty else text, end="\n", file=sys.stderr, flush=True)

    return report


# The table's columns: (key, header top line, header bottom line, shown by default, drop order
# when the table is too wide: higher goes first). Percent columns: _PERCENT; bytes: _BYTES.
_COLUMNS = (
    ("solver", "", "solver", True, 0),
    ("policy", "", "policy", True, 0),
    ("status", "", "status", True, 0),
    ("holdout_step_imbalance_mean", "held-out", "per step", True, 0),
    ("holdout_step_imbalance_worst", "per step", "worst", True, 3),
    ("holdout_step_time_imbalance_mean", "held-out time", "per step", True, 0),
    ("holdout_step_time_imbalance_worst", "time/step", "worst", True, 3),
    ("imbalance_mean", "in sample", "mean", True, 2),
    ("imbalance_worst", "in sample", "worst", False, 0),
    ("holdout_imbalance_mean", "held-out", "window", False, 0),
    ("holdout_imbalance_worst", "window", "worst", False, 0),
    ("time_imbalance_mean", "time imb", "mean", True, 1),
    ("time_imbalance_worst", "time imb", "worst", False, 0),
    ("holdout_time_imbalance_mean", "held-out", "time window", False, 0),
    ("gap_mean", "gap to", "bound", True, 4),
    ("gap_in_policy_mean", "gap in", "policy", False, 0),
    ("off_node_share_mean", "", "off-node", False, 0),
    ("duplicates", "", "dups", False, 0),
    ("moves", "", "moves", True, 0),
    ("moves_bytes", "", "moved", True, 0),
    ("remote_nodes_mean", "remote", "nodes", True, 5),
    ("remote_nodes_p99", "remote", "p99", False, 0),
    ("inter_node_bytes", "", "inter-node", True, 6),
    ("wall_time_s", "", "time s", True, 7),
)
_PERCENT = ("gap_mean", "gap_in_policy_mean", "off_node_share_mean")
_BYTES = ("moves_bytes", "inter_node_bytes")


def _fmt(v: Any, key: str) -> str:
    if v is None:
        return "-"
    if key in _PERCENT:
        return f"{100 * round(v, 12) + 0.0:.3f}%"          # no float noise (-0.000%, 7.66e-16)
    if key in _BYTES:
        return format_bytes(v)
    if key == "moves":
        return f"{int(v):,}"
    if "imbalance" in key:
        return f"{v:.4f}"                                     # as the pick states them
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _status(r: dict) -> str:
    """The plan's status, and why the solver stopped when it did not complete."""
    return (r.get("status") or "-") if r.get("termination") in (None, "completed") else str(r["termination"])


def compare_table(rows: list[dict], *, wide: bool = False, width: int = TABLE_WIDTH) -> tuple[str, int]:
    """(the table, how many columns were left out): the columns some row has a value in, with
    a two-line header; by default the key ones, dropping the least needed until the table
    fits ``width`` characters (``wide``: every column)."""
    shown = [dict(r, status=_status(r)) for r in rows]
    cols = [c for c in _COLUMNS if any(r.get(c[0]) is not None for r in shown)]
    timed = any(r.get("time_imbalance_mean") is not None for r in shown)
    if not timed:                              # identical GPUs: time and tokens are one figure
        cols = [c for c in cols if "time_imbalance" not in c[0]]
    every = len(cols)
    if not wide:
        cols = [c for c in cols if c[3]]
        if timed:   # the pick goes by time there: the token figures are in --wide
            cols = [c for c in cols if c[0] not in ("holdout_step_imbalance_mean", "holdout_step_imbalance_worst",
                                                    "imbalance_mean")]

    def render(cs) -> str:
        return aligned([[c[1] for c in cs], [c[2] for c in cs]] + [[_fmt(r.get(c[0]), c[0]) for c in cs]
                                                                  for r in shown])
    text = render(cols)
    while not wide and max(map(len, text.splitlines())) > width and any(c[4] for c in cols):
        cols.remove(max(cols, key=lambda c: c[4]))
        text = render(cols)
    return text, every - len(cols)


def _write_compare(out: Path, rows: list[dict]) -> list[Path]:
    """compare.csv, and compare.html when plotly is installed; returns the files written."""
    if out.exists() and not out.is_dir():
        raise OptionError("out", f"{out}: exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "compare.csv", rows, ["solver"])
    try:
        from plotly.subplots import make_subplots
    except ImportError:
        return [out / "compare.csv"]
    labels = [f"{r['solver']} ({r['policy']})" for r in rows]
    # the figure the pick goes by first: the held-out imbalance per step when there is one
    step = any(r.get("holdout_step_imbalance_mean") is not None for r in rows)
    held_key, held_name = (("holdout_step_imbalance_mean", "held out, per step") if step else
                           ("holdout_imbalance_mean", "held out (window sum)"))
    fig = make_subplots(rows=1, cols=2, subplot_titles=("mean imbalance (max / mean GPU load; 1 is perfect)",
                                                        "wall time (s)"))
    series = [("in sample", [r.get("imbalance_mean") for r in rows])]
    if any(r.get(held_key) is not None for r in rows):
        series.append((held_name, [r.get(held_key) for r in rows]))
    for name, ys in series:
        fig.add_bar(x=labels, y=ys, name=name, row=1, col=1,
                    text=[None if y is None else f"{y:.4f}" for y in ys], textposition="outside")
    # the axis starts near the lowest bar, not at 0: imbalances of 1.143 and 1.152 must look different
    values = [y for _, ys in series for y in ys if y is not None]
    if values:
        lo, hi = min(values), max(values)
        pad = max(hi - lo, 1e-3 * hi) * 0.15
        fig.update_yaxes(range=[max(0.0, lo - pad), hi + pad], row=1, col=1)
    fig.add_bar(x=labels, y=[r.get("wall_time_s") for r in rows], name="time", row=1, col=2, showlegend=False)
    fig.update_yaxes(type="log", row=1, col=2)
    fig.update_layout(title="eplb compare", barmode="group", template="plotly_white")
    write_text_atomic(out / "compare.html", fig.to_html(include_plotlyjs=True, full_html=True))
    return [out / "compare.csv", out / "compare.html"]
