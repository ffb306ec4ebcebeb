"""The shared scorer against hand-computed values."""
import pytest
import torch

from solvers import Plan, Problem, score


def test_hand_computed_two_gpus_two_nodes():
    # 3 experts, loads 6, 2, 4; 4 slots on 2 GPUs (1 GPU per node); expert 0 has 2 replicas.
    problem = Problem([[6.0, 2.0, 4.0]], 4, 1, 2, 2)
    plan = Plan.from_phy2log([[0, 1, 0, 2]], 3)       # GPU0: e0, e1; GPU1: e0, e2
    s = score(problem, plan)
    assert s.gpu_load.tolist() == [[3.0 + 2.0, 3.0 + 4.0]]
    assert s.node_load.tolist() == [[5.0, 7.0]]
    assert s.max_load.tolist() == [7.0] and s.mean_load.tolist() == [6.0]
    m = s.metrics()
    assert m["imbalance_mean"] == pytest.approx(7 / 6)
    assert m["balancedness"] == pytest.approx(6 / 7)
    assert m["node_imbalance_mean"] == pytest.approx(7 / 6)
    assert m["duplicates"] == 0


def test_two_layers_aggregates_and_duplicates():
    problem = Problem([[6.0, 2.0, 4.0], [1.0, 1.0, 10.0]], 4, 1, 1, 2)
    plan = Plan.from_phy2log([[0, 0, 1, 2],            # layer 0: GPU0 holds e0 twice (a duplicate)
                              [2, 0, 2, 1]], 3)         # layer 1: e2 split over both GPUs
    s = score(problem, plan)
    assert s.gpu_load.tolist() == [[6.0, 6.0], [6.0, 6.0]]
    assert s.duplicates == 1
    problem2 = Problem([[6.0, 2.0, 4.0], [1.0, 1.0, 10.0]], 4, 1, 1, 2)
    s2 = score(problem2, Plan.from_phy2log([[0, 0, 1, 2], [2, 2, 0, 1]], 3))
    # layer 1: GPU0 = 5 + 5 = 10, GPU1 = 1 + 1 = 2 -> max 10, mean 6
    assert s2.max_load.tolist() == [6.0, 10.0]
    m = s2.metrics()
    assert m["imbalance_mean"] == pytest.approx((1 + 10 / 6) / 2)
    assert m["imbalance_worst"] == pytest.approx(10 / 6)
    assert m["balancedness"] == pytest.approx((1 + 0.6) / 2)
    assert m["balancedness_sum"] == pytest.approx((6 + 6) / (6 + 10))
    assert m["duplicates"] == 2
    assert m["max_load_sum"] == 16.0


def test_moves_against_previous_plan():
    problem = Problem([[1.0, 1.0, 1.0, 1.0]], 4, 1, 1, 2)
    old = Plan.from_phy2log([[0, 1, 2, 3]], 4)
    new = Plan.from_phy2log([[0, 2, 1, 3]], 4)           # e2 moves to GPU0, e1 to GPU1
    s = score(problem, new, previous=old, expert_bytes=1000)
    assert s.moves == 2 and s.moves_bytes == 2000
    assert score(problem, old, previous=old).moves == 0


def test_all_zero_layer_is_balanced():
    s = score(Problem([[0.0, 0.0]], 2, 1, 1, 2), Plan.from_phy2log([[0, 1]], 2))
    assert s.metrics()["imbalance_mean"] == 1.0 and s.metrics()["balancedness"] == 1.0


def test_scorer_uses_float64():
    w = torch.tensor([[2.0**30 + 1, 1.0]], dtype=torch.float64)
    s = score(Problem(w, 2, 1, 1, 1), Plan.from_phy2log([[0, 1]], 2))
    assert s.gpu_load.dtype == torch.float64 and s.gpu_load.item() == 2.0**30 + 2


def test_off_node_share_hand_computed():
    # 4 experts in 2 groups ({0,1}, {2,3}), 2 nodes of 1 GPU, 2 slots each.
    problem = Problem([[4.0, 2.0, 3.0, 1.0]], 4, 2, 2, 2)
    strict = Plan.from_phy2log([[0, 1, 2, 3]], 4)      # each group on one node
    assert score(problem, strict).off_node_share.tolist() == [0.0]
    mixed = Plan.from_phy2log([[0, 2, 1, 3]], 4)       # group 0: 4 on node0, 2 on node1
    # home of group 0 is node 0 (4 tokens), of group 1 node 0 (3 tokens): off = (2 + 1) / 10
    s = score(problem, mixed)
    assert s.off_node_share.tolist() == [pytest.approx(0.3)]
    assert s.metrics()["off_node_share_mean"] == pytest.approx(0.3)


def test_strict_hierarchical_plans_stay_home():
    from solvers import solve
    w = torch.rand(4, 64, generator=torch.Generator().manual_seed(0)) * 100
    res = solve(Problem(w, 96, 8, 4, 16), "deepseek")
    assert res.policy == "hierarchical" and res.score.metrics()["off_node_share_worst"] == 0.0
    glob = solve(Problem(w, 96, 8, 4, 16), "deepseek", policy="global")
    assert glob.score.metrics()["off_node_share_mean"] > 0.2


@pytest.mark.parametrize("kwargs,param", [
    ({"plan": None}, "plan"),
    ({"previous": "old.json"}, "previous"),
    ({"expert_bytes": "a"}, "expert_bytes"),
    ({"expert_bytes": 1.5}, "expert_bytes"),
    ({"expert_bytes": -1}, "expert_bytes"),
    ({"expert_bytes": True}, "expert_bytes"),
])
def test_library_misuse_names_the_parameter(kwargs, param):
    from solvers import EPLBError, Problem, score, solve

    p = Problem([[1.0, 2.0, 3.0, 4.0]], 4, 1, 1, 2)
    plan = solve(p, "deepseek").plan
    args = {"plan": plan, "previous": plan, **kwargs}
    with pytest.raises(EPLBError) as err:
        score(p, args.pop("plan"), **args)
    assert err.value.param == param


def test_per_slot_loads_broadcasts_over_steps_and_candidates():
    from solvers.scoring import per_slot_loads

    w = torch.tensor([[4.0, 2.0, 6.0]], dtype=torch.float64)            # [L=1, E=3]
    p2l = torch.tensor([[0, 2, 0, 1]])                                   # [L, R=4]
    cnt = torch.tensor([[2, 1, 1]])                                      # [L, E]
    assert per_slot_loads(w, p2l, cnt).tolist() == [[2.0, 6.0, 2.0, 2.0]]
    steps = torch.stack([w, 2 * w])                                      # [T=2, L, E]
    assert per_slot_loads(steps, p2l, cnt).tolist() == [[[2.0, 6.0, 2.0, 2.0]], [[4.0, 12.0, 4.0, 4.0]]]
    assert per_slot_loads(w[0], p2l[0], cnt[0]).tolist() == [2.0, 6.0, 2.0, 2.0]


def test_rounding_is_not_reported_as_a_gap_or_a_share():
    """A gap of 2.2e-16 or an off-node share of 7.7e-18 is float rounding of sums taken in
    another order: reported as 0 (solvers.tolerances.ROUNDING_RTOL); real values stay."""
    from solvers.result import ratio_gap
    from solvers.scoring import off_node_share_of_slots

    obj = torch.tensor([1.0 + 2.2e-16 * 1.0, 1.5, 2.0], dtype=torch.float64)
    bound = torch.tensor([1.0, 1.0, 2.0 * (1 + 1e-9)], dtype=torch.float64)
    gap = ratio_gap(obj, bound)
    assert gap[0].item() == 0.0 and gap[1].item() == pytest.approx(0.5) and gap[2].item() < 0
    # one layer, 2 groups of 2 experts, 2 nodes of 2 slots: every slot on its group's node
    per_slot = torch.tensor([[0.1, 0.2, 0.3, 0.4]], dtype=torch.float64)
    phy2log = torch.tensor([[0, 1, 2, 3]])
    assert off_node_share_of_slots(per_slot, phy2log, 4, 2, 2).item() == 0.0
    away = off_node_share_of_slots(per_slot, torch.tensor([[0, 2, 1, 3]]), 4, 2, 2).item()
    assert away == pytest.approx(0.3)              # groups split 0.1/0.3 and 0.2/0.4 over the nodes
