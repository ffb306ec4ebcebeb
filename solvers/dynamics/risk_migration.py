"""Migration-aware re-plans of ``risk_aware``: keep replicas in place, keep the future balance.

Given the placement in force (``current``), a re-plan should move few replicas yet stay
within ``slack`` of a fresh out-of-sample plan, measured as the fresh plan is: its per-step
imbalance on the window (sum over steps of the max GPU load / sum of the mean). Per layer,
the plan with the fewest moves among

- **relabelled**: the fresh plan with GPUs (and nodes) renamed to keep the most replicas in
  place (:func:`solvers.migration.relabel`): its balance is the fresh plan's;
- **same nodes** (hierarchical): a fresh plan with every group on its current node,
  relabelled; eligible when within ``slack`` as below;
- **kept**: the placement in force with the fresh counts (only replicas whose count changed
  move: surplus ones leave the GPUs with the highest mean load, new ones go to the lightest
  GPUs that may hold them), then the risk swap search (:func:`risk_search`) from there,
  stopped as soon as the largest risk is within ``slack`` of the fresh plan's; eligible
  when its per-step imbalance on the window is within ``slack`` of the fresh plan's.

Under the hierarchical policy the groups keep the nodes of the placement in force (when every
group's replicas are on one node there), the fresh counts are those of a fresh plan with
that group-to-node assignment, and every swap stays inside a node.
"""
from __future__ import annotations

import numpy as np
import torch

from ..migration.moves import moves_per_layer
from ..migration.relabel import relabel_phy2log
from ..problem import Problem
from .risk import moments, plan_on_nodes, risk_search, step_weights, window_objective


def counts_of(phy2log: torch.Tensor, num_experts: int) -> torch.Tensor:
    """[L, E] int64 replicas of each expert in ``phy2log`` [L, R]."""
    L, R = phy2log.shape
    return torch.zeros(L, num_experts, dtype=torch.int64, device=phy2log.device).scatter_add_(
        1, phy2log, torch.ones(L, R, dtype=torch.int64, device=phy2log.device))


def groups_on_nodes(phy2log: torch.Tensor, num_experts: int, num_groups: int, num_gpus: int,
                    num_nodes: int) -> torch.Tensor | None:
    """[L, G] the node of every group in ``phy2log`` [L, R], or None when some layer has a
    group on two nodes (the placement in force is not hierarchical)."""
    L, R = phy2log.shape
    node = (torch.arange(R, device=phy2log.device) // (R // num_nodes)).expand(L, R)
    grp = phy2log // (num_experts // num_groups)
    lo = torch.full((L, num_groups), num_nodes, dtype=torch.int64, device=phy2log.device).scatter_reduce(
        1, grp, node, "amin")
    hi = torch.full((L, num_groups), -1, dtype=torch.int64, device=phy2log.device).scatter_reduce(
        1, grp, node, "amax")
    if bool((lo != hi).any()):
        return None
    per_node = torch.zeros(L, num_nodes, dtype=torch.int64, device=phy2log.device).scatter_add_(
        1, lo, torch.ones_like(lo))
    if bool((per_node != num_groups // num_nodes).any()):
        return None
    return lo


def recount_layer(mean: np.ndarray, p2l: np.ndarray, counts: np.ndarray, num_gpus: int, zone_of_gpu: np.ndarray,
                  zone_of_expert: np.ndarray | None, nodup: bool) -> np.ndarray | None:
    """phy2log [R] of ``p2l`` with replica counts ``counts`` [E], moving only the replicas
    whose count changed; a new replica goes to the lightest GPU of its zone with a free slot
    (and without that expert under ``nodup``). None when some replica finds no such slot."""
    R, E = len(p2l), len(mean)
    S = R // num_gpus
    out = p2l.copy()
    cnt = np.bincount(out, minlength=E)
    per = mean[out] / cnt[out]
    gpu_load = np.bincount(np.arange(R) // S, weights=per, minlength=num_gpus)
    free: list[int] = []
    for e in np.flatnonzero(cnt > counts):
        slots = np.flatnonzero(out == e)
        free += list(slots[np.argsort(-gpu_load[slots // S], kind="stable")][: cnt[e] - counts[e]])
    if not free:
        return out
    free_arr = np.asarray(free)
    np.subtract.at(gpu_load, free_arr // S, per[free_arr])
    out[free_arr] = -1
    need = np.repeat(np.flatnonzero(counts > cnt), (counts - cnt).clip(min=0)[counts > cnt])
    need = need[np.argsort(-(mean[need] / counts[need]), kind="stable")]          # heaviest replica first
    holds = np.zeros((num_gpus, E), dtype=bool)
    kept = out >= 0
    holds[np.arange(R)[kept] // S, out[kept]] = True
    for e in need:
        g = free_arr // S
        ok = np.ones(len(free_arr), dtype=bool)
        if zone_of_expert is not None:
            ok &= zone_of_gpu[g] == zone_of_expert[e]
        if nodup:
            ok &= ~holds[g, e]
        if not ok.any():
            return None
        k = int(np.flatnonzero(ok)[np.argmin(gpu_load[g[ok]])])
        out[free_arr[k]] = e
        gpu_load[free_arr[k] // S] += mean[e] / counts[e]
        holds[free_arr[k] // S, e] = True
        free_arr = np.delete(free_arr, k)
    return out


def keep_in_place(problem: Problem, hist: torch.Tensor, policy: str, fresh: torch.Tensor, current: torch.Tensor, *,
                  slack: float, count_risk: float, risk: float, halflife: float | None, noise: float,
                  steps: int) -> tuple[torch.Tensor, dict]:
    """phy2log [L, R] with few moves from ``current`` [L, R] within ``slack`` of the fresh plan
    ``fresh`` [L, R] (module docstring); hist [W, L, E] the window, ``policy`` resolved."""
    W, L, E = hist.shape
    P, R, N, G = problem.num_gpus, problem.num_replicas, problem.num_nodes, problem.num_groups
    S = R // P
    k = step_weights(W, halflife, hist.device)
    hier = policy == "hierarchical" and N > 1
    relabelled = relabel_phy2log(fresh, current, E, P, N if hier else 1)
    target = window_objective(hist, k, fresh, E, P) * (1 + slack)                       # [L]
    info = {"kept_layers": 0, "same_nodes_layers": 0}
    counts = counts_of(fresh, E)
    zone_of_expert = None
    zones = 1
    if hier:
        node_of_group = groups_on_nodes(current, E, G, P, N)
        if node_of_group is None:          # the placement in force is not hierarchical: relabel only
            return relabelled, info
        base, _ = plan_on_nodes(problem, hist, k, node_of_group.unsqueeze(1), count_risk=count_risk, risk=risk,
                                noise=noise, steps=steps)
        counts = counts_of(base, E)
        zone_of_expert = node_of_group.repeat_interleave(E // G, dim=1).cpu().numpy()    # [L, E]
        zones = N
    nodup = E // (N if hier else 1) >= S
    mu, _ = moments(hist, k)
    zone_of_gpu = np.arange(P) // (P // zones)
    mean_np, cur_np, cnt_np = mu.cpu().numpy(), current.cpu().numpy(), counts.cpu().numpy()
    rows = [recount_layer(mean_np[i], cur_np[i], cnt_np[i], P, zone_of_gpu,
                          None if zone_of_expert is None else zone_of_expert[i], nodup) for i in range(L)]
    ok = torch.tensor([r is not None for r in rows], device=hist.device)
    start = torch.as_tensor(np.stack([r if r is not None else cur_np[i] for i, r in enumerate(rows)]),
                            device=hist.device)
    # the risk search on the kept start, stopped within slack of the fresh plan's largest risk
    series = hist.permute(1, 2, 0) / counts.unsqueeze(-1).to(hist.dtype)               # [L, E, W]
    pois = noise * mu / (counts * counts).to(mu.dtype)
    fc = counts_of(fresh, E)
    fresh_risk = _max_risk(hist.permute(1, 2, 0) / fc.unsqueeze(-1).to(hist.dtype), k, fresh, P, risk,
                           noise * mu / (fc * fc).to(mu.dtype))
    kept, _ = risk_search(series, k, start, P, risk, nodup, pois, steps, zones=zones,
                          target=fresh_risk * (1 + slack))
    # Candidates per layer: relabelled fresh (always within slack), the kept placement and,
    # hierarchical, the fresh plan of the groups' current nodes relabelled; fewest moves wins.
    cands = [relabelled, kept]
    fits = [torch.ones(L, dtype=torch.bool, device=hist.device), ok & (window_objective(hist, k, kept, E, P) <= target)]
    if hier:
        same_nodes = relabel_phy2log(base, current, E, P, N)
        cands.append(same_nodes)
        fits.append(window_objective(hist, k, same_nodes, E, P) <= target)
    moves = torch.stack([moves_per_layer(c, current, E, P) for c in cands])            # [C, L]
    moves = moves.masked_fill(~torch.stack(fits), torch.iinfo(torch.int64).max)
    pick = moves.argmin(0)                                                             # first on ties
    info = {"kept_layers": int((pick == 1).sum()), "same_nodes_layers": int((pick == 2).sum())}
    return torch.stack(cands).gather(0, pick.view(1, L, 1).expand(1, L, R)).squeeze(0), info


def _max_risk(series: torch.Tensor, k: torch.Tensor, phy2log: torch.Tensor, num_gpus: int, z: float,
              noise: torch.Tensor) -> torch.Tensor:
    """[X] the largest GPU risk (mean + z x std of its per-step load, sampling noise left out)."""
    X, E, W = series.shape
    R = phy2log.shape[1]
    per = series.gather(1, phy2log.unsqueeze(-1).expand(X, R, W))                     # [X, R, W]
    gpu = per.view(X, num_gpus, R // num_gpus, W).sum(2)                              # [X, P, W]
    m = (gpu * k).sum(-1)
    var = ((gpu - m.unsqueeze(-1)) ** 2 * k).sum(-1)
    var = var - noise.gather(1, phy2log).view(X, num_gpus, -1).sum(-1)
    return (m + z * var.clamp_min(0).sqrt()).max(1).values
