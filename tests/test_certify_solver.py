"""The ``certify`` solver through solvers.solve: graded by the shared scorer, its bound
never above a proven optimum, hierarchical plans keep their structure, and the
two-GPU re-split is exact for the pair."""
import time

import pytest
import torch
from hypothesis import given, settings, strategies as st

import solvers.certify  # noqa: F401  registers "certify"
from solvers import Problem, get_solver, solve
from solvers.bounds import lower_bound, structure_bound
from benchmarks.certify_targets import gap_closure
from solvers.certify.resplit import polish, split_masks
from solvers.errors import OptionError
from solvers.backends import highs_available
from tests.brute import brute_force, packing_optimum

pytestmark = pytest.mark.skipif(not highs_available(), reason="needs highspy")


def test_schema_uses_the_shared_vocabulary():
    spec = get_solver("certify")
    assert {"policy", "time_limit", "threads", "seed"} <= set(spec.options)
    with pytest.raises(OptionError, match="^time_limit"):
        solve(Problem([[1.0, 2.0]], 2, 1, 1, 1), "certify", time_limit=0)


def test_split_masks_cover_each_split_once():
    m = split_masks(3)
    assert m.shape == (10, 6) and bool((m.sum(1) == 3).all()) and bool((m[:, 0] == 1).all())
    assert len({tuple(r.tolist()) for r in m}) == 10


def test_polish_two_gpus_reaches_the_packing_optimum():
    g = torch.Generator().manual_seed(1)
    loads = torch.rand(2, 4, generator=g, dtype=torch.float64) * 10
    experts = torch.arange(8).view(2, 4)
    new, ex = polish(loads, experts, deadline=time.perf_counter() + 10)
    assert sorted(new.flatten().tolist()) == sorted(loads.flatten().tolist())
    assert bool((loads.flatten()[ex.flatten()] == new.flatten()).all())     # replicas moved with their expert
    opt = packing_optimum(loads.flatten().tolist(), [1] * 8, 2, False)
    assert float(new.sum(1).max()) == pytest.approx(opt)


@st.composite
def tiny(draw):
    P = draw(st.integers(2, 3))
    S = draw(st.integers(2, 3))
    E = draw(st.integers(2, min(5, P * S)))
    w = draw(st.lists(st.integers(0, 50), min_size=E, max_size=E))
    if sum(w) == 0:
        w[-1] = 1
    scale = draw(st.sampled_from([1.0, 1e-5]))
    return [x * scale for x in w], P * S, P


@settings(max_examples=15)
@given(tiny())
def test_bound_never_exceeds_the_brute_force_optimum(inst):
    w, R, P = inst
    if R // P == 3 and len(w) > 4:
        return                                    # brute force too slow there
    opt = brute_force(w, R, P, model="joint")
    res = solve(Problem([w], R, 1, 1, P), "certify", policy="global", time_limit=0.5)
    assert res.plan is not None
    assert float(res.lower_bound[0]) <= opt * (1 + 1e-9)
    assert float(res.objective[0]) >= opt * (1 - 1e-9)


def test_two_slots_per_gpu_gap_closed_by_the_plan():
    g = torch.Generator().manual_seed(0)
    w = (torch.exp(torch.randn(1, 24, generator=g, dtype=torch.float64)) * 1000).round()
    p = Problem(w, 96, 1, 1, 48)
    res = solve(p, "certify", policy="global", time_limit=6.0)
    rows = gap_closure(res, target=0.5)
    base = res.info["baseline_objective"][0]
    assert float(res.objective[0]) <= base
    assert float(res.lower_bound[0]) >= float(lower_bound(p)[0])
    r = rows[0]
    assert r["closed_by_plan"] + r["closed_by_bound"] == pytest.approx(r["baseline_gap"] - r["gap"])
    assert r["closed_by"] in ("already", "plan", "bound")


def test_one_node_hierarchical_at_two_slots_per_gpu_is_proven_like_global():
    """On one node the hierarchical policy constrains nothing, so the exact bisection at two
    slots per GPU runs under it too and proves the optimum (policy auto resolves hierarchical)."""
    w = torch.tensor([[900.0, 410.0, 300.0, 260.0, 120.0, 40.0, 35.0, 10.0]], dtype=torch.float64)
    p = Problem(w, 12, 2, 1, 6)                                 # 8 experts in 2 groups, one node, S = 2
    res = solve(p, "certify", time_limit=20.0)
    assert res.policy == "hierarchical"
    assert res.status == "proven_optimal" and bool(res.proven_optimal[0])
    assert float(res.objective[0]) == pytest.approx(brute_force(w[0].tolist(), 12, 6, model="joint"), rel=1e-9)


def test_hierarchical_plan_keeps_groups_on_their_node():
    g = torch.Generator().manual_seed(2)
    w = (torch.exp(torch.randn(2, 32, generator=g, dtype=torch.float64)) * 100).round()
    p = Problem(w, 48, 4, 2, 8)
    res = solve(p, "certify", policy="hierarchical", time_limit=3.0)
    assert res.model_scope is not None and res.model_scope.policy == "hierarchical"
    assert bool((structure_bound(p, res.plan) >= lower_bound(p, policy="hierarchical") * (1 - 1e-12)).all())
    baseline = torch.tensor(res.info["baseline_objective"], dtype=torch.float64)
    assert bool((res.objective <= baseline * (1 + 1e-12)).all())


@settings(max_examples=10)
@given(st.lists(st.integers(0, 40), min_size=4, max_size=4), st.sampled_from([1.0, 1e-4]))
def test_hierarchical_bound_never_exceeds_the_hierarchical_optimum(loads, scale):
    from solvers.certify.hierarchical import hierarchical_bound
    if sum(loads) == 0:
        loads[0] = 1
    w = [x * scale for x in loads]
    # 4 experts in 4 groups, 2 nodes x 1 GPU, 6 slots: every hierarchical plan enumerated
    opt = brute_force(w, 6, 2, model="hierarchical", num_groups=4, num_nodes=2, node_budget="fixed")
    bound = float(hierarchical_bound(Problem([w], 6, 4, 2, 2))[0])
    assert bound <= opt * (1 + 1e-9)
    assert bound >= float(lower_bound(Problem([w], 6, 4, 2, 2))[0]) * (1 - 1e-12)


def test_gap_closure_in_the_hierarchical_model():
    g = torch.Generator().manual_seed(5)
    w = (torch.exp(torch.randn(1, 32, generator=g, dtype=torch.float64)) * 100).round()
    p = Problem(w, 48, 4, 2, 8)
    res = solve(p, "certify", policy="hierarchical", time_limit=2.0)
    row = gap_closure(res, scope="model")[0]
    assert row["gap"] == pytest.approx(float(res.gap_in_model[0]))
    assert row["closed_by_plan"] + row["closed_by_bound"] == pytest.approx(row["baseline_gap"] - row["gap"])
    with pytest.raises(OptionError, match="^scope"):
        gap_closure(res, scope="nodes")
    flat = solve(Problem(w, 48, 1, 1, 8), "certify", policy="global", time_limit=1.0)
    with pytest.raises(OptionError, match="^scope"):
        gap_closure(flat, scope="model")


@pytest.mark.parametrize("groups, nodes", [(8, 4), (6, 2), (4, 4), (6, 3)])
def test_balanced_assignments_list_each_split_once(groups, nodes):
    from solvers.certify.hierarchical import assignment_count, balanced_assignments
    splits = balanced_assignments(groups, nodes)
    assert len(splits) == assignment_count(groups, nodes)
    canon = {frozenset(frozenset(s) for s in split) for split in splits}
    assert len(canon) == len(splits)
    for split in splits:
        assert sorted(g for s in split for g in s) == list(range(groups))
        assert all(len(s) == groups // nodes for s in split)
