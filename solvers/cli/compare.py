"""``eplb compare``: run several solvers on the user's loads and pick one."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ..compare import compare_solvers, default_solvers, pick, planned_runs, table_rows
from ..errors import OptionError
from ..io import read_loads, split_range
from ..planfile import write_text_atomic
from ..plugins import resolve_solvers
from ..registry import get_solver
from .inputs import aligned, problem_from_args, read_any_plan, write_csv
from .rolling import compare_windows
from .routing import routing_arg, token_bytes_arg
from .args import flag_option, options_dict


def _split_names(text: str | None, param: str) -> list[str] | None:
    if text is None:
        return None
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise OptionError(param, f"name at least one, got {text!r}")
    return names


def cmd_compare(args: argparse.Namespace) -> int:
    info = read_loads(args.loads)
    problem, dense, preset_bytes = problem_from_args(args, info)
    holdout = holdout_steps = None
    if args.holdout is not None:
        base = split_range(args.loads)[0]
        window = split_range(f"{base}@{args.holdout}")[1]      # the same loads, another window of steps
        if window is None:
            raise OptionError("holdout", f"must be A:B step bounds, got {args.holdout!r}")
        h = read_loads(base, steps=window)
        if (h.num_layers, h.num_experts) != (info.num_layers, info.num_experts):
            raise OptionError("holdout", "the held-out window has another shape than the loads")
        holdout = problem.with_weights(h.weights)
        holdout_steps = None if h.matrix else h.trace          # scored step by step
    previous = read_any_plan(args.previous, info, "previous")[0] if args.previous else None
    expert_bytes = args.expert_bytes if args.expert_bytes is not None else preset_bytes
    routing = routing_arg(args, problem)
    names = (resolve_solvers(_split_names(args.solvers, "solvers") or ())    # FILE.py:NAME, module:NAME too
             or default_solvers(holdout=holdout is not None, routing=routing is not None))
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
    progress = _progress(len(planned_runs(problem, names, policies)))
    rows = compare_solvers(problem, names, policies=policies, holdout=holdout, previous=previous,
                           expert_bytes=expert_bytes if previous is not None else None,
                           options=options, time_limit=args.time_limit, on_progress=progress,
                           history=None if info.matrix else info.trace, holdout_steps=holdout_steps,
                           routing=routing, token_bytes=None if routing is None else token_bytes_arg(args, routing))
    best, reason = pick(rows)
    plain = table_rows(rows)
    written = _write_compare(Path(args.out), plain) if args.out else []
    if args.json:
        print(json.dumps({"rows": plain, "pick": None if best is None else
                          {"solver": best["solver"], "policy": best["policy"]}, "reason": reason}, indent=2,
                         default=str))
        return 0
    print(_compare_table(plain, holdout is not None, previous is not None, holdout_steps is not None,
                         routing is not None))
    print()
    print(f"pick: {best['solver']} (policy {best['policy']}): {reason}" if best else f"pick: none: {reason}")
    if written:
        print("wrote " + " and ".join(str(p) for p in written)
              + ("" if len(written) > 1 else " (no compare.html: plotly is not installed)"))
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
        took = "" if row["wall_time_s"] is None else f" in {row['wall_time_s']:.3g} s"
        text = f"[{state['done']}/{total}] {name} ({row['policy']}): {row['termination']}, {row['status']}{took}"
        print(("\r" + text.ljust(60)) if tty else text, end="\n", file=sys.stderr, flush=True)

    return report


# Columns shown as percentages.
_PERCENT = ("gap_mean", "gap_in_policy_mean", "off_node_share_mean")


def _fmt(v: Any, pct: bool = False) -> str:
    if v is None:
        return "-"
    if pct:
        return f"{100 * v:.3f}%"
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _compare_table(rows: list[dict], holdout: bool, moves: bool, per_step: bool = False,
                   traffic: bool = False) -> str:
    cols = [("solver", "solver"), ("policy", "policy")]
    if per_step and any(r.get("holdout_step_time_imbalance_mean") is not None for r in rows):
        # GPUs of different speeds: what a served plan meets is each step's max time
        cols += [("holdout_step_time_imbalance_mean", "held-out time per step"),
                 ("holdout_step_time_imbalance_worst", "time per step worst")]
    if per_step:          # what a served plan meets: first
        cols += [("holdout_step_imbalance_mean", "held-out per step"),
                 ("holdout_step_imbalance_worst", "per step worst")]
    cols += [("termination", "termination"), ("status", "status"), ("wall_time_s", "time s"),
             ("imbalance_mean", "imb mean"), ("imbalance_worst", "imb worst")]
    if holdout:
        cols += [("holdout_imbalance_mean", "holdout mean"), ("holdout_imbalance_worst", "holdout worst")]
    if any(r.get("time_imbalance_mean") is not None for r in rows):      # GPUs of different speeds
        cols += [("time_imbalance_mean", "time imb mean"), ("time_imbalance_worst", "time imb worst")]
        if holdout:
            cols += [("holdout_time_imbalance_mean", "holdout time mean")]
    cols += [("gap_mean", "gap to bound"), ("gap_in_policy_mean", "gap in policy"),
             ("off_node_share_mean", "off-node"), ("duplicates", "dups")]
    if moves:
        cols += [("moves", "moves"), ("moves_bytes", "bytes moved")]
    if traffic:
        cols += [("remote_nodes_mean", "remote nodes/token"), ("remote_nodes_p99", "p99"),
                 ("inter_node_bytes", "inter-node bytes")]
    return aligned([[title for _, title in cols]] + [[_fmt(r.get(k), k in _PERCENT) for k, _ in cols] for r in rows])


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
    fig = make_subplots(rows=1, cols=2, subplot_titles=("mean imbalance (max / mean GPU load)", "wall time (s)"))
    fig.add_bar(x=labels, y=[r.get("imbalance_mean") for r in rows], name="in sample", row=1, col=1)
    if any(r.get("holdout_imbalance_mean") is not None for r in rows):
        fig.add_bar(x=labels, y=[r.get("holdout_imbalance_mean") for r in rows], name="held out", row=1, col=1)
    fig.add_bar(x=labels, y=[r.get("wall_time_s") for r in rows], name="time", row=1, col=2, showlegend=False)
    fig.update_yaxes(type="log", row=1, col=2)
    fig.update_layout(title="eplb compare", barmode="group", template="plotly_white")
    write_text_atomic(out / "compare.html", fig.to_html(include_plotlyjs=True, full_html=True))
    return [out / "compare.csv", out / "compare.html"]
