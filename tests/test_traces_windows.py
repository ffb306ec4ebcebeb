"""The ADRS / OpenEvolve EPLB benchmark's windows protocol (``eplb compare --windows K``):
windows of K steps over the whole trace, every plan made on window i scored on window i+1,
the benchmark's own score (balancedness, speed) beside held-out imbalance and the gap."""
from __future__ import annotations

import json

import pytest
import torch

from solvers import Problem, solve
from solvers.cli import main
from solvers.cluster import Cluster
from solvers.evaluate import score
from solvers.io import read_loads
from solvers.rolling import aggregate, benchmark_score, rolling_compare, window_pairs

from tests.test_traces import write_expert_load_json


def evaluator_balancedness(log2phy: torch.Tensor, logcnt: torch.Tensor, workload: torch.Tensor,
                           num_replicas: int, num_gpus: int) -> tuple[float, float]:
    """The benchmark evaluator's simulation, written here from its definition, one expert at a
    time: expert e's load goes in equal parts to its first logcnt[e] slots of log2phy; GPU g
    holds slots g*R/P .. (g+1)*R/P - 1; balancedness = sum over layers of the mean load over
    sum over layers of the max (GPUs, then slots)."""
    L, E = workload.shape
    slot = torch.zeros(L, num_replicas, dtype=torch.float64)
    for l in range(L):
        for e in range(E):
            load = float(workload[l, e])
            if load <= 0:
                continue
            n = int(logcnt[l, e])
            for r in log2phy[l, e, :n].tolist():
                slot[l, r] += load / n
    gpu = slot.view(L, num_gpus, -1).sum(-1)
    return (float(gpu.mean(1).sum() / gpu.max(1).values.sum()),
            float(slot.mean(1).sum() / slot.max(1).values.sum()))


@pytest.fixture(scope="module")
def adrs_file(tmp_path_factory):
    """A file in the benchmark's layout: 300 steps x 2 layers x 64 experts, drifting."""
    path = tmp_path_factory.mktemp("adrs") / "expert-load.json"
    write_expert_load_json(path, steps=300, layers=2, experts=64, seed=3)
    return path


CLUSTER = ["--replicas", "72", "--gpus", "8", "--nodes", "2", "--groups", "8"]


def test_benchmark_score_is_the_evaluators(adrs_file):
    trace = read_loads(adrs_file).trace.to(torch.float64)
    cluster = Cluster(2, 8, 72)
    for a, b in ((0, 100), (100, 200)):
        plan = solve(Problem(trace[a:b].sum(0), cluster=cluster, num_groups=8), "deepseek").plan
        nxt = Problem(trace[b:b + 100].sum(0), cluster=cluster, num_groups=8)
        gpu, slots = evaluator_balancedness(plan.log2phy, plan.logcnt, nxt.weights, 72, 8)
        got = benchmark_score(nxt, plan)
        assert got["bench_balancedness_gpu"] == pytest.approx(gpu, rel=1e-12)
        assert got["bench_balancedness_expert"] == pytest.approx(slots, rel=1e-12)
        assert 0 < slots < gpu <= 1
        # the GPU balancedness is the shared scorer's sum form
        assert got["bench_balancedness_gpu"] == pytest.approx(score(nxt, plan).summary["balancedness_sum"], rel=1e-12)


def test_windows_follow_the_benchmark_and_keep_the_last_partial_one():
    trace = torch.zeros(250, 1, 4)
    assert window_pairs(trace, 100) == [((0, 100), (100, 200)), ((100, 200), (200, 250))]
    with pytest.raises(ValueError, match="windows"):
        window_pairs(trace, 250)
    with pytest.raises(ValueError, match="windows"):
        window_pairs(trace, 0)


def test_every_window_is_planned_on_i_and_scored_on_i_plus_1(adrs_file):
    trace = read_loads(adrs_file).trace
    problem = Problem(trace.sum(0).to(torch.float64), cluster=Cluster(2, 8, 72), num_groups=8)
    table, per_window = rolling_compare(problem, trace, 100, ["deepseek", "kk_swap"])
    assert [(r["window"], r["solver"]) for r in per_window] == [(0, "deepseek"), (0, "kk_swap"),
                                                                (1, "deepseek"), (1, "kk_swap")]
    steps = trace.to(torch.float64)
    for w in (0, 1):             # deepseek's row of window w: its plan on w, scored on w + 1
        row = next(r for r in per_window if r["window"] == w and r["solver"] == "deepseek")
        plan = solve(problem.with_weights(steps[100 * w:100 * (w + 1)].sum(0)), "deepseek").plan
        nxt = problem.with_weights(steps[100 * (w + 1):100 * (w + 2)].sum(0))
        assert row["eval_steps"] == f"{100 * (w + 1)}:{100 * (w + 2)}"
        assert row["holdout_imbalance_mean"] == pytest.approx(score(nxt, plan).imbalance_mean)
        gpu, _ = evaluator_balancedness(plan.log2phy, plan.logcnt, nxt.weights, 72, 8)
        assert row["bench_balancedness_gpu"] == pytest.approx(gpu, rel=1e-12)
    ds = next(r for r in table if r["solver"] == "deepseek")
    mine = [r for r in per_window if r["solver"] == "deepseek"]
    assert ds["windows"] == 2 and ds["failed"] == 0
    assert ds["bench_balancedness_gpu"] == pytest.approx(sum(r["bench_balancedness_gpu"] for r in mine) / 2)
    seconds = sum(r["bench_seconds"] for r in mine) / 2
    assert ds["bench_speed_score"] == pytest.approx(0.002 / seconds)
    assert ds["bench_combined_score"] == pytest.approx((ds["bench_balancedness_expert"] + ds["bench_speed_score"]) / 2)
    assert ds["holdout_imbalance_worst"] == max(r["holdout_imbalance_worst"] for r in mine)
    # the aggregation is a function of the rows alone
    assert aggregate(per_window) == table


def test_compare_windows_command_prints_balancedness_beside_held_out_imbalance(adrs_file, capsys, tmp_path):
    """The issue's command: the whole trace in one run, every pair, both vocabularies."""
    rc = main(["compare", "--loads", str(adrs_file), "--windows", "100", *CLUSTER, "--solvers", "deepseek,kk_swap",
               "--json"])
    out = capsys.readouterr().out
    assert rc == 0
    doc = json.loads(out)
    assert doc["protocol"] == {"steps": 300, "window_steps": 100, "pairs": 2}
    assert {(w["window"], w["plan_steps"], w["eval_steps"]) for w in doc["windows"]} == {(0, "0:100", "100:200"),
                                                                                      (1, "100:200", "200:300")}
    for row in doc["rows"]:
        assert row["windows"] == 2 and row["failed"] == 0
        assert 0 < row["bench_balancedness_gpu"] <= 1 and row["holdout_imbalance_mean"] >= 1
        assert row["gap_mean"] >= 0 and row["bench_speed_score"] > 0
    assert doc["pick"]["solver"] in ("deepseek", "kk_swap")
    rc = main(["compare", "--loads", str(adrs_file), "--windows", "100", *CLUSTER, "--solvers", "deepseek",
               "--out", str(tmp_path / "o")])
    text = capsys.readouterr().out
    assert rc == 0
    header = next(line for line in text.splitlines() if line.startswith("solver"))
    assert header.index("balancedness") < header.index("held-out imb") and "gap to bound" in header
    assert "2 pairs" in text
    assert (tmp_path / "o" / "windows.csv").read_text().count("\n") == 3     # header + 2 windows


@pytest.mark.parametrize("extra, message", [
    (["--windows", "0"], "windows: must be an integer >= 1"),
    (["--windows", "300"], "needs two"),
    (["--windows", "100", "--holdout", "0:10"], "drop --holdout"),
])
def test_compare_windows_refusals_exit_2(adrs_file, capsys, extra, message):
    rc = main(["compare", "--loads", str(adrs_file), *CLUSTER, "--solvers", "deepseek", *extra])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and message in err[0]


def test_bench_windows_instances_score_every_window():
    """`eplb bench run --suite windows-tiny`: instances with the id suffix R run the protocol;
    the row's benchmark columns are the means over every pair, as solvers.rolling computes them."""
    from solvers.bench.instances import Instance, load_instance
    from solvers.bench.suites import get_suite
    from solvers.bench.tasks import Task, run_task, suite_tasks

    tasks = suite_tasks(get_suite("windows-tiny"))
    inst = Instance.from_id(tasks[0].instance)
    assert inst.rolling and inst.id.endswith("T30W10R") and Instance.from_id(inst.id) == inst
    row = run_task(Task(inst.id, "deepseek", {}, 0))
    assert row["windows_scored"] == 2
    loaded = load_instance(inst.id, 0)
    _, per_window = rolling_compare(loaded.problem, loaded.trace, 10, ["deepseek"])
    assert row["bench_balancedness_gpu"] == pytest.approx(sum(r["bench_balancedness_gpu"] for r in per_window) / 2)
    assert row["rolling_holdout_imbalance_mean"] == pytest.approx(
        sum(r["holdout_imbalance_mean"] for r in per_window) / 2)
    # window 0 -> 1 is every task's own out-of-sample score: the first pair
    assert row["holdout_imbalance_mean"] == pytest.approx(per_window[0]["holdout_imbalance_mean"])
    plain = Instance.on("olmoe-1b-7b", "node-8", "drifting", layers=2, steps=30, window=10)
    assert "windows_scored" not in run_task(Task(plain.id, "deepseek", {}, 0))
