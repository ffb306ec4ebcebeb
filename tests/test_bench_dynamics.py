"""The benchmark's dynamics suite: trace ids, tasks, rows against the simulator, a tiny run end
to end through `eplb bench run`, resume, and the summary's dynamics table."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from solvers.bench import run as bench_run
from solvers.bench.dynamics_report import dynamics_rows, dynamics_section, split_dynamics
from solvers.bench.dynamics_tasks import TraceInstance, load_trace, setting_label
from solvers.bench.executors import run_tasks
from solvers.bench.store import COLUMNS, ResultStore, is_dynamics, read_results
from solvers.bench.suites import SUITES, DynamicsGroup, get_suite
from solvers.bench.tasks import run_task, suite_tasks
from solvers.cli import main as eplb
from solvers.dynamics import simulate
from solvers.errors import OptionError

DYNAMICS_COLUMNS = ["setting", "every", "threshold", "window", "migration_slack", "realised_imbalance_mean",
                    "realised_imbalance_p99", "total_moves", "total_bytes", "rebalances", "tokens_lost",
                    "wall_time_s"]


def _run(*args: str) -> int:
    return bench_run.main([*args, "--no-progress", "--figure", "none"])


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("dyn") / "run"
    assert _run("--suite", "dynamics-tiny", "--out", str(out)) == 0
    return out


def test_trace_ids_round_trip_and_reject_malformed_ids():
    ds = TraceInstance.of_dataset("olmoe-1b-7b-drifting", "olmoe-1b-7b", "node-8")
    assert ds.id == "dataset:olmoe-1b-7b-drifting|N1xP8xR72"
    gen = TraceInstance.generated("deepseek-v3", "drifting", "prefill-4x8", layers=4, steps=16)
    assert gen.id == "generated:deepseek-v3:drifting:L4:T16|N4xP32xR288"
    for inst in (ds, gen):
        assert TraceInstance.from_id(inst.id) == inst
    with pytest.raises(OptionError, match="^instance"):
        TraceInstance.from_id("generated:deepseek-v3|N4")
    with pytest.raises(OptionError, match="^shape"):
        TraceInstance.generated("deepseek-v3", "drifting", "moon-base", layers=1, steps=4)


def test_dynamics_suite_covers_datasets_generated_traces_and_both_replanning_kinds():
    suite = get_suite("dynamics")
    assert all(isinstance(g, DynamicsGroup) for g in suite.groups)
    tasks = suite_tasks(suite)
    assert len({t.key for t in tasks}) == len(tasks)
    ids = {t.instance for t in tasks}
    for name in ("olmoe-1b-7b-drifting", "mixtral-8x7b-shifting-mix", "deepseek-v3-shifting-mix"):
        assert any(i.startswith(f"dataset:{name}|") for i in ids)
    assert {i.split(":")[2] for i in ids if i.startswith("generated:")} >= {"drifting", "shifting-mix"}
    slacks = {t.options.get("migration_slack") for t in tasks}
    assert None in slacks and len(slacks) >= 2
    assert any("threshold" in t.options for t in tasks) and any("every" in t.options for t in tasks)
    # --solvers restricts the replays; a solver of no group is refused
    only = suite_tasks(suite, solvers=["deepseek"])
    assert only and {t.solver for t in only} == {"deepseek"}
    with pytest.raises(OptionError, match="^solvers"):
        suite_tasks(get_suite("dynamics-tiny"), solvers=["kk_swap"])


def test_a_dynamics_row_holds_the_simulators_totals():
    suite = SUITES["dynamics-tiny"]
    task = next(t for t in suite_tasks(suite) if t.options.get("migration_slack") is not None)
    row = run_task(task)
    assert set(row) <= set(COLUMNS)
    inst, loads, model, groups = load_trace(task.instance, task.seed)
    res = simulate(loads, num_replicas=inst.replicas, num_groups=groups, num_nodes=inst.nodes, num_gpus=inst.gpus,
                   solver=task.solver, every=task.options["every"], window=task.options["window"],
                   migration_slack=task.options["migration_slack"], expert_bytes=row["expert_bytes"])
    tot = res.totals()
    assert row["termination"] == "simulated" and row["status"] == "" and row["model"] == "olmoe-1b-7b"
    assert row["realised_imbalance_mean"] == pytest.approx(tot["mean_imbalance"])
    assert row["realised_imbalance_p99"] == pytest.approx(tot["p99_imbalance"])
    assert row["total_moves"] == tot["total_moves"] and row["total_bytes"] == tot["total_bytes"]
    assert row["total_bytes"] == row["total_moves"] * row["expert_bytes"]
    assert row["rebalances"] == tot["rebalances"] > 0
    assert row["tokens_lost"] == pytest.approx(tot["tokens_lost"])
    assert row["setting"] == setting_label(task.options) == "every 6, window 6, slack 0.01"


def test_tiny_dynamics_run_writes_rows_and_the_dynamics_table(tiny_run):
    df = read_results(tiny_run)
    assert len(df) == len(suite_tasks(get_suite("dynamics-tiny"))) and is_dynamics(df).all()
    assert (df["termination"] == "simulated").all()
    for col in DYNAMICS_COLUMNS:
        assert col in df.columns, col
    assert df["realised_imbalance_mean"].ge(1).all() and df["total_moves"].ge(0).all()
    # migration-aware re-planning moves fewer bytes than plain re-planning on the same trigger
    assert df["rebalances"].gt(0).all()           # both triggers rebalance on this trace
    for _, trig in df.groupby(df["every"].isna()):
        plain = trig[trig["migration_slack"].isna()]["total_bytes"]
        aware = trig[trig["migration_slack"].notna()]["total_bytes"]
        assert len(plain) == 1 and len(aware) == 2 and (aware < float(plain.iloc[0])).all()
    assert set(df["migration_budget"].dropna()) == {0.25}
    summary = (tiny_run / "summary.md").read_text()
    assert "## Dynamics" in summary and "realised mean" in summary and "GB moved" in summary
    assert "Per solver" not in summary      # no solver rows: no solver tables
    csv = pd.read_csv(tiny_run / "results.csv")
    assert len(csv) == len(df)


def test_rerendered_dynamics_summary_equals_the_runs(tiny_run, tmp_path):
    import shutil

    from benchmarks.report import rerender

    copy = tmp_path / "copy"
    shutil.copytree(tiny_run, copy)
    (copy / "summary.md").unlink()
    assert rerender(copy, figure="none").read_text() == (tiny_run / "summary.md").read_text()


def test_dynamics_run_resumes_after_a_kill(tmp_path, tiny_run):
    out = tmp_path / "run"
    tasks = suite_tasks(get_suite("dynamics-tiny"))
    store = ResultStore(out)
    for row in run_tasks(tasks[:1]):
        store.append(row)
    with (out / "results.csv").open("a") as fh:      # killed while writing the second row
        fh.write(f"{tasks[1].instance},olmoe-1b-7b,2")
    assert _run("--suite", "dynamics-tiny", "--out", str(out), "--resume") == 0
    meta = json.loads((out / "meta.json").read_text())
    assert meta["settings"]["skipped_done"] == 1 and meta["rows"] == len(tasks)
    keys = ["instance", "solver", "options", "seed"]
    df, ref = read_results(out), read_results(tiny_run)
    merged = df.merge(ref, on=keys, suffixes=("", "_ref"))
    assert len(merged) == len(tasks)
    assert (merged["total_moves"] == merged["total_moves_ref"]).all()
    assert (merged["realised_imbalance_mean"] == merged["realised_imbalance_mean_ref"]).all()


def test_eplb_bench_run_runs_the_dynamics_suite(tmp_path, capsys):
    out = tmp_path / "dyn"
    assert eplb(["bench", "run", "--suite", "dynamics-tiny", "--out", str(out), "--figure", "none",
                 "--no-progress"]) == 0, capsys.readouterr().err
    assert "## Dynamics" in (out / "summary.md").read_text()


def test_table_compares_each_setting_with_plain_replanning():
    base = {c: None for c in COLUMNS}
    base.update(instance="dataset:x|N1xP8xR72", trace="x", model="m", scenario="drifting", num_layers=2,
                num_gpus=8, num_replicas=72, seed=0, solver="deepseek", termination="simulated", status="", window=4, every=4.0,
                threshold=float("nan"), rebalances=3, realised_imbalance_p99=1.3, tokens_lost=10.0,
                wall_time_s=0.1)
    rows = [dict(base, setting="every 4, window 4, plain", migration_slack=float("nan"), total_moves=300,
                 total_bytes=3e9, realised_imbalance_mean=1.20),
            dict(base, setting="every 4, window 4, slack 0.01", migration_slack=0.01, total_moves=60,
                 total_bytes=6e8, realised_imbalance_mean=1.206),
            dict(base, instance="i", setting="", solver="kk_swap", termination="completed", status="feasible")]   # a solver row
    df = pd.DataFrame(rows)
    solved, replays = split_dynamics(df)
    assert list(solved["solver"]) == ["kk_swap"] and len(replays) == 2
    recs = {r["slack"]: r for r in dynamics_rows(df)}
    assert recs["0.01"]["fewer_bytes"] == pytest.approx(5.0)
    assert recs["0.01"]["vs_plain"] == pytest.approx(0.005)
    text = dynamics_section(df)
    assert "5.00x" in text and "+0.50 %" in text and "kk_swap" not in text
    assert dynamics_section(df[~is_dynamics(df)]) == ""
