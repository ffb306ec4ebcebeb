"""Certified lower bounds on the optimal max GPU time (even split; docs/bounds.md).

A GPU's time is its load over its relative speed; on a cluster of speed-1 GPUs with R/P
slots each (homogeneous) that is the load, and every bound here is the classical one,
computed exactly as before speeds existed. On other clusters each bound is generalised
(``W / sum of speeds``, the hottest expert over the fastest GPUs, the replication bound
over the fastest speed) and holds for every plan of the heterogeneous problem.

Each bound is a tensor ``[layers]`` in float64, computed for all layers at once.

Scope of each bound (a bound for a wider problem holds for every narrower one):

- :func:`lower_bounds` ``(problem)``: valid for *every* plan of the problem, whatever the
  policy, counts or colocation rule (a hierarchical plan is a global plan with extra
  constraints). This is what :func:`solvers.solve` uses for every solver.
- ``counts=...``: valid for plans with exactly those replica counts (the packing problem).
- ``policy="hierarchical"``: valid for plans of DeepSeek's hierarchical shape (whole groups
  on nodes, ``G/N`` groups per node, replicas inside their node).
"""
from __future__ import annotations

import math
from typing import Any

import torch

from .errors import OptionError
from .problem import Problem

# Relative tolerance by which float64 bound arithmetic is rounded down (a sum of a few
# hundred float64 terms is accurate to far better than this).
_ROUND_DOWN = 1e-12


def _weights(problem: Problem) -> torch.Tensor:
    return problem.weights.to(torch.float64)


def average_bound(problem: Problem) -> torch.Tensor:
    """W / P: the busiest GPU carries at least the mean. With speeds, W / (sum of the live
    GPUs' speeds): the loads sum to W and GPU g carries at most T * s_g in time T."""
    c = problem.cluster
    if c.homogeneous:
        return _weights(problem).sum(1) / problem.num_gpus
    return _weights(problem).sum(1) / c.total_speed


def fastest_speeds(problem: Problem, m: int) -> float:
    """Sum of the ``m`` fastest live GPUs' speeds."""
    c = problem.cluster
    return math.fsum(sorted((c.gpu_speed[g] for g in c.live_gpus), reverse=True)[:m])


def hottest_expert_bound(problem: Problem) -> torch.Tensor:
    """max_e w_e / min(P, R - E + 1): the hottest expert spreads over at most that many GPUs.

    With more replicas than GPUs some GPU holds ceil(c/P) of them, i.e. at least w/P.
    With speeds: an expert on a set of GPUs H, each holding k_g of its c replicas, has
    k_g * w / c <= T * s_g on each, so summing, T >= w / sum_H s_g; H has at most
    min(live GPUs, R - E + 1) GPUs, so T >= w / (sum of that many fastest speeds).
    """
    c = problem.cluster
    if c.homogeneous:
        spread = min(problem.num_gpus, problem.num_replicas - problem.num_experts + 1)
        return _weights(problem).max(1).values / spread
    m = min(len(c.live_gpus), problem.num_replicas - problem.num_experts + 1)
    return _weights(problem).max(1).values / fastest_speeds(problem, m)


def optimal_counts(weights: torch.Tensor, num_replicas: int, max_count: int | None = None) -> torch.Tensor:
    """Replica counts minimising ``max_e w_e / c_e`` with ``sum c_e = R`` (float64 greedy).

    weights: [X, E]. Returns counts: [X, E] int64. Giving each extra slot to the expert
    with the highest load per replica is optimal for this min-max objective (exchange
    argument). ``max_count`` caps every count (forbidden colocation: at most P replicas).
    """
    X, E = weights.shape
    w = weights.to(torch.float64)
    counts = torch.ones(X, E, dtype=torch.int64, device=w.device)
    ones = torch.ones(X, 1, dtype=torch.int64, device=w.device)
    for _ in range(num_replicas - E):
        per = w / counts
        if max_count is not None:
            per = per.masked_fill(counts >= max_count, -1.0)
        best = per.argmax(1, keepdim=True)
        counts.scatter_add_(1, best, ones)
    return counts


# Bisection steps of replication_value: enough to bring the start within a few greedy steps
# of the optimum (each halves the interval; the greedy takes the few counts left).
_BISECTION_STEPS = 20


def replication_value(weights: torch.Tensor, num_replicas: int) -> torch.Tensor:
    """[X] min over counts (>= 1, summing to R) of max_e w_e / c_e, the value of
    :func:`optimal_counts` without its R - E greedy steps.

    A bisection on t finds counts ``ceil(w / t)`` that fit in R slots; nudged down, they
    are at most an optimal vector's (``ceil(w / t*)``) expert by expert, and the greedy of
    :func:`optimal_counts` started there reaches the same optimum t* in the few steps left
    (whenever the max exceeds t*, the expert holding it is below its optimal count).
    """
    X, E = weights.shape
    w = weights.to(torch.float64)
    if num_replicas == E:
        return w.max(1).values
    total = w.sum(1)
    tiny = torch.finfo(torch.float64).tiny
    lo = total / num_replicas                        # t* >= W / R
    hi = (total / (num_replicas - E)).clamp_min(tiny)   # sum ceil(w / hi) <= sum (w / hi + 1) = R
    for _ in range(_BISECTION_STEPS):
        mid = (lo + hi) / 2
        fits = torch.ceil(w / mid.clamp_min(tiny).unsqueeze(1)).clamp_min(1).sum(1) <= num_replicas
        hi, lo = torch.where(fits, mid, hi), torch.where(fits, lo, mid)
    # nudged down so that float rounding never puts a count above its optimal value
    counts = torch.ceil(w / hi.unsqueeze(1) * (1 - 1e-9)).clamp_min(1).to(torch.int64)
    left = num_replicas - counts.sum(1)                                        # [X] >= 0
    for _ in range(int(left.max())):
        best = (w / counts).argmax(1, keepdim=True)
        counts.scatter_add_(1, best, (left > 0).to(torch.int64).unsqueeze(1))
        left = left - (left > 0).to(torch.int64)
    return (w / counts).max(1).values


def replication_bound(problem: Problem) -> torch.Tensor:
    """min over counts of max_e w_e / c_e: every GPU carries at least its heaviest replica.

    Dominates the R - E + 1 half of :func:`hottest_expert_bound`. With speeds the heaviest
    replica takes at least its load over the fastest speed.
    """
    value = replication_value(_weights(problem), problem.num_replicas)
    c = problem.cluster
    return value if c.uniform_speed else value / max(c.gpu_speed[g] for g in c.live_gpus)


# hot_expert_packing_bound: relative gain over the other bounds below which it does not
# search; the first step above them (relative); bisection steps (each halves the interval:
# 16 leave it within 1.5e-5 of its width, 1e-7 of the bound after a first step of 1 %).
_PACKING_MIN_GAIN = 1e-6
_PACKING_FIRST_STEP = 0.01
_PACKING_STEPS = 16
# Counts of the hottest expert tried per step (the window above its least count).
_PACKING_COUNTS = 16
# Rounds raising the least counts by the other slots of each replica's GPU.
_PACKING_ROUNDS = 3
# Experts whose replicas may be a hot GPU's other items, kept exactly (the rest: a floor).
_PACKING_CANDIDATES = 96


def _smallest_sum(values: torch.Tensor, mult: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Sum of the ``k`` smallest items of a multiset: ``values`` [..., E] each ``mult`` [..., E]
    times (float64), ``k`` [...] (at most the items there are: inf beyond)."""
    # Every value with items holds at least one, so the k smallest items lie among the k
    # smallest such values: a partial sort (topk) when k is below the values there are.
    n = values.shape[-1]
    most = int(math.ceil(float(k.max()))) if k.numel() else 0
    if 0 < most < n:
        order = values.masked_fill(mult <= 0, math.inf).topk(most, dim=-1, largest=False).indices
        v = values.gather(-1, order)
    else:
        v, order = values.sort(-1)
    m = mult.gather(-1, order)
    cum_n = m.cumsum(-1)                                                     # items up to each value
    cum_w = torch.where(m > 0, v * m, torch.zeros_like(v)).cumsum(-1)       # (an inf value of no items: 0)
    # items of the values fully taken, then a part of the next value
    full = (cum_n <= k.unsqueeze(-1)).sum(-1, keepdim=True)                  # [..., 1] values fully taken
    zero = torch.zeros_like(cum_n[..., :1])
    taken_n = torch.cat([zero, cum_n], -1).gather(-1, full).squeeze(-1)
    taken_w = torch.cat([zero, cum_w], -1).gather(-1, full).squeeze(-1)
    nxt = torch.cat([v, torch.full_like(v[..., :1], math.inf)], -1).gather(-1, full).squeeze(-1)
    rest = k - taken_n
    return taken_w + torch.where(rest > 0, rest * nxt, torch.zeros_like(rest))


def _packing_fails(w: torch.Tensor, T: torch.Tensor, R: int, s_min: int, fastest: torch.Tensor) -> torch.Tensor:
    """[X] True where no plan has max GPU time <= T (a proof, see hot_expert_packing_bound).
    w: [X, E] loads; T: [X]; fastest: [Q] sum of the j fastest live speeds, j = 1..Q."""
    X, E = w.shape
    Q = fastest.shape[0]
    cap = T * fastest[0]                                       # the most load any one GPU can take
    lo = torch.ceil(w / cap.unsqueeze(1) * (1 - 1e-12)).clamp_min(1)                 # [X, E] least counts
    for _ in range(_PACKING_ROUNDS):
        # every replica's GPU holds S_min - 1 more replicas, each at least its expert's load
        # over its count raised by all extras left: a replica weighs at most cap less those
        spare = (R - lo.sum(1)).clamp_min(0)
        most = lo + spare.unsqueeze(1)
        room = cap - _smallest_sum(w / most, most, torch.full_like(cap, s_min - 1))      # [X]
        need = torch.ceil(w / room.clamp_min(torch.finfo(w.dtype).tiny).unsqueeze(1) * (1 - 1e-12))
        lo = torch.where((room > 0).unsqueeze(1), torch.maximum(lo, need), torch.full_like(lo, R + 1))
    spare = R - lo.sum(1)                                                           # [X] extras left
    hot = w.argmax(1, keepdim=True)                                                 # [X, 1]
    wh = w.gather(1, hot).squeeze(1)                                                # [X]
    lo_h = lo.gather(1, hot).squeeze(1)
    C = max(1, min(_PACKING_COUNTS, R - E + 1, int(spare.max()) + 1))
    a = torch.arange(C, dtype=w.dtype, device=w.device)                             # extras on the hot expert
    c = lo_h.unsqueeze(1) + a                                                       # [X, C] its count
    left = (spare.unsqueeze(1) - a).clamp_min(0)                                    # [X, C] extras for the rest
    # The other experts with every count raised by all extras left: no plan's items are
    # smaller. Only the K whose items can be smallest are kept; every item of the rest is at
    # least u (their least possible item), taken as a bucket of value u without limit.
    floor_v = (w / (lo + spare.clamp_min(0).unsqueeze(1))).scatter(1, hot, math.inf)   # [X, E]
    K = min(_PACKING_CANDIDATES, E - 1)
    near = floor_v.topk(K + 1 if K < E - 1 else K, dim=1, largest=False)
    pick = near.indices[:, :K]                                                      # [X, K]
    u = near.values[:, K] if K < E - 1 else torch.full_like(wh, math.inf)           # [X]
    mult = lo.gather(1, pick).unsqueeze(1) + left.unsqueeze(2)                      # [X, C, K]
    vals = w.gather(1, pick).unsqueeze(1) / mult
    per = wh.unsqueeze(1) / c                                                       # [X, C] a hot replica
    big = torch.full_like(per, float(R * max(s_min, 1) + 1))                        # [X, C] bucket size
    bucket_v = u.unsqueeze(1).expand_as(per)
    # a GPU with a hot replica: its other slots hold other experts' replicas or more hot ones
    one = per + _smallest_sum(torch.cat([vals, bucket_v.unsqueeze(2), per.unsqueeze(2)], 2),
                              torch.cat([mult, big.unsqueeze(2), (c - 1).unsqueeze(2)], 2),
                              torch.full_like(per, s_min - 1))
    # hot replicas on c distinct GPUs: their other slots hold other experts' replicas only
    spread = wh.unsqueeze(1) + _smallest_sum(torch.cat([vals, bucket_v.unsqueeze(2)], 2),
                                             torch.cat([mult, big.unsqueeze(2)], 2), c * (s_min - 1))
    room = T.unsqueeze(1) * fastest[c.to(torch.int64).clamp(1, Q) - 1]              # c fastest GPUs' capacity
    apart = 2 * per > cap.unsqueeze(1)                                              # no two share a GPU
    ok = (one <= cap.unsqueeze(1)) & (~apart | ((spread <= room) & (c <= Q)))
    ok &= a <= spare.unsqueeze(1)
    # counts of the hot expert beyond the window are not checked: taken as possible
    unchecked = spare >= C
    return (spare < 0) | ~(ok.any(1) | unchecked)


def hot_expert_packing_bound(problem: Problem, start: torch.Tensor) -> torch.Tensor:
    """A bound that counts the slots the hottest expert's GPUs must fill (bisection above
    ``start`` [L], a valid bound). Every plan with max GPU time T has, per layer:

    - each replica at most ``T x s_max`` (load), so expert e has at least
      ``lo_e = ceil(w_e / (T s_max))`` replicas and the counts above those sum to at most
      ``D = R - sum lo`` (D < 0: T is impossible); every replica's GPU also holds S_min - 1
      other replicas (S_min: the fewest slots of a live GPU), each at least
      ``w_e / (lo_e + D)`` of its expert, so a replica weighs at most ``T s_max - sigma``
      (sigma: the S_min - 1 smallest of those items, each expert ``lo_e + D`` times), which
      raises ``lo`` (and lowers D; a few rounds);
    - the hottest expert h with c replicas (``lo_h <= c <= lo_h + D``) leaves at most
      ``D - (c - lo_h)`` extras to the others, so no other expert has more than
      ``lo_e + D - (c - lo_h)`` replicas and each of its replicas weighs at least
      ``w_e / (lo_e + D - (c - lo_h))``: the k smallest items of that multiset (each expert
      that many times) sum to at most the k smallest replicas of the plan's other experts;
    - a GPU holding a replica of h holds at least S_min - 1 other replicas (of the others,
      or of h): ``w_h / c + (S_min - 1 smallest) <= T s_max``;
    - if ``2 w_h / c > T s_max`` no GPU holds two of h's replicas: c GPUs hold them, each
      with S_min - 1 replicas of other experts, so ``w_h + (c (S_min - 1) smallest) <= T x``
      (sum of the c fastest speeds), and c is at most the live GPUs.

    T is impossible when no c meets these; they only get easier as T grows, so the least
    T that meets them (bisection, rounded down) bounds the optimum. On identical GPUs this
    is the cardinality argument that average and replication bounds miss when few very
    hot experts need many replicas and the other slots of their GPUs must hold something:
    a hot replica's GPU cannot be filled to the average by the tail's smallest experts.
    """
    c = problem.cluster
    w = _weights(problem)
    live = sorted((c.gpu_speed[g] for g in c.live_gpus), reverse=True)
    fastest = torch.tensor(live, dtype=torch.float64, device=w.device).cumsum(0)        # [Q]
    s_min = min(c.gpu_slots[g] for g in c.live_gpus)
    R = problem.num_replicas
    out = start.clone()
    # rows where T a hair above the other bounds is impossible (elsewhere the gain is nil)
    lo = start * (1 + _PACKING_MIN_GAIN)
    rows = (_packing_fails(w, lo, R, s_min, fastest) & (w.sum(1) > 0)).nonzero().squeeze(1)
    if rows.numel() == 0:
        return out
    w, lo = w[rows], lo[rows]
    # an upper value that passes: widen by doubling steps (every GPU's load is at most W, so
    # W over the slowest speed passes whenever the checks are sound)
    ceiling = w.sum(1) / live[-1]
    hi = torch.minimum(lo * (1 + _PACKING_FIRST_STEP), ceiling)
    for _ in range(64):
        bad = _packing_fails(w, hi, R, s_min, fastest)
        if not bool(bad.any()) or bool((hi >= ceiling).all()):
            break
        lo = torch.where(bad, hi, lo)
        hi = torch.where(bad, torch.minimum(lo + 2 * (hi - start[rows]), ceiling), hi)
    if bool(_packing_fails(w, hi, R, s_min, fastest).any()):
        return out                        # (never: the ceiling is feasible) keep what was proven
    for _ in range(_PACKING_STEPS):       # lo fails (impossible), hi passes
        mid = (lo + hi) / 2
        bad = _packing_fails(w, mid, R, s_min, fastest)
        lo, hi = torch.where(bad, mid, lo), torch.where(bad, hi, mid)
    out[rows] = lo
    return out


def item_bounds(items: torch.Tensor, num_bins: int) -> torch.Tensor:
    """Pigeonhole bounds for packing ``items`` into ``num_bins`` bins of exactly ``n / bins`` items.

    items: [X, n] item loads (n a multiple of num_bins). Returns [X] the best of, for
    j = 0 .. S-1: some bin holds j+1 of the top j*B+1 items, so its load is at least the
    j+1 smallest of those plus the S-j-1 smallest of the rest (j = 0: the largest item
    plus the S-1 smallest items).
    """
    X, n = items.shape
    S = n // num_bins
    v = items.to(torch.float64).sort(1, descending=True).values          # [X, n]
    # suffix[k] = sum of v[k:], so the smallest m items sum to suffix[n - m].
    suffix = torch.cat([v.flip(1).cumsum(1).flip(1), torch.zeros(X, 1, dtype=v.dtype, device=v.device)], 1)
    best = torch.zeros(X, dtype=torch.float64, device=v.device)
    for j in range(S):
        top = j * num_bins + 1                                            # the top j*B+1 items
        chosen = suffix[:, top - j - 1] - suffix[:, top]                  # their j+1 smallest
        rest = suffix[:, n - (S - j - 1)]                                 # S-j-1 smallest overall
        best = torch.maximum(best, chosen + rest)
    return best


def replica_items(weights: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """The replica multiset: weights [X, E], counts [X, E] (rows with equal sums) -> [X, R]
    with c_e copies of w_e / c_e per row."""
    X, E = weights.shape
    per = weights.to(torch.float64) / counts
    R = int(counts[0].sum())
    idx = torch.repeat_interleave(torch.arange(E, device=weights.device).expand(X, E).reshape(-1),
                                  counts.reshape(-1)).view(X, R)
    return per.gather(1, idx)


def fixed_counts_bound(problem: Problem, counts: torch.Tensor) -> torch.Tensor:
    """Pigeonhole bounds for the given replica counts [layers, experts] (packing problem)."""
    return item_bounds(replica_items(problem.weights, counts), problem.num_gpus)


def group_loads(problem: Problem) -> torch.Tensor:
    """[layers, groups] total load of each group of E/G consecutive experts."""
    L, E = problem.weights.shape
    return _weights(problem).view(L, problem.num_groups, E // problem.num_groups).sum(-1)


def node_bound(problem: Problem, node_budget: str = "fixed") -> torch.Tensor:
    """Node-level bound for hierarchical plans: the busiest node's load over its P/N GPUs.

    Whole groups sit on nodes: with ``node_budget="fixed"`` (G/N groups per node) the
    pigeonhole bounds on group loads apply; with "free" only the heaviest group and W/N.
    Replicas stay in their node, so the hottest expert spreads over at most
    min(P/N, R/N - E/N + 1) GPUs (fixed budget) or P/N GPUs (free budget).
    """
    P, N = problem.num_gpus, problem.num_nodes
    gpn = P // N
    groups = group_loads(problem)
    if node_budget == "fixed":
        node_load = item_bounds(groups, N)
        spread = min(gpn, (problem.num_replicas - problem.num_experts) // N + 1)
    else:
        node_load = torch.maximum(groups.max(1).values, groups.sum(1) / N)
        spread = gpn
    hottest = _weights(problem).max(1).values / spread
    return torch.maximum(node_load / gpn, hottest)


def lower_bounds(problem: Problem, *, counts: Any = None, policy: str = "global",
                 node_budget: str = "fixed") -> dict[str, torch.Tensor]:
    """Every combinatorial bound by name, each ``[layers]`` float64.

    counts: optional replica counts [layers, experts] (or [experts]) for the fixed-count
    problem; policy: "global" (valid for every plan) or "hierarchical" (adds node-level
    bounds for hierarchical plans with the given ``node_budget``).
    """
    out = {"average": average_bound(problem), "hottest_expert": hottest_expert_bound(problem),
           "replication": replication_bound(problem)}
    base = torch.stack(list(out.values())).max(0).values
    out["hot_expert_packing"] = hot_expert_packing_bound(problem, base)
    if counts is not None:
        c = torch.as_tensor(counts, device=problem.device)
        if c.is_floating_point() and not bool((c == c.round()).all()):
            raise OptionError("counts", "replica counts must be integers")
        c = c.to(torch.int64)
        if c.dim() == 1:
            c = c.expand(problem.num_layers, -1)
        if c.shape != problem.weights.shape:
            raise OptionError("counts", f"must have shape {tuple(problem.weights.shape)}, got {tuple(c.shape)}")
        if bool((c < 1).any()) or bool((c.sum(1) != problem.num_replicas).any()):
            raise OptionError("counts", f"must be >= 1 and sum to {problem.num_replicas} per layer")
        if problem.cluster.homogeneous:   # the pigeonhole argument needs equal bins
            out["pigeonhole"] = fixed_counts_bound(problem, c)
    if policy == "hierarchical":
        problem.resolve_policy("hierarchical")
        if node_budget not in ("fixed", "free"):
            raise OptionError("node_budget", f"must be 'fixed' or 'free', got {node_budget!r}")
        out["node"] = node_bound(problem, node_budget)
    elif policy != "global":
        raise OptionError("policy", f"must be 'global' or 'hierarchical', got {policy!r}")
    # Round down so float rounding can never lift a bound above a true optimum.
    return {k: v * (1 - _ROUND_DOWN) for k, v in out.items()}


def lower_bound(problem: Problem, **kwargs: Any) -> torch.Tensor:
    """The best combinatorial bound per layer: ``[layers]`` float64 (same keywords as
    :func:`lower_bounds`; without them it holds for every plan of the problem)."""
    return torch.stack(list(lower_bounds(problem, **kwargs).values())).max(0).values


def structure_bound(problem: Problem, plan: Any, *, base: torch.Tensor | None = None) -> torch.Tensor:
    """[layers] bound for every plan with this plan's node structure, per layer.

    Where a layer keeps each group's replicas on a single node (a strict hierarchical
    plan), the node-level bound applies: with the "fixed" budget when every node holds
    exactly G/N groups, else with the "free" one. Elsewhere it is the bound for any plan.
    So ``objective / structure_bound - 1`` is the gap *within* the plan's policy, while
    the gap to :func:`lower_bound` also counts what the policy itself costs.

    base: [layers] a bound valid for every plan, already computed for this problem (the
    grader's), with ``plan`` already validated; the result is never below it.
    """
    if base is None:
        problem.validate_plan(plan)
        base = lower_bound(problem)
    G, N = problem.num_groups, problem.num_nodes
    if G == 1 or N == 1 or problem.num_experts % G != 0 or not problem.cluster.homogeneous:
        return base
    p2l = plan.phy2log.to(problem.device)
    L, R = p2l.shape
    node = (torch.arange(R, device=p2l.device) // (R // N)).expand(L, R)
    group = p2l // (problem.num_experts // G)
    on = torch.zeros(L, G, N, dtype=torch.bool, device=p2l.device)
    on.view(L, G * N).scatter_(1, group * N + node, True)
    strict = on.sum(-1).eq(1).all(-1)                                       # [L] each group on one node
    fixed = strict & on.sum(1).eq(G // N).all(-1) if G % N == 0 else torch.zeros_like(strict)
    # lower_bound(policy="hierarchical") is max(base, node bound): add only the node bound
    out = base.clone()
    for rows, budget in ((fixed, "fixed"), (strict & ~fixed, "free")):
        if bool(rows.any()):
            out = torch.where(rows, torch.maximum(base, node_bound(problem, budget) * (1 - _ROUND_DOWN)), out)
    return out
