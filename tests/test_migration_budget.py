"""A move budget on migration-aware plans: the layers saving most moves take wider slacks until
the plan fits, every layer stays within the slack it was given, bad budgets name the parameter."""
from __future__ import annotations

import pytest
import torch

from solvers import OptionError, Problem, score, solve
from solvers.dynamics import simulate
from solvers.replan import plan_with_migration
from solvers.replan.solver import BUDGET_SLACKS


def _drifted(L, E, seed, sigma=0.4):
    g = torch.Generator().manual_seed(seed)
    old = torch.exp(torch.randn(L, E, generator=g, dtype=torch.float64)) * 100
    new = old * torch.exp(sigma * torch.randn(L, E, generator=g, dtype=torch.float64))
    return old, new


@pytest.fixture(scope="module")
def case():
    old_w, new_w = _drifted(8, 64, 1)
    shape = dict(num_replicas=72, num_groups=1, num_nodes=1, num_gpus=8)
    current = solve(Problem(old_w, **shape), "deepseek").plan
    problem = Problem(new_w, **shape)
    fresh = solve(problem, "deepseek")
    return problem, current, fresh


def test_budget_caps_total_moves_and_each_layer_keeps_its_slack(case):
    problem, current, fresh = case
    fresh_moves = score(problem, fresh.plan, previous=current).moves
    hard = plan_with_migration(problem, "deepseek", current, slack=0.0)
    budget = 0.5 * hard.score.moves / fresh_moves                 # half of what the hard slack moves
    res = plan_with_migration(problem, "deepseek", current, slack=0.0, budget=budget)
    assert res.score.moves <= int(fresh_moves * budget) < hard.score.moves
    relaxed = res.info["relaxed_layers"]
    assert relaxed and set(relaxed.values()) <= set(BUDGET_SLACKS)
    for layer in range(problem.num_layers):
        allowed = 1 + relaxed.get(layer, 0.0)
        assert float(res.score.max_load[layer]) <= float(fresh.score.max_load[layer]) * allowed * (1 + 1e-9)
    # layers left alone are the hard-slack plan's
    same = [layer for layer in range(problem.num_layers) if layer not in relaxed]
    assert torch.equal(res.plan.phy2log[same], hard.plan.phy2log[same])


def test_a_budget_that_is_met_changes_nothing(case):
    problem, current, _ = case
    hard = plan_with_migration(problem, "deepseek", current, slack=0.01)
    loose = plan_with_migration(problem, "deepseek", current, slack=0.01, budget=1.0)
    assert torch.equal(hard.plan.phy2log, loose.plan.phy2log) and loose.info["relaxed_layers"] == {}


@pytest.mark.parametrize("bad", [0, -0.1, 1.5, "x", True])
def test_bad_budget_names_the_parameter(case, bad):
    problem, current, _ = case
    with pytest.raises(OptionError, match="^budget"):
        plan_with_migration(problem, "deepseek", current, slack=0.01, budget=bad)


def test_simulate_budget_needs_a_slack_and_caps_bytes():
    loads = torch.randint(50, 150, (24, 2, 64))
    shape = dict(num_replicas=72, num_gpus=8)
    with pytest.raises(OptionError, match="^migration_budget"):
        simulate(loads, every=6, migration_budget=0.25, **shape)
    with pytest.raises(OptionError, match="^migration_budget"):
        simulate(loads, every=6, migration_slack=0.01, migration_budget=2.0, **shape)
    hard = simulate(loads, every=6, migration_slack=0.0, **shape).totals()
    res = simulate(loads, every=6, migration_slack=0.0, migration_budget=0.1, **shape)
    assert res.settings["migration_budget"] == 0.1 and res.totals()["rebalances"] == hard["rebalances"] == 2
    assert res.totals()["total_moves"] < hard["total_moves"]
