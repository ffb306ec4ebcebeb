"""The app's pure parts (figures, tables, exports, uploads), tested without Streamlit."""
from __future__ import annotations

import io
import json

import numpy as np
import pandas as pd
import pytest
import torch

pytest.importorskip("plotly")

from app import figures  # noqa: E402
from app.compute import compare_row, metric_cards, plan_table, run_solver, score_holdout  # noqa: E402
from app.exports import plan_downloads  # noqa: E402
from app.loads import content_hash, from_upload  # noqa: E402
from app.widgets import describe_cluster  # noqa: E402
from solvers import Cluster, Problem, score, solve  # noqa: E402
from solvers.errors import LoadFileError  # noqa: E402


def bar_totals(fig) -> np.ndarray:
    """[P] the bars' totals per x position (sum of the segments there) on the per-GPU axes:
    what a reader sees per GPU."""
    bars = [t for t in fig.data if t.type == "bar" and t.xaxis in (None, "x") and t.x is not None
            and len(t.x) and t.x[0] is not None]
    x = np.concatenate([np.asarray(t.x, dtype=np.int64) for t in bars])
    y = np.concatenate([np.asarray(t.y, dtype=np.float64) for t in bars])
    return np.bincount(x, weights=y)


def _problem(layers: int = 3, experts: int = 16, replicas: int = 24, groups: int = 4, nodes: int = 2,
             gpus: int = 8, seed: int = 0) -> Problem:
    g = torch.Generator().manual_seed(seed)
    w = torch.exp(1.2 * torch.randn(layers, experts, generator=g, dtype=torch.float64)) * 100
    return Problem(w.round(), replicas, groups, nodes, gpus)


@pytest.fixture(scope="module")
def solved():
    problem = _problem()
    return problem, solve(problem, "kk_swap")


def test_gpu_load_bars_sum_to_the_scorers_gpu_load(solved):
    problem, res = solved
    expected = score(problem, res.plan).gpu_load
    for layer in range(problem.num_layers):
        fig = figures.gpu_load_figure(problem.weights[layer], res.plan.phy2log[layer], res.plan.logcnt[layer],
                                      problem.num_gpus, problem.num_nodes)
        np.testing.assert_allclose(bar_totals(fig), expected[layer].numpy(), rtol=1e-12)
        bars = [t for t in fig.data if t.type == "bar" and t.x[0] is not None]   # not the legend's empty traces
        assert len(bars) == 1 and len(bars[0].y) == problem.num_replicas   # one segment per replica
        # segments stack: each starts where the one below it on its GPU ends
        top = np.asarray(bars[0].base, dtype=np.float64) + np.asarray(bars[0].y, dtype=np.float64)
        np.testing.assert_allclose(top.reshape(problem.num_gpus, -1)[:, -1], expected[layer].numpy(), rtol=1e-12)


def test_gpu_load_segments_name_their_expert_and_replica(solved):
    problem, res = solved
    layer = 1
    fig = figures.gpu_load_figure(problem.weights[layer], res.plan.phy2log[layer], res.plan.logcnt[layer],
                                  problem.num_gpus, problem.num_nodes)
    S = problem.slots_per_gpu
    p2l = res.plan.phy2log[layer]                                            # [R], GPU g holds slots gS..gS+S-1
    cnt = res.plan.logcnt[layer]
    (trace,) = [t for t in fig.data if t.type == "bar" and t.x[0] is not None]
    custom = np.asarray(trace.customdata)
    experts = custom[:, 0].astype(int)
    assert (experts == p2l.numpy()).all()
    assert (np.asarray(trace.x) == np.arange(problem.num_replicas) // S).all()
    assert (custom[:, 4] == np.arange(problem.num_replicas) % S).all()    # the slot on its GPU
    colors = np.asarray(trace.marker.color)                    # coloured by the expert's replica count
    counts = cnt[experts].numpy()
    assert (colors == np.asarray([figures.count_color(int(c)) for c in counts], dtype=object)).all()
    assert len(set(counts.tolist())) > 1 and len(set(colors)) == len(set(np.minimum(counts, 5).tolist()))
    # the key: one empty legend trace per replica count present, in its colour, no colour bar
    keys = [t for t in fig.data if t.type == "bar" and t.x[0] is None]
    assert [k.marker.color for k in keys] == [figures.count_color(c) for c in sorted(set(np.minimum(counts, 5)))]
    assert keys[0].name == "1 replica" and all(k.showlegend for k in keys)
    assert not [t for t in fig.data if t.type == "scatter"]
    w = problem.weights[layer][experts].numpy() / cnt[experts].numpy()
    np.testing.assert_allclose(np.asarray(trace.y), w)                       # tokens = w_e / c_e
    assert ((custom[:, 1] >= 1) & (custom[:, 1] <= custom[:, 2])).all()   # replica k of c_e
    # mean line and node boundaries
    mean = float(score(problem, res.plan).mean_load[layer])
    hlines = [s for s in fig.layout.shapes if s.y0 == s.y1]
    vlines = [s for s in fig.layout.shapes if s.x0 == s.x1]
    assert any(abs(h.y0 - mean) < 1e-9 * mean for h in hlines)
    assert [v.x0 for v in vlines] == [problem.gpus_per_node - 0.5]


def test_heatmap_is_load_over_mean_with_the_hottest_gpu_marked(solved):
    problem, res = solved
    sc = score(problem, res.plan)
    fig = figures.load_heatmap(sc.gpu_load, problem.num_nodes)
    heat, marks = fig.data[0], fig.data[1]
    z = np.asarray(heat.z)
    np.testing.assert_allclose(z, (sc.gpu_load / sc.mean_load[:, None]).numpy())
    assert list(marks.x) == sc.gpu_load.argmax(1).tolist()
    np.testing.assert_allclose(z.max(1), sc.imbalance.numpy())


def test_node_and_layer_figures_plot_the_scores(solved):
    problem, res = solved
    sc = score(problem, res.plan)
    fig = figures.gpu_load_figure(problem.weights[2], res.plan.phy2log[2], res.plan.logcnt[2], problem.num_gpus,
                                  problem.num_nodes, node_load=sc.node_load[2])
    (node,) = [t for t in fig.data if t.type == "bar" and t.xaxis == "x2"]   # the panel on the right
    np.testing.assert_allclose(np.asarray(node.y), sc.node_load[2].numpy())
    np.testing.assert_allclose(bar_totals(fig), sc.gpu_load[2].numpy(), rtol=1e-12)  # panel not counted
    assert fig.layout.xaxis.domain[1] < fig.layout.xaxis2.domain[0]
    (mean,) = [s for s in fig.layout.shapes if s.yref == "y2"]
    assert mean.y0 == pytest.approx(float(sc.node_load[2].mean()))
    one_node = figures.gpu_load_figure(problem.weights[2], res.plan.phy2log[2], res.plan.logcnt[2],
                                       problem.num_gpus, 1, node_load=sc.node_load[2][:1])
    assert not [t for t in one_node.data if t.xaxis == "x2"]                   # nothing to compare on one node
    lines = figures.layer_imbalance_figure({"gpu": sc.imbalance}, floor=res.lower_bound / sc.mean_load)
    np.testing.assert_allclose(np.asarray(lines.data[0].y), sc.imbalance.numpy())
    assert (np.asarray(lines.data[1].y) <= np.asarray(lines.data[0].y) + 1e-12).all()   # bound below plan


def test_cluster_description_and_uneven_shapes_named():
    assert describe_cluster(Cluster(4, 32, 288), 8) == ("4 node(s) x 8 GPUs = 32 GPUs, 288 slots (9 per GPU), "
                                                        "8 expert group(s)")
    with pytest.raises(ValueError, match="^num_gpus"):        # an uneven shape never exists to be described
        Cluster(3, 32, 288)
    with pytest.raises(ValueError, match="^num_replicas"):
        Cluster(4, 32, 290)


def test_compare_figures_use_the_table():
    table = pd.DataFrame({"solver": ["a", "b"], "gap_mean": [0.01, 0.002], "gap_max": [0.1, 0.02],
                          "wall_time_s": [0.003, 2.0]})
    gap = figures.gap_figure(table)
    assert [t.name for t in gap.data] == ["in sample, mean", "in sample, worst layer"]
    np.testing.assert_allclose(np.asarray(gap.data[0].y), [1.0, 0.2])
    rt = figures.runtime_figure(table)
    assert rt.layout.yaxis.type == "log"
    side = figures.gpu_loads_side_by_side({"a": torch.tensor([1.0, 3.0]), "b": torch.tensor([2.0, 2.0])}, 1)
    assert [list(t.y) for t in side.data] == [[1.0, 3.0], [2.0, 2.0]]


def test_profile_and_scatter_figures():
    prof = {"x": (np.array([1.0, 1.5]), np.array([0.5, 1.0])), "y": (np.array([1.0, np.inf]), np.array([0.5, 1.0]))}
    fig = figures.profile_figure(prof, "objective")
    assert [t.name for t in fig.data] == ["x", "y"]
    assert fig.data[1].y[-1] == 0.5          # an unsolved problem never counts
    rows = pd.DataFrame({"solver": ["a", "b"], "wall_time_s": [0.1, 1.0], "gap_mean": [0.02, 0.0],
                         "instance": ["i", "i"], "seed": [0, 0]})
    sc = figures.gap_time_scatter(rows)
    assert sc.layout.xaxis.type == "log" and list(sc.data[0].y) == [2.0]


def test_plan_table_lists_each_gpus_experts_and_load(solved):
    problem, res = solved
    sc = score(problem, res.plan)
    table = plan_table(problem.weights, res.plan, 0, problem.num_gpus, problem.num_nodes)
    np.testing.assert_allclose(table["tokens"].to_numpy(), sc.gpu_load[0].numpy())
    assert table["node"].tolist() == [g // problem.gpus_per_node for g in range(problem.num_gpus)]
    held = [sum(int(x.split("×")[1]) if "×" in x else 1 for x in row.split(", ")) for row in table["experts"]]
    assert held == [problem.slots_per_gpu] * problem.num_gpus


def test_outcome_cards_and_gap_within_policy():
    problem = _problem()
    out = run_solver(problem, "deepseek", {})
    assert (out.gap_in_policy <= out.result.gap + 1e-12).all() and (out.gap_in_policy >= -1e-12).all()
    labels = [c[0] for c in metric_cards(out)]
    assert labels == ["Imbalance", "Worst layer", "Balancedness", "Node imbalance", "Gap to bound",
                      "Gap in policy", "Off-node share", "Duplicates", "Time"]
    # short values: a card is about 150 px wide at 1280 x 800 (the browser test measures it)
    assert all(len(c[1]) <= 8 for c in metric_cards(out))
    moved = score(problem, out.result.plan, previous=solve(problem, "kk_swap").plan, expert_bytes=10)
    cards = dict((c[0], c[1]) for c in metric_cards(out, moved))
    assert cards["Moves"] == f"{moved.moves:,}"


def test_held_out_scores_the_plan_on_other_loads():
    problem, later = _problem(seed=0), _problem(seed=1)
    out = run_solver(problem, "deepseek", {})
    h = score_holdout(later, out.result.plan)
    assert torch.equal(h.score.gpu_load, score(later, out.result.plan).gpu_load)
    row = compare_row("deepseek", out, h)
    assert row["holdout_imbalance_mean"] == pytest.approx(h.score.imbalance_mean)
    assert row["gap_mean"] == pytest.approx(out.result.gap_mean)


def test_downloads_read_back_as_the_same_plan(tmp_path, solved):
    from solvers.workloads.exporters import read_exported_plan

    problem, res = solved
    downloads = plan_downloads(res.plan, problem, policy=res.policy, solver="kk_swap", options=res.options,
                               metrics=res.score.metrics(), layer_offset=3, loads_name="x")
    assert [d.filename for d in downloads] == ["plan.json", "expert_location_sglang.json", "moe_load_balancer.yaml",
                                               "plan.csv"]
    for d in downloads:
        path = tmp_path / d.filename
        path.write_bytes(d.data)
        offset = 3 if d.filename.startswith("expert_location") else 0
        back = read_exported_plan(path, num_experts=problem.num_experts, layer_offset=offset)
        assert torch.equal(back.phy2log, res.plan.phy2log), d.filename
        assert d.usage
    assert "--init-expert-location" in downloads[1].usage


def test_upload_reads_any_format_and_drops_dense_layers():
    trace = torch.randint(1, 50, (4, 3, 8))
    trace[:, 0] = 0                                                   # a dense layer in the dump
    buf = io.BytesIO()
    np.savez(buf, loads=trace.numpy())
    loads = from_upload("dump.npz", buf.getvalue())
    assert loads.dense_layers == 1 and loads.trace.shape == (4, 2, 8)
    assert torch.equal(loads.window(1, 3), trace[1:3, 1:].sum(0).double())
    vllm = json.dumps({"load_history": [{"logical_expert_load": step} for step in trace[:, 1:].tolist()]})
    assert torch.equal(from_upload("hist.json", vllm.encode()).trace, trace[:, 1:])


@pytest.mark.parametrize("name, data, words", [
    ("bad.npz", b"not a zip file", "bad.npz"),
    ("empty.csv", b"", "empty"),
    ("loads.txt", b"1,2", "unsupported file type"),
])
def test_bad_uploads_raise_a_one_line_error_naming_the_file(name, data, words):
    with pytest.raises(LoadFileError) as err:
        from_upload(name, data)
    text = str(err.value)
    assert words in text and "\n" not in text and "eplb-loads-" not in text


def test_content_hash_depends_on_values_shape_and_dtype():
    a = torch.arange(6, dtype=torch.float64).view(2, 3)
    assert content_hash(a) == content_hash(a.clone())
    assert content_hash(a) != content_hash(a.view(3, 2))
    assert content_hash(a) != content_hash(a.to(torch.float32))
    b = a.clone()
    b[1, 2] += 1
    assert content_hash(a) != content_hash(b)


def test_cluster_builds_the_problem_or_names_the_bad_size():
    w = torch.ones(2, 16)
    assert Problem(w, cluster=Cluster(2, 8, 24), num_groups=4).slots_per_gpu == 3
    with pytest.raises(ValueError, match="^num_groups"):
        Problem(w, cluster=Cluster(2, 8, 24), num_groups=17)


def test_over_time_figures_plot_the_replay():
    steps = np.arange(10, 20)
    imb = np.linspace(1.1, 1.3, 10)
    fig = figures.realised_imbalance_figure({"a": (steps, imb, [10, 15])})
    np.testing.assert_allclose(np.asarray(fig.data[0].y), imb)
    assert list(fig.data[1].x) == [10, 15] and list(fig.data[1].y) == [imb[0], imb[5]]
    cum = figures.cumulative_bytes_figure({"a": (steps, np.arange(10) * 2e9)})
    np.testing.assert_allclose(np.asarray(cum.data[0].y), np.arange(10) * 2.0)
    rows = pd.DataFrame({"setting": ["x", "y", "z"], "mean_imbalance": [1.2, 1.1, 1.3],
                         "total_bytes": [1e9, 5e9, 6e9], "total_moves": [1, 5, 6]})
    front = figures.frontier_figure(rows, ["x", "y"])
    line = next(t for t in front.data if t.name == "frontier")
    assert list(line.x) == [1.0, 5.0]                               # the frontier line, by bytes


def test_frontier_figure_names_every_setting_in_the_legend_not_in_text():
    """Settings that move about as much and balance about as well crowd one spot, and a text
    label by a point at the right edge is cut off: each setting is a legend entry with the
    colour of its line in the other Over-time charts and a symbol of its own, no text."""
    names = ["every 50", "every 50, migration 1%", "every 50, migration 1% + budget", "every 10", "threshold 1.25"]
    rows = pd.DataFrame({"setting": names, "mean_imbalance": [1.7005, 1.7009, 1.7609, 1.3432, 1.4583],
                         "total_bytes": [143.4e9, 71.8e9, 35.5e9, 893.7e9, 4734.6e9],
                         "total_moves": [11395, 5707, 2820, 71028, 376270]})
    for unit in ("GB", "moves"):
        fig = figures.frontier_figure(rows, names[:4], unit)
        points = [t for t in fig.data if t.name != "frontier"]
        assert [t.name for t in points] == names
        assert all(t.showlegend is not False for t in fig.data) and fig.layout.showlegend is not False
        assert not any("text" in (t.mode or "") for t in fig.data) and not fig.layout.annotations
        assert [t.marker.color for t in points] == [figures.color_for(k) for k in range(len(names))]
        assert len({(t.marker.color, t.marker.symbol) for t in points}) == len(names)
        ring = next(t for t in fig.data if t.name == "frontier")
        assert len(ring.x) == 4 and ring.marker.symbol == "circle-open"
        scale = 1e9 if unit == "GB" else 1.0
        col = "total_bytes" if unit == "GB" else "total_moves"
        for t, r in zip(points, rows.itertuples()):
            assert t.x[0] == pytest.approx(getattr(r, col) / scale) and t.y[0] == r.mean_imbalance
            assert r.setting in t.customdata[0][0]
        assert fig.layout.xaxis.type == "log"                       # 35 GB to 4.7 TB: the every-50 trio apart
    none = rows.assign(total_bytes=[0.0, 71.8e9, 35.5e9, 893.7e9, 4734.6e9])
    assert figures.frontier_figure(none, names[:4]).layout.xaxis.type == "linear"    # a zero has no log
    near = rows.assign(total_bytes=[143.4e9, 71.8e9, 35.5e9, 93.7e9, 134.6e9])
    assert figures.frontier_figure(near, names[:4]).layout.xaxis.type == "linear"    # under 10x: linear


def test_even_split_microbatch_imbalance_is_the_scorers_per_step():
    from app.compute import microbatch_imbalance

    problem = _problem()
    plan = solve(problem, "deepseek").plan
    g = torch.Generator().manual_seed(3)
    tokens = torch.randint(0, 50, (4, problem.num_layers, problem.num_experts), generator=g)
    got = microbatch_imbalance(plan, tokens, problem.num_gpus)
    for b in range(4):
        sc = score(Problem(tokens[b].double(), problem.num_replicas, problem.num_groups, problem.num_nodes,
                           problem.num_gpus), plan)
        torch.testing.assert_close(got[b], sc.imbalance)
    hist = figures.microbatch_histogram({"even split": got})
    np.testing.assert_allclose(np.sort(np.asarray(hist.data[0].x)), np.sort(got.numpy().ravel()))


def test_scheduled_split_is_never_worse_than_the_even_split():
    from app.compute import microbatch_imbalance

    problem = _problem(replicas=32)
    plan = solve(problem, "deepseek").plan
    tokens = torch.randint(0, 50, (5, problem.num_layers, problem.num_experts), generator=torch.Generator().manual_seed(4))
    even = microbatch_imbalance(plan, tokens, problem.num_gpus, "even split")
    sched = microbatch_imbalance(plan, tokens, problem.num_gpus, "scheduled split")
    assert (sched <= even + 1e-9).all() and (sched < even - 1e-9).any()


def test_net_efficiency_figure_marks_stalls():
    from app.figures import net_efficiency_figure

    steps = np.arange(5, 10)
    eff = np.array([0.9, 0.85, 0.86, 0.86, 0.87])
    stall = np.array([0.0, 0.2, 0.0, 0.0, 0.1])
    fig = net_efficiency_figure({"every 2": (steps, eff, stall)})
    line, marks = fig.data
    assert list(line.y) == list(eff)
    assert list(marks.x) == [6, 9] and list(marks.customdata) == [0.2, 0.1]
    assert marks.marker.size[0] > marks.marker.size[1]          # the longer stall, the larger mark
