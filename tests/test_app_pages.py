"""Every page of the app under Streamlit's AppTest: default render, running solvers, the bar
chart's data against the shared scorer, and bad input shown as st.error (never a traceback)."""
from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from app.loads import DEFAULT_DATASET  # noqa: E402
from solvers import Problem, score, solve  # noqa: E402
from solvers.io import load_dataset  # noqa: E402

MAIN = str(Path(__file__).resolve().parents[1] / "app" / "main.py")
TIMEOUT = 120


def _app() -> AppTest:
    return AppTest.from_file(MAIN, default_timeout=TIMEOUT)


def _clean(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


def _charts(at: AppTest) -> dict[str, dict]:
    """Plotly figures on the page by widget key suffix -> plotly JSON."""
    out = {}
    for el in at.get("plotly_chart"):
        out[el.proto.id.rsplit("-", 1)[-1] if el.key is None else el.key] = json.loads(el.proto.spec)
    return out


def _array(v) -> np.ndarray:
    """A plotly JSON array (plain list or base64 typed array)."""
    if isinstance(v, dict) and "bdata" in v:
        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"]))
    return np.asarray(v, dtype=np.float64)


def _bar_totals(fig: dict) -> np.ndarray:
    """[P] the segments' sum per x position (GPU) over the bar traces."""
    bars = [t for t in fig["data"] if t["type"] == "bar" and t.get("xaxis", "x") == "x"   # not the node panel
            and _array(t["x"]).size and not (isinstance(t["x"], list) and t["x"][0] is None)]   # nor the legend
    x = np.concatenate([_array(t["x"]).astype(np.int64) for t in bars])
    return np.bincount(x, weights=np.concatenate([_array(t["y"]) for t in bars]))


def _metric(at: AppTest, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


def _layer_slider(at: AppTest, page: str = "explore"):
    """The per-GPU chart's layer slider (its key names the plan, so a new plan opens on its own worst layer)."""
    return next(s for s in at.slider if s.key and s.key.startswith(f"{page}:layer:"))


@pytest.fixture(scope="module", autouse=True)
def _keep_torch_threads():
    """The app sets torch's intra-op threads for its process; leave other tests as they were."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def default_problem() -> Problem:
    trace = load_dataset(DEFAULT_DATASET)
    return Problem(trace.loads.sum(0).double(), 288, 8, 4, 32)


# ---------------------------------------------------------------------------------------
# Explore

def test_explore_default_render_shows_deepseeks_plan(default_problem):
    at = _app().run()
    _clean(at)
    assert not at.error
    assert at.title[0].value == "Explore a placement"
    res = solve(default_problem, "deepseek")
    assert _metric(at, "Imbalance") == f"{res.score.imbalance_mean:.4f}"
    assert f"termination **{res.termination}**" in at.markdown[0].value
    bars = _charts(at)["explore:chart:bars"]
    nodes = [t for t in bars["data"] if t.get("xaxis") == "x2"]                   # the node panel
    worst = int(torch.argmax(res.score.imbalance))                                # the slider starts there
    np.testing.assert_allclose(_array(nodes[0]["y"]), res.score.node_load[worst].numpy())


def test_server_warm_up_solves_exactly_what_the_first_explore_render_asks_for(monkeypatch):
    """``python -m app.serve`` fills the cache with cache.default_explore_inputs(): those must be
    the arguments the page's first render solves, or the warm-up saves nothing."""
    from app import cache

    calls = []
    real = cache.solve

    def spy(problem, solver, options, extra=None):
        calls.append((problem.weights.clone(), problem.cluster, problem.num_groups, solver, dict(options),
                      extra or {}))
        return real(problem, solver, options, extra)

    monkeypatch.setattr(cache, "solve", spy)
    at = _app().run()
    _clean(at)
    assert len(calls) == 1
    problem, solver, options = cache.default_explore_inputs()
    got_w, got_cluster, got_groups, got_solver, got_options, got_extra = calls[0]
    assert (got_cluster, got_groups, got_solver, got_options, got_extra) == (
        problem.cluster, problem.num_groups, solver, options, {})
    assert torch.equal(got_w, problem.weights)


def test_server_warm_up_before_the_runtime_fills_the_store_sessions_read(monkeypatch):
    """``app.serve.warm`` runs before Streamlit's runtime exists; the first session must still
    find its solve and its per-GPU figure cached (and without the warm-up, it makes both)."""
    from app import cache, figures, serve

    solved, drawn = [], []
    real_solve, real_figure = cache.run_solver, figures.gpu_load_figure
    monkeypatch.setattr(cache, "run_solver", lambda *a, **k: solved.append(a[1]) or real_solve(*a, **k))
    monkeypatch.setattr(figures, "gpu_load_figure", lambda *a, **k: drawn.append(k["title"]) or real_figure(*a, **k))

    def empty() -> None:
        cache._solve.clear()
        cache._gpu_figure.clear()

    empty()
    serve.warm()
    assert solved == ["deepseek"] and len(drawn) == 1
    at = _app().run()
    _clean(at)
    assert solved == ["deepseek"] and len(drawn) == 1    # the session read the warm-up's results
    assert _charts(at)["explore:chart:bars"]["layout"]["title"]["text"] == drawn[0]
    empty()
    _clean(_app().run())
    assert solved == ["deepseek"] * 2 and len(drawn) == 2    # the control: empty caches solve and draw


def test_explore_views_show_heatmap_layers_plan_and_downloads(default_problem):
    at = _app().run()
    sc = score(default_problem, solve(default_problem, "deepseek").plan)
    view = at.segmented_control(key="explore:view")
    view.set_value("Heatmap").run()
    _clean(at)
    heat = _charts(at)["explore:chart:heatmap"]["data"][0]
    z = np.asarray([_array(row) for row in heat["z"]]) if isinstance(heat["z"], list) else _array(heat["z"])
    np.testing.assert_allclose(z.reshape(sc.gpu_load.shape), (sc.gpu_load / sc.mean_load[:, None]).numpy())
    at.segmented_control(key="explore:view").set_value("Per layer").run()
    lines = {t["name"]: t for t in _charts(at)["explore:chart:layers"]["data"]}
    np.testing.assert_allclose(_array(lines["GPU imbalance"]["y"]), sc.imbalance.numpy())
    np.testing.assert_allclose(_array(lines["node imbalance"]["y"]), sc.node_imbalance.numpy())
    # the node line is dashed and drawn first, under the GPU line (it used to hide it)
    names = [t["name"] for t in _charts(at)["explore:chart:layers"]["data"]]
    assert names.index("node imbalance") < names.index("GPU imbalance")
    assert lines["node imbalance"]["line"]["dash"] == "dash" and lines["GPU imbalance"]["line"]["dash"] == "solid"
    at.segmented_control(key="explore:view").set_value("Plan").run()
    table = at.dataframe[0].value
    np.testing.assert_allclose(table["tokens"].to_numpy(), sc.gpu_load[int(torch.argmax(sc.imbalance))].numpy())
    at.segmented_control(key="explore:view").set_value("Download").run()
    _clean(at)
    assert len(at.get("download_button")) == 4


def test_explore_bar_chart_equals_the_scorers_gpu_load(default_problem):
    at = _app().run()
    expected = score(default_problem, solve(default_problem, "deepseek").plan).gpu_load
    worst = int(torch.argmax(expected.max(1).values / expected.mean(1)))
    np.testing.assert_allclose(_bar_totals(_charts(at)["explore:chart:bars"]), expected[worst].numpy(), rtol=1e-12)
    _layer_slider(at).set_value(7).run()                    # a chart setting
    _clean(at)
    np.testing.assert_allclose(_bar_totals(_charts(at)["explore:chart:bars"]), expected[7].numpy(), rtol=1e-12)


def test_explore_runs_another_solver(default_problem):
    at = _app().run()
    at.selectbox(key="explore:solver").set_value("kk_swap").run()
    at.button(key="explore:run").click().run()
    _clean(at)
    assert not at.error
    res = solve(default_problem, "kk_swap")
    assert _metric(at, "Imbalance") == f"{res.score.imbalance_mean:.4f}"
    layer = int(_layer_slider(at).value)
    np.testing.assert_allclose(_bar_totals(_charts(at)["explore:chart:bars"]), res.score.gpu_load[layer].numpy(),
                               rtol=1e-12)


def test_explore_exact_solver_waits_for_the_run_button():
    at = _app().run()
    at.selectbox(key="explore:solver").set_value("cpsat").run()
    _clean(at)
    assert any("press **Run solver**" in i.value for i in at.info)
    assert "explore:chart:bars" not in _charts(at)


def test_explore_bad_upload_shows_an_error_and_the_page_stays_usable():
    at = _app().run()
    at.radio(key="loads:source").set_value("Upload").run()
    at.file_uploader(key="explore:upload").set_value(("broken.npz", b"this is not a zip", "application/octet-stream"))
    at.run()
    _clean(at)
    # in the sidebar and where the page's results would be (not only in the sidebar)
    assert len(at.sidebar.error) == 1 and "broken.npz" in at.sidebar.error[0].value
    assert len(at.main.error) == 1 and "broken.npz" in at.main.error[0].value
    at.radio(key="loads:source").set_value("Dataset").run()               # back to a dataset: charts again
    _clean(at)
    assert not at.error and "explore:chart:bars" in _charts(at)


def test_explore_impossible_cluster_shows_the_librarys_error():
    at = _app().run()
    at.number_input(key="cluster:nodes").set_value(3).run()                 # 32 GPUs on 3 nodes
    _clean(at)
    assert len(at.error) == 1 and at.error[0].value.startswith("GPUs (all nodes): must be a multiple of")
    assert at.error[0].value.endswith("(num_gpus)")
    at.number_input(key="cluster:nodes").set_value(4).run()
    assert not at.error and "explore:chart:bars" in _charts(at)


def test_explore_upload_of_a_trace_and_current_placement(tmp_path):
    trace = load_dataset("olmoe-1b-7b-drifting").loads[:20]
    path = tmp_path / "t.npz"
    np.savez(path, loads=trace.numpy())
    at = _app().run()
    at.radio(key="loads:source").set_value("Upload").run()
    at.file_uploader(key="explore:upload").set_value(("trace.npz", path.read_bytes(), "application/octet-stream"))
    at.run()
    _clean(at)
    assert not at.error
    assert _metric(at, "Imbalance")
    problem = Problem(trace.sum(0).double(), 96, 1, 4, 32)   # 64 experts + 1 spare slot per GPU: 3 x 32 slots
    previous = solve(problem, "kk_swap").plan
    doc = {"physical_to_logical_map": previous.phy2log.tolist()}
    at.toggle(key="explore:previous_on").set_value(True).run()
    at.file_uploader(key="explore:previous").set_value(("old.json", json.dumps(doc).encode(), "application/json"))
    at.run()
    _clean(at)
    expected = score(problem, solve(problem, "deepseek").plan, previous=previous)
    assert _metric(at, "Moves") == f"{expected.moves:,}"


# ---------------------------------------------------------------------------------------
# Compare

def test_compare_default_render_waits_for_run():
    at = _app().run()
    at.switch_page("views/compare.py").run()
    _clean(at)
    assert at.title[0].value == "Compare solvers"
    assert at.multiselect(key="compare:solvers").value == ["deepseek", "kk_swap", "joint", "best", "risk_aware",
                                                          "backtest"]
    assert any("Run comparison" in i.value for i in at.info)


def test_compare_runs_solvers_in_sample_and_held_out(default_problem):
    at = _app().run()
    at.switch_page("views/compare.py").run()
    at.multiselect(key="compare:solvers").set_value(["deepseek", "kk_swap"]).run()
    at.multiselect(key="compare:policies").set_value(["hierarchical"]).run()
    at.button(key="compare:run").click().run()
    _clean(at)
    assert not at.error
    table = at.dataframe[0].value
    assert table["solver"].tolist() == ["deepseek (hierarchical)", "kk_swap (hierarchical)"]
    trace = load_dataset(DEFAULT_DATASET).loads
    plan_on = Problem(trace[:12].sum(0).double(), 288, 8, 4, 32)
    held = Problem(trace[12:24].sum(0).double(), 288, 8, 4, 32)
    res = solve(plan_on, "deepseek")
    row = table.iloc[0]
    assert row["imbalance_mean"] == pytest.approx(res.score.imbalance_mean)
    assert row["holdout_imbalance_mean"] == pytest.approx(score(held, res.plan).imbalance_mean)
    # the held-out steps one by one, as `eplb compare --holdout` scores them, and the pick goes by it
    per_step = score(held, res.plan, tokens=trace[12:24].double())
    assert row["holdout_step_imbalance_mean"] == pytest.approx(per_step.imbalance_mean)
    assert row["holdout_step_imbalance_mean"] > row["holdout_imbalance_mean"]    # steps are burstier than their sum
    assert any("per step on the held-out steps" in s.value for s in at.success)
    charts = _charts(at)
    assert {"compare:chart:gap", "compare:chart:time", "compare:chart:layers", "compare:chart:gpus"} <= set(charts)
    side = charts["compare:chart:gpus"]
    layer = int(_layer_slider(at, "compare").value)
    np.testing.assert_allclose(_array(side["data"][0]["y"]), res.score.gpu_load[layer].numpy(), rtol=1e-12)
    at.toggle(key="compare:held_toggle").set_value(True).run()              # a chart setting: no re-solve
    _clean(at)
    assert at.dataframe[0].value["solver"].tolist() == ["deepseek (hierarchical)", "kk_swap (hierarchical)"]


def test_compare_on_a_mixed_pool_runs_global_and_picks_in_time():
    """The mixed-pool preset with the default policies (hierarchical and global): the
    comparison runs the global policy (hierarchical needs identical GPUs, and says so) and the
    held-out steps are scored in time, the pick going by it, as `eplb compare` on that cluster."""
    at = _app().run()
    at.switch_page("views/compare.py").run()
    at.selectbox(key="cluster:cluster").set_value("mixed-4x8").run()
    at.multiselect(key="compare:solvers").set_value(["deepseek", "kk_swap"]).run()
    assert at.multiselect(key="compare:policies").value == ["hierarchical", "global"]
    at.button(key="compare:run").click().run()
    _clean(at)
    assert not at.error
    assert any("Hierarchical skipped" in c.value for c in at.caption)
    table = at.dataframe[0].value
    assert table["solver"].tolist() == ["deepseek (global)", "kk_swap (global)"]
    trace = load_dataset(DEFAULT_DATASET).loads
    speeds = [1.0] * 16 + [1.4] * 16
    held = Problem(trace[12:24].sum(0).double(), 288, 8, 4, 32, gpu_speed=speeds)
    res = solve(Problem(trace[:12].sum(0).double(), 288, 8, 4, 32, gpu_speed=speeds), "kk_swap", policy="global")
    per_step = score(held, res.plan, tokens=trace[12:24].double())
    row = table.set_index("solver").loc["kk_swap (global)"]
    assert row["holdout_step_time_imbalance_mean"] == pytest.approx(per_step.summary["time_imbalance_mean"])
    assert any("in time per step on the held-out steps" in s.value for s in at.success)


def test_compare_bad_option_and_impossible_cluster_show_errors():
    at = _app().run()
    at.switch_page("views/compare.py").run()
    at.number_input(key="cluster:slots").set_value(7).run()                 # 7 x 32 = 224 < 256 experts
    _clean(at)
    assert len(at.error) == 1 and at.error[0].value.startswith("Slots (GPUs x slots per GPU): must be >=")


# ---------------------------------------------------------------------------------------
# Benchmark results

def test_results_default_render_and_recommender():
    at = _app().run()
    at.switch_page("views/results.py").run()
    _clean(at)
    assert not at.error
    assert at.title[0].value == "Benchmark results"
    assert len(at.dataframe) >= 2
    assert {"results:chart:profile", "results:chart:scatter"} <= set(_charts(at))
    at.button[0].click().run()                  # the recommender form's submit button
    _clean(at)
    assert at.success and at.success[0].value.startswith("use ")


def test_results_reads_no_typed_path_and_uploads_are_checked():
    from solvers.bench.recommend import SHIPPED_RESULTS

    at = _app().run()
    at.switch_page("views/results.py").run()
    assert not at.text_input                     # a shared server: no path box reaching its files
    assert "shipped benchmark results" in at.selectbox(key="results:set_choice").options
    at.selectbox(key="results:set_choice").set_value("Upload a results table").run()
    _clean(at)
    for name, data in [("results.csv", b'a,b\n"1,2\n'), ("results.parquet", b"PAR1 not parquet PAR1"),
                       ("results.csv", b"\xff\xfe\x00garbage")]:
        at.file_uploader(key="results:upload").set_value((name, data, "application/octet-stream")).run()
        _clean(at)
        assert len(at.error) == 1 and at.error[0].value.startswith("results"), at.error
    good = (Path(str(SHIPPED_RESULTS)) / "results.parquet").read_bytes()
    at.file_uploader(key="results:upload").set_value(("results.parquet", good, "application/octet-stream")).run()
    _clean(at)
    assert not at.error and len(at.dataframe) >= 2


# ---------------------------------------------------------------------------------------
# Over time

def test_over_time_replays_every_setting_with_the_simulator():
    from app.compute import replay_totals
    from solvers.dynamics import simulate

    at = _app().run()
    at.switch_page("views/over_time.py").run()
    _clean(at)
    assert at.title[0].value == "Over time" and any("Run replay" in i.value for i in at.info)
    # the loads and cluster are Explore's (shared by the pages): pick the drifting trace on one node
    at.selectbox(key="loads:dataset").set_value("olmoe-1b-7b-drifting").run()
    at.selectbox(key="cluster:cluster").set_value("node-8").run()
    at.button(key="over_time:run").click().run()
    _clean(at)
    assert not at.error
    totals = at.dataframe[1].value
    assert totals["setting"].tolist() == ["every 50", "every 50, migration 1%", "every 50, migration 1% + budget",
                                          "every 10", "every 10, stall-aware", "threshold 1.25"]
    trace = load_dataset("olmoe-1b-7b-drifting").loads
    cluster = dict(num_replicas=72, num_groups=1, num_nodes=1, num_gpus=8, expert_bytes=2 * 3 * 2048 * 1024)
    for row, setting in ((0, {}), (2, {"migration_slack": 0.01, "migration_budget": 0.25})):
        expected = simulate(trace, every=50, **cluster, **setting).totals()
        expected_stall = expected["stall_seconds"] if row == 0 else expected_stall
        assert totals.iloc[row]["mean_imbalance"] == pytest.approx(expected["mean_imbalance"])
        assert totals.iloc[row]["total_moves"] == expected["total_moves"]
    aware = simulate(trace, every=10, stall_aware=True, **cluster)       # the stall-aware row, scored from step 50
    assert totals.iloc[4]["mean_imbalance"] == pytest.approx(replay_totals(aware, 50)["mean_imbalance"])
    aware = aware.totals()
    assert totals.iloc[4]["rebalances"] == aware["rebalances"] <= totals.iloc[3]["rebalances"]
    charts = _charts(at)
    assert {"over_time:chart:imbalance", "over_time:chart:bytes", "over_time:chart:frontier",
            "over_time:chart:net"} <= set(charts)
    assert totals.iloc[0]["stall_seconds"] == pytest.approx(expected_stall)
    first = charts["over_time:chart:imbalance"]["data"][0]
    assert _array(first["y"]).shape[0] == trace.shape[0] - 50
    # every column of the totals table has its label and format (a renamed total would lose them)
    from app.widgets import REPLAY_TOTALS_COLUMNS

    assert set(totals.columns) - {"setting"} == set(REPLAY_TOTALS_COLUMNS)


def test_over_time_network_controls_change_the_stall():
    at = _app().run()
    at.switch_page("views/over_time.py").run()
    at.selectbox(key="loads:dataset").set_value("olmoe-1b-7b-drifting").run()
    at.selectbox(key="cluster:cluster").set_value("node-8").run()
    at.button(key="over_time:run").click().run()
    _clean(at)
    fast = at.dataframe[1].value
    at.number_input(key="over_time:intra_bw").set_value(40.0).run()       # one node: intra-node links carry it all
    at.button(key="over_time:run").click().run()
    _clean(at)
    assert not at.error
    slow = at.dataframe[1].value
    assert fast["stall_seconds"].iloc[0] > 0
    # ten times slower links: every rebalance's copies take ten times longer (same plans, same copies)
    assert slow["stall_seconds"].tolist() == pytest.approx((fast["stall_seconds"] * 10).tolist())
    assert slow["mean_imbalance"].tolist() == pytest.approx(fast["mean_imbalance"].tolist())
    assert (slow["net_efficiency"] < fast["net_efficiency"]).all()
    # async copies: no stall, but the interference costs serving time
    at.radio(key="over_time:stall").set_value("async").run()
    at.button(key="over_time:run").click().run()
    _clean(at)
    asyn = at.dataframe[1].value
    assert (asyn["stall_seconds"] == 0).all() and (asyn["interference_seconds"] > 0).all()


def test_over_time_single_step_loads_and_bad_settings_show_errors():
    at = _app().run()
    at.switch_page("views/over_time.py").run()
    at.selectbox(key="loads:dataset").set_value("readme-example").run()
    _clean(at)
    assert len(at.error) == 1 and at.error[0].value.startswith("loads")
    at.selectbox(key="loads:dataset").set_value("olmoe-1b-7b-drifting").run()
    at.number_input(key="cluster:nodes").set_value(3).run()           # 8 GPUs on 3 nodes
    _clean(at)
    assert at.error and at.error[0].value.startswith("GPUs (all nodes)")


def test_explore_time_robust_planner_gets_the_windows_steps():
    import solvers.dynamics  # noqa: F401  registers the time-robust planners

    at = _app().run()
    at.selectbox(key="explore:solver").set_value("robust_max").run()
    at.button(key="explore:run").click().run()
    _clean(at)
    assert not at.error
    trace = load_dataset(DEFAULT_DATASET).loads
    problem = Problem(trace.sum(0).double(), 288, 8, 4, 32)
    res = solve(problem, "robust_max", history=trace)
    assert _metric(at, "Imbalance") == f"{res.score.imbalance_mean:.4f}"


def test_explore_micro_batch_view_replays_the_windows_steps(default_problem):
    from app.compute import DISPATCH_MODELS, microbatch_imbalance

    at = _app().run()
    at.segmented_control(key="explore:view").set_value("Micro-batches").run()
    _clean(at)
    assert not at.error
    assert [t["name"] for t in _charts(at)["explore:chart:microbatches"]["data"]] == list(DISPATCH_MODELS)
    at.radio(key="explore:mb_source").set_value("steps of the window").run()
    _clean(at)
    hist = _charts(at)["explore:chart:microbatches"]
    trace = load_dataset(DEFAULT_DATASET).loads
    plan = solve(default_problem, "deepseek").plan
    even = microbatch_imbalance(plan, trace, 32, "even split")
    np.testing.assert_allclose(np.sort(_array(hist["data"][0]["x"])), np.sort(even.numpy().ravel()))
    stats = at.dataframe[0].value
    assert stats["mean"].iloc[0] == pytest.approx(float(even.mean()))


def test_explore_real_cluster_panel_draws_time(default_problem):
    """Speeds per node, uneven slots and a failed GPU from the sidebar's real-cluster panel:
    the per-GPU view draws each GPU's time as the shared scorer computes it."""
    at = _app().run()
    at.text_input(key="cluster:node_speeds").set_value("1,1,1.4,1.4").run()
    at.selectbox(key="explore:solver").set_value("kk_swap").run()
    at.button(key="explore:run").click().run()
    _clean(at)
    assert not at.error
    p = Problem(default_problem.weights, 288, 8, 4, 32, gpu_speed=[1.0] * 16 + [1.4] * 16)
    res = solve(p, "kk_swap")
    assert _metric(at, "Time imbalance") == f"{res.score.summary['time_imbalance_mean']:.4f}"
    layer = int(next(s for s in at.slider if s.key.startswith("explore:layer:58")).value)   # keyed by the plan too
    bars = [t for t in _charts(at)["explore:chart:time"]["data"] if t["type"] == "bar" and t.get("x") is not None
            and t["x"] != [None]]
    np.testing.assert_allclose(_array(bars[0]["y"]), res.score.gpu_time[layer].numpy(), rtol=1e-12)
    # uneven slots and a failed GPU: planned and drawn end to end
    at.text_input(key="cluster:gpu_slots").set_value("10,8*1," * 15 + "10,8").run()
    at.text_input(key="cluster:failed").set_value("3").run()
    _clean(at)
    assert not at.error and "explore:chart:time" in _charts(at)
    # a bad value is the library's one-line error
    at.text_input(key="cluster:node_speeds").set_value("1,1,0,1").run()
    _clean(at)
    assert len(at.error) == 1 and at.error[0].value.startswith("gpu_speed")
