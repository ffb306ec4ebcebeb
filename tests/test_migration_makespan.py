"""Planning for transfer time: objective="makespan" keeps the slack, never schedules longer
than the move-count plan, and weighs copies by their link."""
from __future__ import annotations

import pytest
import torch

from solvers import OptionError, Plan, Problem, solve
from solvers.cluster import Cluster
from solvers.replan import plan_with_migration
from solvers.replan.relabel import copy_costs
from solvers.transfers import schedule_transfers
from solvers.transfers.schedule import needed_copies
from solvers.network import Network

L, E, N, P, R = 6, 32, 2, 8, 40


def _drifted(seed, sigma=0.4):
    g = torch.Generator().manual_seed(seed)
    old = torch.exp(torch.randn(L, E, generator=g, dtype=torch.float64)) * 100
    new = old * torch.exp(sigma * torch.randn(L, E, generator=g, dtype=torch.float64))
    return old, new


def test_copy_costs_by_link():
    net = Network(400e9, 50e9)
    old = torch.tensor([[0, 1, 2, 3]])                 # 2 nodes x 1 GPU x 2 slots
    c = copy_costs(old, 4, 2, 2, net)[0]               # [P, E]
    assert c[0, 0] == 0 and c[0, 1] == 0                # held
    assert c[0, 2] == pytest.approx(8.0)                # only on the other node: an inter copy
    old2 = torch.tensor([[0, 1, 2, 3]])                 # 1 node x 2 GPUs: everything intra
    c2 = copy_costs(old2, 4, 2, 1, net)[0]
    assert c2[0, 2] == 1.0 and c2[1, 0] == 1.0
    host = copy_costs(old, 4, 2, 2, Network(400e9, 50e9, 100e9))[0]
    assert host[0, 2] == pytest.approx(4.0)             # host memory is faster than the NIC here


@pytest.mark.parametrize("policy", ["global", "hierarchical"])
def test_makespan_objective_within_slack_and_never_slower(policy):
    net = Network(400e9, 50e9)
    cluster = Cluster(N, P, R, network=net)
    for seed in range(2):
        old_w, new_w = _drifted(seed)
        prev = solve(Problem(old_w, cluster=cluster, num_groups=4), "deepseek", policy=policy).plan
        pn = Problem(new_w, cluster=cluster, num_groups=4)
        by_moves = plan_with_migration(pn, "deepseek", prev, slack=0.02, policy=policy)
        by_time = plan_with_migration(pn, "deepseek", prev, slack=0.02, policy=policy, objective="makespan")
        assert by_time.termination == "completed", by_time.message
        target = torch.tensor(by_time.info["target_max_load"], dtype=torch.float64)
        assert bool((by_time.score.max_load <= target * (1 + 1e-9)).all())
        t_moves = schedule_transfers(prev, by_moves.plan, P, P // N, 1000, net).makespan
        t_time = schedule_transfers(prev, by_time.plan, P, P // N, 1000, net).makespan
        assert t_time <= t_moves * (1 + 1e-12)
        assert by_time.info["makespan_passes"][0]["makespan_per_byte"] == pytest.approx(t_moves / 1000, rel=1e-9)


def test_makespan_objective_refuses_the_exact_method():
    old_w, new_w = _drifted(0)
    prev = solve(Problem(old_w, R, 4, N, P), "deepseek").plan
    with pytest.raises(OptionError, match="objective"):
        plan_with_migration(Problem(new_w, R, 4, N, P), "deepseek", prev, method="exact", objective="makespan")
    with pytest.raises(OptionError, match="objective"):
        plan_with_migration(Problem(new_w, R, 4, N, P), "deepseek", prev, objective="time")


def test_makespan_objective_plans_for_the_shared_model():
    # the shared model times the same plans differently: planning for it never loses to the
    # move-count plan under that model, and its first pass is the move-count plan timed so
    net = Network(400e9, 50e9)
    cluster = Cluster(N, P, R, network=net)
    for seed in range(2):
        old_w, new_w = _drifted(seed)
        prev = solve(Problem(old_w, cluster=cluster, num_groups=4), "deepseek").plan
        pn = Problem(new_w, cluster=cluster, num_groups=4)
        by_moves = plan_with_migration(pn, "deepseek", prev, slack=0.02)
        by_time = plan_with_migration(pn, "deepseek", prev, slack=0.02, objective="makespan", transfer_model="shared")
        t_moves = schedule_transfers(prev, by_moves.plan, P, P // N, 1000, net, model="shared").makespan
        t_time = schedule_transfers(prev, by_time.plan, P, P // N, 1000, net, model="shared").makespan
        assert t_time <= t_moves * (1 + 1e-12)
        assert by_time.info["makespan_passes"][0]["makespan_per_byte"] == pytest.approx(t_moves / 1000, rel=1e-9)
        used = by_time.info["makespan_passes"][by_time.info["makespan_pass_used"]]
        assert used["makespan_per_byte"] == pytest.approx(t_time / 1000, rel=1e-9)
    with pytest.raises(OptionError, match="transfer_model"):
        plan_with_migration(pn, "deepseek", prev, objective="makespan", transfer_model="fluid")


@pytest.mark.parametrize("model", ["rounds", "shared"])
def test_makespan_objective_on_real_clusters_within_slack_and_never_slower(model):
    # speeds, uneven slots and a failed GPU: the plans within the slack are elastic re-plans in
    # time; the makespan objective keeps the shortest schedule among them (slot map of the cluster)
    net = Network(400e9, 50e9)
    clusters = (Cluster(N, P, R, gpu_speed=[1.0] * 4 + [1.5] * 4, network=net),
                Cluster(N, P, gpu_slots=[6, 4, 5, 5, 6, 4, 5, 5], network=net),
                Cluster(N, P, R, failed=[3], network=net))
    for cluster in clusters:
        old_w, new_w = _drifted(0)
        prev = solve(Problem(old_w, cluster=cluster), "kk_swap").plan
        pn = Problem(new_w, cluster=cluster)
        by_moves = plan_with_migration(pn, "kk_swap", prev, slack=0.02)
        by_time = plan_with_migration(pn, "kk_swap", prev, slack=0.02, objective="makespan", transfer_model=model)
        assert by_time.info["objective"] == "makespan"
        target = torch.tensor(by_time.info["target_max_time"], dtype=torch.float64)
        assert bool((by_time.score.max_time <= target * (1 + 1e-9)).all())
        slots = cluster.slot_gpus()
        t_moves = schedule_transfers(prev, by_moves.plan, P, P // N, 1000, net, model=model, slot_gpu=slots).makespan
        t_time = schedule_transfers(prev, by_time.plan, P, P // N, 1000, net, model=model, slot_gpu=slots).makespan
        assert t_time <= t_moves * (1 + 1e-12)
        passes = by_time.info["makespan_passes"]
        assert [p["slack"] for p in passes] == pytest.approx([0.02, 0.01, 0.0])
        assert passes[0]["makespan_per_byte"] == pytest.approx(t_moves / 1000, rel=1e-9)
        assert passes[0]["moves"] == by_moves.score.moves
        # a failed GPU receives nothing: every copy lands on a live GPU
        copies = needed_copies(prev, by_time.plan, P, P // N, E, slots)
        assert set(copies.dst.tolist()) <= set(cluster.live_gpus)
    with pytest.raises(OptionError) as err:
        plan_with_migration(pn, "kk_swap", prev, slack=0.02, objective="makespan", budget=0.5)
    assert err.value.param == "budget"


def test_spreading_receivers_keeps_every_layer_and_lowers_the_squared_receive_time():
    """spread_receivers renames GPUs inside nodes per layer: each layer's GPU contents (so its
    loads and its node's experts) are kept, and the sum over GPUs of the squared receive time
    of all layers never grows (each (layer, node) step may keep its names)."""
    from solvers.replan.relabel import spread_receivers
    from solvers.scoring import gpu_presence

    net = Network(400e9, 50e9)
    cluster = Cluster(N, P, R, network=net)
    for seed in range(3):
        old_w, new_w = _drifted(seed, sigma=1.0)
        prev = solve(Problem(old_w, cluster=cluster, num_groups=4), "deepseek", policy="hierarchical").plan
        new = solve(Problem(new_w, cluster=cluster, num_groups=4), "deepseek", policy="hierarchical").plan
        cost = copy_costs(prev.phy2log, E, P, N, net)                                  # [L, P, E]
        out = spread_receivers(new.phy2log, prev.phy2log, cost, E, P, N)
        S, Q = R // P, P // N
        for layer in range(L):
            for n in range(N):
                mine = lambda p2l: sorted(tuple(sorted(g)) for g in
                                          p2l[layer].view(P, S)[n * Q:(n + 1) * Q].tolist())
                assert mine(out) == mine(new.phy2log)

        def squared(p2l):
            receive = (gpu_presence(p2l, E, P).to(torch.float64) * cost).sum(2).sum(0)      # [P]
            return float((receive ** 2).sum())
        assert squared(out) <= squared(new.phy2log) * (1 + 1e-12)
