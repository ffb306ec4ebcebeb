"""The nodes of a cluster as the traffic-aware placement sees them: slots and capacity in time.

On identical GPUs every node holds R/N slots and a 1/N share of the load. On a real cluster
(GPU speeds, uneven slot counts, failed GPUs; :class:`solvers.cluster.Cluster`) a node's
slot count is the sum of its GPUs' slots and its capacity the sum of its live GPUs' speeds:
node n should carry ``W x speed_n / total speed`` so that its GPUs finish together with
every other node's. A node whose GPUs all failed holds nothing and takes no part.

Inside a node the replicas are packed in time by the speed heuristics
(:mod:`solvers.heuristics.packing`: LPT where a replica finishes first, then swaps that keep
each GPU's slot count), so no replica lands on a failed GPU and no GPU gets more replicas
than its slots.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..cluster import Cluster
from ..heuristics.common import LiveGPUs
from ..heuristics.packing import layout, local_search, lpt_time_pack
from ..plan import Plan
from ..scoring import step_gpu_times

# Paired swap steps of the in-node time packing (the speed pipeline's kk_swap default).
PACK_STEPS = 32


@dataclass(frozen=True)
class Nodes:
    """slots [N] int64 slots per node; share [N] float64 its capacity relative to an even
    1/N share (N x speed_n / total speed: exactly 1.0 on identical GPUs); live [N] bool
    nodes holding a slot; slot_node [R] int64 the node of every slot."""

    cluster: Cluster
    slots: torch.Tensor
    share: torch.Tensor
    live: torch.Tensor
    slot_node: torch.Tensor

    @classmethod
    def of(cls, cluster: Cluster) -> "Nodes":
        N, gpn = cluster.num_nodes, cluster.gpus_per_node
        gpu_node = torch.arange(cluster.num_gpus) // gpn
        slots = torch.zeros(N, dtype=torch.int64).index_add_(
            0, gpu_node, torch.tensor(cluster.gpu_slots, dtype=torch.int64))
        alive = torch.tensor([float(c > 0) for c in cluster.gpu_slots], dtype=torch.float64)
        speed = torch.zeros(N, dtype=torch.float64).index_add_(
            0, gpu_node, torch.tensor(cluster.gpu_speed, dtype=torch.float64) * alive)
        share = (N * speed) / cluster.total_speed
        slot_node = torch.tensor(cluster.slot_gpus(), dtype=torch.int64) // gpn
        return cls(cluster, slots, share, slots > 0, slot_node)

    @property
    def num_live(self) -> int:
        return int(self.live.sum())

    @property
    def live_ids(self) -> torch.Tensor:
        """[N'] the live nodes, in order."""
        return self.live.nonzero().squeeze(1)

    def caps(self, weight: torch.Tensor, epsilon: float) -> torch.Tensor:
        """[L, N] float64 load cap of every node: ``(1 + epsilon / 2) W / N x share`` (weight
        [L, E]); 0 on a dead node."""
        even = (1.0 + epsilon / 2) * weight.to(torch.float64).sum(1) / self.cluster.num_nodes   # [L]
        return even.view(-1, 1) * self.share.view(1, -1)

    def pack(self, item_e: torch.Tensor, item_w: torch.Tensor, item_node: torch.Tensor) -> torch.Tensor:
        """phy2log [L, R]: each node's replica items (exactly its slot count of them) packed
        onto its live GPUs in time (LPT, then swaps keeping every GPU's slot count); nodes
        in slot order, one batched packing per node over the layers."""
        c = self.cluster
        L, R = item_e.shape
        gpn = c.gpus_per_node
        order = torch.sort(item_node, dim=1, stable=True).indices                        # items by node
        e_sorted, w_sorted = item_e.gather(1, order), item_w.gather(1, order)
        out = torch.empty(L, R, dtype=torch.int64)
        start = 0
        for n in self.live_ids.tolist():
            k = int(self.slots[n])
            gs = [g for g in range(n * gpn, (n + 1) * gpn) if c.gpu_slots[g] > 0]
            gpus = LiveGPUs([c.gpu_speed[g] for g in gs], [c.gpu_slots[g] for g in gs], "cpu")
            e_n, w_n = e_sorted[:, start:start + k], w_sorted[:, start:start + k]         # [L, k]
            w, e = layout(w_n, e_n, lpt_time_pack(w_n, gpus))
            _, e, _ = local_search(w.float(), e, gpus, max_steps=PACK_STEPS)
            out[:, start:start + k] = e
            start += k
        return out


def unit_time(weight: torch.Tensor, plan: Plan, num_gpus: int, cluster: Cluster | None = None,
              extra: torch.Tensor | None = None) -> torch.Tensor:
    """[L] the shared scorer's imbalance of ``plan`` for ``weight`` [L, E] (even split): the
    busiest GPU over the mean on identical GPUs; on a real ``cluster`` (speeds, uneven slots,
    failed GPUs) its time, the slowest GPU's load over its speed, over the best possible time
    W / total speed. ``extra`` [L, P] is added to every GPU's load first (a risk term)."""
    w = weight.to("cpu", torch.float64)
    real = cluster is not None and not cluster.homogeneous
    g = step_gpu_times(w.unsqueeze(0), plan.phy2log.cpu(), num_gpus, cluster if real else None)[0]   # [L, P]
    if extra is not None:
        g = g + (extra / torch.tensor(cluster.gpu_speed, dtype=torch.float64) if real else extra)
    best = w.sum(1) / (cluster.total_speed if real else num_gpus)
    return torch.where(best > 0, g.max(1).values / best.clamp_min(1e-300), torch.ones_like(best))
