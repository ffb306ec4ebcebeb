"""The engine adapters (solvers.engines) against what vLLM's and SGLang's balancer interfaces
document: the shapes and dtypes they return, every expert present, the replica counts summing
to the slots, heavier experts replicated at least as much by DeepSeek's greedy, DeepSeek's
published example, models without expert groups (vLLM passes 0), the global fallback, and the
placement in force (vLLM's ``old_global_expert_indices``) kept where the plan allows.

vLLM and SGLang are not installed here (their wheels need CUDA); the checks are written from
their documented algorithm tests, on real solvers.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from solvers import OptionError, Plan, Problem, score
from solvers.engines.sglang import algorithm
from solvers.engines.sglang import rebalance_experts as sglang_deepseek
from solvers.engines.vllm import WorkbenchEplbPolicy, policy_class

THIRD = Path(__file__).resolve().parent / "fixtures" / "third_party"

# DeepSeek's published example (README of deepseek-ai/EPLB; vLLM's and SGLang's tests use it).
EXAMPLE = torch.tensor([[90, 132, 40, 61, 104, 165, 39, 4, 73, 56, 183, 86],
                        [20, 107, 104, 64, 19, 197, 187, 157, 172, 86, 16, 27]])
EXAMPLE_PHY2LOG = torch.tensor([[5, 6, 5, 7, 8, 4, 3, 4, 10, 9, 10, 2, 0, 1, 11, 1],
                                [7, 10, 6, 8, 6, 11, 8, 9, 2, 4, 5, 1, 5, 0, 3, 1]])
SOLVERS = ["deepseek", "kk_swap", "joint"]


def check_phy2log(phy2log: torch.Tensor, layers: int, experts: int, replicas: int) -> torch.Tensor:
    """What an engine relies on: [layers, replicas] int64, ids in range, every expert present.
    Returns the replica counts [layers, experts]."""
    assert phy2log.shape == (layers, replicas) and phy2log.dtype == torch.int64
    assert int(phy2log.min()) >= 0 and int(phy2log.max()) < experts
    counts = torch.zeros(layers, experts, dtype=torch.int64).scatter_add_(1, phy2log, torch.ones_like(phy2log))
    assert bool((counts >= 1).all()), "an expert without a replica"
    assert bool((counts.sum(1) == replicas).all())
    return counts


@pytest.mark.parametrize("solver", SOLVERS)
def test_vllm_policy_returns_phy2log_of_every_expert(solver):
    policy = policy_class(solver)
    phy2log = policy.rebalance_experts(EXAMPLE, 16, 4, 2, 8)
    check_phy2log(phy2log, 2, 12, 16)
    assert issubclass(policy, WorkbenchEplbPolicy) and policy.solver == solver


@pytest.mark.parametrize("solver", SOLVERS)
def test_sglang_algorithm_returns_deepseeks_three_tensors(solver):
    phy2log, log2phy, logcnt = algorithm(solver)(EXAMPLE.float(), 16, 4, 2, 8)
    counts = check_phy2log(phy2log, 2, 12, 16)
    assert torch.equal(logcnt, counts) and logcnt.dtype == log2phy.dtype == torch.int64
    assert log2phy.shape[:2] == (2, 12) and log2phy.shape[2] >= int(counts.max())
    Plan.from_tensors(phy2log, log2phy, logcnt).validate(2, 12, 16, 8)      # padded with -1, each slot once


def test_the_greedy_reproduces_deepseeks_published_example_and_file():
    sys.path.insert(0, str(THIRD))
    try:
        import deepseek_eplb
    finally:
        sys.path.remove(str(THIRD))
    ours = sglang_deepseek(EXAMPLE, 16, 4, 2, 8)
    assert torch.equal(ours[0], EXAMPLE_PHY2LOG)
    for mine, theirs in zip(ours, deepseek_eplb.rebalance_experts(EXAMPLE, 16, 4, 2, 8)):
        assert torch.equal(mine, theirs)
    assert torch.equal(policy_class("deepseek").rebalance_experts(EXAMPLE, 16, 4, 2, 8), EXAMPLE_PHY2LOG)


def test_heavier_experts_get_at_least_as_many_replicas_from_the_greedy():
    weight = torch.tensor([[1000.0] + [1.0] * 15])
    counts = check_phy2log(policy_class("deepseek").rebalance_experts(weight, 24, 1, 1, 4), 1, 16, 24)
    assert int(counts[0, 0]) == 9 and bool((counts[0, 1:] == 1).all())    # every spare slot to the hot expert
    hier = check_phy2log(policy_class("deepseek").rebalance_experts(EXAMPLE, 16, 4, 2, 8), 2, 12, 16)
    flat = check_phy2log(policy_class("deepseek").rebalance_experts(EXAMPLE, 16, 1, 1, 8), 2, 12, 16)
    for layer in range(2):
        w = EXAMPLE[layer]
        assert hier[layer, w.argmax()] >= hier[layer, w.argmin()]        # inside node groups: the extremes
        order = torch.argsort(w, descending=True)                          # one group: monotone
        assert bool((flat[layer, order][:-1] >= flat[layer, order][1:]).all())


@pytest.mark.parametrize("groups,nodes,gpus", [(0, 1, 4), (0, 2, 4), (3, 2, 4), (4, 1, 1), (4, 4, 4)])
def test_shapes_engines_pass(groups, nodes, gpus):
    """No expert groups (vLLM passes 0), groups that do not split over the nodes (DeepSeek's
    global fallback), a single GPU, one GPU per node."""
    weight = torch.arange(1, 13, dtype=torch.int64).repeat(3, 1)
    for solver in ("deepseek", "kk_swap"):
        check_phy2log(policy_class(solver).rebalance_experts(weight, 16, groups, nodes, gpus), 3, 12, 16)
        phy2log, log2phy, logcnt = algorithm(solver)(weight, 16, groups, nodes, gpus)
        Plan.from_tensors(phy2log, log2phy, logcnt).validate(3, 12, 16, gpus)


def test_zero_and_equal_loads_still_give_every_expert_a_slot():
    for weight in (torch.zeros(2, 12), torch.ones(2, 12)):
        for solver in SOLVERS:
            check_phy2log(policy_class(solver).rebalance_experts(weight, 16, 4, 2, 8), 2, 12, 16)


def test_old_global_expert_indices_keep_slots_without_changing_loads():
    policy = policy_class("kk_swap")
    fresh = policy.rebalance_experts(EXAMPLE, 16, 4, 2, 8)
    # the plan in force is the same plan with its GPUs and slots shuffled: everything can stay
    perm = torch.randperm(16, generator=torch.Generator().manual_seed(0))
    shuffled = fresh[:, perm]
    kept = policy.rebalance_experts(EXAMPLE, 16, 4, 2, 8, old_global_expert_indices=shuffled)
    problem = Problem(EXAMPLE.double(), 16, 4, 2, 8)
    before = score(problem, Plan.from_phy2log(fresh, 12))
    after = score(problem, Plan.from_phy2log(kept, 12), previous=Plan.from_phy2log(shuffled, 12))
    assert torch.equal(after.max_time, before.max_time)                  # the same GPU loads
    # a GPU renaming plus a slot order within each GPU reaches the shuffled plan only when
    # the shuffle kept GPU contents; compare with the greedy's plan in force instead:
    old = policy_class("deepseek").rebalance_experts(EXAMPLE, 16, 4, 2, 8)
    kept = policy.rebalance_experts(EXAMPLE, 16, 4, 2, 8, old_global_expert_indices=old)
    moves_kept = score(problem, Plan.from_phy2log(kept, 12), previous=Plan.from_phy2log(old, 12)).moves
    moves_fresh = score(problem, Plan.from_phy2log(fresh, 12), previous=Plan.from_phy2log(old, 12)).moves
    assert moves_kept <= moves_fresh
    assert torch.equal(score(problem, Plan.from_phy2log(kept, 12)).max_time, before.max_time)
    # a replica that stays on its GPU keeps its slot index
    S = 2
    for layer in range(2):
        for gpu in range(8):
            new_slots, old_slots = kept[layer, gpu * S:(gpu + 1) * S], old[layer, gpu * S:(gpu + 1) * S]
            for s in range(S):
                if int(old_slots[s]) in new_slots.tolist() and new_slots.tolist().count(int(old_slots[s])) == 1:
                    assert int(new_slots[s]) == int(old_slots[s])


def test_the_plan_in_force_itself_is_kept_exactly():
    old = policy_class("kk_swap").rebalance_experts(EXAMPLE, 16, 4, 2, 8)
    again = policy_class("kk_swap").rebalance_experts(EXAMPLE, 16, 4, 2, 8, old_global_expert_indices=old)
    assert torch.equal(again, old)


def test_options_reach_the_solver_and_are_checked_up_front():
    policy = policy_class("deepseek", policy="global")
    global_plan = policy.rebalance_experts(EXAMPLE, 16, 4, 2, 8)
    assert not torch.equal(global_plan, EXAMPLE_PHY2LOG)                  # not the hierarchical one
    assert torch.equal(algorithm("deepseek", policy="global")(EXAMPLE, 16, 4, 2, 8)[0], global_plan)
    with pytest.raises(OptionError, match="steps"):
        policy_class("kk_swap", steps=-1)
    with pytest.raises(OptionError, match="unknown solver"):
        algorithm("no_such_solver")
    legacy = policy_class("kk_swap", returns="tuple").rebalance_experts(EXAMPLE, 16, 4, 2, 8)
    assert isinstance(legacy, tuple) and len(legacy) == 3
