"""Packing replicas onto GPUs for fixed replica counts, exactly S slots per GPU.

Constructions (each batched over rows, loops only over construction *steps*):
- :func:`lpt_pack`: largest first into the lightest open pack (DeepSeek's rule), with an
  optional no-duplicates mask;
- :func:`kk_pack`: balanced largest differencing (Karmarkar-Karp for exactly S items per
  pack: S partial partitions of one item per pack, repeatedly merging the two with the
  largest spread, heaviest subset with lightest);
- :func:`round_robin_pack`: a no-duplicates layout that always exists (c_e <= packs).

Improvement: :func:`local_search` (1-1 and 2-2 swaps between the heaviest pack and every
other pack, cardinality preserving, optionally duplicate-free) and
:func:`repair_duplicates`. :func:`pack_counts` runs several starts and keeps the best.
"""
from __future__ import annotations

import itertools

import torch

from ..clock import TimeUp, check_deadline, clock
from ..scoring import duplicates_per_row
from .common import expand_items, pack_loads, pick_best, presence_counts, slots_from_packs

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


def _swap(t: torch.Tensor, qa: torch.Tensor, qb: torch.Tensor, ok: torch.Tensor) -> torch.Tensor:
    """Exchange t[x, qa[x, k]] and t[x, qb[x, k]] where ok[x]. qa, qb: [X, K]."""
    va, vb = t.gather(1, qa), t.gather(1, qb)
    m = ok.unsqueeze(1)
    t = t.scatter(1, qa, torch.where(m, vb, va))
    return t.scatter(1, qb, torch.where(m, va, vb))


# Swap moves look at no more than this many slots of a pack (1-1 moves) and this many for
# 2-2 moves (pairs of them): a pack of S slots would otherwise cost S**2 (1-1) and S**4
# (2-2) candidates, gigabytes at S = 125. Packs with more slots offer their distinct
# replicas (identical replicas of one expert are interchangeable), spread over the
# weights when there are more than that. Packs within the limit are searched in full.
SWAP_SLOTS = 48
SWAP_PAIR_SLOTS = 12


def swap_candidates(w: torch.Tensor, e: torch.Tensor, num_packs: int, limit: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(offsets [X, P, C], valid [X, P, C]): the slots (offsets inside their pack) a swap
    move considers, C = min(S, limit). w, e: [X, R] slot weights and experts.

    S <= limit: every slot. Otherwise the distinct (weight, expert) slots of each pack,
    every one when there are at most ``limit``, else ``limit`` of them evenly spread over
    the pack's weight order; ``valid`` is False for padding.
    """
    X, R = w.shape
    S = R // num_packs
    dev = w.device
    if S <= limit:
        offs = torch.arange(S, device=dev).expand(X, num_packs, S)
        return offs, torch.ones(X, num_packs, S, dtype=torch.bool, device=dev)
    wp, ep = w.view(X, num_packs, S), e.view(X, num_packs, S)
    # Sort by expert then weight: copies of one expert become adjacent; keep the first of each run.
    order = torch.sort(ep, dim=2, stable=True).indices
    es, ws = ep.gather(2, order), wp.gather(2, order)
    first = torch.ones_like(es, dtype=torch.bool)
    first[..., 1:] = (es[..., 1:] != es[..., :-1]) | (ws[..., 1:] != ws[..., :-1])
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
    """Swap moves between the heaviest pack and others for a slot layout [X, R].

    Each pack offers at most :data:`SWAP_SLOTS` candidate slots (1-1) and
    :data:`SWAP_PAIR_SLOTS` (2-2) (:func:`swap_candidates`), so memory and time per move
    grow linearly in the slots.
    """

    def __init__(self, num_packs: int, slots_per_pack: int, num_experts: int, nodup: bool, device):
        self.P, self.S, self.E, self.nodup = num_packs, slots_per_pack, num_experts, nodup
        R = num_packs * slots_per_pack
        self.gpu_of = torch.arange(R, device=device) // slots_per_pack               # [R]
        self.C1 = min(slots_per_pack, SWAP_SLOTS)
        self.C2 = min(slots_per_pack, SWAP_PAIR_SLOTS)
        pa, pb = zip(*itertools.combinations(range(self.C2), 2)) if self.C2 > 1 else ((), ())
        self.pa = torch.tensor(pa, dtype=torch.int64, device=device)
        self.pb = torch.tensor(pb, dtype=torch.int64, device=device)

    def _heaviest(self, w):
        loads = pack_loads(w, self.P)
        lh, h = loads.max(1)
        return loads, lh, h

    def _slots(self, w, e, packs, limit):
        """(slots [X, K, C] global slot ids, valid [X, K, C]) of the candidates of ``packs`` [X, K]."""
        offs, valid = swap_candidates(w, e, self.P, limit)
        C = offs.shape[2]
        idx = packs.unsqueeze(2).expand(-1, -1, C)
        return packs.unsqueeze(2) * self.S + offs.gather(1, idx), valid.gather(1, idx)

    def step11(self, w, e):
        """One best 1-1 swap per row; returns (w, e, improved [X])."""
        X, R = w.shape
        loads, lh, h = self._heaviest(w)
        qh, vh = self._slots(w, e, h.unsqueeze(1), SWAP_SLOTS)
        qh, vh = qh.squeeze(1), vh.squeeze(1)                                        # [X, C]
        C = qh.shape[1]
        wi = w.gather(1, qh)
        d = wi.unsqueeze(2) - w.unsqueeze(1)                                         # [X, C, R]
        lg = loads.repeat_interleave(self.S, dim=1)                                  # [X, R]
        cost = torch.maximum(lh.view(X, 1, 1) - d, lg.unsqueeze(1) + d)
        bad = (d <= 0) | (self.gpu_of.unsqueeze(0) == h.unsqueeze(1)).unsqueeze(1) | ~vh.unsqueeze(2)
        if self.nodup:
            cnt = presence_counts(e, self.E, self.P).view(X, -1)                     # [X, P*E]
            ei = e.gather(1, qh)                                                     # [X, C]
            idx = (self.gpu_of.view(1, 1, R) * self.E + ei.unsqueeze(2)).view(X, -1)
            bad |= cnt.gather(1, idx).view(X, C, R) > 0
            cnt_h = cnt.view(X, self.P, self.E)[torch.arange(X, device=w.device), h]  # [X, E]
            bad |= (cnt_h.gather(1, e) > 0).unsqueeze(1)
        cost = cost.masked_fill(bad, float("inf")).view(X, -1)
        best_cost, best = cost.min(1)
        ok = best_cost < lh * (1 - REL_TOL)
        qa = qh.gather(1, (best // R).unsqueeze(1))
        qb = (best % R).unsqueeze(1)
        return _swap(w, qa, qb, ok), _swap(e, qa, qb, ok), ok

    def step_pairs(self, w, e, pair_swaps: int = 4):
        """Pair the i-th heaviest pack with the i-th lightest (disjoint pairs) and apply, in
        every pair at once, its best 1-1 swap (or 2-2, in the ``pair_swaps`` heaviest
        pairs) if it lowers the pair's max."""
        X, R = w.shape
        P = self.P
        k = P // 2
        loads = pack_loads(w, P)
        order = loads.argsort(dim=1, descending=True, stable=True)
        hi, lo = order[:, :k], order[:, P - k:].flip(1)                             # [X, k]
        sh, vh = self._slots(w, e, hi, SWAP_SLOTS)                                   # [X, k, C]
        sl, vl = self._slots(w, e, lo, SWAP_SLOTS)
        C = sh.shape[2]
        qh, ql = sh.reshape(X, -1), sl.reshape(X, -1)
        wh, wl = w.gather(1, qh).view(X, k, C), w.gather(1, ql).view(X, k, C)
        lh, ll = loads.gather(1, hi).unsqueeze(-1), loads.gather(1, lo).unsqueeze(-1)  # [X, k, 1]
        if self.nodup:
            cnt = presence_counts(e, self.E, P).view(X, -1)
            eh, el = e.gather(1, qh).view(X, k, C), e.gather(1, ql).view(X, k, C)
            h_on_l = cnt.gather(1, (lo.unsqueeze(2) * self.E + eh).view(X, -1)).view(X, k, C) > 0
            l_on_h = cnt.gather(1, (hi.unsqueeze(2) * self.E + el).view(X, -1)).view(X, k, C) > 0
        # max(lh - d, ll + d) = (lh + ll)/2 + |t - d| with t = (lh - ll)/2: minimise |t - d|
        t = (lh - ll) / 2                                                             # [X, k, 1]
        d1 = wh.unsqueeze(3) - wl.unsqueeze(2)                                       # [X, k, C, C]
        bad1 = (d1 <= 0) | ~vh.unsqueeze(3) | ~vl.unsqueeze(2)
        if self.nodup:
            bad1 = bad1 | h_on_l.unsqueeze(3) | l_on_h.unsqueeze(2)
        c1 = (t.unsqueeze(-1) - d1).abs_().masked_fill_(bad1, float("inf")).view(X, k, C * C)
        npair = self.pa.numel()
        k2 = min(k, pair_swaps)
        best_cost, best = c1.min(2)                                                  # [X, k]
        a1 = a2 = sh.gather(2, (best // C).unsqueeze(2)).squeeze(2)                 # 1-1: slot a on hi,
        b1 = b2 = sl.gather(2, (best % C).unsqueeze(2)).squeeze(2)                  # slot b on lo (repeated)
        if npair and k2:
            # 2-2 only for the heaviest k2 pairs: they decide the max, and it keeps the step cheap
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
                h2_on_l = cnt.gather(1, (lo[:, :k2].unsqueeze(2) * self.E + eh2).view(X, -1)).view_as(eh2) > 0
                l2_on_h = cnt.gather(1, (hi[:, :k2].unsqueeze(2) * self.E + el2).view(X, -1)).view_as(el2) > 0
                fh = h2_on_l[:, :, self.pa] | h2_on_l[:, :, self.pb]
                fl = l2_on_h[:, :, self.pa] | l2_on_h[:, :, self.pb]
                bad2 = bad2 | fh.unsqueeze(3) | fl.unsqueeze(2)
            c2 = (t[:, :k2].unsqueeze(-1) - d2).abs_().masked_fill_(bad2, float("inf"))
            cost2, best2 = c2.view(X, k2, npair * npair).min(2)                      # [X, k2]
            use2 = cost2 < best_cost[:, :k2]
            i, j = best2 // npair, best2 % npair
            slot = lambda s_, q: s_.gather(2, q[i if s_ is ph_s else j].unsqueeze(2)).squeeze(2)  # noqa: E731
            h_a, h_b = slot(ph_s, self.pa), slot(ph_s, self.pb)
            l_a, l_b = slot(pl_s, self.pa), slot(pl_s, self.pb)
            pad = lambda new, old: torch.cat([torch.where(use2, new, old[:, :k2]), old[:, k2:]], 1)  # noqa: E731
            a1, a2, b1, b2 = pad(h_a, a1), pad(h_b, a2), pad(l_a, b1), pad(l_b, b2)
            best_cost = pad(cost2, best_cost)
        ok = best_cost < t.squeeze(-1) - lh.squeeze(-1) * REL_TOL
        qa = torch.cat([a1, a2], 1)                                                  # [X, 2k]
        qb = torch.cat([b1, b2], 1)
        okk = ok.repeat(1, 2)
        va, vb = w.gather(1, qa), w.gather(1, qb)
        ea, eb = e.gather(1, qa), e.gather(1, qb)
        w = w.scatter(1, qa, torch.where(okk, vb, va)).scatter(1, qb, torch.where(okk, va, vb))
        e = e.scatter(1, qa, torch.where(okk, eb, ea)).scatter(1, qb, torch.where(okk, ea, eb))
        return w, e, ok.any(1)

    def step22(self, w, e, partners: int = 4):
        """One best 2-2 swap per row: pairs from the heaviest pack against pairs on the
        ``partners`` lightest packs (the likeliest partners; keeps the step cheap)."""
        X, R = w.shape
        npair = self.pa.numel()
        if npair == 0:
            return w, e, torch.zeros(X, dtype=torch.bool, device=w.device)
        loads, lh, h = self._heaviest(w)
        k = min(partners, self.P)
        light = loads.topk(k, dim=1, largest=False).indices                          # [X, k]
        sh, vh = self._slots(w, e, h.unsqueeze(1), SWAP_PAIR_SLOTS)                  # [X, 1, C2]
        sg, vg = self._slots(w, e, light, SWAP_PAIR_SLOTS)                           # [X, k, C2]
        qh1, qh2 = sh[:, 0, self.pa], sh[:, 0, self.pb]                              # [X, np] slot ids
        qg1, qg2 = sg[:, :, self.pa].reshape(X, -1), sg[:, :, self.pb].reshape(X, -1)  # [X, k*np]
        okh = vh[:, 0, self.pa] & vh[:, 0, self.pb]
        okg = (vg[:, :, self.pa] & vg[:, :, self.pb]).reshape(X, -1)
        gc = light.repeat_interleave(npair, dim=1)                                   # [X, k*np]
        d = (w.gather(1, qh1) + w.gather(1, qh2)).unsqueeze(2) - (w.gather(1, qg1) + w.gather(1, qg2)).unsqueeze(1)
        lg = loads.gather(1, gc)
        cost = torch.maximum(lh.view(X, 1, 1) - d, lg.unsqueeze(1) + d)
        bad = (d <= 0) | (gc == h.unsqueeze(1)).unsqueeze(1) | ~okh.unsqueeze(2) | ~okg.unsqueeze(1)
        if self.nodup:
            cnt = presence_counts(e, self.E, self.P).view(X, -1)
            gE = (gc * self.E).unsqueeze(1)                                          # [X, 1, k*np]
            for q in (qh1, qh2):                              # pair from h must be new on g
                ei = e.gather(1, q)                                                  # [X, np]
                bad |= cnt.gather(1, (gE + ei.unsqueeze(2)).view(X, -1)).view_as(d) > 0
            cnt_h = cnt.view(X, self.P, self.E)[torch.arange(X, device=w.device), h]
            for q in (qg1, qg2):                              # pair from g must be new on h
                bad |= (cnt_h.gather(1, e.gather(1, q)) > 0).unsqueeze(1)
        cost = cost.masked_fill(bad, float("inf")).view(X, -1)
        best_cost, best = cost.min(1)
        ok = best_cost < lh * (1 - REL_TOL)
        i = (best // (k * npair)).unsqueeze(1)
        j = (best % (k * npair)).unsqueeze(1)
        qa = torch.cat([qh1.gather(1, i), qh2.gather(1, i)], 1)
        qb = torch.cat([qg1.gather(1, j), qg2.gather(1, j)], 1)
        return _swap(w, qa, qb, ok), _swap(e, qa, qb, ok), ok


def local_search(w_slots: torch.Tensor, e_slots: torch.Tensor, num_packs: int, num_experts: int, *,
                 nodup: bool = False, max_steps: int = 200, two_swaps: bool = True,
                 block: int = 8, partners: int = 4, pair_swaps: int = 2,
                 deadline: float | None = None) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Swap local search on slot layouts (never increases any row's max pack load).

    w_slots, e_slots: [X, R]. Blocks of up to ``block`` paired steps (every heavy pack
    against its mirror light pack at once: 1-1 swaps, and 2-2 in the ``pair_swaps``
    heaviest pairs), each block closed by the heaviest pack's best 1-1 swap against all
    packs and its best 2-2 swap against the ``partners`` lightest packs. Stops when a
    block improved no row or after ``max_steps`` paired steps (one host sync per block), or
    once ``deadline`` (a :func:`clock` value) has passed, checked before every step (a
    block can take long: many slots, or a busy machine).
    Returns the improved layout and the number of paired steps run.
    """
    X, R = w_slots.shape
    S = R // num_packs
    if S == 1 or num_packs == 1 or max_steps <= 0 or X == 0:
        return w_slots, e_slots, 0
    sw = _Swapper(num_packs, S, num_experts, nodup, w_slots.device)
    steps = 0

    def late() -> bool:
        return deadline is not None and clock() >= deadline

    while steps < max_steps and not late():
        any_ok = torch.zeros(X, dtype=torch.bool, device=w_slots.device)
        for _ in range(min(block, max_steps - steps)):
            if late():
                return w_slots, e_slots, steps
            w_slots, e_slots, ok = sw.step_pairs(w_slots, e_slots, pair_swaps)
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


def repair_duplicates(w_slots: torch.Tensor, e_slots: torch.Tensor, num_packs: int, num_experts: int,
                      max_steps: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Swap away same-pack duplicates, one per row per step, choosing the swap that keeps
    the two packs' max lowest and creates no new duplicate. w_slots, e_slots: [X, R]."""
    X, R = w_slots.shape
    S = R // num_packs
    dev = w_slots.device
    gpu_of = torch.arange(R, device=dev) // S
    rows = torch.arange(X, device=dev)
    for _ in range(max_steps if max_steps is not None else R):
        cnt = presence_counts(e_slots, num_experts, num_packs).view(X, -1)
        dup = cnt.gather(1, gpu_of * num_experts + e_slots) > 1                      # [X, R]
        has = dup.any(1)
        if not bool(has.any()):
            break
        q = dup.to(torch.int8).argmax(1)                                             # first duplicate slot
        h = gpu_of[q]
        eq, wq = e_slots[rows, q], w_slots[rows, q]
        loads = pack_loads(w_slots, num_packs)
        lh = loads[rows, h]
        lg = loads[:, gpu_of]                                                        # [X, R]
        cost = torch.maximum(lh.unsqueeze(1) - wq.unsqueeze(1) + w_slots, lg - w_slots + wq.unsqueeze(1))
        bad = gpu_of.unsqueeze(0) == h.unsqueeze(1)
        bad |= cnt.gather(1, gpu_of * num_experts + eq.unsqueeze(1)) > 0          # eq already on g
        bad |= cnt.view(X, num_packs, num_experts)[rows, h].gather(1, e_slots) > 0  # e_j already on h
        cost = cost.masked_fill(bad, float("inf"))
        best_cost, j = cost.min(1)
        ok = has & torch.isfinite(best_cost)
        if not bool(ok.any()):
            break
        w_slots = _swap(w_slots, q.unsqueeze(1), j.unsqueeze(1), ok)
        e_slots = _swap(e_slots, q.unsqueeze(1), j.unsqueeze(1), ok)
    return w_slots, e_slots


def pack_counts(weight: torch.Tensor, logcnt: torch.Tensor, num_packs: int, *, nodup: bool = False,
                starts: tuple[str, ...] = ("kk", "lpt"), max_steps: int = 200, two_swaps: bool = True,
                search_dtype: torch.dtype = torch.float32,
                deadline: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Best packing found for fixed counts: every start, local search, best kept per row.

    weight: [X, E], logcnt: [X, E]. The search runs in ``search_dtype`` (float32: half the
    memory traffic); the objective that picks the best start is recomputed in float64.
    ``deadline`` cuts the local search short, and the "kk" and "lpt" constructions too
    (their loops have S - 1 and R steps): a start cut there is replaced by the round-robin
    layout (a few kernels whatever the shape), so a plan always comes back.
    Returns e_slots: [X, R] (local expert per slot) and max_load: [X] float64 (inf for a
    row left with duplicates under ``nodup``; the "rr" start never leaves one).
    """
    X, E = weight.shape
    item_e, item_w = expand_items(weight, logcnt)
    cands_w, cands_e = [], []
    for s in starts:
        try:
            if s == "kk":
                pack = kk_pack(item_w, num_packs, deadline=deadline)
            elif s == "lpt":
                pack = lpt_pack(item_w, item_e, num_packs, E, nodup=nodup, deadline=deadline)
            elif s == "rr":
                pack = round_robin_pack(item_w, num_packs)
            else:
                raise ValueError(f"unknown start {s!r}")
        except TimeUp:
            pack = round_robin_pack(item_w, num_packs)
        ws, es = slots_from_packs(pack, item_w, item_e)
        cands_w.append(ws)
        cands_e.append(es)
    C = len(cands_w)
    w_all, e_all = torch.cat(cands_w, 0).to(search_dtype), torch.cat(cands_e, 0)   # [C*X, R]
    if nodup:
        w_all, e_all = repair_duplicates(w_all, e_all, num_packs, E)
    w_all, e_all, _ = local_search(w_all, e_all, num_packs, E, nodup=nodup, max_steps=max_steps,
                                   two_swaps=two_swaps, deadline=deadline)
    per = (weight.to(torch.float64) / logcnt.to(torch.float64)).repeat(C, 1)
    obj = pack_loads(per.gather(1, e_all), num_packs).max(1).values
    if nodup:
        obj = obj.masked_fill(duplicates_per_row(e_all, num_packs) > 0, float("inf"))
    R = e_all.shape[1]
    e_best, obj_best, _ = pick_best(obj.view(C, X), e_all.view(C, X, R), obj.view(C, X))
    return e_best, obj_best
