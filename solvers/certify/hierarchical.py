"""A bound for hierarchical plans by enumerating group-to-node assignments.

A hierarchical plan (DeepSeek's policy, fixed budget) puts G/N whole groups on each
node, and each node's replicas in its R/N slots on its P/N GPUs. Its max GPU load is at
least, for the assignment it uses, the largest over nodes of a bound for the node's own
sub-problem (its experts, R/N slots, P/N GPUs). The minimum of that over every balanced
assignment is therefore a bound for every hierarchical plan. Node bounds depend only on
the set of groups on the node, so they are computed once per set, batched as rows of
one problem.
"""
from __future__ import annotations

import itertools
import math

import torch

from ..bounds import lower_bound
from ..problem import MAX_LAYERS, Problem

# Balanced assignments enumerated at most (G = 8, N = 4: 105; G = 16, N = 4: 2.6 million).
MAX_ASSIGNMENTS = 200_000


def balanced_assignments(num_groups: int, num_nodes: int) -> list[tuple[tuple[int, ...], ...]]:
    """Every split of groups 0..G-1 into N unlabelled sets of G/N (the first free group
    always opens the next set, so each split appears once)."""
    size = num_groups // num_nodes
    out: list[tuple[tuple[int, ...], ...]] = []

    def rec(free: tuple[int, ...], acc: tuple[tuple[int, ...], ...]) -> None:
        if not free:
            out.append(acc)
            return
        first, rest = free[0], free[1:]
        for others in itertools.combinations(rest, size - 1):
            chosen = (first,) + others
            rec(tuple(g for g in rest if g not in others), acc + (chosen,))

    rec(tuple(range(num_groups)), ())
    return out


def assignment_count(num_groups: int, num_nodes: int) -> int:
    size = num_groups // num_nodes
    return math.factorial(num_groups) // (math.factorial(size) ** num_nodes * math.factorial(num_nodes))


def hierarchical_bound(problem: Problem) -> torch.Tensor | None:
    """[layers] bound for every hierarchical plan with G/N groups per node (None when
    the shape has too many assignments or no hierarchical structure)."""
    found = best_assignment(problem)
    return None if found is None else found[0]


def best_assignment(problem: Problem) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(bound [layers], groups [layers, N, G/N]): the bound of :func:`hierarchical_bound`
    and, per layer, the assignment attaining it (the groups of each node)."""
    G, N, E = problem.num_groups, problem.num_nodes, problem.num_experts
    if G % N or E % G or problem.num_gpus % N or N == 1:
        return None
    if assignment_count(G, N) > MAX_ASSIGNMENTS:
        return None
    splits = balanced_assignments(G, N)
    sets = sorted({s for split in splits for s in split})
    index = {s: i for i, s in enumerate(sets)}
    L, per = problem.num_layers, E // G
    w = problem.weights.to(torch.float64).view(L, G, per)                          # [L, G, E/G]
    members = torch.tensor(sets, device=w.device)                                  # [U, G/N]
    sub = w[:, members].reshape(L * len(sets), -1)                                  # [L*U, E/N]
    # L*U rows may pass a Problem's layer cap (2 layers x C(16, 8) sets = 25740): bound them in chunks
    set_bound = torch.cat([lower_bound(Problem(sub[i:i + MAX_LAYERS], problem.num_replicas // N, 1, 1,
                                               problem.num_gpus // N))
                           for i in range(0, sub.shape[0], MAX_LAYERS)]).view(L, len(sets))    # [L, U]
    table = torch.tensor([[index[s] for s in split] for split in splits], device=w.device)   # [A, N]
    per_split = set_bound[:, table].max(-1).values                                 # [L, A]
    value, pick = per_split.min(-1)
    return value, members[table[pick]]                                             # [L], [L, N, G/N]


def plan_on_assignment(problem: Problem, groups: torch.Tensor, solve_nodes) -> torch.Tensor:
    """phy2log [layers, R] of a hierarchical plan: node n of layer l holds the groups
    ``groups[l, n]`` (shape [L, N, G/N]); ``solve_nodes(sub)`` plans the node sub-problems
    (one row per (layer, node), E/N experts, R/N slots, P/N GPUs) and returns their
    phy2log [L*N, R/N] in the sub-problem's expert ids."""
    L, N, _ = groups.shape
    per = problem.num_experts // problem.num_groups
    experts = (groups[..., None] * per + torch.arange(per, device=groups.device)).reshape(L, N, -1)   # [L, N, E/N]
    w = problem.weights.to(torch.float64)
    sub_w = w.gather(1, experts.reshape(L, -1)).reshape(L * N, -1)                 # [L*N, E/N]
    sub = Problem(sub_w, problem.num_replicas // N, 1, 1, problem.num_gpus // N)
    sub_p2l = solve_nodes(sub)                                                     # [L*N, R/N]
    return experts.reshape(L * N, -1).gather(1, sub_p2l.to(experts.device)).reshape(L, -1)
