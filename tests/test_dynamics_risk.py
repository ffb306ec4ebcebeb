"""The out-of-sample planner ``risk_aware``: valid plans without colocation, determinism, groups
kept on nodes, its risk search never raising the largest risk, its in-window objective equal
to the shared scorer's, and a better held-out imbalance than the greedy on a drifting trace."""
from __future__ import annotations

import math

import pytest
import torch

from solvers import OptionError, Problem, score, solve
from solvers.cluster import Cluster
from solvers.dynamics.risk import centred, moments, risk_search, step_weights, window_objective
from solvers.dynamics.risk_migration import swapped_maps
from solvers.migration.moves import moves_per_layer
from solvers.migration.relabel import relabel_phy2log
from solvers.scoring import count_duplicates
from solvers.workloads.generators import generate


def _history(W=8, L=3, E=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    base = torch.exp(torch.randn(L, E, generator=g)) * 50
    return torch.stack([base * torch.exp(0.5 * torch.randn(L, E, generator=g)) for _ in range(W)]).round()


def test_plan_is_valid_has_no_colocation_and_is_deterministic():
    hist = _history()
    p = Problem(hist.sum(0), 40, 1, 1, 8)
    a = solve(p, "risk_aware", history=hist)
    b = solve(p, "risk_aware", history=hist)
    assert a.score is not None and a.plan is not None
    assert count_duplicates(a.plan.phy2log, 8) == 0
    assert torch.equal(a.plan.phy2log, b.plan.phy2log)
    assert torch.equal(a.plan.logcnt.sum(1), torch.full((3,), 40))
    assert a.info["colocation"] == "forbidden"


def test_colocation_is_allowed_only_when_unavoidable():
    hist = _history(E=4)
    p = Problem(hist.sum(0), 16, 1, 1, 2)            # 8 slots per GPU, 4 experts
    res = solve(p, "risk_aware", history=hist)
    assert res.info["colocation"] == "allowed"
    assert res.score is not None


def test_hierarchical_plan_keeps_groups_on_their_node():
    hist = _history(E=16)
    p = Problem(hist.sum(0), 32, 4, 2, 8)               # 4 groups of 4 experts, 2 nodes
    res = solve(p, "risk_aware", history=hist, policy="hierarchical")
    assert res.policy == "hierarchical"
    node = torch.arange(32) // 16
    for layer in range(3):
        for grp in range(4):
            assert node[res.plan.phy2log[layer] // 4 == grp].unique().numel() == 1
    assert count_duplicates(res.plan.phy2log, 8) == 0


def _gpu_risk(series, k, p2l, P, z):
    """[X, P] mean + z x std of every GPU's per-step load, computed directly from the series."""
    X, E, W = series.shape
    per = series.gather(1, p2l.unsqueeze(-1).expand(X, p2l.shape[1], W))          # [X, R, W]
    gpu = per.view(X, P, -1, W).sum(2)                                             # [X, P, W]
    m = (gpu * k).sum(-1)
    return m + z * (((gpu - m.unsqueeze(-1)) ** 2 * k).sum(-1)).sqrt()


def test_risk_search_lowers_the_largest_risk_computed_directly():
    g = torch.Generator().manual_seed(3)
    X, E, W, P, S = 4, 12, 6, 4, 4
    series = torch.rand(X, E, W, generator=g, dtype=torch.float64) * torch.rand(X, E, 1, generator=g,
                                                                                 dtype=torch.float64) * 10
    start = torch.stack([torch.randperm(E, generator=g)[:P * S] for _ in range(X)])     # distinct experts
    k = step_weights(W, None, "cpu")
    noise = torch.zeros(X, E, dtype=torch.float64)
    out, rounds = risk_search(series, k, start, P, 1.5, True, noise, 50)
    before = _gpu_risk(series, k, start, P, 1.5).max(1).values
    after = _gpu_risk(series, k, out, P, 1.5).max(1).values
    assert rounds >= 1
    assert bool((after <= before * (1 + 1e-12)).all())
    assert bool((after < before * (1 - 1e-6)).any())
    assert torch.equal(out.sort(1).values, start.sort(1).values)       # a permutation of the same replicas


def test_centred_series_have_zero_weighted_mean():
    series = _history().permute(1, 2, 0).to(torch.float64)
    k = step_weights(series.shape[2], 2.0, "cpu")
    mean, cent = centred(series, k)
    assert torch.allclose((cent * k).sum(-1), torch.zeros_like(mean), atol=1e-9)


def test_window_objective_is_the_shared_scorers_per_step_imbalance():
    hist = _history(W=5)
    p = Problem(hist.sum(0), 24, 1, 1, 8)
    plan = solve(p, "risk_aware", history=hist).plan
    mine = window_objective(hist.to(torch.float64), step_weights(5, None, "cpu"), plan.phy2log, 16, 8)
    shared = score(p, plan, tokens=hist)
    assert math.isclose(float(mine.mean()), shared.imbalance_mean, rel_tol=1e-12)


def test_bad_history_names_the_option():
    p = Problem(_history().sum(0), 24, 1, 1, 8)
    with pytest.raises(OptionError, match="history"):
        solve(p, "risk_aware", history=torch.ones(3, 2, 16))


@pytest.mark.parametrize("seed", [0, 1])
def test_beats_the_greedy_out_of_sample_on_a_drifting_trace(seed):
    trace = generate("olmoe-1b-7b", "drifting", steps=80, seed=seed, num_layers=4, tokens_per_step=4096)
    loads = trace.loads.to(torch.float64)
    window, held = loads[:40], loads[40:]
    cluster = Cluster(4, 64, 128)
    p, held_p = Problem(window.sum(0), cluster=cluster), Problem(held.sum(0), cluster=cluster)
    mine = score(held_p, solve(p, "risk_aware", history=window, policy="global").plan, tokens=held)
    greedy = score(held_p, solve(p, "deepseek", policy="global").plan, tokens=held)
    # measured: 1.423 against 1.671 (seed 0), 1.502 against 1.633 (seed 1)
    assert mine.imbalance_mean < greedy.imbalance_mean - 0.05


@pytest.mark.parametrize("policy", ["global", "hierarchical"])
def test_migration_aware_replan_moves_fewer_replicas_within_slack(policy):
    trace = generate("deepseek-v3", "drifting", steps=40, seed=2, num_layers=2, tokens_per_step=8192)
    loads = trace.loads.to(torch.float64)
    old, new = loads[:20], loads[20:]
    cluster = Cluster(4, 32, 288)
    p_old, p_new = Problem(old.sum(0), cluster=cluster, num_groups=8), Problem(new.sum(0), cluster=cluster, num_groups=8)
    current = solve(p_old, "risk_aware", history=old, policy=policy).plan
    fresh = solve(p_new, "risk_aware", history=new, policy=policy).plan
    aware = solve(p_new, "risk_aware", history=new, policy=policy, current=current, slack=0.02)
    relabelled = relabel_phy2log(fresh.phy2log, current.phy2log, 256, 32, 4 if policy == "hierarchical" else 1)
    mine, base = moves_per_layer(aware.plan.phy2log, current.phy2log, 256, 32), moves_per_layer(relabelled, current.phy2log, 256, 32)
    assert bool((mine <= base).all()) and int(mine.sum()) < int(base.sum())
    k = step_weights(20, 4.0, "cpu")
    assert bool((window_objective(new, k, aware.plan.phy2log, 256, 32)
                 <= window_objective(new, k, fresh.phy2log, 256, 32) * 1.02 * (1 + 1e-12)).all())
    assert count_duplicates(aware.plan.phy2log, 32) == 0
    if policy == "hierarchical":
        node = torch.arange(288) // 72
        for layer in range(2):
            for grp in range(8):
                assert node[aware.plan.phy2log[layer] // 32 == grp].unique().numel() == 1


def test_current_must_be_a_plan_of_the_problem():
    hist = _history()
    p = Problem(hist.sum(0), 40, 1, 1, 8)
    with pytest.raises(OptionError, match="current"):
        solve(p, "risk_aware", history=hist, current="plan.json")


def test_swapped_maps_are_the_best_single_swaps_of_the_map_in_force():
    g = torch.Generator().manual_seed(3)
    W, L, E, G, N = 6, 3, 32, 8, 4
    hist = torch.rand(W, L, E, generator=g, dtype=torch.float64) * 100
    k = step_weights(W, 4.0, hist.device)
    now = torch.tensor([[0, 0, 1, 1, 2, 2, 3, 3], [3, 2, 1, 0, 0, 1, 2, 3], [1, 0, 1, 0, 3, 2, 3, 2]])
    maps = swapped_maps(hist, k, now, G, N, 0.5, 2)
    assert maps.shape == (L, 2, G)
    mu, sd = moments(hist.view(W, L, G, E // G).sum(-1), k)
    stat = mu + 0.5 * sd
    for layer in range(L):
        worst = []           # brute force: every swap of two groups on different nodes
        for a in range(G):
            for b in range(a + 1, G):
                if now[layer, a] != now[layer, b]:
                    m = now[layer].clone()
                    m[a], m[b] = now[layer, b], now[layer, a]
                    worst.append(float(torch.zeros(N, dtype=torch.float64).scatter_add_(0, m, stat[layer]).max()))
        worst.sort()
        for i in range(2):
            m = maps[layer, i]
            assert int((m != now[layer]).sum()) == 2                       # one pair swapped
            assert torch.equal(torch.bincount(m, minlength=N), torch.full((N,), G // N))
            got = float(torch.zeros(N, dtype=torch.float64).scatter_add_(0, m, stat[layer]).max())
            assert math.isclose(got, worst[i], rel_tol=1e-12)
