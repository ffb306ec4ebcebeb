"""The batched DeepSeek EPLB: golden example, reference agreement, invariants, devices."""
import numpy as np
import pytest
import torch
from hypothesis import given, strategies as st

from solvers import Plan, Problem, ProblemError, rebalance_experts, solve
from solvers.deepseek import balanced_packing, rebalance_hierarchical, replicate_experts

from reference_eplb import pack as ref_pack
from reference_eplb import rebalance as ref_rebalance

README_WEIGHT = [[90, 132, 40, 61, 104, 165, 39, 4, 73, 56, 183, 86],
                 [20, 107, 104, 64, 19, 197, 187, 157, 172, 86, 16, 27]]
README_PHY2LOG = [[5, 6, 5, 7, 8, 4, 3, 4, 10, 9, 10, 2, 0, 1, 11, 1],
                  [7, 10, 6, 8, 6, 11, 8, 9, 2, 4, 5, 1, 5, 0, 3, 1]]


def test_readme_golden_example():
    phy2log, log2phy, logcnt = rebalance_experts(torch.tensor(README_WEIGHT), 16, 4, 2, 8)
    assert phy2log.tolist() == README_PHY2LOG
    assert logcnt.tolist() == [[1, 2, 1, 1, 2, 2, 1, 1, 1, 1, 2, 1], [1, 2, 1, 1, 1, 2, 2, 1, 2, 1, 1, 1]]
    assert log2phy.shape == (2, 12, 2) and phy2log.dtype == log2phy.dtype == logcnt.dtype == torch.int64
    Plan(phy2log, log2phy, logcnt).validate(2, 12, 16, 8)


@pytest.mark.parametrize("convert", [lambda w: w, np.asarray, torch.tensor,
                                     lambda w: torch.tensor(w, dtype=torch.float64),
                                     lambda w: torch.tensor(w, dtype=torch.int32)])
def test_accepts_lists_arrays_and_tensors(convert):
    phy2log, _, _ = rebalance_experts(convert(README_WEIGHT), 16, 4, 2, 8)
    assert phy2log.tolist() == README_PHY2LOG


def distinct_weights(layers, experts, seed):
    """Loads without ties anywhere in the algorithm (distinct, not multiples of one another)."""
    rng = np.random.default_rng(seed)
    return rng.uniform(1.0, 1000.0, size=(layers, experts)).astype(np.float32)


shapes = st.tuples(
    st.integers(1, 3),                 # layers
    st.sampled_from([1, 2, 4]),        # nodes
    st.sampled_from([1, 2, 4]),        # groups per node
    st.integers(1, 3),                 # experts per group
    st.sampled_from([1, 2, 4]),        # gpus per node
    st.integers(0, 3),                 # extra slots per gpu
    st.integers(0, 2**31 - 1),         # seed
)


def build(shape):
    L, N, gpn, per_group, gpus_per_node, extra, seed = shape
    G = N * gpn
    E = G * per_group
    P = N * gpus_per_node
    # R >= E, R % P == 0, (R / N) >= E / N
    S = -(-E // P) + extra
    return distinct_weights(L, E, seed), S * P, G, N, P


@given(shapes)
def test_matches_reference_implementation(shape):
    # The reference sorts stably too: DeepSeek's own code sorts unstably, so its log2phy may
    # order an expert's equal-load replicas differently (same slots); phy2log/logcnt agree.
    w, R, G, N, P = build(shape)
    phy2log, log2phy, logcnt = rebalance_experts(torch.from_numpy(w), R, G, N, P)
    ref_p2l, ref_rank, ref_cnt = ref_rebalance(w, R, G, N, P)
    assert phy2log.tolist() == ref_p2l
    assert logcnt.tolist() == ref_cnt
    # log2phy lists each expert's slots in replica-rank order (DeepSeek's convention)
    for l, (row, ranks) in enumerate(zip(ref_p2l, ref_rank)):
        for slot, (e, r) in enumerate(zip(row, ranks)):
            assert log2phy[l, e, r] == slot


@given(shapes, st.sampled_from(["auto", "global"]))
def test_plan_invariants(shape, policy):
    w, R, G, N, P = build(shape)
    problem = Problem(w, R, G, N, P)
    result = solve(problem, "deepseek", policy=policy)
    plan = result.plan
    plan.validate(problem.num_layers, problem.num_experts, R, P)
    assert result.policy == ("hierarchical" if policy == "auto" else "global")
    assert bool((plan.logcnt.sum(1) == R).all())
    assert plan.log2phy.shape[2] == int(plan.logcnt.max())
    if result.policy == "hierarchical":
        # every group lives on exactly one node, and each node holds G/N whole groups
        E, slots_per_node = problem.num_experts, R // N
        group = plan.phy2log // (E // G)                            # [L, R]
        node_groups = group.view(problem.num_layers, N, slots_per_node)
        for l in range(problem.num_layers):
            owners = {}
            for n in range(N):
                for g in node_groups[l, n].unique().tolist():
                    assert owners.setdefault(g, n) == n
            assert sorted(owners) == list(range(G))
            assert all(list(owners.values()).count(n) == G // N for n in range(N))


def test_policy_fallback_and_explicit_policies():
    w = distinct_weights(2, 12, 0)
    # 3 groups on 2 nodes: DeepSeek falls back to global
    assert solve(Problem(w, 16, 3, 2, 8)).policy == "global"
    assert solve(Problem(w, 16, 4, 2, 8)).policy == "hierarchical"
    assert solve(Problem(w, 16, 4, 2, 8), policy="global").policy == "global"
    with pytest.raises(ProblemError, match="num_groups"):
        solve(Problem(w, 16, 3, 2, 8), policy="hierarchical")
    # global on the hierarchical shape equals the one-group-one-node hierarchy
    a = rebalance_experts(w, 16, 4, 2, 8, policy="global")
    b = rebalance_experts(w, 16, 1, 1, 8)
    assert all(torch.equal(x, y) for x, y in zip(a, b))


def test_fallback_matches_global_result_exactly():
    w = distinct_weights(3, 12, 5)
    fallback = rebalance_experts(w, 24, 3, 2, 8)          # G % N != 0
    glob = rebalance_experts(w, 24, 1, 1, 8)
    assert all(torch.equal(x, y) for x, y in zip(fallback, glob))


def test_drop_in_global_allows_gpus_not_divisible_by_nodes():
    # DeepSeek's code runs the global policy for 3 nodes and 8 GPUs; so does the drop-in.
    phy2log, _, _ = rebalance_experts(distinct_weights(1, 12, 1), 16, 4, 3, 8)
    assert phy2log.shape == (1, 16)


def test_balanced_packing_lowest_index_on_ties():
    # all-equal weights: the greedy fills packs in index order, round by round
    pack_index, rank = balanced_packing(torch.ones(1, 6), 3)
    assert pack_index.tolist() == [[0, 1, 2, 0, 1, 2]]
    assert rank.tolist() == [[0, 0, 0, 1, 1, 1]]


@given(st.integers(1, 4), st.integers(1, 5), st.integers(0, 2**31 - 1))
def test_balanced_packing_matches_reference(packs, per_pack, seed):
    w = torch.from_numpy(distinct_weights(3, packs * per_pack, seed))
    pack_index, rank = balanced_packing(w, packs)
    for l in range(3):
        ref_p, ref_r = ref_pack(list(w[l].numpy()), packs)
        assert pack_index[l].tolist() == ref_p and rank[l].tolist() == ref_r
    counts = torch.zeros(3, packs, dtype=torch.int64).scatter_add_(1, pack_index, torch.ones_like(pack_index))
    assert bool((counts == per_pack).all())


def test_replication_minimises_max_load_per_replica():
    w = torch.tensor([[600., 560, 120, 120, 20, 10, 10, 10]])
    _, _, cnt = replicate_experts(w, 16)
    assert int(cnt.sum()) == 16 and bool((cnt >= 1).all())
    # brute force over all count vectors with sum 16, each >= 1
    best = min(max(600 / a, 560 / b, 120 / c, 120 / d, 20.0)
               for a in range(1, 10) for b in range(1, 10) for c in range(1, 10) for d in range(1, 10)
               if a + b + c + d + 4 == 16)
    assert float((w / cnt).max()) == pytest.approx(best)


def test_zero_loads_are_valid():
    phy2log, log2phy, logcnt = rebalance_experts(torch.zeros(2, 8), 16, 2, 2, 4)
    Plan(phy2log, log2phy, logcnt).validate(2, 8, 16, 4)


@pytest.mark.gpu
@pytest.mark.parametrize("R,G,N,P", [(288, 8, 4, 32), (320, 1, 1, 64), (16, 4, 2, 8)])
def test_cuda_matches_cpu(R, G, N, P):
    w = torch.from_numpy(distinct_weights(8, 256 if R > 16 else 12, 3))
    cpu = rebalance_experts(w, R, G, N, P)
    cuda = rebalance_experts(w.cuda(), R, G, N, P)
    for a, b in zip(cpu, cuda):
        assert b.is_cuda
        assert torch.equal(a, b.cpu())


@pytest.mark.gpu
def test_no_host_sync_inside_the_algorithm():
    w = torch.from_numpy(distinct_weights(8, 256, 3)).cuda()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")   # any device->host sync raises
    try:
        rebalance_hierarchical(w, 288, 8, 4, 32)
        rebalance_hierarchical(w, 320, 1, 1, 64)
    finally:
        torch.cuda.set_sync_debug_mode(0)
