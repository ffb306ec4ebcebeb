"""``risk_aware``: a plan for the steps to come, from the window's steps (out of sample).

A plan is made on a window of past steps and served on the next ones, whose loads differ.
What a step waits for is its busiest GPU, so a GPU whose load swings from step to step is a
risk even when its mean is balanced. The planner works on the window's steps
``history [W, L, E]`` (recent steps may weigh more, ``halflife``) and treats each GPU's
per-step load as a random quantity with a mean and a standard deviation that includes the
covariances of the experts placed together (two experts that are hot in different request
mixes cancel out on one GPU; two hot in the same mix add up):

1. replica counts: the min-max counts (:func:`solvers.bounds.optimal_counts`) of
   ``mean + count_risk x std`` per expert: an expert that swings gets more replicas;
2. placement: replicas by decreasing risk-adjusted load, each to the GPU whose *risk*
   ``mean + risk x std`` of its per-step load series grows least (largest first, as LPT);
   never two replicas of one expert on one GPU (when a GPU has at most as many slots as
   there are experts to choose from);
3. a swap search between the riskiest GPU and any other slot (its node's slots under the
   hierarchical policy), every swap valued in closed form from the series' covariances,
   until no swap lowers the largest risk or ``steps`` rounds ran.

Hierarchical policy: expert groups go to nodes first (the few best-balanced assignments of
the groups' risk-adjusted loads, :func:`solvers.heuristics.hierarchical.group_node_candidates`),
every (layer, assignment, node) is planned as an independent row with the node's slots and
GPUs, and per layer the assignment whose plan has the best per-step imbalance on the window
is kept.
All work is batched over layers (and nodes) in torch; float64 throughout.
"""
from __future__ import annotations

import math

import torch

from ..bounds import optimal_counts
from ..heuristics.hierarchical import group_node_candidates, node_experts
from ..heuristics.packing import repair_duplicates
from ..heuristics.common import LiveGPUs
from ..heuristics.packing import repair_swaps
from ..problem import Problem
from ..scoring import step_gpu_times

# Defaults chosen with benchmarks/out_of_sample.py on the shipped traces and their seeds 1-4
# (docs/dynamics.md): the counts use the upper quartile (z = 0.674) of a normal per-step load,
# as FlashLB's public description does; the placement risk z = 1 with a halflife of 4 steps
# had the best mean held-out imbalance over the drifting, shifting and skewed traces together
# (a larger z helps regime shifts, a smaller one stable loads).
DEFAULT_COUNT_RISK = 0.674
DEFAULT_RISK = 1.0
DEFAULT_HALFLIFE = 4.0
# Group-to-node assignments tried under the hierarchical policy (best node balance first).
GROUP_CANDIDATES = 4


def step_weights(num_steps: int, halflife: float | None, device) -> torch.Tensor:
    """[W] weights of the window's steps summing to 1; the newest weighs most with a halflife."""
    if halflife is None:
        return torch.full((num_steps,), 1.0 / num_steps, dtype=torch.float64, device=device)
    age = torch.arange(num_steps - 1, -1, -1, dtype=torch.float64, device=device)
    k = torch.pow(0.5, age / halflife)
    return k / k.sum()


def moments(hist: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Weighted mean and standard deviation over steps: hist [W, X, E], k [W] -> ([X, E], [X, E])."""
    mu = torch.einsum("w,wxe->xe", k, hist)
    var = torch.einsum("w,wxe->xe", k, (hist - mu) ** 2)
    return mu, var.clamp_min(0).sqrt()


def _risk(mean: torch.Tensor, var: torch.Tensor, z: float) -> torch.Tensor:
    return mean + z * var.clamp_min(0).sqrt() if z else mean


def _swap_risk(mean: torch.Tensor, var: torch.Tensor, ab2: torch.Tensor, ha2: torch.Tensor | None,
               z: float) -> torch.Tensor:
    """The risk ``mean + z x sqrt(var - ab2 (+ ha2))`` of a GPU after each swap [n, S, R], in
    place on the new full tables (``mean`` and ``var`` arrive as broadcast sums, so each is
    one fresh [n, S, R] tensor)."""
    if not z:
        return mean
    var.sub_(ab2)
    if ha2 is not None:
        var += ha2
    return mean.add_(var.clamp_min_(0).sqrt_(), alpha=z)


class Slots:
    """The live GPUs of a real cluster (speeds, uneven slot counts; failed GPUs left out) as a
    *padded* slot grid: GPU q holds grid slots [q x S, q x S + caps[q]) of Q x S, S = the
    largest slot count; the other grid slots hold a phantom expert (a zero load) that never
    moves, so every plan on the grid keeps each GPU's slot count. caps [Q] int64, speed [Q]
    float64; valid [Q x S] bool the real slots, in the cluster's slot order."""

    def __init__(self, caps: list[int], speed: list[float], device):
        self.Q, self.S = len(caps), max(caps)
        self.caps = torch.tensor(caps, dtype=torch.int64, device=device)
        self.speed = torch.tensor(speed, dtype=torch.float64, device=device)
        j = torch.arange(self.S, device=device)
        self.valid = (j.unsqueeze(0) < self.caps.unsqueeze(1)).reshape(-1)              # [Q*S]
        self.real = self.valid.nonzero().squeeze(1)                                      # [R] grid slot of each slot

    @classmethod
    def of(cls, cluster, device) -> "Slots":
        live = cluster.live_gpus
        return cls([cluster.gpu_slots[g] for g in live], [cluster.gpu_speed[g] for g in live], device)


def centred(series: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Weighted means [X, E] and centred series [X, E, W] of per-replica loads series [X, E, W]."""
    mean = torch.einsum("xew,w->xe", series, k)
    return mean, series - mean.unsqueeze(-1)


def risk_place(series: torch.Tensor, k: torch.Tensor, item_e: torch.Tensor, num_gpus: int, z: float,
               nodup: bool, noise: torch.Tensor, keep: torch.Tensor | None = None,
               bonus: torch.Tensor | None = None, slots: Slots | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Largest-first placement by risk.

    series: [X, E, W] per-replica load of each expert in each step; k: [W] step weights;
    item_e: [X, R] the replicas (expert ids) in placement order; noise: [X, E] the variance
    of each replica's load that is sampling noise (left out of the risk). keep: [X, P, E] bool
    the GPUs that hold each expert now and bonus: [X] the risk a replica may add to stay on
    such a GPU (migration-aware placement; None: none). Each GPU keeps its mean, its
    variance and its covariance with every expert ([X, P, E]), so a replica is valued on all
    GPUs in O(P) and placed in O(E). Returns (phy2log [X, R], stuck [X] bool: rows where some
    replica found no GPU without its expert and was placed anyway).
    slots: a real cluster's live GPUs (``num_gpus`` = slots.Q): each GPU takes at most its
    own slot count and is valued in time (risk over its speed); phy2log is then the padded
    grid [X, Q x S] with the phantom expert E (``series`` has E + 1 rows, the last zero).
    """
    X, E, W = series.shape
    R = item_e.shape[1]
    P = num_gpus
    dev = series.device
    slots = slots or Slots([R // P] * P, [1.0] * P, dev)     # identical GPUs: speed 1 divides exactly
    S = slots.S
    mean_e, cent = centred(series, k)
    cov = torch.bmm(cent * k, cent.transpose(1, 2))                          # [X, E, E]
    cov.diagonal(dim1=1, dim2=2).sub_(noise)
    var_e = cov.diagonal(dim1=1, dim2=2)                                      # [X, E]
    gm = torch.zeros(X, P, dtype=torch.float64, device=dev)                   # GPU mean
    gv = torch.zeros(X, P, dtype=torch.float64, device=dev)                   # GPU variance
    gcov = torch.zeros(X, P, E, dtype=torch.float64, device=dev)              # cov(GPU, expert)
    fill = torch.zeros(X, P, dtype=torch.int64, device=dev)
    pres = torch.zeros(X, P, E, dtype=torch.bool, device=dev)
    p2l = torch.full((X, P * S), E - 1, dtype=torch.int64, device=dev)     # (phantom: only with slots)
    room = slots.caps.unsqueeze(0)
    stuck = torch.zeros(X, dtype=torch.bool, device=dev)
    # Flat views and index_select/index_add: advanced indexing of [X, E, E] is far slower on CPU.
    rows = torch.arange(X, device=dev)
    cov_rows, gcov_rows = cov.view(X * E, E), gcov.view(X * P, E)
    pres_flat = pres.view(-1)
    for i in range(R):
        e = item_e[:, i:i + 1]                                                # [X, 1]
        me, ve = mean_e.gather(1, e), var_e.gather(1, e)                      # [X, 1]
        cross = gcov.gather(2, e.view(X, 1, 1).expand(X, P, 1)).squeeze(2)  # [X, P]
        cost = _risk(gm + me, gv + ve + 2 * cross, z) / slots.speed       # the time its riskiest load takes
        if keep is not None:
            cost = cost - bonus.unsqueeze(1) * keep.gather(2, e.view(X, 1, 1).expand(X, P, 1)).squeeze(2)
        cost = cost.masked_fill(fill >= room, math.inf)
        free = cost.masked_fill(pres.gather(2, e.view(X, 1, 1).expand(X, P, 1)).squeeze(2), math.inf) \
            if nodup else cost
        g = free.argmin(1, keepdim=True)                                      # [X, 1]
        dead = torch.isinf(free.gather(1, g)).squeeze(1)
        if bool(dead.any()):               # every GPU with room holds e: place it, repaired later
            stuck |= dead
            g = torch.where(dead.unsqueeze(1), cost.argmin(1, keepdim=True), g)
        gm.scatter_add_(1, g, me)
        gv.scatter_add_(1, g, ve + 2 * cross.gather(1, g))
        gcov_rows.index_add_(0, rows * P + g.squeeze(1), cov_rows.index_select(0, rows * E + e.squeeze(1)))
        p2l.scatter_(1, g * S + fill.gather(1, g), e)
        fill.scatter_add_(1, g, torch.ones_like(g))
        pres_flat[(rows * P + g.squeeze(1)) * E + e.squeeze(1)] = True
    return p2l, stuck


def risk_search(series: torch.Tensor, k: torch.Tensor, phy2log: torch.Tensor, num_gpus: int, z: float,
                nodup: bool, noise: torch.Tensor, steps: int, *, zones: int = 1,
                target: torch.Tensor | None = None, slots: Slots | None = None) -> tuple[torch.Tensor, int]:
    """Swaps between the riskiest GPU's slots and any other slot, lowering the largest risk.

    series: [X, E, W] per-replica loads; phy2log: [X, R]. A swap of slot a (on the riskiest
    GPU g) with slot b (on GPU h) changes g's and h's means by -+(m_a - m_b) and their
    variances by the covariances of the items with each other and with the two GPUs' series,
    all computed as batched matrix products; noise [X, E] as in :func:`risk_place`.
    zones: swaps stay inside blocks of P / zones consecutive GPUs (nodes). target: [X] a row
    stops once its largest risk is at most this (None: when no swap helps). slots: a real
    cluster's padded grid (:func:`risk_place`): risks in time, only real slots swap.
    Returns (phy2log, rounds run).
    """
    X, E, W = series.shape
    R = phy2log.shape[1]
    P, S = num_gpus, R // num_gpus
    dev = series.device
    mean_e, cent_e = centred(series, k)                                      # [X, E], [X, E, W]
    slot_gpu = torch.arange(R, device=dev) // S
    slot_zone = slot_gpu // (P // zones)
    inv = None if slots is None else 1 / slots.speed                          # [P]
    p2l = phy2log.clone()
    rounds = 0
    # Per-slot state of the rows still searching (rows: their indices in p2l), gathered once;
    # a swap exchanges two slots' entries, a row that stops is dropped. The GPU sums are
    # recomputed from it every round, as the slots hold them (no drift from updates).
    rows = torch.arange(X, device=dev)
    sp = p2l.clone()                                                          # [n, R]
    m = mean_e.gather(1, sp)                                                  # [n, R] item means
    c = cent_e.gather(1, sp.unsqueeze(-1).expand(X, R, W))                    # [n, R, W] centred
    ivar = (c * (c * k)).sum(-1)                                              # [n, R] raw
    inoise = noise.gather(1, sp)                                              # [n, R]
    for _ in range(steps):
        n = rows.numel()
        if n == 0:
            break
        rounds += 1
        ar = torch.arange(n, device=dev)
        gm = m.view(n, P, S).sum(-1)                                          # [n, P]
        gc = c.view(n, P, S, W).sum(2)                                        # [n, P, W]
        gck = gc * k
        gvar = (gc * gck).sum(-1)                                             # [n, P] raw
        gnoise = inoise.view(n, P, S).sum(-1)                                 # [n, P]
        risk = _risk(gm, gvar - gnoise, z)
        if inv is not None:
            risk = risk * inv
        cur, g = risk.max(1)
        mine = g.unsqueeze(1) * S + torch.arange(S, device=dev)              # [n, S] slots of g
        ca = c.gather(1, mine.unsqueeze(-1).expand(n, S, W))                   # [n, S, W]
        ab2 = torch.bmm(ca * (2 * k), c.transpose(1, 2))                     # [n, S, R] 2 <c_a, c_b>
        gb = torch.bmm(gck.gather(1, g.view(n, 1, 1).expand(n, 1, W)), c.transpose(1, 2)).squeeze(1)  # [n, R]
        ga = gb.gather(1, mine)                                               # [n, S]   <G_g, c_a>
        hb = (c.view(n, P, S, W) * gck.unsqueeze(2)).sum(-1).view(n, R)                     # [n, R]   <G_h(b), c_b>
        ha2 = torch.bmm(2 * gck, ca.transpose(1, 2)).index_select(1, slot_gpu).transpose(1, 2)  # [n, S, R] 2 <G_h(b), c_a>
        ma, va = m.gather(1, mine).unsqueeze(2), ivar.gather(1, mine).unsqueeze(2)
        na, nb = inoise.gather(1, mine).unsqueeze(2), inoise.unsqueeze(1)
        mb, vb = m.unsqueeze(1), ivar.unsqueeze(1)
        g_var = gvar.gather(1, g.unsqueeze(1)).unsqueeze(2)
        g_mean = gm.gather(1, g.unsqueeze(1)).unsqueeze(2)
        g_noise = gnoise.gather(1, g.unsqueeze(1)).unsqueeze(2)
        h_var, h_mean = gvar.index_select(1, slot_gpu).unsqueeze(1), gm.index_select(1, slot_gpu).unsqueeze(1)
        h_noise = gnoise.index_select(1, slot_gpu).unsqueeze(1)
        # The [n, S, R] tables are the hot path: the terms that depend on a alone ([n, S, 1])
        # or on b alone ([n, 1, R]) are summed first, so each table costs a few full passes.
        new_g = _swap_risk((g_mean - ma) + mb,
                           (g_var - g_noise + va + na - 2 * ga.unsqueeze(2)) + (vb - nb + 2 * gb.unsqueeze(1)),
                           ab2, None, z)
        new_h = _swap_risk((h_mean - mb) + ma, (va - na) + (h_var - h_noise + vb + nb - 2 * hb.unsqueeze(1)),
                           ab2, ha2, z)
        if inv is not None:
            new_g = new_g * inv.gather(0, g).view(n, 1, 1)
            new_h = new_h * inv.index_select(0, slot_gpu).view(1, 1, R)
        value = torch.maximum(new_g, new_h)                                   # [n, S, R]
        ea = sp.gather(1, mine)                                               # [n, S]
        ok = (slot_gpu.view(1, 1, R) != g.view(n, 1, 1)) & (ea.unsqueeze(2) != sp.unsqueeze(1))
        if slots is not None:                 # the phantom slots keep every GPU's slot count
            ok &= slots.valid.view(1, 1, R) & slots.valid.gather(0, mine.view(-1)).view(n, S, 1)
        if zones > 1:
            ok &= slot_zone.view(1, 1, R) == (g // (P // zones)).view(n, 1, 1)
        if nodup:
            pres = torch.zeros(n, P, E, dtype=torch.bool, device=dev)
            pres.scatter_(2, sp.view(n, P, S), True)
            ok &= ~pres[ar, g].gather(1, sp).unsqueeze(1)                      # b's expert already on g
            ok &= ~pres.transpose(1, 2).gather(1, ea.unsqueeze(2).expand(n, S, P)).index_select(2, slot_gpu)  # a's on h
        value = value.masked_fill(~ok, math.inf).view(n, -1)
        best = value.argmin(1)
        better = value.gather(1, best.unsqueeze(1)).squeeze(1) < cur * (1 - 1e-12)
        if target is not None:
            better &= cur > target.index_select(0, rows)
        i = mine.gather(1, (best // R).unsqueeze(1)).squeeze(1)
        j = best % R
        if not bool(better.all()):                                            # drop the rows that stop
            keep = better.nonzero().squeeze(1)
            rows, i, j, ar = rows[keep], i[keep], j[keep], ar[:keep.numel()]
            sp, m, c, ivar, inoise = (t.index_select(0, keep) for t in (sp, m, c, ivar, inoise))
        for t in (sp, m, c, ivar, inoise):                                    # slot i <-> slot j
            t[ar, i], t[ar, j] = t[ar, j], t[ar, i]                           # (index reads are copies)
        p2l.index_copy_(0, rows, sp)
    return p2l, rounds


def repair_grid(w: torch.Tensor, p2l: torch.Tensor, slots: Slots, num_experts: int) -> torch.Tensor:
    """Swap away same-GPU duplicates on a real cluster's padded grid: the speed pipeline's
    repair in time (:func:`solvers.heuristics.packing.repair_swaps`: each duplicate slot
    with the slot on another GPU whose two GPUs' larger time is least, creating no new
    duplicate) on the real slots, the phantoms left in place. w: [X, Q*S] slot loads; p2l:
    [X, Q*S] (phantom E); returns p2l. Rows with no such swap keep their duplicate (valid)."""
    real = p2l.index_select(1, slots.real)                                       # [X, R] the cluster's order
    per = torch.zeros(real.shape[0], num_experts, dtype=torch.float64, device=p2l.device).scatter_(
        1, real, w.index_select(1, slots.real).to(torch.float64))                # [X, E] per-replica loads
    gpus = LiveGPUs(slots.speed.tolist(), slots.caps.tolist(), p2l.device)
    out = p2l.clone()
    out[:, slots.real] = repair_swaps(per, real, gpus, num_experts)[0]
    return out


def plan_rows(hist: torch.Tensor, k: torch.Tensor, num_slots: int, num_gpus: int, count_risk: float,
              risk: float, noise: float, steps: int, *, keep: torch.Tensor | None = None,
              bonus: torch.Tensor | None = None, target: torch.Tensor | None = None,
              slots: Slots | None = None) -> tuple[torch.Tensor, int, bool]:
    """Plan independent rows: hist [W, X, E] -> (phy2log [X, R], search rounds, nodup).

    keep, bonus: migration-aware placement (:func:`risk_place`); target: [X] the swap search
    stops a row once its largest risk is at most this. slots: a real cluster's live GPUs
    (``num_gpus`` is then slots.Q): placement and swaps in time on the padded grid, the plan
    returned in the cluster's slot order (:class:`Slots`).

    noise: the share of the Poisson variance (= the mean, for token counts) of every
    expert's per-step load taken as sampling noise, which no placement can balance away."""
    W, X, E = hist.shape
    R, P = num_slots, num_gpus
    nodup = E >= (R // P if slots is None else slots.S)   # otherwise some GPU must hold one expert twice
    mu, sd = moments(hist, k)
    excess = (sd * sd - noise * mu).clamp_min(0).sqrt()
    stat = mu + count_risk * excess                                           # [X, E]
    cnt = optimal_counts(stat, R, max_count=P if nodup else None)            # [X, E]
    ends = torch.cumsum(cnt, 1)
    item_e = torch.searchsorted(ends, torch.arange(R, device=hist.device).expand(X, R).contiguous(), right=True)
    order = torch.sort((stat / cnt).gather(1, item_e), dim=1, descending=True, stable=True).indices
    item_e = item_e.gather(1, order)                                          # [X, R] largest first
    series = hist.permute(1, 2, 0) / cnt.unsqueeze(-1).to(hist.dtype)         # [X, E, W] per replica
    pois = noise * mu / (cnt * cnt).to(mu.dtype)                              # [X, E] per replica
    if slots is not None:                   # the phantom expert E of the padded grid: no load
        series = torch.cat([series, series.new_zeros(X, 1, W)], 1)            # [X, E+1, W]
        pois = torch.cat([pois, pois.new_zeros(X, 1)], 1)                     # [X, E+1]
    p2l, stuck = risk_place(series, k, item_e, P, risk, nodup, pois, keep, bonus, slots)
    if nodup and bool(stuck.any()):
        rows = stuck.nonzero().squeeze(1)
        per = torch.cat([mu / cnt, mu.new_zeros(X, 1)], 1) if slots is not None else mu / cnt
        w_slots = per[rows].gather(1, p2l[rows])
        if slots is None:
            _, p2l[rows] = repair_duplicates(w_slots, p2l[rows], P, E)
        else:
            p2l[rows] = repair_grid(w_slots, p2l[rows], slots, E)
    p2l, rounds = risk_search(series, k, p2l, P, risk, nodup, pois, steps, target=target, slots=slots)
    if slots is not None:
        p2l = p2l.index_select(1, slots.real)                                 # [X, R] the cluster's order
    return p2l, rounds, nodup


def window_objective(hist: torch.Tensor, k: torch.Tensor, phy2log: torch.Tensor, num_gpus: int,
                     cluster=None) -> torch.Tensor:
    """[L] in-window per-step imbalance: sum over steps of the max GPU load / sum of the mean
    (weighted by k), the shared scorer's even split. hist: [W, L, E]; phy2log: [L, R] (in the
    cluster's slot order). On a real ``cluster`` (speeds, uneven slots, failed GPUs) in time, the
    shared scorer's ``time_imbalance`` with tokens: the slowest GPU's time (load over speed) over
    the best time W_t / (sum of the live GPUs' speeds)."""
    W = hist.shape[0]
    gpu = step_gpu_times(hist, phy2log, num_gpus, cluster)                      # [W, L, P] (time: real cluster)
    mx = (gpu.max(-1).values * k.view(W, 1)).sum(0)
    if cluster is None or cluster.homogeneous:
        mean = (gpu.mean(-1) * k.view(W, 1)).sum(0)
    else:
        mean = (hist.sum(-1) * k.view(W, 1)).sum(0) / cluster.total_speed
    return torch.where(mean > 0, mx / mean.clamp_min(1e-300), torch.ones_like(mx))


def plan_risk_aware(problem: Problem, hist: torch.Tensor, policy: str, *, count_risk: float, risk: float,
                    halflife: float | None, steps: int, noise: float = 1.0) -> tuple[torch.Tensor, dict]:
    """phy2log [L, R] of the risk-aware plan for ``hist [W, L, E]`` under ``policy`` (resolved).
    On a real cluster (speeds, uneven slots, failed GPUs; the global policy) in time."""
    W, L, E = hist.shape
    k = step_weights(W, halflife, hist.device)
    R, N = problem.num_replicas, problem.num_nodes
    if not problem.cluster.homogeneous or policy != "hierarchical" or N == 1:
        slots = None if problem.cluster.homogeneous else Slots.of(problem.cluster, hist.device)
        P = problem.num_gpus if slots is None else slots.Q
        p2l, rounds, nodup = plan_rows(hist, k, R, P, count_risk, risk, noise, steps, slots=slots)
        return p2l, {"search_rounds": rounds, "colocation": "forbidden" if nodup else "allowed"}
    G = problem.num_groups
    grp = hist.view(W, L, G, E // G).sum(-1)                                   # [W, L, G]
    gmu, gsd = moments(grp, k)
    node_of_group = group_node_candidates(gmu + count_risk * gsd, N, top=GROUP_CANDIDATES)   # [L, K, G]
    return plan_on_nodes(problem, hist, k, node_of_group, count_risk=count_risk, risk=risk, noise=noise,
                         steps=steps)


def plan_on_nodes(problem: Problem, hist: torch.Tensor, k: torch.Tensor, node_of_group: torch.Tensor, *,
                  count_risk: float, risk: float, noise: float, steps: int, keep: torch.Tensor | None = None,
                  bonus: torch.Tensor | None = None, target: torch.Tensor | None = None) -> tuple[torch.Tensor, dict]:
    """Hierarchical plans for the group-to-node candidates ``node_of_group [L, K, G]``: every
    (layer, candidate, node) planned as a row, per layer the candidate with the best per-step
    imbalance on the window kept. keep [L, P, E], bonus [L], target [L]: per layer, as
    :func:`plan_rows` takes them per row. Returns (phy2log [L, R], info)."""
    W, L, E = hist.shape
    P, R, N = problem.num_gpus, problem.num_replicas, problem.num_nodes
    K = node_of_group.shape[1]
    ids = node_experts(node_of_group, E, N).reshape(L * K, N, E // N)          # [L*K, N, E/N]
    hk = hist.repeat_interleave(K, dim=1)                                     # [W, L*K, E]
    sub = hk.gather(2, ids.reshape(1, L * K, E).expand(W, L * K, E)).view(W, L * K * N, E // N)
    rows = {}
    if keep is not None:     # per (layer, candidate, node): its GPUs x its experts
        Pn = P // N
        kk = keep.repeat_interleave(K, dim=0).view(L * K, N, Pn, E)                    # node-major GPUs
        local = ids.unsqueeze(2).expand(L * K, N, Pn, E // N)
        rows["keep"] = kk.gather(3, local).reshape(L * K * N, Pn, E // N)
        rows["bonus"] = bonus.repeat_interleave(K * N)
    if target is not None:
        rows["target"] = target.repeat_interleave(K * N)
    p2l, rounds, nodup = plan_rows(sub, k, R // N, P // N, count_risk, risk, noise, steps, **rows)  # [L*K*N, R/N]
    cand = ids.reshape(L * K * N, E // N).gather(1, p2l).view(L * K, R)       # node-major = GPU order
    # The group-to-node candidate whose plan has the best per-step imbalance on the window.
    obj = window_objective(hk, k, cand, P).view(L, K)
    pick = obj.argmin(1)
    glob = cand.view(L, K, R)[torch.arange(L, device=hist.device), pick]
    return glob, {"search_rounds": rounds, "colocation": "forbidden" if nodup else "allowed",
                  "group_candidates": K}
