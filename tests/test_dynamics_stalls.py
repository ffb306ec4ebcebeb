"""Does it pay? Stalls of rebalances (sync and async), net throughput, the stall-aware trigger."""
from __future__ import annotations

import math

import pytest
import torch

from solvers import OptionError, Problem, solve
from solvers.cluster import Cluster
from solvers.dynamics import simulate
from solvers.dynamics.simulate import age_curve, predicted_ratios, step_stats
from solvers.dynamics.sweep import best_net, sweep
from solvers.migration import schedule_transfers
from solvers.network import Network

NBYTES = 10**9


def _trace(T=14, L=2, E=8, seed=0, drift=0.4):
    g = torch.Generator().manual_seed(seed)
    base = torch.rand(L, E, generator=g) * 100 + 5
    steps = []
    for _ in range(T):
        base = base * torch.exp(drift * torch.randn(L, E, generator=g))
        steps.append(base.round())
    return torch.stack(steps).to(torch.int64)


CLUSTER = Cluster(2, 4, 12, network=Network(100e9, 10e9))


def test_sync_stalls_are_the_schedules_and_net_efficiency_adds_up():
    loads = _trace()
    res = simulate(loads, cluster=CLUSTER, every=3, window=2, expert_bytes=NBYTES, step_seconds=0.5)
    plan = solve(Problem(loads[0:2].sum(0), cluster=CLUSTER), "deepseek").plan
    for r in res.rebalances:                                     # replay the schedules by hand
        t = r["step"]
        new = solve(Problem(loads[t - 2:t].sum(0), cluster=CLUSTER), "deepseek").plan
        sched = schedule_transfers(plan, new, 4, 2, NBYTES, CLUSTER.network)
        assert r["stall_seconds"] == pytest.approx(sched.makespan) and r["bound_seconds"] <= sched.makespan * (1 + 1e-12)
        plan = new
    tot = res.totals()
    stall = sum(r["stall_seconds"] for r in res.rebalances)
    assert stall > 0 and tot["stall_seconds"] == pytest.approx(stall)
    _, _, _, ratio = step_stats(loads[2:], solve(Problem(loads[0:2].sum(0), cluster=CLUSTER), "deepseek").plan, 4)
    assert res.step_time[2] == pytest.approx(0.5 * float(ratio[0]))          # first scored step, first plan
    assert tot["serving_seconds"] == pytest.approx(float(res.step_time[2:].sum()))
    assert tot["net_efficiency"] == pytest.approx(12 * 0.5 / (tot["serving_seconds"] + stall))
    assert tot["net_throughput"] == pytest.approx(float(loads[2:].sum()) / (tot["serving_seconds"] + stall))
    rows = res.step_rows()
    assert sum(r["stall_seconds"] for r in rows) == pytest.approx(stall)
    assert rows[-1]["cumulative_efficiency"] == pytest.approx(tot["net_efficiency"])
    assert res.settings["network"]["inter_node_bw"] == 10e9
    # without an expert size nothing is timed
    assert simulate(loads, cluster=CLUSTER, every=3, window=2).totals()["stall_seconds"] is None


def test_async_copies_delay_the_plan_and_do_not_stall():
    loads = _trace()
    sync = simulate(loads, cluster=CLUSTER, every=4, window=2, expert_bytes=NBYTES, step_seconds=0.01)
    asyn = simulate(loads, cluster=CLUSTER, every=4, window=2, expert_bytes=NBYTES, step_seconds=0.01,
                    stall="async")
    assert asyn.totals()["stall_seconds"] == 0
    first = asyn.rebalances[0]
    delay = math.ceil(first["makespan_seconds"] / 0.01)
    assert delay >= 2 and first["effective_step"] == first["step"] + delay
    t = first["step"]
    # the old plan still serves step t under async, the new one under sync
    old = solve(Problem(loads[0:2].sum(0), cluster=CLUSTER), "deepseek").plan
    assert float(asyn.imbalance[t]) == pytest.approx(float(step_stats(loads[t:t + 1], old, 4)[0][0]))
    assert float(sync.imbalance[t]) != pytest.approx(float(asyn.imbalance[t]))


def test_stall_aware_trigger_declines_what_does_not_pay():
    loads = _trace(T=20)
    slow = Cluster(2, 4, 12, network=Network(1e6, 1e5))          # stalls of hours: nothing pays
    res = simulate(loads, cluster=slow, every=2, window=2, expert_bytes=NBYTES, gain_horizon=4)
    assert res.totals()["rebalances"] == 0 and res.totals()["skipped_rebalances"] == 8
    assert all(r["predicted_gain_seconds"] < r["stall_seconds"] for r in res.info["skipped"])
    free = simulate(loads, cluster=CLUSTER, every=2, window=2, expert_bytes=1, gain_horizon=4, step_seconds=1e6)
    assert free.totals()["rebalances"] > 0                          # stalls of nanoseconds: gains pay
    with pytest.raises(OptionError, match="gain_horizon"):
        simulate(loads, cluster=CLUSTER, every=2, gain_horizon=4)
    with pytest.raises(OptionError, match="stall"):
        simulate(loads, cluster=CLUSTER, every=2, expert_bytes=1, stall="later")


def test_age_curve_and_predictions_by_hand():
    ratio = torch.tensor([math.nan, 1.0, 1.2, 1.4, 1.1, 1.3, 1.5])
    curve = age_curve(ratio, [1, 4], 7)                          # plans at 1 (ages 0..2) and 4 (ages 0..2)
    assert curve.tolist() == pytest.approx([1.05, 1.25, 1.45])
    keep, fresh = predicted_ratios(ratio, [1, 4], 7, horizon=2, window=2, now_in_sample=1.0, new_in_sample=1.0,
                                   past_in_sample=[1.0, 1.0])
    # the plan in force is 3 steps old: ages 3, 4 take the oldest value (1.45), shifted by how its
    # last 2 steps (1.3, 1.5) ran against the curve at ages 1, 2 (1.25, 1.45): +0.05
    assert keep == pytest.approx(1.45 + 0.05)
    assert fresh == pytest.approx((1.05 + 1.25) / 2)
    assert predicted_ratios(ratio, [1], 1, 2, 2, 1.1, 1.0, [1.0]) == (1.1, 1.0)     # nothing served yet


def test_sweep_has_stall_aware_rows_and_the_best_net_setting():
    loads = _trace(T=16)
    rows = sweep(loads, periods=(2, 4), horizons=(4,), expert_bytes=NBYTES, window=2, cluster=CLUSTER,
                 num_groups=1)
    aware = [r for r in rows if r["gain_horizon"] is not None]
    assert len(aware) == 1 and aware[0]["every"] == 2 and aware[0]["trigger"] == "stall-aware 4"
    top = best_net(rows)
    assert top["net_throughput"] == max(r["net_throughput"] for r in rows)
    with pytest.raises(OptionError, match="horizons"):
        sweep(loads, thresholds=(1.2,), horizons=(4,), expert_bytes=NBYTES, cluster=CLUSTER)
