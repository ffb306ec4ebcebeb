"""Why a solver stopped (Termination) is kept apart from what it has (SolutionStatus)."""
import numpy as np
import pytest
import torch

import solvers.registry as registry
from solvers import Plan, Problem, SolutionStatus, SolverOutput, Termination, rebalance_experts, register, solve

W = [[90, 132, 40, 61, 104, 165, 39, 4, 73, 56, 183, 86],
     [20, 107, 104, 64, 19, 197, 187, 157, 172, 86, 16, 27]]


@pytest.fixture
def temporary_solver():
    names = []

    def add(name, fn, kind="heuristic"):
        register(name, kind=kind, description="test solver")(fn)
        names.append(name)

    yield add
    for n in names:
        registry._REGISTRY.pop(n, None)


def _greedy(problem):
    return Plan(*rebalance_experts(problem.weights, problem.num_replicas, 1, 1, problem.num_gpus))


def test_the_enums_name_why_and_what():
    assert {t.value for t in Termination} == {"optimal", "completed", "time_limit", "infeasible", "error"}
    assert {s.value for s in SolutionStatus} == {"proven_optimal", "optimal_in_model", "feasible", "none"}
    assert str(Termination.COMPLETED) == "completed" and str(SolutionStatus.NONE) == "none"


@pytest.mark.parametrize("weights,status", [(torch.full((2, 8), 5.0), SolutionStatus.PROVEN_OPTIMAL),
                                            (W, SolutionStatus.FEASIBLE)])
def test_a_heuristic_completes_and_its_plan_is_graded(weights, status):
    # 8 equal experts on 8 GPUs: DeepSeek's plan meets the bound; the README loads: it does not
    p = Problem(weights, 16, 1, 1, 8)
    res = solve(p, "deepseek", policy="global")
    assert res.termination is Termination.COMPLETED and res.status is status
    assert res.summary()["termination"] == "completed" and res.summary()["status"] == str(status)


@pytest.mark.parametrize("said,status", [
    (Termination.TIME_LIMIT, SolutionStatus.FEASIBLE),      # the incumbent of a stopped solve
    (Termination.OPTIMAL, SolutionStatus.FEASIBLE),         # a solver's word is not a proof: graded here
    (None, SolutionStatus.FEASIBLE)])
def test_termination_is_the_solvers_word_status_is_graded(temporary_solver, said, status):
    temporary_solver("test-term-said", lambda problem, options: SolverOutput(_greedy(problem), "global", termination=said))
    res = solve(Problem(W, 16, 1, 1, 8), "test-term-said")
    assert res.termination is (said or Termination.COMPLETED) and res.status is status
    assert res.plan is not None


@pytest.mark.parametrize("said,why", [(Termination.INFEASIBLE, Termination.INFEASIBLE),
                                      (Termination.ERROR, Termination.ERROR),
                                      (Termination.TIME_LIMIT, Termination.TIME_LIMIT),
                                      (None, Termination.ERROR)])      # no plan and no word: an error
def test_no_plan_has_status_none(temporary_solver, said, why):
    temporary_solver("test-term-none", lambda problem, options: SolverOutput(None, "global", termination=said,
                                                                     message="nothing"))
    res = solve(Problem(W, 16, 1, 1, 8), "test-term-none")
    assert res.termination is why and res.status is SolutionStatus.NONE and res.plan is None
    assert res.summary()["status"] == "none"


def test_a_crash_is_error_with_status_none(temporary_solver):
    def crash(problem, options):
        raise RuntimeError("boom")

    temporary_solver("test-term-crash", crash)
    res = solve(Problem(W, 16, 1, 1, 8), "test-term-crash")
    assert res.termination is Termination.ERROR and res.status is SolutionStatus.NONE and "boom" in res.message


# The exact driver: why it stopped, from the layers' backend statuses (a fake backend) ---------

def _fake_layers(monkeypatch, statuses):
    """cpsat's layer solver replaced: layer l answers ``statuses[l]`` with the optimal
    replication counts (one replica per expert here), or nothing for infeasible / error."""
    pytest.importorskip("ortools")
    from solvers.exact import cpsat

    def layer(lm, **kwargs):
        st = statuses[len(calls)]
        calls.append(st)
        if st in ("infeasible", "error"):
            return LayerResult(st, message=f"fake {st}")
        counts = np.ones(len(lm.w), dtype=np.int64)
        return LayerResult(st, counts=counts, bound=float(np.max(lm.w)))

    from solvers.exact.model import LayerResult
    calls = []
    monkeypatch.setattr(cpsat, "solve_layer", layer)
    return calls


@pytest.mark.parametrize("statuses,why", [(["optimal", "optimal"], Termination.OPTIMAL),
                                          (["optimal", "feasible"], Termination.COMPLETED),   # stopped at its gap
                                          (["time_limit", "optimal"], Termination.TIME_LIMIT)])
def test_exact_termination_from_the_layers(monkeypatch, statuses, why):
    calls = _fake_layers(monkeypatch, statuses)
    p = Problem([[4.0, 3.0, 2.0, 1.0], [1.0, 1.0, 1.0, 5.0]], 4, 1, 1, 4)   # one slot per GPU
    res = solve(p, "cpsat", model="replication", time_limit=10.0)
    assert calls == statuses
    assert res.termination is why
    # the plan meets the bound on every layer whatever the backend said
    assert res.status is SolutionStatus.PROVEN_OPTIMAL


@pytest.mark.parametrize("bad", ["infeasible", "error"])
def test_exact_infeasible_or_error_has_no_plan(monkeypatch, bad):
    _fake_layers(monkeypatch, ["optimal", bad])
    res = solve(Problem([[4.0, 3.0, 2.0, 1.0]] * 2, 4, 1, 1, 4), "cpsat", model="replication", time_limit=10.0)
    assert str(res.termination) == bad and res.status is SolutionStatus.NONE and res.plan is None
    assert "layer 1" in res.message


# Shipped benchmark rows ---------------------------------------------------------------------

def test_shipped_results_read_in_the_new_layout():
    from solvers.bench.recommend import SHIPPED_RESULTS
    from solvers.bench.store import read_results

    df = read_results(SHIPPED_RESULTS)
    assert set(df["termination"]) <= {t.value for t in Termination} | {"simulated", "bad_input"}
    assert set(df["status"]) <= {s.value for s in SolutionStatus} | {""}
    solved = df[df["termination"] != "simulated"]
    assert (solved["status"] != "none").sum() == solved["objective"].notna().sum()
