"""The app's traffic view: figures from the metric, and the Explore view under AppTest."""
from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

from app.loads import DEFAULT_DATASET
from app.traffic import node_matrix_figure, remote_nodes_figure
from solvers import Problem, solve
from solvers.routing import load_routing
from solvers.traffic import traffic
from solvers.workloads.catalog import dataset_path
from solvers.io import load_dataset

MAIN = str(Path(__file__).resolve().parents[1] / "app" / "main.py")


def _array(v) -> np.ndarray:
    """A plotly JSON array (plain list or base64 typed array)."""
    if isinstance(v, dict) and "bdata" in v:
        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"])).astype(np.float64)
    return np.asarray(v, dtype=np.float64)


def test_figures_show_the_metric():
    tr = load_routing(dataset_path("deepseek-v3-routing"))
    problem = Problem(tr.loads(), 288, 8, 4, 32)
    t = traffic(solve(problem, "deepseek").plan, problem.cluster, tr, 10)
    z = np.asarray(node_matrix_figure(t, unit=1).data[0].z)
    np.testing.assert_allclose(z, t.node_matrix.numpy())
    y = np.asarray(remote_nodes_figure(t).data[0].y)
    assert y.sum() == pytest.approx(1.0) and len(y) == 4


def test_explore_traffic_view():
    at = AppTest.from_file(MAIN, default_timeout=120).run()
    at.segmented_control(key="explore:view").set_value("Traffic").run()
    assert not at.exception and not at.error
    charts = {el.key: json.loads(el.proto.spec) for el in at.get("plotly_chart")}
    weights = load_dataset(DEFAULT_DATASET).loads.sum(0).double()
    problem = Problem(weights, 288, 8, 4, 32)
    tr = load_routing(dataset_path("deepseek-v3-routing"))
    t = traffic(solve(problem, "deepseek").plan, problem.cluster, tr, 7168 * 2)
    z = charts["explore:chart:node_matrix"]["data"][0]["z"]
    z = np.stack([_array(row) for row in z]) if isinstance(z, list) else _array(z).reshape(4, 4)
    np.testing.assert_allclose(z, t.node_matrix.numpy() / 1e9, rtol=1e-9)
    assert any(m.label == "remote nodes / token" for m in at.metric)


def test_compare_traffic_section():
    at = AppTest.from_file(MAIN, default_timeout=120).run()
    at.switch_page("views/compare.py").run()
    at.multiselect(key="compare:solvers").set_value(["deepseek"]).run()
    at.button(key="compare:run").click().run()
    at.toggle(key="compare:traffic_on").set_value(True).run()
    assert not at.exception and not at.error
    table = at.dataframe[-1].value
    trace = load_dataset(DEFAULT_DATASET).loads
    problem = Problem(trace[:12].sum(0).double(), 288, 8, 4, 32)
    tr = load_routing(dataset_path("deepseek-v3-routing"))
    t = traffic(solve(problem, "deepseek").plan, problem.cluster, tr, 7168 * 2)
    assert table["solver"].tolist() == ["deepseek (hierarchical)", "deepseek (global)"]   # Compare runs both policies
    assert table["inter-node GB"].iloc[0] == pytest.approx(t.summary["inter_node_bytes"] / 1e9)


@pytest.mark.slow
def test_explore_runs_traffic_aware_on_a_routing_trace():
    """traffic_aware in Explore: the sidebar's routing picker hands it the trace, its options
    (traffic weight included) are widgets, and the plan's traffic is below hierarchical's."""
    at = AppTest.from_file(MAIN, default_timeout=300).run()
    at.selectbox(key="explore:solver").set_value("traffic_aware").run()
    assert not at.exception and not at.error, (at.exception, at.error)
    assert at.selectbox(key="explore:solver:routing").value == "deepseek-v3-routing"
    assert at.checkbox(key="explore:traffic_aware:traffic_weight:set") is not None
    at.segmented_control(key="explore:view").set_value("Traffic").run()
    assert not at.exception and not at.error, (at.exception, at.error)
    cards = {m.label: m.value for m in at.metric}
    steps = load_dataset(DEFAULT_DATASET).loads                         # the page's window: every step
    problem = Problem(steps.sum(0).double(), 288, 8, 4, 32)
    tr = load_routing(dataset_path("deepseek-v3-routing"))
    hier = traffic(solve(problem, "deepseek", policy="hierarchical").plan, problem.cluster, tr, 7168 * 2)
    # the page hands the window's steps as the history, the picked trace as the routing
    ours = traffic(solve(problem, "traffic_aware", routing=tr, history=steps).plan, problem.cluster, tr, 7168 * 2)
    assert ours.bytes["inter_node"] < hier.bytes["inter_node"]
    # the view shows the traffic_aware plan's numbers, not another plan's
    assert cards["remote nodes / token"] == f"{ours.summary['remote_nodes_mean']:.4g}"
    assert cards["inter-node GB"] == f"{ours.summary['inter_node_bytes'] / 1e9:.4g}"


def test_explore_traffic_aware_on_a_cluster_with_a_failed_gpu():
    """A failed GPU from the sidebar: traffic_aware plans the survivors, and the traffic view
    shows that plan's traffic on that cluster (no token to or from the failed GPU)."""
    at = AppTest.from_file(MAIN, default_timeout=300).run()
    at.text_input(key="cluster:failed").set_value("3").run()
    at.selectbox(key="explore:solver").set_value("traffic_aware").run()
    at.button(key="explore:run").click().run()
    at.segmented_control(key="explore:view").set_value("Traffic").run()
    assert not at.exception and not at.error, (at.exception, at.error)
    cards = {m.label: m.value for m in at.metric}
    steps = load_dataset(DEFAULT_DATASET).loads
    problem = Problem(steps.sum(0).double(), 288, 8, 4, 32, failed=[3])
    tr = load_routing(dataset_path("deepseek-v3-routing"))
    out = solve(problem, "traffic_aware", routing=tr, history=steps)
    ours = traffic(out.plan, problem.cluster, tr, 7168 * 2)
    assert bool((ours.dispatched_load[:, 3] == 0).all()) and float(ours.dispatched_load.sum()) > 0
    assert cards["remote nodes / token"] == f"{ours.summary['remote_nodes_mean']:.4g}"
    assert cards["inter-node GB"] == f"{ours.summary['inter_node_bytes'] / 1e9:.4g}"
