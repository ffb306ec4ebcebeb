"""Migration-aware plans: moves counted by the shared scorer, relabelling keeps loads,
the exact model equals brute force, the repair meets its target, bad input names its parameter."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from solvers import OptionError, Plan, Problem, score, solve
from solvers.replan.exact import moves_of, solve_layer
from solvers.replan import plan_with_migration, relabel
from solvers.replan.relabel import align_slots
from solvers.replan.repair import repair


def _plan(rows, E):
    return Plan.from_phy2log(torch.tensor(rows), E)


def _drifted(L, E, seed, sigma=0.2):
    g = torch.Generator().manual_seed(seed)
    old = torch.exp(torch.randn(L, E, generator=g, dtype=torch.float64)) * 100
    new = old * torch.exp(sigma * torch.randn(L, E, generator=g, dtype=torch.float64))
    return old, new


def test_moves_count_new_gpu_expert_pairs_on_hand_made_plans():
    p = Problem(torch.ones(1, 3), 4, 1, 1, 2)
    old = _plan([[0, 1, 2, 2]], 3)                 # GPU0 {0, 1}, GPU1 {2, 2}
    assert score(p, old, previous=old).moves == 0
    swapped = _plan([[2, 2, 0, 1]], 3)            # every expert changes GPU: 3 new pairs
    assert score(p, swapped, previous=old).moves == 3
    dup = _plan([[0, 0, 2, 1]], 3)                # GPU1 gains expert 1 (GPU0's 2nd copy of 0 is free)
    assert score(p, dup, previous=old, expert_bytes=10).moves_bytes == 10


def test_relabel_keeps_loads_and_never_adds_moves():
    L, E = 6, 32
    old_w, new_w = _drifted(L, E, 0)
    for policy, nodes in (("global", 1), ("hierarchical", 2)):
        po, pn = Problem(old_w, 48, 4, 2, 8), Problem(new_w, 48, 4, 2, 8)
        prev = solve(po, "deepseek", policy=policy).plan
        fresh = solve(pn, "deepseek", policy=policy).plan
        rel = relabel(fresh, prev, 8, nodes)
        a, b = score(pn, fresh), score(pn, rel)
        # the same loads up to float summation order (slots are reordered inside a GPU)
        assert torch.allclose(a.gpu_load.sort(1).values, b.gpu_load.sort(1).values, rtol=1e-12, atol=0)
        if nodes > 1:                              # whole nodes renamed: node loads kept too
            assert torch.allclose(a.node_load.sort(1).values, b.node_load.sort(1).values, rtol=1e-12, atol=0)
        assert score(pn, rel, previous=prev).moves <= score(pn, fresh, previous=prev).moves
        assert torch.equal(rel.logcnt, fresh.logcnt)


def test_relabel_is_the_best_gpu_permutation():
    E, P, S = 6, 4, 3
    rng = np.random.default_rng(3)
    for _ in range(5):
        old = torch.tensor(rng.permutation(np.r_[np.arange(E), rng.integers(0, E, P * S - E)]))[None]
        new = torch.tensor(rng.permutation(np.r_[np.arange(E), rng.integers(0, E, P * S - E)]))[None]
        p = Problem(torch.ones(1, E), P * S, 1, 1, P)
        prev, fresh = Plan.from_phy2log(old, E), Plan.from_phy2log(new, E)
        best = min(score(p, Plan.from_phy2log(new.view(1, P, S)[:, list(perm)].reshape(1, -1), E),
                         previous=prev).moves for perm in itertools.permutations(range(P)))
        assert score(p, relabel(fresh, prev, P), previous=prev).moves == best


def test_align_slots_matches_its_definition_on_random_rows():
    """Each kept (expert, k-th replica) takes its old slot; the rest fill the free slots in order."""
    g = torch.Generator().manual_seed(5)
    new = torch.randint(0, 6, (200, 9), generator=g)
    old = torch.randint(0, 6, (200, 9), generator=g)
    out = align_slots(new, old)
    for n, o, a in zip(new.tolist(), old.tolist(), out.tolist()):
        def keyed(row):
            seen: dict[int, int] = {}
            keys = []
            for e in row:
                keys.append((e, seen.get(e, 0)))
                seen[e] = seen.get(e, 0) + 1
            return keys
        old_at = {k: i for i, k in enumerate(keyed(o))}
        want = [None] * len(n)
        rest = []
        for k in keyed(n):
            if k in old_at:
                want[old_at[k]] = k[0]
            else:
                rest.append(k[0])
        free = [i for i, v in enumerate(want) if v is None]
        for i, e in zip(free, rest):
            want[i] = e
        assert a == want


def test_align_slots_keeps_old_slots_of_kept_experts():
    new = torch.tensor([[4, 1, 1, 2]])
    old = torch.tensor([[1, 2, 3, 1]])
    out = align_slots(new, old)
    assert out.tolist() == [[1, 2, 4, 1]]


def _brute_min_moves(w, old, cap, P):
    E, R = len(w), len(old)
    S = R // P
    best = None
    for gpus in itertools.product(itertools.combinations_with_replacement(range(E), S), repeat=P):
        p2l = np.array([e for gpu in gpus for e in gpu])
        cnt = np.bincount(p2l, minlength=E)
        if (cnt == 0).any():
            continue
        load = (w[p2l] / cnt[p2l]).reshape(P, S).sum(1)
        if load.max() <= cap * (1 + 1e-12):
            m = moves_of(p2l, old, E, P)
            best = m if best is None else min(best, m)
    return best


@pytest.mark.parametrize("seed", range(6))
def test_exact_equals_brute_force_on_tiny_instances(seed):
    rng = np.random.default_rng(seed)
    E, P, S = 4, 3, 2
    w = rng.integers(1, 20, E).astype(float)
    old = rng.permutation(np.r_[np.arange(E), rng.integers(0, E, P * S - E)])
    loads = []
    for gpus in itertools.product(itertools.combinations_with_replacement(range(E), S), repeat=P):
        p2l = np.array([e for gpu in gpus for e in gpu])
        cnt = np.bincount(p2l, minlength=E)
        if (cnt > 0).all():
            loads.append((w[p2l] / cnt[p2l]).reshape(P, S).sum(1).max())
    cap = float(np.quantile(loads, 0.1))           # a budget few placements meet
    want = _brute_min_moves(w, old, cap, P)
    res = solve_layer(w, old, cap, P, lo=np.ones(E, int), hi=np.full(E, P * S - E + 1), full_window=True,
                      time_limit=20, threads=1)
    assert res.proven and res.moves == want
    cnt = np.bincount(res.phy2log, minlength=E)
    assert (w[res.phy2log] / cnt[res.phy2log]).reshape(P, S).sum(1).max() <= cap * (1 + 1e-12)


def test_repair_meets_target_with_fewer_moves_than_relabelled_fresh():
    L, E = 8, 64
    old_w, new_w = _drifted(L, E, 1)
    po, pn = Problem(old_w, 80, 1, 1, 16), Problem(new_w, 80, 1, 1, 16)
    prev = solve(po, "deepseek").plan
    fresh = solve(pn, "deepseek")
    target = fresh.score.max_load * 1.01
    out = repair(pn.weights, prev.phy2log, target, 16)
    plan = Plan.from_phy2log(out.phy2log, E)
    sc = score(pn, plan, previous=prev)
    assert bool(out.met.all())
    assert bool((sc.max_load <= target * (1 + 1e-12)).all())
    assert sc.moves < score(pn, relabel(fresh.plan, prev, 16), previous=prev).moves


@pytest.mark.parametrize("policy", ["global", "hierarchical"])
def test_plan_with_migration_keeps_the_balance_budget(policy):
    L, E = 6, 32
    old_w, new_w = _drifted(L, E, 2)
    po, pn = Problem(old_w, 48, 4, 2, 8), Problem(new_w, 48, 4, 2, 8)
    prev = solve(po, "deepseek", policy=policy).plan
    res = plan_with_migration(pn, "deepseek", prev, slack=0.02, expert_bytes=7, policy=policy)
    fresh_max = torch.tensor(res.info["fresh_max_load"], dtype=torch.float64)
    assert bool((res.score.max_load <= fresh_max * 1.02 * (1 + 1e-12)).all())
    assert res.score.moves == sum(res.info["moves_per_layer"])
    assert res.score.moves_bytes == 7 * res.score.moves
    assert res.score.moves <= res.info["relabelled_moves"] <= res.info["fresh_moves"]
    if policy == "hierarchical":                    # groups stay whole on one node
        node = torch.arange(48) // 24
        group = res.plan.phy2log // 8                   # 4 groups of 8 experts
        for layer in range(L):
            for k in range(4):
                assert node[group[layer] == k].unique().numel() == 1


def test_exact_method_never_worse_than_heuristic():
    L, E = 2, 12
    old_w, new_w = _drifted(L, E, 4)
    po, pn = Problem(old_w, 16, 1, 1, 4), Problem(new_w, 16, 1, 1, 4)
    prev = solve(po, "deepseek").plan
    h = plan_with_migration(pn, "deepseek", prev, slack=0.0)
    x = plan_with_migration(pn, "deepseek", prev, slack=0.0, method="exact", time_limit=20)
    assert x.score.moves <= h.score.moves
    for rep in x.info["exact_layers"]:
        assert rep["status"] in ("OPTIMAL", "FEASIBLE")
        assert rep["bound"] <= rep["moves"]


def test_bad_input_names_the_parameter():
    p = Problem(torch.ones(2, 8), 8, 1, 1, 4)
    other = solve(Problem(torch.ones(3, 8), 8, 1, 1, 4), "deepseek").plan
    with pytest.raises(OptionError, match="^previous:"):
        plan_with_migration(p, "deepseek", other)
    prev = solve(p, "deepseek").plan
    with pytest.raises(OptionError, match="^slack:"):
        plan_with_migration(p, "deepseek", prev, slack=-0.1)
    with pytest.raises(OptionError, match="^method:"):
        plan_with_migration(p, "deepseek", prev, method="magic")
    with pytest.raises(OptionError, match="^previous:"):
        plan_with_migration(p, "deepseek", "plan.json")
    with pytest.raises(OptionError, match="^base:"):
        solve(p, "migration", current=prev, base="migration")


def test_migration_solver_without_a_placement_in_force_returns_the_fresh_plan():
    p = Problem(torch.rand(2, 8) * 10, 8, 1, 1, 4)
    res = solve(p, "migration", base="kk_swap")
    assert torch.equal(res.plan.phy2log, solve(p, "kk_swap").plan.phy2log)


def _node_zero_heats_up(seed: int, layers: int, experts: int, slots: int, gpus: int, factor: float):
    """A hierarchical deepseek plan of 4 groups on 2 nodes, then the experts living on node 0
    heat up by ``factor``: (plan in force, new problem, node of every slot [R])."""
    g = torch.Generator().manual_seed(seed)
    old_w = torch.exp(torch.randn(layers, experts, generator=g, dtype=torch.float64)) * 100
    prev = solve(Problem(old_w, slots, 4, 2, gpus), "deepseek", policy="hierarchical").plan
    node_of_slot = torch.arange(slots) // (slots // 2)
    hot = torch.zeros(layers, experts, dtype=torch.bool)
    for layer in range(layers):
        hot[layer, prev.phy2log[layer][node_of_slot == 0].unique()] = True
    return prev, Problem(torch.where(hot, old_w * factor, old_w), slots, 4, 2, gpus), node_of_slot


def test_drifted_apart_nodes_move_whole_groups():
    # 4 groups of 8 experts on 2 nodes; the two groups of one node heat up 60 %: no repair
    # inside the nodes can meet the budget, so a group must change node.
    prev, pn, node_of_slot = _node_zero_heats_up(7, layers=3, experts=32, slots=48, gpus=8, factor=1.6)
    res = plan_with_migration(pn, "deepseek", prev, slack=0.01, policy="hierarchical")
    assert res.info["regrouped_layers"], res.info
    fresh_max = torch.tensor(res.info["fresh_max_load"], dtype=torch.float64)
    assert bool((res.score.max_load <= fresh_max * 1.01 * (1 + 1e-12)).all())
    for layer in range(3):
        for k in range(4):
            assert node_of_slot[res.plan.phy2log[layer] // 8 == k].unique().numel() == 1
    assert res.score.moves <= res.info["relabelled_moves"]


def test_exact_hierarchical_keeps_groups_whole():
    prev, pn, node_of_slot = _node_zero_heats_up(11, layers=2, experts=16, slots=24, gpus=4, factor=1.5)
    h = plan_with_migration(pn, "deepseek", prev, slack=0.01, policy="hierarchical")
    x = plan_with_migration(pn, "deepseek", prev, slack=0.01, policy="hierarchical", method="exact",
                            time_limit=20)
    assert x.score.moves <= h.score.moves
    fresh_max = torch.tensor(x.info["fresh_max_load"], dtype=torch.float64)
    assert bool((x.score.max_load <= fresh_max * 1.01 * (1 + 1e-12)).all())
    for layer in range(2):
        for k in range(4):
            assert node_of_slot[x.plan.phy2log[layer] // 4 == k].unique().numel() == 1


def test_pareto_rows_trade_moves_for_balance():
    from benchmarks.migration_pareto import pareto, pareto_table
    old_w, new_w = _drifted(4, 32, 5)
    prev = solve(Problem(old_w, 48, 1, 1, 8), "deepseek").plan
    rows = pareto(Problem(new_w, 48, 1, 1, 8), "deepseek", prev, slacks=(0.0, 0.05, 0.2), expert_bytes=2)
    assert [r["plan"] for r in rows[:2]] == ["fresh", "relabelled"]
    sweep = rows[2:]
    assert all(a["moves"] >= b["moves"] for a, b in zip(sweep, sweep[1:]))     # more slack, fewer moves
    assert all(r["bytes"] == 2 * r["moves"] for r in rows)
    assert "| relabelled |" in pareto_table(rows)


@pytest.mark.parametrize("nodes,gpus", [(1, 1), (4, 4)])
def test_one_gpu_per_zone_leaves_no_swap_and_still_plans(nodes, gpus):
    """One GPU (or, hierarchical, one GPU per node): the swap search has no partner GPU in the
    zone; the re-plan keeps what it can and finishes instead of failing on an empty argmin."""
    g = torch.Generator().manual_seed(3)
    w = torch.rand(2, 8, generator=g, dtype=torch.float64) * 100 + 1
    problem = Problem(w, num_replicas=12 if gpus == 1 else 16, num_groups=4, num_nodes=nodes, num_gpus=gpus)
    current = solve(problem.with_weights(w.flip(1)), "deepseek").plan
    res = solve(problem, "migration", current=current)
    assert res.termination == "completed", res.message
    assert res.score.imbalance_mean >= 1.0


def test_new_pairs_counts_as_the_presence_tables_do():
    """The scorer's new_pairs (sorted pair keys), the re-plans' move count, against [L, P, E]
    presence tables, on random plans with repeated experts on a GPU, with an uneven
    slot-to-GPU map, and with another map and slot count for the previous plan."""
    from solvers.scoring import gpu_presence, new_pairs
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        E, P, S = (int(torch.randint(1, hi, (1,), generator=g)) for hi in (10, 6, 5))
        a, b = (torch.randint(0, E, (3, P * S), generator=g) for _ in range(2))
        for slot_gpu in (None, torch.sort(torch.randint(0, P, (P * S,), generator=g)).values):
            want = (gpu_presence(a, E, P, slot_gpu) & ~gpu_presence(b, E, P, slot_gpu)).flatten(1).sum(1)
            assert torch.equal(new_pairs(a, b, E, P, slot_gpu, slot_gpu), want)
        # the scorer's form: each plan with its own slot map (a failed GPU's slots in the old one)
        old_gpu = torch.sort(torch.randint(0, P, (P * S + 2,), generator=g)).values
        c = torch.randint(0, E, (3, P * S + 2), generator=g)
        want = (gpu_presence(a, E, P) & ~gpu_presence(c, E, P, old_gpu)).flatten(1).sum(1)
        assert torch.equal(new_pairs(a, c, E, P, None, old_gpu), want)


def test_migration_after_gpu_failures_is_the_elastic_re_plan_of_the_healthy_clusters_plan():
    """The plan in force was made before a GPU failed (other slots): the migration solver
    plans (the elastic re-plan in time, the same plan as the ``elastic`` solver's), grades its
    moves against that plan on the healthy cluster, times schedules across the two slot maps
    for the makespan objective, and refuses the exact method naming the one that plans."""
    from solvers import Cluster
    g = torch.Generator().manual_seed(5)
    w = torch.exp(torch.randn(3, 16, generator=g, dtype=torch.float64)) * 100
    healthy, failed = Cluster(2, 8, 24), Cluster(2, 8, 24, failed=[3])
    before = solve(Problem(w.flip(1), num_groups=4, cluster=healthy), "kk_swap").plan
    p = Problem(w, num_groups=4, cluster=failed)
    res = plan_with_migration(p, "kk_swap", before, slack=0.01)
    el = solve(p, "elastic", current=before, current_cluster=healthy, slack=0.01)
    assert torch.equal(res.plan.phy2log, el.plan.phy2log)
    assert res.score.moves == sum(res.info["moves_per_layer"]) == el.info["moves"]
    assert not res.plan.phy2log.eq(-1).any() and res.plan.num_replicas == failed.num_replicas
    by_time = plan_with_migration(p, "kk_swap", before, slack=0.01, objective="makespan")
    passes = by_time.info["makespan_passes"]
    assert len(passes) == 3 and all(x["makespan_per_byte"] > 0 for x in passes)
    with pytest.raises(OptionError) as err:
        plan_with_migration(p, "kk_swap", before, method="exact")
    assert err.value.param == "method" and "heuristic" in str(err.value)
