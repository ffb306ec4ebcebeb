"""Heuristics for real clusters: GPUs of different speeds, uneven slot counts, failed GPUs.

The objective is time: GPU g of relative speed ``s_g`` holding ``c_g`` slots serves its
replicas' tokens in ``load_g / s_g``; a layer takes its slowest GPU's time. Batched over
rows (layers) like the rest of the package, loops only over construction steps:

1. replica counts: the greedy of the homogeneous pipeline (each extra slot to the expert
   with the highest load per replica; optimal for the largest replica), then
2. :func:`lpt_time_pack`: heaviest replica first onto the GPU with a free slot where it
   would *finish* first, ``(load_g + v) / s_g`` (LPT for uniform related machines, with
   every GPU's slot count as its cardinality), and
3. :class:`TimeSwapper`: swap local search in time (1-1 swaps of the slowest GPU against
   every slot, all heavy/light GPU pairs at once, 2-2 swaps against the lightest GPUs);
   swaps keep every GPU's slot count, so every plan is valid on the cluster;
4. :func:`count_search` (joint, best): replica counts improved with the packing in the
   loop (a replica of a cold expert becomes another replica of a hot one).

A *slot layout* is ``w: [X, R]`` (load of each slot's replica) and ``e: [X, R]`` (its
expert), slots in the cluster's order (GPU by GPU, failed GPUs hold none): ``e`` is a
phy2log row.
"""
from __future__ import annotations

import itertools

import torch

from ..clock import clock
from .common import expand_items, replicate_counts

# Relative improvement a move must bring (guards against float noise loops).
REL_TOL = 1e-12
# A row within this of the average bound W / (total speed) leaves the local search.
STOP_RTOL = 1e-6


class LiveGPUs:
    """The live GPUs of a cluster as tensors: speed [Q] float64, caps [Q] int64 (slots),
    gpu_of [R] (live index of every slot), grid [Q, Smax] (slot ids of every GPU, padded
    with 0) and valid [Q, Smax]."""

    def __init__(self, speed: list[float], caps: list[int], device):
        self.Q = len(caps)
        self.speed = torch.tensor(speed, dtype=torch.float64, device=device)
        self.caps = torch.tensor(caps, dtype=torch.int64, device=device)
        self.R = int(sum(caps))
        self.S = max(caps)
        self.gpu_of = torch.repeat_interleave(torch.arange(self.Q, device=device), self.caps)
        starts = torch.cumsum(self.caps, 0) - self.caps
        j = torch.arange(self.S, device=device)
        self.valid = j.unsqueeze(0) < self.caps.unsqueeze(1)                              # [Q, S]
        self.grid = torch.where(self.valid, starts.unsqueeze(1) + j, torch.zeros_like(j))  # [Q, S]
        self.slot_speed = self.speed[self.gpu_of]                                          # [R]

    @classmethod
    def of(cls, cluster, device) -> "LiveGPUs":
        live = cluster.live_gpus
        return cls([cluster.gpu_speed[g] for g in live], [cluster.gpu_slots[g] for g in live], device)

    def loads(self, w: torch.Tensor) -> torch.Tensor:
        """[X, Q] load of every live GPU from a slot layout w: [X, R]."""
        out = torch.zeros(w.shape[0], self.Q, dtype=w.dtype, device=w.device)
        return out.index_add_(1, self.gpu_of, w)

    def times(self, w: torch.Tensor) -> torch.Tensor:
        return self.loads(w) / self.speed.to(w.dtype)


def lpt_time_pack(item_w: torch.Tensor, gpus: LiveGPUs) -> torch.Tensor:
    """Heaviest item first onto the GPU with room where it finishes first (lowest index on
    ties). item_w: [X, n] with n = R. Returns the live GPU of every item: [X, n].

    Every slot must be filled, so a GPU's finish counts its free slots too, each at the
    mean of the items still to come: without it the first items crowd onto the fast GPUs
    and the slow ones end up filled with whatever is left."""
    X, n = item_w.shape
    order = torch.sort(item_w, dim=1, descending=True, stable=True).indices
    sw = item_w.gather(1, order)
    rest = sw.flip(1).cumsum(1).flip(1) - sw                                 # [X, n] sum of the items after k
    after = (n - 1 - torch.arange(n, device=item_w.device)).clamp_min(1).to(item_w.dtype)
    tail = rest / after                                                      # mean of the items after k
    dev, dt = item_w.device, item_w.dtype
    # Per step only a handful of small kernels run, so launch overhead dominates: every
    # operand is preallocated and updated in place (as deepseek.balanced_packing does).
    vs = sw.t().contiguous().unsqueeze(-1).unbind(0)                         # n x [X, 1]
    tails = tail.t().contiguous().unsqueeze(-1).unbind(0)
    load = torch.zeros(X, gpus.Q, dtype=dt, device=dev)
    free = (gpus.caps - 1).to(dt).expand(X, -1).contiguous()                 # slots left after one more
    inv = (1 / gpus.speed).to(dt)
    key = torch.empty_like(load)
    full = torch.zeros(X, gpus.Q, dtype=torch.bool, device=dev)
    minus = torch.full((X, 1), -1.0, dtype=dt, device=dev)
    chosen = []
    for k in range(n):
        torch.add(load, vs[k], out=key)
        key.addcmul_(free, tails[k]).mul_(inv)
        torch.lt(free, 0, out=full)
        key.masked_fill_(full, float("inf"))
        g = key.argmin(1, keepdim=True)
        chosen.append(g)
        load.scatter_add_(1, g, vs[k])
        free.scatter_add_(1, g, minus)
    return torch.empty_like(order).scatter_(1, order, torch.cat(chosen, 1))


def layout(item_w: torch.Tensor, item_e: torch.Tensor, gpu: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Slot layout (w, e) [X, R] of items placed on live GPUs ``gpu`` [X, n] (GPU order)."""
    order = torch.sort(gpu, dim=1, stable=True).indices
    return item_w.gather(1, order), item_e.gather(1, order)


def _swap(t: torch.Tensor, qa: torch.Tensor, qb: torch.Tensor, ok: torch.Tensor) -> torch.Tensor:
    """Exchange t[x, qa[x, k]] and t[x, qb[x, k]] where ok[x] (or ok[x, k]). qa, qb: [X, K]."""
    va, vb = t.gather(1, qa), t.gather(1, qb)
    m = ok if ok.dim() == 2 else ok.unsqueeze(1)
    t = t.scatter(1, qa, torch.where(m, vb, va))
    return t.scatter(1, qb, torch.where(m, va, vb))


class TimeSwapper:
    """Cardinality-preserving swap moves that lower GPU times, for slot layouts [X, R].

    No move is masked: a swap is taken only when its cost (the larger of the two GPUs' new
    times) is below the slower GPU's time, which a swap moving load the wrong way (d <= 0)
    or inside one GPU never achieves; and a GPU's padding slots (it holds fewer than
    Smax) weigh -inf on the giving side and +inf on the taking side, so their cost is +inf.
    """

    def __init__(self, gpus: LiveGPUs):
        self.g = gpus
        S = gpus.S
        pa, pb = zip(*itertools.combinations(range(S), 2)) if S > 1 else ((), ())
        dev = gpus.speed.device
        self.pa = torch.tensor(pa, dtype=torch.int64, device=dev)
        self.pb = torch.tensor(pb, dtype=torch.int64, device=dev)

    def _grid(self, w: torch.Tensor):
        """(give [X, Q, S], take [X, Q, S]): slot weights per GPU, padding -inf / +inf."""
        g = self.g
        cells = w[:, g.grid]                                                       # [X, Q, S]
        return (cells.masked_fill(~g.valid, -float("inf")), cells.masked_fill(~g.valid, float("inf")))

    def step11(self, w: torch.Tensor, e: torch.Tensor):
        """The slowest GPU's best 1-1 swap against any slot of another GPU."""
        g = self.g
        X, R = w.shape
        loads = g.loads(w)
        inv = 1 / g.speed.to(w.dtype)
        t = loads * inv
        th, h = t.max(1)
        give, _ = self._grid(w)
        wa = give.gather(1, h.view(X, 1, 1).expand(X, 1, g.S)).squeeze(1)       # [X, S]
        d = wa.unsqueeze(2) - w.unsqueeze(1)                                   # [X, S, R] load leaving h
        new_h = (loads.gather(1, h.unsqueeze(1)).unsqueeze(2) - d).mul_(inv[h].view(X, 1, 1))
        new_g = (loads[:, g.gpu_of].unsqueeze(1) + d).mul_(inv[g.gpu_of])
        best_cost, best = torch.maximum(new_h, new_g).view(X, -1).min(1)
        ok = best_cost < th * (1 - REL_TOL)
        qa = g.grid[h].gather(1, (best // R).unsqueeze(1))
        qb = (best % R).unsqueeze(1)
        return _swap(w, qa, qb, ok), _swap(e, qa, qb, ok), ok

    def step_pairs(self, w: torch.Tensor, e: torch.Tensor, shift: int = 0):
        """Pair the i-th slowest GPU with the (i + shift)-th fastest-finishing one (mod the
        pairs; disjoint pairs) and apply in every pair its best 1-1 swap if it lowers the
        pair's max time. Successive steps shift the pairing, so a pair that has no useful
        swap is not offered again and again."""
        g = self.g
        X = w.shape[0]
        k = g.Q // 2
        if k == 0:
            return w, e, torch.zeros(X, dtype=torch.bool, device=w.device)
        loads = g.loads(w)
        inv = 1 / g.speed.to(w.dtype)
        t = loads * inv
        order = t.argsort(dim=1, descending=True, stable=True)
        hi, lo = order[:, :k], order[:, g.Q - k:].flip(1)                    # [X, k]
        if shift % k:
            lo = lo.roll(-(shift % k), dims=1)
        give, take = self._grid(w)
        S = g.S
        wh = give.gather(1, hi.unsqueeze(2).expand(X, k, S))                  # [X, k, S]
        wl = take.gather(1, lo.unsqueeze(2).expand(X, k, S))
        d = wh.unsqueeze(3) - wl.unsqueeze(2)                                 # [X, k, S, S]
        lh, ll = loads.gather(1, hi)[..., None, None], loads.gather(1, lo)[..., None, None]
        cost = torch.maximum((lh - d).mul_(inv[hi][..., None, None]), (ll + d).mul_(inv[lo][..., None, None]))
        best_cost, best = cost.view(X, k, S * S).min(2)                      # [X, k]
        ok = best_cost < t.gather(1, hi) * (1 - REL_TOL)
        qa = g.grid[hi].gather(2, (best // S).unsqueeze(2)).squeeze(2)
        qb = g.grid[lo].gather(2, (best % S).unsqueeze(2)).squeeze(2)
        return _swap(w, qa, qb, ok), _swap(e, qa, qb, ok), ok.any(1)

    def step22(self, w: torch.Tensor, e: torch.Tensor, partners: int = 4):
        """The slowest GPU's best 2-2 swap against the ``partners`` GPUs finishing first."""
        g = self.g
        X = w.shape[0]
        npair = self.pa.numel()
        if npair == 0 or g.Q < 2:
            return w, e, torch.zeros(X, dtype=torch.bool, device=w.device)
        loads = g.loads(w)
        inv = 1 / g.speed.to(w.dtype)
        t = loads * inv
        th, h = t.max(1)
        k = min(partners, g.Q - 1)
        light = t.topk(k, dim=1, largest=False).indices                       # [X, k]
        give, take = self._grid(w)
        S = g.S
        wh = give.gather(1, h.view(X, 1, 1).expand(X, 1, S)).squeeze(1)       # [X, S]
        wg = take.gather(1, light.unsqueeze(2).expand(X, k, S))               # [X, k, S]
        ph = wh[:, self.pa] + wh[:, self.pb]                                  # [X, np]
        pg = (wg[:, :, self.pa] + wg[:, :, self.pb]).reshape(X, -1)           # [X, k*np]
        gc = light.repeat_interleave(npair, dim=1)                            # [X, k*np]
        d = ph.unsqueeze(2) - pg.unsqueeze(1)                                 # [X, np, k*np]
        new_h = (loads.gather(1, h.unsqueeze(1)).unsqueeze(2) - d).mul_(inv[h].view(X, 1, 1))
        new_g = (loads.gather(1, gc).unsqueeze(1) + d).mul_(inv[gc].unsqueeze(1))
        best_cost, best = torch.maximum(new_h, new_g).view(X, -1).min(1)
        ok = best_cost < th * (1 - REL_TOL)
        i = (best // (k * npair)).unsqueeze(1)
        j = best % (k * npair)
        sh = g.grid[h]                                                        # [X, S]
        sg = g.grid[light]                                                    # [X, k, S]
        gi, pj = j // npair, j % npair
        rows = torch.arange(X, device=w.device)
        qa = torch.stack([sh.gather(1, self.pa[i]).squeeze(1), sh.gather(1, self.pb[i]).squeeze(1)], 1)
        qb = torch.stack([sg[rows, gi, self.pa[pj]], sg[rows, gi, self.pb[pj]]], 1)
        return _swap(w, qa, qb, ok), _swap(e, qa, qb, ok), ok


def local_search(w: torch.Tensor, e: torch.Tensor, gpus: LiveGPUs, *, max_steps: int = 64, block: int = 8,
                 two_swaps: bool = True, deadline: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Swap local search in time (never raises any row's max time). w, e: [X, R]. Blocks of
    up to ``block`` paired steps, each closed by the slowest GPU's best 1-1 and 2-2 swaps;
    stops after ``max_steps`` paired steps or at ``deadline``. A row leaves the search when
    a block improved nothing or its time meets the average bound (W / total speed:
    optimal), so late blocks work on the few hard rows only."""
    X = w.shape[0]
    if gpus.Q < 2 or max_steps <= 0 or X == 0:
        return w, e
    sw = TimeSwapper(gpus)
    ideal = w.to(torch.float64).sum(1) / float(gpus.speed.sum())                # [X]
    active = torch.arange(X, device=w.device)
    steps = 0
    before = gpus.times(w.to(torch.float64)).max(1).values
    while steps < max_steps and active.numel() and (deadline is None or clock() < deadline):
        wa, ea = w[active], e[active]
        any_ok = torch.zeros(active.numel(), dtype=torch.bool, device=w.device)
        for i in range(min(block, max_steps - steps)):
            wa, ea, ok = sw.step_pairs(wa, ea, shift=i)
            any_ok |= ok
            steps += 1
        wa, ea, ok = sw.step11(wa, ea)
        any_ok |= ok
        if two_swaps:
            wa, ea, ok = sw.step22(wa, ea)
            any_ok |= ok
        w, e = w.index_copy(0, active, wa), e.index_copy(0, active, ea)
        t = gpus.times(wa.to(torch.float64)).max(1).values
        # rows go on while their max time falls and stays above the average bound (within
        # STOP_RTOL of it a row is as good as optimal)
        keep = any_ok & (t < before[active] * (1 - REL_TOL)) & (t > ideal[active] * (1 + STOP_RTOL))
        before = before.index_copy(0, active, t)
        active = active[keep]
    return w, e


def pack_time(weight: torch.Tensor, counts: torch.Tensor, gpus: LiveGPUs, *, max_steps: int = 64,
              two_swaps: bool = True, deadline: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Best packing found for fixed counts: LPT in time then swaps. weight, counts: [X, E].
    Returns e_slots: [X, R] (a phy2log row each) and max time [X] float64."""
    item_e, item_w = expand_items(weight, counts)
    w, e = layout(item_w, item_e, lpt_time_pack(item_w, gpus))
    # the search runs in float32 (half the memory traffic); the objective is float64
    w, e = local_search(w.float(), e, gpus, max_steps=max_steps, two_swaps=two_swaps, deadline=deadline)
    return e, max_time(weight, counts, e, gpus)


def max_time(weight: torch.Tensor, counts: torch.Tensor, e: torch.Tensor, gpus: LiveGPUs) -> torch.Tensor:
    """[X] float64 max GPU time of slot layouts e: [X, R] (recomputed from the loads)."""
    per = weight.to(torch.float64) / counts.to(torch.float64)
    return gpus.times(per.gather(1, e)).max(1).values


def count_search(weight: torch.Tensor, counts: torch.Tensor, e: torch.Tensor, gpus: LiveGPUs, *,
                 rounds: int = 16, width: int = 3, steps: int = 16, deadline: float | None = None,
                 round_estimate: float = 0.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Replica counts searched with the packing in the loop.

    Each round, in every row, ``width`` x ``width`` candidate count vectors: one replica
    moves from a donor (the experts with >= 2 replicas whose replicas would grow least) to
    a taker (the experts with the highest load per replica); each candidate is packed (LPT
    in time and ``steps`` swap steps) and the best is kept where it lowers the row's max
    time. weight, counts, e: [X, E], [X, E], [X, R]. Returns (counts, e, max time [X]).
    A round is not cut short: it starts only when the time left covers the last round (the
    first one: ``round_estimate`` seconds)."""
    X, E = weight.shape
    best = max_time(weight, counts, e, gpus)
    w64 = weight.to(torch.float64)
    k = min(width, E)
    last = round_estimate
    for _ in range(rounds):
        began = clock()
        if deadline is not None and began + last >= deadline:   # a round is not cut short
            break
        c64 = counts.to(torch.float64)
        takers = (w64 / c64).topk(k, dim=1).indices                                 # [X, k]
        grow = (w64 / (c64 - 1).clamp_min(1)).masked_fill(counts < 2, float("inf"))
        dkey, donors = grow.topk(k, dim=1, largest=False)                           # [X, k]
        t = takers.unsqueeze(2).expand(X, k, k).reshape(X, -1)                     # [X, k*k]
        d = donors.unsqueeze(1).expand(X, k, k).reshape(X, -1)
        ok = (t != d) & torch.isfinite(dkey).unsqueeze(1).expand(X, k, k).reshape(X, -1)
        cand = counts.unsqueeze(1).repeat(1, k * k, 1)                               # [X, k*k, E]
        cand.scatter_add_(2, t.unsqueeze(2), ok.to(torch.int64).unsqueeze(2))
        cand.scatter_add_(2, d.unsqueeze(2), -ok.to(torch.int64).unsqueeze(2))
        wc = w64.unsqueeze(1).expand(X, k * k, E).reshape(-1, E)
        e2, obj2 = pack_time(wc, cand.view(-1, E), gpus, max_steps=steps, deadline=deadline)
        obj2 = obj2.view(X, k * k).masked_fill(~ok, float("inf"))
        o, j = obj2.min(1)
        better = o < best * (1 - REL_TOL)
        if not bool(better.any()):
            break
        rows = better.nonzero().squeeze(1)
        pick = rows * (k * k) + j[rows]
        counts = counts.index_copy(0, rows, cand.view(-1, E)[pick])
        e = e.index_copy(0, rows, e2[pick])
        best = torch.where(better, o, best)
        last = clock() - began
    return counts, e, best


def speed_plan(weight: torch.Tensor, cluster, *, steps: int = 64, joint: bool = False, rounds: int = 16,
               deadline: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """phy2log [L, R] and max time [L] for loads [L, E] on a heterogeneous ``cluster``."""
    gpus = LiveGPUs.of(cluster, weight.device)
    w = weight.to(torch.float64)
    counts = replicate_counts(w, gpus.R)
    began = clock()
    e, obj = pack_time(w, counts, gpus, max_steps=steps, deadline=deadline)
    if joint:
        # a round packs width**2 candidates per row with a shorter search: about a third
        # of that many first packings (a guess that keeps `best` near its time limit)
        counts, e, obj = count_search(w, counts, e, gpus, rounds=rounds, deadline=deadline,
                                      round_estimate=(clock() - began) * 3)
        # the winners were packed with a short search: finish it
        _, e = local_search(((w / counts).gather(1, e)).float(), e, gpus, max_steps=steps, deadline=deadline)
        obj = max_time(w, counts, e, gpus)
    return e, obj
