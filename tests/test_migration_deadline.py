"""The migration's exact pass keeps its time limit: a layer's model building stops once the
limit has passed, and the pass starts a layer only while the time left covers the limit it
gives plus the largest overshoot seen so far. Time is a fake clock (``solvers.clock``);
nothing here depends on the machine's speed."""
from __future__ import annotations

import numpy as np
import torch

from solvers import Problem, solve
from solvers.clock import FakeClock, fake_clock
from solvers.replan.exact import BUILD_TIME_LIMIT, ExactLayer, solve_layer
from solvers.replan import solver as api


def _problem(layers: int = 8) -> Problem:
    g = torch.Generator().manual_seed(3)
    return Problem(torch.round(torch.exp(torch.randn(layers, 16, generator=g)) * 100), 24, 1, 1, 4)


def test_layer_building_stops_at_its_time_limit():
    """Every clock reading costs 1 s and the limit is 2 s: building stops within the first
    experts, without a solver call; with time the same layer is solved."""
    w = np.array([50.0, 30, 20, 10, 5, 5, 5, 5])
    old = np.repeat(np.arange(8), 2)                     # 16 slots on 4 GPUs
    lo, hi = np.full(8, 1), np.full(8, 4)
    with fake_clock(FakeClock(step=1.0)):
        res = solve_layer(w, old, 40.0, 4, lo=lo, hi=hi, time_limit=2.0)
    assert res.status == BUILD_TIME_LIMIT and res.phy2log is None
    res = solve_layer(w, old, 40.0, 4, lo=lo, hi=hi, time_limit=10.0)
    assert res.status in ("OPTIMAL", "FEASIBLE") and res.phy2log is not None


def test_exact_pass_stops_starting_layers_once_a_call_overshoots(monkeypatch):
    """Each call costs its limit plus 0.5 fake seconds of building (8 layers, time_limit 1 s):
    after the first call the time left does not cover another, so the pass ends 0.625 s in
    (the old rule gave every layer a share and ran past the limit by 8 x 0.5 s); the layers
    not run keep the heuristic's plan."""
    problem = _problem()
    current = solve(problem, "deepseek").plan
    clock = FakeClock()
    calls = []

    def slow_layer(*args, time_limit, **kwargs):
        calls.append(time_limit)
        clock.advance(time_limit + 0.5)
        return ExactLayer(None, None, 0, "UNKNOWN", False)

    monkeypatch.setattr(api, "solve_layer", slow_layer)
    with fake_clock(clock):
        heuristic = solve(problem, "migration", current=current, method="heuristic")
        t0 = clock.now
        out = solve(problem, "migration", current=current, method="exact", time_limit=1.0)
        spent = clock.now - t0
    assert len(calls) == 1 and abs(calls[0] - 1.0 / 8) < 1e-9
    assert spent <= 1.0
    statuses = [r["status"] for r in out.info["exact_layers"]]
    assert statuses == ["UNKNOWN"] + ["NOT_RUN"] * 7
    assert torch.equal(out.plan.phy2log, heuristic.plan.phy2log)


def test_the_time_limit_is_the_whole_calls_the_exact_pass_gets_what_the_heuristic_left(monkeypatch):
    """A fresh plan that takes 0.6 of a 1 s limit (the fake clock jumps while it runs) leaves the
    exact pass 0.4 s: its layers share that, not the whole second."""
    problem = _problem()
    current = solve(problem, "deepseek").plan
    clock = FakeClock()
    fresh = api.fresh_plan
    calls = []

    def slow_fresh(*args, **kwargs):
        out = fresh(*args, **kwargs)
        clock.advance(0.6)
        return out

    def layer(*args, time_limit, **kwargs):          # each call uses all of its limit
        calls.append(time_limit)
        clock.advance(time_limit)
        return ExactLayer(None, None, 0, "UNKNOWN", False)

    monkeypatch.setattr(api, "fresh_plan", slow_fresh)
    monkeypatch.setattr(api, "solve_layer", layer)
    with fake_clock(clock):
        solve(problem, "migration", current=current, method="exact", time_limit=1.0)
    assert abs(calls[0] - 0.4 / 8) < 1e-9 and sum(calls) <= 0.4 + 1e-9, calls   # (1 s / 8 before)
