"""Does it pay? Stalls of rebalances (sync and async), net throughput, the stall-aware trigger."""
from __future__ import annotations

import math

import pytest
import torch

from solvers import OptionError, Problem, solve
from solvers.cluster import Cluster
from solvers.dynamics import simulate
from solvers.dynamics import step_stats
from solvers.dynamics.replay import Regret
from solvers.dynamics.sweep import best_net, sweep
from solvers.transfers import schedule_transfers
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


def test_sweep_has_stall_aware_rows_and_the_best_net_setting():
    loads = _trace(T=16)
    rows = sweep(loads, periods=(2, 4), stall_aware=True, expert_bytes=NBYTES, window=2, cluster=CLUSTER,
                 num_groups=1)
    aware = [r for r in rows if r["stall_aware"]]
    assert len(aware) == 1 and aware[0]["every"] == 2 and aware[0]["trigger"] == "stall-aware"
    top = best_net(rows)
    assert top["net_throughput"] == max(r["net_throughput"] for r in rows)
    with pytest.raises(OptionError, match="stall_aware"):
        sweep(loads, thresholds=(1.2,), stall_aware=True, expert_bytes=NBYTES, cluster=CLUSTER)


def test_horizon_free_trigger_declines_what_does_not_pay_and_keeps_what_does():
    loads = _trace(T=20)
    slow = Cluster(2, 4, 12, network=Network(1e6, 1e6))          # the slowest links allowed: stalls of hours
    res = simulate(loads, cluster=slow, every=2, window=2, expert_bytes=NBYTES, stall_aware=True)
    assert res.totals()["rebalances"] == 0 and res.totals()["skipped_rebalances"] == 8
    assert all(r["predicted_gain_seconds"] < r["stall_seconds"] for r in res.skipped)
    # stalls of nanoseconds: every check with a predicted gain > 0 rebalances, like the plain period
    free = simulate(loads, cluster=CLUSTER, every=2, window=2, expert_bytes=1, stall_aware=True, step_seconds=1e6)
    every = simulate(loads, cluster=CLUSTER, every=2, window=2, expert_bytes=1, step_seconds=1e6)
    assert free.totals()["rebalances"] == len(free.rebalances) > 0
    assert all(r["predicted_gain_seconds"] > r["stall_seconds"] for r in free.rebalances)
    assert all(r["predicted_gain_seconds"] <= 0 for r in free.skipped)
    assert free.totals()["rebalances"] + free.totals()["skipped_rebalances"] == every.totals()["rebalances"]
    with pytest.raises(OptionError, match="stall_aware"):
        simulate(loads, cluster=CLUSTER, every=2, stall_aware=True)
    with pytest.raises(OptionError, match="stall"):
        simulate(loads, cluster=CLUSTER, every=2, expert_bytes=1, stall="later")


def test_regret_calibration_and_renewal_horizon_by_hand():
    loads = _trace(T=12)
    a = solve(Problem(loads[0:2].sum(0), cluster=CLUSTER), "deepseek").plan
    b = solve(Problem(loads[4:6].sum(0), cluster=CLUSTER), "deepseek").plan
    c = solve(Problem(loads[6:8].sum(0), cluster=CLUSTER), "deepseek").plan

    def gap(k, f, lo, hi):
        return float(step_stats(loads[lo:hi], k, 4)[3].mean() - step_stats(loads[lo:hi], f, 4)[3].mean())

    reg = Regret()
    # first check at 6: nothing measured yet (kappa 1); the gap over the 2 steps since the last
    # check, over the renewal horizon (age 4 + period 2) / 2 = 3 steps
    g6 = gap(a, b, 4, 6)
    assert reg.decide(loads, 6, 2, a, b, 4, age=4, period=2, delay=0) == pytest.approx(max(g6, 0) * 3)
    assert reg.calibration == 1.0
    # next check at 8: the pair of check 6 measured on steps 6, 7 calibrates the new gap
    g8 = gap(a, c, 6, 8)
    out = reg.decide(loads, 8, 2, a, c, 4, age=6, period=2, delay=1)
    kappa = max(gap(a, b, 6, 8), 0) / g6 if g6 > 0 else 1.0
    assert reg.calibration == pytest.approx(kappa)
    assert out == pytest.approx(max(kappa * g8, 0) * (6 + 1 + 2) / 2)          # async: takes over 1 step later


def test_async_interference_costs_serving_time():
    loads = _trace()
    base = dict(cluster=CLUSTER, every=4, window=2, expert_bytes=NBYTES, step_seconds=0.01, stall="async")
    free = simulate(loads, **base, async_interference=0.0)
    some = simulate(loads, **base)                                   # the default fraction
    half = simulate(loads, **base, async_interference=0.5)
    spans = sum(r["makespan_seconds"] for r in some.rebalances)
    assert spans > 0 and free.totals()["interference_seconds"] == 0
    assert some.totals()["interference_seconds"] == pytest.approx(0.1 * spans)
    assert half.totals()["interference_seconds"] == pytest.approx(0.5 * spans)
    n = loads.shape[0] - 2
    for res in (free, some, half):
        tot = res.totals()
        assert tot["stall_seconds"] == 0
        assert tot["net_efficiency"] == pytest.approx(n * 0.01 / (tot["serving_seconds"] + tot["interference_seconds"]))
    assert half.totals()["net_efficiency"] < some.totals()["net_efficiency"] < free.totals()["net_efficiency"]
    assert sum(r["stall_seconds"] for r in half.step_rows()) == pytest.approx(half.totals()["interference_seconds"])
    sync = simulate(loads, **{**base, "stall": "sync"})
    assert sync.totals()["interference_seconds"] == 0
    with pytest.raises(OptionError, match="async_interference"):
        simulate(loads, **base, async_interference=1.5)


def test_shared_transfer_model_times_the_stalls():
    loads = _trace()
    rounds = simulate(loads, cluster=CLUSTER, every=3, window=2, expert_bytes=NBYTES)
    shared = simulate(loads, cluster=CLUSTER, every=3, window=2, expert_bytes=NBYTES, transfer_model="shared")
    assert shared.settings["transfer_model"] == "shared"
    prev = solve(Problem(loads[0:2].sum(0), cluster=CLUSTER), "deepseek").plan
    for r, s in zip(rounds.rebalances, shared.rebalances):
        new = solve(Problem(loads[r["step"] - 2:r["step"]].sum(0), cluster=CLUSTER), "deepseek").plan
        want = schedule_transfers(prev, new, 4, 2, NBYTES, CLUSTER.network, model="shared").makespan
        assert s["stall_seconds"] == pytest.approx(want) and s["moves"] == r["moves"]
        prev = new
    with pytest.raises(OptionError, match="transfer_model"):
        simulate(loads, cluster=CLUSTER, every=3, expert_bytes=NBYTES, transfer_model="fluid")
