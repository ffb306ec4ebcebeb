"""The traffic view: what a plan costs the all-to-all on a per-token routing trace.

Figures are pure functions of a :class:`solvers.traffic.Traffic` (tests call them); the
Streamlit parts pick a routing trace (a shipped routing dataset or an uploaded file) and
draw the node x node heatmap, the remote-nodes-per-token histogram (Explore) and the
traffic columns (Compare). A page calls :func:`explore_view` or :func:`compare_section`.
"""
from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from solvers import Plan, Problem
from solvers.errors import EPLBError
from solvers.routing import RoutingTrace, read_routing
from solvers.traffic import Traffic, trace_token_bytes, traffic
from solvers.workloads.catalog import ROUTING, dataset_path

TEMPLATE = "plotly_white"
UPLOAD = "Upload a routing file"


def node_matrix_figure(t: Traffic, unit: float = 1e9) -> go.Figure:
    """Source node x destination node inter-node bytes (GB), summed over layers."""
    m = t.node_matrix.numpy() / unit
    N = m.shape[0]
    fig = go.Figure(go.Heatmap(z=m, x=[f"node {n}" for n in range(N)], y=[f"node {n}" for n in range(N)],
                               colorscale="Blues", colorbar={"title": {"text": "GB"}, "thickness": 12},
                               hovertemplate="from %{y} to %{x}: %{z:.3f} GB<extra></extra>"))
    fig.update_layout(template=TEMPLATE, xaxis={"title": "destination"},
                      yaxis={"title": "source", "autorange": "reversed"}, height=360, margin={"t": 30, "b": 40})
    return fig


def remote_nodes_figure(t: Traffic) -> go.Figure:
    """Share of (token, layer) pairs reaching 0, 1, ... remote nodes (all layers)."""
    hist = t.nodes_hist.sum(0).numpy().astype(np.float64)
    share = hist / max(hist.sum(), 1.0)
    fig = go.Figure(go.Bar(x=np.arange(len(share)), y=share, hovertemplate="%{x} remote nodes: %{y:.1%}<extra></extra>"))
    fig.update_layout(template=TEMPLATE, xaxis={"title": "distinct remote nodes per token", "dtick": 1},
                      yaxis={"title": "share of tokens x layers", "tickformat": ".0%"}, height=360,
                      margin={"t": 30, "b": 40})
    return fig


def traffic_columns(t: Traffic) -> dict:
    """The numbers a table row shows."""
    s = t.summary
    return {"remote nodes / token": s["remote_nodes_mean"], "remote nodes p99": s["remote_nodes_p99"],
            "inter-node GB": s["inter_node_bytes"] / 1e9, "intra-node GB": s["intra_node_bytes"] / 1e9}


@st.cache_data(show_spinner="Reading the routing trace...", max_entries=4)
def _routing_file(name: str, digest: str | None, path: str | None, _data: bytes | None = None) -> RoutingTrace:
    """A dataset's file (``path``) or an upload (keyed by its SHA-256 ``digest``)."""
    if _data is None:
        return read_routing(path)
    with tempfile.TemporaryDirectory(prefix="eplb-routing-") as tmp:
        path = Path(tmp) / name
        path.write_bytes(_data)
        try:
            return read_routing(path)
        except EPLBError as exc:
            raise type(exc)(exc.param, str(exc).split(": ", 1)[1].replace(str(path), name)) from None


def routing_picker(key: str, problem: Problem) -> RoutingTrace | None:
    """A routing trace of the problem's layers and experts (None until one is chosen)."""
    choice = st.selectbox("Routing trace", [*ROUTING, UPLOAD], key=f"{key}:routing",
                          help="per-token top-k routing: a shipped routing dataset, or an SGLang per_token dump, "
                               "vLLM routed_experts or Megatron JSONL file (docs/traffic.md)")
    if choice == UPLOAD:
        up = st.file_uploader("Routing file", type=["npz", "pt", "json", "jsonl", "npy"], key=f"{key}:routing_up")
        if up is None:
            return None
        data = up.getvalue()
        trace = _routing_file(up.name, hashlib.sha256(data).hexdigest(), None, data)
    else:
        trace = _routing_file(choice, None, str(dataset_path(choice)))
    if (trace.num_layers, trace.num_experts) != (problem.num_layers, problem.num_experts):
        raise EPLBError("routing", f"the trace has {trace.num_layers} layers of {trace.num_experts} experts, the "
                        f"loads {problem.num_layers} of {problem.num_experts} (pick the loads it was recorded with, "
                        f"e.g. the dataset of the same name)")
    return trace


def explore_view(problem: Problem, plan: Plan, key: str) -> None:
    """Explore's traffic view: cards, node x node heatmap, remote-nodes histogram."""
    try:
        trace = routing_picker(key, problem)
        if trace is None:
            st.info("Upload a routing file to see the traffic.")
            return
        t = traffic(plan, problem.cluster, trace, trace_token_bytes(trace))
    except EPLBError as exc:
        st.error(str(exc), icon=":material/error:")
        return
    cols = st.columns(4)
    for col, (label, value) in zip(cols, traffic_columns(t).items()):
        col.metric(label, f"{value:.4g}", border=True)
    c1, c2 = st.columns(2)
    c1.markdown("**Inter-node bytes, source node x destination node**")
    c1.plotly_chart(node_matrix_figure(t), width="stretch", key=f"{key}:chart:node_matrix")
    c2.markdown("**Distinct remote nodes per token**")
    c2.plotly_chart(remote_nodes_figure(t), width="stretch", key=f"{key}:chart:remote_nodes")
    st.caption(f"Dispatch under the nearest-replica rule, {t.num_tokens} tokens, {t.token_bytes} bytes per token "
               "copy; the combine sends the same back (docs/traffic.md).")


def compare_section(problem: Problem, plans: dict[str, Plan], key: str) -> None:
    """Compare's traffic columns: one row per solver, on a chosen routing trace."""
    if not st.toggle("Traffic on a routing trace", key=f"{key}:traffic_on",
                     help="inter-node bytes and remote nodes per token of every plan (docs/traffic.md)"):
        return
    try:
        trace = routing_picker(key, problem)
        if trace is None:
            return
        tb = trace_token_bytes(trace)
        rows = [{"solver": name, **traffic_columns(traffic(plan, problem.cluster, trace, tb))}
                for name, plan in plans.items()]
    except EPLBError as exc:
        st.error(str(exc), icon=":material/error:")
        return
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
