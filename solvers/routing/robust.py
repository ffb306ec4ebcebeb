"""The window's steps for the traffic-aware placement: how expert loads move together.

Co-locating co-activated experts on one node cuts traffic, but the same experts also rise
and fall together when the traffic mix drifts, so a node holding one whole community is
balanced on the window it was planned on and overloaded on the next. The placement
therefore looks at the window as steps (:func:`window_steps`), penalises a node's load
spread over them (:func:`excess_covariance`: the co-variation beyond sampling noise) and
checks its balance limit on a robust imbalance (:func:`robust_imbalance`: mean + risk x
std per GPU), as ``robust_sum`` and
``risk_aware`` (:mod:`solvers.dynamics`) plan from a window rather than from its sum.
"""
from __future__ import annotations

from typing import Any

import torch

from ..cluster import Cluster
from ..dynamics.robust import check_history
from ..plan import Plan
from ..problem import Problem
from .nodes import unit_time
from .trace import RoutingTrace


def window_steps(problem: Problem, routing: RoutingTrace, history: Any,
                 buckets: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(steps [B, L, E] float64, noise [L, E] or None) on the CPU, every step scaled to the
    problem's total load per layer (a step says how the load is *shared*, the problem how
    much there is).

    ``history`` (a [W, L, E] array, checked by :func:`solvers.dynamics.robust.check_history`)
    when given; else the routing trace cut into ``buckets`` consecutive blocks of tokens
    (its time order), each block's expert counts one step. For those token counts,
    ``noise`` is each expert's sampling variance per step (a count n scaled by s varies by
    s^2 n under Poisson sampling), which no placement can hedge; None for a given history
    (its noise is unknown).
    """
    if history is not None:
        raw, counted = check_history(problem, history).to("cpu"), False
    else:
        T = routing.num_tokens
        B = max(1, min(buckets, T))
        edges = torch.linspace(0, T, B + 1).round().to(torch.int64).tolist()
        raw = torch.stack([routing.tokens(a, b).loads() for a, b in zip(edges[:-1], edges[1:])]).to(torch.float64)
        counted = True
    total = problem.weights.to("cpu", torch.float64).sum(1)                            # [L]
    step_total = raw.sum(2, keepdim=True)                                               # [B, L, 1]
    scale = torch.where(step_total > 0, total.view(1, -1, 1) / step_total.clamp_min(1e-300), 0.0)
    steps = raw * scale
    return steps, ((scale * scale * raw).mean(0) if counted else None)


def excess_covariance(steps: torch.Tensor, noise: torch.Tensor | None) -> torch.Tensor | None:
    """[L, E, E] float64 covariance of the experts' per-step loads (steps [B, L, E]), less
    the sampling ``noise`` [L, E] on the diagonal (floored at 0): what is left is how the
    experts' loads move together, which the placement can hedge. None with fewer than two
    steps."""
    B = steps.shape[0]
    if B < 2:
        return None
    steps = steps.to(torch.float64)
    dev = steps - steps.mean(0, keepdim=True)
    cov = torch.einsum("ble,blf->lef", dev, dev) / (B - 1)
    if noise is not None:
        diag = cov.diagonal(dim1=1, dim2=2)
        diag.copy_((diag - noise).clamp_min(0))
    return cov / B


def robust_imbalance(weight: torch.Tensor, cov: torch.Tensor | None, risk: float, plan: Plan,
                     num_gpus: int, cluster: Cluster | None = None) -> torch.Tensor:
    """[L] max over the GPUs of (mean load + risk x its std over the window's steps) / the
    mean GPU load, even split (weight [L, E], cov [L, E, E] :func:`excess_covariance`);
    the plain imbalance when cov is None or risk is 0. A GPU whose experts rise together
    scores higher than one holding the same mean load in experts that move apart.
    On a real ``cluster`` (speeds, uneven slots, failed GPUs) the same in time: each GPU's
    (mean + risk x std) over its speed, over the best possible time W / total speed."""
    real = cluster is not None and not cluster.homogeneous
    slot_gpu = torch.tensor(cluster.slot_gpus(), dtype=torch.int64) if real else None
    extra = None if cov is None or risk <= 0 else risk * unit_spread(cov, plan, num_gpus, slot_gpu)
    return unit_time(weight, plan, num_gpus, cluster, extra)


def unit_spread(cov: torch.Tensor, plan: Plan, num_nodes: int,
                unit_of_slot: torch.Tensor | None = None) -> torch.Tensor:
    """[L, N] std of the load of every node (or GPU: ``num_nodes`` = the GPUs), sqrt(s^T
    cov s) with s [L, E, N] the share of each expert's load it serves (its replicas there /
    all its replicas, even split); cov [L, E, E] (:func:`excess_covariance`).
    ``unit_of_slot`` [R]: the node (or GPU) of every slot, on a cluster with uneven slot
    counts or failed GPUs (None: R / N consecutive slots each)."""
    L, R = plan.phy2log.shape
    node_of_slot = torch.arange(R, device=plan.phy2log.device) // (R // num_nodes) if unit_of_slot is None \
        else unit_of_slot.to(plan.phy2log.device)
    share = torch.zeros(L, plan.num_experts, num_nodes, dtype=torch.float64)
    onehot = torch.nn.functional.one_hot(node_of_slot, num_nodes).to(torch.float64).expand(L, R, num_nodes)
    share.scatter_add_(1, plan.phy2log.cpu().unsqueeze(2).expand(L, R, num_nodes), onehot.contiguous())
    share = share / plan.logcnt.cpu().to(torch.float64).unsqueeze(2)
    return torch.einsum("len,lef,lfn->ln", share, cov.to(torch.float64), share).clamp_min(0).sqrt()
