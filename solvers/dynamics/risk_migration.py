"""Migration-aware re-plans judged on the planner's forecast: keep replicas in place, keep the future balance.

Given the placement in force (``current``), a re-plan should move few replicas yet stay
within ``slack`` of a fresh plan, measured on the forecast the planner trusts: the per-step
imbalance over the window's steps (sum over steps of the max GPU load / sum of the mean, the
steps weighted by the planner's halflife, evenly without one), not the max load of the
window's sum (a plan balanced on the sum can leave every step waiting for one GPU). The fresh
plan is any planner's (``risk_aware``'s own, or the base of the ``migration`` solver given the
window's steps: the greedy included). Candidates per layer:

- **relabelled**: the fresh plan with GPUs (and nodes) renamed to keep the most replicas in
  place (:func:`solvers.replan.relabel`): its forecast is the fresh plan's;
- **sticky**: risk-aware placements (:mod:`.risk`) with a bonus for every replica that stays on
  a GPU that holds its expert now (the placement gives up to that much risk to keep it: levels
  of 0, 0.1, 0.25, 0.5 and 1 x the mean GPU load, each a candidate) and a swap search stopped as
  soon as the largest risk is within ``slack`` of the fresh plan's.

:func:`within_slack` picks per layer among them the fewest moves in all such that the plan's
forecast imbalance, averaged over layers as the realised imbalance is, is within ``slack`` of
the fresh plan's and no layer's is more than ``LAYER_SLACKS`` slacks above its fresh one.

Under the hierarchical policy the sticky plans are made on three kinds of group-to-node maps
(when the placement in force is hierarchical; otherwise only the relabelled fresh plan is
taken): the map in force (no group moves), the fresh plan's map with nodes renamed to keep
the most groups in place, and the map in force with one pair of groups on two nodes swapped
(the ``SWAP_CANDIDATES`` swap with the smallest largest node risk for the steps to come,
:func:`node_risk`: the node's recent load plus its per-step spread over the whole window,
covariances of the groups included). A swap moves two groups' replicas, where the fresh map often moves more: on the
generated DeepSeek-V3 drifting trace it cut the bytes by about 15 % at the same realised
imbalance (``benchmarks/migration_holdout.py``).

On a real cluster (speeds, uneven slot counts, failed GPUs: the fresh plan is global and in
time, :class:`solvers.dynamics.risk.Slots`) GPUs are not interchangeable, so nothing is
relabelled: the candidates are the fresh plan and the sticky plans (the same bonus levels, in
time), judged on the per-step time imbalance the same way.
"""
from __future__ import annotations

import math

import torch

from ..replan.relabel import relabel_phy2log
from ..problem import Problem
from ..scoring import gpu_presence, new_pairs
from .risk import Slots, moments, plan_on_nodes, plan_rows, step_weights, window_objective


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


# Bonus a replica gets for staying on a GPU that holds its expert now, as shares of the mean GPU
# load of the window: each level is a candidate (0: no stickiness, the plan of the groups' nodes).
# The levels step by about 2x, so some candidate keeps nearly as many replicas as the slack allows.
# Levels 2 and 4 were dropped (on the generated DeepSeek-V3 drifting trace, hierarchical, slack 0.01,
# no layer ever took them: a bonus of one mean GPU load already keeps what can be kept; they cost a
# quarter of the re-plan's time).
BONUS_LEVELS = (0.0, 0.1, 0.25, 0.5, 1.0)
# Rounds of the sticky plans' swap search (each row stops once its largest risk is within the slack
# of the fresh plan's): a sticky row that has not got there in 16 rounds rarely does in 64, and its
# candidate is judged on the forecast anyway (the same moves and realised imbalance within 0.1 % on
# the DeepSeek-V3 drifting trace at a quarter of the search's time).
STICKY_STEPS = 16
# A layer's plan may exceed the fresh plan's forecast imbalance by at most this many slacks, the
# plan as a whole (the mean over layers: what realised imbalance is) by one slack.
LAYER_SLACKS = 2.0
# Group-to-node maps one swap away from the map in force tried under the hierarchical policy.
SWAP_CANDIDATES = 1


def keep_in_place(problem: Problem, hist: torch.Tensor, policy: str, fresh: torch.Tensor, current: torch.Tensor, *,
                  slack: float, count_risk: float, risk: float, halflife: float | None, noise: float,
                  steps: int) -> tuple[torch.Tensor, dict]:
    """phy2log [L, R] with few moves from ``current`` [L, R] within ``slack`` of the fresh plan
    ``fresh`` [L, R] (module docstring); hist [W, L, E] the window, ``policy`` resolved."""
    W, L, E = hist.shape
    P, R, N, G = problem.num_gpus, problem.num_replicas, problem.num_nodes, problem.num_groups
    B = len(BONUS_LEVELS)
    k = step_weights(W, halflife, hist.device)
    if not problem.cluster.homogeneous:
        return _keep_on_cluster(problem, hist, k, fresh, current, slack=slack, count_risk=count_risk, risk=risk,
                                noise=noise, steps=steps)
    hier = policy == "hierarchical" and N > 1
    relabelled = relabel_phy2log(fresh, current, E, P, N if hier else 1)
    node_of_group = groups_on_nodes(current, E, G, P, N) if hier else None
    if hier and node_of_group is None:      # the placement in force is not hierarchical: relabel only
        return relabelled, {"sticky_layers": 0}
    mu, _ = moments(hist, k)
    fc = torch.zeros(L, E, dtype=torch.int64, device=fresh.device).scatter_add_(
        1, fresh, torch.ones_like(fresh))                                               # [L, E] replicas
    fresh_risk = _max_risk(hist.permute(1, 2, 0) / fc.unsqueeze(-1).to(hist.dtype), k, fresh, P, risk,
                           noise * mu / (fc * fc).to(mu.dtype))
    levels = torch.tensor(BONUS_LEVELS, dtype=torch.float64, device=hist.device)
    bonus = (levels.view(B, 1) * (mu.sum(1) / P).view(1, L)).reshape(B * L)             # [B*L] level-major
    keep = gpu_presence(current, E, P).repeat(B, 1, 1)                                  # [B*L, P, E]
    hb = hist.repeat(1, B, 1)                                                           # [W, B*L, E]
    risk_target = (fresh_risk * (1 + slack)).repeat(B)
    search = min(steps, STICKY_STEPS)
    if hier:
        # Two group-to-node maps: the one in force (no group moves) and the fresh plan's, its
        # nodes renamed to keep the most groups in place (groups that stay keep their replicas).
        fresh_nodes = groups_on_nodes(relabelled, E, G, P, N)
        maps = [node_of_group] + ([fresh_nodes] if fresh_nodes is not None
                                  and not torch.equal(fresh_nodes, node_of_group) else [])
        maps = [m.unsqueeze(1) for m in maps] + [swapped_maps(hist, k, node_of_group, G, N, risk,
                                                              SWAP_CANDIDATES)]      # each [L, K, G]
        # plan_on_nodes keeps, per layer, the better of a map's K candidates on the window.
        sticky = torch.cat([plan_on_nodes(problem, hb, k, m.repeat(B, 1, 1), count_risk=count_risk,
                                          risk=risk, noise=noise, steps=search, keep=keep, bonus=bonus,
                                          target=risk_target)[0].view(B, L, R) for m in maps])
    else:
        sticky, _, _ = plan_rows(hb, k, R, P, count_risk, risk, noise, search, keep=keep, bonus=bonus,
                                 target=risk_target)
        sticky = sticky.view(B, L, R)
    # Candidates per layer: the relabelled fresh plan (its forecast imbalance is the fresh plan's)
    # and each sticky plan (the level-0 ones relabelled too), judged on the forecast.
    for i in range(0, sticky.shape[0], B):
        sticky[i] = relabel_phy2log(sticky[i], current, E, P, N if hier else 1)
    cands = torch.cat([relabelled.unsqueeze(0), sticky])                                 # [1+B', L, R]
    return within_slack(cands, hist, k, current, slack, E, P)


def within_slack(cands: torch.Tensor, hist: torch.Tensor, k: torch.Tensor, current: torch.Tensor, slack: float,
                 num_experts: int, num_gpus: int, cluster=None,
                 slot_gpu: torch.Tensor | None = None) -> tuple[torch.Tensor, dict]:
    """Per layer one of ``cands`` [C, L, R] (the first: the fresh plan, or one as balanced on the
    forecast) with the fewest moves from ``current`` [L, R] in all, such that the plan's forecast
    imbalance (:func:`window_objective` on hist [W, L, E] with the step weights k [W]: the per-step
    imbalance the planner expects), averaged over layers as the realised imbalance is, is at most
    ``(1 + slack)`` x the fresh plan's, and no layer's exceeds its fresh one by more than
    ``LAYER_SLACKS`` slacks. The choice is a Lagrangian one (per layer moves + price x forecast,
    the cheapest price that fits), batched over a grid of prices; never more moves in all than
    the first candidate's."""
    C, L, R = cands.shape
    obj = torch.stack([window_objective(hist, k, c, num_gpus, cluster) for c in cands])       # [C, L]
    moves = new_pairs(cands.reshape(C * L, R), current.repeat(C, 1), num_experts, num_gpus,
                      slot_gpu, slot_gpu).view(C, L).to(torch.float64)                         # [C, L]
    rel = obj / obj[0].clamp_min(1e-300)                                                      # [C, L] vs fresh
    eligible = rel <= 1 + LAYER_SLACKS * slack * (1 + 1e-12)
    eligible[0] = True
    # prices of one unit of relative forecast imbalance per layer, in moves: 0 (fewest moves) to
    # far above any layer's moves (the most balanced candidates), then the plan that fits
    prices = torch.cat([torch.zeros(1, dtype=torch.float64, device=rel.device),
                        torch.logspace(0, 9, 91, dtype=torch.float64, device=rel.device)])      # [G]
    key = moves.unsqueeze(0) + prices.view(-1, 1, 1) * rel.unsqueeze(0)                      # [G, C, L]
    pick = key.masked_fill(~eligible.unsqueeze(0), math.inf).argmin(1)                        # [G, L]
    pick = torch.cat([pick, pick.new_zeros(1, L)])              # and the fresh plan everywhere (fits)
    total = rel.gather(0, pick).sum(1)                                                        # [G]
    cost = moves.gather(0, pick).sum(1)
    fits = total <= L * (1 + slack) * (1 + 1e-12)
    fits[-1] = True
    best = int(torch.where(fits, cost, math.inf).argmin())
    choice, forecast = pick[best], float(total[best]) / L - 1
    out = cands.gather(0, choice.view(1, L, 1).expand(1, L, R)).squeeze(0)
    return out, {"sticky_layers": int((choice > 0).sum()),
                 "forecast_imbalance_vs_fresh": forecast}


def _keep_on_cluster(problem: Problem, hist: torch.Tensor, k: torch.Tensor, fresh: torch.Tensor,
                     current: torch.Tensor, *, slack: float, count_risk: float, risk: float, noise: float,
                     steps: int) -> tuple[torch.Tensor, dict]:
    """:func:`keep_in_place` on a real cluster (module docstring): hist [W, L, E], k [W] the step
    weights, fresh and current [L, R] in the cluster's slot order."""
    W, L, E = hist.shape
    c, R, B = problem.cluster, problem.num_replicas, len(BONUS_LEVELS)
    slots = Slots.of(c, hist.device)
    slot_gpu = torch.tensor(c.slot_gpus(), dtype=torch.int64, device=hist.device)              # [R]
    live = torch.tensor(c.live_gpus, dtype=torch.int64, device=hist.device)                     # [Q]
    keep = gpu_presence(current, E, c.num_gpus, slot_gpu).index_select(1, live)                 # [L, Q, E]
    mu, _ = moments(hist, k)
    levels = torch.tensor(BONUS_LEVELS, dtype=torch.float64, device=hist.device)
    bonus = (levels.view(B, 1) * (mu.sum(1) / c.total_speed).view(1, L)).reshape(B * L)       # mean GPU time
    sticky, _, _ = plan_rows(hist.repeat(1, B, 1), k, R, slots.Q, count_risk, risk, noise, min(steps, STICKY_STEPS),
                             keep=keep.repeat(B, 1, 1), bonus=bonus, slots=slots)
    cands = torch.cat([fresh.unsqueeze(0), sticky.view(B, L, R)])                               # [1+B, L, R]
    return within_slack(cands, hist, k, current, slack, E, c.num_gpus, c, slot_gpu)


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


def node_risk(hist: torch.Tensor, k: torch.Tensor, maps: torch.Tensor, num_groups: int, num_nodes: int,
              z: float) -> torch.Tensor:
    """[L, M] the largest node risk of each group-to-node map ``maps`` [L, M, G] for the steps to
    come: level + z x spread, the level its load over the window hist [W, L, E] with the step
    weights k [W] (where the loads are now), the spread the std of its per-step load over the
    whole window, unweighted: how far the groups placed together wander over about a re-plan
    period (their covariances included: two groups that drift apart cancel on one node)."""
    W, L, E = hist.shape
    gs = hist.view(W, L, num_groups, E // num_groups).sum(-1)                        # [W, L, G]
    onehot = torch.nn.functional.one_hot(maps, num_nodes).to(hist.dtype)            # [L, M, G, N]
    node = torch.einsum("wlg,lmgn->wlmn", gs, onehot)                                # [W, L, M, N]
    level = torch.einsum("w,wlmn->lmn", k, node)
    spread = node.var(0, unbiased=False).sqrt()
    return (level + z * spread).max(-1).values


def swapped_maps(hist: torch.Tensor, k: torch.Tensor, node_of_group: torch.Tensor, num_groups: int,
                 num_nodes: int, z: float, top: int) -> torch.Tensor:
    """[L, top, G] group-to-node maps that swap one pair of groups on two nodes of
    ``node_of_group`` [L, G]: per layer the ``top`` swaps with the smallest :func:`node_risk`
    (window hist [W, L, E], step weights k [W], z the placement's risk)."""
    G = num_groups
    a, b = torch.triu_indices(G, G, 1, device=hist.device)                           # [Q] every pair
    Q = a.numel()
    na, nb = node_of_group[:, a], node_of_group[:, b]                                 # [L, Q]
    maps = node_of_group.unsqueeze(1).repeat(1, Q, 1)                                 # [L, Q, G]
    q = torch.arange(Q, device=hist.device)
    maps[:, q, a] = nb
    maps[:, q, b] = na
    worst = node_risk(hist, k, maps, G, num_nodes, z).masked_fill(na == nb, math.inf)  # same node: no swap
    pick = worst.topk(min(top, Q), dim=1, largest=False).indices                      # [L, top]
    return maps.gather(1, pick.unsqueeze(-1).expand(-1, -1, G))
