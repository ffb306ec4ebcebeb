"""Migration-aware re-plans judged on the planner's forecast: the slack is weighed on the
per-step imbalance over the window's steps (the planner's step weights), not on the max load
of their sum, with any planner (the greedy, a wrapped history planner, ``risk_aware``); and a
re-plan inside ``simulate`` is the plan the same call makes on its own."""
from __future__ import annotations

import math

import pytest
import torch

from solvers import Plan, Problem, score, solve
from solvers.cluster import Cluster
from solvers.dynamics import simulate
from solvers.dynamics.risk import step_weights
from solvers.dynamics.risk_migration import LAYER_SLACKS
from solvers.workloads.generators import generate

CLUSTER = Cluster(4, 32, 288)


def _forecast(steps: torch.Tensor, plan: Plan, weights: torch.Tensor, **shape) -> torch.Tensor:
    """[L] the per-step imbalance over ``steps`` [W, L, E] by the shared scorer: sum over steps of
    each step's max GPU load / sum of its mean, steps weighted by ``weights`` [W]."""
    mx = mean = 0.0
    for t in range(steps.shape[0]):
        sc = score(Problem(steps[t], **shape), plan)
        mx = mx + float(weights[t]) * sc.max_load.to(torch.float64)
        mean = mean + float(weights[t]) * sc.mean_load.to(torch.float64)
    return mx / mean


def test_the_greedy_keeps_its_slots_only_within_slack_on_its_forecast():
    # Experts 0 and 1 are hot together on even steps, 2 and 3 on odd ones: every expert's sum is
    # the same, so the placement in force ({0, 1} | {2, 3}) is as balanced on the window's sum as
    # any, yet each step waits for one GPU twice the mean. Judged on the sum it is kept (no move);
    # judged on the greedy's forecast (the window's steps) it is not.
    hist = torch.tensor([[[10.0, 10, 0, 0]], [[0.0, 0, 10, 10]]] * 4)                       # [8, 1, 4]
    shape = dict(num_replicas=4, num_groups=1, num_nodes=1, num_gpus=2)
    p = Problem(hist.sum(0), **shape)
    current = Plan.from_phy2log(torch.tensor([[0, 1, 2, 3]]), 4)
    fresh = solve(p, "deepseek").plan
    even = step_weights(8, None, "cpu")
    assert float(_forecast(hist, current, even, **shape)[0]) == 2.0
    assert float(_forecast(hist, fresh, even, **shape)[0]) == 1.0            # the greedy pairs them apart
    on_sum = solve(p, "migration", base="deepseek", current=current, slack=0.01, previous=current)
    assert on_sum.score.moves == 0
    on_forecast = solve(p, "migration", base="deepseek", current=current, slack=0.01, history=hist,
                        previous=current)
    assert on_forecast.score.moves > 0
    assert float(_forecast(hist, on_forecast.plan, even, **shape)[0]) <= 1.01
    assert on_forecast.info["forecast_steps"] == 8 and on_forecast.info["halflife"] is None


def _drift(T=40, L=2, seed=1):
    """[T, L, 256] a generated DeepSeek-V3 drifting trace (its first L layers)."""
    return generate("deepseek-v3", "drifting", steps=T, seed=seed, num_layers=L, tokens_per_step=4096).loads


@pytest.mark.parametrize("base, halflife", [("deepseek", None), ("ewma", 2.0)])
def test_any_planner_stays_within_slack_of_its_fresh_plan_on_its_forecast(base, halflife):
    loads = _drift()
    old, new = loads[:20], loads[20:]
    shape = dict(cluster=CLUSTER, num_groups=8)
    base_options = {} if halflife is None else {"history": new, "halflife": halflife}
    current = solve(Problem(old.sum(0), **shape), base, **({} if halflife is None else
                                                           {"history": old, "halflife": halflife})).plan
    p = Problem(new.sum(0), **shape)
    fresh = solve(p, base, **base_options)
    slack = 0.02
    aware = solve(p, "migration", base=base, base_options=base_options or None, current=current, slack=slack,
                  history=new, halflife=halflife, previous=current)
    assert aware.score.moves < score(p, fresh.plan, previous=current).moves
    k = step_weights(20, halflife, "cpu")
    scorer = dict(cluster=CLUSTER, num_groups=8)
    rel = _forecast(new, aware.plan, k, **scorer) / _forecast(new, fresh.plan, k, **scorer)        # [L]
    assert float(rel.mean()) <= 1 + slack + 1e-9
    assert bool((rel <= 1 + LAYER_SLACKS * slack + 1e-9).all())
    assert math.isclose(aware.info["forecast_imbalance_vs_fresh"], float(rel.mean()) - 1, abs_tol=1e-9)


@pytest.mark.parametrize("solver, slack", [("deepseek", 0.01), ("risk_aware", 0.01), ("ewma", 0.02)])
def test_a_replan_inside_simulate_is_the_plan_it_makes_on_its_own(solver, slack):
    loads = _drift(T=40)
    every = 10
    res = simulate(loads, cluster=CLUSTER, num_groups=8, solver=solver, every=every, migration_slack=slack)
    shape = dict(cluster=CLUSTER, num_groups=8)
    takes_history = solver != "deepseek"

    def alone(t: int, current: Plan | None) -> Plan:
        hist = loads[t - every:t]
        p = Problem(hist.sum(0), **shape)
        own = {"history": hist} if takes_history else {}
        if current is None:
            return solve(p, solver, **own).plan
        if solver == "risk_aware":
            return solve(p, solver, current=current, slack=slack, **own).plan
        halflife = 4.0 if solver == "ewma" else None          # ewma's default halflife: its forecast
        return solve(p, "migration", base=solver, base_options=own or None, current=current, slack=slack,
                     history=hist, halflife=halflife).plan

    plan = alone(every, None)
    assert [r["step"] for r in res.rebalances] == [20, 30]
    for r in res.rebalances:
        new = alone(r["step"], plan)
        assert r["moves"] == score(Problem(loads[r["step"] - every:r["step"]].sum(0), **shape), new,
                                   previous=plan).moves
        for t in range(r["step"], r["step"] + every):        # every step scored under that plan
            assert math.isclose(float(res.imbalance[t]), score(Problem(loads[t], **shape), new).imbalance_mean,
                                rel_tol=1e-12)
        plan = new
    plain = simulate(loads, cluster=CLUSTER, num_groups=8, solver=solver, every=every)
    assert res.totals()["total_moves"] < plain.totals()["total_moves"]


def test_a_one_step_window_plans_as_eplb_plan_does():
    """simulate with --window 1 gives the planner no history, as `eplb plan` and `eplb compare`
    do on one step (solvers.solver_call.history_of): the same plan from the same step."""
    loads = _drift(T=12)
    res = simulate(loads, cluster=CLUSTER, num_groups=8, solver="risk_aware", every=3, window=1)
    shape = dict(cluster=CLUSTER, num_groups=8)
    starts = [res.first_step] + [r["step"] for r in res.rebalances]          # 1, then every 3 steps
    assert starts == [1, 4, 7, 10]
    for t in range(1, 12):
        made = max(s for s in starts if s <= t)              # the plan in force: made at the last (re)plan
        plan = solve(Problem(loads[made - 1:made].sum(0), **shape), "risk_aware").plan
        assert math.isclose(float(res.imbalance[t]), score(Problem(loads[t], **shape), plan).imbalance_mean,
                            rel_tol=1e-12), t
