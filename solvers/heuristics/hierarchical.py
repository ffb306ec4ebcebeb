"""Group-to-node packing for the hierarchical policy: exact when the groups are few.

With G groups on N nodes (G/N groups each) the distinct balanced partitions number
``G! / ((G/N)!^N N!)``: 105 for DeepSeek-V3 (8 groups, 4 nodes). Up to
:data:`MAX_ENUMERATED` of them are enumerated once per shape and scored for every layer
at once; the ``top`` best (smallest max node load) become candidates that the caller
finishes (replication and GPU packing inside each node) and compares by the real
objective. Larger shapes use balanced differencing plus swap local search.
"""
from __future__ import annotations

from functools import lru_cache

import torch

from .common import slots_from_packs
from .packing import kk_pack, local_search, lpt_pack

MAX_ENUMERATED = 20000


@lru_cache(maxsize=32)
def balanced_partitions(num_groups: int, num_nodes: int) -> tuple[tuple[int, ...], ...] | None:
    """Every partition of range(G) into N unlabelled sets of G/N, as node-of-group tuples
    (nodes numbered in order of first use); None when there are more than MAX_ENUMERATED."""
    per = num_groups // num_nodes
    out: list[tuple[int, ...]] = []
    node_of = [0] * num_groups
    fill = [0] * num_nodes

    def rec(g: int, used: int) -> bool:
        if len(out) > MAX_ENUMERATED:
            return False
        if g == num_groups:
            out.append(tuple(node_of))
            return True
        for n in range(min(used + 1, num_nodes)):
            if fill[n] < per:
                node_of[g] = n
                fill[n] += 1
                ok = rec(g + 1, max(used, n + 1))
                fill[n] -= 1
                if not ok:
                    return False
        return True

    if not rec(0, 0):
        return None
    return tuple(out)


def group_node_candidates(group_load: torch.Tensor, num_nodes: int, top: int = 4) -> torch.Tensor:
    """Candidate group-to-node assignments, best node balance first.

    group_load: [L, G]. Returns node_of_group: [L, K, G] int64 (each node gets G/N groups),
    K = min(top, number of partitions); exact (optimal max node load in candidate 0) when
    the partitions can be enumerated.
    """
    L, G = group_load.shape
    dev = group_load.device
    parts = balanced_partitions(G, num_nodes)
    if parts is not None:
        table = torch.tensor(parts, dtype=torch.int64, device=dev)                 # [M, G]
        onehot = torch.nn.functional.one_hot(table, num_nodes).to(group_load.dtype)  # [M, G, N]
        node_load = torch.einsum("lg,mgn->lmn", group_load, onehot)                # [L, M, N]
        worst = node_load.max(-1).values
        k = min(top, table.shape[0])
        idx = worst.topk(k, dim=1, largest=False).indices                          # [L, K]
        return table[idx]
    # Too many partitions: KK and LPT starts improved by swaps, both kept as candidates.
    ids = torch.arange(G, device=dev).expand(L, G).contiguous()
    w = group_load.to(torch.float64)
    cands = []
    for pack in (kk_pack(w, num_nodes), lpt_pack(w, ids, num_nodes, G)):
        ws, es = slots_from_packs(pack, w, ids)
        ws, es, _ = local_search(ws, es, num_nodes, G, max_steps=64)
        node = (torch.arange(G, device=dev) // (G // num_nodes)).expand(L, G)
        cands.append(torch.empty_like(es).scatter_(1, es, node))
    return torch.stack(cands, 1)[:, :top]


def node_experts(node_of_group: torch.Tensor, num_experts: int, num_nodes: int) -> torch.Tensor:
    """Logical experts living on each node, ascending: [L, K, N, E/N] from node_of_group [L, K, G]."""
    L, K, G = node_of_group.shape
    gsize = num_experts // G
    node_of_expert = node_of_group.repeat_interleave(gsize, dim=2)                 # [L, K, E]
    order = torch.sort(node_of_expert, dim=2, stable=True).indices                # experts node-major
    return order.view(L, K, num_nodes, num_experts // num_nodes)


__all__ = ["balanced_partitions", "group_node_candidates", "node_experts"]
