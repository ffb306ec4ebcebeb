"""The recount start (the placement in force with the fresh plan's replica counts) and the
repair of regrouped hierarchical layers following hot experts' counts."""
from __future__ import annotations

import numpy as np
import torch

from solvers import Plan, Problem, score, solve
from solvers.replan import plan_with_migration
from solvers.replan.repair import recount, regroup


def test_recount_gives_the_counts_and_moves_only_changed_replicas():
    g = torch.Generator().manual_seed(3)
    L, E, R, P = 5, 8, 16, 8
    w = torch.exp(torch.randn(L, E, generator=g, dtype=torch.float64)) * 100
    old = torch.stack([torch.randperm(R, generator=g) % E for _ in range(L)])          # 2 replicas each
    want = solve(Problem(w, R, 1, 1, P), "deepseek").plan.logcnt                       # [L, E]
    out = recount(w, old, want, P)
    cnt = torch.zeros(L, E, dtype=torch.int64).scatter_add_(1, out, torch.ones_like(out))
    assert torch.equal(cnt, want)
    changed = (out != old).sum(1)
    old_cnt = torch.zeros(L, E, dtype=torch.int64).scatter_add_(1, old, torch.ones_like(old))
    assert torch.equal(changed, (old_cnt - want).clamp_min(0).sum(1))               # only surplus slots change
    same = recount(w, old, old_cnt, P)
    assert torch.equal(same, old)


def test_regrouped_layers_follow_hot_experts_counts():
    """A hierarchical layer whose nodes drifted apart: with an item cap the regrouped plan
    gives the hot expert more replicas (without, its replicas stay as heavy as before)."""
    E, G, N, P, R = 16, 4, 2, 4, 24
    old_w = torch.ones(1, E, dtype=torch.float64) * 10
    problem_old = Problem(old_w, R, G, N, P)
    old = solve(problem_old, "deepseek", policy="hierarchical").plan.phy2log
    new_w = old_w.clone()
    new_w[0, :4] = 60.0                                   # group 0 hot: its node is far above target
    new_w[0, 0] = 200.0                                   # and one expert very hot
    fresh = solve(Problem(new_w, R, G, N, P), "deepseek", policy="hierarchical")
    target = fresh.score.max_load.to(torch.float64) * 1.05
    cap = (new_w / fresh.plan.logcnt).max(1).values * 1.05
    plain = regroup(new_w, old, target, [0], G, N, P)
    capped = regroup(new_w, old, target, [0], G, N, P, item_cap=cap)
    assert 0 in plain and 0 in capped                      # both meet the target
    for p2l in (plain[0], capped[0]):
        assert float(score(Problem(new_w, R, G, N, P), Plan.from_phy2log(p2l.view(1, -1), E)).max_load[0]) <= float(target[0]) * (1 + 1e-9)
    c_plain = np.bincount(plain[0].numpy(), minlength=E)[0]
    c_capped = np.bincount(capped[0].numpy(), minlength=E)[0]
    assert float(new_w[0, 0]) / c_plain > float(cap[0])      # without the cap the hot expert stays heavy
    assert float(new_w[0, 0]) / c_capped <= float(cap[0])    # with it, its replicas come under the cap


def test_migration_keeps_budget_when_counts_drift_on_a_small_model():
    """Mixtral-like (8 experts, 2 slots per GPU): loads swap between experts; every layer
    stays within its budget and moves fewer replicas than the fresh plan."""
    g = torch.Generator().manual_seed(0)
    L, E, R, P = 12, 8, 16, 8
    old_w = torch.exp(1.2 * torch.randn(L, E, generator=g, dtype=torch.float64)) * 100
    new_w = old_w[:, torch.randperm(E, generator=g)]
    current = solve(Problem(old_w, R, 1, 1, P), "deepseek").plan
    problem = Problem(new_w, R, 1, 1, P)
    fresh = solve(problem, "deepseek")
    res = plan_with_migration(problem, "deepseek", current, slack=0.01)
    assert (res.score.max_load <= fresh.score.max_load * 1.01 * (1 + 1e-9)).all()
    assert res.score.moves <= score(problem, fresh.plan, previous=current).moves
