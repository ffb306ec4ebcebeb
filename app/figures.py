"""Plotly figures of the app, built by pure functions from scores, plans and tables.

No Streamlit here: tests build every figure directly and compare its data with the
shared scorer. Shapes: L layers, E experts, R slots, P GPUs, N nodes, S = R / P.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import torch

import solvers.builtin  # noqa: F401  solver colours index the whole registry:
import solvers.dynamics  # noqa: F401  the time-robust planners register here
from solvers.plan import replica_ranks
from solvers.registry import solver_names
from solvers.scoring import per_slot_loads

TEMPLATE = "plotly_white"
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf")


def _np(x: torch.Tensor | np.ndarray | Sequence[float]) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def _node_boundaries(fig: go.Figure, num_gpus: int, num_nodes: int, *, labels: bool = True,
                     row: int | None = None, col: int | None = None) -> None:
    """Dotted lines between nodes (x axis = GPU index) and a label per node on top."""
    per_node = num_gpus // num_nodes
    kw = {} if row is None else {"row": row, "col": col}
    for n in range(1, num_nodes):
        fig.add_vline(x=n * per_node - 0.5, line={"color": "#444", "width": 1, "dash": "dot"}, **kw)
    if labels and 1 < num_nodes <= 24:
        for n in range(num_nodes):
            fig.add_annotation(x=n * per_node + (per_node - 1) / 2, y=1.0, yref="paper", yanchor="bottom",
                               text=f"node {n}", showarrow=False, font={"size": 10, "color": "#444"})


BELOW = {"orientation": "h", "y": -0.2, "yanchor": "top", "x": 0}      # a legend under the plot


def _layout(fig: go.Figure, xaxis: str | dict, yaxis: str | dict, height: int, title: str = "", top: int = 30,
            **layout) -> go.Figure:
    """The app's layout of ``fig``: its template, axes (a title, or the axis dict; {}: left as is),
    ``top`` px above the plot (20 more with a title), the legend under the plot unless ``legend``
    says otherwise ({}: plotly's own place)."""
    fig.update_layout(template=TEMPLATE, title=title or None, height=height, margin={"t": top + 20 if title else top,
                      "b": 40}, xaxis={"title": xaxis} if isinstance(xaxis, str) else xaxis,
                      yaxis={"title": yaxis} if isinstance(yaxis, str) else yaxis, **{"legend": BELOW, **layout})
    return fig


def _gpu_axis(P: int) -> dict:
    """The x axis of a bar per GPU: every GPU labelled up to 48."""
    return {"title": "GPU", "tickmode": "linear" if P <= 48 else "auto", "range": [-0.6, P - 0.4]}


def _mean_line(fig: go.Figure, y: float, text: str) -> None:
    """A dashed black reference line across the plot at ``y``, labelled top left."""
    fig.add_hline(y=y, line={"color": "black", "dash": "dash", "width": 1.5}, annotation_text=text,
                  annotation_position="top left", annotation={"bgcolor": "rgba(255,255,255,0.85)"})


def color_for(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


# Thirty distinct colours: one per registered solver (21 today), none shared.
SOLVER_PALETTE = PALETTE + ("#393b79", "#e7969c", "#637939", "#ad494a", "#3182bd", "#fd8d3c", "#31a354",
                            "#756bb1", "#636363", "#843c39", "#6baed6", "#fdae6b", "#74c476", "#9e9ac8",
                            "#bcbddc", "#e6550d", "#a1d99b", "#de9ed6", "#7b4173", "#8c6d31")
# Metric kinds of the gap chart (not solvers: solver colours mean a solver everywhere).
KIND_COLORS = {"in sample": "#3b4a6b", "held out": "#c98b2b"}
# Replica counts of the per-GPU bars: 1, 2, 3, 4 and more.
COUNT_COLORS = ("#9ecae1", "#4292c6", "#f28e2b", "#d62728", "#7b1fa2")


def solver_color(name: str) -> str:
    """The colour of a solver on every page and chart: fixed by its place among the
    registered solvers (a name not registered gets one from its text)."""
    names = solver_names()
    base = name.split(" (")[0]
    k = names.index(base) if base in names else sum(map(ord, base))
    return SOLVER_PALETTE[k % len(SOLVER_PALETTE)]


def solver_dash(name: str) -> str:
    """Line dash of a "solver (policy)" series: the same solver's global runs dotted."""
    return "dot" if name.endswith("(global)") else "solid"


def count_color(count: int) -> str:
    """Colour of a replica of an expert with ``count`` replicas (COUNT_COLORS)."""
    return COUNT_COLORS[min(max(count, 1), len(COUNT_COLORS)) - 1]


# ---------------------------------------------------------------------------------------
# Explore: one plan

def replica_loads(weights: torch.Tensor, phy2log: torch.Tensor, logcnt: torch.Tensor,
                  num_gpus: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One layer's replicas, GPU by GPU: (tokens [P, S], expert [P, S], replica rank [P, S]).

    weights: [E] loads; phy2log: [R] expert of each slot; logcnt: [E] replica counts. Each
    replica carries w_e / c_e (the even split of the shared scorer)."""
    p2l = phy2log.detach().cpu().to(torch.int64)
    w = weights.detach().cpu().to(torch.float64)
    cnt = logcnt.detach().cpu().to(torch.float64)
    per_slot = per_slot_loads(w, p2l, cnt)                                # [R]
    rank = replica_ranks(p2l.unsqueeze(0), w.shape[0])[0][0]              # [R]
    shape = (num_gpus, p2l.shape[0] // num_gpus)
    return per_slot.view(shape).numpy(), p2l.view(shape).numpy(), rank.view(shape).numpy()


def gpu_load_figure(weights: torch.Tensor, phy2log: torch.Tensor, logcnt: torch.Tensor, num_gpus: int,
                    num_nodes: int, title: str = "", node_load: torch.Tensor | None = None) -> go.Figure:
    """Stacked bar of one layer's per-GPU load: one segment per replica, coloured by its
    expert's replica count (1, 2, 3, 4, 5+; a legend says which; hover: expert, replica,
    tokens), the mean GPU load as a line, node boundaries dotted;
    with ``node_load`` ([N], N > 1) a panel on the right with the load per node.

    weights: [E]; phy2log: [R]; logcnt: [E]. One bar trace holds every segment (x = GPU,
    ``base`` = the load below it on that GPU): the browser draws one trace much faster than
    one per slot, and one figure faster than two. The segments' sum per GPU is the scorer's
    ``gpu_load`` for this layer (the tests read it back)."""
    tokens, expert, rank = replica_loads(weights, phy2log, logcnt, num_gpus)   # [P, S] each
    P, S = tokens.shape
    cnt = _np(logcnt).astype(np.int64)
    below = np.cumsum(tokens, axis=1) - tokens                                # [P, S] load under each segment
    custom = np.stack([expert, rank + 1, cnt[expert], tokens, np.broadcast_to(np.arange(S), (P, S))],
                      axis=-1).reshape(P * S, 5)
    colors = np.asarray(COUNT_COLORS, dtype=object)[np.clip(cnt[expert], 1, len(COUNT_COLORS)) - 1]
    fig = go.Figure(go.Bar(
        x=np.repeat(np.arange(P), S), y=tokens.reshape(-1), base=below.reshape(-1), width=0.88,
        customdata=custom, showlegend=False, name="replicas",
        marker={"color": colors.reshape(-1), "line": {"color": "white", "width": 0.6}},
        hovertemplate="GPU %{x}<br>expert %{customdata[0]:.0f} · replica %{customdata[1]:.0f}"
                      " of %{customdata[2]:.0f}<br>%{customdata[3]:,.1f} tokens<extra>slot %{customdata[4]:.0f}</extra>"))
    panel = node_load is not None and len(node_load) > 1
    # The colour key: empty traces that only carry legend entries, one per replica count present.
    present = sorted(set(np.clip(cnt[expert], 1, len(COUNT_COLORS)).reshape(-1).tolist()))
    for c in present:
        label = "1 replica" if c == 1 else f"{c}+ replicas" if c == len(COUNT_COLORS) else f"{c} replicas"
        fig.add_trace(go.Bar(x=[None], y=[None], name=label,
                             marker={"color": count_color(c)}, showlegend=True, hoverinfo="skip"))
    mean = float(tokens.sum() / P)
    _mean_line(fig, mean, f"mean {mean:,.0f}")
    _node_boundaries(fig, P, num_nodes)
    _layout(fig, _gpu_axis(P), "tokens", 450, title, top=40, barmode="overlay",
            legend={**BELOW, "y": -0.14, "title": {"text": "expert has"}})
    if panel:
        _node_panel(fig, _np(node_load).astype(np.float64))
    return fig


def gpu_time_figure(gpu_load: torch.Tensor | np.ndarray, speed: Sequence[float], slots: Sequence[int],
                    num_nodes: int, title: str = "") -> go.Figure:
    """One layer on a real cluster: each GPU's *time* (its load over its relative speed) as
    a bar coloured by speed, failed GPUs (no slot) marked, and the best possible time
    (W / the live GPUs' total speed) dashed. gpu_load: [P] tokens; speed, slots: [P]."""
    load = _np(gpu_load).astype(np.float64)
    sp = np.asarray(speed, dtype=np.float64)
    sl = np.asarray(slots, dtype=np.int64)
    P = len(load)
    live = sl > 0
    time = np.where(live, load / sp, 0.0)
    levels = sorted(set(sp[live].tolist()))
    colors = [color_for(levels.index(x)) if ok else "lightgrey" for x, ok in zip(sp, live)]
    custom = np.stack([load, sp, sl], axis=-1)
    fig = go.Figure(go.Bar(x=np.arange(P), y=time, marker={"color": colors}, customdata=custom, showlegend=False,
                           hovertemplate="GPU %{x}<br>time %{y:,.1f}<br>%{customdata[0]:,.1f} tokens · speed "
                                         "%{customdata[1]:g} · %{customdata[2]:.0f} slots<extra></extra>"))
    for k, x in enumerate(levels):           # legend: one entry per speed
        fig.add_trace(go.Bar(x=[None], y=[None], marker={"color": color_for(k)}, name=f"speed {x:g}"))
    if not live.all():
        dead = np.flatnonzero(~live)
        fig.add_trace(go.Scatter(x=dead, y=np.zeros(len(dead)), mode="markers", name="failed",
                                 marker={"symbol": "x", "size": 11, "color": "crimson"}, hoverinfo="skip"))
    ideal = float(load.sum() / sp[live].sum()) if live.any() else 0.0
    _mean_line(fig, ideal, f"best possible {ideal:,.0f}")
    _node_boundaries(fig, P, num_nodes)
    return _layout(fig, _gpu_axis(P), "time (tokens / speed)", 430, title, top=40, barmode="overlay",
                   legend={"orientation": "h", "y": 1.08})


GPU_DOMAIN = 0.75        # share of the width for the per-GPU bars when a node panel is drawn


def _node_panel(fig: go.Figure, load: np.ndarray) -> None:
    """Load per node ([N]) as bars on a second pair of axes at the right (the busiest node
    red, the others grey), mean dashed."""
    mean = float(load.mean())
    fig.add_trace(go.Bar(x=[f"node {n}" for n in range(len(load))], y=load, xaxis="x2", yaxis="y2",
                         marker={"color": ["#d62728" if n == int(load.argmax()) else "#8c9bb5"
                                           for n in range(len(load))]}, showlegend=False,
                         name="nodes", hovertemplate="%{x}: %{y:,.0f} tokens<extra></extra>"))
    fig.add_shape(type="line", xref="x2 domain", x0=0, x1=1, yref="y2", y0=mean, y1=mean,
                  line={"color": "black", "dash": "dash", "width": 1.5})
    # the mean in the axis title, not as a label over the bars (it covered one)
    fig.update_layout(xaxis={"domain": [0, GPU_DOMAIN]},
                      xaxis2={"domain": [GPU_DOMAIN + 0.06, 1.0], "anchor": "y2",
                              "title": f"node (dashed: mean {mean:,.0f})"},
                      yaxis2={"anchor": "x2", "rangemode": "tozero", "side": "right", "title": "tokens per node"})


def load_heatmap(gpu_load: torch.Tensor, num_nodes: int) -> go.Figure:
    """Layers x GPUs heatmap of load / the layer's mean GPU load (1 = even), each layer's
    hottest GPU marked. gpu_load: [L, P]."""
    load = _np(gpu_load).astype(np.float64)
    L, P = load.shape
    mean = load.mean(1, keepdims=True)
    ratio = np.divide(load, mean, out=np.ones_like(load), where=mean > 0)
    hottest = ratio.argmax(1)
    top = float(max(ratio.max(), 1.0 + 1e-6))
    fig = go.Figure(go.Heatmap(
        z=ratio, x=np.arange(P), y=np.arange(L), colorscale="RdBu_r", zmid=1.0, zmin=min(float(ratio.min()), 2 - top),
        zmax=top, colorbar={"title": {"text": "load / mean"}, "thickness": 12},
        hovertemplate="layer %{y} · GPU %{x}<br>load / mean %{z:.3f}<extra></extra>"))
    fig.add_trace(go.Scatter(x=hottest, y=np.arange(L), mode="markers", name="hottest GPU",
                             marker={"symbol": "x-thin", "size": 7, "line": {"width": 1.5, "color": "black"}},
                             customdata=ratio[np.arange(L), hottest],
                             hovertemplate="layer %{y}: hottest GPU %{x} (%{customdata:.3f} x mean)<extra></extra>"))
    _node_boundaries(fig, P, num_nodes)
    return _layout(fig, "GPU", {"title": "layer", "autorange": "reversed"}, max(320, min(900, 40 + 11 * L)),
                   top=40, legend={"orientation": "h", "y": -0.12})


def layer_imbalance_figure(series: Mapping[str, torch.Tensor | np.ndarray], title: str = "",
                           floor: torch.Tensor | np.ndarray | None = None, dashed: Sequence[str] = (),
                           solvers: bool = False) -> go.Figure:
    """Per-layer imbalance (max / mean), one line per named series ([L] each); ``floor``: [L]
    the lower bound / mean, the best any plan can do on that layer. ``dashed``: series drawn
    dashed and first, under the others (node imbalance often equals GPU imbalance: drawn on
    top it hid it). ``solvers``: the series are solvers (their colours, :func:`solver_color`)."""
    fig = go.Figure()
    order = sorted(enumerate(series.items()), key=lambda kv: kv[1][0] not in dashed)
    for k, (name, values) in order:
        v = _np(values).astype(np.float64)
        dash = name in dashed
        fig.add_trace(go.Scatter(x=np.arange(len(v)), y=v, mode="lines+markers", name=name,
                                 line={"color": solver_color(name) if solvers else color_for(k),
                                       "dash": "dash" if dash else (solver_dash(name) if solvers else "solid"),
                                       "width": 3 if dash else 2},
                                 marker={"size": 4},
                                 hovertemplate="layer %{x}: %{y:.4f}<extra>" + name + "</extra>"))
    if floor is not None:
        f = _np(floor).astype(np.float64)
        fig.add_trace(go.Scatter(x=np.arange(len(f)), y=f, mode="lines", name="lower bound (any plan)",
                                 line={"color": "#888", "dash": "dot"},
                                 hovertemplate="layer %{x}: bound %{y:.4f}<extra></extra>"))
    return _layout(fig, "layer", "max / mean", 380, title)


# ---------------------------------------------------------------------------------------
# Compare: several solvers on the same loads

def gap_figure(table: pd.DataFrame) -> go.Figure:
    """Mean and worst-layer gap to the lower bound per solver, in sample and held out.
    table: one row per solver with ``solver``, ``gap_mean``, ``gap_max`` and optionally
    ``holdout_gap_mean``, ``holdout_gap_max`` (fractions)."""
    fig = go.Figure()
    cols = [("gap_mean", "in sample, mean"), ("gap_max", "in sample, worst layer"),
            ("holdout_gap_mean", "held out, mean"), ("holdout_gap_max", "held out, worst layer")]
    for col, label in cols:
        if col in table and table[col].notna().any():
            fig.add_trace(go.Bar(x=table["solver"], y=100 * table[col].astype(float), name=label,
                                 marker={"color": KIND_COLORS[label.split(",")[0]],
                                         "opacity": 1.0 if "mean" in col else 0.5},
                                 hovertemplate="%{x}: %{y:.3f}%<extra>" + label + "</extra>"))
    return _layout(fig, {}, "gap to lower bound (%)", 360, barmode="group",
                   legend={**BELOW, "y": 1.02, "yanchor": "bottom"})


def runtime_figure(table: pd.DataFrame) -> go.Figure:
    """Wall time per solver on a log axis. table: ``solver``, ``wall_time_s``."""
    t = table["wall_time_s"].astype(float).clip(lower=1e-4)
    fig = go.Figure(go.Bar(x=table["solver"], y=t, marker={"color": [solver_color(n) for n in table["solver"]]},
                           text=[f"{v:.3g} s" for v in t], textposition="outside",
                           hovertemplate="%{x}: %{y:.4g} s<extra></extra>"))
    return _layout(fig, {}, {"title": "wall time (s, log)", "type": "log", "dtick": 1}, 360, legend={})


def gpu_loads_side_by_side(loads: Mapping[str, torch.Tensor | np.ndarray], num_nodes: int,
                           title: str = "") -> go.Figure:
    """One layer's per-GPU loads of several plans: a line with markers per plan, in the
    solvers' colours (grouped bars of 5 solvers x 32 GPUs could not be read). loads: name -> [P]."""
    fig = go.Figure()
    P = 0
    for k, (name, values) in enumerate(loads.items()):
        v = _np(values).astype(np.float64)
        P = len(v)
        fig.add_trace(go.Scatter(x=np.arange(P), y=v, name=name, mode="lines+markers",
                                 line={"color": solver_color(name), "width": 1.5, "dash": solver_dash(name)},
                                 marker={"size": 6},
                                 hovertemplate="GPU %{x}: %{y:,.1f} tokens<extra>" + name + "</extra>"))
    if P:
        mean = float(np.mean(_np(next(iter(loads.values())))))
        _mean_line(fig, mean, f"mean {mean:,.0f}")
        _node_boundaries(fig, P, num_nodes)
    return _layout(fig, "GPU", "tokens", 420, title, top=40, legend={**BELOW, "y": -0.18})


# ---------------------------------------------------------------------------------------
# Benchmark results

def profile_figure(profile: Mapping[str, tuple[np.ndarray, np.ndarray]], metric_label: str,
                   log_x: bool = False) -> go.Figure:
    """A Dolan-More performance profile: solver -> (sorted ratios [n], fraction [n])
    (from :func:`solvers.bench.analysis.performance_profile`); a step line per solver."""
    fig = go.Figure()
    finite = [r[np.isfinite(r)] for r, _ in profile.values()]
    top = max([float(f.max()) for f in finite if f.size] + [1.0 + 1e-3]) * 1.05
    for k, (solver, (ratios, frac)) in enumerate(sorted(profile.items())):
        x = np.concatenate([[1.0], np.minimum(ratios, top), [top]])
        y = np.concatenate([[0.0], np.where(np.isfinite(ratios), frac, np.nan), [np.nan]])
        y = pd.Series(y).ffill().fillna(0.0).to_numpy()
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines", line_shape="hv", name=solver,
                                 line={"color": solver_color(solver), "width": 2},
                                 hovertemplate="tau %{x:.4g}: %{y:.0%}<extra>" + solver + "</extra>"))
    _layout(fig, {"title": f"tau ({metric_label} / best)", "type": "log" if log_x else "linear"},
            {"title": "share of problems within tau of the best", "range": [0, 1.02]}, 380, legend={})
    return fig


def gap_time_scatter(rows: pd.DataFrame, title: str = "") -> go.Figure:
    """Gap to bound against wall time, one point per run, coloured by solver.
    rows: ``solver``, ``wall_time_s``, ``gap_mean`` (fraction), ``instance``, ``seed``."""
    fig = go.Figure()
    for k, (solver, g) in enumerate(sorted(rows.groupby("solver"), key=lambda kv: kv[0])):
        fig.add_trace(go.Scatter(
            x=g["wall_time_s"].astype(float).clip(lower=1e-4), y=100 * g["gap_mean"].astype(float),
            mode="markers", name=solver, marker={"color": solver_color(solver), "size": 9, "opacity": 0.8},
            customdata=np.stack([g["instance"].astype(str), g["seed"].astype(str)], axis=1),
            hovertemplate="%{customdata[0]} seed %{customdata[1]}<br>%{x:.3g} s · gap %{y:.3f}%<extra>"
                          + solver + "</extra>"))
    return _layout(fig, {"title": "wall time (s, log)", "type": "log"}, "gap to bound, mean over layers (%)", 400,
                   title, legend={})


# ---------------------------------------------------------------------------------------
# Over time: rebalancing replays

def realised_imbalance_figure(runs: Mapping[str, tuple[np.ndarray, np.ndarray, Sequence[int]]]) -> go.Figure:
    """Realised imbalance per step for several settings: name -> (steps [n], imbalance [n],
    steps where a new plan took effect); rebalances are marked on each line."""
    fig = go.Figure()
    for k, (name, (steps, imb, rebal)) in enumerate(runs.items()):
        steps, imb = _np(steps), _np(imb).astype(np.float64)
        fig.add_trace(go.Scatter(x=steps, y=imb, mode="lines", name=name, line={"color": color_for(k), "width": 1.5},
                                 legendgroup=name, hovertemplate="step %{x}: %{y:.4f}<extra>" + name + "</extra>"))
        at = np.asarray([s for s in rebal if steps.size and steps[0] <= s <= steps[-1]], dtype=np.int64)
        if at.size:
            fig.add_trace(go.Scatter(x=at, y=imb[at - int(steps[0])], mode="markers", name=f"{name}: rebalance",
                                     legendgroup=name, showlegend=False,
                                     marker={"color": color_for(k), "symbol": "triangle-up", "size": 8},
                                     hovertemplate="rebalance at step %{x}<extra>" + name + "</extra>"))
    return _layout(fig, "step", "realised imbalance (max / mean)", 380)


def net_efficiency_figure(runs: Mapping[str, tuple[np.ndarray, np.ndarray, np.ndarray]]) -> go.Figure:
    """The net line: cumulative net efficiency per setting (balanced stall-free time over
    serving plus stall time so far), with every rebalance's stall as a marker sized by its
    seconds. runs: name -> (steps [n], cumulative efficiency [n], stall seconds [n])."""
    fig = go.Figure()
    for k, (name, (steps, eff, stall)) in enumerate(runs.items()):
        steps, eff, stall = _np(steps), _np(eff).astype(np.float64), _np(stall).astype(np.float64)
        fig.add_trace(go.Scatter(x=steps, y=eff, mode="lines", name=name, legendgroup=name,
                                 line={"color": color_for(k), "width": 1.5},
                                 hovertemplate="step %{x}: net efficiency %{y:.4f}<extra>" + name + "</extra>"))
        at = np.flatnonzero(stall > 0)
        if at.size:
            size = 6 + 14 * stall[at] / stall[at].max()
            fig.add_trace(go.Scatter(x=steps[at], y=eff[at], mode="markers", name=f"{name}: stall",
                                     legendgroup=name, showlegend=False, customdata=stall[at],
                                     marker={"color": color_for(k), "symbol": "x", "size": size},
                                     hovertemplate="stall of %{customdata:.3g} s at step %{x}<extra>" + name
                                                   + "</extra>"))
    _layout(fig, "step", "net efficiency so far (ideal time / serving + stalls)", 340)
    return fig


def cumulative_bytes_figure(runs: Mapping[str, tuple[np.ndarray, np.ndarray]], unit: str = "GB") -> go.Figure:
    """Cumulative weight transfers per setting: name -> (steps [n], cumulative bytes or
    moves [n]); ``unit`` "GB" divides bytes by 1e9, "moves" plots counts."""
    fig = go.Figure()
    scale = 1e9 if unit == "GB" else 1.0
    for k, (name, (steps, cum)) in enumerate(runs.items()):
        fig.add_trace(go.Scatter(x=_np(steps), y=_np(cum).astype(np.float64) / scale, mode="lines", name=name,
                                 line={"color": color_for(k), "shape": "hv"},
                                 hovertemplate="step %{x}: %{y:,.2f} " + unit + "<extra>" + name + "</extra>"))
    return _layout(fig, "step", f"cumulative {unit} moved", 340)


SETTING_SYMBOLS = ("circle", "square", "diamond", "triangle-up", "pentagon", "star", "triangle-down")


def frontier_figure(rows: pd.DataFrame, frontier_names: Sequence[str], unit: str = "GB") -> go.Figure:
    """Bytes moved against realised mean imbalance, one point per setting; the settings no
    other beats on both (``frontier_names``) are ringed and joined by a dotted line. rows:
    ``setting``, ``mean_imbalance``, ``total_bytes`` (or ``total_moves`` when unit is "moves").

    Each setting is its own legend entry, coloured as the k-th line of the other Over-time
    charts (row k gets ``color_for(k)``) with its own symbol, rather than a text label by
    its point: settings that move about as much and balance about as well sit on top of one
    another, and a label by a point at the edge of the plot is cut off. The x axis is
    logarithmic when every setting moves something and the most moves 10x the least (every
    N against migration-aware settings often spans decades; linear, those crowd at 0)."""
    x = rows["total_bytes"].astype(float) / 1e9 if unit == "GB" else rows["total_moves"].astype(float)
    y = rows["mean_imbalance"].astype(float)
    on = rows["setting"].isin(list(frontier_names))
    fig = go.Figure()
    for k, (name, xk, yk, fk) in enumerate(zip(rows["setting"], x, y, on)):
        fig.add_trace(go.Scatter(
            x=[xk], y=[yk], mode="markers", name=str(name),
            marker={"size": 11, "color": color_for(k), "symbol": SETTING_SYMBOLS[k % len(SETTING_SYMBOLS)],
                    "opacity": 0.9, "line": {"color": "white", "width": 1}},
            customdata=[[str(name), "on the frontier" if fk else "not on the frontier"]],
            hovertemplate="%{customdata[0]}<br>%{x:,.2f} " + unit + " · imbalance %{y:.4f}<br>%{customdata[1]}"
                          "<extra></extra>"))
    front = pd.DataFrame({"x": x[on], "y": y[on]}).sort_values("x")
    fig.add_trace(go.Scatter(x=front["x"], y=front["y"], mode="lines+markers", name="frontier",
                             line={"color": "#444", "dash": "dot", "width": 1.5},
                             marker={"symbol": "circle-open", "size": 19, "color": "#444", "line": {"width": 1.5}},
                             hoverinfo="skip"))
    log = bool(len(x) > 1 and (x > 0).all() and x.max() >= 10 * x.min())
    _layout(fig, {"title": f"{unit} moved in all" + (" (log scale)" if log else ""),
                  "type": "log" if log else "linear"}, "realised mean imbalance", 340)
    return fig


def microbatch_histogram(series: Mapping[str, torch.Tensor | np.ndarray]) -> go.Figure:
    """Overlaid histograms of per-(micro-batch, layer) imbalance, one per dispatch model.
    series: name -> [B, L] (or any shape) max / mean values."""
    fig = go.Figure()
    arrays = {name: _np(values).astype(np.float64).ravel() for name, values in series.items()}
    lo = min((float(v.min()) for v in arrays.values() if v.size), default=1.0)
    hi = max((float(v.max()) for v in arrays.values() if v.size), default=2.0)
    bins = {"start": lo, "end": hi + 1e-9, "size": max((hi - lo) / 60, 1e-6)}    # the same bins for every model
    for k, (name, v) in enumerate(arrays.items()):
        fig.add_trace(go.Histogram(x=v, name=name, opacity=0.6, marker={"color": color_for(k)}, xbins=bins,
                                   hovertemplate="%{x}: %{y} (micro-batch, layer) pairs<extra>" + name + "</extra>"))
        fig.add_vline(x=float(v.mean()), line={"color": color_for(k), "dash": "dash"},
                      annotation_text=f"{name}: mean {v.mean():.4f}", annotation_yshift=-16 * k,
                      annotation_position="top right", annotation={"bgcolor": "rgba(255,255,255,0.85)"})
    return _layout(fig, "micro-batch imbalance (max / mean)", "(micro-batch, layer) pairs", 380, barmode="overlay")
