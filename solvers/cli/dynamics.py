"""``eplb simulate`` and ``eplb sweep``: replay a load trace under rebalancing policies.

    eplb simulate --loads TRACE (--model NAME | --replicas R --groups G --nodes N --gpus P)
                  [--gpu-speed LIST] [--gpu-slots LIST] [--failed IDS] [--solver S] (--every N | --threshold X)
                  [--window W] [--migration-slack EPS]
                  [--migration heuristic|exact] [--migration-budget F] [--expert-bytes B] [-O KEY=VALUE]
                  [--json] [--out DIR]
    (the replay flags come from the settings' schema, solvers.dynamics.SETTINGS)
    eplb sweep    --loads TRACE (--model NAME | ...) [--periods 10,25,50] [--thresholds 1.2,1.3]
                  [--slacks plain,0,0.01,0.03] [--budget-gb X] [--json] [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from ..dynamics import Settings, simulate
from ..dynamics.sweep import best_net, frontier, frontier_table, suggest, sweep
from ..errors import OptionError
from ..progress import progress_mode
from ..safewrite import write_atomic, write_text_atomic
from .args import cluster_of, solver_options
from ..plugins import resolve_solvers
from .inputs import dropped_note, read_trace_arg, write_csv
from .parser import REPLAY_FLAGS, SIMULATE_FLAGS

REPLAYS = "the simulator replays steps"
# sweep: a period longer than any trace the generators make, and a budget beyond any transfer
# (1e9 GB) are typos; within them every derived figure is finite.
MAX_SWEEP_PERIOD = 1 << 24
MAX_BUDGET_GB = 1e9


def _replay_inputs(args: argparse.Namespace, names: tuple[str, ...]):
    """(loads info, trace, simulate's cluster keywords, checked Settings) of simulate and sweep.
    The settings are the flags ``names`` that were given (an unset one takes the schema's
    default), the model's expert bytes unless --expert-bytes, and the planner's options. With
    --model, unset sizes come from the model's cluster preset (one spare slot per GPU)."""
    info, loads = read_trace_arg(args.loads, REPLAYS)
    c = cluster_of(args, loads.shape[2])
    values = {n: getattr(args, n) for n in names if getattr(args, n) is not None and getattr(args, n) is not False}
    if values.get("expert_bytes") is None:
        values["expert_bytes"] = c.expert_bytes
    if "async_interference" in values and values.get("stall") != "async":
        raise OptionError("async_interference", "applies to background copies: give --stall async")
    if values.get("solver"):
        values["solver"] = resolve_solvers([values["solver"]], "solver")[0]     # FILE.py:NAME, module:NAME too
    settings = Settings.parse({**values, "solver_options": solver_options(args)})
    return info, loads, {"cluster": c.cluster, "num_groups": c.num_groups}, settings


def simulation_figure(result):
    """plotly figure: realised imbalance per step with rebalance points, cumulative GB moved."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    rows = result.step_rows()
    steps = [r["step"] for r in rows]
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("realised imbalance (mean over layers)", "cumulative moved"))
    fig.add_trace(go.Scatter(x=steps, y=[r["imbalance"] for r in rows], mode="lines", name="imbalance"), 1, 1)
    reb = [r for r in rows if r["rebalanced"]]
    fig.add_trace(go.Scatter(x=[r["step"] for r in reb], y=[r["imbalance"] for r in reb], mode="markers",
                             marker={"symbol": "triangle-up", "size": 9}, name="rebalance"), 1, 1)
    has_bytes = result.settings.get("expert_bytes") is not None
    cum = [r["cumulative_bytes"] / 1e9 if has_bytes else r["cumulative_moves"] for r in rows]
    fig.add_trace(go.Scatter(x=steps, y=cum, mode="lines", line={"shape": "hv"},
                             name="GB moved" if has_bytes else "replicas moved"), 2, 1)
    fig.update_yaxes(title_text="max / mean", row=1, col=1)
    fig.update_yaxes(title_text="GB" if has_bytes else "replicas", row=2, col=1)
    fig.update_xaxes(title_text="step", row=2, col=1)
    fig.update_layout(template="plotly_white", height=600)
    return fig


def sweep_figure(rows: list[dict[str, Any]]):
    """plotly figure: every setting's bytes moved (replicas without an expert size) against its
    realised mean imbalance, the frontier joined, each point labelled with its setting."""
    import plotly.graph_objects as go

    has_bytes = all(r["total_bytes"] is not None for r in rows)
    cost = (lambda r: r["total_bytes"] / 1e9) if has_bytes else (lambda r: r["total_moves"])  # noqa: E731
    label = lambda r: f"{r['trigger']}, {'plain' if r['migration_slack'] is None else 'slack %g' % r['migration_slack']}"  # noqa: E731
    front = frontier(rows)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=[cost(r) for r in rows], y=[r["mean_imbalance"] for r in rows], mode="markers",
                             name="setting", text=[label(r) for r in rows],
                             hovertemplate="%{text}<br>%{x:.4g} moved, imbalance %{y:.4f}<extra></extra>"))
    fig.add_trace(go.Scatter(x=[cost(r) for r in front], y=[r["mean_imbalance"] for r in front],
                             mode="lines+markers+text", name="frontier", text=[label(r) for r in front],
                             textposition="top right", line={"shape": "hv"}))
    fig.update_layout(template="plotly_white", height=520,
                      title="rebalancing settings: moved against realised imbalance (lower left is better)",
                      xaxis_title="GB moved" if has_bytes else "replicas moved",
                      yaxis_title="realised mean imbalance (max / mean)")
    return fig


def write_sweep(out: Path, rows: list[dict[str, Any]]) -> list[Path]:
    """sweep.csv and sweep.html (the frontier figure, when plotly is installed) in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "sweep.csv", rows)
    try:
        fig = sweep_figure(rows)
    except ImportError:                      # plotly is an optional extra (bench)
        return [out / "sweep.csv"]
    write_atomic(out / "sweep.html", lambda tmp: fig.write_html(tmp, include_plotlyjs=True))
    return [out / "sweep.csv", out / "sweep.html"]


def write_outputs(out: Path, result) -> list[Path]:
    """steps.csv, rebalances.csv, totals.json and simulation.html (the figure) in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "steps.csv", out / "rebalances.csv", out / "totals.json"]
    write_csv(written[0], result.step_rows())
    write_csv(written[1], result.rebalances)
    write_text_atomic(written[2], json.dumps({"settings": result.settings, "totals": result.totals()}, indent=2))
    try:
        fig = simulation_figure(result)
    except ImportError:                      # plotly is an optional extra (bench)
        return written
    write_atomic(out / "simulation.html", lambda tmp: fig.write_html(tmp, include_plotlyjs=True))   # self-contained: opens offline
    return written + [out / "simulation.html"]


def cmd_simulate(args: argparse.Namespace) -> int:
    if args.every is None and args.threshold is None:
        raise OptionError("every", "give --every N (rebalance period) or --threshold X (or both)")
    info, loads, shape, s = _replay_inputs(args, REPLAY_FLAGS + SIMULATE_FLAGS)
    res = simulate(loads, s, progress=progress_mode(args.progress), **shape)
    totals = res.totals()
    if args.out:
        for path in write_outputs(Path(args.out), res):
            if not args.json:
                print(f"wrote {path}")
    if args.json:
        keys = ("mean_imbalance", "p99_imbalance", "total_moves", "total_bytes", "rebalances")
        print(json.dumps({**{k: totals[k] for k in keys}, **{k: v for k, v in totals.items() if k not in keys}},
                         indent=2))
        return 0
    makespan = s.migration_objective == "makespan"
    gb = "-" if totals["total_bytes"] is None else f"{totals['total_bytes'] / 1e9:.1f} GB"
    print(f"{loads.shape[0]} steps x {loads.shape[1]} layers{dropped_note(info)}, solver {s.solver}, "
          f"{'every ' + str(s.every) if s.every else ''}"
          f"{' threshold ' + str(s.threshold) if s.threshold else ''}, window {res.settings['window']}, "
          f"{'plain re-planning' if s.migration_slack is None else 'migration slack ' + str(s.migration_slack)}"
          f"{'' if s.migration_budget is None else ', move budget ' + str(s.migration_budget)}"
          f"{', minimising the transfer makespan' if s.migration_slack is not None and makespan else ''}"
          f"{', stall-aware' if s.stall_aware else ''}")
    print(f"realised imbalance: mean {totals['mean_imbalance']:.4f}, p99 {totals['p99_imbalance']:.4f}; "
          f"{totals['rebalances']} rebalances, {totals['total_moves']} replicas moved ({gb}); "
          f"tokens lost to imbalance {totals['tokens_lost']:.4g}; {totals['wall_seconds']:.2f} s")
    if totals["stall_seconds"] is not None:
        skipped = (f"; {totals['skipped_rebalances']} rebalances declined (gain below stall)"
                   if s.stall_aware else "")
        if s.stall == "async":
            skipped += (f"; background copies cost {totals['interference_seconds']:.4g} s of serving "
                        f"(interference {res.settings['async_interference']:g})")
        print(f"time ({s.stall} copies, {s.step_seconds:g} s per balanced step, "
              f"{shape['cluster'].network.describe()}, {s.transfer_model} transfers): stalls "
              f"{totals['stall_seconds']:.4g} s, serving "
              f"{totals['serving_seconds']:.4g} s, load lost to stalls {totals['tokens_lost_stall']:.4g}; net "
              f"efficiency {totals['net_efficiency']:.4f} of the balanced stall-free ideal{skipped}")
    return 0


def _floats(text: str | None, name: str, allow_plain: bool = False) -> list[Any]:
    if not text:
        return []
    out: list[Any] = []
    for part in text.split(","):
        part = part.strip()
        if allow_plain and part.lower() in ("plain", "none"):
            out.append(None)
            continue
        try:
            value = float(part)
        except ValueError:
            raise OptionError(name, f"must be comma-separated numbers, got {part[:40]!r}") from None
        if not math.isfinite(value):
            raise OptionError(name, f"must be finite numbers, got {part!r}")
        out.append(value)
    return out


def cmd_sweep(args: argparse.Namespace) -> int:
    _, loads, shape, base = _replay_inputs(args, REPLAY_FLAGS)
    nbytes = base.expert_bytes
    periods = _floats(args.periods, "periods")
    if any(not p.is_integer() or not 1 <= p <= MAX_SWEEP_PERIOD for p in periods):
        raise OptionError("periods", f"must be whole numbers of steps in [1, {MAX_SWEEP_PERIOD}], "
                                     f"got {args.periods[:80]!r}")
    periods = [int(p) for p in periods]
    if args.budget_gb is not None and not 0 <= args.budget_gb <= MAX_BUDGET_GB:
        raise OptionError("budget_gb", f"must be in [0, {MAX_BUDGET_GB:g}] GB, got {args.budget_gb!r}")
    rows = sweep(loads, base, periods=periods, thresholds=_floats(args.thresholds, "thresholds"),
                 slacks=_floats(args.slacks, "slacks", allow_plain=True) or [None],
                 stall_aware=bool(nbytes) and not args.no_stall_aware and bool(periods),
                 progress=progress_mode(args.progress), **shape)
    pick = None
    if args.budget_gb is not None:
        budget = args.budget_gb * 1e9 if nbytes is not None else args.budget_gb
        pick = suggest(rows, budget)
    written = write_sweep(Path(args.out), rows) if args.out else []
    if args.json:
        print(json.dumps({"rows": rows, "frontier": frontier(rows), "suggested": pick, "best_net": best_net(rows)},
                         indent=2))
        return 0
    print(frontier_table(rows))
    for path in written:
        print(f"wrote {path}")
    top = best_net(rows)
    if top is not None:
        print(f"highest net throughput with {shape['cluster'].network.describe()} and {base.step_seconds:g} s steps: "
              f"{top['trigger']}, {_slack(top)} (net efficiency {top['net_efficiency']:.4f}, stalls "
              f"{top['stall_seconds']:.3g} s)")
    if args.budget_gb is not None:
        if pick is None:
            print(f"no setting moves at most {args.budget_gb:g} {'GB' if nbytes else 'replicas'}")
        else:
            print(f"suggested within {args.budget_gb:g} {'GB' if nbytes else 'replicas'}: {pick['trigger']}, "
                  f"{_slack(pick)} (mean imbalance {pick['mean_imbalance']:.4f})")
    return 0


def _slack(row: dict[str, Any]) -> str:
    return "plain re-planning" if row["migration_slack"] is None else f"--migration-slack {row['migration_slack']:g}"
