"""DeepSeek's EPLB, faithful to the public algorithm, batched over layers on any device.

Written from the published algorithm (DeepSeek's EPLB repository, MIT):

1. replication: give each redundant slot to the expert with the highest load per
   replica (first index on ties);
2. balanced packing: place items heaviest first, each into the lightest pack that still
   has room (lowest pack index on ties), exactly ``n / packs`` items per pack;
3. hierarchical: pack groups onto nodes, replicate inside each node with ``R / N``
   slots, pack each node's replicas onto its GPUs. Global = one group, one node.

Arithmetic on loads is float32, as in the public code, so on inputs without ties
``phy2log`` and ``logcnt`` equal the public code's exactly. Sorts are stable so CPU and
CUDA agree; the public code sorts unstably, and since the replicas of one expert always
carry equal loads, it may list an expert's (interchangeable) replicas in ``log2phy`` in
another rank order: the same slots, possibly permuted within the expert's row.
Loops run only over packing/replication *steps*; each step is a few torch kernels over
all layers (and nodes) at once, on the input's device, with no host synchronisation
inside the algorithm (only building ``log2phy`` reads K = max count, as the public code does).
"""
from __future__ import annotations

from typing import Any

import torch

from .clock import check_deadline
from .plan import Plan, build_log2phy, replica_ranks
from .cluster import Cluster
from .problem import Problem, as_weights
from .options import SolverOptions, policy_option
from .threads import one_intra_op_thread
from .registry import SolverOutput, register
from .errors import ProblemError
from .work import WorkModel


def inverse_permutation(perm: torch.Tensor) -> torch.Tensor:
    """perm: [X, n] permutations of range(n) -> their inverses [X, n]."""
    inv = torch.empty_like(perm)
    inv.scatter_(1, perm, torch.arange(perm.shape[1], dtype=perm.dtype, device=perm.device).expand_as(perm))
    return inv


def balanced_packing(weight: torch.Tensor, num_packs: int,
                     deadline: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Pack ``n`` items into ``num_packs`` packs of exactly ``n / num_packs`` items each.

    weight: [X, n] item weights (float32 in the faithful algorithm). deadline: raise
    :class:`solvers.clock.TimeUp` once past it (checked every step; None: never).
    Returns pack_index: [X, n] pack of each item, rank_in_pack: [X, n] its position there
    (order of arrival).
    """
    X, n = weight.shape
    per_pack = n // num_packs
    dev = weight.device
    if per_pack == 1:  # the public code keeps item order here instead of sorting
        pack_index = torch.arange(n, dtype=torch.int64, device=dev).expand(X, n).contiguous()
        return pack_index, torch.zeros(X, n, dtype=torch.int64, device=dev)
    sorted_w, order = weight.sort(dim=-1, descending=True, stable=True)     # [X, n]
    # Per step only a handful of small kernels run, so launch overhead dominates: every
    # operand is preallocated and written with out= (no allocation, no scalar wrapping).
    items = sorted_w.t().contiguous().unsqueeze(-1).unbind(0)             # n x [X, 1]
    load = torch.zeros(X, num_packs, dtype=weight.dtype, device=dev)       # [X, packs]
    count = torch.zeros(X, num_packs, dtype=torch.int32, device=dev)
    key = torch.empty_like(load)                                           # load, +inf when full
    has_room = torch.empty(X, num_packs, dtype=torch.bool, device=dev)
    # 0-d operands made on the device (torch.full, not torch.tensor: no host copy, no sync)
    cap = torch.full((), per_pack, dtype=torch.int32, device=dev)
    inf = torch.full((), float("inf"), dtype=weight.dtype, device=dev)
    one = torch.ones(X, 1, dtype=torch.int32, device=dev)
    chosen = torch.empty(n, X, 1, dtype=torch.int64, device=dev)
    for k, pack in enumerate(chosen.unbind(0)):
        check_deadline(deadline)
        torch.lt(count, cap, out=has_room)
        torch.where(has_room, load, inf, out=key)
        torch.argmin(key, dim=-1, keepdim=True, out=pack)                   # first lightest open pack
        load.scatter_add_(1, pack, items[k])
        count.scatter_add_(1, pack, one)
    pack_sorted = chosen.squeeze(-1).t()                                   # [X, n] in sorted order
    rank_sorted, _ = replica_ranks(pack_sorted, num_packs)               # arrival order in each pack
    pack_index = torch.empty_like(pack_sorted).scatter_(1, order, pack_sorted)
    rank_in_pack = torch.empty_like(rank_sorted).scatter_(1, order, rank_sorted)
    return pack_index, rank_in_pack


def replicate_experts(weight: torch.Tensor, num_phy: int,
                      deadline: float | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Greedy replication minimising the max load per replica (optimal for that objective).
    deadline: as :func:`balanced_packing` takes it.

    weight: [X, num_log]. Returns phy2log: [X, num_phy] (slot i < num_log holds expert i,
    later slots the redundant replicas in creation order), rank: [X, num_phy] replica rank
    (creation order), logcnt: [X, num_log].
    """
    X, num_log = weight.shape
    dev = weight.device
    logcnt = torch.ones(X, num_log, dtype=torch.int64, device=dev)
    ones = torch.ones(X, 1, dtype=torch.int64, device=dev)
    cols = [torch.arange(num_log, dtype=torch.int64, device=dev).expand(X, num_log)]
    for _ in range(num_phy - num_log):
        check_deadline(deadline)
        best = (weight / logcnt).argmax(-1, keepdim=True)                # first max on ties
        cols.append(best)
        logcnt.scatter_add_(1, best, ones)
    phy2log = torch.cat(cols, 1)
    rank, _ = replica_ranks(phy2log, num_log)  # slots are created in index order
    return phy2log, rank, logcnt


def rebalance_hierarchical(weight: torch.Tensor, num_physical: int, num_groups: int,
                           num_nodes: int, num_gpus: int,
                           deadline: float | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """DeepSeek's three steps; ``num_groups = num_nodes = 1`` gives the global policy.
    deadline: raise :class:`solvers.clock.TimeUp` once past it (None: never).

    weight: [L, E] float32. Returns phy2log: [L, R], rank: [L, R] replica rank of each
    slot, logcnt: [L, E].
    """
    L, E = weight.shape
    dev = weight.device
    group_size = E // num_groups
    groups_per_node = num_groups // num_nodes
    gpus_per_node = num_gpus // num_nodes
    slots_per_gpu = num_physical // num_gpus
    experts_per_node = E // num_nodes
    slots_per_node = num_physical // num_nodes

    # Step 1: whole groups onto nodes; renumber experts node-major ("mlog" ids).
    group_load = weight.view(L, num_groups, group_size).sum(-1)                     # [L, G]
    group_node, group_rank = balanced_packing(group_load, num_nodes, deadline)
    first_mlog = (group_node * groups_per_node + group_rank) * group_size           # [L, G]
    log2mlog = (first_mlog.unsqueeze(-1)
                + torch.arange(group_size, dtype=torch.int64, device=dev)).flatten(1)  # [L, E]
    mlog2log = inverse_permutation(log2mlog)

    # Step 2: replicate inside each node: rows are (layer, node).
    node_w = weight.gather(-1, mlog2log).view(L * num_nodes, experts_per_node)
    phy2mlog, phy_rank, mlogcnt = replicate_experts(node_w, slots_per_node, deadline)

    # Step 3: each node's replicas onto its GPUs.
    replica_w = (node_w / mlogcnt).gather(-1, phy2mlog)                             # [L*N, R/N]
    gpu, rank_on_gpu = balanced_packing(replica_w, gpus_per_node, deadline)
    pphy2phy = inverse_permutation(gpu * slots_per_gpu + rank_on_gpu)
    node_offset = torch.arange(num_nodes, dtype=torch.int64, device=dev).view(1, -1, 1) * experts_per_node
    pphy2mlog = (phy2mlog.gather(-1, pphy2phy).view(L, num_nodes, -1) + node_offset).flatten(1)
    phy2log = mlog2log.gather(-1, pphy2mlog)                                        # [L, R]
    rank = phy_rank.gather(-1, pphy2phy).view(L, -1)
    logcnt = mlogcnt.view(L, E).gather(-1, log2mlog)
    return phy2log, rank, logcnt


def deepseek_plan(weight: torch.Tensor, num_replicas: int, num_groups: int, num_nodes: int,
                  num_gpus: int, policy: str, deadline: float | None = None) -> Plan:
    """The plan of the resolved ``policy`` ("hierarchical" or "global"); inputs already valid.
    deadline: raise :class:`solvers.clock.TimeUp` once past it (a portfolio's rung; None: never)."""
    w = weight.float()
    if policy == "hierarchical":
        phy2log, rank, logcnt = rebalance_hierarchical(w, num_replicas, num_groups, num_nodes, num_gpus, deadline)
    else:
        phy2log, rank, logcnt = rebalance_hierarchical(w, num_replicas, 1, 1, num_gpus, deadline)
    return Plan(phy2log, build_log2phy(phy2log, rank, logcnt), logcnt)


def rebalance_experts(weight: Any, num_replicas: int, num_groups: int, num_nodes: int,
                      num_gpus: int, policy: str = "auto") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Drop-in for DeepSeek's ``eplb.rebalance_experts``.

    weight: [layers, experts] loads (tensor, array or nested list; kept on its device).
    policy: "auto" (hierarchical iff num_groups % num_nodes == 0, else global, as
    DeepSeek decides), "hierarchical" or "global".
    Returns phy2log: [layers, num_replicas], log2phy: [layers, experts, K] padded with -1
    (K = max replica count), logcnt: [layers, experts], all int64 on the input's device.
    """
    w = as_weights(weight, "weight")
    cluster = Cluster(num_nodes, num_gpus, num_replicas, nodes_must_divide_gpus=False)
    G = cluster.check_experts(w.shape[1], num_groups)
    resolved = cluster.resolve_policy(policy, w.shape[1], G)
    with one_intra_op_thread():      # as every graded solve: small kernels, a thread team only waits
        return deepseek_plan(w, cluster.num_replicas, G, cluster.num_nodes, cluster.num_gpus, resolved).as_tuple()


# Work model (solvers.work): seconds on 2 cores, coefficients measured by
# `python -m benchmarks.work_model --fit`.
DEEPSEEK_WORK = WorkModel.of({"1": 0.00628, "R": 8.31e-05, "L*R": 2.51e-06, "L*E*R": 1.91e-08})


@register("deepseek", kind="heuristic", options=(policy_option(),), heterogeneous=True, work=DEEPSEEK_WORK,
          description="DeepSeek's greedy EPLB (replicate, balanced packing, hierarchical/global)")
def _solve_deepseek(problem: Problem, opts: SolverOptions) -> SolverOutput:
    """On GPUs of different speeds (the same slot count each) it plans the homogeneous view,
    balancing tokens as the public algorithm does, and the scorer grades that plan in time;
    uneven slot counts and failed GPUs it refuses (the algorithm packs R/P items per GPU)."""
    if not problem.cluster.homogeneous:
        if not problem.cluster.uniform_slots:
            raise ProblemError("gpu_slots", "deepseek packs the same number of slots on every GPU; this "
                               f"cluster is {problem.cluster.describe()}: use kk_swap, joint or best")
        problem = Problem._trusted(problem.weights, problem.cluster.homogeneous_view(), problem.num_groups)
    resolved = problem.resolve_policy(opts.policy)
    plan = deepseek_plan(problem.weights, problem.num_replicas, problem.num_groups,
                         problem.num_nodes, problem.num_gpus, resolved)
    return SolverOutput(plan, resolved)


__all__ = ["rebalance_experts", "balanced_packing", "replicate_experts", "rebalance_hierarchical",
           "deepseek_plan", "inverse_permutation"]
