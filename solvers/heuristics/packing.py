"""Packing replicas onto the GPUs of a :class:`~.common.LiveGPUs` view for fixed replica counts.

The objective is time: a GPU of speed s holding load x takes x / s, a row its slowest
GPU's time; on identical GPUs (speed 1, S slots each) that is the load balancing of
DeepSeek's packing, in exactly its arithmetic. Constructions (each batched over rows,
loops only over construction *steps*):
- :func:`kk_pack`: balanced largest differencing (Karmarkar-Karp for exactly S items per
  pack: S partial partitions of one item per pack, repeatedly merging the two with the
  largest spread, heaviest subset with lightest); identical GPUs;
- :func:`lpt_pack`: largest first into the lightest open pack (DeepSeek's rule), with an
  optional no-duplicates mask; identical GPUs;
- :func:`lpt_time_pack`: largest first onto the GPU where it finishes first (LPT for
  uniform related machines, every GPU's slot count its cardinality): the "kk" and "lpt"
  start of any other view;
- no-duplicate layouts that always exist: :func:`round_robin_pack` (c_e <= packs, identical
  slot counts) and :func:`ryser_layout` (realisable counts, :func:`realisable_counts`).

Improvement: :func:`local_search` (1-1 and 2-2 swaps between the slowest GPU and every
other GPU, and between paired slow and fast GPUs, cardinality preserving, optionally
duplicate-free) and :func:`repair_duplicates`. :func:`pack_counts` runs several starts and
keeps the best.
"""
from __future__ import annotations

import itertools

import torch

from ..clock import TimeUp, check_deadline, clock
from .common import LiveGPUs, as_gpus, expand_items, pick_best, presence_counts, slots_from_packs

# Relative improvement a swap must bring (guards against float noise loops).
REL_TOL = 1e-12

# The constructions' loops read the clock every this many steps (a step is a few kernels,
# ~0.1 ms on a quiet core at one row: a check costs < 1 % and ends within ~2 ms of work).
DEADLINE_EVERY = 16


def lpt_pack(item_w: torch.Tensor, item_e: torch.Tensor, num_packs: int, num_experts: int,
             nodup: bool = False, deadline: float | None = None) -> torch.Tensor:
    """Heaviest item first into the lightest pack with room (lowest index on ties).

    item_w: [X, n], item_e: [X, n]. With ``nodup`` a pack already holding the expert is
    avoided unless every open pack holds it (then :func:`repair_duplicates` fixes it).
    Returns pack: [X, n]. ``deadline`` (a :func:`clock` value): raise :class:`TimeUp` once
    past it, checked every DEADLINE_EVERY items (n steps: 8192 at one GPU of 8192 slots).
    """
    X, n = item_w.shape
    dev = item_w.device
    per_pack = n // num_packs
    order = torch.sort(item_w, dim=1, descending=True, stable=True).indices
    sw, se = item_w.gather(1, order), item_e.gather(1, order)
    load = torch.zeros(X, num_packs, dtype=item_w.dtype, device=dev)
    count = torch.zeros(X, num_packs, dtype=torch.int64, device=dev)
    big = float(item_w.sum(1).max()) + 1.0 if nodup else 0.0
    has = torch.zeros(X, num_experts * num_packs, dtype=torch.bool, device=dev) if nodup else None
    cols = torch.arange(num_packs, device=dev)
    ones = torch.ones(X, 1, dtype=torch.int64, device=dev)
    chosen = []
    for k in range(n):
        if k % DEADLINE_EVERY == 0:
            check_deadline(deadline)
        key = load.masked_fill(count >= per_pack, float("inf"))
        if nodup:
            held = has.gather(1, se[:, k:k + 1] * num_packs + cols)               # [X, P]
            key = key + held.to(key.dtype) * big
        pack = key.argmin(1, keepdim=True)
        chosen.append(pack)
        load.scatter_add_(1, pack, sw[:, k:k + 1])
        count.scatter_add_(1, pack, ones)
        if nodup:
            has.scatter_(1, se[:, k:k + 1] * num_packs + pack, True)
    return torch.empty_like(order).scatter_(1, order, torch.cat(chosen, 1))


def kk_pack(item_w: torch.Tensor, num_packs: int, deadline: float | None = None) -> torch.Tensor:
    """Balanced largest differencing method (exactly n / packs items per pack).

    item_w: [X, n]. Returns pack: [X, n]. S - 1 merge steps, each a few kernels over all
    rows; every pack receives one item of each sorted chunk of ``packs`` items.
    ``deadline`` (a :func:`clock` value): raise :class:`TimeUp` once past it, checked every
    DEADLINE_EVERY merges (S - 1 of them: 8191 at one GPU of 8192 slots, seconds of work).
    """
    X, n = item_w.shape
    P = num_packs
    S = n // P
    dev = item_w.device
    order = torch.sort(item_w, dim=1, descending=True, stable=True).indices
    sums = item_w.gather(1, order).view(X, S, P).clone()                    # [X, S, P]
    pos = torch.arange(n, device=dev)
    part = (pos // P).expand(X, n).contiguous()                               # partition of each sorted item
    sub = (pos % P).expand(X, n).contiguous()                                 # subset within it
    alive = torch.ones(X, S, dtype=torch.bool, device=dev)
    rows = torch.arange(X, device=dev)
    for k in range(S - 1):
        if k % DEADLINE_EVERY == 0:
            check_deadline(deadline)
        spread = (sums.max(-1).values - sums.min(-1).values).masked_fill(~alive, -1.0)
        ab = spread.topk(2, dim=1).indices                                    # [X, 2]
        a, b = ab[:, 0], ab[:, 1]
        sa, sb = sums[rows, a], sums[rows, b]                                 # [X, P]
        oa = sa.argsort(dim=1, descending=True, stable=True)
        ob = sb.argsort(dim=1, stable=True)
        map_b = torch.empty_like(ob).scatter_(1, ob, oa)                      # b's subset -> a's subset
        sums[rows, a] = sa.scatter_add(1, oa, sb.gather(1, ob))
        alive[rows, b] = False
        in_b = part == b.unsqueeze(1)
        sub = torch.where(in_b, map_b.gather(1, sub), sub)
        part = torch.where(in_b, a.unsqueeze(1), part)
    return torch.empty_like(sub).scatter_(1, order, sub)


def round_robin_pack(item_w: torch.Tensor, num_packs: int) -> torch.Tensor:
    """Items sorted heaviest first (replicas of one expert stay adjacent), item k to pack
    k mod P: duplicate-free whenever every count is <= packs. Returns pack: [X, n]."""
    X, n = item_w.shape
    order = torch.sort(item_w, dim=1, descending=True, stable=True).indices
    k = (torch.arange(n, device=item_w.device) % num_packs).expand(X, n)
    return torch.empty_like(order).scatter_(1, order, k.contiguous())


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
    return tuple(slots_from_packs(gpu, item_w, item_e))


def realisable_counts(w: torch.Tensor, cnt: torch.Tensor, caps: torch.Tensor) -> torch.Tensor:
    """Counts cnt [X, E] (each at most Q) moved until they admit a duplicate-free layout on
    GPUs of ``caps`` [Q] slots; realisable counts are left as they are (w: [X, E] loads).

    Gale-Ryser: such a layout exists iff for every k the k largest GPUs' slots sum to at most
    sum_e min(c_e, k). At a row's first violated k, one replica of the expert with c_e > k
    whose replicas stay lightest becomes one of the expert with c_e < k and the heaviest
    replica: the sum at k rises by one and no other level's falls. With identical slot
    counts every count vector capped at Q is realisable (round robin lays it out). With
    slot counts 1, 3, 3 and three experts, each expert needs a replica on both 3-slot GPUs."""
    Q = int(caps.numel())
    need = torch.sort(caps, descending=True).values.cumsum(0)                           # [Q] slots of the k largest
    k = torch.arange(1, Q + 1, device=cnt.device)                                       # [Q]
    cnt = cnt.clone()
    for _ in range(int(caps.sum())):
        short = need.unsqueeze(0) > torch.minimum(cnt.unsqueeze(2), k.view(1, 1, Q)).sum(1)   # [X, Q]
        x = short.any(1)
        if not bool(x.any()):
            break
        level = k[short.to(torch.int8).argmax(1)].unsqueeze(1)                           # [X, 1] first violated k
        after = (w / (cnt - 1).clamp_min(1)).masked_fill(cnt <= level, float("inf"))
        src = after.argmin(1, keepdim=True)                                              # donor: c_e > k
        dst = (w / cnt.clamp_min(1)).masked_fill(cnt >= level, -1.0).argmax(1, keepdim=True)   # taker: c_e < k
        one = x.to(torch.int64).unsqueeze(1)
        cnt.scatter_add_(1, src, -one).scatter_add_(1, dst, one)
    return cnt


def ryser_layout(item_w: torch.Tensor, item_e: torch.Tensor, gpus: LiveGPUs,
                 num_experts: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Slot layout (w, e) [X, R] with no expert twice on a GPU, of the replica items
    (expert-major, :func:`~.common.expand_items`) of realisable counts (Ryser's construction:
    GPUs by slot count, largest first, each takes the experts with the most replicas still
    to place, heavier replicas first on ties). Loops over the GPUs, batched over rows."""
    X, R = item_e.shape
    dev = item_e.device
    left = torch.zeros(X, num_experts, dtype=torch.int64, device=dev).scatter_add_(1, item_e, torch.ones_like(item_e))
    per = torch.zeros(X, num_experts, dtype=item_w.dtype, device=dev).scatter_(1, item_e, item_w)
    by_per = torch.argsort(-per, dim=1, stable=True)               # heavier replica first on ties
    e = torch.zeros(X, R, dtype=torch.int64, device=dev)
    for g in torch.argsort(gpus.caps, descending=True, stable=True).tolist():
        c = int(gpus.caps[g])
        take = by_per.gather(1, torch.argsort(-left.gather(1, by_per), dim=1, stable=True))[:, :c]
        left.scatter_add_(1, take, -torch.ones_like(take))
        e[:, gpus.grid[g, :c]] = take
    return per.gather(1, e), e


def swap_where(t: torch.Tensor, qa: torch.Tensor, qb: torch.Tensor, ok: torch.Tensor) -> torch.Tensor:
    """Exchange t[x, qa[x, k]] and t[x, qb[x, k]] where ok[x] (or ok[x, k]). qa, qb: [X, K]."""
    va, vb = t.gather(1, qa), t.gather(1, qb)
    m = ok if ok.dim() == 2 else ok.unsqueeze(1)
    t = t.scatter(1, qa, torch.where(m, vb, va))
    return t.scatter(1, qb, torch.where(m, va, vb))


# Swap moves look at no more than this many slots of a pack (1-1 moves) and this many for
# 2-2 moves (pairs of them): a pack of S slots would otherwise cost S**2 (1-1) and S**4
# (2-2) candidates, gigabytes at S = 125. Packs with more slots offer their distinct
# replicas (identical replicas of one expert are interchangeable), spread over the
# weights when there are more than that. Packs within the limit are searched in full.
SWAP_SLOTS = 48
SWAP_PAIR_SLOTS = 12


def swap_candidates(w: torch.Tensor, e: torch.Tensor, packs, limit: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(offsets [X, Q, C], valid [X, Q, C]): the slots (offsets inside their GPU) a swap
    move considers, C = min(S, limit). w, e: [X, R] slot weights and experts; packs: a
    view or a number of identical packs.

    S <= limit: every slot. Otherwise the distinct (weight, expert) slots of each GPU,
    every one when there are at most ``limit``, else ``limit`` of them evenly spread over
    the GPU's weight order; ``valid`` is False for padding.
    """
    X, R = w.shape
    g = as_gpus(packs, R, w.device)
    num_packs, S = g.Q, g.S
    dev = w.device
    if S <= limit:
        return torch.arange(S, device=dev).expand(X, num_packs, S), g.valid.expand(X, num_packs, S)
    wp, ep = g.cells(w), g.cells(e)
    if not g.uniform:             # padding sorts last and is never distinct
        ep = ep.masked_fill(~g.valid, torch.iinfo(ep.dtype).max)        # no host sync
    # Sort by expert then weight: copies of one expert become adjacent; keep the first of each run.
    order = torch.sort(ep, dim=2, stable=True).indices
    es, ws = ep.gather(2, order), wp.gather(2, order)
    first = torch.ones_like(es, dtype=torch.bool)
    first[..., 1:] = (es[..., 1:] != es[..., :-1]) | (ws[..., 1:] != ws[..., :-1])
    if not g.uniform:
        first &= g.valid.expand_as(first).gather(2, order)
    distinct = first.sum(2, keepdim=True)                                            # [X, P, 1]
    # Distinct slots in weight order: non-distinct ones sort last (weight -inf).
    key = torch.where(first, ws, torch.full_like(ws, -float("inf")))
    by_w = key.sort(dim=2, descending=True, stable=True).indices                      # [X, P, S]
    j = torch.arange(limit, device=dev)
    pick = torch.where(distinct > limit, (j * distinct) // limit, j.expand_as(distinct.expand(X, num_packs, limit)))
    pick = pick.clamp_max(S - 1)
    offs = order.gather(2, by_w.gather(2, pick))
    valid = j.view(1, 1, -1) < distinct
    return offs, valid


class _Swapper:
    """Swap moves that lower the slowest GPU's time, for slot layouts [X, R] on a view.

    Each GPU offers at most :data:`SWAP_SLOTS` candidate slots (1-1) and
    :data:`SWAP_PAIR_SLOTS` (2-2) (:func:`swap_candidates`), so memory and time per move
    grow linearly in the slots. A swap that moves load ``d`` from GPU h to GPU g costs the
    larger of their new times; :meth:`LiveGPUs.scale` is the identity at speed 1.
    """

    def __init__(self, gpus: LiveGPUs, num_experts: int, nodup: bool):
        self.g, self.E, self.nodup = gpus, num_experts, nodup
        C2 = min(gpus.S, SWAP_PAIR_SLOTS)
        pa, pb = zip(*itertools.combinations(range(C2), 2)) if C2 > 1 else ((), ())
        self.pa = torch.tensor(pa, dtype=torch.int64, device=gpus.speed.device)
        self.pb = torch.tensor(pb, dtype=torch.int64, device=gpus.speed.device)

    def _slowest(self, w):
        """(loads [X, Q], times [X, Q], slowest time th [X], its GPU h [X], its load lh [X])."""
        loads = self.g.loads(w)
        t = self.g.scale(loads, torch.arange(self.g.Q, device=w.device))
        th, h = t.max(1)
        return loads, t, th, h, (th if self.g.unit else loads.gather(1, h.unsqueeze(1)).squeeze(1))

    def _slots(self, w, e, packs, limit):
        """(slots [X, K, C] global slot ids, valid [X, K, C]) of the candidates of ``packs`` [X, K]."""
        offs, valid = swap_candidates(w, e, self.g, limit)
        C = offs.shape[2]
        idx = packs.unsqueeze(2).expand(-1, -1, C)
        return self.g.grid[packs].gather(2, offs.gather(1, idx)), valid.gather(1, idx)

    def _on(self, cnt, X, gpus, experts):
        """Whether each of ``experts`` already sits on the matching one of ``gpus`` (same
        shape, broadcast), from presence counts cnt [X, Q*E]."""
        idx = gpus * self.E + experts
        idx = idx.expand(X, *idx.shape[1:])
        return cnt.gather(1, idx.reshape(X, -1)).view_as(idx) > 0

    def step11(self, w, e):
        """The slowest GPU's best 1-1 swap against any slot; returns (w, e, improved [X])."""
        X, R = w.shape
        g = self.g
        loads, _, th, h, lh = self._slowest(w)
        qh, vh = self._slots(w, e, h.unsqueeze(1), SWAP_SLOTS)
        qh, vh = qh.squeeze(1), vh.squeeze(1)                                        # [X, C]
        C = qh.shape[1]
        d = w.gather(1, qh).unsqueeze(2) - w.unsqueeze(1)                            # [X, C, R]
        lg = loads[:, g.gpu_of]                                                      # [X, R]
        cost = torch.maximum(g.scale(lh.view(X, 1, 1) - d, h.view(X, 1, 1)),
                             g.scale(lg.unsqueeze(1) + d, g.gpu_of.view(1, 1, R)))
        bad = (d <= 0) | (g.gpu_of.unsqueeze(0) == h.unsqueeze(1)).unsqueeze(1) | ~vh.unsqueeze(2)
        if self.nodup:
            cnt = presence_counts(e, self.E, g).view(X, -1)                          # [X, Q*E]
            bad |= self._on(cnt, X, g.gpu_of.view(1, 1, R), e.gather(1, qh).unsqueeze(2))   # e_i already on g
            bad |= self._on(cnt, X, h.view(X, 1), e).unsqueeze(1)                           # e_j already on h
        cost = cost.masked_fill(bad, float("inf")).view(X, -1)
        best_cost, best = cost.min(1)
        ok = best_cost < th * (1 - REL_TOL)
        qa = qh.gather(1, (best // R).unsqueeze(1))
        qb = (best % R).unsqueeze(1)
        return swap_where(w, qa, qb, ok), swap_where(e, qa, qb, ok), ok

    def step_pairs(self, w, e, pair_swaps: int = 4, shift: int = 0):
        """Pair the i-th slowest GPU with the (i + shift)-th fastest-finishing (mod the pairs;
        disjoint pairs) and apply, in every pair at once, its best 1-1 swap (or 2-2, in the
        ``pair_swaps`` slowest pairs) if it lowers the pair's max time.

        Moving d from h (load lh, speed sh) to l gives max((lh - d) / sh, (ll + d) / sl) =
        (lh + ll) / (sh + sl) + max((t - d) / sh, (d - t) / sl) with t = (lh sl - ll sh) / (sh + sl):
        the moves are ranked by the second term (|t - d| at equal speeds)."""
        X, R = w.shape
        g = self.g
        k = g.Q // 2
        loads, t_gpu, _, _, _ = self._slowest(w)
        order = t_gpu.argsort(dim=1, descending=True, stable=True)
        hi, lo = order[:, :k], order[:, g.Q - k:].flip(1)                           # [X, k]
        if shift % max(k, 1):
            lo = lo.roll(-(shift % k), dims=1)
        sh, vh = self._slots(w, e, hi, SWAP_SLOTS)                                   # [X, k, C]
        sl, vl = self._slots(w, e, lo, SWAP_SLOTS)
        C = sh.shape[2]
        wh, wl = w.gather(1, sh.reshape(X, -1)).view(X, k, C), w.gather(1, sl.reshape(X, -1)).view(X, k, C)
        lh, ll = loads.gather(1, hi).unsqueeze(-1), loads.gather(1, lo).unsqueeze(-1)  # [X, k, 1]
        if g.unit:
            t = (lh - ll) / 2                                                         # [X, k, 1]
        else:
            s_h, s_l = g.speed.to(w.dtype)[hi].unsqueeze(-1), g.speed.to(w.dtype)[lo].unsqueeze(-1)
            t = (lh * s_l - ll * s_h) / (s_h + s_l)

        def gap(x, n):   # x = t - d [X, n, ...]: the pair's time above (lh + ll) / (sh + sl)
            if g.unit:
                return x.abs_()
            return torch.maximum(x / s_h[:, :n, :, None], -x / s_l[:, :n, :, None])

        if self.nodup:
            cnt = presence_counts(e, self.E, g).view(X, -1)
        d1 = wh.unsqueeze(3) - wl.unsqueeze(2)                                       # [X, k, C, C]
        bad1 = (d1 <= 0) | ~vh.unsqueeze(3) | ~vl.unsqueeze(2)
        if self.nodup:
            bad1 = (bad1 | self._on(cnt, X, lo.unsqueeze(2), e.gather(1, sh.reshape(X, -1)).view(X, k, C)).unsqueeze(3)
                    | self._on(cnt, X, hi.unsqueeze(2), e.gather(1, sl.reshape(X, -1)).view(X, k, C)).unsqueeze(2))
        c1 = gap(t.unsqueeze(-1) - d1, k).masked_fill_(bad1, float("inf")).view(X, k, C * C)
        npair = self.pa.numel()
        k2 = min(k, pair_swaps)
        best_cost, best = c1.min(2)                                                  # [X, k]
        a1 = a2 = sh.gather(2, (best // C).unsqueeze(2)).squeeze(2)                 # 1-1: slot a on hi,
        b1 = b2 = sl.gather(2, (best % C).unsqueeze(2)).squeeze(2)                  # slot b on lo (repeated)
        if npair and k2:
            # 2-2 only for the slowest k2 pairs: they decide the max, and it keeps the step cheap
            ph_s, ph_v = self._slots(w, e, hi[:, :k2], SWAP_PAIR_SLOTS)              # [X, k2, C2]
            pl_s, pl_v = self._slots(w, e, lo[:, :k2], SWAP_PAIR_SLOTS)
            wh2, wl2 = w.gather(1, ph_s.reshape(X, -1)).view_as(ph_s), w.gather(1, pl_s.reshape(X, -1)).view_as(pl_s)
            ph = wh2[:, :, self.pa] + wh2[:, :, self.pb]                             # [X, k2, np]
            pl = wl2[:, :, self.pa] + wl2[:, :, self.pb]
            d2 = ph.unsqueeze(3) - pl.unsqueeze(2)                                   # [X, k2, np, np]
            okh = ph_v[:, :, self.pa] & ph_v[:, :, self.pb]
            okl = pl_v[:, :, self.pa] & pl_v[:, :, self.pb]
            bad2 = (d2 <= 0) | ~okh.unsqueeze(3) | ~okl.unsqueeze(2)
            if self.nodup:
                eh2, el2 = e.gather(1, ph_s.reshape(X, -1)).view_as(ph_s), e.gather(1, pl_s.reshape(X, -1)).view_as(pl_s)
                h2_on_l = self._on(cnt, X, lo[:, :k2].unsqueeze(2), eh2)
                l2_on_h = self._on(cnt, X, hi[:, :k2].unsqueeze(2), el2)
                fh = h2_on_l[:, :, self.pa] | h2_on_l[:, :, self.pb]
                fl = l2_on_h[:, :, self.pa] | l2_on_h[:, :, self.pb]
                bad2 = bad2 | fh.unsqueeze(3) | fl.unsqueeze(2)
            c2 = gap(t[:, :k2].unsqueeze(-1) - d2, k2).masked_fill_(bad2, float("inf"))
            cost2, best2 = c2.view(X, k2, npair * npair).min(2)                      # [X, k2]
            use2 = cost2 < best_cost[:, :k2]
            i, j = best2 // npair, best2 % npair
            slot = lambda s_, q: s_.gather(2, q[i if s_ is ph_s else j].unsqueeze(2)).squeeze(2)  # noqa: E731
            h_a, h_b = slot(ph_s, self.pa), slot(ph_s, self.pb)
            l_a, l_b = slot(pl_s, self.pa), slot(pl_s, self.pb)
            pad = lambda new, old: torch.cat([torch.where(use2, new, old[:, :k2]), old[:, k2:]], 1)  # noqa: E731
            a1, a2, b1, b2 = pad(h_a, a1), pad(h_b, a2), pad(l_a, b1), pad(l_b, b2)
            best_cost = pad(cost2, best_cost)
        # the slow GPU's time falls by t / sh - best_cost (t at equal speeds)
        ok = best_cost < g.scale(t.squeeze(-1), hi) - t_gpu.gather(1, hi) * REL_TOL
        okk = ok.repeat(1, 2)
        qa, qb = torch.cat([a1, a2], 1), torch.cat([b1, b2], 1)                      # [X, 2k]
        return swap_where(w, qa, qb, okk), swap_where(e, qa, qb, okk), ok.any(1)

    def step22(self, w, e, partners: int = 4):
        """One best 2-2 swap per row: pairs from the slowest GPU against pairs on the
        ``partners`` fastest-finishing GPUs (the likeliest partners; keeps the step cheap)."""
        X, R = w.shape
        g = self.g
        npair = self.pa.numel()
        if npair == 0:
            return w, e, torch.zeros(X, dtype=torch.bool, device=w.device)
        loads, t_gpu, th, h, lh = self._slowest(w)
        k = min(partners, g.Q)
        light = t_gpu.topk(k, dim=1, largest=False).indices                          # [X, k]
        sh, vh = self._slots(w, e, h.unsqueeze(1), SWAP_PAIR_SLOTS)                  # [X, 1, C2]
        sg, vg = self._slots(w, e, light, SWAP_PAIR_SLOTS)                           # [X, k, C2]
        qh1, qh2 = sh[:, 0, self.pa], sh[:, 0, self.pb]                              # [X, np] slot ids
        qg1, qg2 = sg[:, :, self.pa].reshape(X, -1), sg[:, :, self.pb].reshape(X, -1)  # [X, k*np]
        okh = vh[:, 0, self.pa] & vh[:, 0, self.pb]
        okg = (vg[:, :, self.pa] & vg[:, :, self.pb]).reshape(X, -1)
        gc = light.repeat_interleave(npair, dim=1)                                   # [X, k*np]
        d = (w.gather(1, qh1) + w.gather(1, qh2)).unsqueeze(2) - (w.gather(1, qg1) + w.gather(1, qg2)).unsqueeze(1)
        lg = loads.gather(1, gc)
        cost = torch.maximum(g.scale(lh.view(X, 1, 1) - d, h.view(X, 1, 1)),
                             g.scale(lg.unsqueeze(1) + d, gc.unsqueeze(1)))
        bad = (d <= 0) | (gc == h.unsqueeze(1)).unsqueeze(1) | ~okh.unsqueeze(2) | ~okg.unsqueeze(1)
        if self.nodup:
            cnt = presence_counts(e, self.E, g).view(X, -1)
            for q in (qh1, qh2):                              # pair from h must be new on g
                bad |= self._on(cnt, X, gc.unsqueeze(1), e.gather(1, q).unsqueeze(2))
            for q in (qg1, qg2):                              # pair from g must be new on h
                bad |= self._on(cnt, X, h.view(X, 1), e.gather(1, q)).unsqueeze(1)
        cost = cost.masked_fill(bad, float("inf")).view(X, -1)
        best_cost, best = cost.min(1)
        ok = best_cost < th * (1 - REL_TOL)
        i = (best // (k * npair)).unsqueeze(1)
        j = (best % (k * npair)).unsqueeze(1)
        qa = torch.cat([qh1.gather(1, i), qh2.gather(1, i)], 1)
        qb = torch.cat([qg1.gather(1, j), qg2.gather(1, j)], 1)
        return swap_where(w, qa, qb, ok), swap_where(e, qa, qb, ok), ok


def local_search(w_slots: torch.Tensor, e_slots: torch.Tensor, packs, num_experts: int = 0, *,
                 nodup: bool = False, max_steps: int = 200, two_swaps: bool = True,
                 block: int = 8, partners: int = 4, pair_swaps: int = 2, timed: bool = False,
                 deadline: float | None = None) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Swap local search on slot layouts (never increases any row's max GPU time).

    w_slots, e_slots: [X, R]; packs: a :class:`~.common.LiveGPUs` view or a number of
    identical packs; num_experts: needed under ``nodup``. Blocks of up to ``block`` paired
    steps (every slow GPU against its mirror fast GPU at once: 1-1 swaps, and 2-2 in the
    ``pair_swaps`` slowest pairs), each block closed by the slowest GPU's best 1-1 swap
    against all GPUs and its best 2-2 swap against the ``partners`` fastest-finishing ones.
    Stops when a block improved no row or after ``max_steps`` paired steps (one host sync
    per block), or once ``deadline`` (a :func:`clock` value) has passed, checked before
    every step (a block can take long: many slots, or a busy machine). ``timed`` (a real
    cluster; implied by any view but identical GPUs): step i pairs the slow GPUs with the fast ones shifted by i, so a pair without
    a useful swap is not offered again and again (hot experts).
    Returns the improved layout and the number of paired steps run.
    """
    X, R = w_slots.shape
    g = as_gpus(packs, R, w_slots.device)
    # one slot per GPU: a swap only exchanges two GPUs' loads, which at equal speeds changes no max
    if (g.S == 1 and g.unit) or g.Q == 1 or max_steps <= 0 or X == 0:
        return w_slots, e_slots, 0
    timed = timed or not (g.uniform and g.unit)
    sw = _Swapper(g, num_experts, nodup)
    steps = 0

    def late() -> bool:
        return deadline is not None and clock() >= deadline

    while steps < max_steps and not late():
        any_ok = torch.zeros(X, dtype=torch.bool, device=w_slots.device)
        for _ in range(min(block, max_steps - steps)):
            if late():
                return w_slots, e_slots, steps
            w_slots, e_slots, ok = sw.step_pairs(w_slots, e_slots, pair_swaps, steps if timed else 0)
            any_ok |= ok
            steps += 1
        if late():
            break
        w_slots, e_slots, ok = sw.step11(w_slots, e_slots)
        any_ok |= ok
        if two_swaps and not late():
            w_slots, e_slots, ok = sw.step22(w_slots, e_slots, partners)
            any_ok |= ok
        if not bool(any_ok.any()):
            break
    return w_slots, e_slots, steps


def repair_duplicates(w_slots: torch.Tensor, e_slots: torch.Tensor, packs, num_experts: int,
                      max_steps: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Swap away same-GPU duplicates, one per row per step, choosing the swap that keeps
    the two GPUs' max time lowest and creates no new duplicate. w_slots, e_slots: [X, R];
    packs: a view or a number of identical packs."""
    X, R = w_slots.shape
    dev = w_slots.device
    g = as_gpus(packs, R, dev)
    gpu_of, E = g.gpu_of, num_experts
    rows = torch.arange(X, device=dev)
    for _ in range(max_steps if max_steps is not None else R):
        cnt = presence_counts(e_slots, E, g).view(X, -1)
        dup = cnt.gather(1, gpu_of * E + e_slots) > 1                                # [X, R]
        has = dup.any(1)
        if not bool(has.any()):
            break
        q = dup.to(torch.int8).argmax(1)                                             # first duplicate slot
        h = gpu_of[q]
        eq, wq = e_slots[rows, q], w_slots[rows, q]
        loads = g.loads(w_slots)
        lh = loads[rows, h]
        lg = loads[:, gpu_of]                                                        # [X, R]
        cost = torch.maximum(g.scale(lh.unsqueeze(1) - wq.unsqueeze(1) + w_slots, h.unsqueeze(1)),
                             g.scale(lg - w_slots + wq.unsqueeze(1), gpu_of.unsqueeze(0)))
        bad = gpu_of.unsqueeze(0) == h.unsqueeze(1)
        bad |= cnt.gather(1, gpu_of * E + eq.unsqueeze(1)) > 0                       # eq already on g
        bad |= cnt.view(X, g.Q, E)[rows, h].gather(1, e_slots) > 0                   # e_j already on h
        cost = cost.masked_fill(bad, float("inf"))
        best_cost, j = cost.min(1)
        ok = has & torch.isfinite(best_cost)
        if not bool(ok.any()):
            break
        w_slots = swap_where(w_slots, q.unsqueeze(1), j.unsqueeze(1), ok)
        e_slots = swap_where(e_slots, q.unsqueeze(1), j.unsqueeze(1), ok)
    return w_slots, e_slots


def repair_swaps(per: torch.Tensor, e: torch.Tensor, gpus: LiveGPUs, num_experts: int) -> tuple[torch.Tensor, int]:
    """:func:`repair_duplicates` of e [X, R] from each expert's per-replica load per [X, E]
    (float64): (e, rows still holding a duplicate)."""
    _, e = repair_duplicates(per.gather(1, e), e, gpus, num_experts)
    return e, int(duplicated(e, gpus, num_experts).sum())


def duplicated(e: torch.Tensor, gpus: LiveGPUs, num_experts: int) -> torch.Tensor:
    """[X] bool: the rows of e [X, R] with an expert twice on one GPU."""
    return presence_counts(e, num_experts, gpus).flatten(1).amax(1) > 1


def pack_counts(weight: torch.Tensor, logcnt: torch.Tensor, packs, *, nodup: bool = False,
                starts: tuple[str, ...] = ("kk", "lpt"), max_steps: int = 200, two_swaps: bool = True,
                search_dtype: torch.dtype = torch.float32, timed: bool = False,
                deadline: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Best packing found for fixed counts: every start, local search, best kept per row.

    weight: [X, E], logcnt: [X, E]; packs: a view or a number of identical packs. On
    identical GPUs the starts are "kk", "lpt" and "rr" (round robin); on any other view, or
    ``timed`` (a real cluster, even where its live GPUs are identical: they are then planned
    as on any real cluster), "kk" and "lpt" are :func:`lpt_time_pack` and "rr" is
    :func:`ryser_layout` (counts must be realisable: :func:`realisable_counts`), and the
    search rotates its pairs (:func:`local_search`). The search runs in ``search_dtype`` (float32:
    half the memory traffic); the objective that picks the best start is recomputed in float64.
    ``deadline`` cuts the local search short, and the "kk" and "lpt" constructions too
    (their loops have S - 1 and R steps): a start cut there is replaced by the round-robin
    layout (a few kernels whatever the shape), so a plan always comes back.
    Returns e_slots: [X, R] (local expert per slot) and max time: [X] float64 (inf for a
    row left with duplicates under ``nodup``; the "rr" start never leaves one).
    """
    X, E = weight.shape
    item_e, item_w = expand_items(weight, logcnt)
    g = as_gpus(packs, item_e.shape[1], weight.device)
    if timed or not (g.uniform and g.unit):   # what the starts become on a real cluster
        starts = ["ryser" if s == "rr" else "lpt_time" for s in starts]
    cands_w, cands_e = [], []
    for s in dict.fromkeys(starts):
        if s == "ryser":
            ws, es = ryser_layout(item_w, item_e, g, E)
        else:
            try:
                if s == "kk":
                    pack = kk_pack(item_w, g.Q, deadline=deadline)
                elif s == "lpt":
                    pack = lpt_pack(item_w, item_e, g.Q, E, nodup=nodup, deadline=deadline)
                elif s == "lpt_time":
                    pack = lpt_time_pack(item_w, g)
                else:
                    pack = round_robin_pack(item_w, g.Q)
            except TimeUp:
                pack = round_robin_pack(item_w, g.Q)
            ws, es = slots_from_packs(pack, item_w, item_e)
        cands_w.append(ws)
        cands_e.append(es)
    C = len(cands_w)
    w_all, e_all = torch.cat(cands_w, 0).to(search_dtype), torch.cat(cands_e, 0)   # [C*X, R]
    if nodup:
        w_all, e_all = repair_duplicates(w_all, e_all, g, E)
    w_all, e_all, _ = local_search(w_all, e_all, g, E, nodup=nodup, max_steps=max_steps,
                                   two_swaps=two_swaps, timed=timed, deadline=deadline)
    per = (weight.to(torch.float64) / logcnt.to(torch.float64)).repeat(C, 1)
    obj = g.times(per.gather(1, e_all)).max(1).values
    if nodup:
        obj = obj.masked_fill(duplicated(e_all, g, E), float("inf"))
    R = e_all.shape[1]
    e_best, obj_best, _ = pick_best(obj.view(C, X), e_all.view(C, X, R), obj.view(C, X))
    return e_best, obj_best
