"""The work model (solvers.work): every solver declares one, a problem whose estimate exceeds
the work cap is refused before any work, naming the cap and the estimate, in the library,
the registry's composition, a comparison and the CLI. Estimates are injected (a lowered
cap, a registered solver with a huge coefficient): no test here times anything."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import solvers.work
from solvers import Problem, solve
from solvers.cli import main
from solvers.compare import compare_solvers
from solvers.errors import ProblemError
from solvers.registry import _REGISTRY, get_solver, register, run, solver_names, work_shape
from solvers.work import TERMS, Shape, WorkModel


def _problem(L=2, E=8, R=16, P=2) -> Problem:
    return Problem(torch.arange(1, L * E + 1, dtype=torch.float64).view(L, E), R, 1, 1, P)


@pytest.fixture
def cap(monkeypatch):
    """Set the work cap (seconds) for one test."""
    def set_cap(seconds: float) -> None:
        monkeypatch.setattr(solvers.work, "WORK_CAP_SECONDS", seconds)
    return set_cap


def test_every_registered_solver_declares_a_work_model():
    missing = [n for n in solver_names() if get_solver(n).work is None]
    assert missing == []
    for n in solver_names():
        spec = get_solver(n)
        has_limit = any(o.role == "time_limit" for o in spec.schema)
        # a model that says the time limit bounds the rest needs a time limit to bound it
        assert not spec.work.time_limited or has_limit, n


def test_a_problem_over_the_cap_is_refused_naming_cap_and_estimate(cap):
    p = _problem()
    est = get_solver("kk_swap").estimate(p, get_solver("kk_swap").parse({}))
    assert est > 0
    cap(est / 2)
    with pytest.raises(ProblemError, match=r"^problem: solver 'kk_swap' needs about .* over the work cap of"):
        solve(p, "kk_swap")
    with pytest.raises(ProblemError, match="work cap"):
        run(p, "kk_swap")                          # composition checks it too
    cap(est * 2)
    assert solve(p, "kk_swap").plan is not None


def test_options_enter_the_estimate(cap):
    p = _problem()
    spec = get_solver("kk_swap")
    few, many = spec.estimate(p, spec.parse({"steps": 1})), spec.estimate(p, spec.parse({"steps": 100_000}))
    assert many > few
    cap((few + many) / 2)
    assert solve(p, "kk_swap", steps=1).plan is not None
    with pytest.raises(ProblemError, match="L\\*R\\*C\\*steps"):
        solve(p, "kk_swap", steps=100_000)


def test_a_base_solver_adds_its_estimate():
    p = _problem()
    own = get_solver("migration").work.seconds(work_shape(p), get_solver("migration").parse({}))
    kk = get_solver("kk_swap").estimate(p, get_solver("kk_swap").parse({}))
    total = get_solver("migration").estimate(p, get_solver("migration").parse({"base": "kk_swap"}))
    assert total == pytest.approx(own + kk)


def test_included_work_is_added():
    """joint runs kk_swap's packing first: its estimate is at least kk_swap's, whatever its own terms."""
    p = Problem(torch.ones(2, 32, dtype=torch.float64), 65536, 1, 1, 2)
    joint, kk = get_solver("joint"), get_solver("kk_swap")
    assert joint.work.includes == ("kk_swap",)
    own = joint.work.seconds(work_shape(p), joint.parse({}))
    assert joint.estimate(p, joint.parse({})) == pytest.approx(own + kk.estimate(p, kk.parse({})))


def test_the_window_length_enters_the_shape():
    p = _problem()
    hist = torch.ones(12, 2, 8)
    assert work_shape(p, get_solver("robust_sum").parse({"history": hist})).steps == 12
    assert work_shape(p, get_solver("robust_sum").parse({})).steps == 1


def test_an_injected_estimate_refuses_and_a_time_limit_is_named():
    @register("_work_huge", kind="heuristic", description="x", work=WorkModel.of({"L*R*S": 1e6}, time_limited=False))
    def _huge(problem, options):
        raise AssertionError("ran past its work cap")

    try:
        with pytest.raises(ProblemError, match=r"needs about .* days of work .*most of it L\*R\*S"):
            solve(_problem(), "_work_huge")
        with pytest.raises(ProblemError, match="work cap"):
            compare_solvers(_problem(), ["deepseek", "_work_huge"])   # before the first run
    finally:
        _REGISTRY.pop("_work_huge", None)


def test_the_cli_refuses_in_one_line(cap, capsys, tmp_path):
    np.savez(tmp_path / "w.npz", loads=np.arange(1, 17, dtype=np.float64).reshape(2, 8))
    cap(1e-9)
    rc = main(["plan", "--loads", str(tmp_path / "w.npz"), "--replicas", "16", "--gpus", "2",
               "--solver", "kk_swap", "--out", str(tmp_path / "p.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "work cap" in err[0]
    assert not (tmp_path / "p.json").exists()


def test_the_issue_shape_is_refused_by_the_measured_model():
    """kk_swap on 2 layers x 32 experts with 65536 slots on 2 GPUs ran past 600 s (two torch
    threads): the model (no injection) refuses it and joint at once, naming the term."""
    w = torch.rand(2, 32, generator=torch.Generator().manual_seed(0), dtype=torch.float64) + 0.5
    big = Problem(w, 65536, 1, 1, 2)
    with pytest.raises(ProblemError, match=r"most of it L\*S\^2\), over the work cap"):
        solve(big, "kk_swap")
    with pytest.raises(ProblemError, match="work cap"):
        solve(big, "joint")


def test_typical_shapes_are_accepted_by_every_solver():
    """DeepSeek-V3 on 4 nodes x 8 GPUs, 58 layers, a 16-step window: accepted by every solver."""
    shape = Shape(58, 256, 288, 32, 4, 9, 16)
    for n in solver_names():
        spec = get_solver(n)
        assert spec.work.seconds(shape, spec.parse({})) < solvers.work.WORK_CAP_SECONDS, n


def test_work_models_are_checked_when_declared():
    with pytest.raises(ValueError, match="unknown work terms"):
        WorkModel.of({"L^9": 1.0})
    with pytest.raises(ValueError, match="finite"):
        WorkModel.of({"L": float("nan")})
    m = WorkModel.of({"1": 0.5, "L*R": 1e-3})
    assert m.seconds(Shape(2, 8, 16, 2, 1, 8)) == pytest.approx(0.5 + 32e-3)
    assert m.formula == "0.5 + 0.001*L*R"
    assert set(m.terms) <= set(TERMS)



def test_the_app_runs_long_estimates_in_the_stoppable_worker():
    """A heuristic without a time limit goes to the child process that Stop ends when its
    work estimate is above the in-process limit; a small one stays in the server."""
    from app import worker

    small = _problem()
    big = Problem(torch.ones(58, 256, dtype=torch.float64), 16384, 1, 1, 64)
    assert get_solver("kk_swap").estimate(big) > worker.IN_PROCESS_LIMIT_S
    assert worker.stoppable("kk_swap", {}, big) and not worker.stoppable("kk_swap", {}, small)
    assert not worker.stoppable("kk_swap", {})                     # no problem: the time limit alone decides
    best = get_solver("best")
    assert worker.expected_seconds(small, "best", {"time_limit": 5.0}) == pytest.approx(
        best.estimate(small, best.parse({"time_limit": 5.0})) + 5.0)
    assert worker.expected_seconds(small, "kk_swap", {"no_such_option": 1}) == 0.0
