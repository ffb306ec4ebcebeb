"""solve(): registry look-up, option checks, shared scoring, bounds and the bound gate."""
import pytest
import torch

import solvers.registry as registry
from solvers import (BoundViolation, InvalidSolverPlan, OptionError, Plan, Problem, SolutionStatus, SolverOutput,
                     Termination, get_solver, lower_bound, rebalance_experts, register, solve, solver_names)

W = [[90, 132, 40, 61, 104, 165, 39, 4, 73, 56, 183, 86],
     [20, 107, 104, 64, 19, 197, 187, 157, 172, 86, 16, 27]]


@pytest.fixture
def temporary_solver():
    names = []

    def add(name, fn, **kw):
        register(name, kind="heuristic", description="test solver", **kw)(fn)
        names.append(name)

    yield add
    for n in names:
        registry._REGISTRY.pop(n, None)


def test_deepseek_is_registered_with_its_options():
    assert "deepseek" in solver_names()
    spec = get_solver("deepseek")
    assert spec.kind == "heuristic" and spec.options == ("policy",) and spec.is_available()


def test_result_is_scored_by_the_shared_scorer():
    problem = Problem(W, 16, 4, 2, 8)
    res = solve(problem, "deepseek")
    assert res.termination is Termination.COMPLETED and res.status is SolutionStatus.FEASIBLE
    assert res.policy == "hierarchical"
    expected = Plan(*rebalance_experts(W, 16, 4, 2, 8))
    assert torch.equal(res.plan.phy2log, expected.phy2log)
    assert res.objective.tolist() == res.score.gpu_load.max(1).values.tolist()
    assert torch.equal(res.lower_bound, lower_bound(problem))
    assert bool((res.gap >= 0).all()) and res.gap_max == pytest.approx(float(res.gap.max()))
    assert res.wall_time > 0
    assert res.summary()["termination"] == "completed" and res.summary()["status"] == "feasible"


def test_optimal_when_the_bound_is_met():
    # 8 equal experts on 8 GPUs: every GPU carries the mean, which is the average bound
    res = solve(Problem(torch.full((3, 8), 5.0), 8, 1, 1, 8))
    # a heuristic ran to its end (why it stopped); its plan meets the bound (what it has)
    assert res.termination is Termination.COMPLETED and res.status is SolutionStatus.PROVEN_OPTIMAL
    assert res.summary()["status"] == "proven_optimal" and res.gap_max == pytest.approx(0.0, abs=1e-9)


def test_unknown_solver_and_option():
    problem = Problem(W, 16, 4, 2, 8)
    with pytest.raises(OptionError, match="unknown solver 'nope'") as err:
        solve(problem, "nope")
    assert err.value.param == "solver"
    with pytest.raises(OptionError, match="time_limt") as err:
        solve(problem, "deepseek", time_limt=3)
    assert err.value.param == "time_limt"
    with pytest.raises(OptionError, match="problem"):
        solve(W, "deepseek")


def test_solver_by_keyword_and_the_package_attribute():
    """solve(problem, solver="x"), the call most people type first, runs solver x; the
    package's ``solve`` is the function whatever was imported before (no module of that name)."""
    import importlib

    import solvers
    problem = Problem(W, 16, 4, 2, 8)
    assert solve(problem, solver="kk_swap").solver == "kk_swap"
    importlib.import_module("solvers.entry")
    assert callable(solvers.solve) and solvers.solve is solve
    assert type(solvers) is type(importlib)          # a plain module: no class swap


def test_plan_below_a_proven_bound_fails_loudly(temporary_solver):
    def lying(problem, options):
        plan = Plan(*rebalance_experts(problem.weights, problem.num_replicas, 1, 1, problem.num_gpus))
        return SolverOutput(plan, "global", bound=torch.full((problem.num_layers,), 1e9))

    temporary_solver("test-lying-bound", lying)
    with pytest.raises(BoundViolation, match="below the proven lower bound"):
        solve(Problem(W, 16, 4, 2, 8), "test-lying-bound")


def test_backend_crash_is_an_error_result(temporary_solver):
    def crashing(problem, options):
        raise RuntimeError("backend exploded")

    temporary_solver("test-crash", crashing)
    res = solve(Problem(W, 16, 4, 2, 8), "test-crash")
    assert res.termination is Termination.ERROR and res.status is SolutionStatus.NONE and res.plan is None
    assert "backend exploded" in res.message


def test_unavailable_solver_says_what_to_install(temporary_solver):
    temporary_solver("test-missing", lambda problem, options: None, is_available=lambda: False,
                     requires="pip install something")
    with pytest.raises(OptionError, match="pip install something"):
        solve(Problem(W, 16, 4, 2, 8), "test-missing")


def test_previous_plan_adds_moves():
    problem = Problem(W, 16, 4, 2, 8)
    first = solve(problem)
    again = solve(problem, previous=first.plan, expert_bytes=10)
    assert again.score.moves == 0 and again.score.moves_bytes == 0
    other = solve(problem, policy="global", previous=first.plan)
    assert other.score.moves > 0


def test_invalid_plan_from_a_solver_is_a_solver_bug(temporary_solver, capsys):
    def broken(problem, options):
        p2l = torch.zeros(problem.num_layers, problem.num_replicas, dtype=torch.int64)  # only expert 0
        return SolverOutput(Plan.from_phy2log(p2l, problem.num_experts), "global")

    temporary_solver("test-broken", broken)
    with pytest.raises(InvalidSolverPlan, match="invalid plan") as err:
        solve(Problem(W, 16, 4, 2, 8), "test-broken")
    assert not isinstance(err.value, ValueError)   # not blamed on the user's input


def test_cli_reports_a_solver_bug_in_one_line_exit_1(temporary_solver, capsys, tmp_path):
    from solvers.cli import main

    def broken(problem, options):
        p2l = torch.zeros(problem.num_layers, problem.num_replicas, dtype=torch.int64)
        return SolverOutput(Plan.from_phy2log(p2l, problem.num_experts), "global")

    temporary_solver("test-broken-cli", broken)
    code = main(["plan", "--loads", "readme-example", "--replicas", "16", "--gpus", "8",
                 "--solver", "test-broken-cli", "--out", str(tmp_path / "p.json")])
    err = capsys.readouterr().err
    assert code == 1 and err.startswith("eplb: internal error:") and err.count("\n") == 1


def test_one_result_row_for_compare_the_app_and_the_benchmark():
    """The gap within policy is graded once (SolveResult.policy_bound) and every front end
    flattens a result through SolveResult.summary: same names, same numbers."""
    from app.compute import Outcome, compare_row, score_holdout
    from solvers.bounds import structure_bound
    from solvers.compare import compare_solvers, table_rows
    from solvers.result import ratio_gap

    g = torch.Generator().manual_seed(3)
    w = torch.rand(3, 16, generator=g, dtype=torch.float64) * 100
    later = torch.rand(3, 16, generator=g, dtype=torch.float64) * 100
    problem = Problem(w, num_replicas=24, num_groups=4, num_nodes=2, num_gpus=4)
    held = problem.with_weights(later)
    res = solve(problem, "deepseek", policy="hierarchical")
    within = torch.maximum(structure_bound(problem, res.plan), res.lower_bound)
    assert torch.allclose(res.gap_in_policy, ratio_gap(res.objective, within))
    assert bool((res.gap_in_policy <= res.gap + 1e-12).all())
    cli = table_rows(compare_solvers(problem, ["deepseek"], policies=["hierarchical"], holdout=held))[0]
    app = compare_row("deepseek", Outcome(res), score_holdout(held, res.plan))
    for key in ("imbalance_mean", "gap_mean", "gap_in_policy_mean", "holdout_imbalance_mean", "policy"):
        assert cli[key] == pytest.approx(app[key]), key
