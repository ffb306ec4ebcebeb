"""Time-robust planners: their objectives on the window's steps, policies kept, forecasts,
option schemas and bad input."""
from __future__ import annotations

import math

import pytest
import torch

from solvers import OptionError, Problem, get_solver, solve
from solvers.dynamics.robust import _excluding_two, buckets_of, ewma_weights, trend_forecast
from solvers.dynamics import step_stats


def _history(W=6, L=3, E=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    base = torch.exp(torch.randn(L, E, generator=g)) * 50
    return torch.stack([base * torch.exp(0.4 * torch.randn(L, E, generator=g)) for _ in range(W)])


def _per_step_max(hist, plan, P):
    """[W, L] max GPU load per step (the scorer's arithmetic)."""
    imb, _, _, _ = step_stats(hist, plan, P)
    w = hist.to(torch.float64)
    per = w.gather(2, plan.phy2log.expand(w.shape[0], *plan.phy2log.shape)) / plan.logcnt.gather(
        1, plan.phy2log).to(torch.float64)
    return per.view(w.shape[0], w.shape[1], P, -1).sum(-1).max(-1).values


@pytest.mark.parametrize("objective", ["sum", "max"])
def test_robust_planners_never_worse_than_kk_swap_on_their_objective(objective):
    hist = _history()
    p = Problem(hist.sum(0), 24, 1, 1, 8)
    start = solve(p, "kk_swap").plan
    res = solve(p, f"robust_{objective}", history=hist)
    agg = (lambda m: m.sum(0)) if objective == "sum" else (lambda m: m.max(0).values)
    mine, base = agg(_per_step_max(hist, res.plan, 8)), agg(_per_step_max(hist, start, 8))
    assert bool((mine <= base * (1 + 1e-12)).all())
    assert torch.equal(res.plan.logcnt, start.logcnt)            # counts are the sum's


def test_robust_search_improves_some_layer():
    hist = _history(W=8, L=6, E=24, seed=2)
    p = Problem(hist.sum(0), 32, 1, 1, 8)
    res = solve(p, "robust_sum", history=hist)
    start = solve(p, "kk_swap").plan
    assert float(_per_step_max(hist, res.plan, 8).sum()) < float(_per_step_max(hist, start, 8).sum())


def test_hierarchical_robust_plan_keeps_groups_on_their_node():
    hist = _history(E=16)
    p = Problem(hist.sum(0), 24, 4, 2, 8)
    res = solve(p, "robust_sum", history=hist, policy="hierarchical")
    node = torch.arange(24) // 12
    for layer in range(3):
        for k in range(4):
            assert node[res.plan.phy2log[layer] // 4 == k].unique().numel() == 1


def test_excluding_two_is_the_max_over_the_other_gpus():
    g = torch.Generator().manual_seed(0)
    load = torch.rand(2, 5, 4, generator=g, dtype=torch.float64)       # [L, B, P]
    vals, idx = load.topk(3, dim=-1)
    gpu = torch.tensor([1, 3])
    got = _excluding_two(vals, idx, gpu, 4)
    for l in range(2):
        for b in range(5):
            for h in range(4):
                others = [load[l, b, k] for k in range(4) if k not in (int(gpu[l]), h)]
                assert math.isclose(float(got[l, b, h]), float(max(others)))


def test_ewma_and_forecast_on_hand_made_histories():
    hist = torch.tensor([[[1.0, 8.0]], [[2.0, 4.0]], [[3.0, 2.0]]], dtype=torch.float64)   # [W=3, L=1, E=2]
    w = ewma_weights(hist, halflife=1.0)
    assert torch.allclose(w, (hist[0] * 0.25 + hist[1] * 0.5 + hist[2]) / 1.75)
    f = trend_forecast(hist, damping=1.0)
    assert math.isclose(float(f[0, 0]), 2.0 + 1.0 * 3)                         # mean + slope x W
    assert math.isclose(float(f[0, 1]), max(14 / 3 - 3 * 3, 0.25 * 14 / 3))     # floored cooling expert
    b = buckets_of(torch.arange(10.0).view(10, 1, 1), 4)
    assert b.shape[0] == 4 and float(b.sum()) == 45.0


def test_planners_are_registered_with_the_shared_schema():
    for name in ("robust_sum", "robust_max", "ewma", "forecast"):
        spec = get_solver(name)
        assert "policy" in spec.options and "history" in spec.options


def test_every_planner_runs_without_history():
    p = Problem(_history()[0], 24, 1, 1, 8)
    for name in ("robust_sum", "robust_max", "ewma", "forecast"):
        assert solve(p, name).plan is not None


def test_history_of_another_shape_names_the_parameter():
    p = Problem(_history()[0], 24, 1, 1, 8)
    with pytest.raises(OptionError, match="^history:"):
        solve(p, "robust_sum", history=torch.ones(4, 2, 16))
    with pytest.raises(OptionError, match="^history:"):
        solve(p, "ewma", history=-torch.ones(4, 3, 16))
    with pytest.raises(OptionError, match="^halflife:"):
        solve(p, "ewma", halflife=0)
