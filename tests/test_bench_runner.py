"""The benchmark runner on the tiny suite: rows, files, resume, the regression gate, bad input."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

import solvers
from solvers.options import policy_option
from solvers.bench import run as bench_run
from solvers.bench.analysis import derive, holdout_table
from solvers.bench.executors import run_tasks
from solvers.bench.instances import Instance, load_instance
from solvers.bench.store import COLUMNS, ResultStore, read_results
from solvers.bench.suites import SUITES, get_suite
from solvers.bench.tasks import Task, run_task, suite_tasks
from solvers.errors import OptionError
from solvers.plan import Plan
from solvers.registry import SolverOutput, register

FAST = "deepseek,kk_swap"          # deterministic heuristics: rows are reproducible
REPO = Path(__file__).resolve().parents[1]


# --- deliberately wrong solvers, registered only while a test needs them, to prove that
# the gate catches them (other tests that loop over the registry never see them) ----------
WRONG = ("_bench_overclaim", "_bench_invalid", "_bench_false_bound")


@pytest.fixture()
def wrong_solvers():
    from solvers.registry import _REGISTRY

    _register_wrong_solvers()
    try:
        yield
    finally:
        for name in WRONG:
            _REGISTRY.pop(name, None)


def _register_wrong_solvers() -> None:

    @register("_bench_overclaim", kind="heuristic", description="test: claims a bound above its own plan",
              options=(policy_option(),))
    def _overclaim(problem, options) -> SolverOutput:
        plan = solvers.solve(problem, "deepseek").plan
        obj = solvers.score(problem, plan).max_load
        return SolverOutput(plan, "global", bound=obj * 1.5)

    @register("_bench_invalid", kind="heuristic", description="test: returns a malformed plan",
              options=(policy_option(),))
    def _invalid(problem, options) -> SolverOutput:
        plan = solvers.solve(problem, "deepseek").plan
        bad = plan.logcnt.clone()
        bad[:, 0] += 1
        bad[:, 1] -= 1
        return SolverOutput(Plan.from_tensors(plan.phy2log, plan.log2phy, bad), "global")

    @register("_bench_false_bound", kind="heuristic", options=(policy_option(),),
              description="test: a poor plan with a 'proven' bound equal to its own objective")
    def _false_bound(problem, options) -> SolverOutput:
        L, R, E = problem.num_layers, problem.num_replicas, problem.num_experts
        p2l = torch.arange(R).remainder(E).expand(L, R).contiguous()   # round robin: ignores loads
        plan = Plan.from_phy2log(p2l, E)
        return SolverOutput(plan, "global", bound=solvers.score(problem, plan).max_load)



def _run(*args: str) -> int:
    return bench_run.main([*args, "--no-progress", "--figure", "html"])


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tiny") / "run"
    assert _run("--suite", "tiny", "--out", str(out), "--solvers", FAST) == 0
    return out


def test_instance_id_round_trip_and_shapes():
    inst = Instance.on("deepseek-v3", "prefill-4x8", "skewed")
    assert inst.replicas == 288 and inst.layers == 58 and inst.gpus == 32 and inst.nodes == 4
    assert Instance.from_id(inst.id) == inst
    assert inst.shape_name == "prefill-4x8"
    with pytest.raises(OptionError, match="instance"):
        Instance.from_id("deepseek-v3|L58")
    with pytest.raises(OptionError, match="shape"):
        Instance.on("deepseek-v3", "moon-base")


def test_suites_declare_ci_full_tiny_and_expand_to_tasks():
    assert {"tiny", "ci", "full"} <= set(SUITES)
    full = get_suite("full")
    models = {i.model for g in full.groups for i in g.instances}
    assert models == {"deepseek-v3", "qwen3-235b", "mixtral-8x7b", "olmoe-1b-7b", "kimi-k2"}
    tasks = suite_tasks(get_suite("ci"))
    kinds = {solvers.get_solver(t.solver).kind for t in tasks}
    assert "heuristic" in kinds
    exact = [t for t in tasks if solvers.get_solver(t.solver).kind == "exact"]
    # exact solvers only on small instances, always with a time limit
    assert all(Instance.from_id(t.instance).model in ("mixtral-8x7b", "olmoe-1b-7b") for t in exact)
    assert all("time_limit" in t.options for t in exact)
    assert len({t.key for t in tasks}) == len(tasks)


def test_a_group_with_a_solver_list_runs_only_those_solvers():
    """The full suite's certification groups run certify alone on decode shapes (not every exact
    solver), with their options (more time at two slots per GPU and 64+ experts); --solvers still
    narrows them."""
    full = get_suite("full")
    listed = [g.solvers for g in full.groups if getattr(g, "solvers", None)]
    assert listed == [("robust_sum", "ewma", "risk_aware", "backtest"), ("certify",), ("certify",)]   # out of sample, certify
    groups = [g for g in full.groups if getattr(g, "solvers", None) == ("certify",)]
    decode = {i.id for g in groups for i in g.instances}
    two_slots = {i.id for i in groups[1].instances}
    assert two_slots and all(Instance.from_id(i).replicas == 2 * Instance.from_id(i).gpus for i in two_slots)
    assert {Instance.from_id(i).model for i in two_slots} == {"olmoe-1b-7b", "qwen3-235b"}  # 64, 128 experts
    tasks = [t for t in suite_tasks(full) if t.instance in decode and solvers.get_solver(t.solver).kind == "exact"]
    assert tasks and {t.solver for t in tasks} == {"certify"}
    assert all(t.options["policy"] == "global" for t in tasks)
    assert all(t.options["time_limit"] == (160.0 if t.instance in two_slots else 40.0) for t in tasks)
    only = suite_tasks(full, solvers=["cpsat"])
    assert not any(t.instance in decode and t.solver == "certify" for t in only)
    assert {t.solver for t in only} == {"cpsat"}


def test_task_row_is_scored_by_the_shared_scorer():
    inst = get_suite("tiny").groups[0].instances[0]
    row = run_task(Task(inst.id, "deepseek", {}, 3))
    loaded = load_instance(inst.id, 3)
    result = solvers.solve(loaded.problem, "deepseek")
    assert row["objective"] == pytest.approx(float(result.objective.sum()), rel=1e-6)
    assert row["lower_bound"] == pytest.approx(float(result.lower_bound.sum()), rel=1e-6)
    assert json.loads(row["objective_layers"]) == pytest.approx(result.objective.tolist(), rel=1e-6)
    assert row["imbalance_mean"] == pytest.approx(result.score.imbalance_mean)
    oos = solvers.score(loaded.eval_problem, result.plan)
    assert row["holdout_imbalance_mean"] == pytest.approx(oos.imbalance_mean)
    assert row["seed"] == 3 and row["termination"] == "completed"
    assert row["status"] in ("feasible", "proven_optimal") and row["status"] == str(result.status)
    assert set(row) <= set(COLUMNS)


def test_run_writes_rows_csv_parquet_meta_summary(tiny_run):
    for name in ("results.csv", "results.parquet", "meta.json", "summary.md"):
        assert (tiny_run / name).is_file(), name
    assert (tiny_run / "profile.html").is_file()
    df = read_results(tiny_run)
    csv = pd.read_csv(tiny_run / "results.csv")
    assert len(df) == len(csv) == 2 * 2          # 2 instances x 2 solvers x 1 seed
    assert set(df["solver"]) == {"deepseek", "kk_swap"}
    assert (df["termination"] == "completed").all() and (df["status"].isin(["feasible", "proven_optimal"])).all()
    # gaps are against the best bound (>= own bound), never negative
    assert (df["best_bound"] >= df["lower_bound"] * (1 - 1e-9)).all()
    assert (df["gap_mean"] >= -1e-12).all() and (df["gap_mean"] <= df["gap_own_mean"] + 1e-12).all()
    assert (df["gap_best_known"] >= -1e-12).all()
    per_instance_best = df.groupby(["instance", "seed"])["gap_best_known"].min()
    assert (per_instance_best.abs() < 1e-12).all()          # the best plan has gap 0 to itself
    meta = json.loads((tiny_run / "meta.json").read_text())
    assert meta["settings"]["suite"] == "tiny" and meta["rows"] == 4
    assert meta["versions"]["torch"] == torch.__version__.split("+")[0] or meta["versions"]["torch"]
    assert len(meta["git"]["commit"]) >= 7 and meta["finished"]


def test_existing_results_need_resume_or_overwrite(tiny_run, tmp_path, capsys):
    assert _run("--suite", "tiny", "--out", str(tiny_run), "--solvers", FAST) == 2
    assert "--resume" in capsys.readouterr().err
    out = tmp_path / "o"
    assert _run("--suite", "tiny", "--out", str(out), "--solvers", "deepseek") == 0
    (out / "notes.txt").write_text("mine")
    assert _run("--suite", "tiny", "--out", str(out), "--solvers", "kk_swap", "--overwrite") == 0
    assert set(read_results(out)["solver"]) == {"kk_swap"}
    assert (out / "notes.txt").read_text() == "mine"


def test_resume_after_interrupted_run_runs_only_missing_rows(tmp_path, tiny_run):
    out = tmp_path / "run"
    tasks = suite_tasks(get_suite("tiny"), solvers=FAST.split(","))
    store = ResultStore(out)
    for row in run_tasks(tasks[:2]):              # a run killed after two rows ...
        store.append(row)
    with (out / "results.csv").open("a") as fh:   # ... in the middle of writing the third
        fh.write("olmoe-1b-7b|L2|N2xP8xR72|skewed|T8W4,olmoe-1b-7b,2,64")
    assert len(ResultStore(out, resume=True).rows) == 2
    assert _run("--suite", "tiny", "--out", str(out), "--solvers", FAST, "--resume") == 0
    meta = json.loads((out / "meta.json").read_text())
    assert meta["settings"]["skipped_done"] == 2 and meta["rows"] == 4
    df, ref = read_results(out), read_results(tiny_run)
    keys = ["instance", "solver", "options", "seed"]
    assert sorted(map(tuple, df[keys].values.tolist())) == sorted(map(tuple, ref[keys].values.tolist()))
    merged = df.merge(ref, on=keys, suffixes=("", "_ref"))
    assert (merged["objective"] == merged["objective_ref"]).all()
    # nothing left: a second resume runs no task
    assert _run("--suite", "tiny", "--out", str(out), "--solvers", FAST, "--resume") == 0
    assert len(read_results(out)) == 4


# A runner with one more solver, ``zz_bench_gated`` (its tasks run after deepseek's): deepseek's
# plan, except that its second call blocks (while RUNNER_GATE is set) so a test can kill the
# process at a known point.
_GATED_RUNNER = """
import os, sys, time
import solvers
from solvers.options import policy_option
from solvers.registry import SolverOutput, register, run
calls = []

@register("zz_bench_gated", kind="heuristic", description="test: deepseek, blocking on its second call",
          options=(policy_option(),))
def _gated(problem, options):
    calls.append(1)
    while len(calls) == 2 and os.environ.get("RUNNER_GATE"):
        time.sleep(0.05)
    return SolverOutput(run(problem, "deepseek", {}).plan, "global")

from solvers.bench.run import main
sys.exit(main())
"""


@pytest.mark.slow
def test_a_resumed_run_says_where_the_rows_it_kept_were_made(tmp_path):
    """The kept rows are credited to the run that made them (commit, machine), in meta.json
    and in the summary's first line, not to the commit that resumed."""
    out = tmp_path / "run"
    fast = FAST.split(",")
    assert _run("--suite", "tiny", "--out", str(out), "--solvers", fast[0]) == 0
    first = json.loads((out / "meta.json").read_text())
    first["git"]["commit"] = "0123456789abcdef" * 2 + "01234567"     # as if made at another commit
    first["machine"]["summary"] = "elsewhere, 2 CPUs"
    (out / "meta.json").write_text(json.dumps(first))
    assert _run("--suite", "tiny", "--out", str(out), "--solvers", FAST, "--resume") == 0
    meta = json.loads((out / "meta.json").read_text())
    kept = meta["kept_from"]
    assert kept[0]["rows"] == first["rows"] and kept[0]["commit"].startswith("0123456789ab")
    assert kept[0]["machine"] == "elsewhere, 2 CPUs" and meta["rows"] > first["rows"]
    head = (out / "summary.md").read_text().split("\n")[2]
    assert f"{first['rows']} of these rows were kept by --resume from an earlier run (commit 0123456789ab" in head
    # a run that starts afresh keeps nothing and says nothing of it
    assert _run("--suite", "tiny", "--out", str(tmp_path / "fresh"), "--solvers", fast[0]) == 0
    assert "kept_from" not in json.loads((tmp_path / "fresh" / "meta.json").read_text())


def test_killed_process_resumes(tmp_path):
    """A real run killed with SIGKILL loses nothing: --resume completes it. The kill lands
    while the fourth task blocks (not after some time), so the test does not depend on the
    machine's speed."""
    out = tmp_path / "run"
    cmd = [sys.executable, "-c", _GATED_RUNNER, "--suite", "tiny", "--out", str(out),
           "--solvers", "deepseek,zz_bench_gated", "--no-progress"]
    env = dict(os.environ, RUNNER_GATE="1", PYTHONPATH=str(REPO))
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    csv = out / "results.csv"
    deadline = time.time() + 300                  # a bound on start-up, not a speed assumption
    while time.time() < deadline and proc.poll() is None:
        if csv.is_file() and len(csv.read_text().splitlines()) >= 4:   # header + 3 rows; the 4th blocks
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    kept = len(ResultStore(out, resume=True).rows)
    assert kept == 3
    env.pop("RUNNER_GATE")
    assert subprocess.run(cmd + ["--resume"], cwd=REPO, env=env, capture_output=True).returncode == 0
    df = read_results(out)
    assert len(df) == 4 and json.loads((out / "meta.json").read_text())["settings"]["skipped_done"] == kept


def test_gate_fails_on_gap_threshold(tmp_path, capsys):
    out = tmp_path / "run"
    assert _run("--suite", "tiny", "--out", str(out), "--solvers", "deepseek", "--fail-if-gap-above", "0") == 1
    assert "gap" in capsys.readouterr().err
    df = read_results(out)
    assert (df["gap_mean"] > 0).any()
    # a generous threshold passes on the same rows
    assert _run("--suite", "tiny", "--out", str(out), "--solvers", "deepseek", "--resume",
                "--fail-if-gap-above", "10") == 0


@pytest.mark.parametrize("solver,verdict", [("_bench_overclaim", "bound_violation"),
                                            ("_bench_invalid", "invalid_plan")])
def test_gate_fails_hard_on_wrong_solvers(tmp_path, capsys, wrong_solvers, solver, verdict):
    out = tmp_path / "run"
    assert _run("--suite", "tiny", "--out", str(out), "--solvers", solver) == 1
    err = capsys.readouterr().err
    assert "HARD FAILURE" in err and verdict in err
    df = read_results(out)
    assert (df["termination"] == verdict).all() and (df["status"] == "none").all()
    assert "HARD FAILURES" in (out / "summary.md").read_text()


def test_resumed_run_keeps_failing_on_earlier_hard_failures(tmp_path, capsys, wrong_solvers):
    out = tmp_path / "run"
    assert _run("--suite", "tiny", "--out", str(out), "--solvers", "_bench_overclaim") == 1
    assert _run("--suite", "tiny", "--out", str(out), "--solvers", "_bench_overclaim", "--resume") == 1
    assert "bound_violation" in capsys.readouterr().err
    assert "HARD FAILURES" in (out / "summary.md").read_text()


def test_parquet_only_results_are_results(tmp_path, tiny_run):
    d = tmp_path / "shipped"
    d.mkdir()
    (d / "results.parquet").write_bytes((tiny_run / "results.parquet").read_bytes())  # no CSV
    n = len(read_results(d))
    with pytest.raises(OptionError, match="already holds results"):
        ResultStore(d)
    store = ResultStore(d, resume=True)
    assert len(store.done_keys()) == n and len(read_results(d)) == n


def test_gate_catches_objective_below_another_solvers_proven_bound(tmp_path, capsys, wrong_solvers):
    out = tmp_path / "run"
    assert _run("--suite", "tiny", "--out", str(out), "--solvers", "deepseek,_bench_false_bound") == 1
    err = capsys.readouterr().err
    assert "below the proven lower bound" in err and "deepseek" in err


def test_bounds_of_restricted_models_do_not_bound_other_plans():
    """A bound proved for a restricted model (e.g. no colocation) must not flag a plan outside it."""
    base = {c: "" for c in COLUMNS}
    common = dict(base, instance="i", seed=0, termination="completed", status="feasible", kind="exact")
    forbidden = dict(model_policy="global", model_counts="free", model_colocation="forbidden")
    rows = pd.DataFrame([
        dict(common, solver="x", policy="global", objective_layers="[10.0]", lower_bound_layers="[9.0]",
             duplicates=0, model_bound_layers="[10.0]", **forbidden),
        dict(common, solver="h", kind="heuristic", policy="global", objective_layers="[11.0]",
             lower_bound_layers="[9.0]", duplicates=3),
        dict(common, solver="y", policy="global", objective_layers="[12.0]", lower_bound_layers="[9.0]",
             duplicates=0, model_bound_layers="[12.0]", **forbidden),
    ])
    df, violations = derive(rows)
    # x's duplicate-free plan is below y's bound of the duplicate-free model: a violation
    assert len(violations) == 1 and violations[0].startswith("x ")
    h = df[df["solver"] == "h"].iloc[0]           # h has duplicates: outside that model
    assert h["best_bound"] == 9.0 and h["gap_mean"] == pytest.approx(11 / 9 - 1)
    # a bound for every plan (the lower bound column) does apply to every plan
    rows.loc[2, "lower_bound_layers"] = "[10.5]"
    df, violations = derive(rows)
    assert sorted(v.split()[0] for v in violations) == ["x", "x"]
    assert df[df["solver"] == "h"].iloc[0]["best_bound"] == 10.5


@pytest.mark.parametrize("args,param", [
    (["--suite", "nope"], "suite"),
    (["--suite", "tiny", "--solvers", "nope"], "solvers"),
    (["--suite", "tiny", "--executor", "spark"], "executor"),
    (["--suite", "tiny", "--executor", "local", "--address", "tcp://x:1"], "address"),
    (["--suite", "tiny", "--jobs", "0"], "jobs"),
    (["--suite", "tiny", "--seeds", "a,b"], "seeds"),
    (["--suite", "tiny", "--time-limit", "-1"], "time_limit"),
])
def test_bad_input_is_one_clear_line(tmp_path, capsys, args, param):
    assert _run(*args, "--out", str(tmp_path / "o")) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{param}:" in err and "Traceback" not in err
    assert not (tmp_path / "o" / "results.csv").exists()


def test_exact_solver_outside_the_suites_groups_is_rejected(tmp_path, capsys):
    """ci's heuristic-only group cannot take an exact solver, and naming one that no group runs
    is an error rather than an empty run."""
    from solvers.bench.suites import Group, Suite

    suite = Suite("h", "heuristics only", groups=(Group(get_suite("tiny").groups[0].instances),))
    with pytest.raises(OptionError, match="solvers"):
        suite_tasks(suite, solvers=["cpsat"])


def test_planners_of_a_history_get_the_window_and_every_row_scores_each_held_out_step():
    """run_task passes window 0's steps to a solver with a history option, and scores the
    plan on each step of window 1 (holdout_step_imbalance_mean) as the shared scorer does;
    the report's out-of-sample table lines the solvers up on those instances."""
    inst = get_suite("tiny").groups[0].instances[0]
    loaded = load_instance(inst.id, 0)
    assert loaded.plan_steps.shape[0] == inst.window and loaded.eval_steps.shape[0] == inst.window
    assert torch.allclose(loaded.plan_steps.sum(0), loaded.problem.weights.to(torch.float64))
    rows = [run_task(Task(inst.id, name, {}, 0)) for name in ("deepseek", "risk_aware")]
    ra = solvers.solve(loaded.problem, "risk_aware", history=loaded.plan_steps)
    want = solvers.score(loaded.eval_problem, ra.plan, tokens=loaded.eval_steps).imbalance_mean
    assert rows[1]["holdout_step_imbalance_mean"] == pytest.approx(want)
    assert rows[0]["holdout_step_imbalance_mean"] >= 1.0
    assert all(set(r) <= set(COLUMNS) for r in rows)
    table = holdout_table(pd.DataFrame(rows))
    assert len(table) == 1 and {c for c in table.columns if c.startswith(("deepseek", "risk_aware"))}
    assert "risk_aware" in get_suite("full").groups[2].solvers        # the full suite's out-of-sample group
    assert {t.solver for t in suite_tasks(get_suite("full")) if "shifting-mix" in t.instance} >= {
        "deepseek", "kk_swap", "risk_aware", "ewma", "robust_sum"}


def test_rows_kept_from_a_stopped_run_say_it_was_stopped():
    """A run killed mid-way never wrote its finish time: the resumed summary says it was stopped
    (and when it started), not 'finished ?'."""
    from solvers.bench.report import _ended
    from solvers.bench.run import kept_from

    stopped = kept_from({"started": "2026-11-29T10:00:00+00:00", "finished": None}, 7)[0]
    assert stopped["rows"] == 7 and _ended(stopped) == "stopped before it finished, started 2026-11-29T10:00:00+00:00"
    done = kept_from({"started": "2026-11-29T10:00:00+00:00", "finished": "2026-11-29T10:05:00+00:00"}, 7)[0]
    assert _ended(done) == "finished 2026-11-29T10:05:00+00:00"
