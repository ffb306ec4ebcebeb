"""Planning for failure: every expert keeps a live replica whichever one GPU (or node) fails.

Solver ``survivable`` (any cluster: speeds, uneven slots, failed GPUs): every expert gets at
least two replicas, and its first two sit in different failure domains (GPUs, or nodes with
``domain="node"``), so losing any one domain leaves each expert served. That needs R >= 2E
slots and, for nodes, two nodes with slots. The cost in balance is what the restriction
takes: the scorer grades the plan in time as any other, and ``info["exposed_experts"]`` is 0
by construction (checked here on the final plan).

1. counts: two each, then each extra slot to the expert with the highest load per replica;
2. LPT in time into each GPU's slot count (:func:`.packing.lpt_time_pack`'s rule), every
   expert's first two replicas first (the second never in the first's domain), then the
   extra replicas;
3. 1-1 swaps in time between the slowest GPUs and the ones finishing first (rotating pairs),
   one per layer and step, taking only swaps that keep every expert on two domains.
"""
from __future__ import annotations

import torch

from ..errors import OptionError
from ..options import Option, SolverOptions
from ..plan import Plan
from ..problem import Problem
from ..registry import SolverOutput, register
from .common import LiveGPUs, expand_items
from .packing import layout, swap_where
from ..work import WorkModel

DOMAINS = ("gpu", "node")


def two_each_counts(w: torch.Tensor, num_slots: int) -> torch.Tensor:
    """[X, E] counts >= 2 summing to ``num_slots``: each extra slot to the highest load per replica."""
    X, E = w.shape
    counts = torch.full((X, E), 2, dtype=torch.int64, device=w.device)
    ones = torch.ones(X, 1, dtype=torch.int64, device=w.device)
    for _ in range(num_slots - 2 * E):
        counts.scatter_add_(1, (w / counts).argmax(1, keepdim=True), ones)
    return counts


def spread_pack(item_w: torch.Tensor, item_e: torch.Tensor, gpus: LiveGPUs, domain_of: torch.Tensor,
                num_experts: int, fullest_first: bool = False) -> torch.Tensor:
    """Heaviest first onto the GPU with room that finishes first, never in the domain of its
    expert's only replica placed so far. item_w, item_e: [X, n]; domain_of: [Q] domain of each
    live GPU. Returns the live GPU of every item [X, n] (-1 where no GPU was allowed).
    ``fullest_first``: the first two replicas go to the domains with the most free slots
    (then where they finish first), which never strands a pair in one domain: the fallback
    for layers the balance-first rule could not complete."""
    X, n = item_w.shape
    dev, dt = item_w.device, item_w.dtype
    # every expert's first two replicas (the spread) before the extra ones, heaviest first in
    # each phase: a domain cannot fill up with extras while a pair still needs it
    pos = torch.arange(n, device=dev).expand(X, n)
    start = torch.zeros(X, num_experts, dtype=torch.int64, device=dev).scatter_reduce(
        1, item_e, pos, reduce="amin", include_self=False)
    extra = (pos - start.gather(1, item_e)) >= 2                                  # [X, n]
    key0 = item_w - extra.to(dt) * (2 * float(item_w.max()) + 1)
    order = torch.sort(key0, dim=1, descending=True, stable=True).indices
    sw, se = item_w.gather(1, order), item_e.gather(1, order)
    rest = sw.flip(1).cumsum(1).flip(1) - sw
    tail = rest / (n - 1 - torch.arange(n, device=dev)).clamp_min(1).to(dt)
    load = torch.zeros(X, gpus.Q, dtype=dt, device=dev)
    free = (gpus.caps - 1).to(dt).expand(X, -1).contiguous()
    inv = (1 / gpus.speed).to(dt)
    first = torch.full((X, num_experts), -1, dtype=torch.int64, device=dev)       # domain of the 1st replica
    placed = torch.zeros(X, num_experts, dtype=torch.int64, device=dev)
    rows = torch.arange(X, device=dev)
    chosen = []
    for k in range(n):
        e = se[:, k]
        key = (load + sw[:, k:k + 1] + free * tail[:, k:k + 1]) * inv
        if fullest_first:
            room = torch.zeros(X, int(domain_of.max()) + 1, dtype=dt, device=dev).index_add_(
                1, domain_of, (free + 1).clamp_min(0))                                  # free slots per domain
            mandatory = ~extra.gather(1, order)[:, k:k + 1]
            key = torch.where(mandatory, key / (key.abs().max(1, keepdim=True).values + 1) - room[:, domain_of], key)
        key = key.masked_fill(free < 0, float("inf"))
        alone = (placed[rows, e] == 1).unsqueeze(1) & (domain_of.unsqueeze(0) == first[rows, e].unsqueeze(1))
        key = key.masked_fill(alone, float("inf"))
        g = key.argmin(1)
        ok = torch.isfinite(key[rows, g])
        g = torch.where(ok, g, torch.full_like(g, -1))
        chosen.append(g.unsqueeze(1))
        gi = g.clamp_min(0)
        load[rows[ok], gi[ok]] += sw[ok, k]
        free[rows[ok], gi[ok]] -= 1
        first[rows, e] = torch.where(placed[rows, e] == 0, domain_of[gi], first[rows, e])
        placed[rows, e] += 1
    return torch.empty_like(order).scatter_(1, order, torch.cat(chosen, 1))


def spread_pair_step(w: torch.Tensor, e: torch.Tensor, gpus: LiveGPUs, dom: torch.Tensor, num_domains: int,
                     num_experts: int, shift: int = 0):
    """One paired step of 1-1 swaps in time (the i-th slowest GPU with the (i + shift)-th
    fastest-finishing one) taking only swaps after which both experts still span two
    domains. w, e: [X, R] slot loads and experts; dom: [Q] domain of each live GPU.
    Returns (w, e, improved [X])."""
    X, R = w.shape
    Q, S, E = gpus.Q, gpus.S, num_experts
    k = Q // 2
    if k == 0:
        return w, e, torch.zeros(X, dtype=torch.bool, device=w.device)
    dom_slot = dom[gpus.gpu_of]
    cnt = torch.zeros(X, num_domains * E, dtype=torch.int64, device=e.device)
    cnt.scatter_add_(1, dom_slot.unsqueeze(0) * E + e, torch.ones_like(e))
    span = (cnt.view(X, num_domains, E) > 0).sum(1)                                # [X, E]
    loads = gpus.loads(w)
    inv = 1 / gpus.speed.to(w.dtype)
    t = loads * inv
    order = t.argsort(dim=1, descending=True, stable=True)
    hi, lo = order[:, :k], order[:, Q - k:].flip(1)
    if shift % k:
        lo = lo.roll(-(shift % k), dims=1)
    sh, sl = gpus.grid[hi], gpus.grid[lo]                                        # [X, k, S]
    vh, vl = gpus.valid[hi], gpus.valid[lo]
    wh = w.gather(1, sh.view(X, -1)).view(X, k, S).masked_fill(~vh, -float("inf"))
    wlo = w.gather(1, sl.view(X, -1)).view(X, k, S).masked_fill(~vl, float("inf"))
    eh, el = e.gather(1, sh.view(X, -1)).view(X, k, S), e.gather(1, sl.view(X, -1)).view(X, k, S)
    dh, dl = dom[hi].unsqueeze(2), dom[lo].unsqueeze(2)                            # [X, k, 1]

    def keeps(expert, d_from, d_to):   # the expert still spans two domains after one replica moves
        c_from = cnt.gather(1, (d_from * E + expert).view(X, -1)).view_as(expert)
        c_to = cnt.gather(1, (d_to * E + expert).view(X, -1)).view_as(expert)
        after = span.gather(1, expert.view(X, -1)).view_as(expert) - (c_from == 1).long() + (c_to == 0).long()
        return (after >= 2) | (d_from == d_to)

    ok_h, ok_l = keeps(eh, dh, dl), keeps(el, dl, dh)                              # [X, k, S]
    d = wh.unsqueeze(3) - wlo.unsqueeze(2)                                        # [X, k, S, S]
    lh, ll = loads.gather(1, hi)[..., None, None], loads.gather(1, lo)[..., None, None]
    cost = torch.maximum((lh - d) * inv[hi][..., None, None], (ll + d) * inv[lo][..., None, None])
    cost = cost.masked_fill(~(ok_h.unsqueeze(3) & ok_l.unsqueeze(2)), float("inf")).view(X, k, S * S)
    best_cost, best = cost.min(2)
    ok = best_cost < t.gather(1, hi) * (1 - 1e-12)
    # one swap per row: pairs share no GPU, but two swaps could break one expert's spread
    # together, so only the slowest pair that improves moves
    first = ok.long().argmax(1)
    rows = torch.arange(X, device=w.device)
    take = ok[rows, first]
    b = best[rows, first]
    qa = sh[rows, first].gather(1, (b // S).unsqueeze(1))
    qb = sl[rows, first].gather(1, (b % S).unsqueeze(1))
    return swap_where(w, qa, qb, take), swap_where(e, qa, qb, take), take


def exposed(e: torch.Tensor, domain_of_slot: torch.Tensor, num_experts: int, num_domains: int) -> torch.Tensor:
    """[X] experts whose every replica sits in one domain (lost if that domain fails)."""
    X = e.shape[0]
    pres = torch.zeros(X, num_domains * num_experts, dtype=torch.bool, device=e.device)
    pres.scatter_(1, domain_of_slot.unsqueeze(0) * num_experts + e, True)
    return (pres.view(X, num_domains, num_experts).sum(1) < 2).sum(1)


# Work model (solvers.work): seconds on 2 cores, coefficients measured by
# `python -m benchmarks.work_model --fit`.
SURVIVABLE_WORK = WorkModel.of({"1": 0.0226, "R": 0.000185, "L*R": 0, "L*E*R": 0, "L*S^2": 0, "L*R*S": 1.36e-07, "L*R*P": 6.11e-06, "L*R*C*steps": 9.66e-09})


@register("survivable", kind="heuristic", heterogeneous=True, in_suites=False, work=SURVIVABLE_WORK,
          options=(Option("domain", str, "gpu", "failure domain every expert must span: any one GPU (or node) "
                          "may fail with every expert still served", choices=DOMAINS),
                   Option("steps", int, 1000, "swap steps of the time search (one swap per layer each)",
                          minimum=0, maximum=100_000, advanced=True)),
          description="planning for failure: every expert on two GPUs (or nodes), balanced in time")
def solve_survivable(problem: Problem, o: SolverOptions) -> SolverOutput:
    c = problem.cluster
    E, R = problem.num_experts, problem.num_replicas
    if R < 2 * E:
        raise OptionError("domain", f"every expert on two {o.domain}s needs at least 2 x {E} slots, the cluster "
                          f"has {R}")
    live = list(c.live_gpus)
    dev = problem.device
    if o.domain == "node":
        dom = torch.tensor([g // c.gpus_per_node for g in live], dtype=torch.int64, device=dev)
    else:
        dom = torch.arange(len(live), dtype=torch.int64, device=dev)
    if int(torch.unique(dom).numel()) < 2:
        raise OptionError("domain", f"the cluster has fewer than two live {o.domain}s")
    gpus = LiveGPUs.of(c, dev)
    w = problem.weights.to(torch.float64)
    counts = two_each_counts(w, R)
    item_e, item_w = expand_items(w, counts)
    gpu = spread_pack(item_w, item_e, gpus, dom, E)
    stuck = (gpu < 0).any(1)
    if bool(stuck.any()):
        rows = stuck.nonzero().squeeze(1)
        gpu[rows] = spread_pack(item_w[rows], item_e[rows], gpus, dom, E, fullest_first=True)
    if bool((gpu < 0).any()):
        raise OptionError("domain", "no placement found that spreads every expert over two domains "
                          "(too few slots outside the largest domain)")
    w0, e0 = layout(item_w, item_e, gpu)
    dom_slot = dom[gpus.gpu_of]
    nd = int(dom.max()) + 1
    # swap search in time that keeps the spread: paired 1-1 swaps (rotating pairs)
    per = w / counts
    wl = per.gather(1, e0)
    e = e0
    idle = 0
    for step in range(max(0, o.steps)):
        wl, e, ok = spread_pair_step(wl, e, gpus, dom, nd, E, shift=step)
        idle = 0 if bool(ok.any()) else idle + 1
        if idle > gpus.Q // 2:          # every pairing offered, none improved
            break
    info = {"domain": o.domain, "exposed_experts": int(exposed(e, dom_slot, E, nd).sum())}
    return SolverOutput(Plan.from_phy2log(e, E), "global", info=info)
