"""The rebalancing simulator: per-step scores under the plan in force, rebalance rules,
moves from the shared scorer, totals; the sweep's frontier and suggestion."""
from __future__ import annotations

import math

import pytest
import torch

from solvers import OptionError, Problem, score, solve
from solvers.dynamics import simulate, step_stats
from solvers.dynamics.sweep import frontier, suggest, sweep

SHAPE = dict(num_replicas=8, num_groups=1, num_nodes=1, num_gpus=4)


def _trace(T=12, L=2, E=6, seed=0, drift=0.3):
    g = torch.Generator().manual_seed(seed)
    base = torch.rand(L, E, generator=g) * 100 + 5
    steps = []
    for t in range(T):
        base = base * torch.exp(drift * torch.randn(L, E, generator=g))
        steps.append(base.round())
    return torch.stack(steps).to(torch.int64)


def test_step_stats_match_the_shared_scorer():
    loads = _trace(T=4)
    plan = solve(Problem(loads[0], **SHAPE), "deepseek").plan
    imb, worst, lost, _ = step_stats(loads, plan, 4)
    for t in range(4):
        sc = score(Problem(loads[t], **SHAPE), plan)
        assert math.isclose(float(imb[t]), sc.imbalance_mean, rel_tol=1e-12)
        assert math.isclose(float(worst[t]), sc.imbalance_worst, rel_tol=1e-12)
        assert math.isclose(float(lost[t]), float(((sc.max_load - sc.mean_load) * 4).sum()), rel_tol=1e-12)


def test_periodic_replay_scores_every_step_under_the_plan_in_force():
    loads = _trace(T=10)
    res = simulate(loads, **SHAPE, every=3, window=2, expert_bytes=5)
    assert torch.isnan(res.imbalance[:2]).all()
    assert [r["step"] for r in res.rebalances] == [5, 8]
    plan = solve(Problem(loads[0:2].sum(0), **SHAPE), "deepseek").plan
    for step in res.rebalances:                                   # replay by hand
        t = step["step"]
        new = solve(Problem(loads[t - 2:t].sum(0), **SHAPE), "deepseek").plan
        assert step["moves"] == score(Problem(loads[t - 2:t].sum(0), **SHAPE), new, previous=plan).moves
        assert step["bytes"] == 5 * step["moves"]
        plan = new
    last = solve(Problem(loads[6:8].sum(0), **SHAPE), "deepseek").plan
    assert math.isclose(float(res.imbalance[9]), score(Problem(loads[9], **SHAPE), last).imbalance_mean,
                        rel_tol=1e-12)
    tot = res.totals()
    assert tot["rebalances"] == 2 and tot["steps_scored"] == 8
    assert tot["total_bytes"] == 5 * tot["total_moves"]
    assert math.isclose(tot["mean_imbalance"], float(res.imbalance[2:].mean()), rel_tol=1e-12)
    rows = res.step_rows()
    assert rows[-1]["cumulative_moves"] == tot["total_moves"]


def test_threshold_rebalances_after_each_step_above_it():
    loads = _trace(T=8)
    res = simulate(loads, **SHAPE, threshold=1.0, window=2)      # every step is above 1.0 - tiny
    over = res.imbalance[2:] > 1.0
    assert len(res.rebalances) == int(over[:-1].sum())
    assert all(r["reason"] == "threshold" for r in res.rebalances)
    never = simulate(loads, **SHAPE, threshold=100.0, window=2)
    assert never.totals()["rebalances"] == 0


def test_migration_aware_replay_moves_fewer_replicas():
    loads = _trace(T=30, L=4, E=16, seed=3, drift=0.1)
    shape = dict(num_replicas=24, num_groups=1, num_nodes=1, num_gpus=8)
    plain = simulate(loads, **shape, every=4)
    aware = simulate(loads, **shape, every=4, migration_slack=0.05)
    assert aware.totals()["total_moves"] < plain.totals()["total_moves"]
    assert aware.totals()["rebalances"] == plain.totals()["rebalances"]


def test_time_robust_planner_gets_the_window_steps():
    loads = _trace(T=10)
    res = simulate(loads, **SHAPE, every=4, solver="robust_sum")
    assert res.totals()["rebalances"] == 1


def test_sweep_frontier_and_suggestion():
    loads = _trace(T=20, L=2, E=8, seed=5)
    shape = dict(num_replicas=12, num_groups=1, num_nodes=1, num_gpus=4)
    rows = sweep(loads, periods=[5], thresholds=[1.2], slacks=[None, 0.05], expert_bytes=1, **shape)
    assert len(rows) == 4
    front = frontier(rows)
    for r in rows:                                              # nothing beats a frontier row on both
        for f in front:
            assert not (r["total_bytes"] < f["total_bytes"] and r["mean_imbalance"] < f["mean_imbalance"])
    pick = suggest(rows, front[0]["total_bytes"])
    assert pick is not None and pick["total_bytes"] <= front[0]["total_bytes"]
    assert suggest(rows, -1) is None


@pytest.mark.parametrize("kwargs, param", [
    (dict(), "every"),
    (dict(every=0), "every"),
    (dict(every=2, window=12), "window"),
    (dict(threshold=0.5), "threshold"),
    (dict(every=2, migration_slack=-0.1), "migration_slack"),
    (dict(every=2, expert_bytes=-1), "expert_bytes"),
])
def test_bad_input_names_the_parameter(kwargs, param):
    with pytest.raises(OptionError, match=f"^{param}:"):
        simulate(_trace(T=12), **SHAPE, **kwargs)


def test_loads_must_be_a_trace():
    with pytest.raises(OptionError, match="^loads:"):
        simulate(torch.ones(2, 6), **SHAPE, every=1)


def test_one_settings_object_is_the_keywords_and_its_schema_makes_the_flags():
    from solvers.cli import build_parser
    from solvers.dynamics import SETTINGS, Settings
    from solvers.transfers import TRANSFER_MODELS

    loads = _trace(T=10)
    s = Settings.parse({"every": 3, "window": 2, "expert_bytes": 5})
    a, b = simulate(loads, s, **SHAPE), simulate(loads, **SHAPE, every=3, window=2, expert_bytes=5)
    assert torch.equal(a.imbalance.nan_to_num(), b.imbalance.nan_to_num()) and a.settings == b.settings
    assert simulate(loads, s, **SHAPE, every=4).settings["every"] == 4          # keywords over the object
    with pytest.raises(OptionError, match="^evry: is not a setting of simulate"):
        simulate(loads, **SHAPE, evry=3)
    assert SETTINGS["transfer_model"].choices == TRANSFER_MODELS
    sub = next(a for a in build_parser()._actions if a.dest == "command").choices
    flags = {o.dest: o for o in sub["simulate"]._actions}
    for name in ("solver", "every", "window", "migration_slack", "migration", "stall", "step_seconds",
                 "async_interference", "transfer_model", "stall_aware"):
        assert SETTINGS[name].help in flags[name].help and flags[name].choices == SETTINGS[name].choices
    assert "gain_horizon" not in flags and "horizons" not in {o.dest for o in sub["sweep"]._actions}
