"""Three-GPU re-splits: every split enumerated once, the multiset of replicas kept, and
on three GPUs the packing optimum (brute force) reached. Count moves: valid plans, never
worse, never below the brute-force optimum, and past a fixed-count local optimum."""
import math
import time

import pytest
import torch
from hypothesis import given, settings, strategies as st

from solvers.certify.resplit import count_moves, num_splits, polish, three_way_masks
from tests.brute import brute_force, packing_optimum


@pytest.mark.parametrize("slots", [1, 2, 3, 4])
def test_three_way_masks_list_each_split_once(slots):
    mask = three_way_masks(slots)                                     # [3S, 3M]
    M = num_splits(slots)
    assert M == math.factorial(3 * slots) // (math.factorial(slots) ** 3 * 6)
    per = mask.view(3 * slots, 3, M)
    assert bool((per.sum(1) == 1).all())                              # every replica on one GPU
    assert bool((per.sum(0) == slots).all())                          # S replicas per GPU
    assert bool((per[0, 0] == 1).all())                               # replica 0 on GPU 0
    # as unlabelled partitions, no split repeats
    parts = {frozenset(frozenset(torch.nonzero(per[:, b, m]).flatten().tolist()) for b in range(3))
             for m in range(M)}
    assert len(parts) == M


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 3), st.lists(st.integers(1, 100), min_size=9, max_size=9), st.booleans())
def test_three_gpus_reach_the_packing_optimum(slots, values, normalised):
    items = torch.tensor(values[:3 * slots], dtype=torch.float64)
    if normalised:
        items = items / items.sum() * 1e-3
    loads = items.view(3, slots)
    experts = torch.arange(3 * slots).view(3, slots)
    new_loads, new_experts = polish(loads, experts, deadline=time.perf_counter() + 5, ways=3)
    assert sorted(new_experts.reshape(-1).tolist()) == list(range(3 * slots))
    assert torch.equal(items[new_experts], new_loads)
    best = packing_optimum(items.tolist(), [1] * (3 * slots), 3, False)
    assert float(new_loads.sum(1).max()) == pytest.approx(best, rel=1e-12)


@settings(max_examples=25, deadline=None)
@given(st.integers(3, 8), st.integers(2, 4), st.integers(0, 10_000))
def test_never_worse_and_keeps_replicas_and_groups(gpus, slots, seed):
    gen = torch.Generator().manual_seed(seed)
    loads = torch.rand(gpus, slots, generator=gen, dtype=torch.float64) * 100
    experts = torch.arange(gpus * slots).view(gpus, slots)
    group = torch.arange(gpus) % 2
    new_loads, new_experts = polish(loads, experts, deadline=time.perf_counter() + 5, ways=3, group=group)
    assert float(new_loads.sum(1).max()) <= float(loads.sum(1).max())
    flat = loads.reshape(-1)
    assert torch.equal(flat[new_experts], new_loads)
    assert sorted(new_experts.reshape(-1).tolist()) == list(range(gpus * slots))
    home = torch.arange(gpus)[:, None].expand(gpus, slots).reshape(-1) % 2           # group of each replica's first GPU
    assert torch.equal(home[new_experts], group[:, None].expand(gpus, slots))


def test_three_gpus_help_where_two_gpu_resplits_are_stuck():
    # loads 31, 27, 30: no pair of GPUs can re-split to lower 31, three can (30)
    loads = torch.tensor([[9.0, 17.0, 5.0], [9.0, 5.0, 13.0], [11.0, 7.0, 12.0]], dtype=torch.float64)
    experts = torch.arange(9).view(3, 3)
    two, _ = polish(loads, experts, deadline=time.perf_counter() + 5)
    three, _ = polish(loads, experts, deadline=time.perf_counter() + 5, ways=3)
    assert float(two.sum(1).max()) == 31.0
    assert float(three.sum(1).max()) == packing_optimum(loads.reshape(-1).tolist(), [1] * 9, 3, False) == 30.0


def _max_load(w: torch.Tensor, experts: torch.Tensor) -> float:
    counts = torch.bincount(experts.reshape(-1), minlength=w.shape[0]).to(torch.float64)
    return float((w / counts)[experts].sum(1).max())


def test_count_moves_leave_a_fixed_count_local_optimum():
    # counts [2, 1, 1, 1, 1]: re-splits stop at 46; giving expert 0's second replica to
    # another expert reaches the optimum 39 (brute force over counts and packings)
    w = torch.tensor([29.0, 33.0, 32.0, 4.0, 14.0], dtype=torch.float64)
    experts = torch.tensor([0, 0, 1, 2, 3, 4]).view(3, 2)
    loads, experts = polish((w / torch.tensor([2, 1, 1, 1, 1]))[experts], experts,
                            deadline=time.perf_counter() + 5, ways=3)
    assert float(loads.sum(1).max()) == 46.0
    moved = count_moves(w, experts, deadline=time.perf_counter() + 5)
    assert _max_load(w, moved) == pytest.approx(brute_force(w.tolist(), 6, 3), rel=1e-12) == 39.0


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 3), st.integers(2, 3), st.lists(st.integers(0, 60), min_size=6, max_size=6),
       st.booleans())
def test_count_moves_never_worse_nor_below_the_optimum(gpus, slots, values, normalised):
    E = min(len(values), gpus * slots - 1)
    w = torch.tensor(values[:E], dtype=torch.float64) + 1
    if normalised:
        w = w / w.sum() * 1e-3
    counts = torch.ones(E, dtype=torch.int64)
    counts[: gpus * slots - E] += 1                                     # spare replicas to the first experts
    experts = torch.repeat_interleave(torch.arange(E), counts).view(gpus, slots)
    start = _max_load(w, experts)
    moved = count_moves(w, experts, deadline=time.perf_counter() + 5)
    assert moved.shape == experts.shape
    assert set(moved.reshape(-1).tolist()) == set(range(E))            # every expert keeps a replica
    value = _max_load(w, moved)
    assert value <= start
    assert value >= brute_force(w.tolist(), gpus * slots, gpus) * (1 - 1e-12)


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10_000))
def test_count_moves_within_nodes_keep_every_expert_on_its_node(seed):
    # 2 nodes x 2 GPUs x 3 slots; experts 0-3 live on node 0, experts 4-7 on node 1
    gen = torch.Generator().manual_seed(seed)
    w = torch.randint(1, 100, (8,), generator=gen).to(torch.float64)
    extra = torch.randint(0, 4, (4,), generator=gen)
    counts = torch.ones(8, dtype=torch.int64)
    for e in (extra[0], extra[1], 4 + extra[2], 4 + extra[3]):
        counts[e] += 1                              # per node: 4 experts + 2 spare replicas = 6 slots
    experts = torch.repeat_interleave(torch.arange(8), counts).view(4, 3)
    node = torch.tensor([0, 0, 1, 1])
    start = _max_load(w, experts)
    moved = count_moves(w, experts, deadline=time.perf_counter() + 5, group=node)
    home = node[:, None].expand(4, 3)
    assert bool(((moved < 4) == (home == 0)).all())  # every replica still on its expert's node
    assert set(moved.reshape(-1).tolist()) == set(range(8))
    assert _max_load(w, moved) <= start
