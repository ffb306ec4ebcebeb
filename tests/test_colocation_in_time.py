"""Forbidden colocation on real clusters (solvers.heuristics.packing): the counts are made
realisable without duplicates (Gale-Ryser) and a layer the swaps cannot clear is laid out by
Ryser's construction, so kk_swap/joint/best never give up on a cluster that has a plan."""
from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from solvers import Cluster, Problem, solve
from solvers.heuristics.common import LiveGPUs, expand_items
from solvers.heuristics.packing import duplicated, realisable_counts, ryser_layout


def _realisable(cnt: list[int], caps: list[int]) -> bool:
    """Brute force: is there a 0/1 experts x GPUs matrix with these row and column sums?"""
    E, Q = len(cnt), len(caps)
    def fill(e: int, left: list[int]) -> bool:
        if e == E:
            return all(x == 0 for x in left)
        for gs in itertools.combinations(range(Q), cnt[e]):
            if all(left[g] > 0 for g in gs):
                nxt = list(left)
                for g in gs:
                    nxt[g] -= 1
                if fill(e + 1, nxt):
                    return True
        return False
    return fill(0, list(caps))


@settings(max_examples=150, deadline=None)
@given(caps=st.lists(st.integers(0, 4), min_size=1, max_size=4), E=st.integers(1, 5), seed=st.integers(0, 10**6))
def test_counts_become_realisable_and_the_layout_has_no_duplicate(caps, E, seed):
    caps = [min(c, E) for c in caps]
    R = sum(caps)
    if R < E or max(caps) == 0:
        return
    g = torch.Generator().manual_seed(seed)
    Q = sum(1 for c in caps if c)
    # random counts, each between 1 and Q, summing to R
    cnt = torch.ones(E, dtype=torch.int64)
    for _ in range(R - E):
        room = (cnt < Q).nonzero().squeeze(1)
        cnt[room[torch.randint(len(room), (1,), generator=g)]] += 1
    w = torch.rand(1, E, generator=g, dtype=torch.float64) * 10
    live = [c for c in caps if c]
    gpus = LiveGPUs([1.0] * len(live), live, "cpu")
    new_cnt = realisable_counts(w, cnt.unsqueeze(0), gpus.caps)[0]
    assert int(new_cnt.sum()) == R and int(new_cnt.min()) >= 1 and int(new_cnt.max()) <= len(live)
    assert _realisable(new_cnt.tolist(), live)
    if _realisable(cnt.tolist(), live):
        assert torch.equal(new_cnt, cnt)                          # realisable counts are left as they are
    item_e, item_w = expand_items(w, new_cnt.unsqueeze(0))
    _, laid = ryser_layout(item_w, item_e, gpus, E)
    assert not bool(duplicated(laid, gpus, E).any())
    assert torch.equal(torch.bincount(laid[0], minlength=E), new_cnt)


@pytest.mark.parametrize("solver", ["kk_swap", "joint", "best"])
def test_a_cluster_whose_greedy_counts_force_a_duplicate_still_gets_a_plan(solver):
    """Slots 1, 3, 3 and three experts, one hot: the hot expert's fair share of replicas
    leaves a cold one with a single replica, yet both 3-slot GPUs must hold every expert.
    Found by hypothesis in the exact backends' test (the kk_swap warm start gave up)."""
    p = Problem(torch.tensor([[0.0, 0.0, 1.0]]), cluster=Cluster(1, 3, 7, gpu_slots=[1, 3, 3],
                                                                gpu_speed=[0.5, 0.5, 0.5]), num_groups=1)
    r = solve(p, solver, colocation="forbidden")
    assert r.score.duplicates == 0 and bool((r.plan.logcnt >= 2).all())
